//! Criterion benches of complete TLS handshakes in memory: a rustls client
//! and server connection driven against each other through byte buffers,
//! no sockets, so the time is the crypto-and-protocol-only bound on
//! handshakes per second per core. Unmetered, metered, and with the
//! `skeleton` ablation (everything replaced) for comparison.
//!
//! Run: `cargo bench -p tlslab-crypto --bench handshake -- --warm-up-time 1 --measurement-time 2`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, HandshakeKind, ServerConfig, ServerConnection};
use tlslab_crypto::meter::mem::{Wire, pump};
use tlslab_crypto::meter::{self, AblationSet, Meter};
use tlslab_crypto::pki::{self, Generated, KeyType};
use tlslab_crypto::provider::{self, Algorithms, Version};
use tlslab_crypto::store::{ClientSessions, ServerSessionCache};

#[derive(Clone, Copy)]
enum Mode {
    Unmetered,
    Metered,
    Skeleton,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Unmetered => "unmetered",
            Mode::Metered => "metered",
            Mode::Skeleton => "skeleton",
        }
    }
}

struct Case {
    name: &'static str,
    version: Version,
    suite: &'static str,
    resumed: bool,
}

fn provider_for(case: &Case, mode: Mode) -> CryptoProvider {
    let alg = Algorithms {
        suites: Some(vec![case.suite.into()]),
        groups: Some(vec!["x25519".into()]),
        ..Algorithms::default()
    };
    let base = Arc::unwrap_or_clone(provider::build(&[case.version], &alg).expect("provider"));
    match mode {
        Mode::Unmetered => base,
        Mode::Metered => meter::metered(base, Meter::new()),
        Mode::Skeleton => {
            meter::ablated(base, &AblationSet::skeleton()).expect("skeleton provider")
        }
    }
}

fn configs(
    case: &Case,
    mode: Mode,
    g: &Generated,
) -> (Arc<ClientConfig>, Arc<ServerConfig>, Arc<ClientSessions>) {
    let set = match mode {
        Mode::Skeleton => AblationSet::skeleton(),
        _ => AblationSet::NONE,
    };
    let v = provider::protocol_versions(&[case.version]);
    let mut sc = ServerConfig::builder_with_provider(Arc::new(provider_for(case, mode)))
        .with_protocol_versions(&v)
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(g.chain_der().expect("chain"), g.key_der().expect("key"))
        .expect("server config");
    sc.session_storage =
        set.server_store(ServerSessionCache::new(10_000, Duration::from_secs(600)));
    sc.send_tls13_tickets = if case.resumed { 1 } else { 0 };
    // No RFC 8879 compression (rustls' default with its brotli/zlib features).
    sc.cert_compressors = Vec::new();
    let cp = Arc::new(provider_for(case, mode));
    let verifier = set
        .server_cert_verifier(&cp, g.roots().expect("roots"))
        .expect("verifier");
    let mut cc = ClientConfig::builder_with_provider(cp)
        .with_protocol_versions(&v)
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let sessions = ClientSessions::new();
    sessions.set_offer(case.resumed);
    cc.resumption = rustls::client::Resumption::store(set.client_store(sessions.clone()));
    (Arc::new(cc), Arc::new(sc), sessions)
}

fn handshake(c: &Arc<ClientConfig>, s: &Arc<ServerConfig>) -> Option<HandshakeKind> {
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(c.clone(), name).expect("client");
    let mut server = ServerConnection::new(s.clone()).expect("server");
    let mut wire = Wire::default();
    pump(&mut client, &mut server, &mut wire).expect("handshake");
    client.handshake_kind()
}

fn handshakes(c: &mut Criterion) {
    let g = pki::generate(KeyType::EcdsaP256, &[]).expect("certificates");
    let cases = [
        Case {
            name: "tls13_ecdsa_p256_x25519_full",
            version: Version::Tls13,
            suite: "TLS13_AES_128_GCM_SHA256",
            resumed: false,
        },
        Case {
            name: "tls13_ecdsa_p256_x25519_resumed",
            version: Version::Tls13,
            suite: "TLS13_AES_128_GCM_SHA256",
            resumed: true,
        },
        Case {
            name: "tls12_ecdhe_ecdsa_aes128gcm_full",
            version: Version::Tls12,
            suite: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            resumed: false,
        },
        Case {
            name: "tls12_ecdhe_ecdsa_aes128gcm_resumed",
            version: Version::Tls12,
            suite: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            resumed: true,
        },
    ];
    let mut group = c.benchmark_group("handshake_in_memory");
    for case in &cases {
        for mode in [Mode::Unmetered, Mode::Metered, Mode::Skeleton] {
            let (cc, sc, _sessions) = configs(case, mode, &g);
            // Prime the session store, then check every handshake is of the
            // kind the case claims.
            handshake(&cc, &sc);
            let want = if case.resumed {
                HandshakeKind::Resumed
            } else {
                HandshakeKind::Full
            };
            for _ in 0..3 {
                assert_eq!(
                    handshake(&cc, &sc),
                    Some(want),
                    "{} {}",
                    case.name,
                    mode.name()
                );
            }
            group.bench_function(BenchmarkId::new(mode.name(), case.name), |b| {
                b.iter(|| handshake(&cc, &sc))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, handshakes);
criterion_main!(benches);
