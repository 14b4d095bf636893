//! Formatting shared by the HTML page and the Markdown version: numbers,
//! escapes, links to cells and the columns of the cell table.

use crate::interval::median;
use crate::study::{Cell, CellMetrics};

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

pub(super) fn fmt_num(v: f64) -> String {
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

/// Links shown inline in a table cell; more are folded.
pub(super) const INLINE_LINKS: usize = 3;

/// `links` joined by `sep`, folded under a `<details>` naming how many
/// cells they are when there are more than [`INLINE_LINKS`] (a comparison
/// may rest on 88 cells), so a table cell stays one line.
pub(super) fn fold_links(links: &[String], sep: &str) -> String {
    let joined = links.join(sep);
    if links.len() > INLINE_LINKS {
        format!(
            "<details><summary>{} cells</summary>{joined}</details>",
            links.len()
        )
    } else {
        joined
    }
}

/// Links to the rows of `ids` in the cell table.
pub(super) fn cell_links(prefix: &str, ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("<a href=\"#{prefix}cell-{}\">{}</a>", esc(id), esc(id)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("–".into(), fmt_num)
}

/// The columns of the cell table: (header, value).
pub(super) fn cell_columns(c: &Cell) -> Vec<(&'static str, String)> {
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

/// Median of `f` over `cells` matching `keep`, and their ids.
pub(crate) fn med(
    cells: &[&Cell],
    keep: impl Fn(&Cell) -> bool,
    f: impl Fn(&Cell) -> Option<f64>,
) -> Option<(f64, Vec<String>)> {
    let sel: Vec<&&Cell> = cells.iter().filter(|c| keep(c) && f(c).is_some()).collect();
    let v: Vec<f64> = sel.iter().filter_map(|c| f(c)).collect();
    (!v.is_empty()).then(|| (median(&v), sel.iter().map(|c| c.id.clone()).collect()))
}
