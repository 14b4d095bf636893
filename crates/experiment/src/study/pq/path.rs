//! What only the packet-level path shows in the post-quantum sweep of
//! `seed004-handshake` (cells with `path = packet`): the first server
//! flight that costs an extra round trip at 100 ms RTT, timed with the
//! kernel's own slow start, against the initial-window arithmetic; and
//! the handshake bytes the load counted against the bytes the path's
//! forwarder carried ([`ByteCheck`], kept per cell in the document's
//! `engine_report.path`).

use tlslab_report::HandshakeTcp;
use tlslab_report::study::{Cell, CellMetrics, Comparison, EngineReport, StudyResults};

use super::cells::{CHAINS, MSS, chain_name, full, is_quic};
use crate::study::rtt_path::ByteCheck;
use crate::study::session::{compare, one};

/// The RTT at which the extra round trip is looked for, ms.
pub(super) const THRESHOLD_RTT_MS: u64 = 100;

/// One chain's cell at [`THRESHOLD_RTT_MS`] over the packet path.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Flight {
    /// The chain.
    pub chain: String,
    /// The server's flight, bytes (client-read during the handshake).
    pub bytes: f64,
    /// Its TCP segments (TCP_INFO).
    pub segments: f64,
    /// Round trips of slow start beyond the first, from the segments.
    pub predicted_extra: f64,
    /// The full handshake's median over the RTT, less TLS 1.3's one.
    pub timed_extra: f64,
}

/// The flights of `doc`'s packet cells at [`THRESHOLD_RTT_MS`], smallest
/// first.
pub(super) fn flights(doc: &StudyResults) -> Vec<Flight> {
    let rtt = THRESHOLD_RTT_MS.to_string();
    let mut out = Vec::new();
    for (leaf, mid) in CHAINS {
        let chain = chain_name(leaf, mid);
        let filter = [
            ("sweep", "pq"),
            ("chain", chain.as_str()),
            ("rtt_ms", rtt.as_str()),
            ("path", "packet"),
        ];
        // TCP cells (the QUIC cells' are `super::quic`'s).
        let get = |f: &dyn Fn(&Cell) -> Option<f64>| {
            one(doc, &filter, |c| if is_quic(c) { None } else { f(c) }).0
        };
        let hs = get(&|c| CellMetrics::at(&c.metrics.handshake_full_us, 50.0).map(|v| v as f64));
        let (Some(hs), Some(bytes), Some(segments), Some(rounds)) = (
            hs,
            get(&|c| c.metrics.full_bytes_in),
            get(&|c| full(c, |k| k.data_segs_in_mean)),
            get(&|c| full(c, |k| k.slow_start_rounds_mean)),
        ) else {
            continue;
        };
        out.push(Flight {
            chain,
            bytes,
            segments,
            predicted_extra: rounds - 1.0,
            timed_extra: hs / (THRESHOLD_RTT_MS as f64 * 1000.0) - 1.0,
        });
    }
    out.sort_by(|a, b| a.bytes.total_cmp(&b.bytes));
    out
}

/// The largest flight timed without an extra round trip and the smallest
/// timed with one (an extra round trip is timed when the handshake took
/// more than 1.5 RTTs).
pub(super) fn threshold(f: &[Flight]) -> (Option<&Flight>, Option<&Flight>) {
    let within = f.iter().rfind(|x| x.timed_extra < 0.5);
    let beyond = f.iter().find(|x| x.timed_extra >= 0.5);
    (within, beyond)
}

/// The packet path's comparisons.
pub(super) fn analyse(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    let f = flights(doc);
    let (within, beyond) = threshold(&f);
    if let Some(b) = beyond {
        let iw = HandshakeTcp::INITIAL_WINDOW;
        let seg = MSS - 12;
        let agree = f
            .iter()
            .filter(|x| (x.timed_extra.round() - x.predicted_extra).abs() < 0.5)
            .count();
        let at_window = within.is_none_or(|w| w.segments <= f64::from(iw) + 0.5)
            && b.segments > f64::from(iw) - 0.5;
        let cells = one(
            doc,
            &[
                ("sweep", "pq"),
                ("chain", b.chain.as_str()),
                ("rtt_ms", &THRESHOLD_RTT_MS.to_string()),
                ("path", "packet"),
            ],
            |c| c.metrics.full_bytes_in.filter(|_| !is_quic(c)),
        )
        .1;
        out.push(compare(
            &format!(
                "smallest server first flight timed to cost an extra round trip at \
                 {THRESHOLD_RTT_MS} ms RTT, path packet (initial window 10)"
            ),
            "~2 RTTs per handshake, whatever the certificate",
            "seed 004, Factors Affecting Performance I",
            Some(b.bytes),
            "bytes",
            &format!(
                "client-observed across the packet-level path (the kernel's TCP, Reno): chain \
                 {}, {:.1} segments, handshake {:.2} RTTs; the largest flight timed without the \
                 extra round trip: {}; arithmetic: initial window × MSS = {iw} × {seg} B \
                 (MSS {MSS} less 12 B of timestamps) = {} B; the measured transition {} the \
                 initial window within one segment; timed and segment-predicted round trips \
                 agree for {agree} of {} chains",
                b.chain,
                b.segments,
                b.timed_extra + 1.0,
                within.map_or("-".into(), |w| format!(
                    "{:.0} B in {:.1} segments ({}, {:.2} RTTs)",
                    w.bytes,
                    w.segments,
                    w.chain,
                    w.timed_extra + 1.0
                )),
                iw * seg,
                if at_window {
                    "matches"
                } else {
                    "does NOT match"
                },
                f.len()
            ),
            cells,
            "past the initial window the server waits a round trip for the client's ACKs \
             before the rest of its flight; the relay cannot show it (it ACKs at once)",
        ));
    }
    // The byte cross-check.
    // A check without socket bytes (its differences infinite) says nothing.
    let checks: Vec<(String, ByteCheck)> = match &doc.engine_report {
        Some(EngineReport::Path(p)) => p
            .path
            .iter()
            .filter_map(|(id, c)| Some((id.clone(), c.byte_check.clone()?)))
            .filter(|(_, c)| c.worst_pct().is_finite())
            .collect(),
        _ => Vec::new(),
    };
    if let Some((worst_id, worst)) = checks
        .iter()
        .max_by(|a, b| a.1.worst_pct().total_cmp(&b.1.worst_pct()))
    {
        let ok = checks.iter().filter(|c| c.1.within_1pct()).count();
        let hs: f64 = checks.iter().map(|c| c.1.handshake_bytes).sum();
        let sock: u64 = checks.iter().map(|c| c.1.socket_in + c.1.socket_out).sum();
        out.push(compare(
            "handshake bytes against a packet count on the path: worst difference of the TCP \
             payload the forwarder carried from the load's socket bytes, path packet",
            "~2KBs added to total application traffic (computed, not counted on the wire)",
            "seed 004, Factors Affecting Performance I",
            Some(worst.worst_pct()),
            "%",
            &format!(
                "forwarder-observed bytes per direction less 52 B of IPv4 and TCP headers a \
                 packet (timestamps on) and 8 B more per SYN, against the bytes the load wrote \
                 and read on its sockets (client-observed, warm-up included; each cell \
                 count-bounded, so every connection ends whole); {ok} of {} cells within 1 %; \
                 worst {worst_id}: {:+.3} % up, {:+.3} % down; full handshakes were {} of \
                 the socket bytes{}",
                checks.len(),
                worst.diff_up_pct,
                worst.diff_down_pct,
                if sock > 0 {
                    format!("{:.0} %", hs / sock as f64 * 100.0)
                } else {
                    "-".into()
                },
                if doc
                    .cells
                    .iter()
                    .any(|c| is_quic(c) && c.factors.contains_key("rtt_ms"))
                {
                    "; TCP cells only: the QUIC cells are NOT cross-checked (`load --h3` \
                     reports each handshake's UDP bytes, not its sockets' totals, and the \
                     forwarder counts every datagram of a cell: requests, responses, ACKs and \
                     closes too)"
                } else {
                    ""
                }
            ),
            checks.iter().map(|c| c.0.clone()).collect(),
            "the load counts each handshake's bytes with the same socket counter whose \
             total the path checks; what is left over is the HTTP request and response, \
             the close and the warm-up's handshakes",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flight(chain: &str, bytes: f64, segments: f64, timed: f64) -> Flight {
        Flight {
            chain: chain.into(),
            bytes,
            segments,
            predicted_extra: if segments > 10.0 { 1.0 } else { 0.0 },
            timed_extra: timed,
        }
    }

    #[test]
    fn the_threshold_is_between_the_last_flight_without_and_the_first_with_an_extra_rtt() {
        let f = vec![
            flight("ecdsa-p256", 3_000.0, 3.0, 0.05),
            flight("mldsa44", 12_000.0, 9.0, 0.1),
            flight("mldsa65", 16_000.0, 12.0, 1.02),
            flight("mldsa87", 21_000.0, 15.0, 1.1),
        ];
        let (w, b) = threshold(&f);
        assert_eq!(w.unwrap().chain, "mldsa44");
        assert_eq!(b.unwrap().chain, "mldsa65");
        let none = vec![flight("ecdsa-p256", 3_000.0, 3.0, 0.05)];
        assert_eq!(threshold(&none), (Some(&none[0]), None));
    }
}
