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
