//! Statistics, report model and output sinks for `tlslab load`.
//!
//! This crate is for turning the engine's per-request results into numbers
//! and text:
//! - [`RequestRecord`]: what the load engine measured for one request (and,
//!   on a connection's first request, for its TCP connect and TLS handshake).
//! - [`Stats`]: HDR histograms per phase and counters, mergeable; and
//!   [`Collector`], a sharded set of them that many client tasks record into.
//! - [`LoadReport`]: the serde model of a finished run (`--json`), whose
//!   field names are a documented contract (the README section "JSON schemas"), and its human
//!   table ([`LoadReport::render_table`]).
//! - [`interval`]: 95 % confidence intervals and the stopping rule of
//!   adaptive experiments.
//! - [`CsvLog`]: the `--log FILE` sink, one CSV row per request, written by
//!   its own thread behind a bounded channel so no row is lost.
//!
//! - [`study`]: the results document of `tlslab experiment`; [`html`]: the
//!   self-contained HTML (inline SVG charts) and Markdown reports of it;
//!   [`capacity`]: `tlslab plan`'s capacity model (M/M/c and seed 004's
//!   300/(1−ρ)).
//! - [`distributed`]: an agent's `--out` directory of a sharded run and
//!   the exact merge of many agents' outputs (`tlslab merge`).
//!
//! It is not for generating load or talking to the network (that is
//! `tlslab-load`), and sinks here never reach back into the engine: data
//! flows engine → record → stats/sinks → report, one way.

pub mod capacity;
mod csv_log;
pub mod distributed;
pub mod html;
mod html_pq;
pub mod inputs;
pub mod interval;
mod model;
pub mod quic;
mod record;
mod stats;
pub mod study;
mod sweep;
mod table;

pub use csv_log::{CSV_COLUMNS, CsvLog, CsvSink};
pub use model::{
    Backoff, ClientCpu, ConfigEcho, CpuUsage, CryptoOp, CryptoPerHandshake, EarlyDataCounts,
    Ecommerce, HandshakeKindSummary, HandshakeSummary, Http, KindCounts, Latency, LoadReport,
    OpenLoop, Phase, Replay, Requests, Reuse, SATURATION_THRESHOLD, SCHEMA_VERSION, Throughput,
    Window,
};
pub use record::{
    EarlyData, HandshakeKind, HandshakeRecord, HandshakeTcp, HandshakeWire, RequestRecord,
};
pub use stats::{Collector, KindTotals, MAX_US, PhaseStats, Stats};
pub use sweep::{SweepReport, SweepSeries, SweepStep};

/// Errors from report sinks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CSV log file could not be created or written.
    #[error(
        "request log {path}: {source}; check that the directory exists, is writable and has space"
    )]
    Log {
        /// The log file.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The CSV writer thread stopped abnormally.
    #[error("request log {path}: the writer thread stopped unexpectedly; the log is incomplete")]
    LogWriterLost {
        /// The log file.
        path: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
