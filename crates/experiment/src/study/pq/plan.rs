//! The sweep's cells: every chain, compression and group on loopback over
//! TCP and QUIC, and the round-trip cells over each path kind.

use std::time::Duration;

use tlslab_crypto::compress::CertCompression;
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;

use super::cells::{CHAINS, GROUPS, MSS, RTTS_MS, chain_name, comp_name};
use crate::rig::Transport;
use crate::study::matrix::CellSpec;
use crate::study::path_kind::PathKind;

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
pub(in crate::study) fn plan(quick: bool, kinds: &[PathKind]) -> Vec<CellSpec> {
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
pub(in crate::study) fn quic_relay_note(kinds: &[PathKind]) -> Option<&'static str> {
    if !kinds.contains(&PathKind::Relay) {
        return None;
    }
    Some(if kinds.contains(&PathKind::Packet) {
        "post-quantum QUIC round-trip cells: over path = packet only; tlslab relay is a TCP \
         relay (it cannot carry QUIC's UDP datagrams)"
    } else {
        "post-quantum QUIC round-trip cells: NOT RUN: tlslab relay (--path-kind relay) is a TCP \
         relay and cannot carry QUIC's UDP datagrams; run with --path-kind packet or both (root) \
         for QUIC's time to first byte and its anti-amplification round trip. QUIC's loopback \
         cells (bytes, datagrams, server CPU) ran"
    })
}

/// What to trust the sweep's round-trip cells over `kind` for.
pub(in crate::study) fn trust_note(kind: PathKind) -> &'static str {
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
}
