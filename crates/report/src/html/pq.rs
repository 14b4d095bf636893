//! Charts of the post-quantum sweep of `seed004-handshake` (cells with the
//! factor `sweep = pq`): handshake bytes per certificate chain beside seed
//! 004's "about 2 KB", server CPU per full handshake with the signature's
//! part, and time to first byte against RTT beside its "4 RTTs"; each over
//! TCP and, where the document has cells with `transport = quic`, over
//! QUIC beside it (with the handshake's round trips at each RTT, where
//! QUIC's anti-amplification limit shows).

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

/// Whether the cell ran over QUIC; TCP cells have no `transport` factor.
fn is_quic(c: &Cell) -> bool {
    factor(c, "transport") == "quic"
}

/// A loopback cell (no `rtt_ms`) of the chain, compression and group, over
/// QUIC or TCP.
fn loopback_cell(c: &Cell, quic: bool, chain: &str, comp: &str, kx: &str) -> bool {
    !c.factors.contains_key("rtt_ms")
        && is_quic(c) == quic
        && factor(c, "chain") == chain
        && factor(c, "compression") == comp
        && factor(c, "kx") == kx
}

/// Time to first byte, ms: over TCP the medians of connect + full
/// handshake + request to the response head; over QUIC the median from the
/// connection's start to the first response byte.
fn ttfb_ms(c: &Cell) -> Option<f64> {
    if is_quic(c) {
        let us = c
            .load_report()?
            .transport
            .as_ref()?
            .full
            .first_byte_p50_us?;
        return Some(us as f64 / 1000.0);
    }
    let hs = CellMetrics::at(&c.metrics.handshake_full_us, 50.0)?;
    Some((c.metrics.connect_p50_us? + hs + c.metrics.ttfb_p50_us?) as f64 / 1000.0)
}

/// The bar of a chain's row: the chain over TCP (as before QUIC), or
/// `chain over QUIC`.
fn label(ch: &str, quic: bool) -> String {
    if quic {
        format!("{ch} over QUIC")
    } else {
        ch.to_string()
    }
}

/// Adds the sweep's charts to `out` (or a note to `missing`).
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let cells = pq_cells(r);
    if cells.is_empty() {
        return;
    }
    for (comp, kx) in [("none", "X25519MLKEM768"), ("brotli", "X25519MLKEM768")] {
        let mut rows = vec![("seed 004 (2000)".to_string(), 2000.0, Vec::<String>::new())];
        for ch in chains(&cells) {
            for quic in [false, true] {
                let keep = |c: &Cell| loopback_cell(c, quic, &ch, comp, kx);
                if let Some((v, ids)) = med(&cells, keep, full_bytes) {
                    rows.push((label(&ch, quic), v, ids));
                }
            }
        }
        push_bars(
            out,
            missing,
            (
                &format!("Bytes per full TLS 1.3 handshake, {kx}, certificate compression {comp}"),
                "Client-observed socket bytes from the ClientHello to the end of the handshake, \
             median over repeats of each cell's mean; each chain is a leaf and an intermediate \
             (leaf/intermediate when they differ). \"over QUIC\": the UDP payload until the \
             QUIC handshake completed (HTTP/3; packet headers, Initial padding to 1,200 B and \
             ACKs included). The first bar is seed 004's \"adds ~2KBs\" (SSL 3.0, RSA-1024).",
            ),
            ("chain (leaf/intermediate)", "bytes, both ways"),
            rows,
            "no data",
        );
    }
    let mut rows = Vec::new();
    for ch in chains(&cells) {
        for quic in [false, true] {
            let keep = |c: &Cell| loopback_cell(c, quic, &ch, "none", "X25519MLKEM768");
            let name = label(&ch, quic);
            if let Some((v, ids)) = med(&cells, keep, |c| {
                (c.metrics.server_cpu_us_per_request > 0.0)
                    .then_some(c.metrics.server_cpu_us_per_request)
            }) {
                rows.push((format!("{name}: all"), v, ids.clone()));
            }
            if let Some((v, ids)) = med(&cells, keep, |c| c.metrics.server_sign_us) {
                rows.push((format!("{name}: signature"), v, ids));
            }
        }
    }
    push_bars(
        out,
        missing,
        (
            "Server CPU per full handshake and its signature, X25519MLKEM768",
            "Server-observed worker CPU per request (one full TLS 1.3 handshake each, over TCP \
         or, \"over QUIC\", HTTP/3) and the CertificateVerify signature's time from the \
         server's crypto meter. Seed 004 had ~300 ms (session key generation and 1024-bit RSA \
         decryption) on a 1999 server.",
        ),
        ("chain (leaf/intermediate)", "µs"),
        rows,
        "no data",
    );
    // Time to first byte against RTT, one chart per path kind.
    let rtt_cells: Vec<&Cell> = cells
        .iter()
        .copied()
        .filter(|c| c.factors.contains_key("rtt_ms"))
        .collect();
    let mut kinds: Vec<&str> = rtt_cells.iter().map(|c| path_kind(c)).collect();
    kinds.sort_unstable();
    kinds.dedup();
    // The relay first.
    kinds.reverse();
    if kinds.is_empty() {
        missing.push("time to first byte against RTT: no cells through a path".into());
    }
    for kind in kinds {
        for quic in [false, true] {
            let of_kind: Vec<&Cell> = rtt_cells
                .iter()
                .copied()
                .filter(|c| path_kind(c) == kind && is_quic(c) == quic)
                .collect();
            if quic && of_kind.is_empty() {
                continue;
            }
            ttfb_chart(&of_kind, kind, quic, out, missing);
        }
    }
    round_trips_chart(&rtt_cells, out, missing);
}

/// Handshake round trips (median ÷ RTT) across the packet-level path at
/// each RTT, TCP and QUIC per chain: where the first flight waits for the
/// client (TCP's initial window, QUIC's anti-amplification limit).
fn round_trips_chart(rtt_cells: &[&Cell], out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let packet: Vec<&Cell> = rtt_cells
        .iter()
        .copied()
        .filter(|c| path_kind(c) == "packet")
        .collect();
    if !packet.iter().any(|c| is_quic(c)) {
        return;
    }
    let mut rtts: Vec<u64> = packet
        .iter()
        .filter_map(|c| factor(c, "rtt_ms").parse().ok())
        .collect();
    rtts.sort_unstable();
    rtts.dedup();
    let Some(&rtt) = rtts.last() else { return };
    let mut rows = Vec::new();
    for ch in chains(&packet) {
        for quic in [false, true] {
            let keep = |c: &Cell| {
                is_quic(c) == quic
                    && factor(c, "chain") == ch
                    && factor(c, "rtt_ms") == rtt.to_string()
            };
            let hs = |c: &Cell| {
                CellMetrics::at(&c.metrics.handshake_full_us, 50.0)
                    .map(|us| us as f64 / (rtt as f64 * 1000.0))
            };
            if let Some((v, ids)) = med(&packet, keep, hs) {
                rows.push((label(&ch, quic), v, ids));
            }
        }
    }
    push_bars(
        out,
        missing,
        (
            &format!(
                "Full handshake in round trips at {rtt} ms RTT, TCP and QUIC, packet-level path"
            ),
            "Client-observed median of the full handshake (TCP: after the connect; QUIC: from \
             the connection's start) ÷ the RTT, across `tlslab path` (the kernel's TCP, Reno, \
             initial window 10; QUIC by quinn). One round trip, and one more where the server's \
             first flight waits for the client: over TCP past the initial window (10 segments, \
             about 14.5 KB), over QUIC past the anti-amplification limit (3 × the client's \
             Initial, a few KB). Seed 004: ~2 RTTs for SSL's handshake.",
        ),
        ("chain (leaf/intermediate)", "RTTs"),
        rows,
        "no data",
    );
}

/// A round-trip cell's path: `relay` (also in documents from before
/// `--path`) or `packet`.
fn path_kind(c: &Cell) -> &str {
    c.factors.get("path").map_or("relay", String::as_str)
}

/// The chart of time to first byte against RTT over one path kind, over
/// TCP or QUIC.
fn ttfb_chart(
    rtt_cells: &[&Cell],
    kind: &str,
    quic: bool,
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
) {
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
                    series: format!("{} ({kind})", label(&ch, quic)),
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
    let (title, caption) = if quic {
        (
            "Time to first byte against RTT over QUIC (HTTP/3), X25519MLKEM768, packet-level path",
            "Client-observed median from the QUIC connection's start to the first response byte \
             across `tlslab path` (delay RTT/2 each way): no separate connect, one round trip for \
             the handshake and one for the request, and one more where the server's flight is \
             over the anti-amplification limit (3 × the client's Initial bytes). Beside the TCP \
             chart above. Seed 004: 4 RTTs for a secure SSL socket.",
        )
    } else if kind == "packet" {
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
             chart (`--path-kind packet`) for the connect and slow start. Seed 004: 4 RTTs for a \
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
            columns: Vec::new(),
        }),
        _ => missing.push(format!("{title}: no cells through a path")),
    }
}
