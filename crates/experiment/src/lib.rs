//! Experiments that drive tlslab's engines together.
//!
//! This crate is for orchestration: starting the embedded server, pinning it
//! and the load engine to separate CPUs, running a matrix of cells and
//! turning the per-cell reports into the tables a person reads: [`lab`],
//! the "what TLS costs on this machine" matrix, and [`breakdown`], seed
//! 001's no-op-and-Amdahl cost table; and [`overload`], seed 002's
//! collapse under overload and session-aware admission control; and
//! [`cluster`], seed 000's cluster experiment (Fig. 9): session-aware
//! dispatch against blind dispatch and shared session state, over TCP
//! and QUIC; and
//! [`probe_path`], the embedded server on a packet-level path's server end
//! that `tlslab probe --path` probes.
//!
//! [`study`] is `tlslab experiment`: a declared TOML matrix, or a built-in
//! study per seed paper (`seed000-reuse`, `seed001-breakdown`,
//! `seed002-overload`, `seed003-table2`, `seed004-handshake`; and
//! `seed000-cluster` and `seed000-cluster-h3` (over QUIC), through
//! [`cluster`]; and `quic-vs-tcp`, HTTP/3 over
//! QUIC against TCP+TLS 1.3), run with
//! interleaved repeats into one resumable results document
//! (`tlslab_report::study::StudyResults`) with the paper's figures beside
//! today's.
//!
//! It is not for measuring anything itself: every number comes from the
//! server engine (server-observed CPU) or the load engine (client-observed
//! throughput and latency), and the statistics from `tlslab-report`.

pub mod breakdown;
pub mod cluster;
pub mod lab;
pub mod nginx;
pub mod overload;
pub mod pin;
pub mod plan_check;
pub mod probe_path;
mod rig;
pub mod study;

/// Errors of an experiment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The embedded server failed to start or stop.
    #[error("embedded server: {0}")]
    Server(#[from] tlslab_server::Error),
    /// A load run failed.
    #[error("load: {0}")]
    Load(#[from] tlslab_load::Error),
    /// Key material could not be generated.
    #[error("certificates: {0}")]
    Crypto(#[from] tlslab_crypto::Error),
    /// The embedded dispatcher failed to start.
    #[error("dispatcher: {0}")]
    Dispatch(#[from] tlslab_dispatch::Error),
    /// The cluster experiment could not set up or run a part (a peer
    /// missing or failing to start, a file it could not write); the
    /// message names the part and the fix.
    #[error("cluster: {0}")]
    Cluster(String),
    /// A cell produced no successful request, so no figure can be given.
    #[error("cell '{cell}' completed no request ({errors}); the lab cannot report it")]
    EmptyCell {
        /// The cell.
        cell: String,
        /// The errors the load engine saw.
        errors: String,
    },
    /// The packet-level WAN path (`--path`) could not be set up.
    #[error("path: {0}")]
    Path(#[from] tlslab_path::Error),
    /// The nginx reference could not be started, stopped or read.
    #[error("nginx: {0}")]
    Nginx(String),
}

/// Fails, showing `text`, unless it contains every one of `parts`.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_has(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "no {p:?} in:\n{text}");
    }
}

/// `items` as text, `sep` between them (`2,4,8`).
pub(crate) fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    let v: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    v.join(sep)
}

/// The 1-minute load average, from /proc/loadavg.
pub(crate) fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Error {
    /// [`Error::EmptyCell`] of `cell`, with the `errors` the run saw.
    pub(crate) fn empty(cell: impl Into<String>, errors: impl Into<String>) -> Error {
        Error::EmptyCell {
            cell: cell.into(),
            errors: errors.into(),
        }
    }
}
