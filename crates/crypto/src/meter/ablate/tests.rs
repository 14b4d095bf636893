//! Every ablation is shown to change what it claims, on the wire or in
//! the provider, and mismatched sides are shown to fail, not hang.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, HandshakeKind, ServerConfig, ServerConnection};

use super::fakes::{KX_FILL, SIG_FILL, private_code_point};
use super::*;
use crate::meter::mem::{PumpError, Wire, exchange, records};
use crate::meter::{Meter, Op, metered};
use crate::pki::{self, Generated, KeyType};
use crate::provider::{self, Algorithms, Version};
use crate::store::{ClientSessions, ServerSessionCache};

const SECRET: &[u8] = b"THE-PLAINTEXT-RESPONSE-MARKER-0123456789";

fn base(v: &[Version], groups: Option<&[&str]>) -> CryptoProvider {
    let alg = Algorithms {
        suites: None,
        groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
        ..Algorithms::default()
    };
    Arc::unwrap_or_clone(provider::build(v, &alg).unwrap())
}

struct Side {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    cmeter: Arc<Meter>,
    smeter: Arc<Meter>,
    sessions: Arc<ClientSessions>,
}

fn server_cfg(
    set: AblationSet,
    v: &[Version],
    g: &Generated,
    m: &Arc<Meter>,
    groups: Option<&[&str]>,
) -> Arc<ServerConfig> {
    let p = metered(ablated(base(v, groups), &set).unwrap(), m.clone());
    let mut sc = ServerConfig::builder_with_provider(Arc::new(p))
        .with_protocol_versions(&provider::protocol_versions(v))
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(g.chain_der().unwrap(), g.key_der().unwrap())
        .unwrap();
    sc.session_storage = set.server_store(ServerSessionCache::new(100, Duration::from_secs(60)));
    sc.cert_compressors = Vec::new();
    Arc::new(sc)
}

fn client_cfg(
    set: AblationSet,
    v: &[Version],
    g: &Generated,
    m: &Arc<Meter>,
    sessions: &Arc<ClientSessions>,
    groups: Option<&[&str]>,
) -> Arc<ClientConfig> {
    let p = Arc::new(metered(ablated(base(v, groups), &set).unwrap(), m.clone()));
    let verifier = set.server_cert_verifier(&p, g.roots().unwrap()).unwrap();
    let mut cc = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&provider::protocol_versions(v))
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    cc.resumption = Resumption::store(set.client_store(sessions.clone()));
    Arc::new(cc)
}

fn setup(
    cset: AblationSet,
    sset: AblationSet,
    v: &[Version],
    g: &Generated,
    groups: Option<&[&str]>,
) -> Side {
    let (cmeter, smeter) = (Meter::new(), Meter::new());
    let sessions = ClientSessions::new();
    Side {
        client: client_cfg(cset, v, g, &cmeter, &sessions, groups),
        server: server_cfg(sset, v, g, &smeter, groups),
        cmeter,
        smeter,
        sessions,
    }
}

fn conns(s: &Side) -> (ClientConnection, ServerConnection) {
    (
        ClientConnection::new(s.client.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap(),
        ServerConnection::new(s.server.clone()).unwrap(),
    )
}

fn run(s: &Side) -> Result<Wire, PumpError> {
    let (mut c, mut sv) = conns(s);
    let mut wire = Wire::default();
    let (req, resp) = exchange(&mut c, &mut sv, b"GET /", SECRET, &mut wire)?;
    assert_eq!(req, b"GET /");
    assert_eq!(resp, SECRET);
    Ok(wire)
}

/// One exchange with the ablations `a` on both sides.
fn run_both(a: AblationSet, v: &[Version], g: &Generated) -> Wire {
    run(&setup(a, a, v, g, None)).unwrap()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn set(s: &str) -> AblationSet {
    s.parse().unwrap()
}

const BOTH: [&[Version]; 2] = [&[Version::Tls13], &[Version::Tls12]];

#[test]
fn parse_and_display() {
    assert_eq!(set("sig, KX").to_string(), "sig,kx");
    assert_eq!(set("").to_string(), "none");
    assert_eq!(set("none"), AblationSet::NONE);
    assert_eq!(set("skeleton"), AblationSet::skeleton());
    assert!(set("skeleton").contains(Ablation::Cache));
    assert!(!set("skeleton").contains(Ablation::Kdf));
    assert!(set("minimal").contains(Ablation::Kdf));
    assert!(!set("minimal").contains(Ablation::Cipher));
    let err = "sig,rsa".parse::<AblationSet>().unwrap_err().to_string();
    assert!(err.contains("'rsa'") && err.contains("skeleton"), "{err}");
    assert_eq!(
        serde_json::to_string(&set("kx,sig")).unwrap(),
        r#"["sig","kx"]"#
    );
}

#[test]
fn every_ablation_handshakes_on_both_versions() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let mut names: Vec<String> = Ablation::ALL.iter().map(|a| a.name().to_string()).collect();
    names.push("skeleton".into());
    names.push("minimal".into());
    for v in BOTH {
        for name in &names {
            let a = set(name);
            let side = setup(a, a, v, &g, None);
            run(&side).unwrap_or_else(|e| panic!("{name} on {v:?}: {e}"));
            // Metering sits on top of the ablations and still counts.
            let s = side.smeter.snapshot();
            assert_eq!(s.total(Op::Sign).calls, 1, "{name} {v:?}");
            assert!(s.total(Op::SealApplication).bytes >= SECRET.len() as u64);
            assert!(
                side.cmeter.snapshot().total(Op::Verify).calls >= 1,
                "{name} {v:?}"
            );
        }
    }
}

#[test]
fn null_cipher_sends_plaintext_with_real_sizes() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    for v in BOTH {
        let real = run_both(AblationSet::NONE, v, &g);
        let null = run_both(set("cipher"), v, &g);
        assert!(!contains(&real.server_to_client, SECRET), "{v:?}");
        assert!(
            contains(&null.server_to_client, SECRET),
            "{v:?}: plaintext not on the wire"
        );
        // The record carrying the response has the same size either way.
        let last = |w: &Wire| {
            records(&w.server_to_client)
                .last()
                .map(|r| r.2.len())
                .unwrap()
        };
        assert_eq!(last(&real), last(&null), "{v:?}");
        // And ends in a zero tag of the real size.
        let rec = records(&null.server_to_client).last().unwrap().2.to_vec();
        assert_eq!(&rec[rec.len() - 16..], &[0u8; 16]);
    }
}

#[test]
fn mac_ablation_encrypts_without_a_tag() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    for v in BOTH {
        let real = run_both(AblationSet::NONE, v, &g);
        let mac = run_both(set("mac"), v, &g);
        assert!(
            !contains(&mac.server_to_client, SECRET),
            "{v:?}: mac must still encrypt"
        );
        let rec = |w: &Wire| records(&w.server_to_client).last().unwrap().2.to_vec();
        let (r, m) = (rec(&real), rec(&mac));
        assert_eq!(r.len(), m.len(), "{v:?}: sizes kept");
        assert_eq!(&m[m.len() - 16..], &[0u8; 16], "{v:?}: tag is zero");
        assert_ne!(&r[r.len() - 16..], &[0u8; 16]);
        // The body is not the plaintext (it is AES-CTR output).
        assert!(!contains(&m, &SECRET[..16]));
    }
}

#[test]
fn sig_ablation_sends_the_constant() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let marker = [SIG_FILL; 64];
    // TLS 1.2 ServerKeyExchange is in the clear; in TLS 1.3 the
    // CertificateVerify is visible once the cipher is NULL too.
    for (v, extra) in [
        (&[Version::Tls12][..], ""),
        (&[Version::Tls13][..], ",cipher"),
    ] {
        let on = set(&format!("sig{extra}"));
        let off = set(extra.trim_start_matches(','));
        let a = run_both(on, v, &g);
        let b = run_both(off, v, &g);
        assert!(contains(&a.server_to_client, &marker), "{v:?}");
        assert!(!contains(&b.server_to_client, &marker), "{v:?}");
    }
    // RSA: the constant has the modulus length (256 bytes for RSA-2048).
    let rsa = pki::generate(KeyType::Rsa2048, &[]).unwrap();
    let w = run_both(set("sig"), &[Version::Tls12], &rsa);
    assert!(contains(&w.server_to_client, &[SIG_FILL; 256]));
    assert!(!contains(&w.server_to_client, &[SIG_FILL; 257]));
}

#[test]
fn kx_ablation_sends_the_fixed_share_on_a_private_code_point() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let code = u16::from(private_code_point(rustls::NamedGroup::X25519));
    assert_eq!(code, 0xFE1D);
    let mut entry = code.to_be_bytes().to_vec();
    entry.extend_from_slice(&32u16.to_be_bytes());
    entry.extend_from_slice(&[KX_FILL; 32]);
    let side = setup(
        set("kx"),
        set("kx"),
        &[Version::Tls13],
        &g,
        Some(&["x25519"]),
    );
    let w = run(&side).unwrap();
    let hello = records(&w.client_to_server)[0].2;
    assert!(
        contains(hello, &entry),
        "ClientHello key_share is not the fixed one"
    );
    let server_hello = records(&w.server_to_client)[0].2;
    assert!(
        contains(server_hello, &entry),
        "ServerHello key_share is not the fixed one"
    );
    assert_eq!(
        side.cmeter
            .snapshot()
            .get(Op::KxStart, "private")
            .unwrap()
            .calls,
        1
    );
    // Sizes kept: the hybrid group's fake share is as long as the real one.
    let w = run(&setup(
        set("kx"),
        set("kx"),
        &[Version::Tls13],
        &g,
        Some(&["X25519MLKEM768"]),
    ))
    .unwrap();
    let mut hybrid = u16::from(private_code_point(rustls::NamedGroup::X25519MLKEM768))
        .to_be_bytes()
        .to_vec();
    hybrid.extend_from_slice(&1216u16.to_be_bytes());
    assert!(contains(records(&w.client_to_server)[0].2, &hybrid));
}

fn client_random(w: &Wire) -> [u8; 32] {
    let hello = records(&w.client_to_server)[0].2;
    // handshake type (1), length (3), legacy version (2), random (32)
    hello[6..38].try_into().unwrap()
}

#[test]
fn rng_ablation_makes_the_random_a_counter() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let is_counter = |r: [u8; 32]| {
        let w: Vec<u64> = r
            .chunks(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap()))
            .collect();
        w.windows(2).all(|p| p[1] == p[0] + 1)
    };
    let a = run_both(set("rng"), &[Version::Tls13], &g);
    assert!(is_counter(client_random(&a)), "{:?}", client_random(&a));
    let b = run_both(AblationSet::NONE, &[Version::Tls13], &g);
    assert!(!is_counter(client_random(&b)));
}

#[test]
fn hash_ablation_gives_constant_digests() {
    for v in BOTH {
        let p = ablated(base(v, None), &set("hash")).unwrap();
        let real = base(v, None);
        let hp = |s: &rustls::SupportedCipherSuite| match s {
            rustls::SupportedCipherSuite::Tls13(t) => t.common.hash_provider,
            rustls::SupportedCipherSuite::Tls12(t) => t.common.hash_provider,
        };
        for (s, r) in p.cipher_suites.iter().zip(real.cipher_suites.iter()) {
            let h = hp(s);
            let a = h.hash(b"one");
            assert_eq!(a.as_ref(), h.hash(b"two").as_ref());
            assert_eq!(a.as_ref().len(), hp(r).output_len());
            assert!(
                a.as_ref()
                    .iter()
                    .all(|b| *b == crate::meter::ablate::cipher::HASH_FILL)
            );
            let mut ctx = h.start();
            ctx.update(b"x");
            assert_eq!(ctx.finish().as_ref(), a.as_ref());
            assert_ne!(hp(r).hash(b"one").as_ref(), a.as_ref());
        }
    }
}

#[test]
fn perfect_cache_always_hits() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let v = [Version::Tls12];
    let side = setup(set("cache"), set("cache"), &v, &g, None);
    side.sessions.set_offer(true);
    let mut kinds = Vec::new();
    for _ in 0..3 {
        let (mut c, mut s) = conns(&side);
        exchange(&mut c, &mut s, b"a", b"b", &mut Wire::default()).unwrap();
        kinds.push(c.handshake_kind());
    }
    assert_eq!(
        kinds,
        [
            Some(HandshakeKind::Full),
            Some(HandshakeKind::Resumed),
            Some(HandshakeKind::Resumed)
        ]
    );
    // Any key hits; later stores do not replace the universal session.
    let store = set("cache").server_store(ServerSessionCache::new(4, Duration::from_secs(60)));
    let v12 = |b: u8| vec![0, 0x03, 0x03, b];
    assert!(store.put(b"k1".to_vec(), v12(1)));
    assert!(store.put(b"k2".to_vec(), v12(2)));
    assert_eq!(store.get(b"never stored"), Some(v12(1)));
    assert_eq!(store.get(b"k2"), Some(v12(1)));
    // TLS 1.3 tickets still resume through the real store.
    let side = setup(set("cache"), set("cache"), &[Version::Tls13], &g, None);
    side.sessions.set_offer(true);
    for want in [HandshakeKind::Full, HandshakeKind::Resumed] {
        let (mut c, mut s) = conns(&side);
        exchange(&mut c, &mut s, b"a", b"b", &mut Wire::default()).unwrap();
        assert_eq!(c.handshake_kind(), Some(want));
    }
}

#[test]
fn minimal_setup_uses_zero_keys_and_real_encryption() {
    use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let w = run_both(set("minimal"), &[Version::Tls13], &g);
    assert!(
        !contains(&w.server_to_client, SECRET),
        "minimal still encrypts"
    );
    // With all-zero keys and IVs, the response opens with a zero key and
    // the nonce equal to its sequence number.
    let recs = records(&w.server_to_client);
    let rec = recs.last().unwrap();
    let mut header = vec![rec.0];
    header.extend_from_slice(&rec.1.to_be_bytes());
    header.extend_from_slice(&(rec.2.len() as u16).to_be_bytes());
    let mut opened = false;
    for alg in [&AES_256_GCM, &AES_128_GCM] {
        let key = LessSafeKey::new(UnboundKey::new(alg, &vec![0u8; alg.key_len()]).unwrap());
        for seq in 0u64..8 {
            let mut n = [0u8; 12];
            n[4..].copy_from_slice(&seq.to_be_bytes());
            let mut buf = rec.2.to_vec();
            if let Ok(p) = key.open_in_place(
                Nonce::assume_unique_for_key(n),
                Aad::from(&header),
                &mut buf,
            ) {
                assert!(p.starts_with(SECRET));
                opened = true;
            }
        }
    }
    assert!(opened, "the response did not open with a zero key");
}

fn mismatch(c: &str, s: &str, v: &[Version]) -> String {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    match run(&setup(set(c), set(s), v, &g, None)) {
        Ok(_) => panic!("client {c} / server {s} on {v:?} should fail"),
        Err(PumpError::Client(e) | PumpError::Server(e)) => {
            let hint = mismatch_hint(&e).unwrap_or_else(|| panic!("no hint for {e:?}"));
            assert!(hint.contains("--ablate"), "{hint}");
            format!("{e}: {hint}")
        }
        Err(e) => panic!("client {c} / server {s} on {v:?}: {e}"),
    }
}

#[test]
fn mismatched_ablations_fail_clearly() {
    for v in BOTH {
        for (c, s) in [
            ("kx", ""),
            ("", "kx"),
            ("sig", ""),
            ("", "sig"),
            ("cipher", ""),
            ("", "cipher"),
            ("mac", ""),
            ("hash", ""),
            ("minimal", ""),
        ] {
            mismatch(c, s, v);
        }
    }
    let e = mismatch("", "sig", &[Version::Tls13]);
    assert!(e.contains("--ablate sig"), "{e}");
    let e = mismatch("sig", "", &[Version::Tls13]);
    assert!(e.contains("sig ablation"), "{e}");
}

#[test]
fn real_verifier_never_accepts_an_ablated_signature() {
    let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
    let v = [Version::Tls13];
    let m = Meter::new();
    for sset in [set("sig"), AblationSet::NONE] {
        // The client's provider is sig-ablated but it uses the ordinary
        // WebPKI verifier instead of the ablation API's.
        let p = Arc::new(ablated(base(&v, None), &set("sig")).unwrap());
        let cc = Arc::new(
            ClientConfig::builder_with_provider(p)
                .with_protocol_versions(&provider::protocol_versions(&v))
                .unwrap()
                .with_root_certificates(g.roots().unwrap())
                .with_no_client_auth(),
        );
        let side = Side {
            client: cc,
            server: server_cfg(sset, &v, &g, &m, None),
            cmeter: m.clone(),
            smeter: m.clone(),
            sessions: ClientSessions::new(),
        };
        assert!(run(&side).is_err(), "server {sset}");
    }
}
