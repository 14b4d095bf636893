//! QUIC-LB connection IDs against the test vectors of
//! draft-ietf-quic-load-balancers-21 (Appendix B, "Load Balancer Test
//! Vectors", and the four-pass encryption example of §5.4.2.4): each
//! vector is encoded from its server ID and nonce, and decoded back.

use tlslab_crypto::quic::{Codec, LbConfig, LbParams, LbRouter, Mode, Route};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const KEY: &str = "8f95f09245765f80256934e50c66207f";

/// Encodes `sid || nonce` under config `cr` and checks the CID both ways.
fn vector(cr: u8, sid: &str, nonce: &str, key: Option<&str>, cid: &str, mode: Mode) {
    let (sid, nonce, cid) = (hex(sid), hex(nonce), hex(cid));
    let key = key.map(|k| <[u8; 16]>::try_from(hex(k).as_slice()).unwrap());
    let params = LbParams::new(cr, sid.len(), nonce.len(), key).unwrap();
    assert_eq!(params.mode(), mode);
    let codec = Codec::new(&params);
    assert_eq!(
        codec.encode(&sid, &nonce).as_bytes(),
        cid.as_slice(),
        "encode"
    );
    assert_eq!(codec.server_id(&cid).unwrap().as_bytes(), sid.as_slice());
    let mut plain = sid.clone();
    plain.extend(&nonce);
    assert_eq!(codec.decrypt(&cid).unwrap().as_bytes(), plain.as_slice());
    let router = LbRouter::new(&[params]).unwrap();
    assert!(
        matches!(router.route(&cid), Route::Server { config_id, server_id }
        if config_id == cr && server_id.as_bytes() == sid.as_slice())
    );
}

#[test]
fn unencrypted_vector() {
    vector(
        0,
        "c4605e",
        "4504cc4f",
        None,
        "07c4605e4504cc4f",
        Mode::Plaintext,
    );
}

#[test]
fn four_pass_odd_length_example() {
    // §5.4.2.4: a 7-byte plaintext (the middle byte split between halves).
    vector(
        0,
        "31441a",
        "9c69c275",
        Some("fdf726a9893ec05c0632d3956680baf0"),
        "0767947d29be054a",
        Mode::FourPass,
    );
}

#[test]
fn encrypted_vector_short_sid_three_pass_decode() {
    vector(
        0,
        "ed793a",
        "ee080dbf",
        Some(KEY),
        "0720b1d07b359d3c",
        Mode::FourPass,
    );
}

#[test]
fn encrypted_vector_sid_longer_than_nonce_four_pass_decode() {
    vector(
        1,
        "ed793a51d49b8f5fab65",
        "ee080dbf48",
        Some(KEY),
        "2fcc381bc74cb4fbad2823a3d1f8fed2",
        Mode::FourPass,
    );
}

#[test]
fn encrypted_vector_single_pass() {
    vector(
        2,
        "ed793a51d49b8f5f",
        "ee080dbf48c0d1e5",
        Some(KEY),
        "504dd2d05a7b0de9b2b9907afb5ecf8cc3",
        Mode::SinglePass,
    );
}

#[test]
fn encrypted_vector_eighteen_bytes() {
    // The draft's table gives cr_bits 3 for this vector, but its CID's
    // first octet, 0x12, carries config ID 0 (and length 18): the body is
    // checked as published, under the config ID the CID itself encodes.
    vector(
        0,
        "ed793a51d49b8f5fab",
        "ee080dbf48c0d1e55d",
        Some(KEY),
        "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc",
        Mode::FourPass,
    );
}

#[test]
fn unroutable_cids_route_nowhere() {
    let p = LbParams::new(0, 3, 4, None).unwrap();
    let router = LbRouter::new(&[p]).unwrap();
    // 0b111: reserved for unroutable CIDs; config 1 is not configured; a
    // CID shorter than the configuration's.
    for cid in ["e7c4605e4504cc4f", "27c4605e4504cc4f", "07c4605e45"] {
        assert_eq!(router.route(&hex(cid)), Route::Unroutable, "{cid}");
    }
    assert_eq!(router.route(&[]), Route::Unroutable);
}

#[test]
fn configurations_outside_the_draft_are_refused_with_the_fix() {
    for (s, says) in [
        (
            "server-id=01,nonce-len=4,config-id=7",
            "reserved for unroutable",
        ),
        ("server-id=01,nonce-len=4,config-id=8", "0 to 6"),
        ("server-id=,nonce-len=4,config-id=0", "1 to 15 bytes"),
        ("server-id=01,nonce-len=3,config-id=0", "give 4 to 18"),
        (
            "server-id=0102030405060708090a0b,nonce-len=9,config-id=0",
            "at most 19",
        ),
        (
            "server-id=01,nonce-len=4,config-id=0,key=00",
            "AES-128 takes 16",
        ),
        ("server-id=0g,nonce-len=4,config-id=0", "not hex"),
        ("server-id=01,nonce-len=4", "config-id=N is missing"),
        (
            "server-id=01,nonce-len=4,config-id=0,colour=red",
            "unknown key",
        ),
        ("server-id=01,server-id=02,nonce-len=4,config-id=0", "twice"),
    ] {
        let e = LbConfig::parse(s).unwrap_err().to_string();
        assert!(e.contains(says), "{s}: {e}");
    }
    let c = LbConfig::parse("config-id=6, server-id=0x0a0b, nonce-len=17").unwrap();
    assert_eq!(c.server_id, [0x0a, 0x0b]);
    assert_eq!(c.params.cid_len(), 20);
    // A balancer's view: the server ID's length, not the ID.
    let p = LbParams::parse(&format!(
        "config-id=2,server-id-len=8,nonce-len=8,key={KEY}"
    ))
    .unwrap();
    assert_eq!((p.mode(), p.cid_len()), (Mode::SinglePass, 17));
    assert!(
        LbParams::parse("config-id=2,server-id=01,nonce-len=8")
            .unwrap_err()
            .to_string()
            .contains("unknown key 'server-id'")
    );
    // The key is not printed.
    let c = LbConfig::parse(&format!("server-id=01,nonce-len=4,config-id=0,key={KEY}")).unwrap();
    assert!(!format!("{c:?}").contains("8f95"));
}
