//! The charts of seed001's QUIC column (an engine report with a `quic`
//! pair, [`QuicColumn`]): the TCP+TLS 1.3 and QUIC Amdahl tables side by
//! side, stage by stage, and the stages that make up QUIC's extra server
//! CPU per request.

use super::svg::{Chart, DataPoint, bar_chart, push_bars};
use crate::study::StudyResults;
use tlslab_schema::breakdown::{BreakdownPair, QuicColumn};

/// The side-by-side chart's title.
pub const BREAKDOWN_PAIR_CHART: &str =
    "Breakdown over TCP+TLS 1.3 and over QUIC, side by side (Amdahl)";
/// The difference chart's title.
pub const BREAKDOWN_DIFFERENCE_CHART: &str =
    "Where QUIC's extra server CPU per request goes, stage by stage";

/// The difference's row of TCP's non-TLS share beside QUIC's remainder.
const REMAINDER: &str = "remainder";
/// QUIC's remainder share (`tlslab_experiment::breakdown::REMAINDER_QUIC`).
const REMAINDER_QUIC: &str = "QUIC transport + HTTP/3";

/// The share a row of the difference reads in one table.
fn side(stage: &str, quic: bool) -> &str {
    match (stage, quic) {
        (REMAINDER, false) => "non-TLS",
        (REMAINDER, true) => REMAINDER_QUIC,
        (s, _) => s,
    }
}

fn label(stage: &str) -> &str {
    match stage {
        REMAINDER => "non-TLS or QUIC+H3",
        s => s,
    }
}

/// The ids of the column's cells over `transport`: every share of a
/// table rests on its baseline cells and its ablated ones, so on all.
fn cells(r: &StudyResults, transport: &str) -> Vec<String> {
    r.cells
        .iter()
        .filter(|c| {
            c.point.starts_with("quic-column-")
                && c.factors.get("transport").map(String::as_str) == Some(transport)
        })
        .map(|c| c.id.clone())
        .collect()
}

fn side_by_side(
    r: &StudyResults,
    p: &BreakdownPair,
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
) {
    let mut bars: Vec<(String, f64, f64)> = Vec::new();
    let mut data = Vec::new();
    for st in &p.difference.stages {
        for (name, rep, quic) in [("TCP", &p.tcp, false), ("QUIC", &p.quic, true)] {
            let Some(s) = rep.share(side(&st.stage, quic)) else {
                continue;
            };
            if !s.fraction.is_finite() {
                continue;
            }
            let ci = if s.ci95.is_finite() { s.ci95 } else { 0.0 };
            let series = format!("{}: {name}", label(&st.stage));
            data.push(DataPoint {
                series: series.clone(),
                x: bars.len() as f64,
                y: s.fraction * 100.0,
                cells: cells(r, if quic { "quic" } else { "tcp" }),
            });
            bars.push((series, s.fraction * 100.0, ci * 100.0));
        }
    }
    match bar_chart(BREAKDOWN_PAIR_CHART, "% of its own TLS baseline", &bars) {
        Some(svg) => out.push(Chart::new(
            (
                BREAKDOWN_PAIR_CHART,
                "Each stage's share of its own transport's baseline server CPU per request \
                 (server-observed), from no-op ablation on client and server alike, a new \
                 connection and full handshake per request, TLS 1.3 with the same key and \
                 group over both; TCP's bar beside QUIC's for every stage (a stage only one \
                 transport has has one bar). Error bars are 95 % intervals of the paired \
                 per-round shares. The `non-TLS or QUIC+H3` pair is TCP's non-TLS share \
                 beside QUIC's transport + HTTP/3 remainder. Seed 001's method, issue 34.",
            ),
            ("stage: transport", "% of server CPU"),
            svg,
            data,
        )),
        None => missing.push(format!(
            "{BREAKDOWN_PAIR_CHART}: the QUIC column has no finite shares"
        )),
    }
}

fn difference(
    r: &StudyResults,
    p: &BreakdownPair,
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
) {
    let d = &p.difference;
    let all = [cells(r, "tcp"), cells(r, "quic")].concat();
    let mut rows: Vec<(String, f64, Vec<String>)> = d
        .stages
        .iter()
        .filter(|s| s.delta_us.is_finite())
        .map(|s| (label(&s.stage).to_string(), s.delta_us, all.clone()))
        .collect();
    rows.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let caption = format!(
        "QUIC's µs per request in each stage less TCP's (each share × its own baseline's \
         server CPU per request, server-observed; the two runs ran one after the other), \
         largest first: the stages that make up the difference. TCP baseline {:.1} µs, QUIC \
         {:.1} µs: QUIC ÷ TCP {:.2}, {:+.1} µs; the QUIC-only stages {:.1} µs and the \
         remainder's growth {:+.1} µs explain {:.0} % of it.",
        d.tcp_cpu_us,
        d.quic_cpu_us,
        d.quic_over_tcp,
        d.extra_us,
        d.quic_only_us,
        d.remainder_growth_us,
        d.explained_fraction * 100.0
    );
    push_bars(
        out,
        missing,
        (BREAKDOWN_DIFFERENCE_CHART, &caption),
        ("stage", "QUIC − TCP, µs per request"),
        rows,
        "the QUIC column's difference has no finite rows",
    );
}

/// Adds the column's charts to `out` (or a note to `missing`) when the
/// document's engine report has a QUIC column.
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let Some(p) = r.engine_report_as::<QuicColumn>().and_then(|c| c.quic) else {
        if r.study == "seed001-breakdown" {
            missing.push(format!(
                "{BREAKDOWN_PAIR_CHART}: this document has no QUIC column (written before it \
                 existed, or its run stopped before the pair); `--resume` the study to add it"
            ));
        }
        return;
    };
    side_by_side(r, &p, out, missing);
    difference(r, &p, out, missing);
}
