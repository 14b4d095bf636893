//! The rendering of tlslab's results: tables, HTML, SVG and charts.
//!
//! The numbers come from `tlslab-stats` (which the engines link); this
//! crate turns them into what a reader sees, and is linked by the binary
//! and the experiment runner, never by an engine:
//! - [`LoadReportText`] and [`SweepText`]: the human summary of a load run
//!   or a sweep, in the spirit of h2load and wrk; [`columns`] and
//!   [`header`] for aligned tables.
//! - [`study`]: the results document of `tlslab experiment`; [`html`]: the
//!   self-contained HTML (inline SVG charts) and Markdown reports of it.
//! - [`capacity`]: `tlslab plan`'s capacity model (M/M/c and seed 004's
//!   300/(1−ρ)) and its predicted percentiles.
//! - [`inputs`]: which kind of tlslab JSON a file `tlslab report` is given
//!   holds.
//!
//! The statistics' types are re-exported from `tlslab-stats` under their
//! old paths (`tlslab_report::LoadReport`, `tlslab_report::distributed`),
//! so the binary's code reads them from one place.

pub mod capacity;
pub mod html;
pub mod inputs;
/// The `transport` section of a load report over QUIC (`load --h3`).
pub mod quic {
    pub use tlslab_schema::transport::*;
}
pub mod study;
mod sweep;
mod table;

pub use sweep::{SweepReport, SweepSeries, SweepStep, SweepStepText, SweepText};
pub use table::LoadReportText;
pub use table::{columns, header};
// The statistics this crate renders, under their old paths too.
pub use tlslab_stats::{
    Backoff, CSV_COLUMNS, ClientCpu, Collector, ConfigEcho, Counters, CpuUsage, CryptoOp,
    CryptoPerHandshake, CsvLog, CsvSink, EarlyData, EarlyDataCounts, Ecommerce, Error,
    HandshakeKind, HandshakeKindSummary, HandshakeRecord, HandshakeSummary, HandshakeTcp,
    HandshakeWire, Http, Interval, KindCounts, KindTotals, Latency, LoadReport, MAX_US, OpenLoop,
    Phase, PhaseStats, Replay, RequestRecord, Requests, Result, Reuse, SATURATION_THRESHOLD,
    SCHEMA_VERSION, SocketBytes, Stats, Throughput, WIRE_COLUMNS, Window, build_report,
    distributed, empty_report, hdr_log, interval, median, quantile,
};
