//! The charts of a study document: which figures its cells support
//! (latency against throughput, throughput and server CPU against reuse,
//! handshake percentiles, the breakdown, the cluster figure, goodput
//! against offered load (an overload report's per transport), seed 004's
//! sweep and model curves), each point
//! linked to the cells it came from.

use std::collections::BTreeMap;

use super::cells::ms;
use super::svg::{Chart, DataPoint, bar_chart, line_chart, push_line, to_series};
use crate::interval::median;
use crate::study::{Cell, CellMetrics, ChartKind, StudyResults};
use tlslab_schema::breakdown::BreakdownReport;

/// Groups cells by the value of `factor`, keeping the order of first sight.
fn group_by<'a>(cells: &[&'a Cell], factor: &str) -> Vec<(String, Vec<&'a Cell>)> {
    let mut out: Vec<(String, Vec<&Cell>)> = Vec::new();
    for c in cells {
        let k = c.factors.get(factor).cloned().unwrap_or_default();
        match out.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(c),
            None => out.push((k, vec![c])),
        }
    }
    out
}

/// The factors other than `except` joined, as a series name.
fn series_key(c: &Cell, except: &[&str]) -> String {
    let parts: Vec<String> = c
        .factors
        .iter()
        .filter(|(k, _)| !except.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(" ")
    }
}

/// A matrix point: its cells (all repeats) and the median of a figure.
struct PointValue<'a> {
    first: &'a Cell,
    ids: Vec<String>,
    value: f64,
}

impl PointValue<'_> {
    /// The chart point of this matrix point at `x`, in the series of its
    /// factors but `except`, linked to its cells.
    fn at(self, except: &[&str], x: f64) -> DataPoint {
        DataPoint {
            series: series_key(self.first, except),
            x,
            y: self.value,
            cells: self.ids,
        }
    }
}

/// Median over repeats of a per-cell figure, for each matrix point, in
/// first-run order; cells where `f` gives `None` are left out.
fn per_point<'a>(r: &'a StudyResults, f: impl Fn(&Cell) -> Option<f64>) -> Vec<PointValue<'a>> {
    let mut out = Vec::new();
    for p in r.points() {
        let cells: Vec<&Cell> = r.point_cells(&p).filter(|c| f(c).is_some()).collect();
        let v: Vec<f64> = cells.iter().filter_map(|c| f(c)).collect();
        if !v.is_empty() {
            out.push(PointValue {
                first: cells[0],
                ids: cells.iter().map(|c| c.id.clone()).collect(),
                value: median(&v),
            });
        }
    }
    out
}

/// The best (highest) point of each series at each reuse level, x in
/// percent: the throughput figures take the best client count.
fn best_per_reuse(
    points: Vec<PointValue>,
    series: impl Fn(&PointValue) -> String,
) -> Vec<DataPoint> {
    let mut best: BTreeMap<(String, String), PointValue> = BTreeMap::new();
    for p in points {
        let key = (
            series(&p),
            p.first.factors.get("reuse").cloned().unwrap_or_default(),
        );
        if best.get(&key).is_none_or(|b| b.value < p.value) {
            best.insert(key, p);
        }
    }
    best.into_iter()
        .filter_map(|((series, reuse), p)| {
            Some(DataPoint {
                series,
                x: reuse.parse::<f64>().ok()? * 100.0,
                y: p.value,
                cells: p.ids,
            })
        })
        .collect()
}

/// Goodput of a cell, requests/s: the load report's succeeded requests over
/// its window when the cell carries it, else completed requests/s less the
/// error share.
pub fn goodput(c: &Cell) -> f64 {
    if let Some(l) = c.load_report()
        && l.window.measured_s > 0.0
    {
        return l.requests.succeeded as f64 / l.window.measured_s;
    }
    let m = &c.metrics;
    if m.requests == 0 {
        return 0.0;
    }
    m.requests_per_s * (m.requests.saturating_sub(m.errors) as f64 / m.requests as f64)
}

/// The factor names that mark blind dispatch policies in a cluster study.
const BLIND_POLICIES: [&str; 4] = ["round-robin", "least-conn", "random", "source-ip"];

fn policy_label(p: &str) -> String {
    if p == "cid" {
        // QUIC-LB connection IDs keep a connection on its node; a new
        // connection's first Initials go by the 4-tuple hash.
        "cid (QUIC-LB; blind to sessions)".into()
    } else if p == "blind" {
        "blind (4-tuple hash)".into()
    } else if BLIND_POLICIES.contains(&p) {
        format!("{p} (blind)")
    } else if p == "session" {
        "session (session-aware)".into()
    } else {
        p.to_string()
    }
}

/// Whether the report draws `k` of `r`: the charts its study declared, or
/// for a document that declares none (a matrix, or one written before
/// studies declared them) those its cells support.
fn draws(r: &StudyResults, k: ChartKind) -> bool {
    if !r.charts.is_empty() {
        return r.charts.contains(&k);
    }
    let has = |f: &str| r.cells.iter().any(|c| c.factors.contains_key(f));
    match k {
        ChartKind::LatencyThroughput => has("reuse"),
        ChartKind::Reuse => has("reuse") && !has("policy"),
        ChartKind::Breakdown => r.engine_report_as::<BreakdownReport>().is_some(),
        ChartKind::Cluster => has("policy"),
        ChartKind::Goodput => super::overload_pair::has_report(r) || has("rate"),
        ChartKind::Table2 => r.study == "seed003-table2",
        ChartKind::HandshakePercentiles
        | ChartKind::PostQuantum
        | ChartKind::QuicVsTcp
        | ChartKind::Curves => true,
    }
}

/// The charts `r` draws (`draws`) whose data exists in it, and a note
/// for each left out.
pub fn charts(r: &StudyResults) -> (Vec<Chart>, Vec<String>) {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    let draws = |k| draws(r, k);
    // A chart left out gets a note when the study declared it, or, in a
    // document that declares none, always.
    let noted = |k| r.charts.is_empty() || r.charts.contains(&k);
    let p50 = |c: &Cell| CellMetrics::at(&c.metrics.latency_us, 50.0).map(ms);
    let thr = |c: &Cell| Some(c.metrics.requests_per_s);

    // Latency against throughput per reuse level.
    if draws(ChartKind::LatencyThroughput) {
        let thr_pts = per_point(r, thr);
        let data: Vec<DataPoint> = per_point(r, p50)
            .into_iter()
            .filter_map(|p| {
                let x = thr_pts.iter().find(|t| t.first.point == p.first.point)?;
                Some(p.at(&["clients", "rate"], x.value))
            })
            .collect();
        push_line(
            &mut out,
            &mut missing,
            "Latency against throughput, per reuse level",
            "requests/s (client-observed)",
            "p50 latency, ms",
            "Each point is one matrix point (median over repeats) at one client count or rate; \
             p50 of request latency (connect + handshake + request for a connection's first \
             request), client-observed over the cell's window. Seed 000 Figs. 4–5.",
            data,
            "needs more than one client count or rate per reuse level",
        );
    } else if noted(ChartKind::LatencyThroughput) {
        missing.push("latency against throughput: no cell has a `reuse` factor".into());
    }

    // Throughput against reuse (a cluster study has its own figure below).
    if draws(ChartKind::Reuse) {
        let data = best_per_reuse(per_point(r, thr), |p| {
            series_key(p.first, &["clients", "rate", "reuse"])
        });
        push_line(
            &mut out,
            &mut missing,
            "Throughput against session reuse",
            "connections resumed, %",
            "requests/s (best client count)",
            "Highest median requests/s over the client counts run, per reuse level; \
             client-observed over each cell's window. Seed 000 Figs. 4–5.",
            data,
            "needs at least two reuse levels",
        );
        // Server CPU against reuse (server-observed), at the largest client count.
        let max_clients = r
            .cells
            .iter()
            .filter_map(|o| o.factors.get("clients")?.parse::<usize>().ok())
            .max();
        let data = per_point(r, |c| {
            let m = &c.metrics;
            (m.server_cpu_us_per_request > 0.0).then_some(m.server_cpu_us_per_request)
        })
        .into_iter()
        .filter(|p| {
            p.first
                .factors
                .get("clients")
                .is_none_or(|n| n.parse::<usize>().ok() == max_clients)
        })
        .filter_map(|p| {
            let x = p.first.factors.get("reuse")?.parse::<f64>().ok()? * 100.0;
            Some(p.at(&["clients", "rate", "reuse"], x))
        })
        .collect();
        push_line(
            &mut out,
            &mut missing,
            "Server CPU per request against session reuse",
            "connections resumed, %",
            "server CPU per request, µs",
            "Server-observed: the server worker's CPU time over the whole cell divided by the \
             requests it served (median over repeats), at the largest client count.",
            data,
            "no cells with server-observed CPU at two or more reuse levels",
        );
    } else if !draws(ChartKind::LatencyThroughput) && r.charts.is_empty() {
        missing.push("throughput against reuse: no cell has a `reuse` factor".into());
    }

    // HDR percentile plots per handshake kind.
    let mut hdr: Vec<DataPoint> = Vec::new();
    fn full_hs(m: &CellMetrics) -> &Vec<(f64, u64)> {
        &m.handshake_full_us
    }
    fn resumed_hs(m: &CellMetrics) -> &Vec<(f64, u64)> {
        &m.handshake_resumed_us
    }
    for (kind, pick) in [
        ("full", full_hs as fn(&CellMetrics) -> &Vec<(f64, u64)>),
        ("resumed", resumed_hs),
    ] {
        let cells: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| pick(&c.metrics).len() >= 3)
            .collect();
        for (name, group) in group_by(&cells, "version") {
            let mut by_q: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
            for c in &group {
                for (q, v) in pick(&c.metrics) {
                    by_q.entry((q * 1000.0) as u64).or_default().push(ms(*v));
                }
            }
            let series = if name.is_empty() {
                kind.to_string()
            } else {
                format!("{kind} TLS {name}")
            };
            let ids: Vec<String> = group.iter().map(|c| c.id.clone()).collect();
            for (q, v) in by_q.into_iter().filter(|(q, _)| *q < 100_000) {
                hdr.push(DataPoint {
                    series: series.clone(),
                    x: 1.0 / (1.0 - q as f64 / 100_000.0),
                    y: median(&v),
                    cells: ids.clone(),
                });
            }
        }
    }
    let hdr_series = to_series(&hdr);
    if draws(ChartKind::HandshakePercentiles)
        && hdr_series.iter().any(|s| s.1.len() > 1)
        && let Some(svg) = line_chart(
            "Handshake time percentiles per handshake kind",
            "1/(1-percentile): 2 = p50, 10 = p90, 100 = p99, 1000 = p99.9",
            "handshake time, ms",
            &hdr_series,
            true,
        )
    {
        out.push(Chart {
            title: "Handshake percentiles".into(),
            caption: "HDR-style percentile plot: client-observed handshake time (end of TCP \
                      connect to handshake complete), each percentile the median over the cells \
                      that had that kind of handshake."
                .into(),
            svg,
            x_label: "1/(1-percentile)".into(),
            y_label: "handshake time, ms".into(),
            data: hdr,
            columns: Vec::new(),
        });
    } else if noted(ChartKind::HandshakePercentiles) {
        missing.push(
            "handshake percentile plot: no cell recorded three or more handshake percentiles"
                .into(),
        );
    }

    // The breakdown bar chart.
    if let Some(report) = r
        .engine_report_as::<BreakdownReport>()
        .filter(|_| draws(ChartKind::Breakdown))
    {
        let bars: Vec<(String, f64, f64)> = report
            .shares
            .iter()
            .filter(|s| s.fraction.is_finite())
            .map(|s| {
                let ci95 = if s.ci95.is_finite() { s.ci95 } else { 0.0 };
                (s.stage.clone(), s.fraction * 100.0, ci95 * 100.0)
            })
            .collect();
        let data = bars
            .iter()
            .enumerate()
            .map(|(i, (stage, v, _))| DataPoint {
                series: stage.clone(),
                x: i as f64,
                y: *v,
                cells: r
                    .cells
                    .iter()
                    .filter(|c| c.factors.get("stage").or(c.factors.get("ablate")) == Some(stage))
                    .map(|c| c.id.clone())
                    .collect(),
            })
            .collect();
        match bar_chart(
            "Share of server CPU per request, by TLS stage (Amdahl)",
            "% of the TLS baseline's server CPU",
            &bars,
        ) {
            Some(svg) => out.push(Chart {
                title: "Breakdown".into(),
                caption: "Each stage's share of the baseline's server CPU per request \
                          (server-observed), from no-op ablation; error bars are 95 % intervals \
                          of the paired per-round shares. Seed 001 Fig. 10 / §4."
                    .into(),
                svg,
                x_label: "stage".into(),
                y_label: "% of server CPU".into(),
                data,
                columns: Vec::new(),
            }),
            None => missing.push("breakdown: the engine report has no stage shares".into()),
        }
        // Seed 001's QUIC column: TCP+TLS 1.3 and QUIC side by side.
        super::breakdown_pair::charts(r, &mut out, &mut missing);
    } else if noted(ChartKind::Breakdown) {
        missing.push(
            "breakdown bar chart: no `breakdown` engine report (stage shares) in this document"
                .into(),
        );
    }

    // The cluster figure (seed 000 Fig. 9): throughput against reuse, blind
    // against session-aware dispatch, one chart per resumption mechanism.
    if draws(ChartKind::Cluster) {
        let cells: Vec<&Cell> = r.cells.iter().collect();
        let mut drawn = 0;
        for (mechanism, _) in group_by(&cells, "mechanism") {
            let in_mech = |c: &Cell| {
                c.factors.get("mechanism").cloned().unwrap_or_default() == mechanism
                    && c.factors.contains_key("policy")
            };
            let points = per_point(r, |c| in_mech(c).then_some(c.metrics.requests_per_s));
            // A cluster over QUIC (`cluster --h3`) says so in the title.
            let transport = points
                .iter()
                .find_map(|p| p.first.factors.get("transport").cloned());
            let data = best_per_reuse(points, |p| {
                let policy = policy_label(p.first.factors.get("policy").map_or("", |s| s.as_str()));
                match series_key(
                    p.first,
                    &[
                        "clients",
                        "rate",
                        "reuse",
                        "policy",
                        "mechanism",
                        "transport",
                    ],
                ) {
                    rest if rest == "all" => policy,
                    rest => format!("{policy} {rest}"),
                }
            });
            let over = transport.map_or(String::new(), |t| format!(", over {}", t.to_uppercase()));
            let title = if mechanism.is_empty() {
                format!("Cluster throughput against reuse, blind and session-aware dispatch{over}")
            } else {
                format!("Cluster throughput against reuse ({mechanism}{over})")
            };
            let before = out.len();
            push_line(
                &mut out,
                &mut missing,
                &title,
                "connections resumed, %",
                "cluster requests/s",
                "Seed 000 Fig. 9: requests/s of the whole cluster (client-observed over each \
                 cell's window, median over repeats, best client count) against the share of \
                 connections that offered a session, one line per dispatch policy. Blind \
                 policies send a resumption to any node; session-aware dispatch sends it to \
                 the node that holds the session.",
                data,
                "needs at least two reuse levels per policy",
            );
            drawn += out.len() - before;
        }
        if drawn == 0 {
            missing.push("cluster figure: no policy had two reuse levels".into());
        }
    } else if noted(ChartKind::Cluster) {
        missing.push(
            "cluster figure (seed 000 Fig. 9): no cell has a `policy` factor (a cluster study \
             document, `seed000-cluster`)"
                .into(),
        );
    }

    // Goodput against offered load: an overload report's, one panel per
    // transport against multiples of its capacity; else cells with a
    // `rate` factor.
    if !draws(ChartKind::Goodput) {
        if noted(ChartKind::Goodput) {
            missing
                .push("goodput against offered load: no open-loop cells (no `rate` factor)".into());
        }
    } else if super::overload_pair::has_report(r) {
        super::overload_pair::charts(r, &mut out, &mut missing);
    } else {
        let data = per_point(r, |c| c.factors.contains_key("rate").then(|| goodput(c)))
            .into_iter()
            .filter_map(|p| {
                let x = p.first.factors.get("rate")?.parse::<f64>().ok()?;
                Some(p.at(&["rate", "clients"], x))
            })
            .collect();
        push_line(
            &mut out,
            &mut missing,
            "Goodput against offered load",
            "offered requests/s",
            "successful requests/s (client-observed)",
            "Open-loop cells: requests that succeeded per second (client-observed over each \
             cell's window, median over repeats) against the arrival rate offered. Seed 002 \
             Figs. 3–7.",
            data,
            "needs open-loop cells at two or more rates",
        );
    }

    // Seed 004's post-quantum sweep.
    if draws(ChartKind::PostQuantum) {
        super::pq::charts(r, &mut out, &mut missing);
    }
    // quic-vs-tcp: CPU per pattern and transport; TTFB against RTT beside
    // the arithmetic (its curves are drawn there, not below).
    if draws(ChartKind::QuicVsTcp) {
        super::h3::charts(r, &mut out, &mut missing);
    }
    // seed003-table2: W and C against RTT, TCP+TLS and HTTP/3.
    if draws(ChartKind::Table2) {
        super::table2::charts(r, &mut out, &mut missing);
    }
    if !draws(ChartKind::Curves) {
        return (out, missing);
    }

    // Model curves (seed 004's 300/(1−ρ), M/M/1).
    let mut by_chart: BTreeMap<String, Vec<&crate::study::Curve>> = BTreeMap::new();
    for c in r
        .curves
        .iter()
        .filter(|c| c.chart != super::h3::QUIC_TTFB_CHART)
    {
        by_chart.entry(c.chart.clone()).or_default().push(c);
    }
    for (title, curves) in by_chart {
        let data: Vec<DataPoint> = curves
            .iter()
            .flat_map(|c| {
                c.points.iter().map(|&(x, y)| DataPoint {
                    series: c.name.clone(),
                    x,
                    y,
                    cells: vec![],
                })
            })
            .collect();
        let series = to_series(&data);
        if let Some(svg) = line_chart(&title, &curves[0].x, &curves[0].y, &series, false) {
            out.push(Chart {
                title: title.clone(),
                caption: "Model curves computed from the measured service times (not measured \
                          response times)."
                    .into(),
                svg,
                x_label: curves[0].x.clone(),
                y_label: curves[0].y.clone(),
                data,
                columns: Vec::new(),
            });
        }
    }
    (out, missing)
}
