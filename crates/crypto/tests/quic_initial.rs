//! A client's Initial opened from its DCID alone: the sample client
//! Initials of RFC 9001 Appendix A.2 (QUIC v1) and RFC 9369 Appendix A.2
//! (QUIC v2), each a 1,200-byte datagram whose CRYPTO frame holds a
//! ClientHello for example.com.

use std::time::Instant;

use tlslab_crypto::quic::{HelloReader, InitialError, Read, open_initial};
use tlslab_wire::quic::{AssemblerLimits, PacketType, parse_long_header, version};

fn datagram(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let hex: String = text.split_whitespace().collect();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The CRYPTO frame both RFCs put first in the payload (its first bytes).
const CRYPTO_FRAME_START: [u8; 8] = [0x06, 0x00, 0x40, 0xf1, 0x01, 0x00, 0x00, 0xed];

fn check_rfc_sample(name: &str, v: u32) {
    let d = datagram(name);
    assert_eq!(d.len(), 1200);
    let h = parse_long_header(&d).unwrap();
    assert_eq!(h.version, v);
    assert_eq!(h.packet_type, PacketType::Initial);
    assert_eq!(h.dcid, [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]);
    assert!(h.scid.is_empty() && h.token.is_empty());
    assert_eq!(h.len, 1200);
    let o = open_initial(&h, &d).unwrap();
    // "a packet number of 2", "a 1162-byte payload".
    assert_eq!(o.packet_number, 2);
    assert_eq!(o.payload.len(), 1162);
    assert_eq!(o.payload[..8], CRYPTO_FRAME_START);
    assert!(
        o.payload[245..].iter().all(|b| *b == 0),
        "PADDING after the CRYPTO frame"
    );

    let mut r = HelloReader::new(AssemblerLimits::default());
    let Read::Hello(hello) = r.push(&d, Instant::now()).unwrap() else {
        panic!("one Initial holds the whole ClientHello");
    };
    assert_eq!(hello.version, v);
    let ch = hello.client_hello().unwrap();
    assert_eq!(ch.server_name_str(), Some("example.com"));
    let alpn: Vec<&[u8]> = ch.alpn.unwrap().iter().collect();
    assert_eq!(alpn, [b"alpn"]);
    assert!(ch.pre_shared_key.is_none());
    assert_eq!(r.pending(), 0);
}

#[test]
fn rfc9001_sample_client_initial() {
    check_rfc_sample("rfc9001_client_initial.hex", version::V1);
}

#[test]
fn rfc9369_sample_client_initial() {
    check_rfc_sample("rfc9369_client_initial.hex", version::V2);
}

#[test]
fn a_flipped_byte_fails_authentication() {
    let mut d = datagram("rfc9001_client_initial.hex");
    d[600] ^= 1;
    let h = parse_long_header(&d).unwrap();
    assert!(matches!(
        open_initial(&h, &d),
        Err(InitialError::Decrypt(_))
    ));
    // The DCID is the key's input: change it and nothing decrypts.
    let mut d = datagram("rfc9001_client_initial.hex");
    d[6] ^= 1;
    let h = parse_long_header(&d).unwrap();
    assert!(matches!(
        open_initial(&h, &d),
        Err(InitialError::Decrypt(_))
    ));
}

#[test]
fn a_v1_sample_relabelled_v2_does_not_open() {
    // The same bytes under the v2 version field: v2's type bits 0b00 make
    // it a Retry, which is not an Initial.
    let mut d = datagram("rfc9001_client_initial.hex");
    d[1..5].copy_from_slice(&version::V2.to_be_bytes());
    let h = parse_long_header(&d).unwrap();
    assert_eq!(h.packet_type, PacketType::Retry);
    assert!(matches!(
        open_initial(&h, &d),
        Err(InitialError::NotInitial(_))
    ));
    let mut r = HelloReader::new(AssemblerLimits::default());
    assert_eq!(r.push(&d, Instant::now()), Ok(Read::NotInitial));
}

/// A long-header Initial to `dcid`, sealed as `side` sends it with
/// rustls's own Initial keys (`Keys::initial`, both directions derived)
/// of the client's first DCID: what tlslab's one-direction derivation must
/// open.
fn seal_initial(v: u32, dcid: &[u8], side: rustls::Side, pn: u16, frames: &[u8]) -> Vec<u8> {
    seal_keyed(v, dcid, dcid, side, pn, frames)
}

fn seal_keyed(
    v: u32,
    dcid: &[u8],
    key_dcid: &[u8],
    side: rustls::Side,
    pn: u16,
    frames: &[u8],
) -> Vec<u8> {
    use rustls::quic::{Keys, Version};
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .unwrap();
    let rv = if v == version::V2 {
        Version::V2
    } else {
        Version::V1
    };
    let keys = Keys::initial(rv, suite, suite.quic.unwrap(), key_dcid, side);
    // v1's Initial type bits are 0b00, v2's 0b01; a 2-byte packet number.
    let first = if v == version::V2 { 0xd1 } else { 0xc1 };
    let mut payload = frames.to_vec();
    payload.resize(payload.len().max(1162), 0); // PADDING
    let mut p = vec![first];
    p.extend_from_slice(&v.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[3, 1, 2, 3, 0]); // SCID, empty token
    let len = (2 + payload.len() + 16) as u16 | 0x4000;
    p.extend_from_slice(&len.to_be_bytes());
    let pn_offset = p.len();
    p.extend_from_slice(&pn.to_be_bytes());
    let tag = keys
        .local
        .packet
        .encrypt_in_place(u64::from(pn), &p, &mut payload)
        .unwrap();
    p.extend_from_slice(&payload);
    p.extend_from_slice(tag.as_ref());
    let sample = p[pn_offset + 4..pn_offset + 20].to_vec();
    let (head, rest) = p.split_at_mut(pn_offset);
    keys.local
        .header
        .encrypt_in_place(&sample, &mut head[0], &mut rest[..2])
        .unwrap();
    p
}

#[test]
fn rustls_sealed_initials_open_in_both_directions_and_versions() {
    use tlslab_crypto::quic::open_server_initial;
    for v in [version::V1, version::V2] {
        for dcid in [&[7u8; 8][..], &[0x5a; 20][..], &[1u8][..]] {
            let frames = [0x06, 0x00, 0x04, 1, 2, 3, 4];
            let d = seal_initial(v, dcid, rustls::Side::Client, 0x1234, &frames);
            let h = parse_long_header(&d).unwrap();
            let o = open_initial(&h, &d).unwrap();
            assert_eq!((o.packet_number, &o.payload[..7]), (0x1234, &frames[..]));
            // The server's Initials: keyed by the client's first DCID, the
            // "server in" secret; the client's keys do not open them.
            let s = seal_keyed(v, &[9; 8], dcid, rustls::Side::Server, 7, &frames);
            let hs = parse_long_header(&s).unwrap();
            let o = open_server_initial(&hs, &s, dcid).unwrap();
            assert_eq!((o.packet_number, &o.payload[..7]), (7, &frames[..]));
            assert!(matches!(
                open_initial(&hs, &s),
                Err(InitialError::Decrypt(_))
            ));
        }
    }
}

#[test]
fn a_hello_in_two_datagrams_reads_across_more_dcids_than_keys_kept() {
    // The RFC sample's ClientHello, cut in two CRYPTO frames, one per
    // Initial; 40 attempts' first halves, then their second halves (more
    // DCIDs than the reader keeps keys for), then the same in lockstep.
    let d = datagram("rfc9001_client_initial.hex");
    let o = open_initial(&parse_long_header(&d).unwrap(), &d).unwrap();
    let hello = &o.payload[4..4 + 241];
    let part = |off: usize, data: &[u8]| {
        let mut f = vec![0x06, 0x40, off as u8, 0x40, data.len() as u8];
        f[1] = 0x40 | (off >> 8) as u8;
        f.extend_from_slice(data);
        f
    };
    let (a, b) = (part(0, &hello[..100]), part(100, &hello[100..]));
    let mut r = HelloReader::new(AssemblerLimits::default());
    let now = Instant::now();
    let dcid = |i: u8| [i, 0xee, i, 0xee, i, 0xee, i, 0xee];
    for v in [version::V1, version::V2] {
        for i in 0..40u8 {
            let first = seal_initial(v, &dcid(i), rustls::Side::Client, 0, &a);
            assert_eq!(r.push(&first, now), Ok(Read::Partial));
        }
        for i in 0..40u8 {
            let second = seal_initial(v, &dcid(i), rustls::Side::Client, 1, &b);
            let Ok(Read::Hello(h)) = r.push(&second, now) else {
                panic!("attempt {i}: the second half completes the ClientHello");
            };
            assert_eq!((h.version, h.dcid.as_slice()), (v, &dcid(i)[..]));
            assert_eq!(h.hello, hello);
        }
        for i in 100..140u8 {
            let first = seal_initial(v, &dcid(i), rustls::Side::Client, 0, &a);
            let second = seal_initial(v, &dcid(i), rustls::Side::Client, 1, &b);
            assert_eq!(r.push(&first, now), Ok(Read::Partial));
            assert!(matches!(r.push(&second, now), Ok(Read::Hello(_))));
        }
        // A kept key is not a pass: a forged second half under a kept DCID
        // still has to authenticate.
        let mut forged = seal_initial(v, &dcid(139), rustls::Side::Client, 2, &b);
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert!(matches!(
            r.push(&forged, now),
            Err(InitialError::Decrypt(_))
        ));
    }
    assert_eq!(r.pending(), 0);
}

#[test]
fn rfc9001_sample_retry_tag() {
    // RFC 9001 Appendix A.4: the Retry to the A.2 client, its last 16 bytes
    // the tag over the rest and the client's first DCID.
    let hex = "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba";
    let retry: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let (packet, tag) = retry.split_at(retry.len() - 16);
    let odcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
    let tag_of = |odcid: &[u8]| tlslab_crypto::quic::retry_tag_v1(odcid, packet).map(Vec::from);
    assert_eq!(tag_of(&odcid), Some(tag.to_vec()));
    assert_ne!(tag_of(&odcid[1..]), Some(tag.to_vec()));
}
