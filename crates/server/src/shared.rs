//! What every connection task of a server shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use tlslab_crypto::meter::AblationSet;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use crate::access_log::AccessLog;
use crate::admission::Admission;
use crate::content::Files;
use crate::idle::Conns;
use crate::prefetch::Prefetcher;
use crate::stats::Stats;

/// What every connection task shares.
pub(crate) struct Shared {
    pub(crate) stats: Arc<Stats>,
    pub(crate) files: Files,
    pub(crate) acceptor: Option<TlsAcceptor>,
    /// The TLS config accepts 0-RTT (`--max-early-data` > 0).
    pub(crate) early_data: bool,
    pub(crate) ablation: AblationSet,
    pub(crate) mismatch_warned: AtomicBool,
    pub(crate) handshake_timeout: Duration,
    pub(crate) conns: Arc<Semaphore>,
    /// Every connection past its handshake, for the idle timeouts and for
    /// making room at the connection limit.
    pub(crate) idle: Arc<Conns>,
    /// The metrics listener's own connection limit.
    pub(crate) metrics_conns: Arc<Semaphore>,
    /// `/dyn` work running on the blocking pool, at most `--threads` at once.
    pub(crate) burners: Arc<Semaphore>,
    pub(crate) auto: auto::Builder<TokioExecutor>,
    /// HTTP/1 only (ALPN http/1.1): hyper's own connection, not the
    /// version-detecting one, whose future has room for an HTTP/2
    /// connection too (see [`serve_http`](crate::http_conn::serve_http)).
    pub(crate) h1: http1::Builder,
    pub(crate) h2: auto::Builder<TokioExecutor>,
    pub(crate) registry: Registry,
    pub(crate) access_log: Option<Arc<AccessLog>>,
    /// The last connection number handed out (`$connection_id`).
    pub(crate) next_conn: AtomicU64,
    /// The pre-handshake fetch from a remote session cache.
    pub(crate) prefetch: Option<Prefetcher>,
    /// Admission control (`None`: off, and no ClientHello is read for it).
    pub(crate) admission: Option<Arc<Admission>>,
    /// `Alt-Svc` on every TCP response when the QUIC listener is on.
    pub(crate) alt_svc: std::sync::OnceLock<http::HeaderValue>,
}

/// Resolves once shutdown has been asked for (or the server is gone).
pub(crate) async fn stopping(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
