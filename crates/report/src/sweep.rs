//! The text of `tlslab sweep`: one table per reuse value, the knee
//! marked. The report's data types are `tlslab_schema::sweep`, re-exported
//! here.

use std::fmt::Write as _;

pub use tlslab_schema::sweep::*;

fn us(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2}ms", v as f64 / 1000.0))
}

/// The text of one sweep step: [`SweepStep::row`] and
/// [`SweepStep::header`]. A trait because the step's type lives in
/// `tlslab-schema`.
pub trait SweepStepText {
    /// One table row.
    fn row(&self) -> String;
    /// The header of [`SweepStep::row`].
    fn header() -> String;
}

impl SweepStepText for SweepStep {
    fn row(&self) -> String {
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

    fn header() -> String {
        format!(
            "  {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7}",
            "clients", "rate/s", "req/s", "p50 total", "p99 total", "errors", "reused", "client"
        )
    }
}

/// [`SweepReport::render`]. A trait because the report's type lives in
/// `tlslab-schema`.
pub trait SweepText {
    /// The sweep as text: one table per reuse value, the knee marked.
    fn render(&self) -> String;
}

impl SweepText for SweepReport {
    fn render(&self) -> String {
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
