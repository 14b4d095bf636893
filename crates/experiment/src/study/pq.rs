//! Seed 004's handshake for 2026: the post-quantum sweep of
//! `seed004-handshake`. Certificate chains of ECDSA P-256, RSA-2048,
//! ML-DSA-44, -65 and -87 and two mixed chains, with and without brotli
//! certificate compression (RFC 8879), under X25519 and X25519MLKEM768,
//! over TCP and TLS 1.3: bytes, TLS records, the server's first flight in
//! TCP segments and the slow-start round trips it needs from an initial
//! window of 10, server CPU per full handshake with the signature's share
//! (the server's crypto meter), and time to first byte at 20, 50 and
//! 100 ms RTT. The same over HTTP/3 on QUIC (`load --h3 -m 1`, factor
//! `transport = quic`; TCP cells have no `transport` factor, as in
//! documents from before QUIC): every chain, compression and group on
//! loopback, and time to first byte at each RTT over the packet-level
//! path (QUIC's analysis, with the anti-amplification limit, is
//! `super::pq_quic`).
//!
//! Every chain is a leaf and an intermediate (the root is the trust anchor,
//! not sent), as in the Web PKI. The client announces an MSS of 1460
//! bytes, so over loopback the server's flight is cut as on an Ethernet
//! path and the client's TCP_INFO counts its segments.

use std::time::Duration;

use tlslab_crypto::compress::CertCompression;
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::study::{Cell, CellMetrics, Comparison, StudyResults};
use tlslab_report::{HandshakeKindSummary, HandshakeTcp};

use super::matrix::CellSpec;
use super::rtt_path::PathKind;
use super::session::{compare, one};
use crate::rig::Transport;

/// The chains: (leaf, intermediate).
pub(super) const CHAINS: [(KeyType, KeyType); 7] = [
    (KeyType::EcdsaP256, KeyType::EcdsaP256),
    (KeyType::Rsa2048, KeyType::Rsa2048),
    (KeyType::MlDsa44, KeyType::MlDsa44),
    (KeyType::MlDsa65, KeyType::MlDsa65),
    (KeyType::MlDsa87, KeyType::MlDsa87),
    (KeyType::MlDsa44, KeyType::EcdsaP256),
    (KeyType::EcdsaP256, KeyType::MlDsa44),
];

/// Key-exchange groups of the sweep.
pub(super) const GROUPS: [&str; 2] = ["x25519", "X25519MLKEM768"];

/// Round-trip times of the time-to-first-byte cells, ms.
pub(super) const RTTS_MS: [u64; 3] = [20, 50, 100];

/// The MSS the client announces.
pub(super) const MSS: u32 = 1460;

/// A chain's level of the `chain` factor: `mldsa44` when leaf and
/// intermediate share a type, else `leaf/intermediate`.
pub(super) fn chain_name(leaf: KeyType, mid: KeyType) -> String {
    if leaf == mid {
        leaf.name().to_string()
    } else {
        format!("{}/{}", leaf.name(), mid.name())
    }
}

fn comp_name(c: &[CertCompression]) -> &'static str {
    c.first().map_or("none", |c| c.name())
}

fn spec(
    leaf: KeyType,
    mid: KeyType,
    comp: &[CertCompression],
    group: &str,
    rtt_ms: Option<(u64, PathKind)>,
    transport: Transport,
    cell: Duration,
) -> CellSpec {
    let chain = chain_name(leaf, mid);
    // TCP cells keep the names of documents from before QUIC.
    let t = match transport {
        Transport::Tcp => "",
        Transport::Quic => "quic-",
    };
    let point = match rtt_ms {
        Some((r, k)) => format!(
            "pq-{t}rtt{r}-{chain}-{}-{group}{}",
            comp_name(comp),
            k.suffix()
        ),
        None => format!("pq-{t}{chain}-{}-{group}", comp_name(comp)),
    }
    .to_ascii_lowercase()
    .replace('/', "-under-");
    let mut s = CellSpec::new(point, cell);
    s.warmup = Duration::from_millis(400);
    s.versions = vec![Version::Tls13];
    s.key = leaf;
    s.intermediate = Some(mid);
    s.group = Some(group.to_string());
    s.cert_compression = comp.to_vec();
    s.reuse = 0.0;
    s.clients = 2;
    // QUIC has no segments: `--mss` is a TCP socket option.
    s.mss = (transport == Transport::Tcp).then_some(MSS);
    s.rtt = rtt_ms.map(|(r, _)| Duration::from_millis(r));
    s.transport = transport;
    if transport == Transport::Quic {
        s.factors
            .insert("transport".into(), transport.name().into());
    }
    s.factors.insert("sweep".into(), "pq".into());
    s.factors.insert("chain".into(), chain);
    s.factors
        .insert("compression".into(), comp_name(comp).to_string());
    s.factors.insert("kx".into(), group.to_string());
    if let Some((r, k)) = rtt_ms {
        s.factors.insert("rtt_ms".into(), r.to_string());
        s.factors.insert("path".into(), k.name().into());
        s.wan = k;
    }
    s
}

/// The sweep's cells: bytes, segments and CPU over loopback for every
/// chain, compression and group; time to first byte at each RTT for every
/// chain (no compression, X25519MLKEM768, tlslab's default group) over
/// each path kind in `kinds`. Then the same over QUIC: loopback, and the
/// RTT cells over the packet path only (`tlslab relay` is TCP only; see
/// [`quic_relay_note`]).
pub(super) fn plan(quick: bool, kinds: &[PathKind]) -> Vec<CellSpec> {
    // At least 1 s: the first handshakes of a server with compression wait
    // for its one brotli compression of the chain (quality 11), which the
    // warm-up should absorb.
    let cell = Duration::from_millis(if quick { 1000 } else { 2000 });
    let rtt_cell = Duration::from_millis(if quick { 1200 } else { 3000 });
    let mut out = Vec::new();
    for t in [Transport::Tcp, Transport::Quic] {
        for (leaf, mid) in CHAINS {
            for comp in [vec![], vec![CertCompression::Brotli]] {
                for g in GROUPS {
                    out.push(spec(leaf, mid, &comp, g, None, t, cell));
                }
            }
        }
        for &k in kinds {
            if t == Transport::Quic && k == PathKind::Relay {
                continue;
            }
            for r in RTTS_MS {
                for (leaf, mid) in CHAINS {
                    let at = Some((r, k));
                    let mut c = spec(leaf, mid, &[], "X25519MLKEM768", at, t, rtt_cell);
                    if k == PathKind::Packet {
                        // Count-bounded: every connection ends whole, so
                        // the path's byte count matches the sockets'.
                        c.requests = Some(if quick { 8 } else { 16 });
                    }
                    out.push(c);
                }
            }
        }
    }
    out
}

/// Why the sweep has no QUIC round-trip cells over `path = relay`, when
/// `kinds` has the relay.
pub(super) fn quic_relay_note(kinds: &[PathKind]) -> Option<&'static str> {
    if !kinds.contains(&PathKind::Relay) {
        return None;
    }
    Some(if kinds.contains(&PathKind::Packet) {
        "post-quantum QUIC round-trip cells: over path = packet only; tlslab relay is a TCP \
         relay (it cannot carry QUIC's UDP datagrams)"
    } else {
        "post-quantum QUIC round-trip cells: NOT RUN: tlslab relay (--path relay) is a TCP \
         relay and cannot carry QUIC's UDP datagrams; run with --path packet or both (root) \
         for QUIC's time to first byte and its anti-amplification round trip. QUIC's loopback \
         cells (bytes, datagrams, server CPU) ran"
    })
}

/// Whether the cell ran over QUIC (`transport = quic`); TCP cells have no
/// `transport` factor (or `tcp`).
pub(super) fn is_quic(c: &Cell) -> bool {
    c.factors.get("transport").is_some_and(|t| t == "quic")
}

/// What to trust the sweep's round-trip cells over `kind` for.
pub(super) fn trust_note(kind: PathKind) -> &'static str {
    match kind {
        PathKind::Relay => {
            "post-quantum round-trip cells with path = relay crossed tlslab relay (no root, TCP \
             only, each flight delayed by the RTT): trust them for the handshake's flight \
             delays; their TCP connect is local and they show no slow start, so a chain past \
             the initial window costs no extra round trip there"
        }
        PathKind::Packet => {
            "post-quantum round-trip cells with path = packet crossed tlslab path (root; the \
             kernel's own TCP between two network namespaces, Reno, initial window 10): trust \
             them for the connect, slow start's extra round trip and the bytes on the wire \
             (each cell's forwarder report and byte check are in engine_report.path)"
        }
    }
}

/// The cell's path kind (`relay` in documents from before `--path`).
pub(super) fn kind_of(c: &Cell) -> &str {
    c.factors.get("path").map_or("relay", String::as_str)
}

/// A figure of the full handshakes of the cell's load report.
pub(super) fn full(c: &Cell, field: fn(&HandshakeKindSummary) -> Option<f64>) -> Option<f64> {
    field(&super::session::load_report(c)?.handshake.full)
}

fn bytes(c: &Cell) -> Option<f64> {
    Some(c.metrics.full_bytes_in? + c.metrics.full_bytes_out?)
}

/// Connect + full handshake + request to first response byte, medians, ms.
pub(super) fn ttfb_ms(c: &Cell) -> Option<f64> {
    let hs = CellMetrics::at(&c.metrics.handshake_full_us, 50.0)?;
    Some((c.metrics.connect_p50_us? + hs + c.metrics.ttfb_p50_us?) as f64 / 1000.0)
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
/// cells: crates/report/src/html_pq.rs).
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
        let (cpu, cells) = pick(&none, &|c| {
            (c.metrics.server_cpu_us_per_request > 0.0)
                .then_some(c.metrics.server_cpu_us_per_request)
        });
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
    out.extend(super::pq_path::analyse(doc));
    out.extend(super::pq_quic::analyse(doc));
    out
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(p: &[CellSpec], t: Transport) -> Vec<&CellSpec> {
        p.iter().filter(|c| c.transport == t).collect()
    }

    #[test]
    fn the_sweep_covers_every_chain_compression_group_and_rtt() {
        let loopback = 7 * 2 * 2;
        let p = plan(true, &[PathKind::Relay]);
        // TCP: loopback and relay; QUIC: loopback only (the relay is TCP).
        assert_eq!(over(&p, Transport::Tcp).len(), loopback + 3 * 7);
        assert_eq!(over(&p, Transport::Quic).len(), loopback);
        assert!(
            quic_relay_note(&[PathKind::Relay])
                .unwrap()
                .contains("NOT RUN")
        );
        assert!(quic_relay_note(&[PathKind::Packet]).is_none());
        let both = plan(true, &[PathKind::Relay, PathKind::Packet]);
        assert_eq!(over(&both, Transport::Tcp).len(), loopback + 2 * 3 * 7);
        assert_eq!(over(&both, Transport::Quic).len(), loopback + 3 * 7);
        assert_eq!(
            plan(false, &[PathKind::Packet]).len(),
            2 * (loopback + 3 * 7)
        );
        let packet: Vec<&CellSpec> = both.iter().filter(|c| c.wan == PathKind::Packet).collect();
        assert_eq!(packet.len(), 2 * 3 * 7);
        assert!(packet.iter().all(|c| c.point.ends_with("-packet")
            && c.factors["path"] == "packet"
            && c.requests.is_some()
            && c.rtt.is_some()));
        // QUIC cells: `transport = quic`, no MSS (a TCP option), never the
        // relay; TCP cells keep their factors (no `transport`) and MSS.
        for c in over(&both, Transport::Quic) {
            assert_eq!(c.factors["transport"], "quic", "{}", c.point);
            assert!(c.point.starts_with("pq-quic-"), "{}", c.point);
            assert_eq!(c.mss, None, "{}", c.point);
            assert!(c.rtt.is_none() || c.wan == PathKind::Packet, "{}", c.point);
        }
        for c in over(&both, Transport::Tcp) {
            assert!(!c.factors.contains_key("transport"), "{}", c.point);
            assert_eq!(c.mss, Some(MSS), "{}", c.point);
        }
        let mut names: Vec<&str> = both.iter().map(|c| c.point.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), both.len());
        assert!(p.iter().all(|c| c.excluded().is_none()));
        assert!(p.iter().all(|c| c.versions == [Version::Tls13]));
        assert_eq!(p[0].point, "pq-ecdsa-p256-none-x25519");
        let mixed = p
            .iter()
            .find(|c| c.factors["chain"] == "mldsa44/ecdsa-p256")
            .unwrap();
        assert_eq!(mixed.point, "pq-mldsa44-under-ecdsa-p256-none-x25519");
        assert_eq!(mixed.intermediate, Some(KeyType::EcdsaP256));
        // Point names are unique.
        let mut names: Vec<&str> = p.iter().map(|c| c.point.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), p.len());
        // No pq cell matches the classic cells' filters.
        assert!(p.iter().all(|c| !c.factors.contains_key("key")
            && !c.factors.contains_key("group")
            && !c.factors.contains_key("clients")));
    }

    #[test]
    fn slow_start_rounds_follow_the_doubling_window() {
        assert_eq!(HandshakeTcp::slow_start_rounds(1, 10), 1);
        assert_eq!(HandshakeTcp::slow_start_rounds(10, 10), 1);
        assert_eq!(HandshakeTcp::slow_start_rounds(11, 10), 2);
        assert_eq!(HandshakeTcp::slow_start_rounds(30, 10), 2);
        assert_eq!(HandshakeTcp::slow_start_rounds(31, 10), 3);
    }
}
