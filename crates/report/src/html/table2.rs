//! The chart of `seed003-table2`: seed 003's Table 2 against RTT across
//! the packet-level path, where T is a real connect. For each TLS version,
//! W (T + Snc + H: a new connection's connect, full handshake and GET) and
//! C (T + Sc + H: a cached one's); over HTTP/3 (cells with `transport =
//! h3`) the same with no T, and the 0-RTT GET's first byte from the
//! resumed connection's first packet.

use super::cells::med;
use super::svg::{Chart, DataPoint, line_chart, to_series};
use crate::study::{Cell, CellMetrics, StudyResults};

/// The chart's title.
pub const TABLE2_CHART: &str =
    "Seed 003's Table 2 against RTT: new and cached connections, TCP+TLS and HTTP/3";

fn factor<'a>(c: &'a Cell, f: &str) -> &'a str {
    c.factors.get(f).map_or("", String::as_str)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// W and C of a cell, ms: T (0 over HTTP/3) + the handshake + the GET.
fn w_c(c: &Cell, h3: bool) -> Option<(f64, f64)> {
    let m = &c.metrics;
    let t = match m.connect_p50_us {
        Some(t) => ms(t),
        None if h3 => 0.0,
        None => return None,
    };
    let h = ms(CellMetrics::at(&m.latency_us, 50.0)?);
    let snc = ms(CellMetrics::at(&m.handshake_full_us, 50.0)?);
    let sc = CellMetrics::at(&m.handshake_resumed_us, 50.0).map(ms);
    Some((t + snc + h, sc.map_or(f64::NAN, |sc| t + sc + h)))
}

/// Adds the chart to `out` (or a note to `missing`) for a
/// `seed003-table2` document.
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let cells: Vec<&Cell> = r
        .cells
        .iter()
        .filter(|c| factor(c, "path") == "packet" && c.factors.contains_key("rtt_ms"))
        .collect();
    let mut data = Vec::new();
    let arms = [("1.2", false), ("1.3", false), ("1.3", true)];
    for (version, h3) in arms {
        let name = if h3 {
            "HTTP/3".to_string()
        } else {
            format!("TLS {version}")
        };
        let mine =
            |c: &Cell| factor(c, "version") == version && (factor(c, "transport") == "h3") == h3;
        let mut rtts: Vec<f64> = cells
            .iter()
            .filter(|c| mine(c))
            .filter_map(|c| factor(c, "rtt_ms").parse().ok())
            .collect();
        rtts.sort_by(f64::total_cmp);
        rtts.dedup();
        for rtt in rtts {
            let at = |c: &Cell| mine(c) && factor(c, "rtt_ms").parse::<f64>().ok() == Some(rtt);
            let w = |c: &Cell| w_c(c, h3).map(|(w, _)| w);
            let cc = |c: &Cell| w_c(c, h3).map(|(_, c)| c).filter(|v| v.is_finite());
            let zero = |c: &Cell| c.metrics.ttfb_p50_us.filter(|_| h3).map(ms);
            for (what, f) in [
                ("W (new)", &w as &dyn Fn(&Cell) -> Option<f64>),
                ("C (cached)", &cc),
                ("0-RTT GET first byte", &zero),
            ] {
                if let Some((y, ids)) = med(&cells, at, f) {
                    data.push(DataPoint {
                        series: format!("{name} {what}"),
                        x: rtt,
                        y,
                        cells: ids,
                    });
                }
            }
        }
    }
    if data.is_empty() {
        missing.push(format!(
            "{TABLE2_CHART}: no cells across the packet-level path (`--path packet`, root; the \
             relay's T is local, so its W and C are not drawn)"
        ));
        return;
    }
    let (x, y) = ("round-trip time, ms", "median time, ms");
    match line_chart(TABLE2_CHART, x, y, &to_series(&data), false) {
        Some(svg) => out.push(Chart {
            title: TABLE2_CHART.into(),
            caption: "Client-observed by tlslab probe across the packet-level path (tlslab \
                      path, delay RTT/2 each way), medians over each cell's probes of a 4 KiB \
                      GET. W = T + Snc + H (connect, full handshake, GET to the last byte) and \
                      C = T + Sc + H (an accepted resumption), as seed 003's Table 2; over \
                      HTTP/3 there is no connect (T = 0) and H is a GET after the handshake, \
                      and the 0-RTT GET's first byte is timed from the resumed connection's \
                      first packet."
                .into(),
            svg,
            x_label: x.into(),
            y_label: y.into(),
            data,
            columns: Vec::new(),
        }),
        None => missing.push(format!("{TABLE2_CHART}: the chart could not be drawn")),
    }
}
