//! QUIC's three ablations, shown on the keys quinn uses: the Initial keys
//! that rustls derives from the client's Destination Connection ID with
//! the provider's TLS 1.3 suite (every later key level takes the same
//! path through the suite's `quic` algorithm and HKDF).

use std::sync::Arc;

use rustls::quic::{Keys, Version as QuicVersion};
use rustls::{CipherSuite, Side};

use super::*;
use crate::meter::{Meter, Op, metered};
use crate::provider::{self, Algorithms, Version};

const HEADER: &[u8] = &[0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x40, 0x20];
const PAYLOAD: &[u8] = b"a CRYPTO frame carrying a ClientHello, 32 B";
const DCID: &[u8] = &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];

fn keys(set: &str, side: Side, dcid: &[u8], meter: &Arc<Meter>) -> Keys {
    let set: AblationSet = set.parse().unwrap();
    let base =
        Arc::unwrap_or_clone(provider::build(&[Version::Tls13], &Algorithms::default()).unwrap());
    let p = metered(ablated(base, &set).unwrap(), meter.clone());
    // As quinn-proto does (`initial_suite_from_provider`).
    let suite = p
        .cipher_suites
        .iter()
        .find_map(|s| match (s.suite(), s.tls13()) {
            (CipherSuite::TLS13_AES_128_GCM_SHA256, Some(t)) => t.quic_suite(),
            _ => None,
        })
        .expect("the ablated provider keeps a QUIC suite");
    suite.keys(dcid, side, QuicVersion::V1)
}

/// Protects `PAYLOAD` with the client's Initial packet key: the protected
/// payload and its tag.
fn seal(set: &str, dcid: &[u8], meter: &Arc<Meter>) -> (Vec<u8>, Vec<u8>) {
    let k = keys(set, Side::Client, dcid, meter);
    let mut body = PAYLOAD.to_vec();
    let tag = k
        .local
        .packet
        .encrypt_in_place(1, HEADER, &mut body)
        .unwrap();
    (body, tag.as_ref().to_vec())
}

#[test]
fn packet_protection_ablation_sends_the_payload_with_a_zero_tag() {
    let m = Meter::new();
    let (body, tag) = seal("quic-packet", DCID, &m);
    assert_eq!(body, PAYLOAD, "the payload went out unprotected");
    assert_eq!(tag, [0u8; 16], "a zero tag of the real size");
    let s = m.snapshot();
    assert_eq!(s.total(Op::QuicSeal).calls, 1);
    assert_eq!(s.total(Op::QuicSeal).bytes, PAYLOAD.len() as u64);
    // The server's ablated key opens it.
    let server = keys("quic-packet", Side::Server, DCID, &m);
    let mut wire = [body.clone(), tag].concat();
    let plain = server
        .remote
        .packet
        .decrypt_in_place(1, HEADER, &mut wire)
        .unwrap();
    assert_eq!(plain, PAYLOAD);
    assert_eq!(m.snapshot().total(Op::QuicOpen).calls, 1);
    // Real protection changes the payload and has a real tag, which the
    // ablated key refuses (a mismatch drops packets, never misreads them).
    let (real, real_tag) = seal("none", DCID, &m);
    assert_ne!(real, PAYLOAD);
    assert_ne!(real_tag, [0u8; 16]);
    let mut wire = [real, real_tag].concat();
    assert!(
        server
            .remote
            .packet
            .decrypt_in_place(1, HEADER, &mut wire)
            .is_err()
    );
}

#[test]
fn header_protection_ablation_applies_no_mask() {
    let m = Meter::new();
    let sample = [0x5au8; 16];
    let mask = |set: &str| {
        let k = keys(set, Side::Client, DCID, &m);
        let (mut first, mut pn) = (0xc3u8, [0u8, 0, 0, 1]);
        k.local
            .header
            .encrypt_in_place(&sample, &mut first, &mut pn)
            .unwrap();
        (first, pn)
    };
    assert_eq!(mask("quic-header"), (0xc3, [0, 0, 0, 1]));
    // A real mask leaves 4 bits and 4 bytes alone with odds of 2^-36.
    assert_ne!(mask("none"), (0xc3, [0, 0, 0, 1]));
    assert_eq!(m.snapshot().total(Op::QuicHeader).calls, 2);
    // Packet protection stays real under `quic-header`, and the reverse.
    assert_ne!(seal("quic-header", DCID, &m).0, PAYLOAD);
    assert_ne!(mask("quic-packet"), (0xc3, [0, 0, 0, 1]));
}

#[test]
fn quic_key_schedule_ablation_derives_no_key_from_the_connection_id() {
    let m = Meter::new();
    let other = [0x11u8; 8];
    // Real: the Initial keys come from the DCID.
    assert_ne!(seal("none", DCID, &m), seal("none", &other, &m));
    // Ablated: every QUIC key is zero, whatever the DCID; the packet is
    // still protected for real (AES-128-GCM under the zero key).
    let (a, b) = (seal("quic-keys", DCID, &m), seal("quic-keys", &other, &m));
    assert_eq!(a, b);
    assert_ne!(a.0, PAYLOAD);
    // Both sides agree.
    let server = keys("quic-keys", Side::Server, &other, &m);
    let mut wire = [a.0, a.1].concat();
    let plain = server
        .remote
        .packet
        .decrypt_in_place(1, HEADER, &mut wire)
        .unwrap();
    assert_eq!(plain, PAYLOAD);
}

#[test]
fn quic_skeleton_is_the_skeleton_and_quics_three() {
    let q = "quic-skeleton".parse::<AblationSet>().unwrap();
    assert_eq!(q, AblationSet::quic_skeleton());
    for a in AblationSet::skeleton().iter() {
        assert!(q.contains(a), "{a:?}");
    }
    assert!(q.has_quic() && !AblationSet::skeleton().has_quic());
    assert_eq!(
        "quic-packet,quic-header,quic-keys"
            .parse::<AblationSet>()
            .unwrap()
            .to_string(),
        "quic-packet,quic-header,quic-keys"
    );
    assert_eq!(
        serde_json::to_string(&"quic-keys".parse::<AblationSet>().unwrap()).unwrap(),
        r#"["quic-keys"]"#
    );
}
