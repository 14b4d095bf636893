//! The tlslab load engine behind `tlslab load`: closed-loop HTTP/1.1 or
//! HTTP/2 clients over TLS (or plain TCP) with a session-reuse knob.
//!
//! This crate is for generating load and measuring it from the client's
//! side: [`run`] starts `clients` closed-loop clients on a tokio runtime of
//! its own, each making one connection at a time with `requests_per_conn`
//! requests on it. For every request it records TCP connect, TLS handshake
//! (kind, whether resumption was offered and accepted, version, suite,
//! group, bytes and round trips), time to first byte, transfer and total
//! time into a [`tlslab_stats::RequestRecord`], which flows one way into
//! statistics, the CSV log and the progress line. The share of connections
//! that resume is steered per client by [`ReusePlanner`].
//!
//! Besides the closed loop it runs an open loop ([`OpenLoop`]): arrivals
//! at a rate, each one request on a new connection, timed from its intended
//! start so that coordinated omission is avoided. Request paths come from
//! the URLs in turn or from a [`Workload`] model of `tlslab-workload`: the
//! SPECweb96 mix, e-commerce browsers (HTML first, then inline objects over
//! parallel connections) or an access-log [`Replay`]. [`sweep_series`]
//! repeats runs at growing client counts or rates until the knee.
//!
//! With [`LoadConfig::http2`] a client speaks HTTP/2 instead (ALPN `h2`
//! only; prior knowledge over `http://`), and with [`LoadConfig::http3`]
//! HTTP/3 over QUIC (a UDP socket per client); both keep up to
//! `max_concurrent_streams` streams in flight on a connection, and every
//! stream is one request and one record. The protocol is one seam of the
//! engine: every loop and workload runs over each of them, and so do the
//! user sessions of `tlslab overload` ([`run_users`]), each request of
//! which is one connection through that seam.
//!
//! It is not for serving (that is `tlslab-server`) nor for printing (that
//! is `tlslab-report`). Network failures are
//! never run errors: they are counted by kind in the report. Only a
//! configuration that cannot work is an [`Error`].

mod config;
mod conn;
mod engine;
mod error;
mod errors;
mod hdr;
mod io;
mod progress;
mod protocol;
pub mod quic;
mod reuse;
pub mod shard;
pub mod source;
mod sweep;
mod target;
mod tls;
mod validate;

pub use config::{
    Arrivals, DEFAULT_RETRY_BACKOFF, HdrLog, LoadConfig, OpenLoop, RETRY_BACKOFF_CAP, Replay,
    ResumeWith, Trust, Workload, retry_backoff_bound,
};
pub use protocol::{FloodKind, FloodPlan, Http2, Http3};

/// Runs the load described by `cfg` over its protocol: HTTP/1.1, HTTP/2
/// ([`LoadConfig::http2`]) or HTTP/3 over QUIC ([`LoadConfig::http3`]),
/// each behind the engine's one protocol seam, with the same loops,
/// workloads and report. See `engine::run` for what a run does and when
/// it fails.
pub fn run(cfg: &LoadConfig) -> Result<tlslab_stats::LoadReport, Error> {
    engine::run(cfg)
}

/// Checks `cfg` without running it (see `validate::validate`). A failure
/// is a usage error that names the fix.
pub fn validate(cfg: &LoadConfig) -> Result<(), Error> {
    validate::validate(cfg)
}
pub use engine::users::{Second, Users, UsersReport, run_users};
pub use error::Error;

/// The load client's pieces that other engines reuse (`tlslab-probe`):
/// its TLS client configuration, its round-trip counter and its error
/// classes, so that a probe and a load run measure the same way. Its
/// HTTP/3 client's pieces are in [`quic::http3`].
pub mod client {
    pub use crate::errors::classify;
    pub use crate::io::RoundTrips;

    /// The rustls client configuration `load` would use for `cfg` (trust,
    /// versions, algorithms, ALPN `http/1.1`), without a session store:
    /// the caller sets `resumption`.
    pub fn tls_config(cfg: &crate::LoadConfig) -> Result<rustls::ClientConfig, crate::Error> {
        crate::tls::base_config(cfg, &tlslab_crypto::meter::Meter::new())
    }
}
pub use reuse::ReusePlanner;
pub use sweep::{SweepOver, SweepPlan, is_knee, sweep_series};
pub use target::{Scheme, Target};
pub use tlslab_workload::think::ThinkTime;
