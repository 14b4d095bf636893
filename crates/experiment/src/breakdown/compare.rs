//! `breakdown --transport both`: the TCP and QUIC tables side by side, and
//! the stages that make up QUIC's extra CPU per request.

use std::fmt::Write;

use tlslab_schema::breakdown::BreakdownReport;
pub use tlslab_schema::breakdown::{BreakdownPair, Difference, StageCost};

use super::analyse::REMAINDER_QUIC;
use super::report::{BreakdownText, stage_label};

/// The row of TCP's non-TLS share beside QUIC's transport + HTTP/3.
pub const REMAINDER: &str = "remainder";

/// The share a row of the difference reads in one table.
fn side(stage: &str, quic: bool) -> &str {
    match (stage, quic) {
        (REMAINDER, false) => "non-TLS",
        (REMAINDER, true) => REMAINDER_QUIC,
        (s, _) => s,
    }
}

/// The stages only QUIC has.
const QUIC_ONLY: [&str; 3] = ["quic-packet", "quic-header", "quic-keys"];

fn baseline(r: &BreakdownReport) -> f64 {
    r.row("TLS (baseline)")
        .map_or(f64::NAN, |r| r.cpu_us_median)
}

fn us(r: &BreakdownReport, stage: &str) -> f64 {
    r.share(stage).map_or(0.0, |s| s.fraction * baseline(r))
}

/// Every share of both tables in µs of its own baseline, and the sums the
/// issue's target asks for.
pub fn difference(tcp: &BreakdownReport, quic: &BreakdownReport) -> Difference {
    let (t, q) = (baseline(tcp), baseline(quic));
    let mut names: Vec<String> = Vec::new();
    for s in tcp.shares.iter().chain(&quic.shares) {
        // TCP's non-TLS and QUIC's remainder share one row.
        let name = if s.stage == "non-TLS" || s.stage == REMAINDER_QUIC {
            REMAINDER.to_string()
        } else {
            s.stage.clone()
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let stages = names
        .into_iter()
        .map(|stage| {
            let (tcp_us, quic_us) = (us(tcp, side(&stage, false)), us(quic, side(&stage, true)));
            StageCost {
                stage,
                tcp_us,
                quic_us,
                delta_us: quic_us - tcp_us,
            }
        })
        .collect();
    let quic_only_us: f64 = QUIC_ONLY.iter().map(|s| us(quic, s)).sum();
    let remainder_growth_us = us(quic, side(REMAINDER, true)) - us(tcp, side(REMAINDER, false));
    let explained_us = quic_only_us + remainder_growth_us;
    let extra_us = q - t;
    Difference {
        tcp_cpu_us: t,
        quic_cpu_us: q,
        quic_over_tcp: q / t,
        extra_us,
        stages,
        quic_only_us,
        remainder_growth_us,
        explained_us,
        explained_fraction: explained_us / extra_us,
    }
}

/// Both runs and their difference.
pub fn pair(tcp: BreakdownReport, quic: BreakdownReport) -> BreakdownPair {
    let difference = difference(&tcp, &quic);
    BreakdownPair {
        tcp,
        quic,
        difference,
    }
}

/// The text of `--transport both`: each table, then the two side by side.
pub fn render_pair(p: &BreakdownPair) -> String {
    let mut s = p.tcp.render();
    s.push_str(&p.quic.render());
    let d = &p.difference;
    let pct = |r: &BreakdownReport, stage: &str| {
        r.share(side(stage, r.transport == "quic"))
            .map_or("-".to_string(), |sh| {
                format!("{:.1}% ±{:.1}", sh.fraction * 100.0, sh.ci95 * 100.0)
            })
    };
    let _ = writeln!(
        s,
        "\nQUIC beside TCP (each share × its own baseline's server CPU per request; the two runs \
         ran one after the other, each paired within itself):\n  TCP baseline {:.1} µs/req, QUIC \
         {:.1} µs/req: QUIC ÷ TCP {:.2}, {:+.1} µs extra.",
        d.tcp_cpu_us, d.quic_cpu_us, d.quic_over_tcp, d.extra_us
    );
    let _ = writeln!(
        s,
        "  {:<26} {:>14} {:>9} {:>14} {:>9} {:>9}",
        "stage", "TCP share", "TCP µs", "QUIC share", "QUIC µs", "Δ µs"
    );
    let _ = writeln!(
        s,
        "  (non-TLS | QUIC+HTTP/3: TCP's non-TLS share beside QUIC's transport + HTTP/3 remainder)"
    );
    for st in &d.stages {
        let label = match st.stage.as_str() {
            REMAINDER => "non-TLS | QUIC+HTTP/3",
            s => stage_label(s),
        };
        let _ = writeln!(
            s,
            "  {:<26} {:>14} {:>9.1} {:>14} {:>9.1} {:>+9.1}",
            label,
            pct(&p.tcp, &st.stage),
            st.tcp_us,
            pct(&p.quic, &st.stage),
            st.quic_us,
            st.delta_us
        );
    }
    let mut big: Vec<&StageCost> = d.stages.iter().collect();
    big.sort_by(|a, b| b.delta_us.abs().total_cmp(&a.delta_us.abs()));
    let named: Vec<String> = big
        .iter()
        .take(4)
        .map(|st| {
            let name = match st.stage.as_str() {
                REMAINDER => "the remainder (QUIC transport + HTTP/3 against TCP's non-TLS)",
                s => stage_label(s),
            };
            format!("{name} {:+.1} µs", st.delta_us)
        })
        .collect();
    let _ = writeln!(
        s,
        "The difference is made up mostly of: {}.\nQUIC-only stages {:.1} µs + the remainder's \
         growth (QUIC transport + HTTP/3 − TCP's non-TLS) {:+.1} µs = {:.1} µs, against {:+.1} µs \
         measured: {:.0} % of it ({}).",
        named.join(", "),
        d.quic_only_us,
        d.remainder_growth_us,
        d.explained_us,
        d.extra_us,
        d.explained_fraction * 100.0,
        if (d.explained_fraction - 1.0).abs() <= 0.1 {
            "within 10 %"
        } else {
            "not within 10 %: the other rows' deltas, TCP's record cipher among them, make up the rest"
        }
    );
    s
}
