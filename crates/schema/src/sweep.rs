//! The report of `tlslab sweep --json`: latency against throughput, one
//! series per reuse value, each up to its knee. Field names are documented
//! in docs/schema.md ("`tlslab sweep --json`").

use serde::{Deserialize, Serialize};

/// One load run of a sweep, client-observed over its window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// Closed-loop clients (or the identity pool of an open loop).
    pub clients: usize,
    /// Open-loop arrival rate per second; `None` for a closed loop.
    pub rate: Option<f64>,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Completed requests.
    pub completed: u64,
    /// Requests that ended in an error.
    pub errors: u64,
    /// Fraction of handshakes the server resumed.
    pub reuse_achieved: f64,
    /// Median total latency, µs.
    pub total_p50_us: Option<u64>,
    /// 99th percentile of total latency, µs.
    pub total_p99_us: Option<u64>,
    /// Median full handshake, µs.
    pub handshake_full_p50_us: Option<u64>,
    /// Median resumed handshake, µs.
    pub handshake_resumed_p50_us: Option<u64>,
    /// Client CPU busy fraction (≥ 0.90: the step measured the client).
    pub client_busy: f64,
}

/// The steps at one reuse value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepSeries {
    /// Requested reuse fraction (0–1).
    pub reuse: f64,
    /// Index in `steps` of the knee: the last step whose throughput still
    /// grew by the knee gain; `None` if throughput grew at every step.
    pub knee: Option<usize>,
    /// Why the series stopped: `knee`, `errors` (most requests failed) or
    /// `steps` (the step limit).
    pub stopped: String,
    /// The runs, in order.
    pub steps: Vec<SweepStep>,
}

/// The whole sweep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Layout version, 1.
    pub schema_version: u32,
    /// What grew: `clients` or `rate`.
    pub over: String,
    /// Growth factor per step.
    pub factor: f64,
    /// Throughput growth below which the previous step is the knee.
    pub knee_gain: f64,
    /// Measured seconds per step.
    pub step_s: Option<f64>,
    /// One series per reuse value.
    pub series: Vec<SweepSeries>,
}
