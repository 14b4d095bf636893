//! The client's crypto meter and ablations, against an in-process tlslab
//! server on 127.0.0.1 with the same (or a different) ablation set.

use std::time::{Duration, Instant};

use tlslab_crypto::meter::AblationSet;
use tlslab_crypto::pki::Generated;
use tlslab_crypto::provider::Version;
use tlslab_load::{LoadConfig, ResumeWith, Target, Trust};
use tlslab_report::LoadReportText;
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};
use tlslab_stats::LoadReport;
use tlslab_testkit::{generated, loopback};

/// A server with a fresh ECDSA P-256 chain, one worker thread, `versions`
/// and the ablations `set`.
fn server(set: &str, versions: &[Version]) -> (Server, Generated) {
    let g = generated();
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tls.versions = versions.to_vec();
    tls.ablation = set.parse().unwrap();
    let mut cfg = ServeConfig::new(loopback(), Content::Empty, tls);
    cfg.threads = 1;
    (Server::start(cfg).unwrap(), g)
}

/// A bounded run of `n` requests (new connection each) with the client
/// ablations `set`.
fn load(s: &Server, g: &Generated, set: &str, versions: &[Version], n: u64) -> LoadReport {
    let target = Target::parse(&format!("https://{}/health", s.https_addr().unwrap())).unwrap();
    let mut c = LoadConfig::new(vec![target]);
    c.trust = Trust::Roots(g.roots().unwrap());
    c.duration = Some(Duration::from_secs(8));
    c.requests = Some(n);
    c.threads = 1;
    c.timeout = Duration::from_secs(3);
    c.versions = versions.to_vec();
    c.ablation = set.parse().unwrap();
    tlslab_load::run(&c).unwrap()
}

fn calls_per_handshake(r: &LoadReport, op: &str) -> f64 {
    r.crypto
        .as_ref()
        .and_then(|c| c.ops.iter().find(|o| o.op == op))
        .map_or(0.0, |o| o.calls_per_handshake)
}

#[test]
fn real_tls13_ecdsa_run_meters_at_least_one_verify_per_full_handshake() {
    let (s, g) = server("none", &[Version::Tls13]);
    let r = load(&s, &g, "none", &[Version::Tls13], 12);
    assert_eq!(r.requests.succeeded, 12, "{:?}", r.errors);
    assert_eq!(r.handshake.full.count, 12);
    assert!(r.ablation.is_empty());
    assert_eq!(r.ablation_hint, None);
    let c = r.crypto.as_ref().expect("a TLS run has a crypto block");
    assert_eq!(c.handshakes, 12);
    // Chain signature (by the CA) and CertificateVerify: at least one.
    assert!(calls_per_handshake(&r, "verify") >= 1.0, "{c:?}");
    assert!(calls_per_handshake(&r, "kx_start") >= 1.0, "{c:?}");
    assert!(calls_per_handshake(&r, "seal_application") >= 1.0, "{c:?}");
    // The client never signs (no client authentication).
    assert_eq!(calls_per_handshake(&r, "sign"), 0.0, "{c:?}");
    let verify = c.ops.iter().find(|o| o.op == "verify").unwrap();
    assert!(verify.us_per_handshake > 0.0, "{verify:?}");
    let t = r.render_table();
    assert!(
        t.contains("client crypto per handshake, 12 handshakes"),
        "{t}"
    );
    assert!(!t.contains("ABLATED"), "{t}");
    s.shutdown();
}

#[test]
fn cipher_ablated_run_succeeds_and_says_so() {
    let (s, g) = server("cipher", &[Version::Tls13]);
    let r = load(&s, &g, "cipher", &[Version::Tls13], 10);
    assert_eq!(r.requests.succeeded, 10, "{:?}", r.errors);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.ablation, vec!["cipher".to_string()]);
    // The null cipher is still called (and metered) for every record.
    assert!(calls_per_handshake(&r, "seal_application") >= 1.0);
    let t = r.render_table();
    assert!(
        t.contains("ABLATED (insecure model, not real TLS): cipher"),
        "{t}"
    );
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["ablation"], serde_json::json!(["cipher"]));
    s.shutdown();
}

#[test]
fn sig_ablated_run_succeeds_on_both_versions() {
    for v in [Version::Tls12, Version::Tls13] {
        let (s, g) = server("sig", &[v]);
        let r = load(&s, &g, "sig", &[v], 8);
        assert_eq!(r.requests.succeeded, 8, "{v:?}: {:?}", r.errors);
        assert_eq!(r.ablation, vec!["sig".to_string()]);
        s.shutdown();
    }
}

#[test]
fn client_kx_against_a_real_server_fails_clearly_without_hanging() {
    let (s, g) = server("none", &[Version::Tls13]);
    let t0 = Instant::now();
    let r = load(&s, &g, "kx", &[Version::Tls13], 4);
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert_eq!(r.requests.succeeded, 0);
    assert_eq!(r.requests.errors, 4, "{:?}", r.errors);
    assert_eq!(
        r.errors.get("tls_ablation_mismatch"),
        Some(&4),
        "{:?}",
        r.errors
    );
    let hint = r
        .ablation_hint
        .as_deref()
        .expect("a mismatch keeps its hint");
    assert!(
        hint.contains("--ablate kx") && hint.contains("same --ablate set"),
        "{hint}"
    );
    s.shutdown();
}

#[test]
fn client_cipher_against_a_real_server_is_a_named_mismatch() {
    let (s, g) = server("none", &[Version::Tls13]);
    let r = load(&s, &g, "cipher", &[Version::Tls13], 3);
    assert_eq!(r.requests.succeeded, 0);
    assert!(
        r.errors.keys().all(|k| k.starts_with("tls_")),
        "{:?}",
        r.errors
    );
    assert_eq!(
        r.errors.get("tls_ablation_mismatch"),
        Some(&3),
        "{:?}",
        r.errors
    );
    assert!(r.ablation_hint.is_some());
    s.shutdown();
}

#[test]
fn perfect_cache_resumes_every_offered_tls12_session() {
    perfect_cache(1);
}

/// Clients share one universal session, the server's first: overlapping
/// first handshakes must not adopt different sessions.
#[test]
fn perfect_cache_is_shared_by_concurrent_clients() {
    perfect_cache(4);
}

fn perfect_cache(clients: usize) {
    let (s, g) = server("cache", &[Version::Tls12]);
    let target = Target::parse(&format!("https://{}/health", s.https_addr().unwrap())).unwrap();
    let mut c = LoadConfig::new(vec![target]);
    c.trust = Trust::Roots(g.roots().unwrap());
    c.duration = Some(Duration::from_secs(8));
    c.requests = Some(10);
    c.threads = 1;
    c.timeout = Duration::from_secs(3);
    c.versions = vec![Version::Tls12];
    c.resume_with = ResumeWith::Id;
    c.reuse = 1.0;
    c.ablation = "cache".parse().unwrap();
    c.clients = clients;
    let r = tlslab_load::run(&c).unwrap();
    assert_eq!(r.requests.succeeded, 10, "{:?}", r.errors);
    // The first handshake is full (the priming one is outside the
    // statistics), and so is any other client's first that starts before
    // the universal session exists (which depends on scheduling): one full
    // handshake at least, one per client at most, every other resumed.
    let full = r.handshake.full.count;
    assert!(
        (1..=clients as u64).contains(&full),
        "{full} full handshakes"
    );
    assert_eq!(r.reuse.resumed_count, 10 - full);
    s.shutdown();
}

#[test]
fn ablation_needs_the_lab_ca() {
    let target = Target::parse("https://127.0.0.1:9/").unwrap();
    for trust in [Trust::Insecure, Trust::WebPki] {
        let mut c = LoadConfig::new(vec![target.clone()]);
        c.requests = Some(1);
        c.trust = trust;
        c.ablation = AblationSet::NONE.with(tlslab_crypto::meter::Ablation::Sig);
        let e = tlslab_load::run(&c).unwrap_err().to_string();
        assert!(e.contains("--ablate sig") && e.contains("--cacert"), "{e}");
    }
}

/// A server with an HTTP/3 listener beside its TLS one, both ablated by
/// `set`, on 127.0.0.1.
fn h3_server(set: &str) -> (Server, Generated) {
    let g = generated();
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tls.versions = vec![Version::Tls13];
    tls.ablation = set.parse().unwrap();
    let mut cfg = ServeConfig::new(loopback(), Content::Empty, tls);
    cfg.threads = 1;
    let h3 = tlslab_server::H3Settings::new(loopback());
    (Server::start_with_h3(cfg, Some(h3)).unwrap(), g)
}

/// `n` HTTP/3 requests, a new connection each, with the client ablations
/// `set`; bounded by a 1 s handshake timeout and a 4 s run.
fn h3_load(s: &Server, g: &Generated, set: &str, n: u64) -> Result<LoadReport, tlslab_load::Error> {
    let addr = s.h3_addr().unwrap();
    let target = Target::parse(&format!("https://{addr}/bytes/100")).unwrap();
    let mut c = LoadConfig::new(vec![target]);
    c.trust = Trust::Roots(g.roots().unwrap());
    c.duration = Some(Duration::from_secs(4));
    c.requests = Some(n);
    c.requests_per_conn = 1;
    c.threads = 1;
    c.timeout = Duration::from_secs(1);
    c.versions = vec![Version::Tls13];
    c.ablation = set.parse().unwrap();
    c.http3 = Some(tlslab_load::Http3 {
        max_concurrent_streams: 1,
        flood: None,
        qlog: None,
        new_socket: false,
        rebind_after: None,
    });
    tlslab_load::run(&c)
}

#[test]
fn quic_ablations_on_both_sides_serve_and_a_mismatch_fails_naming_ablate() {
    use tlslab_crypto::meter::Op;
    let set = "quic-packet,quic-header,quic-keys";
    let (s, g) = h3_server(set);
    let r = h3_load(&s, &g, set, 4).expect("matched ablations serve");
    assert_eq!(r.requests.succeeded, 4, "{:?}", r.errors);
    // Both sides still go through the metered (now no-op) QUIC keys, and
    // the server times rustls's handshake calls.
    let crypto = s.snapshot().crypto;
    for op in [Op::QuicSeal, Op::QuicOpen, Op::QuicHeader, Op::QuicTls] {
        assert!(crypto.total(op).calls > 0, "{op:?}: {crypto:?}");
    }
    let client_ops: Vec<&str> = r
        .crypto
        .as_ref()
        .map(|c| c.ops.iter().map(|o| o.op.as_str()).collect())
        .unwrap_or_default();
    assert!(client_ops.contains(&"quic_seal"), "{client_ops:?}");
    // A client with real packet protection against the ablated server:
    // nothing decrypts, nothing is answered, and the error says why.
    let e = h3_load(&s, &g, "none", 2).expect_err("a mismatch serves nothing");
    assert!(e.to_string().contains("no QUIC server answered"), "{e}");
    // A partial mismatch (header protection and keys real on the client
    // only): the server's packets decrypt under the client's NULL packet
    // key, but its unmasked headers read wrong, so the connection fails
    // with a protocol error, or nothing is answered. Never a request.
    match h3_load(&s, &g, "quic-packet", 2) {
        Err(e) => assert!(e.to_string().contains("different --ablate set"), "{e}"),
        Ok(r) => assert_eq!(r.requests.succeeded, 0, "{:?}", r.errors),
    }
    s.shutdown();
    // `cache` is TLS 1.2's; QUIC refuses it before any work.
    let (s, g) = h3_server("none");
    let e = h3_load(&s, &g, "cache", 1).expect_err("no cache over QUIC");
    assert!(e.is_usage() && e.to_string().contains("drop cache"), "{e}");
    s.shutdown();
}
