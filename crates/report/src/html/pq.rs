//! Charts of the post-quantum sweep of `seed004-handshake` (cells with the
//! factor `sweep = pq`): handshake bytes per certificate chain beside seed
//! 004's "about 2 KB", server CPU per full handshake with the signature's
//! part, and time to first byte against RTT beside its "4 RTTs".

use super::cells::med;
use super::svg::{Chart, DataPoint, Series, line_chart, push_bars};
use crate::study::{Cell, CellMetrics, StudyResults};

fn pq_cells(r: &StudyResults) -> Vec<&Cell> {
    r.cells
        .iter()
        .filter(|c| c.factors.get("sweep").map(String::as_str) == Some("pq"))
        .collect()
}

fn factor<'a>(c: &'a Cell, f: &str) -> &'a str {
    c.factors.get(f).map_or("", String::as_str)
}

/// The chains in first-run order.
fn chains(cells: &[&Cell]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cells {
        let ch = factor(c, "chain").to_string();
        if !out.contains(&ch) {
            out.push(ch);
        }
    }
    out
}

fn full_bytes(c: &Cell) -> Option<f64> {
    Some(c.metrics.full_bytes_in? + c.metrics.full_bytes_out?)
}

fn ttfb_ms(c: &Cell) -> Option<f64> {
    let hs = CellMetrics::at(&c.metrics.handshake_full_us, 50.0)?;
    Some((c.metrics.connect_p50_us? + hs + c.metrics.ttfb_p50_us?) as f64 / 1000.0)
}

/// Adds the sweep's charts to `out` (or a note to `missing`).
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let cells = pq_cells(r);
    if cells.is_empty() {
        return;
    }
    let loopback = |c: &Cell| !c.factors.contains_key("rtt_ms");
    for (comp, kx) in [("none", "X25519MLKEM768"), ("brotli", "X25519MLKEM768")] {
        let mut rows = vec![("seed 004 (2000)".to_string(), 2000.0, Vec::<String>::new())];
        for ch in chains(&cells) {
            let keep = |c: &Cell| {
                loopback(c)
                    && factor(c, "chain") == ch
                    && factor(c, "compression") == comp
                    && factor(c, "kx") == kx
            };
            if let Some((v, ids)) = med(&cells, keep, full_bytes) {
                rows.push((ch, v, ids));
            }
        }
        push_bars(
            out,
            missing,
            (
                &format!("Bytes per full TLS 1.3 handshake, {kx}, certificate compression {comp}"),
                "Client-observed socket bytes from the ClientHello to the end of the handshake, \
             median over repeats of each cell's mean; each chain is a leaf and an intermediate \
             (leaf/intermediate when they differ). The first bar is seed 004's \"adds ~2KBs\" \
             (SSL 3.0, RSA-1024).",
            ),
            ("chain (leaf/intermediate)", "bytes, both ways"),
            rows,
            "no data",
        );
    }
    let mut rows = Vec::new();
    for ch in chains(&cells) {
        let keep = |c: &Cell| {
            loopback(c)
                && factor(c, "chain") == ch
                && factor(c, "compression") == "none"
                && factor(c, "kx") == "X25519MLKEM768"
        };
        if let Some((v, ids)) = med(&cells, keep, |c| {
            (c.metrics.server_cpu_us_per_request > 0.0)
                .then_some(c.metrics.server_cpu_us_per_request)
        }) {
            rows.push((format!("{ch}: all"), v, ids.clone()));
        }
        if let Some((v, ids)) = med(&cells, keep, |c| c.metrics.server_sign_us) {
            rows.push((format!("{ch}: signature"), v, ids));
        }
    }
    push_bars(
        out,
        missing,
        (
            "Server CPU per full handshake and its signature, X25519MLKEM768",
            "Server-observed worker CPU per request (one full TLS 1.3 handshake each) and the \
         CertificateVerify signature's time from the server's crypto meter. Seed 004 had \
         ~300 ms (session key generation and 1024-bit RSA decryption) on a 1999 server.",
        ),
        ("chain (leaf/intermediate)", "µs"),
        rows,
        "no data",
    );
    // Time to first byte against RTT, one chart per path kind.
    let rtt_cells: Vec<&Cell> = cells.iter().copied().filter(|c| !loopback(c)).collect();
    let mut kinds: Vec<&str> = rtt_cells.iter().map(|c| path_kind(c)).collect();
    kinds.sort_unstable();
    kinds.dedup();
    // The relay first.
    kinds.reverse();
    if kinds.is_empty() {
        missing.push("time to first byte against RTT: no cells through a path".into());
    }
    for kind in kinds {
        let of_kind: Vec<&Cell> = rtt_cells
            .iter()
            .copied()
            .filter(|c| path_kind(c) == kind)
            .collect();
        ttfb_chart(&of_kind, kind, out, missing);
    }
}

/// A round-trip cell's path: `relay` (also in documents from before
/// `--path`) or `packet`.
fn path_kind(c: &Cell) -> &str {
    c.factors.get("path").map_or("relay", String::as_str)
}

/// The chart of time to first byte against RTT over one path kind.
fn ttfb_chart(rtt_cells: &[&Cell], kind: &str, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let mut data = Vec::new();
    let mut rtts: Vec<f64> = Vec::new();
    for ch in chains(rtt_cells) {
        let mut levels: Vec<f64> = rtt_cells
            .iter()
            .filter(|c| factor(c, "chain") == ch)
            .filter_map(|c| factor(c, "rtt_ms").parse().ok())
            .collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        for rtt in levels {
            let keep = |c: &Cell| {
                factor(c, "chain") == ch && factor(c, "rtt_ms").parse::<f64>().ok() == Some(rtt)
            };
            if let Some((v, ids)) = med(rtt_cells, keep, ttfb_ms) {
                data.push(DataPoint {
                    series: format!("{ch} ({kind})"),
                    x: rtt,
                    y: v,
                    cells: ids,
                });
                if !rtts.contains(&rtt) {
                    rtts.push(rtt);
                }
            }
        }
    }
    for rtt in rtts {
        data.push(DataPoint {
            series: "seed 004: 4 RTTs (SSL over TCP)".into(),
            x: rtt,
            y: 4.0 * rtt,
            cells: vec![],
        });
    }
    let mut series: Vec<Series> = Vec::new();
    for p in &data {
        match series.iter_mut().find(|s| s.0 == p.series) {
            Some(s) => s.1.push((p.x, p.y)),
            None => series.push((p.series.clone(), vec![(p.x, p.y)])),
        }
    }
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let (title, caption) = if kind == "packet" {
        (
            "Time to first byte against RTT, TLS 1.3, X25519MLKEM768, packet-level path",
            "Client-observed medians of connect, full handshake and request to the response \
             head across `tlslab path` (delay RTT/2 each way; the kernel's own TCP, Reno, \
             initial window 10): the TCP connect costs its round trip and a first flight over \
             10 segments waits one more for the client's ACKs. Trust this chart for round \
             trips, connect and slow start (it needs root). Seed 004: 4 RTTs for a secure SSL \
             socket.",
        )
    } else {
        (
            "Time to first byte against RTT, TLS 1.3, X25519MLKEM768, relay",
            "Client-observed medians of connect, full handshake and request to the response \
             head, through `tlslab relay`, which delays every segment but accepts TCP locally \
             (a real path adds one RTT for the SYN) and does not emulate slow start (a first \
             flight over 10 segments would add one RTT: the cells' TCP segment counts say which \
             chains). Trust it, without root, for the flights' delays; the packet-level path's \
             chart (`--path packet`) for the connect and slow start. Seed 004: 4 RTTs for a \
             secure SSL socket.",
        )
    };
    match line_chart(
        title,
        "round-trip time, ms",
        "connect + handshake + TTFB, ms",
        &series,
        false,
    ) {
        Some(svg) if !data.is_empty() => out.push(Chart {
            title: title.into(),
            caption: caption.into(),
            svg,
            x_label: "round-trip time, ms".into(),
            y_label: "connect + handshake + TTFB, ms".into(),
            data,
        }),
        _ => missing.push(format!("{title}: no cells through a path")),
    }
}
