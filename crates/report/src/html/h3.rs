//! Charts of `quic-vs-tcp` (cells with a `transport` factor): server CPU
//! per request over QUIC and TCP+TLS 1.3 for each connection pattern, and
//! time to first byte against RTT with the protocol arithmetic's lines
//! (the study's curves on [`QUIC_TTFB_CHART`]) beside the measured points.

use super::cells::med;
use super::svg::{Chart, DataPoint, line_chart, push_bars, to_series};
use crate::study::{Cell, CellMetrics, StudyResults};

/// The chart the study's arithmetic curves belong to: drawn here with the
/// measured points, not as a model chart of their own.
pub const QUIC_TTFB_CHART: &str =
    "Time to first byte against RTT, HTTP/3 over QUIC and TCP+TLS 1.3";

fn factor<'a>(c: &'a Cell, f: &str) -> &'a str {
    c.factors.get(f).map_or("", String::as_str)
}

fn label(transport: &str) -> &'static str {
    match transport {
        "quic" => "QUIC",
        _ => "TCP+TLS 1.3",
    }
}

fn cpu_chart(cells: &[&Cell], out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let title = "Server CPU per request, HTTP/3 over QUIC against TCP+TLS 1.3";
    let patterns: [(&str, &str, &str); 4] = [
        ("full", "reuse", "0"),
        ("50 % resumed", "reuse", "0.5"),
        ("resumed", "reuse", "1"),
        ("keep-alive", "requests_per_conn", "0"),
    ];
    let mut rows: Vec<(String, f64, Vec<String>)> = Vec::new();
    for (name, f, level) in patterns {
        for t in ["tcp", "quic"] {
            let keep = |c: &Cell| {
                factor(c, "transport") == t
                    && factor(c, f) == level
                    && !c.factors.contains_key("rtt_ms")
            };
            let cpu = |c: &Cell| {
                (c.metrics.server_cpu_us_per_request > 0.0)
                    .then_some(c.metrics.server_cpu_us_per_request)
            };
            if let Some((v, ids)) = med(cells, keep, cpu) {
                rows.push((format!("{name}: {}", label(t)), v, ids));
            }
        }
    }
    push_bars(
        out,
        missing,
        (
            title,
            "Server-observed: the server worker's CPU time over the whole cell divided \
                      by the requests it served (median over repeats); a new connection per \
                      request at 0, 50 and 100 % reuse, and keep-alive. Same certificate, group, \
                      provider and server for both transports; the document's comparisons give \
                      the QUIC/TCP ratios.",
        ),
        (
            "connection pattern and transport",
            "server CPU per request, µs",
        ),
        rows,
        "no cells with server CPU",
    );
}

fn ttfb_chart(r: &StudyResults, cells: &[&Cell], out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let rtt_cells: Vec<&Cell> = cells
        .iter()
        .copied()
        .filter(|c| c.factors.contains_key("rtt_ms"))
        .collect();
    let mut data = Vec::new();
    for t in ["tcp", "quic"] {
        for kind in ["full", "resumed", "0-rtt"] {
            let mut rtts: Vec<f64> = rtt_cells
                .iter()
                .filter(|c| factor(c, "transport") == t && factor(c, "kind") == kind)
                .filter_map(|c| factor(c, "rtt_ms").parse().ok())
                .collect();
            rtts.sort_by(f64::total_cmp);
            rtts.dedup();
            for rtt in rtts {
                let keep = |c: &Cell| {
                    factor(c, "transport") == t
                        && factor(c, "kind") == kind
                        && factor(c, "rtt_ms").parse::<f64>().ok() == Some(rtt)
                };
                let ms = |c: &Cell| {
                    CellMetrics::at(&c.metrics.latency_us, 50.0).map(|us| us as f64 / 1000.0)
                };
                if let Some((v, ids)) = med(&rtt_cells, keep, ms) {
                    data.push(DataPoint {
                        series: format!("{} {kind} (measured)", label(t)),
                        x: rtt,
                        y: v,
                        cells: ids,
                    });
                }
            }
        }
    }
    if data.is_empty() {
        missing.push(format!(
            "{QUIC_TTFB_CHART}: no cells across the path (that part needs root; see the notes)"
        ));
        return;
    }
    for c in r.curves.iter().filter(|c| c.chart == QUIC_TTFB_CHART) {
        data.extend(c.points.iter().map(|&(x, y)| DataPoint {
            series: c.name.clone(),
            x,
            y,
            cells: vec![],
        }));
    }
    let (x, y) = ("round-trip time, ms", "connection start to first byte, ms");
    match line_chart(QUIC_TTFB_CHART, x, y, &to_series(&data), false) {
        Some(svg) => out.push(Chart {
            title: QUIC_TTFB_CHART.into(),
            caption: "Client-observed median from a connection's start to the response (100 \
                      bytes, one packet), one client, across the packet-level path (tlslab path, \
                      delay RTT/2 each way), beside the protocol arithmetic: TCP+TLS 1.3 full = \
                      3 RTT (connect, handshake, request), TCP+TLS 1.3 0-RTT = 2 RTT, QUIC full = \
                      2 RTT, QUIC 0-RTT = 1 RTT."
                .into(),
            svg,
            x_label: x.into(),
            y_label: y.into(),
            data,
            columns: Vec::new(),
        }),
        None => missing.push(format!("{QUIC_TTFB_CHART}: the chart could not be drawn")),
    }
}

/// Adds the study's charts to `out` (or a note to `missing`).
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let cells: Vec<&Cell> = r
        .cells
        .iter()
        // Not seed004-handshake's post-quantum QUIC cells (`sweep = pq`,
        // charted by `super::pq`), nor seed003-table2's HTTP/3 cells
        // (`transport = h3`, charted by `super::table2`), nor seed001's
        // QUIC column (`configuration`, charted by `super::breakdown_pair`),
        // nor seed002's overload points (`arm`, charted by
        // `super::overload_pair`), nor seed000-cluster-h3's arms (`policy`,
        // charted by the cluster figure).
        .filter(|c| {
            matches!(factor(c, "transport"), "quic" | "tcp")
                && !["sweep", "configuration", "arm", "policy"]
                    .iter()
                    .any(|f| c.factors.contains_key(*f))
        })
        .collect();
    if cells.is_empty() {
        return;
    }
    cpu_chart(&cells, out, missing);
    ttfb_chart(r, &cells, out, missing);
}
