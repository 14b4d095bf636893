//! The sweep's comparisons over TCP+TLS 1.3 with seed 004: bytes, round
//! trips with the first flight's slow start, brotli, server CPU with the
//! signature's share, the initial window, and time to first byte against
//! RTT over each path kind.

use tlslab_report::HandshakeTcp;
use tlslab_report::study::{Cell, Comparison, StudyResults};

use super::cells::{
    CHAINS, GROUPS, MSS, RTTS_MS, chain_name, fmt, full, is_quic, kind_of, ttfb_ms,
};
use crate::study::path_kind::PathKind;
use crate::study::session::{compare, cpu_us, one};

fn bytes(c: &Cell) -> Option<f64> {
    Some(c.metrics.full_bytes_in? + c.metrics.full_bytes_out?)
}

/// Round trips of a full TLS 1.3 handshake including the slow start of the
/// server's flight from an initial window of 10 segments.
fn handshake_rtts(c: &Cell) -> Option<f64> {
    Some(c.metrics.full_round_trips? + full(c, |k| k.slow_start_rounds_mean)? - 1.0)
}

fn sign_share(c: &Cell) -> Option<f64> {
    let cpu = c.metrics.server_cpu_us_per_request;
    (cpu > 0.0).then_some(c.metrics.server_sign_us? / cpu)
}

/// The sweep's comparisons with seed 004 (`tlslab report` charts its
/// cells: crates/report/src/html/pq.rs).
pub(super) fn analyse(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    let f = |chain: &str, comp: &'static str, kx: &'static str| {
        [
            ("sweep", "pq"),
            ("chain", chain),
            ("compression", comp),
            ("kx", kx),
        ]
        .map(|(a, b)| (a, b.to_string()))
    };
    // The loopback cells only (the RTT cells share their factors).
    let pick = |filter: &[(&str, String)], g: &dyn Fn(&Cell) -> Option<f64>| {
        let filter: Vec<(&str, &str)> = filter.iter().map(|(a, b)| (*a, b.as_str())).collect();
        one(doc, &filter, |c| {
            if c.factors.contains_key("rtt_ms") || is_quic(c) {
                None
            } else {
                g(c)
            }
        })
    };
    // (chain and options, server flight bytes, its TCP segments).
    let mut flights: Vec<(String, f64, f64)> = Vec::new();
    for (leaf, mid) in CHAINS {
        let chain = chain_name(leaf, mid);
        for kx in GROUPS {
            let filter = f(&chain, "none", kx);
            let (b, cells) = pick(&filter, &bytes);
            if b.is_none() {
                continue;
            }
            let cert = pick(&filter, &|c| full(c, |k| k.cert_bytes_mean)).0;
            let segs = pick(&filter, &|c| full(c, |k| k.data_segs_in_mean)).0;
            let recs = pick(&filter, &|c| full(c, |k| k.records_in_mean)).0;
            out.push(compare(
                &format!("bytes per full handshake, both ways, TLS 1.3, chain {chain}, {kx}"),
                "~2KBs added to total application traffic",
                "seed 004, Factors Affecting Performance I",
                b,
                "bytes",
                &format!(
                    "client-observed socket bytes from the ClientHello to the end of the \
                     handshake, mean over the cell's full handshakes; certificate message {} B, \
                     server flight {} TLS records in {} TCP segments of MSS {MSS}",
                    fmt(cert, 0),
                    fmt(recs, 1),
                    fmt(segs, 1)
                ),
                cells,
                "a leaf and an intermediate certificate, each with its public key and its \
                 issuer's signature, plus the CertificateVerify signature: ML-DSA-44 keys are \
                 1,312 B and signatures 2,420 B (ML-DSA-87: 2,592 B and 4,627 B) against 64 B \
                 and about 72 B for ECDSA P-256",
            ));
            // Round trips, with the first flight's slow start.
            let (rt, cells) = pick(&filter, &handshake_rtts);
            let beyond = pick(&filter, &|c| full(c, |k| k.beyond_initial_window)).0;
            out.push(compare(
                &format!(
                    "round trips of a full handshake with the server flight's slow start, \
                     chain {chain}, {kx}"
                ),
                "~2 RTTs (4 RTTs for a secure SSL socket against 2 for a clear TCP socket)",
                "seed 004, Factors Affecting Performance I",
                rt,
                "RTTs",
                &format!(
                    "client-observed turnarounds (1 for TLS 1.3) plus the slow-start rounds the \
                     server's first flight needs from an initial window of 10 segments beyond \
                     the first, from its measured TCP segments ({} segments; {} of handshakes \
                     beyond the window); computed, not timed",
                    fmt(segs, 1),
                    beyond.map_or("-".into(), |b| format!("{:.0} %", b * 100.0))
                ),
                cells,
                "TLS 1.3 needs one round trip; a flight over 10 segments (about 14.6 KB at \
                 MSS 1460) waits one more for the client's ACKs",
            ));
        }
        for comp in ["none", "brotli"] {
            for kx in GROUPS {
                let filter = f(&chain, comp, kx);
                let flight = pick(&filter, &|c| c.metrics.full_bytes_in).0;
                let segs = pick(&filter, &|c| full(c, |k| k.data_segs_in_mean)).0;
                if let (Some(b), Some(s)) = (flight, segs) {
                    flights.push((format!("{chain}, {comp}, {kx}"), b, s));
                }
            }
        }
        // Compression.
        let none = f(&chain, "none", "X25519MLKEM768");
        let brotli = f(&chain, "brotli", "X25519MLKEM768");
        let (ratio, cells) = pick(&brotli, &|c| full(c, |k| k.cert_compression_ratio));
        if ratio.is_some() {
            let unc = pick(&brotli, &|c| full(c, |k| k.cert_bytes_mean)).0;
            let comp = pick(&brotli, &|c| full(c, |k| k.cert_compressed_bytes_mean)).0;
            let b0 = pick(&none, &bytes).0;
            let b1 = pick(&brotli, &bytes).0;
            out.push(compare(
                &format!("brotli-compressed certificate ÷ uncompressed, chain {chain}"),
                "no certificate compression in SSL 3.0 (its record-layer compression was \
                 removed from TLS); RFC 8879 shrinks classical chains to 41–97 % (nginx)",
                "seed 004, SSL Record Layer",
                ratio.map(|r| r * 100.0),
                "%",
                &format!(
                    "client-observed: compressed certificate data over the Certificate message \
                     it decompressed to ({} B → {} B); whole handshake {} B → {} B",
                    fmt(unc, 0),
                    fmt(comp, 0),
                    fmt(b0, 0),
                    fmt(b1, 0)
                ),
                cells,
                "ML-DSA keys and signatures look random and do not compress; what compresses is \
                 the names, extensions and encodings around them",
            ));
        }
        // Server CPU per full handshake and the signature's share.
        let (cpu, cells) = pick(&none, &cpu_us);
        if cpu.is_some() {
            let sign = pick(&none, &|c| c.metrics.server_sign_us).0;
            let share = pick(&none, &sign_share).0;
            out.push(compare(
                &format!("server CPU per full handshake, chain {chain}"),
                "O(300ms) of additional server CPU consumption (session-key generation + \
                 1024-bit RSA decryption)",
                "seed 004, Factors Affecting Performance I",
                cpu.map(|us| us / 1000.0),
                "ms",
                &format!(
                    "server-observed worker CPU ÷ requests (one full TLS 1.3 handshake each, \
                     X25519MLKEM768, 2 clients); the signature (server crypto meter) {} µs, {} \
                     of it",
                    fmt(sign, 1),
                    share.map_or("-".into(), |s| format!("{:.0} %", s * 100.0))
                ),
                cells,
                "ML-DSA signs in about the time of ECDSA and far faster than RSA-2048; the \
                 rest is the key exchange, hashing, the HTTP request and the kernel",
            ));
        }
    }
    // The flight size at which the initial window runs out.
    let iw = f64::from(HandshakeTcp::INITIAL_WINDOW);
    let within = flights
        .iter()
        .filter(|f| f.2 <= iw)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let beyond = flights
        .iter()
        .filter(|f| f.2 > iw)
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some(b) = beyond {
        out.push(compare(
            "smallest server first flight beyond the initial window of 10 segments",
            "~2 RTTs per handshake, whatever the certificate",
            "seed 004, Factors Affecting Performance I",
            Some(b.1),
            "bytes",
            &format!(
                "client-observed bytes read during the handshake (the server's flight) of {}, \
                 {:.1} TCP segments (TCP_INFO); the largest flight within the window: {}; \
                 arithmetic: initial window × MSS = {} B, less TCP options (12 B a segment \
                 with timestamps) = {} B",
                b.0,
                b.2,
                within.map_or("-".into(), |w| format!(
                    "{:.0} B in {:.1} segments ({})",
                    w.1, w.2, w.0
                )),
                HandshakeTcp::INITIAL_WINDOW * MSS,
                HandshakeTcp::INITIAL_WINDOW * (MSS - 12)
            ),
            vec![],
            "the first flight carries the ServerHello with its key share (1,088 B of ML-KEM \
             ciphertext for X25519MLKEM768), the chain and the CertificateVerify; past the \
             window it waits a round trip for the client's ACKs",
        ));
    }
    // Time to first byte against RTT, over each path kind.
    for kind in [PathKind::Relay, PathKind::Packet] {
        for (leaf, mid) in CHAINS {
            let chain = chain_name(leaf, mid);
            for r in RTTS_MS {
                let rs = r.to_string();
                let filter = [
                    ("sweep", "pq"),
                    ("chain", chain.as_str()),
                    ("rtt_ms", rs.as_str()),
                ];
                let of_kind = |c: &Cell| kind_of(c) == kind.name() && !is_quic(c);
                let (t, cells) = one(doc, &filter, |c| ttfb_ms(c).filter(|_| of_kind(c)));
                let Some(t) = t else { continue };
                let extra = one(doc, &filter, |c| {
                    full(c, |k| k.slow_start_rounds_mean).filter(|_| of_kind(c))
                })
                .0;
                let extra = extra.map_or("-".into(), |e| format!("{:.0}", (e - 1.0).max(0.0)));
                let (measured, reason) = match kind {
                    PathKind::Relay => (
                        format!(
                            "client-observed medians of connect + full handshake + request to the \
                             response head, through `tlslab relay` (path = relay: its TCP connect \
                             is local, a real path adds one RTT); slow start from an initial \
                             window of 10 would add {extra} round trip(s), which the relay does \
                             not emulate"
                        ),
                        "TLS 1.3 takes one round trip and the request one more; the relay \
                         emulates neither TCP's handshake nor its slow start: trust its handshake \
                         flight delays, not its connect or its slow start (path = packet has both)",
                    ),
                    PathKind::Packet => (
                        format!(
                            "client-observed medians of connect + full handshake + request to the \
                             response head across the packet-level path (path = packet: tlslab \
                             path, delay RTT/2 each way, the kernel's TCP with Reno and an initial \
                             window of 10); the measured segments predict {extra} extra round \
                             trip(s) of slow start"
                        ),
                        "one RTT for the TCP connect, one for TLS 1.3, one for the request, and \
                         one more when the server's first flight exceeds the initial window: the \
                         kernel's own slow start, timed",
                    ),
                };
                out.push(compare(
                    &format!(
                        "time to first byte at {r} ms RTT, chain {chain}, path {}",
                        kind.name()
                    ),
                    &format!(
                        "4 RTTs for a secure SSL socket: {} ms at {r} ms RTT (~2 RTTs more than \
                         clear TCP)",
                        4 * r
                    ),
                    "seed 004, Factors Affecting Performance I",
                    Some(t),
                    "ms",
                    &measured,
                    cells,
                    reason,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tlslab_report::HandshakeTcp;

    #[test]
    fn slow_start_rounds_follow_the_doubling_window() {
        assert_eq!(HandshakeTcp::slow_start_rounds(1, 10), 1);
        assert_eq!(HandshakeTcp::slow_start_rounds(10, 10), 1);
        assert_eq!(HandshakeTcp::slow_start_rounds(11, 10), 2);
        assert_eq!(HandshakeTcp::slow_start_rounds(30, 10), 2);
        assert_eq!(HandshakeTcp::slow_start_rounds(31, 10), 3);
    }
}
