//! `tlslab report`: a self-contained HTML page (inline SVG charts drawn with
//! plotters' SVG backend, inline CSS, no script, no network fetch) and a
//! Markdown version of the same tables, from one or more
//! [`StudyResults`](crate::study::StudyResults).
//!
//! Every number in a table links to the cell that produced it (`#cell-ID`
//! anchors in the cell table). A chart is drawn only when its data exists;
//! the page says which charts were left out and why.

use std::collections::BTreeMap;
use std::fmt::Write;

use plotters::prelude::*;

use crate::study::{Cell, CellMetrics, StudyResults, median};

/// A chart: its title and the SVG.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// What it shows and how it was measured.
    pub caption: String,
    /// The `<svg>` element.
    pub svg: String,
    /// X axis name (the data table's header).
    pub x_label: String,
    /// Y axis name.
    pub y_label: String,
    /// The plotted points, each with the cells it came from.
    pub data: Vec<DataPoint>,
}

/// One line of a chart.
pub type Series = (String, Vec<(f64, f64)>);

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn bounds(series: &[Series], log_x: bool) -> Option<(f64, f64, f64, f64)> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut y1 = f64::NEG_INFINITY;
    for (x, y) in &pts {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y1 = y1.max(*y);
    }
    if x1 <= x0 {
        if log_x {
            x0 /= 2.0;
            x1 *= 2.0;
        } else {
            x0 -= 1.0;
            x1 += 1.0;
        }
    }
    let pad = if log_x { 1.0 } else { (x1 - x0) * 0.03 };
    if !log_x {
        x0 -= pad;
        x1 += pad;
    }
    Some((x0, x1, 0.0, if y1 > 0.0 { y1 * 1.1 } else { 1.0 }))
}

/// Draws a line chart (points joined by lines) as SVG. `log_x` draws the x
/// axis on a log scale. `None` if no series has a finite point.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Option<String> {
    let (x0, x1, y0, y1) = bounds(series, log_x)?;
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70);
        let style = |series_i: usize| PALETTE[series_i % PALETTE.len()];
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_label)
                    .y_desc(y_label)
                    .draw()?;
                for (i, (name, pts)) in series.iter().enumerate() {
                    let c = style(i);
                    let pts: Vec<(f64, f64)> = pts
                        .iter()
                        .copied()
                        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()?;
            }};
        }
        if log_x {
            body!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?);
        } else {
            body!(builder.build_cartesian_2d(x0..x1, y0..y1)?);
        }
        root.present()?;
        Ok(())
    })();
    drawn.ok()?;
    Some(svg)
}

/// Draws a bar chart with ± error bars (`(label, value, half-width)`).
pub fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64, f64)]) -> Option<String> {
    let bars: Vec<&(String, f64, f64)> = bars.iter().filter(|b| b.1.is_finite()).collect();
    if bars.is_empty() {
        return None;
    }
    let hi = bars
        .iter()
        .map(|b| b.1 + if b.2.is_finite() { b.2 } else { 0.0 })
        .fold(0.0_f64, f64::max)
        * 1.15;
    let lo = bars
        .iter()
        .map(|b| b.1 - if b.2.is_finite() { b.2 } else { 0.0 })
        .fold(0.0_f64, f64::min)
        * 1.15;
    let n = bars.len();
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), lo..hi.max(1e-9))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc(y_label)
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.35, 0.0), (x + 0.35, b.1)],
                PALETTE[i % PALETTE.len()].filled(),
            )
        }))?;
        chart.draw_series(
            bars.iter()
                .enumerate()
                .filter(|(_, b)| b.2.is_finite() && b.2 > 0.0)
                .map(|(i, b)| {
                    ErrorBar::new_vertical(i as f64, b.1 - b.2, b.1, b.1 + b.2, BLACK.filled(), 10)
                }),
        )?;
        root.present()?;
        Ok(())
    })();
    drawn.ok()?;
    Some(svg)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

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

/// One plotted point and the cells that produced it (the report links each
/// to its row of the cell table).
#[derive(Clone, Debug, PartialEq)]
pub struct DataPoint {
    /// The series (legend entry).
    pub series: String,
    /// X value.
    pub x: f64,
    /// Y value.
    pub y: f64,
    /// Ids of the cells the point is computed from (empty for model curves
    /// and engine reports without cells).
    pub cells: Vec<String>,
}

/// The series of a set of points, in name order, each sorted by x.
fn to_series(points: &[DataPoint]) -> Vec<Series> {
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        by.entry(p.series.clone()).or_default().push((p.x, p.y));
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (k, v)
        })
        .collect()
}

/// A matrix point: its cells (all repeats) and the median of a figure.
struct PointValue<'a> {
    first: &'a Cell,
    ids: Vec<String>,
    value: f64,
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

/// Goodput of a cell, requests/s: the load report's succeeded requests over
/// its window when the cell carries it, else completed requests/s less the
/// error share.
pub fn goodput(c: &Cell) -> f64 {
    if let Some(l) = &c.load {
        let ok = l.pointer("/requests/succeeded").and_then(|v| v.as_f64());
        let secs = l.pointer("/window/measured_s").and_then(|v| v.as_f64());
        if let (Some(ok), Some(secs)) = (ok, secs)
            && secs > 0.0
        {
            return ok / secs;
        }
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
    if BLIND_POLICIES.contains(&p) {
        format!("{p} (blind)")
    } else if p == "session" {
        "session (session-aware)".into()
    } else {
        p.to_string()
    }
}

/// Adds a line chart of `data` to `out`, or a note to `missing` when it has
/// no line of two points.
#[allow(clippy::too_many_arguments)]
fn push_line(
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
    title: &str,
    x_label: &str,
    y_label: &str,
    caption: &str,
    data: Vec<DataPoint>,
    why_missing: &str,
) {
    let series = to_series(&data);
    if !series.iter().any(|s| s.1.len() > 1) {
        missing.push(format!("{title}: {why_missing}"));
        return;
    }
    match line_chart(title, x_label, y_label, &series, false) {
        Some(svg) => out.push(Chart {
            title: title.into(),
            caption: caption.into(),
            svg,
            x_label: x_label.into(),
            y_label: y_label.into(),
            data,
        }),
        None => missing.push(format!("{title}: the chart could not be drawn")),
    }
}

/// The charts whose data exists in `r`, and a note for each left out.
pub fn charts(r: &StudyResults) -> (Vec<Chart>, Vec<String>) {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    let has = |f: &str| r.cells.iter().any(|c| c.factors.contains_key(f));
    let cluster = has("policy");
    let p50 = |c: &Cell| CellMetrics::at(&c.metrics.latency_us, 50.0).map(ms);
    let thr = |c: &Cell| Some(c.metrics.requests_per_s);

    // Latency against throughput per reuse level.
    if has("reuse") {
        let thr_pts = per_point(r, thr);
        let data: Vec<DataPoint> = per_point(r, p50)
            .into_iter()
            .filter_map(|p| {
                let x = thr_pts.iter().find(|t| t.first.point == p.first.point)?;
                Some(DataPoint {
                    series: series_key(p.first, &["clients", "rate"]),
                    x: x.value,
                    y: p.value,
                    cells: p.ids,
                })
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
    } else {
        missing.push("latency against throughput: no cell has a `reuse` factor".into());
    }

    // Throughput against reuse (a cluster study has its own figure below).
    if has("reuse") && !cluster {
        let mut best: BTreeMap<(String, String), PointValue> = BTreeMap::new();
        for p in per_point(r, thr) {
            let key = (
                series_key(p.first, &["clients", "rate", "reuse"]),
                p.first.factors.get("reuse").cloned().unwrap_or_default(),
            );
            if best.get(&key).is_none_or(|b| b.value < p.value) {
                best.insert(key, p);
            }
        }
        let data = best
            .into_iter()
            .filter_map(|((series, reuse), p)| {
                Some(DataPoint {
                    series,
                    x: reuse.parse::<f64>().ok()? * 100.0,
                    y: p.value,
                    cells: p.ids,
                })
            })
            .collect();
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
            Some(DataPoint {
                series: series_key(p.first, &["clients", "rate", "reuse"]),
                x: p.first.factors.get("reuse")?.parse::<f64>().ok()? * 100.0,
                y: p.value,
                cells: p.ids,
            })
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
    } else if !has("reuse") {
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
    if hdr_series.iter().any(|s| s.1.len() > 1)
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
        });
    } else {
        missing.push(
            "handshake percentile plot: no cell recorded three or more handshake percentiles"
                .into(),
        );
    }

    // The breakdown bar chart.
    let shares = r
        .engine_report
        .as_ref()
        .and_then(|e| e.get("shares"))
        .and_then(|s| s.as_array());
    if let Some(shares) = shares {
        let bars: Vec<(String, f64, f64)> = shares
            .iter()
            .filter_map(|s| {
                Some((
                    s.get("stage")?.as_str()?.to_string(),
                    s.get("fraction")?.as_f64()? * 100.0,
                    s.get("ci95").and_then(|v| v.as_f64()).unwrap_or(0.0) * 100.0,
                ))
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
            }),
            None => missing.push("breakdown: the engine report has no stage shares".into()),
        }
    } else {
        missing.push(
            "breakdown bar chart: no `breakdown` engine report (stage shares) in this document"
                .into(),
        );
    }

    // The cluster figure (seed 000 Fig. 9): throughput against reuse, blind
    // against session-aware dispatch, one chart per resumption mechanism.
    if cluster {
        let cells: Vec<&Cell> = r.cells.iter().collect();
        let mut drawn = 0;
        for (mechanism, _) in group_by(&cells, "mechanism") {
            let in_mech = |c: &Cell| {
                c.factors.get("mechanism").cloned().unwrap_or_default() == mechanism
                    && c.factors.contains_key("policy")
            };
            let mut best: BTreeMap<(String, String), PointValue> = BTreeMap::new();
            for p in per_point(r, |c| in_mech(c).then_some(c.metrics.requests_per_s)) {
                let key = (
                    format!(
                        "{}{}",
                        policy_label(p.first.factors.get("policy").map_or("", |s| s.as_str())),
                        {
                            let rest = series_key(
                                p.first,
                                &["clients", "rate", "reuse", "policy", "mechanism"],
                            );
                            if rest == "all" {
                                String::new()
                            } else {
                                format!(" {rest}")
                            }
                        }
                    ),
                    p.first.factors.get("reuse").cloned().unwrap_or_default(),
                );
                if best.get(&key).is_none_or(|b| b.value < p.value) {
                    best.insert(key, p);
                }
            }
            let data: Vec<DataPoint> = best
                .into_iter()
                .filter_map(|((series, reuse), p)| {
                    Some(DataPoint {
                        series,
                        x: reuse.parse::<f64>().ok()? * 100.0,
                        y: p.value,
                        cells: p.ids,
                    })
                })
                .collect();
            let title = if mechanism.is_empty() {
                "Cluster throughput against reuse, blind and session-aware dispatch".to_string()
            } else {
                format!("Cluster throughput against reuse ({mechanism})")
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
    } else {
        missing.push(
            "cluster figure (seed 000 Fig. 9): no cell has a `policy` factor (a cluster study \
             document, `seed000-cluster`)"
                .into(),
        );
    }

    // Goodput against offered load: cells with a `rate` factor.
    if has("rate") {
        let data = per_point(r, |c| c.factors.contains_key("rate").then(|| goodput(c)))
            .into_iter()
            .filter_map(|p| {
                Some(DataPoint {
                    series: series_key(p.first, &["rate", "clients"]),
                    x: p.first.factors.get("rate")?.parse::<f64>().ok()?,
                    y: p.value,
                    cells: p.ids,
                })
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
    } else {
        missing.push("goodput against offered load: no open-loop cells (no `rate` factor)".into());
    }

    // Seed 004's post-quantum sweep.
    crate::html_pq::charts(r, &mut out, &mut missing);

    // Model curves (seed 004's 300/(1−ρ), M/M/1).
    let mut by_chart: BTreeMap<String, Vec<&crate::study::Curve>> = BTreeMap::new();
    for c in &r.curves {
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
            });
        }
    }
    (out, missing)
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Links to the rows of `ids` in the cell table.
fn cell_links(prefix: &str, ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("<a href=\"#{prefix}cell-{}\">{}</a>", esc(id), esc(id)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("–".into(), fmt_num)
}

/// The columns of the cell table: (header, value).
fn cell_columns(c: &Cell) -> Vec<(&'static str, String)> {
    let m = &c.metrics;
    vec![
        ("req/s", fmt_num(m.requests_per_s)),
        ("conn/s", fmt_num(m.connections_per_s)),
        (
            "server CPU/req µs",
            if m.server_cpu_us_per_request > 0.0 {
                fmt_num(m.server_cpu_us_per_request)
            } else {
                "–".into()
            },
        ),
        (
            "p50 ms",
            fmt_opt(CellMetrics::at(&m.latency_us, 50.0).map(ms)),
        ),
        (
            "p99 ms",
            fmt_opt(CellMetrics::at(&m.latency_us, 99.0).map(ms)),
        ),
        (
            "full hs p50 ms",
            fmt_opt(CellMetrics::at(&m.handshake_full_us, 50.0).map(ms)),
        ),
        (
            "resumed hs p50 ms",
            fmt_opt(CellMetrics::at(&m.handshake_resumed_us, 50.0).map(ms)),
        ),
        (
            "full hs bytes",
            fmt_opt(m.full_bytes_in.zip(m.full_bytes_out).map(|(a, b)| a + b)),
        ),
        ("full hs RTTs", fmt_opt(m.full_round_trips)),
        ("reused %", fmt_num(m.reuse_achieved * 100.0)),
        ("client busy %", fmt_num(m.client_busy * 100.0)),
        ("errors", m.errors.to_string()),
    ]
}

/// Renders the HTML page of every document in `docs`.
pub fn render_html(docs: &[StudyResults]) -> String {
    let mut h = String::new();
    let title = docs
        .iter()
        .map(|d| d.study.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>tlslab report: {}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:0.85em}}\
         th,td{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
         th{{background:#f3f3f3}} td.l,th.l{{text-align:left}}\
         tr:target{{background:#ffef9f}} figure{{margin:1.5em 0}} figcaption{{font-size:0.85em;color:#555;max-width:720px}}\
         code{{background:#f5f5f5;padding:1px 3px}} .note{{color:#8a5a00}}\
         </style></head><body>\n<h1>tlslab report: {}</h1>\n",
        esc(&title),
        esc(&title)
    );
    for (di, d) in docs.iter().enumerate() {
        let prefix = if docs.len() > 1 {
            format!("d{di}-")
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<section id=\"{prefix}study\"><h2>{}</h2>",
            esc(&d.title)
        );
        if d.quick {
            let _ = writeln!(
                h,
                "<p class=\"note\"><b>Quick run</b> (<code>--quick</code>): short cells and few \
                 levels; figures are indicative, not the full study.</p>"
            );
        }
        if !d.complete {
            let _ = writeln!(
                h,
                "<p class=\"note\"><b>Incomplete</b>: the run was interrupted; resume it with \
                 <code>--resume</code>.</p>"
            );
        }
        if !d.seed.is_empty() {
            let _ = writeln!(h, "<p>Redoes: {}</p>", esc(&d.seed));
        }
        if !d.command_line.is_empty() {
            let _ = writeln!(
                h,
                "<p>Command: <code>{}</code></p>",
                esc(&d.command_line.join(" "))
            );
        }
        let e = &d.environment;
        if !e.cpu_model.is_empty() {
            let _ = writeln!(
                h,
                "<p>Machine: {} ({} CPUs usable), {}; {}; {}; {}{}.</p>",
                esc(&e.cpu_model),
                e.cores,
                esc(&e.kernel),
                esc(&e.tlslab_version),
                esc(&e.tls_library),
                esc(&e.placement),
                e.loadavg_1m
                    .map(|l| format!("; load average at start {l:.2} (a shared machine is noisy)"))
                    .unwrap_or_default()
            );
        }
        if !d.comparisons.is_empty() {
            let _ = writeln!(
                h,
                "<h3>Paper against today</h3><table><tr><th class=\"l\">quantity</th>\
                 <th>paper</th><th class=\"l\">where</th><th>today</th><th class=\"l\">measured</th>\
                 <th class=\"l\">why they differ</th></tr>"
            );
            for c in &d.comparisons {
                let today = match (c.today, c.cells.first()) {
                    (Some(v), Some(cell)) => format!(
                        "<a href=\"#{prefix}cell-{}\">{} {}</a>",
                        esc(cell),
                        fmt_num(v),
                        esc(&c.unit)
                    ),
                    (Some(v), None) => format!("{} {}", fmt_num(v), esc(&c.unit)),
                    (None, _) => "not measured".into(),
                };
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td>\
                     <td class=\"l\">{}{}</td><td class=\"l\">{}</td></tr>",
                    esc(&c.quantity),
                    esc(&c.paper),
                    esc(&c.source),
                    today,
                    esc(&c.measured),
                    if c.cells.len() > 1 {
                        format!("; cells {}", cell_links(&prefix, &c.cells))
                    } else {
                        String::new()
                    },
                    esc(&c.reason)
                );
            }
            let _ = writeln!(h, "</table>");
        }
        if !d.notes.is_empty() {
            let _ = writeln!(
                h,
                "<p>Notes of the run (what was not run, and why):</p><ul>"
            );
            for n in &d.notes {
                let _ = writeln!(h, "<li>{}</li>", esc(n));
            }
            let _ = writeln!(h, "</ul>");
        }
        let (charts, missing) = charts(d);
        for (ci, c) in charts.iter().enumerate() {
            let _ = writeln!(
                h,
                "<figure class=\"chart\" id=\"{prefix}chart-{}\">{}<figcaption><b>{}</b>. {}</figcaption>",
                ci + 1,
                c.svg,
                esc(&c.title),
                esc(&c.caption)
            );
            let _ = write!(
                h,
                "<details><summary>Data of this chart ({} points; each links to its cells)</summary>\
                 <table><tr><th class=\"l\">series</th><th>{}</th><th>{}</th><th class=\"l\">cells</th></tr>",
                c.data.len(),
                esc(&c.x_label),
                esc(&c.y_label)
            );
            for p in &c.data {
                let y = match p.cells.first() {
                    Some(id) => {
                        format!("<a href=\"#{prefix}cell-{}\">{}</a>", esc(id), fmt_num(p.y))
                    }
                    None => fmt_num(p.y),
                };
                let _ = write!(
                    h,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{y}</td><td class=\"l\">{}</td></tr>",
                    esc(&p.series),
                    fmt_num(p.x),
                    cell_links(&prefix, &p.cells)
                );
            }
            let _ = writeln!(h, "</table></details></figure>");
        }
        if !missing.is_empty() {
            let _ = writeln!(h, "<p>Charts not drawn:</p><ul>");
            for m in &missing {
                let _ = writeln!(h, "<li>{}</li>", esc(m));
            }
            let _ = writeln!(h, "</ul>");
        }
        if !d.cells.is_empty() {
            let factor_names: Vec<String> = {
                let mut v: Vec<String> = Vec::new();
                for c in &d.cells {
                    for k in c.factors.keys() {
                        if !v.contains(k) {
                            v.push(k.clone());
                        }
                    }
                }
                v
            };
            let _ = write!(
                h,
                "<h3 id=\"{prefix}cells\">Appendix: cells</h3><p>Every cell, in run order, with the \
                 command lines that reproduce it. Throughput and latency are \
                 client-observed over the cell's window; server CPU is server-observed over \
                 the whole cell.</p><table><tr><th class=\"l\">cell</th>"
            );
            for f in &factor_names {
                let _ = write!(h, "<th class=\"l\">{}</th>", esc(f));
            }
            for (name, _) in cell_columns(&d.cells[0]) {
                let _ = write!(h, "<th>{}</th>", esc(name));
            }
            let _ = writeln!(h, "<th class=\"l\">command</th></tr>");
            for c in &d.cells {
                let _ = write!(
                    h,
                    "<tr id=\"{prefix}cell-{}\"><td class=\"l\">{}</td>",
                    esc(&c.id),
                    esc(&c.id)
                );
                for f in &factor_names {
                    let _ = write!(
                        h,
                        "<td class=\"l\">{}</td>",
                        esc(c.factors.get(f).map_or("", |s| s.as_str()))
                    );
                }
                for (_, v) in cell_columns(c) {
                    let _ = write!(h, "<td>{v}</td>");
                }
                let _ = writeln!(
                    h,
                    "<td class=\"l\"><code>{}</code></td></tr>",
                    esc(&c.command_line)
                );
            }
            let _ = writeln!(h, "</table>");
        }
        let _ = writeln!(h, "</section>");
    }
    let _ = writeln!(
        h,
        "<p><small>Generated by tlslab {}. Self-contained: no script, no network fetch.</small></p>\
         </body></html>",
        env!("CARGO_PKG_VERSION")
    );
    h
}

/// Renders the Markdown version (tables, no charts).
pub fn render_markdown(docs: &[StudyResults]) -> String {
    let mut s = String::new();
    for d in docs {
        let _ = writeln!(s, "# {}\n", d.title);
        if d.quick {
            let _ = writeln!(s, "**Quick run**: short cells, few levels.\n");
        }
        if !d.seed.is_empty() {
            let _ = writeln!(s, "Redoes: {}\n", d.seed);
        }
        if !d.command_line.is_empty() {
            let _ = writeln!(s, "Command: `{}`\n", d.command_line.join(" "));
        }
        let e = &d.environment;
        if !e.cpu_model.is_empty() {
            let _ = writeln!(
                s,
                "Machine: {} ({} CPUs usable), {}; {}; {}.\n",
                e.cpu_model, e.cores, e.kernel, e.tls_library, e.placement
            );
        }
        if !d.comparisons.is_empty() {
            let _ = writeln!(
                s,
                "## Paper against today\n\n| quantity | paper | where | today | measured | why they differ |\n|---|---:|---|---:|---|---|"
            );
            for c in &d.comparisons {
                let today = c.today.map_or("not measured".into(), |v| {
                    let links: Vec<String> = c
                        .cells
                        .iter()
                        .map(|id| format!("[{id}](#cell-{id})"))
                        .collect();
                    format!("{} {} ({})", fmt_num(v), c.unit, links.join(", "))
                });
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    c.quantity, c.paper, c.source, today, c.measured, c.reason
                );
            }
            let _ = writeln!(s);
        }
        let (charts, missing) = charts(d);
        if !charts.is_empty() {
            let _ = writeln!(
                s,
                "## Charts\n\nThe HTML report (`--html`) draws these; here are their data, \
                 each value linked to the cells it came from.\n"
            );
        }
        for c in &charts {
            let _ = writeln!(
                s,
                "### {}\n\n{}\n\n| series | {} | {} | cells |\n|---|---:|---:|---|",
                c.title, c.caption, c.x_label, c.y_label
            );
            for p in &c.data {
                let y = match p.cells.first() {
                    Some(id) => format!("[{}](#cell-{id})", fmt_num(p.y)),
                    None => fmt_num(p.y),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {y} | {} |",
                    p.series,
                    fmt_num(p.x),
                    p.cells
                        .iter()
                        .map(|id| format!("[{id}](#cell-{id})"))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            let _ = writeln!(s);
        }
        if !missing.is_empty() {
            let _ = writeln!(s, "Charts not drawn:\n");
            for m in &missing {
                let _ = writeln!(s, "- {m}");
            }
            let _ = writeln!(s);
        }
        if !d.cells.is_empty() {
            let _ = writeln!(s, "## Appendix: cells\n");
            let cols = cell_columns(&d.cells[0]);
            let _ = writeln!(
                s,
                "| cell | factors | {} | command |\n|---|---|{}---|",
                cols.iter().map(|c| c.0).collect::<Vec<_>>().join(" | "),
                "---:|".repeat(cols.len())
            );
            for c in &d.cells {
                let f: Vec<String> = c.factors.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = writeln!(
                    s,
                    "| <a id=\"cell-{}\"></a>{} | {} | {} | `{}` |",
                    c.id,
                    c.id,
                    f.join(" "),
                    cell_columns(c)
                        .into_iter()
                        .map(|c| c.1)
                        .collect::<Vec<_>>()
                        .join(" | "),
                    c.command_line.replace('`', "'")
                );
            }
            let _ = writeln!(s);
        }
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::study::{Comparison, Curve, Environment, STUDY_KIND, STUDY_SCHEMA_VERSION};

    fn cell(id: &str, point: &str, factors: &[(&str, &str)], rps: f64, p50_us: u64) -> Cell {
        Cell {
            id: id.into(),
            point: point.into(),
            factors: factors
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            repeat: 1,
            order: 0,
            command_line: format!("tlslab load https://127.0.0.1:1/ # {id}"),
            started_unix_ms: 0,
            metrics: CellMetrics {
                requests_per_s: rps,
                connections_per_s: rps,
                window_s: 2.0,
                requests: (rps * 2.0) as u64,
                server_cpu_us_per_request: 1e6 / rps,
                latency_us: vec![(50.0, p50_us), (90.0, p50_us * 2), (99.0, p50_us * 4)],
                handshake_full_us: vec![(50.0, 900), (90.0, 1500), (99.0, 3000), (99.9, 5000)],
                handshake_resumed_us: vec![(50.0, 200), (90.0, 300), (99.0, 700)],
                ..CellMetrics::default()
            },
            load: None,
        }
    }

    fn doc(study: &str, cells: Vec<Cell>) -> StudyResults {
        StudyResults {
            kind: STUDY_KIND.into(),
            schema_version: STUDY_SCHEMA_VERSION,
            study: study.into(),
            title: format!("{study}: hand-built test document"),
            seed: String::new(),
            quick: true,
            command_line: vec!["tlslab".into(), "experiment".into()],
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
        }
    }

    /// A seed000-reuse-like document: reuse × clients × 2 repeats, plus
    /// open-loop cells, a breakdown, a comparison and a model curve.
    pub(crate) fn sample_study() -> StudyResults {
        let mut cells = Vec::new();
        for reuse in ["0", "0.5", "1"] {
            for clients in ["4", "16"] {
                for rep in 1..=2 {
                    let point = format!("reuse{reuse}-c{clients}");
                    let base = 1000.0 * (1.0 + reuse.parse::<f64>().unwrap() * 3.0);
                    let rps = base * if clients == "16" { 1.5 } else { 1.0 } + rep as f64;
                    let mut c = cell(
                        &format!("{point}-r{rep}"),
                        &point,
                        &[("reuse", reuse), ("clients", clients), ("version", "1.3")],
                        rps,
                        if clients == "16" { 4000 } else { 1500 },
                    );
                    c.repeat = rep;
                    cells.push(c);
                }
            }
        }
        for rate in ["100", "200", "400"] {
            cells.push(cell(
                &format!("rate{rate}-r1"),
                &format!("rate{rate}"),
                &[("rate", rate)],
                rate.parse::<f64>().unwrap().min(300.0),
                1000,
            ));
        }
        let mut d = doc("seed000-reuse", cells);
        d.comparisons.push(Comparison {
            quantity: "throughput gain at 100 % reuse".into(),
            paper: "about 2.5x".into(),
            source: "seed 000 Fig. 4".into(),
            today: Some(4.0),
            unit: "x".into(),
            measured: "client-observed req/s ratio".into(),
            cells: vec!["reuse1-c16-r1".into(), "reuse0-c16-r1".into()],
            reason: "ECDHE instead of RSA key transport; AES-NI".into(),
        });
        d.engine_report = Some(serde_json::json!({
            "shares": [
                {"stage": "sign", "fraction": 0.4, "ci95": 0.05},
                {"stage": "kx", "fraction": 0.2, "ci95": 0.02}
            ]
        }));
        d.curves.push(Curve {
            name: "300/(1-ρ)".into(),
            chart: "Response time model".into(),
            x: "ρ".into(),
            y: "ms".into(),
            points: vec![(0.1, 333.0), (0.5, 600.0), (0.9, 3000.0)],
        });
        d
    }

    /// A seed000-cluster-like document: policy × reuse × mechanism.
    pub(crate) fn sample_cluster() -> StudyResults {
        let mut cells = Vec::new();
        for mech in ["tls12-id", "tls13-ticket"] {
            for policy in ["round-robin", "session"] {
                for reuse in ["0", "0.4", "0.8", "1"] {
                    let r: f64 = reuse.parse().unwrap();
                    let rps = if policy == "session" {
                        3000.0 * (1.0 + 5.0 * r)
                    } else {
                        3000.0 * (1.0 + 0.3 * r)
                    };
                    let point = format!("{mech}-{policy}-reuse{reuse}");
                    cells.push(cell(
                        &format!("{point}-r1"),
                        &point,
                        &[("mechanism", mech), ("policy", policy), ("reuse", reuse)],
                        rps,
                        2000,
                    ));
                }
            }
        }
        doc("seed000-cluster", cells)
    }

    /// Every `href="#x"` has an `id="x"`, and nothing is fetched.
    pub(crate) fn check_links(html: &str) {
        let ids: std::collections::HashSet<&str> = html
            .split("id=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .collect();
        let mut n = 0;
        for attr in ["href=\"", "src=\""] {
            for s in html.split(attr).skip(1) {
                let v = s.split('"').next().unwrap();
                if let Some(anchor) = v.strip_prefix('#') {
                    assert!(ids.contains(anchor), "link #{anchor} has no target");
                    n += 1;
                } else {
                    assert!(v.starts_with("data:"), "external reference {attr}{v}");
                }
            }
        }
        assert!(n > 0, "no internal links at all");
        for bad in [
            "<script",
            "<link rel=\"stylesheet",
            "@import",
            "url(http",
            "<iframe",
            "<img",
        ] {
            assert!(!html.contains(bad), "the page contains {bad}");
        }
    }

    #[test]
    fn study_report_has_every_chart_and_resolving_links() {
        let d = sample_study();
        let (charts, missing) = charts(&d);
        let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
        for want in [
            "Latency against throughput, per reuse level",
            "Throughput against session reuse",
            "Server CPU per request against session reuse",
            "Handshake percentiles",
            "Breakdown",
            "Goodput against offered load",
            "Response time model",
        ] {
            assert!(titles.contains(&want), "{want} missing from {titles:?}");
        }
        assert!(
            missing.iter().any(|m| m.starts_with("cluster figure")),
            "{missing:?}"
        );
        for c in &charts {
            assert!(c.svg.starts_with("<svg"), "{}", c.title);
            assert!(!c.data.is_empty(), "{}", c.title);
        }
        // Throughput against reuse: best client count (16) per reuse level,
        // median of the two repeats, linked to both.
        let thr = charts
            .iter()
            .find(|c| c.title == "Throughput against session reuse")
            .unwrap();
        let at0 = thr.data.iter().find(|p| p.x == 0.0).unwrap();
        assert_eq!(at0.y, 1501.5);
        assert_eq!(at0.cells, vec!["reuse0-c16-r1", "reuse0-c16-r2"]);
        let html = render_html(std::slice::from_ref(&d));
        check_links(&html);
        for c in &d.cells {
            assert!(html.contains(&format!("id=\"cell-{}\"", c.id)), "{}", c.id);
        }
        assert!(html.contains("Appendix: cells"));
        assert!(html.contains("ECDHE instead of RSA key transport"));
        assert!(html.contains("about 2.5x"));
        assert_eq!(html.matches("<svg").count(), charts.len());
    }

    #[test]
    fn cluster_document_draws_blind_against_session_aware_per_mechanism() {
        let d = sample_cluster();
        let (charts, missing) = charts(&d);
        let cluster: Vec<&Chart> = charts
            .iter()
            .filter(|c| c.title.starts_with("Cluster throughput"))
            .collect();
        assert_eq!(cluster.len(), 2, "{missing:?}");
        assert!(cluster[0].title.contains("tls12-id"));
        let series: Vec<&str> = cluster[0].data.iter().map(|p| p.series.as_str()).collect();
        assert!(series.contains(&"round-robin (blind)"));
        assert!(series.contains(&"session (session-aware)"));
        let s100 = cluster[0]
            .data
            .iter()
            .find(|p| p.series.starts_with("session") && p.x == 100.0)
            .unwrap();
        assert_eq!(s100.y, 18000.0);
        assert_eq!(s100.cells, vec!["tls12-id-session-reuse1-r1"]);
        assert!(svg_has_lines(&cluster[0].svg));
        // The generic throughput-against-reuse chart is not drawn for it.
        assert!(
            !charts
                .iter()
                .any(|c| c.title == "Throughput against session reuse")
        );
        // Two documents: anchors are prefixed per document.
        let html = render_html(&[sample_study(), d]);
        check_links(&html);
        assert!(html.contains("id=\"d1-cell-tls13-ticket-session-reuse1-r1\""));
    }

    fn svg_has_lines(svg: &str) -> bool {
        svg.contains("<polyline") || svg.contains("<path")
    }

    #[test]
    fn absent_data_is_a_note_not_a_chart() {
        let d = doc("empty", vec![]);
        let (charts, missing) = charts(&d);
        assert!(charts.is_empty());
        assert!(missing.len() >= 5, "{missing:?}");
        let html = render_html(&[d]);
        assert!(html.contains("Charts not drawn"));
        assert!(!html.contains("<svg"));
        let md = render_markdown(&[sample_study()]);
        assert!(md.contains("## Appendix: cells"));
        assert!(md.contains("<a id=\"cell-reuse0-c4-r1\"></a>"));
        assert!(md.contains("(#cell-reuse1-c16-r1)"));
    }

    #[test]
    fn line_chart_is_svg_with_the_series_name() {
        let svg = line_chart(
            "t",
            "x",
            "y",
            &[("alpha".into(), vec![(1.0, 2.0), (2.0, 3.0)])],
            false,
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50.min(svg.len())]);
        assert!(svg.contains("alpha"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        assert!(line_chart("t", "x", "y", &[("e".into(), vec![])], false).is_none());
        let log = line_chart(
            "t",
            "x",
            "y",
            &[("l".into(), vec![(2.0, 1.0), (100.0, 5.0)])],
            true,
        );
        assert!(log.is_some());
    }

    #[test]
    fn bar_chart_draws_bars() {
        let svg = bar_chart(
            "b",
            "%",
            &[
                ("sig".into(), 40.0, 3.0),
                ("kx".into(), 20.0, f64::INFINITY),
            ],
        )
        .unwrap();
        assert!(svg.contains("<rect"));
        assert!(svg.contains("sig"));
    }
}
