//! The lazily derived Initial keys against rustls's, key by key.

use super::*;
use quinn::crypto::ServerConfig as _;
use quinn::crypto::rustls::QuicServerConfig;
use tlslab_crypto::pki::{self, KeyType};

fn inner() -> Arc<QuicServerConfig> {
    with_provider(rustls::crypto::aws_lc_rs::default_provider())
}

fn with_provider(provider: rustls::crypto::CryptoProvider) -> Arc<QuicServerConfig> {
    let g = pki::generate(KeyType::EcdsaP256, &["localhost".to_string()]).unwrap();
    let provider = Arc::new(provider);
    let c = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(g.chain_der().unwrap(), g.key_der().unwrap())
        .unwrap();
    Arc::new(QuicServerConfig::try_from(Arc::new(c)).unwrap())
}

/// A client's first Initial to `dcid` (v1, 2-byte packet number 5), sealed
/// with rustls's client Initial keys: the packet and its header's length.
fn client_initial(dcid: &[u8], frames: &[u8]) -> (Vec<u8>, usize) {
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .unwrap();
    let keys = rustls::quic::Keys::initial(
        rustls::quic::Version::V1,
        suite,
        suite.quic.unwrap(),
        dcid,
        rustls::Side::Client,
    );
    let mut payload = frames.to_vec();
    payload.resize(1162, 0);
    let mut p = vec![0xc1, 0, 0, 0, 1, dcid.len() as u8];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0, 0]); // SCID, token
    p.extend_from_slice(&((2 + payload.len() + 16) as u16 | 0x4000).to_be_bytes());
    let pn_offset = p.len();
    p.extend_from_slice(&[0, 5]);
    let tag = keys
        .local
        .packet
        .encrypt_in_place(5, &p, &mut payload)
        .unwrap();
    p.extend_from_slice(&payload);
    p.extend_from_slice(tag.as_ref());
    let sample = p[pn_offset + 4..pn_offset + 20].to_vec();
    let (head, rest) = p.split_at_mut(pn_offset);
    keys.local
        .header
        .encrypt_in_place(&sample, &mut head[0], &mut rest[..2])
        .unwrap();
    (p, pn_offset)
}

#[test]
fn the_header_key_alone_first_then_rustls_keys_byte_for_byte() {
    let inner = inner();
    let dcid = ConnectionId::new(&[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]);
    let frames = [0x06, 0x00, 0x03, 7, 8, 9];
    let (packet, pn_offset) = client_initial(&dcid, &frames);
    let want = inner.initial_keys(V1, &dcid).unwrap();
    let header = ClientHeaderKey::derive(V1, &dcid).unwrap();
    let lazy = Lazy::new(inner.clone(), &dcid, header);
    let keys = lazy.clone().keys_boxed();

    // Reading the header needs the client's header key alone.
    let (mut a, mut b) = (packet.clone(), packet.clone());
    keys.header.remote.decrypt(pn_offset, &mut a);
    want.header.remote.decrypt(pn_offset, &mut b);
    assert_eq!(a, b);
    assert_eq!(
        (a[0] & 0x03, &a[pn_offset..pn_offset + 2]),
        (1, &[0, 5][..])
    );
    assert!(lazy.keys.get().is_none(), "nothing else derived yet");
    assert_eq!(keys.header.remote.sample_size(), 16);
    assert_eq!(keys.packet.remote.tag_len(), want.packet.remote.tag_len());
    assert_eq!(
        (
            keys.packet.local.confidentiality_limit(),
            keys.packet.local.integrity_limit()
        ),
        (
            want.packet.local.confidentiality_limit(),
            want.packet.local.integrity_limit()
        )
    );
    assert!(lazy.keys.get().is_none());

    // Accepting it: the payload opens under the keys rustls derives now.
    let hlen = pn_offset + 2;
    let mut payload = BytesMut::from(&a[hlen..]);
    keys.packet
        .remote
        .decrypt(5, &a[..hlen], &mut payload)
        .unwrap();
    assert_eq!(&payload[..frames.len()], &frames);
    assert!(lazy.keys.get().is_some());
    // From then on the header key is rustls's too: the same bytes.
    let mut c = packet.clone();
    keys.header.remote.decrypt(pn_offset, &mut c);
    assert_eq!(c, b);

    // The server's side (a CONNECTION_CLOSE, a ServerHello): rustls's own.
    let mut out = [1u8; 64];
    let mut ref_out = out;
    keys.packet.local.encrypt(0, &mut out, 20);
    want.packet.local.encrypt(0, &mut ref_out, 20);
    assert_eq!(out, ref_out);
    keys.header.local.encrypt(18, &mut out);
    want.header.local.encrypt(18, &mut ref_out);
    assert_eq!(out, ref_out);
}

#[test]
fn a_forged_payload_still_fails_and_other_versions_are_rustls_alone() {
    let inner = inner();
    let dcid = ConnectionId::new(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let (mut packet, pn_offset) = client_initial(&dcid, &[0x01]);
    let n = packet.len();
    packet[n - 1] ^= 1;
    let keys = initial_keys(&inner, true, V1, &dcid).unwrap();
    keys.header.remote.decrypt(pn_offset, &mut packet);
    let hlen = pn_offset + 2;
    let mut payload = BytesMut::from(&packet[hlen..]);
    assert!(
        keys.packet
            .remote
            .decrypt(5, &packet[..hlen], &mut payload)
            .is_err()
    );
    // A version quinn does not serve is refused as before.
    assert!(initial_keys(&inner, true, 0x0a0a_0a0a, &dcid).is_err());
}

#[test]
fn the_retry_tag_is_quinns() {
    let inner = inner();
    let odcid = ConnectionId::new(&[9, 8, 7, 6, 5, 4, 3, 2, 1]);
    let packet: Vec<u8> = (0..60u8).collect();
    assert_eq!(
        tlslab_crypto::quic::retry_tag_v1(&odcid, &packet),
        Some(inner.retry_tag(V1, &odcid, &packet))
    );
}

#[test]
fn a_refusal_seals_with_the_servers_keys_alone_as_rustls_would() {
    let inner = inner();
    let dcid = ConnectionId::new(&[0xaa; 12]);
    let want = inner.initial_keys(V1, &dcid).unwrap();
    let lazy = Lazy::new(
        inner.clone(),
        &dcid,
        ClientHeaderKey::derive(V1, &dcid).unwrap(),
    );
    let keys = lazy.clone().keys_boxed();
    // A long header of 26 bytes (1-byte packet number at 25), a 30-byte
    // payload and its tag; as quinn seals a CONNECTION_CLOSE: the payload,
    // then the header.
    let mut out = [0u8; 72];
    out[0] = 0xc0;
    for (i, b) in out[1..56].iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut ref_out = out;
    keys.packet.local.encrypt(0, &mut out, 26);
    keys.header.local.encrypt(25, &mut out);
    assert!(lazy.keys.get().is_none(), "rustls's four keys not derived");
    assert!(lazy.local.get().is_some_and(|k| k.is_some()));
    want.packet.local.encrypt(0, &mut ref_out, 26);
    want.header.local.encrypt(25, &mut ref_out);
    assert_eq!(out, ref_out);
}

#[test]
fn keys_are_derived_lazily_only_under_rfc_initial_keys() {
    use tlslab_crypto::meter::{Ablation, AblationSet, ablated};
    assert!(rfc_initial_keys(&inner()));
    // Ablated QUIC key schedule, header or packet protection: rustls's
    // keys throughout, like the ablated client's.
    for a in [
        Ablation::QuicKeys,
        Ablation::QuicHeader,
        Ablation::QuicPacket,
    ] {
        let set: AblationSet = [a].into_iter().collect();
        let p = ablated(rustls::crypto::aws_lc_rs::default_provider(), &set).unwrap();
        assert!(!rfc_initial_keys(&with_provider(p)), "{a:?}");
    }
}
