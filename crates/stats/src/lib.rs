//! The statistics of a tlslab load run, apart from their rendering.
//!
//! This crate turns the load engine's per-request results into numbers:
//! - [`RequestRecord`]: what the load engine measured for one request (and,
//!   on a connection's first request, for its TCP connect and TLS handshake).
//! - [`Stats`]: HDR histograms per phase and counters, mergeable; and
//!   [`Collector`], a sharded set of them that many client tasks record into.
//! - [`LoadReport`]: the serde model of a finished run (`--json`), whose
//!   field names are a documented contract (docs/schema.md); its types
//!   live in `tlslab-schema` and are re-exported here. [`build_report`]
//!   builds it from [`Stats`].
//! - [`interval`]: the statistics of a sample, written once: [`median`],
//!   [`quantile`], 95 % confidence intervals ([`Interval`]) and the
//!   stopping rule of adaptive experiments.
//! - [`CsvLog`]: the `--log FILE` sink, one CSV row per request, written by
//!   its own thread behind a bounded channel so no row is lost.
//! - [`hdr_log`]: the `--hdr-log FILE` sink, per-interval HdrHistogram
//!   logs of the total, handshake and first-byte latencies.
//! - [`distributed`]: an agent's `--out` directory of a sharded run and
//!   the exact merge of many agents' outputs (`tlslab merge`).
//!
//! It is what the engines link: no tables, HTML, SVG or charts (that is
//! `tlslab-report`, which renders what this crate computes), and nothing
//! that generates load or talks to the network (that is `tlslab-load`).
//! Data flows engine → record → stats/sinks → report, one way.

mod csv_log;
pub mod distributed;
pub mod hdr_log;
pub mod interval;
mod model;
mod record;
mod stats;

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
pub use tlslab_schema::counters::{Counters, KindTotals};

#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub mod fixtures;
