//! Statistics, report model and output sinks for `tlslab load`.
//!
//! This crate is for turning the engine's per-request results into numbers
//! and text:
//! - [`RequestRecord`]: what the load engine measured for one request (and,
//!   on a connection's first request, for its TCP connect and TLS handshake).
//! - [`Stats`]: HDR histograms per phase and counters, mergeable; and
//!   [`Collector`], a sharded set of them that many client tasks record into.
//! - [`LoadReport`]: the serde model of a finished run (`--json`), whose
//!   field names are a documented contract (docs/schema.md); its types
//!   live in `tlslab-schema` and are re-exported here. This crate builds
//!   it from [`Stats`] ([`build_report`]) and renders its human table
//!   ([`LoadReportText`]).
//! - [`interval`]: the statistics of a sample, written once: [`median`],
//!   [`quantile`], 95 % confidence intervals ([`Interval`]) and the
//!   stopping rule of adaptive experiments.
//! - [`CsvLog`]: the `--log FILE` sink, one CSV row per request, written by
//!   its own thread behind a bounded channel so no row is lost.
//! - [`hdr_log`]: the `--hdr-log FILE` sink, per-interval HdrHistogram
//!   logs of the total, handshake and first-byte latencies.
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
pub mod hdr_log;
pub mod html;
pub mod inputs;
pub mod interval;
mod model;
/// The `transport` section of a load report over QUIC (`load --h3`).
pub mod quic {
    pub use tlslab_schema::transport::*;
}
mod record;
mod stats;
pub mod study;
mod sweep;
mod table;

pub use csv_log::{CSV_COLUMNS, CsvLog, CsvSink, Error, Result, WIRE_COLUMNS};
pub use interval::{Interval, median, quantile};
pub use model::{
    Backoff, ClientCpu, ConfigEcho, CpuUsage, CryptoOp, CryptoPerHandshake, EarlyDataCounts,
    Ecommerce, HandshakeKindSummary, HandshakeSummary, Http, KindCounts, Latency, LoadReport,
    OpenLoop, Phase, Replay, Requests, Reuse, SATURATION_THRESHOLD, SCHEMA_VERSION, SocketBytes,
    Throughput, Window, build_report, empty_report,
};
pub use record::{
    EarlyData, HandshakeKind, HandshakeRecord, HandshakeTcp, HandshakeWire, RequestRecord,
};
pub use stats::{Collector, MAX_US, PhaseStats, Stats};
pub use sweep::{SweepReport, SweepSeries, SweepStep, SweepStepText, SweepText};
pub use table::LoadReportText;
pub use table::{columns, header};
pub use tlslab_schema::counters::{Counters, KindTotals};
