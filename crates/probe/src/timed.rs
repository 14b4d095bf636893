//! The probe's clock: a phase timed within its limit, in microseconds.

use std::time::{Duration, Instant};

use crate::failed::Failed;

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
