//! The metering provider and the ablations, seen from the server: crypto
//! counters in the snapshot and on /metrics, a NULL-cipher run whose
//! response is readable on the wire, the loopback guard, and mismatched
//! ablations counted as `ablation_mismatch`. Every address is loopback.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rustls::ClientConfig;
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use tlslab_crypto::meter::{AblationSet, ablated};
use tlslab_crypto::pki::Generated;
use tlslab_crypto::provider::{self, Algorithms, Version};
use tlslab_crypto::store::ClientSessions;
use tlslab_server::{Content, Op, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A client whose provider is ablated by `set` (nothing if empty), with
/// the verifier `AblationSet::server_cert_verifier` gives for that set.
fn ablated_client(
    g: &Generated,
    versions: &[Version],
    alg: &Algorithms,
    set: AblationSet,
    sessions: Option<Arc<ClientSessions>>,
) -> Arc<ClientConfig> {
    let base = (*provider::build(versions, alg).unwrap()).clone();
    let p: Arc<CryptoProvider> = Arc::new(ablated(base, &set).unwrap());
    let verifier = set.server_cert_verifier(&p, g.roots().unwrap()).unwrap();
    let mut c = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&provider::protocol_versions(versions))
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    if let Some(s) = sessions {
        c.resumption = Resumption::store(s);
    }
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

#[test]
fn metered_handshakes_count_signatures_key_exchanges_and_records() {
    let g = generated();
    let cfg = tls13_cached(&g, 100);
    let server = Server::start(cfg).unwrap();
    assert!(server.warnings().is_empty(), "{:?}", server.warnings());
    let addr = server.https_addr().unwrap();
    let sessions = ClientSessions::new();
    let client = client_config(
        &g,
        &[Version::Tls13],
        Some(sessions.clone()),
        &[b"http/1.1"],
    );

    sessions.set_offer(false);
    let full = rt().block_on(https_get(addr, client.clone(), "/bytes/5000"));
    assert_eq!((full.status, full.body.len()), (200, 5000));
    assert_eq!(full.kind, Some(rustls::HandshakeKind::Full));
    let after_full = server.crypto_snapshot();
    // One ECDSA P-256 signature per full TLS 1.3 handshake, no verification
    // (no client certificates), one fused server-side key exchange.
    let sign = after_full.get(Op::Sign, "ecdsa_secp256r1_sha256").unwrap();
    assert_eq!(sign.calls, 1, "{after_full:?}");
    assert!(sign.nanos > 0 && sign.bytes > 0, "{sign:?}");
    assert_eq!(after_full.total(Op::Sign).calls, 1);
    assert_eq!(after_full.total(Op::Verify).calls, 0);
    assert_eq!(after_full.total(Op::KxStartAndComplete).calls, 1);
    // EncryptedExtensions, Certificate, CertificateVerify, Finished (maybe
    // coalesced) and the two tickets are sealed as handshake records; the
    // client's Finished is opened as one.
    assert!(after_full.total(Op::SealHandshake).calls >= 2);
    assert!(after_full.total(Op::OpenHandshake).calls >= 1);
    // The response (5000 bytes of body plus headers) left in application
    // records; the request arrived in one.
    let seal_app = after_full.total(Op::SealApplication);
    assert!(seal_app.bytes >= 5000, "{seal_app:?}");
    assert!(after_full.total(Op::OpenApplication).calls >= 1);
    // Two stateful tickets stored in the metered session store.
    assert_eq!(after_full.total(Op::StorePut).calls, 2, "{after_full:?}");

    sessions.set_offer(true);
    let resumed = rt().block_on(https_get(addr, client.clone(), "/health"));
    assert_eq!(resumed.kind, Some(rustls::HandshakeKind::Resumed));
    let after_resumed = server.crypto_snapshot();
    let d = after_resumed.diff(&after_full);
    // A resumed handshake signs nothing but still does a (psk_dhe_ke) key
    // exchange and takes the ticket from the store.
    assert_eq!(d.total(Op::Sign).calls, 0, "{d:?}");
    assert_eq!(d.total(Op::KxStartAndComplete).calls, 1, "{d:?}");
    assert!(d.total(Op::StoreGet).calls >= 1, "{d:?}");

    // The same figures on /metrics and in the snapshot.
    let text = server.metrics_text();
    assert_eq!(
        metric(
            &text,
            "tlslab_crypto_calls_total{op=\"sign\",label=\"ecdsa_secp256r1_sha256\"}"
        ),
        1.0
    );
    assert!(
        metric(
            &text,
            "tlslab_crypto_seconds_total{op=\"sign\",label=\"ecdsa_secp256r1_sha256\"}"
        ) > 0.0
    );
    assert!(
        metric(
            &text,
            "tlslab_crypto_bytes_total{op=\"seal_application\",label=\"\"}"
        ) >= 5000.0
    );
    // Only non-zero entries are exposed.
    assert!(!text.contains("op=\"verify\""), "{text}");
    assert_eq!(
        metric(&text, "tlslab_ablation_info{ablation=\"none\"}"),
        1.0
    );
    let (status, body, _) = plain_get(server.metrics_addr().unwrap(), "/metrics");
    assert_eq!(status, 200);
    assert!(
        String::from_utf8_lossy(&body).contains("tlslab_crypto_calls_total{op=\"sign\""),
        "{}",
        String::from_utf8_lossy(&body)
    );

    let snap = server.shutdown();
    assert_eq!(snap.crypto.total(Op::Sign).calls, 1);
    let json = serde_json::to_value(&snap).unwrap();
    let entries = json["crypto"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["op"] == "sign"
            && e["label"] == "ecdsa_secp256r1_sha256"
            && e["calls"] == 1),
        "{entries:?}"
    );
    assert!(entries.iter().all(|e| e["calls"].as_u64() > Some(0)));
    assert_eq!(json["ablation"], serde_json::json!([]));
    let summary = snap.summary();
    assert!(summary.contains("time per crypto operation"), "{summary}");
    let sign_line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("sign "))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(sign_line.contains(" 1 calls"), "{sign_line}");
}

#[test]
fn tls12_full_handshake_signs_once_and_completes_one_exchange() {
    let g = generated();
    let mut cfg = config(&g, Content::Empty);
    cfg.tls.versions = vec![Version::Tls12];
    let server = Server::start(cfg).unwrap();
    let client = client_config(&g, &[Version::Tls12], None, &[b"http/1.1"]);
    let got = rt().block_on(https_get(server.https_addr().unwrap(), client, "/health"));
    assert_eq!(got.status, 200);
    let c = server.shutdown().crypto;
    assert_eq!(c.total(Op::Sign).calls, 1, "{c:?}");
    assert_eq!(c.total(Op::KxStart).calls, 1, "{c:?}");
    assert_eq!(c.total(Op::KxComplete).calls, 1, "{c:?}");
    assert_eq!(c.total(Op::KxStartAndComplete).calls, 0, "{c:?}");
    // The TLS 1.2 session went into the metered store.
    assert_eq!(c.total(Op::StorePut).calls, 1, "{c:?}");
}

/// Relays one connection from a loopback listener to `server`, recording
/// what the server sent. Returns the relay's address and the recording.
async fn recording_relay(server: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = seen.clone();
    tokio::spawn(async move {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Ok(upstream) = TcpStream::connect(server).await else {
            return;
        };
        let (mut cr, mut cw) = client.into_split();
        let (mut ur, mut uw) = upstream.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
            let _ = uw.shutdown().await;
        });
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match ur.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    rec.lock().unwrap().extend_from_slice(&buf[..n]);
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = cw.shutdown().await;
    });
    (addr, seen)
}

/// Serves a file holding a marker over a relay, with `set` ablated on both
/// sides; returns whether the marker was readable in the server's bytes.
fn marker_on_the_wire(version: Version, set: AblationSet) -> bool {
    const MARKER: &[u8] = b"tlslab-plaintext-marker-7f3a9c";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker.txt"), MARKER.repeat(20)).unwrap();
    let g = generated();
    let mut cfg = config(&g, Content::Root(dir.path().to_path_buf()));
    cfg.tls.versions = vec![version];
    cfg.tls.ablation = set;
    let server = Server::start(cfg).unwrap();
    assert_eq!(server.warnings().len(), usize::from(!set.is_empty()));
    let client = ablated_client(&g, &[version], &Algorithms::default(), set, None);
    let https = server.https_addr().unwrap();
    let seen = rt().block_on(async {
        let (relay, seen) = recording_relay(https).await;
        let got = https_get(relay, client, "/marker.txt").await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, MARKER.repeat(20));
        seen
    });
    let snap = server.shutdown();
    assert_eq!(snap.handshakes.total(), 1, "{:?}", snap.handshake_failures);
    // The meter still counts the (now free) record seals.
    assert!(snap.crypto.total(Op::SealApplication).bytes >= 20 * MARKER.len() as u64);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() > 20 * MARKER.len());
    seen.windows(MARKER.len()).any(|w| w == MARKER)
}

#[test]
fn null_cipher_on_both_sides_serves_plaintext_on_the_wire() {
    let cipher: AblationSet = "cipher".parse().unwrap();
    for v in [Version::Tls13, Version::Tls12] {
        assert!(marker_on_the_wire(v, cipher), "{v}: marker not on the wire");
    }
    // The control: with the real cipher the marker is not readable.
    assert!(!marker_on_the_wire(Version::Tls13, AblationSet::NONE));
}

#[test]
fn skeleton_on_both_sides_completes_and_is_labelled() {
    let g = generated();
    let set = AblationSet::skeleton();
    let mut cfg = config(&g, Content::Empty);
    cfg.tls.ablation = set;
    let server = Server::start(cfg).unwrap();
    let w = server.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("INSECURE") && w[0].contains("--ablate sig,kx,cipher,mac,hash,rng,cache"),
        "{w:?}"
    );
    let client = ablated_client(
        &g,
        &[Version::Tls12, Version::Tls13],
        &Algorithms::default(),
        set,
        None,
    );
    let got = rt().block_on(https_get(server.https_addr().unwrap(), client, "/health"));
    assert_eq!((got.status, got.body.as_slice()), (200, &b"ok\n"[..]));
    let text = server.metrics_text();
    assert_eq!(
        metric(
            &text,
            "tlslab_ablation_info{ablation=\"sig,kx,cipher,mac,hash,rng,cache\"}"
        ),
        1.0
    );
    // The fake groups are labelled "private"; the constant signature is
    // still counted as one sign.
    assert!(
        metric(
            &text,
            "tlslab_crypto_calls_total{op=\"kx_start_and_complete\",label=\"private\"}"
        ) >= 1.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_crypto_calls_total{op=\"sign\",label=\"ecdsa_secp256r1_sha256\"}"
        ),
        1.0
    );
    let snap = server.shutdown();
    assert_eq!(
        serde_json::to_value(snap.ablation).unwrap(),
        serde_json::json!(["sig", "kx", "cipher", "mac", "hash", "rng", "cache"])
    );
    assert!(
        snap.summary().contains("ablation: sig,kx,cipher"),
        "{}",
        snap.summary()
    );
}

#[test]
fn ablation_binds_loopback_only_unless_allowed() {
    let g = generated();
    for (https, metrics) in [
        ("0.0.0.0:0", None),
        ("127.0.0.1:0", Some("0.0.0.0:0")),
        ("[::]:0", None),
    ] {
        let mut cfg = config(&g, Content::Empty);
        cfg.https = Some(https.parse().unwrap());
        cfg.metrics = metrics.map(|m| m.parse().unwrap());
        cfg.tls.ablation = "sig".parse().unwrap();
        let e = Server::start(cfg).unwrap_err().to_string();
        assert!(
            e.contains("bind to 127.0.0.1 or add --allow-remote") && e.contains("is not loopback"),
            "{e}"
        );
    }
    // Loopback is fine, IPv6 included.
    for a in ["127.0.0.1:0", "[::1]:0"] {
        let mut cfg = config(&g, Content::Empty);
        cfg.https = Some(a.parse().unwrap());
        cfg.tls.ablation = "kx".parse().unwrap();
        // [::1] may be unavailable in a container without IPv6.
        match Server::start(cfg) {
            Ok(s) => {
                assert_eq!(s.warnings().len(), 1);
                s.shutdown();
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("cannot listen on"), "{e}");
            }
        }
    }
}

/// The failure reasons the server counted after one client with
/// `client_set` (and groups `client_groups`) tried a server with
/// `server_set`, and whether the client's attempt failed.
fn mismatch(
    server_set: &str,
    client_set: &str,
    client_groups: Option<&[&str]>,
) -> (std::collections::BTreeMap<String, u64>, bool) {
    let g = generated();
    let mut cfg = config(&g, Content::Empty);
    cfg.tls.versions = vec![Version::Tls13];
    cfg.tls.ablation = server_set.parse().unwrap();
    cfg.tls.algorithms.groups = Some(vec!["x25519".into()]);
    let server = Server::start(cfg).unwrap();
    let alg = Algorithms {
        suites: None,
        groups: client_groups.map(|gs| gs.iter().map(|s| s.to_string()).collect()),
        ..Algorithms::default()
    };
    let client = ablated_client(
        &g,
        &[Version::Tls13],
        &alg,
        client_set.parse().unwrap(),
        None,
    );
    let addr = server.https_addr().unwrap();
    let failed = rt().block_on(async {
        // Bounded: a hang would be a bug, not a slow test.
        tokio::time::timeout(
            Duration::from_secs(5),
            https_get_many(addr, client, &["/health"]),
        )
        .await
        .expect("a mismatched handshake must fail, not hang")
        .is_err()
    });
    eventually("the failure counted", || {
        server.snapshot().failures_total() >= 1
    });
    let snap = server.shutdown();
    (snap.handshake_failures, failed)
}

#[test]
fn mismatched_ablations_are_counted_as_such() {
    for (server_set, client_set) in [("kx", "none"), ("cipher", "none"), ("sig", "none")] {
        let (f, failed) = mismatch(server_set, client_set, None);
        assert!(failed, "{server_set}/{client_set}");
        assert_eq!(
            f.get("ablation_mismatch"),
            Some(&1),
            "server {server_set}, client {client_set}: {f:?}"
        );
    }
    // A client with the kx ablation against a real server: the server
    // cannot tell it from an ordinary client with other groups.
    let (f, failed) = mismatch("none", "kx", None);
    assert!(failed);
    assert_eq!(f.get("no_shared_group"), Some(&1), "{f:?}");
    // A client with sig or cipher against a real server fails on its own
    // check; the server only sees an alert or the connection end (the
    // README documents these two reasons).
    for (client_set, reason) in [("sig", "alert_handshake_failure"), ("cipher", "eof")] {
        let (f, failed) = mismatch("none", client_set, None);
        assert!(failed, "{client_set}");
        assert_eq!(f.get(reason), Some(&1), "{client_set}: {f:?}");
    }
    // An ordinary group mismatch is not called an ablation mismatch.
    let (f, failed) = mismatch("none", "none", Some(&["secp384r1"]));
    assert!(failed);
    assert_eq!(f.get("no_shared_group"), Some(&1), "{f:?}");
}
