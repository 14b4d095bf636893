//! Admission control on a real server: shedding by `static` and `session`
//! modes, the three ways to shed, and, under a real flood of new full
//! handshakes, that no resumption is shed while full handshakes are
//! admitted, proven from `/metrics`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rustls::HandshakeKind;
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::ClientSessions;
use tlslab_server::{AdmissionMode, AdmissionSettings, Content, Server, ShedWith};

/// The value of the sample `name` (with its labels, as printed) in an
/// exposition text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The first flight of a fresh rustls client.
fn client_hello(g: &tlslab_crypto::pki::Generated) -> Vec<u8> {
    let cfg = client_config(g, &[Version::Tls13], None, &[b"http/1.1"]);
    let mut c = rustls::ClientConnection::new(
        cfg,
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    c.write_tls(&mut out).unwrap();
    out
}

fn static_server(shed_with: ShedWith) -> (Server, tlslab_crypto::pki::Generated) {
    let g = generated();
    let mut c = config(&g, Content::Empty);
    c.metrics = Some(loopback());
    c.admission = AdmissionSettings {
        mode: AdmissionMode::Static,
        shed_with,
        max_handshakes_in_flight: Some(1),
        ..AdmissionSettings::default()
    };
    (Server::start(c).unwrap(), g)
}

/// Holds one handshake in flight: a ClientHello sent, the client's
/// Finished never.
fn hold_one_handshake(server: &Server, g: &tlslab_crypto::pki::Generated) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.https_addr().unwrap()).unwrap();
    s.write_all(&client_hello(g)).unwrap();
    // The ServerHello arriving means the handshake is admitted and running.
    let mut b = [0u8; 5];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 22, "a handshake record");
    s
}

#[test]
fn static_mode_sheds_with_an_alert_beyond_its_in_flight_limit() {
    let (server, g) = static_server(ShedWith::Alert);
    let held = hold_one_handshake(&server, &g);
    let got = raw(server.https_addr().unwrap(), &client_hello(&g), false);
    assert_eq!(got, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50], "{got:?}");
    drop(held);
    let s = server.shutdown();
    let a = s.admission.unwrap();
    assert_eq!((a.full_admitted, a.full_shed), (1, 1));
    assert_eq!(s.handshake_failures.get("admission_shed"), Some(&1));
}

#[test]
fn shed_by_close_sends_nothing() {
    let (server, g) = static_server(ShedWith::Close);
    let held = hold_one_handshake(&server, &g);
    let got = raw(server.https_addr().unwrap(), &client_hello(&g), false);
    assert!(got.is_empty(), "{got:?}");
    drop(held);
    let a = server.shutdown().admission.unwrap();
    assert_eq!(a.full_shed, 1);
}

#[test]
fn shed_by_503_completes_the_handshake_and_answers_503() {
    let (server, g) = static_server(ShedWith::Http503);
    let held = hold_one_handshake(&server, &g);
    let cfg = client_config(&g, &[Version::Tls13], None, &[b"http/1.1"]);
    let got = rt().block_on(https_get(server.https_addr().unwrap(), cfg, "/health"));
    assert_eq!(got.status, 503);
    assert_eq!(got.headers.get("retry-after").unwrap(), "1");
    drop(held);
    // Once nothing is in flight, requests are served again.
    eventually("the held handshake to end", || {
        server.snapshot().admission.unwrap().in_flight == 0
    });
    let cfg = client_config(&g, &[Version::Tls13], None, &[b"http/1.1"]);
    let got = rt().block_on(https_get(server.https_addr().unwrap(), cfg, "/health"));
    assert_eq!(got.status, 200);
    let a = server.shutdown().admission.unwrap();
    assert_eq!(a.full_shed, 1);
}

#[test]
fn off_reports_no_admission_and_exports_no_admission_metrics() {
    let g = generated();
    let mut c = config(&g, Content::Empty);
    c.metrics = Some(loopback());
    let server = Server::start(c).unwrap();
    assert!(server.snapshot().admission.is_none());
    assert!(!server.metrics_text().contains("tlslab_admission"));
    let bad = {
        let mut c = config(&g, Content::Empty);
        c.admission.mode = AdmissionMode::Static;
        Server::start(c).unwrap_err().to_string()
    };
    assert!(bad.contains("--max-handshakes-in-flight"), "{bad}");
    server.shutdown();
}

/// A flood of new full handshakes against one server thread, while a few
/// clients resume their sessions over and over: the controller must find
/// overload and shed full handshakes, and `/metrics` must show that no
/// resumption was shed while full handshakes were admitted.
#[test]
fn no_resumed_session_is_shed_while_full_handshakes_are_admitted() {
    // RSA-3072 signatures make the server's full handshake far dearer than
    // the client's, so one server thread saturates first.
    let g = tlslab_crypto::pki::generate(tlslab_crypto::pki::KeyType::Rsa3072, &[]).unwrap();
    let mut c = config(&g, Content::Empty);
    c.threads = 1;
    c.metrics = Some(loopback());
    c.admission = AdmissionSettings {
        mode: AdmissionMode::Session,
        queue_delay_target: Duration::from_millis(2),
        ..AdmissionSettings::default()
    };
    let server = Server::start(c).unwrap();
    let addr = server.https_addr().unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let resumed = Arc::new(AtomicU64::new(0));
    let resumer_failures = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    // Resumers: one session each, kept for the whole run (TLS 1.3 stateful
    // tickets, so the PSK identity is checked against the session cache).
    for _ in 0..4 {
        let sessions = ClientSessions::new();
        sessions.set_offer(true);
        let cfg = client_config(&g, &[Version::Tls13], Some(sessions), &[b"http/1.1"]);
        let (resumed, failures) = (resumed.clone(), resumer_failures.clone());
        tasks.push(client_rt.spawn(async move {
            // The first, full handshake may itself be shed: retry it.
            while Instant::now() < deadline {
                match https_get_many(addr, cfg.clone(), &["/health"]).await {
                    Ok(got) if got[0].kind == Some(HandshakeKind::Resumed) => {
                        resumed.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    // The flood: fresh clients, each connection a new full handshake.
    for _ in 0..48 {
        let mut cfg = (*client_config(&g, &[Version::Tls13], None, &[b"http/1.1"])).clone();
        cfg.resumption = rustls::client::Resumption::disabled();
        let cfg = Arc::new(cfg);
        let stop = stop.clone();
        tasks.push(client_rt.spawn(async move {
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                if https_get_many(addr, cfg.clone(), &["/health"])
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    client_rt.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
        }
    });
    stop.store(true, Ordering::Relaxed);
    let (status, body, _) = plain_get(server.metrics_addr().unwrap(), "/metrics");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let get = |kind: &str, decision: &str| {
        sample(
            &text,
            &format!(
                "tlslab_admission_decisions_total{{transport=\"tcp\",kind=\"{kind}\",decision=\"{decision}\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("no {kind}/{decision} sample in\n{text}"))
    };
    let (fa, fs, ra, rs) = (
        get("full", "admitted"),
        get("full", "shed"),
        get("resume", "admitted"),
        get("resume", "shed"),
    );
    let snap = server.shutdown();
    let a = snap.admission.unwrap();
    let summary = format!(
        "full admitted {fa} shed {fs}, resume admitted {ra} shed {rs}; {a:?}; client resumed {}",
        resumed.load(Ordering::Relaxed)
    );
    assert!(fs > 0.0, "the flood was never shed: {summary}");
    assert!(fa > 0.0, "no full handshake admitted: {summary}");
    assert!(ra > 0.0, "no resumption seen: {summary}");
    assert_eq!(rs, 0.0, "a resumption was shed: {summary}");
    assert!(a.overload_ticks > 0, "{summary}");
    assert!(a.limit.is_some(), "the controller set no limit: {summary}");
    assert!(
        sample(&text, "tlslab_admission_limit").is_some_and(|l| l >= 1.0),
        "{text}"
    );
    eprintln!("{summary}");
    // Every resumption the server admitted as such really resumed.
    assert_eq!(a.misclassified, 0, "{summary}");
    assert!(resumed.load(Ordering::Relaxed) > 0, "{summary}");
}
