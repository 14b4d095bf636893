//! The post-quantum sweep of `seed004-handshake` over HTTP/3 on QUIC
//! (cells with `transport = quic`, `load --h3 -m 1`): per chain, the
//! handshake's bytes and datagrams each way (client-observed, quinn's
//! connection statistics when the handshake completed), server CPU per
//! full handshake beside TCP's, certificate compression over QUIC, and,
//! across the packet-level path, the limit on the server's first flight
//! against the timed handshake at each RTT, time to first byte beside
//! TCP's and seed 004's "4 RTTs", and the smallest chain timed to cost
//! QUIC an extra round trip.
//!
//! Two limits hold a QUIC server's first flight. Before it has validated
//! the client's address it sends at most 3 × the bytes it received (RFC
//! 9000 §8.1, anti-amplification): 3 × the client's padded Initial. But a
//! client that holds an address-validation token from an earlier
//! connection (NEW_TOKEN, which quinn's client keeps) is validated by its
//! first Initial, and the flight is then held by the initial congestion
//! window instead: 10 × 1,200 B (RFC 9002 §7.2, quinn's default). The
//! load's clients make their first connection in the warm-up, so every
//! measured connection carries a token and the congestion window is the
//! arithmetic to compare with; the anti-amplification limit is stated
//! beside it.

use tlslab_report::quic::TransportPhase;
use tlslab_report::study::{Cell, Comparison, StudyResults};

use super::cells::{CHAINS, GROUPS, RTTS_MS, chain_name, fmt, full, is_quic, kind_of, ttfb_ms};
use super::path::THRESHOLD_RTT_MS;
use crate::study::session::{compare, cpu_us, load_report, one, ratio};

/// Bytes a client pads every datagram that carries an Initial packet to
/// (RFC 9000 §14.1; quinn's initial MTU).
pub(super) const MIN_INITIAL: f64 = 1200.0;

/// The factor anti-amplification allows: a server may send three times
/// what it received before the client's address is validated.
pub(super) const AMPLIFICATION: f64 = 3.0;

/// A QUIC sender's initial congestion window, bytes: 10 × 1,200 B
/// (RFC 9002 §7.2: min(10 × max datagram, max(2 × max datagram, 14,720));
/// quinn's default, with 1,200-byte datagrams).
pub(super) const INITIAL_WINDOW: f64 = 12_000.0;

/// The full handshakes of a QUIC cell (its load report's `transport`).
pub(super) fn quic_full(c: &Cell) -> Option<TransportPhase> {
    Some(load_report(c)?.transport.as_ref()?.full.clone())
}

fn tcp(c: &Cell) -> bool {
    !is_quic(c)
}

/// A figure of the cell `filter` picks on loopback (no `rtt_ms`) over
/// QUIC (`quic`) or TCP.
fn pick(
    doc: &StudyResults,
    filter: &[(&str, &str)],
    quic: bool,
    g: impl Fn(&Cell) -> Option<f64>,
) -> (Option<f64>, Vec<String>) {
    one(doc, filter, |c| {
        if c.factors.contains_key("rtt_ms") || is_quic(c) != quic {
            None
        } else {
            g(c)
        }
    })
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0} %", v * 100.0))
}

/// ClientHello bytes an Initial datagram of [`MIN_INITIAL`] bytes carries:
/// less QUIC's long header (with a 20-byte destination and an 8-byte
/// source connection ID, token and length fields, a 4-byte packet number),
/// the CRYPTO frame's header and the 16-byte AEAD tag.
pub(super) const INITIAL_CRYPTO: f64 = 1130.0;

/// What the client's TLS 1.3 full handshake writes besides its ClientHello
/// over TCP: the ClientHello's record header (5 B), the
/// middlebox-compatibility ChangeCipherSpec record (6 B) and the Finished
/// record (at most 74 B, SHA-384).
pub(super) const TCP_CLIENT_EXTRA: f64 = 85.0;

/// The client's Initial for `kx`: (datagrams, bytes, the ClientHello's
/// bytes). The ClientHello is measured: the client's bytes per full
/// handshake in the group's TCP loopback cells (the same ClientHello, any
/// chain) less [`TCP_CLIENT_EXTRA`]; over QUIC it goes in Initial
/// datagrams of [`INITIAL_CRYPTO`] bytes each, every one padded to
/// [`MIN_INITIAL`]. `None` without TCP cells of the group.
pub(super) fn client_initial(doc: &StudyResults, kx: &str) -> Option<(f64, f64, f64)> {
    let written = doc
        .cells
        .iter()
        .filter(|c| {
            tcp(c)
                && c.factors.get("sweep").is_some_and(|s| s == "pq")
                && !c.factors.contains_key("rtt_ms")
                && c.factors.get("kx").is_some_and(|k| k == kx)
        })
        .filter_map(|c| c.metrics.full_bytes_out)
        .min_by(f64::total_cmp)?;
    let hello = (written - TCP_CLIENT_EXTRA).max(1.0);
    let datagrams = (hello / INITIAL_CRYPTO).ceil();
    Some((datagrams, datagrams * MIN_INITIAL, hello))
}

/// One chain's QUIC cell across the packet path at one RTT.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct QuicFlight {
    /// The chain.
    pub chain: String,
    /// The RTT, ms.
    pub rtt_ms: u64,
    /// Bytes the client received until the handshake completed (the
    /// server's flight), mean.
    pub server_bytes: f64,
    /// In that many datagrams, mean.
    pub server_datagrams: f64,
    /// What the server may send before validating the client's address:
    /// 3 × the client's Initial bytes (a client's first connection).
    pub amplification: f64,
    /// What it may send at once to a validated client (every measured
    /// connection: its Initial carries a NEW_TOKEN token):
    /// [`INITIAL_WINDOW`].
    pub limit: f64,
    /// Round trips the arithmetic predicts: 1, and 1 more when the flight
    /// is over `limit`.
    pub predicted: f64,
    /// The handshake's median ÷ the RTT.
    pub timed: f64,
    /// The cells.
    pub cells: Vec<String>,
}

/// The QUIC packet cells' flights at `rtt_ms`, smallest first; the
/// client's Initial bytes are those of X25519MLKEM768 (the RTT cells'
/// group), from [`client_initial`].
pub(super) fn flights(doc: &StudyResults, rtt_ms: u64) -> Vec<QuicFlight> {
    let Some((_, initial, _)) = client_initial(doc, "X25519MLKEM768") else {
        return Vec::new();
    };
    let amplification = AMPLIFICATION * initial;
    let limit = INITIAL_WINDOW;
    let rtt = rtt_ms.to_string();
    let mut out = Vec::new();
    for (leaf, mid) in CHAINS {
        let chain = chain_name(leaf, mid);
        let filter = [
            ("sweep", "pq"),
            ("transport", "quic"),
            ("chain", chain.as_str()),
            ("rtt_ms", rtt.as_str()),
            ("path", "packet"),
        ];
        let get =
            |f: &dyn Fn(&TransportPhase) -> Option<f64>| one(doc, &filter, |c| f(&quic_full(c)?));
        let (hs, cells) = get(&|t| t.handshake_p50_us.map(|v| v as f64));
        let (Some(hs), Some(bytes), Some(dgrams)) =
            (hs, get(&|t| t.bytes_in).0, get(&|t| t.datagrams_in).0)
        else {
            continue;
        };
        out.push(QuicFlight {
            chain,
            rtt_ms,
            server_bytes: bytes,
            server_datagrams: dgrams,
            amplification,
            limit,
            predicted: if bytes > limit { 2.0 } else { 1.0 },
            timed: hs / (rtt_ms as f64 * 1000.0),
            cells,
        });
    }
    out.sort_by(|a, b| a.server_bytes.total_cmp(&b.server_bytes));
    out
}

/// The largest flight timed within one round trip and the smallest timed
/// with an extra one (more than 1.5 RTTs).
pub(super) fn threshold(f: &[QuicFlight]) -> (Option<&QuicFlight>, Option<&QuicFlight>) {
    (
        f.iter().rfind(|x| x.timed < 1.5),
        f.iter().find(|x| x.timed >= 1.5),
    )
}

/// The QUIC comparisons.
pub(super) fn analyse(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (leaf, mid) in CHAINS {
        let chain = chain_name(leaf, mid);
        for kx in GROUPS {
            out.extend(bytes_row(doc, &chain, kx));
        }
        out.extend(cpu_row(doc, &chain));
        out.extend(compression_row(doc, &chain));
    }
    for r in RTTS_MS {
        out.extend(rtt_rows(doc, r));
    }
    out.extend(threshold_row(doc));
    out
}

fn filter<'a>(chain: &'a str, comp: &'a str, kx: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("sweep", "pq"),
        ("chain", chain),
        ("compression", comp),
        ("kx", kx),
    ]
}

/// Bytes and datagrams each way over QUIC, beside TCP's bytes and segments.
fn bytes_row(doc: &StudyResults, chain: &str, kx: &str) -> Option<Comparison> {
    let f = filter(chain, "none", kx);
    let q = |g: fn(&TransportPhase) -> Option<f64>| pick(doc, &f, true, |c| g(&quic_full(c)?));
    let (out_b, cells) = q(|t| t.bytes_out);
    let (in_b, _) = q(|t| t.bytes_in);
    let total = Some(out_b? + in_b?);
    let tcp_bytes = pick(doc, &f, false, |c| {
        Some(c.metrics.full_bytes_in? + c.metrics.full_bytes_out?)
    })
    .0;
    let tcp_in = pick(doc, &f, false, |c| c.metrics.full_bytes_in).0;
    let segs = pick(doc, &f, false, |c| full(c, |k| k.data_segs_in_mean)).0;
    Some(compare(
        &format!("bytes per full handshake over QUIC, both ways, chain {chain}, {kx}"),
        "~2KBs added to total application traffic",
        "seed 004, Factors Affecting Performance I",
        total,
        "bytes",
        &format!(
            "client-observed UDP payload until the handshake completed (quinn's connection \
             statistics; QUIC headers, padding and ACKs included), mean over the cell's full \
             handshakes: client {} B in {} datagrams, server {} B in {} datagrams; TCP+TLS 1.3 \
             of the same chain: {} B both ways, server flight {} B in {} TCP segments",
            fmt(out_b, 0),
            fmt(q(|t| t.datagrams_out).0, 1),
            fmt(in_b, 0),
            fmt(q(|t| t.datagrams_in).0, 1),
            fmt(tcp_bytes, 0),
            fmt(tcp_in, 0),
            fmt(segs, 1)
        ),
        cells,
        "QUIC carries the same TLS messages in CRYPTO frames, but pads every client datagram \
         with an Initial packet to 1,200 B and adds packet headers, AEAD tags and ACK frames",
    ))
}

/// Server CPU per full handshake over QUIC against TCP, with the
/// signature's share.
fn cpu_row(doc: &StudyResults, chain: &str) -> Option<Comparison> {
    let f = filter(chain, "none", "X25519MLKEM768");
    let (cpu, mut cells) = pick(doc, &f, true, cpu_us);
    let cpu = cpu?;
    let (tcp_cpu, tcp_cells) = pick(doc, &f, false, cpu_us);
    cells.extend(tcp_cells);
    let sign = pick(doc, &f, true, |c| c.metrics.server_sign_us).0;
    let tcp_sign = pick(doc, &f, false, |c| c.metrics.server_sign_us).0;
    Some(compare(
        &format!("server CPU per full handshake over QUIC, chain {chain}"),
        "O(300ms) of additional server CPU consumption (session-key generation + 1024-bit \
         RSA decryption)",
        "seed 004, Factors Affecting Performance I",
        Some(cpu / 1000.0),
        "ms",
        &format!(
            "server-observed worker CPU ÷ requests (one full TLS 1.3 handshake each over \
             HTTP/3, X25519MLKEM768, 2 clients); the signature (server crypto meter) {} µs, {} \
             of it; TCP+TLS 1.3 of the same chain {} ms (signature {} µs, {}); QUIC ÷ TCP = {}",
            fmt(sign, 1),
            pct(ratio(sign, Some(cpu))),
            fmt(tcp_cpu.map(|v| v / 1000.0), 3),
            fmt(tcp_sign, 1),
            pct(ratio(tcp_sign, tcp_cpu)),
            fmt(ratio(Some(cpu), tcp_cpu), 2)
        ),
        cells,
        "the same signature and key exchange as over TCP; QUIC adds its packet protection, \
         header protection, ACKs and loss-recovery timers in user space",
    ))
}

/// Certificate compression over QUIC: the server's flight with brotli ÷
/// without, and the bytes saved against TCP's.
fn compression_row(doc: &StudyResults, chain: &str) -> Option<Comparison> {
    let none = filter(chain, "none", "X25519MLKEM768");
    let brotli = filter(chain, "brotli", "X25519MLKEM768");
    let q_in = |f: &[(&str, &str)]| pick(doc, f, true, |c| quic_full(c)?.bytes_in);
    let (b0, mut cells) = q_in(&none);
    let (b1, c1) = q_in(&brotli);
    let (b0, b1) = (b0?, b1?);
    cells.extend(c1);
    let t_in = |f: &[(&str, &str)]| pick(doc, f, false, |c| c.metrics.full_bytes_in).0;
    let tcp_saved = t_in(&none).zip(t_in(&brotli)).map(|(a, b)| a - b);
    let cert_ratio = pick(doc, &brotli, false, |c| {
        full(c, |k| k.cert_compression_ratio)
    })
    .0;
    Some(compare(
        &format!(
            "server handshake flight over QUIC with brotli certificate compression ÷ without, chain {chain}"
        ),
        "no certificate compression in SSL 3.0 (its record-layer compression was removed from \
         TLS); RFC 8879 shrinks classical chains to 41–97 % (nginx)",
        "seed 004, SSL Record Layer",
        Some(b1 / b0 * 100.0),
        "%",
        &format!(
            "client-observed UDP bytes received until the handshake completed, X25519MLKEM768: \
             {b0:.0} B → {b1:.0} B, {:.0} B saved over QUIC against {} B over TCP (socket \
             bytes of the same chain; the Certificate message compressed to {} there, as \
             the TCP cells parsed it)",
            b0 - b1,
            fmt(tcp_saved, 0),
            pct(cert_ratio)
        ),
        cells,
        "the same rustls configuration compresses the same Certificate message over both \
         transports; over QUIC the saving also drops whole datagrams",
    ))
}

/// Time to first byte over QUIC at `rtt_ms` per chain (packet path),
/// beside TCP's and seed 004's 4 RTTs, and the arithmetic's round trips
/// against the timed handshake.
fn rtt_rows(doc: &StudyResults, rtt_ms: u64) -> Vec<Comparison> {
    let mut out = Vec::new();
    let flights = flights(doc, rtt_ms);
    let r = rtt_ms as f64;
    let rs = rtt_ms.to_string();
    for f in &flights {
        let chain = f.chain.as_str();
        let filter = [("sweep", "pq"), ("chain", chain), ("rtt_ms", rs.as_str())];
        let packet = |c: &Cell| kind_of(c) == "packet";
        let (ttfb, _) = one(doc, &filter, |c| {
            let t = quic_full(c)?.first_byte_p50_us? as f64 / 1000.0;
            (is_quic(c) && packet(c)).then_some(t)
        });
        let (tcp_ttfb, tcp_cells) =
            one(doc, &filter, |c| ttfb_ms(c).filter(|_| tcp(c) && packet(c)));
        out.push(compare(
            &format!(
                "handshake round trips over QUIC at {rtt_ms} ms RTT against the first \
                 flight's limit, chain {chain}, path packet"
            ),
            "~2 RTTs (4 RTTs for a secure SSL socket against 2 for a clear TCP socket)",
            "seed 004, Factors Affecting Performance I",
            Some(f.timed),
            "RTTs",
            &format!(
                "client-observed median of the QUIC handshake (connection start to completion) \
                 ÷ the RTT across the packet-level path; the server's flight {:.0} B in {:.1} \
                 datagrams against its initial congestion window of 10 × 1,200 B = {:.0} B (a \
                 client that holds a NEW_TOKEN token, as every measured connection does, is \
                 validated at once; a client's first connection, in the warm-up, is held at \
                 the anti-amplification limit of 3 × its Initial = {:.0} B instead): the \
                 arithmetic predicts {:.0} RTT(s); timed and predicted {}",
                f.server_bytes,
                f.server_datagrams,
                f.limit,
                f.amplification,
                f.predicted,
                if (f.timed.round() - f.predicted).abs() < 0.5 {
                    "agree"
                } else {
                    "DISAGREE"
                }
            ),
            f.cells.clone(),
            "QUIC's handshake is one round trip unless the server's flight is over what it may \
             send at once: its congestion window (to a client without a token, three times what \
             the client sent); then it waits for the client's ACKs, one more RTT",
        ));
        out.push(compare(
            &format!("time to first byte over QUIC at {rtt_ms} ms RTT, chain {chain}, path packet"),
            &format!(
                "4 RTTs for a secure SSL socket: {} ms at {rtt_ms} ms RTT (~2 RTTs more than \
                 clear TCP)",
                4 * rtt_ms
            ),
            "seed 004, Factors Affecting Performance I",
            ttfb,
            "ms",
            &format!(
                "client-observed median from the QUIC connection's start to the first response \
                 byte across the packet-level path ({} RTTs); TCP+TLS 1.3 of the same chain \
                 (connect + handshake + request medians): {} ms ({} RTTs)",
                fmt(ttfb.map(|t| t / r), 2),
                fmt(tcp_ttfb, 1),
                fmt(tcp_ttfb.map(|t| t / r), 2)
            ),
            [f.cells.clone(), tcp_cells].concat(),
            "QUIC has no separate connect: its handshake is the first round trip and the \
             request the second, plus one when the congestion window (or the anti-amplification \
             limit) holds the server's flight; TCP+TLS 1.3 takes three, plus one when the flight is over the initial window",
        ));
    }
    out
}

/// The smallest chain timed to cost QUIC an extra round trip at 100 ms RTT
/// against the arithmetic, beside TCP's.
fn threshold_row(doc: &StudyResults) -> Option<Comparison> {
    let f = flights(doc, THRESHOLD_RTT_MS);
    let (within, beyond) = threshold(&f);
    let b = beyond?;
    let (idg, initial, hello) = client_initial(doc, "X25519MLKEM768")?;
    let matches = within.is_none_or(|w| w.server_bytes <= b.limit) && b.server_bytes > b.limit;
    let agree = f
        .iter()
        .filter(|x| (x.timed.round() - x.predicted).abs() < 0.5)
        .count();
    let tcp = super::path::flights(doc);
    let (_, tcp_beyond) = super::path::threshold(&tcp);
    Some(compare(
        &format!(
            "smallest server flight timed to cost QUIC an extra round trip at \
             {THRESHOLD_RTT_MS} ms RTT, path packet"
        ),
        "~2 RTTs per handshake, whatever the certificate",
        "seed 004, Factors Affecting Performance I",
        Some(b.server_bytes),
        "bytes",
        &format!(
            "client-observed across the packet-level path: chain {}, {:.1} datagrams, \
             handshake {:.2} RTTs; the largest flight timed within one round trip: {}; \
             arithmetic: the initial congestion window of 10 × 1,200 B = {:.0} B (every \
             measured connection presented a NEW_TOKEN token, so its address was valid at \
             once); the measured transition {} it; timed and predicted round trips agree for \
             {agree} of {} chains; a client's first connection (no token) is held at the \
             anti-amplification limit instead: 3 × its Initial (its {hello:.0} B ClientHello, \
             measured over TCP, in {idg:.0} datagram(s) padded to 1,200 B = {initial:.0} B) = \
             {:.0} B; over TCP (initial window 10 segments) the first chain timed with an extra \
             round trip is {}",
            b.chain,
            b.server_datagrams,
            b.timed,
            within.map_or("-".into(), |w| format!(
                "{:.0} B in {:.1} datagrams ({}, {:.2} RTTs)",
                w.server_bytes, w.server_datagrams, w.chain, w.timed
            )),
            b.limit,
            if matches { "matches" } else { "does NOT match" },
            f.len(),
            b.amplification,
            tcp_beyond.map_or("- (no TCP packet cells)".into(), |t| format!(
                "{} ({:.0} B in {:.1} segments)",
                t.chain, t.bytes, t.segments
            )),
        ),
        b.cells.clone(),
        "QUIC's initial window is counted in 1,200-byte datagrams (12,000 B), below TCP's 10 \
         segments of 1,448 B (14,480 B), so post-quantum chains pay QUIC's extra round trip \
         first; a client's first connection pays it from 7.2 KB (anti-amplification)",
    ))
}

#[cfg(test)]
mod tests;
