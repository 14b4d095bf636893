//! The results document of `tlslab experiment`: every raw cell with its
//! command line, the environment, the paper's reference figures and the
//! paper-against-today comparisons. `tlslab report` reads it back.
//!
//! The field names are a documented contract (docs/schema.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::engine::*;

/// Schema version of [`StudyResults`].
pub const STUDY_SCHEMA_VERSION: u32 = 1;

/// The value of `kind` in every results document, so `report` can tell it
/// from a `load --json` or `sweep --json` file.
pub const STUDY_KIND: &str = "tlslab-experiment";

/// One experiment's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StudyResults {
    /// Always `tlslab-experiment`.
    pub kind: String,
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// The study's name (`seed000-reuse`, or the config file's `name`).
    pub study: String,
    /// A one-line title.
    pub title: String,
    /// Which seed paper it redoes, and where (empty for a user's matrix).
    pub seed: String,
    /// Whether this was the short `--quick` version.
    pub quick: bool,
    /// The `tlslab` command line that produced this document.
    pub command_line: Vec<String>,
    /// The machine and the software.
    pub environment: Environment,
    /// The matrix as declared (engine, factors, levels, repeats, cell
    /// duration, pinning), in its TOML form. A `Value`: each study's plan
    /// has its own shape (a breakdown's, an overload's, a declared
    /// matrix's), recorded for the reader and only compared whole, on
    /// `--resume`; nothing reads a field of it.
    pub matrix: serde_json::Value,
    /// Unix time in ms when the first cell started.
    pub started_unix_ms: u64,
    /// Unix time in ms when the last cell finished (0 while incomplete).
    pub finished_unix_ms: u64,
    /// Whether every cell of the matrix has run.
    pub complete: bool,
    /// Every cell, in run order (repeats interleaved).
    pub cells: Vec<Cell>,
    /// Paper against today, one row per figure compared.
    pub comparisons: Vec<Comparison>,
    /// Results of the engine beyond its cells: its own document (for
    /// example `breakdown`'s JSON), verbatim, or the per-cell path or probe
    /// reports. Written with sorted keys, as it always was.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted"
    )]
    pub engine_report: Option<EngineReport>,
    /// Model curves computed from the cells (for example seed 004's
    /// 300/(1−ρ) response time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<Curve>,
    /// What the study did not run or could not measure, and why, in plain
    /// sentences (for example a TLS 1.2 cell with a TLS 1.3-only group).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The figures the report draws, as the study declares them; empty (a
    /// declared matrix, or a document written before studies declared
    /// them): every figure its cells support.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charts: Vec<ChartKind>,
}

/// A figure of `tlslab report`, as a study names it in its document's
/// `charts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChartKind {
    /// Latency against throughput, per reuse level (seed 000 Figs. 4-5).
    LatencyThroughput,
    /// Throughput and server CPU against session reuse (seed 000 Figs. 4-5).
    Reuse,
    /// Handshake time percentiles per handshake kind.
    HandshakePercentiles,
    /// The breakdown's stage shares, and its QUIC column (seed 001).
    Breakdown,
    /// Cluster throughput against reuse, per dispatch policy (seed 000
    /// Fig. 9).
    Cluster,
    /// Goodput against offered load (seed 002).
    Goodput,
    /// Bytes and round trips per handshake of seed 004's post-quantum sweep.
    PostQuantum,
    /// quic-vs-tcp's server CPU per pattern and time to first byte against
    /// RTT.
    QuicVsTcp,
    /// seed003-table2's W and C against RTT.
    Table2,
    /// The document's model curves.
    Curves,
}

/// Where the experiment ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Environment {
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs this process may use.
    pub cores: usize,
    /// `uname -sr`-style kernel string from /proc/sys/kernel.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// tlslab's version.
    pub tlslab_version: String,
    /// The rustls and crypto provider in use.
    pub tls_library: String,
    /// Where server and client ran (pinning).
    pub placement: String,
    /// Whether other processes were busy: the 1-minute load average at start.
    pub loadavg_1m: Option<f64>,
}

/// One measured cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    /// A stable identifier, `<point>-r<repeat>`: the HTML report's anchor.
    pub id: String,
    /// The matrix point (factor name → level), shared by its repeats.
    pub point: String,
    /// Factor levels of this cell.
    pub factors: BTreeMap<String, String>,
    /// Repeat number, from 1.
    pub repeat: u32,
    /// Position in run order, from 0.
    pub order: usize,
    /// An equivalent pair of `tlslab` command lines (server, load) that
    /// reproduce the cell outside the experiment.
    pub command_line: String,
    /// Unix time in ms when the cell started.
    pub started_unix_ms: u64,
    /// The figures the report uses.
    pub metrics: CellMetrics,
    /// The load engine's full report of the cell (client-observed), when the
    /// engine is `load`, as written (an older version's report lacks the
    /// fields added since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Verbatim<crate::load::LoadReport>>,
}

/// What a cell measured. Client-observed unless named server.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CellMetrics {
    /// Requests/s, client-observed over `window_s`.
    pub requests_per_s: f64,
    /// New TLS connections/s (full + resumed handshakes), client-observed.
    pub connections_per_s: f64,
    /// The client's measurement window, s.
    pub window_s: f64,
    /// Requests completed in the window.
    pub requests: u64,
    /// Failed requests in the window.
    pub errors: u64,
    /// Server CPU time per request, µs (server-observed, whole run).
    pub server_cpu_us_per_request: f64,
    /// Server CPU time ÷ wall time, per server thread (server-observed).
    pub server_busy: f64,
    /// Request latency percentiles, µs: (percentile, value) for 50, 90, 99,
    /// 99.9 and 100.
    pub latency_us: Vec<(f64, u64)>,
    /// Full-handshake time percentiles, µs.
    pub handshake_full_us: Vec<(f64, u64)>,
    /// Resumed-handshake time percentiles, µs.
    pub handshake_resumed_us: Vec<(f64, u64)>,
    /// Median TCP connect time, µs.
    pub connect_p50_us: Option<u64>,
    /// Median time to first byte, µs.
    pub ttfb_p50_us: Option<u64>,
    /// Mean bytes the client sent in a full handshake.
    pub full_bytes_out: Option<f64>,
    /// Mean bytes the client received in a full handshake.
    pub full_bytes_in: Option<f64>,
    /// Mean round trips of a full handshake.
    pub full_round_trips: Option<f64>,
    /// Mean bytes sent in a resumed handshake.
    pub resumed_bytes_out: Option<f64>,
    /// Mean bytes received in a resumed handshake.
    pub resumed_bytes_in: Option<f64>,
    /// Mean round trips of a resumed handshake.
    pub resumed_round_trips: Option<f64>,
    /// Share of handshakes the server resumed.
    pub reuse_achieved: f64,
    /// The client's CPU busy fraction.
    pub client_busy: f64,
    /// Whether the client was ≥ 90 % busy (the cell then measures the client).
    pub client_saturated: bool,
    /// The TLS version most handshakes negotiated.
    pub version: Option<String>,
    /// The key-exchange group most handshakes negotiated.
    pub group: Option<String>,
    /// The cipher suite most handshakes negotiated.
    pub suite: Option<String>,
    /// The server's mean time per signature, µs, from its crypto meter
    /// (server-observed; one signature per full handshake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_sign_us: Option<f64>,
}

impl CellMetrics {
    /// The value of a percentile series at `p` (exact match), if present.
    pub fn at(series: &[(f64, u64)], p: f64) -> Option<u64> {
        series
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-9)
            .map(|(_, v)| *v)
    }
}

/// One figure of a seed paper against today's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// What is compared.
    pub quantity: String,
    /// The paper's figure, as printed (with its unit).
    pub paper: String,
    /// Where it is in the seed's text.
    pub source: String,
    /// Today's figure (median over repeats), or `None` if not measured.
    pub today: Option<f64>,
    /// Unit of `today`.
    pub unit: String,
    /// How today's figure was measured (observer and window).
    pub measured: String,
    /// The cells today's figure comes from.
    pub cells: Vec<String>,
    /// One line on why the two differ.
    pub reason: String,
}

/// A model curve: (x, y) points with axis names.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    /// Curve name (legend).
    pub name: String,
    /// Chart the curve belongs to.
    pub chart: String,
    /// X axis label.
    pub x: String,
    /// Y axis label.
    pub y: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// A factor level as text: `0.5`, `1`, `0`.
pub fn fmt_level(x: f64) -> String {
    format!("{x}")
}

fn percentiles(p: &crate::load::Phase) -> Vec<(f64, u64)> {
    [
        (50.0, p.p50_us),
        (90.0, p.p90_us),
        (99.0, p.p99_us),
        (99.9, p.p999_us),
        (100.0, p.max_us),
    ]
    .into_iter()
    .filter_map(|(q, v)| v.map(|v| (q, v)))
    .collect()
}

/// The key with the highest count (of equal ones, the last in key order).
pub fn most_common(counts: &BTreeMap<String, u64>) -> Option<String> {
    counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, _)| k.clone())
}

impl CellMetrics {
    /// The client-observed figures of a load report; the server-observed
    /// ones (`server_cpu_us_per_request`, `server_busy`) are left at 0 for
    /// the caller that measured them.
    pub fn from_load(r: &crate::load::LoadReport) -> CellMetrics {
        let versions = r
            .handshake
            .versions
            .iter()
            .map(|(k, v)| (k.clone(), v.full + v.resumed))
            .collect();
        CellMetrics {
            requests_per_s: r.throughput.requests_per_s,
            connections_per_s: r.throughput.full_handshakes_per_s
                + r.throughput.resumed_handshakes_per_s,
            window_s: r.window.measured_s,
            requests: r.requests.completed,
            errors: r.requests.errors,
            server_cpu_us_per_request: 0.0,
            server_busy: 0.0,
            latency_us: percentiles(&r.latency.total),
            handshake_full_us: percentiles(&r.latency.handshake_full),
            handshake_resumed_us: percentiles(&r.latency.handshake_resumed),
            connect_p50_us: r.latency.connect.p50_us,
            ttfb_p50_us: r.latency.ttfb.p50_us,
            full_bytes_out: r.handshake.full.bytes_out_mean,
            full_bytes_in: r.handshake.full.bytes_in_mean,
            full_round_trips: r.handshake.full.round_trips_mean,
            resumed_bytes_out: r.handshake.resumed.bytes_out_mean,
            resumed_bytes_in: r.handshake.resumed.bytes_in_mean,
            resumed_round_trips: r.handshake.resumed.round_trips_mean,
            reuse_achieved: r.reuse.achieved,
            client_busy: r.client_cpu.busy_fraction,
            client_saturated: r.client_cpu.saturated,
            version: most_common(&versions),
            group: most_common(&r.handshake.groups),
            suite: most_common(&r.handshake.suites),
            server_sign_us: None,
        }
    }
}

impl Cell {
    /// The cell's `tlslab load --json` report, when it carries one.
    pub fn load_report(&self) -> Option<&crate::load::LoadReport> {
        self.load.as_ref()?.get()
    }
}

impl StudyResults {
    /// The engine's own report read as `T` (for example
    /// [`crate::breakdown::BreakdownReport`]); `None` when there is none or
    /// it is another engine's.
    pub fn engine_report_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        match self.engine_report.as_ref()? {
            EngineReport::Engine(v) => T::deserialize(v).ok(),
            EngineReport::Path(_) | EngineReport::Probe(_) => None,
        }
    }

    /// A results document holding one `load --json` report as its only cell,
    /// so `tlslab report` can chart it.
    pub fn from_load(r: &crate::load::LoadReport, name: &str) -> StudyResults {
        let mut factors = BTreeMap::new();
        factors.insert("reuse".into(), fmt_level(r.config.reuse));
        factors.insert("clients".into(), r.config.clients.to_string());
        factors.insert("versions".into(), r.config.versions.join("+"));
        let point = "load".to_string();
        let cell = Cell {
            id: "load-r1".into(),
            point,
            factors,
            repeat: 1,
            order: 0,
            command_line: format!("tlslab load {}", r.config.targets.join(" ")),
            started_unix_ms: r.window.start_unix_ms,
            metrics: CellMetrics::from_load(r),
            load: Verbatim::new(r.clone()).ok(),
        };
        StudyResults::imported(name, "a `tlslab load --json` report", vec![cell])
    }

    /// A results document with one cell per step of a `sweep --json` report
    /// (client-observed; no server CPU).
    pub fn from_sweep(r: &crate::sweep::SweepReport, name: &str) -> StudyResults {
        let mut cells = Vec::new();
        for s in &r.series {
            for (i, st) in s.steps.iter().enumerate() {
                let mut factors = BTreeMap::new();
                factors.insert("reuse".into(), fmt_level(s.reuse));
                factors.insert("clients".into(), st.clients.to_string());
                if let Some(rate) = st.rate {
                    factors.insert("rate".into(), format!("{rate}"));
                }
                let point = format!("reuse{}-step{}", fmt_level(s.reuse), i + 1);
                let latency_us = [(50.0, st.total_p50_us), (99.0, st.total_p99_us)]
                    .into_iter()
                    .filter_map(|(q, v)| v.map(|v| (q, v)))
                    .collect();
                let mut hf = Vec::new();
                if let Some(v) = st.handshake_full_p50_us {
                    hf.push((50.0, v));
                }
                let mut hr = Vec::new();
                if let Some(v) = st.handshake_resumed_p50_us {
                    hr.push((50.0, v));
                }
                cells.push(Cell {
                    id: format!("{point}-r1"),
                    point,
                    factors,
                    repeat: 1,
                    order: cells.len(),
                    command_line: format!("tlslab sweep (over {})", r.over),
                    started_unix_ms: 0,
                    metrics: CellMetrics {
                        requests_per_s: st.requests_per_s,
                        requests: st.completed,
                        errors: st.errors,
                        latency_us,
                        handshake_full_us: hf,
                        handshake_resumed_us: hr,
                        reuse_achieved: st.reuse_achieved,
                        client_busy: st.client_busy,
                        ..CellMetrics::default()
                    },
                    load: None,
                });
            }
        }
        StudyResults::imported(name, "a `tlslab sweep --json` report", cells)
    }

    /// A complete document of `cells` alone, titled `name: what`: no
    /// matrix, comparisons, engine report or curves (a report read from
    /// another file, or a hand-built one).
    pub fn imported(name: &str, what: &str, cells: Vec<Cell>) -> StudyResults {
        StudyResults {
            kind: STUDY_KIND.into(),
            schema_version: STUDY_SCHEMA_VERSION,
            study: name.into(),
            title: format!("{name}: {what}"),
            seed: String::new(),
            quick: false,
            command_line: vec![],
            environment: Environment::default(),
            matrix: serde_json::Value::Null,
            started_unix_ms: 0,
            finished_unix_ms: 0,
            complete: true,
            cells,
            comparisons: vec![],
            engine_report: None,
            curves: vec![],
            notes: vec![],
            charts: vec![],
        }
    }

    /// The cells of one matrix point (all repeats).
    pub fn point_cells<'a>(&'a self, point: &str) -> impl Iterator<Item = &'a Cell> + 'a {
        let point = point.to_string();
        self.cells.iter().filter(move |c| c.point == point)
    }

    /// Matrix points in first-run order.
    pub fn points(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.cells {
            if !out.contains(&c.point) {
                out.push(c.point.clone());
            }
        }
        out
    }

    /// Cells whose factors include every `(name, level)` of `filter`.
    pub fn select<'a>(&'a self, filter: &[(&str, &str)]) -> Vec<&'a Cell> {
        self.cells
            .iter()
            .filter(|c| {
                filter
                    .iter()
                    .all(|(k, v)| c.factors.get(*k).is_some_and(|x| x == v))
            })
            .collect()
    }
}
