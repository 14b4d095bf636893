//! The probe's clock: a phase timed within its limit, in microseconds,
//! and the one phase every transport starts with, the DNS lookup.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::failed::Failed;
use crate::sample::{Phase, Sample};

/// `d` in whole microseconds (saturating).
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Runs `f` within `limit`: its value and how long it took, or a
/// `timeout` failure.
pub(crate) async fn timed<T, F>(limit: Duration, f: F) -> Result<(T, Duration), Failed>
where
    F: std::future::Future<Output = Result<T, Failed>>,
{
    let start = Instant::now();
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok((v, start.elapsed())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Failed(
            "timeout".into(),
            format!("no answer within {limit:?} (--timeout)"),
        )),
    }
}

/// Looks `host` up within `limit` and notes the time in `s.dns_us`; on a
/// failure, records it as the DNS phase's and returns `None`.
pub(crate) async fn resolve(
    s: &mut Sample,
    limit: Duration,
    host: &str,
    port: u16,
) -> Option<SocketAddr> {
    let lookup = timed(limit, async {
        let mut it = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| Failed("dns".into(), e.to_string()))?;
        it.next()
            .ok_or_else(|| Failed("dns".into(), "no address".into()))
    });
    match lookup.await {
        Ok((a, d)) => {
            s.dns_us = Some(micros(d));
            Some(a)
        }
        Err(Failed(k, m)) => {
            s.fail(Phase::Dns, k, m);
            None
        }
    }
}
