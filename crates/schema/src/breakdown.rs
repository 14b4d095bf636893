//! The report of `tlslab breakdown --json` (also a seed001 study's
//! `engine_report`): a row per configuration and the Amdahl cost table.
//! Field names are documented in docs/schema.md ("`tlslab breakdown
//! --json FILE`").

use serde::{Deserialize, Serialize};

use crate::float::{nan, or_inf, or_nan};
use crate::placement::Placement;

/// The request pattern of every cell.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "reuse")]
pub enum Workload {
    /// A new connection and a full handshake per request.
    NewConn,
    /// A new connection per request; this share (0–1) of them resumed.
    Reuse(f64),
    /// Connections kept alive.
    KeepAlive,
}

impl Workload {
    /// A phrase saying what the workload is.
    pub fn describe(self) -> String {
        match self {
            Workload::NewConn => "new connection and full handshake per request".into(),
            Workload::Reuse(r) => format!("new connection per request, {:.0}% resumed", r * 100.0),
            Workload::KeepAlive => "keep-alive connections".into(),
        }
    }
}

/// Whether an estimate converged, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Convergence {
    /// The 95 % half-width is at most the target.
    Converged,
    /// Not yet, and more samples at this variance would get there: the
    /// time cap stopped the run.
    CapHit,
    /// The variance is too large to converge in reasonable time.
    Variance,
    /// Fewer than two samples: no interval.
    TooFewSamples,
}

impl Convergence {
    /// The JSON and table word.
    pub fn name(self) -> &'static str {
        match self {
            Convergence::Converged => "converged",
            Convergence::CapHit => "cap_hit",
            Convergence::Variance => "variance",
            Convergence::TooFewSamples => "too_few_samples",
        }
    }
}

/// One configuration of the breakdown, as the report records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Configuration {
    /// Its label, after seed 001 where one exists.
    pub name: String,
    /// The stages replaced by no-ops (`sig`, `kx`, …); `None` is plain
    /// HTTP (no TLS at all), an empty list the TLS baseline.
    pub ablation: Option<Vec<String>>,
    /// Whether this row is a single stage whose Amdahl fraction is part of
    /// the cost table.
    pub stage: Option<String>,
}

/// The measurements of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The configuration.
    pub config: Configuration,
    /// Server CPU per request in µs for each repeat (server-observed).
    pub cpu_us: Vec<f64>,
    /// Client-observed requests/s for each repeat.
    pub requests_per_s: Vec<f64>,
    /// Median server CPU per request, µs.
    #[serde(deserialize_with = "or_nan")]
    pub cpu_us_median: f64,
    /// Median client-observed requests/s.
    #[serde(deserialize_with = "or_nan")]
    pub requests_per_s_median: f64,
    /// (max − min) / median of `cpu_us`.
    #[serde(deserialize_with = "or_nan")]
    pub spread: f64,
    /// cost(baseline) / cost(this configuration).
    #[serde(deserialize_with = "or_nan")]
    pub speedup: f64,
    /// Amdahl: 1 − 1/speedup, the share of the baseline cost this
    /// configuration removed.
    #[serde(deserialize_with = "or_nan")]
    pub fraction_removed: f64,
    /// Returns true if and only if the spread of this row (or of the
    /// baseline) is larger than the effect measured, so the fraction is
    /// not distinguishable from noise.
    pub noisy: bool,
    /// Returns true if and only if the client was ≥ 90 % busy in some repeat.
    pub client_saturated: bool,
    /// In how many of this row's cells the client was ≥ 90 % busy.
    pub client_saturated_cells: usize,
    /// Median share of the server's one pinned CPU that the server used
    /// (server CPU time ÷ wall time of the cell): near 1 means the server
    /// was the bottleneck.
    #[serde(deserialize_with = "or_nan")]
    pub server_busy_median: f64,
    /// Each round's `1 − cost / cost(adjacent baseline)` (paired ratios).
    pub paired_fractions: Vec<f64>,
    /// 95 % half-width of `fraction_removed` (the mean of the paired
    /// fractions); infinite with fewer than two rounds.
    #[serde(deserialize_with = "or_inf")]
    pub fraction_ci95: f64,
}

/// One line of the cost table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// The stage (`sig`, `kx`, …), `other TLS`, `TLS protocol` or `non-TLS`.
    pub stage: String,
    /// Its share of the baseline server CPU per request, 0–1 (mean of the
    /// paired per-round shares).
    #[serde(deserialize_with = "or_nan")]
    pub fraction: f64,
    /// 95 % half-width of `fraction` (infinite with fewer than two rounds).
    #[serde(deserialize_with = "or_inf")]
    pub ci95: f64,
    /// Whether the interval contains 0: the share is within noise of 0.
    pub noisy: bool,
    /// The stopping rule's verdict: `converged`, `cap_hit` (more rounds
    /// would have narrowed it), `variance` (too variable to converge in
    /// reasonable time) or `too_few_samples`.
    pub status: Convergence,
    /// Rounds the current variance needs for the target half-width.
    pub rounds_needed: Option<usize>,
    /// The crypto meter's direct attribution: server time inside the
    /// stage's operations per request ÷ server CPU per request, in the
    /// baseline cells; `None` where the meter cannot isolate the stage
    /// (`mac`: the AEAD is timed as one operation) and for derived rows.
    pub meter_fraction: Option<f64>,
    /// 95 % half-width of `meter_fraction`.
    pub meter_ci95: Option<f64>,
    /// Whether the two methods disagree beyond both intervals.
    pub disagrees: Option<bool>,
}

/// The result of a breakdown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakdownReport {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// `tcp` (HTTP/1.1 over TLS) or `quic` (HTTP/3). Absent before
    /// `schema_version` 4 (read as empty: TCP, the only transport then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub transport: String,
    /// The workload.
    pub workload: Workload,
    /// Response body size in bytes.
    pub file_size: u64,
    /// TLS version (`TLSv1.2`, `TLSv1.3`).
    pub version: String,
    /// Certificate key type.
    pub key: String,
    /// Seconds per cell.
    pub cell_s: f64,
    /// Clients per cell.
    pub clients: usize,
    /// The minimum number of rounds (`--repeats`).
    pub repeats: usize,
    /// Rounds run: each configuration ran this many times.
    pub rounds: usize,
    /// The time cap, seconds (`--max-time`).
    pub max_time_s: f64,
    /// The target 95 % half-width, as a fraction of the baseline.
    pub target_ci95: f64,
    /// Wall-clock seconds the rounds took.
    #[serde(deserialize_with = "or_nan")]
    pub elapsed_s: f64,
    /// Whether every named stage converged.
    pub converged: bool,
    /// Why the run stopped: `converged` or `time_cap`.
    pub stop_reason: String,
    /// (max − min) / median of all baseline cells: how far the baseline
    /// drifted over the run (paired ratios cancel it out).
    #[serde(deserialize_with = "or_nan")]
    pub baseline_drift: f64,
    /// Where server and client ran.
    pub placement: Placement,
    /// Every configuration.
    pub rows: Vec<Row>,
    /// The Amdahl cost table: each stage, other TLS, TLS protocol, and
    /// non-TLS (TCP) or `QUIC transport + HTTP/3` (QUIC).
    pub shares: Vec<Share>,
    /// The crypto meter's own cost per recorded operation, in ns, measured
    /// at the start of this run (client and server always meter).
    #[serde(deserialize_with = "or_nan")]
    pub meter_overhead_ns: f64,
    /// Median over all pairs of the server CPU's busy share (both servers'
    /// worker CPU ÷ the window; server-observed).
    /// Absent before `schema_version` 3 (read as NaN).
    #[serde(default = "nan", deserialize_with = "or_nan")]
    pub server_cpu_busy: f64,
    /// Median over all pairs of the client CPU's busy share (both load
    /// engines' CPU ÷ the window; client-observed).
    /// Absent before `schema_version` 3 (read as NaN).
    #[serde(default = "nan", deserialize_with = "or_nan")]
    pub client_cpu_busy: f64,
    /// Which side was saturated: `server` (server CPU ≥ 85 % busy), `client`
    /// (client CPU ≥ 85 % busy, server not), or `neither` (both waited for
    /// a CPU the machine's other load held).
    /// Absent before `schema_version` 3 (read as empty).
    #[serde(default)]
    pub bottleneck: String,
}

impl BreakdownReport {
    /// The row whose configuration's name starts with `name`.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.config.name.starts_with(name))
    }

    /// The cost-table share of `stage`.
    pub fn share(&self, stage: &str) -> Option<&Share> {
        self.shares.iter().find(|s| s.stage == stage)
    }
}

/// `tlslab breakdown --transport both --json`: the two tables and what
/// makes up their difference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakdownPair {
    /// The breakdown over TCP (HTTP/1.1 over TLS).
    pub tcp: BreakdownReport,
    /// The breakdown over QUIC (HTTP/3).
    pub quic: BreakdownReport,
    /// QUIC against TCP, stage by stage.
    pub difference: Difference,
}

/// Where QUIC's extra server CPU per request goes: each table's shares
/// turned into µs of its own baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// The TCP baseline's median server CPU per request, µs.
    #[serde(deserialize_with = "or_nan")]
    pub tcp_cpu_us: f64,
    /// The QUIC baseline's, µs.
    #[serde(deserialize_with = "or_nan")]
    pub quic_cpu_us: f64,
    /// `quic_cpu_us` ÷ `tcp_cpu_us`.
    #[serde(deserialize_with = "or_nan")]
    pub quic_over_tcp: f64,
    /// `quic_cpu_us` − `tcp_cpu_us`: the extra CPU to explain.
    #[serde(deserialize_with = "or_nan")]
    pub extra_us: f64,
    /// Every row of either table, in µs of its baseline; the rows sum
    /// to the two baselines, so the `delta_us` sum to `extra_us`.
    pub stages: Vec<StageCost>,
    /// QUIC's own stages: packet protection, header protection and key
    /// schedule, µs.
    #[serde(deserialize_with = "or_nan")]
    pub quic_only_us: f64,
    /// The remainder's growth: QUIC transport + HTTP/3 − TCP's non-TLS, µs.
    #[serde(deserialize_with = "or_nan")]
    pub remainder_growth_us: f64,
    /// `quic_only_us` + `remainder_growth_us`, µs: what QUIC adds by the
    /// issue's reckoning (the other rows' deltas, TCP's record cipher
    /// among them, are in `stages`).
    #[serde(deserialize_with = "or_nan")]
    pub explained_us: f64,
    /// `explained_us` ÷ `extra_us`.
    #[serde(deserialize_with = "or_nan")]
    pub explained_fraction: f64,
}

/// One row of the difference: a stage's µs per request over each
/// transport (0 where the transport has no such stage).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    /// The stage, as the tables name it.
    pub stage: String,
    /// µs per request over TCP.
    #[serde(deserialize_with = "or_nan")]
    pub tcp_us: f64,
    /// µs per request over QUIC.
    #[serde(deserialize_with = "or_nan")]
    pub quic_us: f64,
    /// `quic_us` − `tcp_us`.
    #[serde(deserialize_with = "or_nan")]
    pub delta_us: f64,
}

/// The seed001 study's QUIC column: its `engine_report` is seed 001's
/// TCP breakdown (a [`BreakdownReport`]) with one more key, `quic`, the
/// `breakdown --transport both` pair (TCP+TLS 1.3 and QUIC with the same
/// key and group). A document written before the column existed has no
/// `quic` key and reads as `quic: None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuicColumn {
    /// TCP+TLS 1.3 and QUIC side by side, and their difference.
    #[serde(default)]
    pub quic: Option<BreakdownPair>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed001 study's `engine_report`: a breakdown report the current
    /// code wrote (`docs/results/full`, schema version 3).
    const FULL: &str = include_str!("../../../docs/results/full/seed001-breakdown/results.json");
    /// The quick run's, written at schema version 2.
    const QUICK: &str = include_str!("../../../docs/results/seed001-breakdown/results.json");

    fn engine_report(doc: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        v["engine_report"].clone()
    }

    #[test]
    fn a_written_breakdown_report_reads_back_and_writes_the_same_json() {
        let v = engine_report(FULL);
        let r: BreakdownReport = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(r.schema_version, 3);
        assert!(r.row("TLS (baseline)").is_some());
        assert!(r.share("sig").is_some_and(|s| s.fraction.is_finite()));
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
    }

    #[test]
    fn a_version_2_report_reads_with_its_missing_figures_not_a_number() {
        let r: BreakdownReport = serde_json::from_value(engine_report(QUICK)).unwrap();
        assert_eq!(r.schema_version, 2);
        assert!(r.server_cpu_busy.is_nan() && r.bottleneck.is_empty());
    }

    #[test]
    fn a_seed001_document_without_the_quic_column_reads_as_none() {
        let c: QuicColumn = serde_json::from_value(engine_report(FULL)).unwrap();
        assert_eq!(c.quic, None);
    }

    #[test]
    fn null_half_widths_read_as_infinite_and_write_as_null() {
        let v = engine_report(FULL);
        let mut share = v["shares"][0].clone();
        share["ci95"] = serde_json::Value::Null;
        let s: Share = serde_json::from_value(share.clone()).unwrap();
        assert_eq!(s.ci95, f64::INFINITY);
        assert_eq!(serde_json::to_value(&s).unwrap(), share);
    }
}
