//! Admission at the door of a TLS connection: the whole ClientHello is
//! read, classified and judged before rustls sees it, and a shed
//! connection is refused as `--shed-with` says.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::classify::{HelloKind, classify};
use super::gate::{Admission, InFlight, Verdict};
use crate::config::ShedWith;
use crate::{prefetch, tls};

/// The plaintext fatal alert `internal_error` sent by `--shed-with alert`.
pub(crate) const ALERT_INTERNAL_ERROR: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];

/// Reads the whole ClientHello after `first`, classifies it and asks
/// admission control. Admitted (or shed with a 503 later): the bytes read,
/// the in-flight guard and whether a 503 is due. Shed otherwise: the
/// failure reason `admission_shed`, after the alert if `--shed-with alert`.
pub(crate) async fn admit<T: AsyncRead + AsyncWrite + Unpin>(
    adm: &Arc<Admission>,
    io: &mut T,
    first: Vec<u8>,
) -> Result<(Vec<u8>, Option<(InFlight, bool)>), String> {
    let first = prefetch::read_hello(io, first)
        .await
        .map_err(|e| tls::failure_reason(&e))?;
    let kind = prefetch::with_hello(&first, |h| classify(h, &adm.resumable)).unwrap_or_else(|| {
        adm.unparsed();
        HelloKind::Full
    });
    match adm.decide(kind) {
        Verdict::Admit(g) => Ok((first, Some((g, false)))),
        Verdict::Shed(Some(g)) => Ok((first, Some((g, true)))),
        Verdict::Shed(None) => {
            if adm.settings.shed_with == ShedWith::Alert {
                let _ = io.write_all(&ALERT_INTERNAL_ERROR).await;
                let _ = io.shutdown().await;
            }
            Err("admission_shed".into())
        }
    }
}
