//! The report of `tlslab sweep`: latency against throughput, one series per
//! reuse value, each up to its knee. Field names are documented in the
//! README ("`tlslab sweep --json`").

use std::fmt::Write as _;

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

fn us(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2}ms", v as f64 / 1000.0))
}

impl SweepStep {
    /// One table row.
    pub fn row(&self) -> String {
        format!(
            "  {:>8} {:>10} {:>10.1} {:>10} {:>10} {:>8} {:>7.1}% {:>6.0}%",
            self.clients,
            self.rate.map_or_else(|| "-".into(), |r| format!("{r:.1}")),
            self.requests_per_s,
            us(self.total_p50_us),
            us(self.total_p99_us),
            self.errors,
            self.reuse_achieved * 100.0,
            self.client_busy * 100.0,
        )
    }

    /// The header of [`SweepStep::row`].
    pub fn header() -> String {
        format!(
            "  {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7}",
            "clients", "rate/s", "req/s", "p50 total", "p99 total", "errors", "reused", "client"
        )
    }
}

impl SweepReport {
    /// The sweep as text: one table per reuse value, the knee marked.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tlslab sweep over {} (x{} per step, knee when req/s grows < {:.0}%); client-observed",
            self.over,
            self.factor,
            self.knee_gain * 100.0
        );
        for s in &self.series {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "reuse {:.0}% requested: stopped at {} ({} steps)",
                s.reuse * 100.0,
                s.stopped,
                s.steps.len()
            );
            let _ = writeln!(out, "{}", SweepStep::header());
            for (i, st) in s.steps.iter().enumerate() {
                let mark = if s.knee == Some(i) { "  <- knee" } else { "" };
                let _ = writeln!(out, "{}{mark}", st.row());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> SweepReport {
        let step = |c: usize, t: f64| SweepStep {
            clients: c,
            rate: None,
            requests_per_s: t,
            completed: 10,
            errors: 0,
            reuse_achieved: 0.5,
            total_p50_us: Some(1500),
            total_p99_us: Some(3000),
            handshake_full_p50_us: Some(900),
            handshake_resumed_p50_us: Some(400),
            client_busy: 0.2,
        };
        SweepReport {
            schema_version: 1,
            over: "clients".into(),
            factor: 2.0,
            knee_gain: 0.1,
            step_s: Some(2.0),
            series: vec![SweepSeries {
                reuse: 0.5,
                knee: Some(1),
                stopped: "knee".into(),
                steps: vec![step(1, 100.0), step(2, 180.0), step(4, 185.0)],
            }],
        }
    }

    #[test]
    fn render_marks_the_knee() {
        let t = sample().render();
        let knee_line = t.lines().find(|l| l.contains("<- knee")).unwrap();
        assert!(knee_line.contains("180.0"), "{t}");
        assert!(
            t.contains("reuse 50% requested: stopped at knee (3 steps)"),
            "{t}"
        );
    }

    #[test]
    fn every_sweep_json_field_is_documented_in_the_schema_doc() {
        let readme = include_str!("../../../docs/schema.md");
        let start = readme
            .find("### `tlslab sweep --json")
            .expect("docs/schema.md documents the sweep JSON");
        let section = &readme[start..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
        let v = serde_json::to_value(sample()).unwrap();
        let mut names: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        let series = &v["series"][0];
        names.extend(
            series
                .as_object()
                .unwrap()
                .keys()
                .map(|k| format!("series[].{k}")),
        );
        names.extend(
            series["steps"][0]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| format!("series[].steps[].{k}")),
        );
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !section.contains(&format!("`{n}`")))
            .collect();
        assert!(missing.is_empty(), "undocumented sweep fields: {missing:?}");
    }
}
