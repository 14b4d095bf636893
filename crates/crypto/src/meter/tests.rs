//! Tests of the meter, the metered provider and the in-memory pump.

use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

use super::mem::{Wire, exchange};
use super::*;
use crate::pki::{self, KeyType};
use crate::provider::{self, Algorithms, Version};
use crate::store::ServerSessionCache;

pub(crate) fn base(versions: &[Version]) -> CryptoProvider {
    Arc::unwrap_or_clone(provider::build(versions, &Algorithms::default()).unwrap())
}

pub(crate) fn server_config(
    p: CryptoProvider,
    versions: &[Version],
    g: &pki::Generated,
) -> ServerConfig {
    let mut c = ServerConfig::builder_with_provider(Arc::new(p))
        .with_protocol_versions(&provider::protocol_versions(versions))
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(g.chain_der().unwrap(), g.key_der().unwrap())
        .unwrap();
    // No RFC 8879 compression (rustls' default with its brotli/zlib features).
    c.cert_compressors = Vec::new();
    c
}

pub(crate) fn client_config(
    p: CryptoProvider,
    versions: &[Version],
    g: &pki::Generated,
) -> ClientConfig {
    ClientConfig::builder_with_provider(Arc::new(p))
        .with_protocol_versions(&provider::protocol_versions(versions))
        .unwrap()
        .with_root_certificates(g.roots().unwrap())
        .with_no_client_auth()
}

pub(crate) fn connect(
    c: &Arc<ClientConfig>,
    s: &Arc<ServerConfig>,
) -> (ClientConnection, ServerConnection) {
    let name = ServerName::try_from("localhost").unwrap();
    (
        ClientConnection::new(c.clone(), name).unwrap(),
        ServerConnection::new(s.clone()).unwrap(),
    )
}

/// A client and a server connection, each with a metered provider: the
/// client's meter, the server's, and the two ends.
fn metered_connection(
    v: &[Version],
    g: &pki::Generated,
) -> (Arc<Meter>, Arc<Meter>, ClientConnection, ServerConnection) {
    let (cm, sm) = (Meter::new(), Meter::new());
    let sc = Arc::new(server_config(metered(base(v), sm.clone()), v, g));
    let cc = Arc::new(client_config(metered(base(v), cm.clone()), v, g));
    let (c, s) = connect(&cc, &sc);
    (cm, sm, c, s)
}

#[test]
fn tls13_handshake_is_metered_on_both_sides() {
    let v = [Version::Tls13];
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let (cm, sm, mut c, mut s) = metered_connection(&v, &g);
    let mut wire = Wire::default();
    let (req, resp) = exchange(
        &mut c,
        &mut s,
        b"GET / HTTP/1.0\r\n\r\n",
        &[7u8; 5000],
        &mut wire,
    )
    .unwrap();
    assert_eq!(req, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(resp.len(), 5000);

    let s = sm.snapshot();
    let c = cm.snapshot();
    let sign = s.get(Op::Sign, "ecdsa_secp256r1_sha256").unwrap();
    assert_eq!(sign.calls, 1, "{s:?}");
    assert!(sign.nanos > 0);
    // Client: the CA's signature on the leaf and the CertificateVerify.
    assert!(c.total(Op::Verify).calls >= 2, "{c:?}");
    assert!(c.get(Op::Verify, "ecdsa_secp256r1_sha256").unwrap().calls >= 1);
    assert!(c.total(Op::KxStart).calls >= 1);
    assert!(c.total(Op::KxComplete).calls >= 1);
    assert_eq!(s.total(Op::KxStartAndComplete).calls, 1);
    // The server sealed the 5000-byte response as application data, and
    // its EncryptedExtensions..Finished as handshake records.
    assert!(s.total(Op::SealApplication).bytes >= 5000, "{s:?}");
    assert!(s.total(Op::SealHandshake).calls >= 1);
    assert!(c.total(Op::OpenApplication).bytes >= 5000);
    assert!(c.total(Op::OpenHandshake).calls >= 1);
    assert!(s.total(Op::OpenApplication).bytes as usize >= req.len());
    for snap in [&s, &c] {
        for op in [Op::Hash, Op::Extract, Op::Expand, Op::Hmac, Op::Random] {
            assert!(snap.total(op).calls > 0, "{op:?} not metered: {snap:?}");
        }
    }
    assert!(c.total(Op::Random).bytes >= 32);
    assert_eq!(s.total(Op::Sign).calls, 1);
    assert_eq!(c.total(Op::Sign).calls, 0);
}

#[test]
fn ml_dsa_chains_sign_and_verify_under_their_own_labels() {
    let v = [Version::Tls13];
    // An ML-DSA-44 leaf under an ECDSA P-256 intermediate: the server signs
    // with ML-DSA-44; the client verifies the leaf's ECDSA signature (by the
    // intermediate) and the ML-DSA CertificateVerify.
    let g = pki::generate_chain(KeyType::MlDsa44, Some(KeyType::EcdsaP256), &[]).unwrap();
    let (cm, sm, mut c, mut s) = metered_connection(&v, &g);
    let mut wire = Wire::default();
    exchange(&mut c, &mut s, b"ping", b"pong", &mut wire).unwrap();
    let s = sm.snapshot();
    let c = cm.snapshot();
    let sign = s.get(Op::Sign, "mldsa44").unwrap();
    assert_eq!(sign.calls, 1, "{s:?}");
    assert!(sign.nanos > 0);
    assert_eq!(s.get(Op::Sign, "other").unwrap().calls, 0);
    assert_eq!(c.get(Op::Verify, "mldsa44").unwrap().calls, 1, "{c:?}");
    assert_eq!(
        c.get(Op::Verify, "ecdsa_secp256r1_sha256").unwrap().calls,
        2
    );
    // A whole ML-DSA-87 chain: the root's signature on the intermediate,
    // the intermediate's on the leaf and the CertificateVerify.
    let g = pki::generate_chain(KeyType::MlDsa87, Some(KeyType::MlDsa87), &[]).unwrap();
    let (cm, sm, mut c, mut s) = metered_connection(&v, &g);
    exchange(&mut c, &mut s, b"ping", b"pong", &mut Wire::default()).unwrap();
    assert_eq!(sm.snapshot().get(Op::Sign, "mldsa87").unwrap().calls, 1);
    assert_eq!(cm.snapshot().get(Op::Verify, "mldsa87").unwrap().calls, 3);
}

#[test]
fn tls12_handshake_meters_prf_and_kx() {
    let v = [Version::Tls12];
    let g = pki::generate(KeyType::Rsa2048, &[]).unwrap();
    let (cm, sm, mut c, mut s) = metered_connection(&v, &g);
    let mut wire = Wire::default();
    exchange(&mut c, &mut s, b"ping", b"pong", &mut wire).unwrap();
    let s = sm.snapshot();
    let c = cm.snapshot();
    assert_eq!(s.total(Op::Sign).calls, 1);
    assert!(s.get(Op::Sign, "other").unwrap().calls == 0);
    assert_eq!(s.total(Op::KxStart).calls, 1);
    assert_eq!(s.total(Op::KxComplete).calls, 1);
    assert_eq!(c.total(Op::KxStart).calls, 1);
    assert_eq!(c.total(Op::KxComplete).calls, 1);
    // One master secret each side, key block and two Finished via expand.
    assert_eq!(s.total(Op::Extract).calls, 1);
    assert!(s.total(Op::Expand).calls >= 3);
    assert!(c.total(Op::Verify).calls >= 2);
    assert_eq!(s.total(Op::SealApplication).bytes, 4);
    assert_eq!(s.total(Op::OpenApplication).calls, 1);
}

/// Two connections to `sc` (the second resuming the first), and what
/// `m` metered.
fn connect_twice(sc: ServerConfig, v: &[Version], g: &pki::Generated, m: &Meter) -> Snapshot {
    let sc = Arc::new(sc);
    let cc = Arc::new(client_config(base(v), v, g));
    for _ in 0..2 {
        let (mut c, mut s) = connect(&cc, &sc);
        exchange(&mut c, &mut s, b"a", b"b", &mut Wire::default()).unwrap();
    }
    m.snapshot()
}

fn metered_cache(m: &Arc<Meter>) -> Arc<MeteredStore> {
    MeteredStore::new(
        ServerSessionCache::new(64, Duration::from_secs(60)),
        m.clone(),
    )
}

#[test]
fn store_and_ticketer_are_metered() {
    // TLS 1.2 session-ID resumption through a metered ServerSessionCache.
    let v = [Version::Tls12];
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let m = Meter::new();
    let mut sc = server_config(base(&v), &v, &g);
    sc.session_storage = metered_cache(&m);
    let snap = connect_twice(sc, &v, &g, &m);
    assert_eq!(snap.total(Op::StorePut).calls, 1, "{snap:?}");
    assert_eq!(snap.total(Op::StoreGet).calls, 1);
    assert!(snap.total(Op::StoreGet).bytes > 0, "the lookup should hit");

    // TLS 1.3 stateful tickets: `put` when issued, `take` on resumption.
    let v = [Version::Tls13];
    let m = Meter::new();
    let mut sc = server_config(base(&v), &v, &g);
    sc.session_storage = metered_cache(&m);
    sc.send_tls13_tickets = 1;
    let snap = connect_twice(sc, &v, &g, &m);
    assert_eq!(snap.total(Op::StorePut).calls, 2, "{snap:?}");
    assert_eq!(snap.total(Op::StoreGet).calls, 1);
    assert!(snap.total(Op::StoreGet).bytes > 0, "the take should hit");

    // TLS 1.3 tickets through a metered ticketer.
    let v = [Version::Tls13];
    let m = Meter::new();
    let mut sc = server_config(base(&v), &v, &g);
    sc.ticketer = MeteredTicketer::new(provider::ticketer().unwrap(), m.clone());
    sc.send_tls13_tickets = 1;
    let snap = connect_twice(sc, &v, &g, &m);
    assert_eq!(snap.total(Op::TicketSeal).calls, 2, "{snap:?}");
    assert_eq!(snap.total(Op::TicketOpen).calls, 1);
}

#[test]
fn snapshot_diff_and_json() {
    let m = Meter::new();
    let t = std::time::Instant::now();
    m.record(
        Op::Sign,
        scheme_label(rustls::SignatureScheme::ED25519),
        10,
        t,
    );
    let before = m.snapshot();
    m.record(
        Op::Sign,
        scheme_label(rustls::SignatureScheme::ED25519),
        5,
        t,
    );
    m.record(Op::Random, 0, 32, t);
    m.record(
        Op::KxStart,
        group_label(rustls::NamedGroup::Unknown(0xFE1D)),
        0,
        t,
    );
    let d = m.snapshot().diff(&before);
    assert_eq!(d.get(Op::Sign, "ed25519").unwrap().calls, 1);
    assert_eq!(d.get(Op::Sign, "ed25519").unwrap().bytes, 5);
    assert_eq!(d.total(Op::Random).bytes, 32);
    assert_eq!(d.get(Op::KxStart, "private").unwrap().calls, 1);
    let json = serde_json::to_string(&d).unwrap();
    assert!(json.contains("\"op\":\"sign\""), "{json}");
    assert!(json.contains("\"label\":\"ed25519\""), "{json}");
    assert!(
        !json.contains("verify"),
        "zero entries are not serialised: {json}"
    );
    assert_eq!(d.nonzero().count(), 3);
}

#[test]
fn crypto_time_sums_every_op_but_the_session_store() {
    let m = Meter::new();
    m.add(Op::Sign, 0, 1, 700, 0);
    m.add(Op::SealApplication, 0, 2, 50, 10);
    m.add(Op::StoreGet, 0, 1, 9_000, 0);
    m.add(Op::StorePut, 0, 1, 9_000, 0);
    m.add(Op::TicketOpen, 0, 1, 250, 0);
    assert_eq!(m.snapshot().crypto_time(), Duration::from_nanos(1_000));
    assert_eq!(Meter::new().snapshot().crypto_time(), Duration::ZERO);
}

#[test]
fn concurrent_records_all_count() {
    let m = Meter::new();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    m.add(Op::Hash, 0, 1, 2, 3);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = m.snapshot().total(Op::Hash);
    assert_eq!((s.calls, s.nanos, s.bytes), (80_000, 160_000, 240_000));
}

#[test]
fn self_overhead_is_small_and_positive() {
    let d = self_overhead_n(100_000);
    assert!(d > Duration::ZERO);
    assert!(d < Duration::from_micros(5), "{d:?} per record");
}
