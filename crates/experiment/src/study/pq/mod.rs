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
//! `quic`).
//!
//! Every chain is a leaf and an intermediate (the root is the trust anchor,
//! not sent), as in the Web PKI. The client announces an MSS of 1460
//! bytes, so over loopback the server's flight is cut as on an Ethernet
//! path and the client's TCP_INFO counts its segments.

mod cells;
mod path;
mod plan;
mod quic;
mod tcp;

use tlslab_report::study::{Comparison, StudyResults};

pub(super) use cells::RTTS_MS;
pub(super) use plan::{plan, quic_relay_note, trust_note};

/// The sweep's comparisons with seed 004: over TCP, what only the packet
/// path shows, and over QUIC (`tlslab report` charts the cells:
/// crates/report/src/html/pq.rs).
pub(super) fn analyse(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = tcp::analyse(doc);
    out.extend(path::analyse(doc));
    out.extend(quic::analyse(doc));
    out
}
