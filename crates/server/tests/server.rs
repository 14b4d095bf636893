//! End-to-end tests of the server with real tokio-rustls and hyper clients
//! on loopback.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rustls::HandshakeKind;
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::ClientSessions;
use tlslab_server::{Content, ServeConfig, Server, SessionCache, Snapshot};

/// Two connections from one client: the first full, the second offering
/// resumption. Returns the client-side kinds and the final server counters.
fn resume_case(
    versions: &[Version],
    cache: SessionCache,
    tickets: bool,
) -> (HandshakeKind, HandshakeKind, Snapshot, String) {
    let g = generated();
    let mut cfg = config(&g, Content::Specweb96);
    cfg.tls.versions = versions.to_vec();
    cfg.tls.session_cache = cache;
    cfg.tls.tickets = tickets;
    let server = Server::start(cfg).unwrap();
    let addr = server.https_addr().unwrap();
    let sessions = ClientSessions::new();
    let client = client_config(&g, versions, Some(sessions.clone()), &[b"http/1.1"]);
    let (a, b) = rt().block_on(async {
        sessions.set_offer(false);
        let a = https_get(addr, client.clone(), "/specweb96/class0_0").await;
        assert_eq!(a.status, 200);
        sessions.set_offer(true);
        let b = https_get(addr, client.clone(), "/specweb96/class0_1").await;
        assert_eq!(b.status, 200);
        (a, b)
    });
    let text = server.metrics_text();
    let snap = server.shutdown();
    (a.kind.unwrap(), b.kind.unwrap(), snap, text)
}

#[test]
fn tls13_resumes_with_stateful_tickets_in_the_cache() {
    let (a, b, snap, _) = resume_case(&[Version::Tls13], memory_cache(100), false);
    assert_eq!((a, b), (HandshakeKind::Full, HandshakeKind::Resumed));
    assert_eq!(snap.handshakes.tls13.full, 1);
    assert_eq!(snap.handshakes.tls13.resumed, 1);
    assert_eq!(snap.handshakes.tls12.total(), 0);
    let c = snap.session_cache.unwrap();
    // rustls sends 2 TLS 1.3 tickets per handshake, each stored server-side.
    assert_eq!(c.puts, 4, "{c:?}");
    assert_eq!(c.hits, 1, "{c:?}");
    assert!(snap.tickets.is_none());
}

#[test]
fn tls13_resumes_with_stateless_tickets() {
    let (a, b, snap, text) = resume_case(&[Version::Tls13], memory_cache(100), true);
    assert_eq!((a, b), (HandshakeKind::Full, HandshakeKind::Resumed));
    assert_eq!(snap.handshakes.tls13.resumed, 1);
    let t = snap.tickets.unwrap();
    assert_eq!(t.issued, 4, "{t:?}");
    assert_eq!((t.accepted, t.rejected), (1, 0), "{t:?}");
    // Stateless tickets never touch the cache.
    assert_eq!(snap.session_cache.unwrap().puts, 0);
    // The metered ticketer sees the same seals and opens.
    assert_eq!(snap.crypto.total(tlslab_server::Op::TicketSeal).calls, 4);
    assert_eq!(snap.crypto.total(tlslab_server::Op::TicketOpen).calls, 1);
    assert_eq!(metric(&text, "tlslab_tickets_issued_total"), 4.0);
    assert_eq!(metric(&text, "tlslab_tickets_accepted_total"), 1.0);
    assert_eq!(metric(&text, "tlslab_tickets_rejected_total"), 0.0);
}

#[test]
fn tls12_resumes_by_session_id_in_the_cache() {
    let (a, b, snap, _) = resume_case(&[Version::Tls12], memory_cache(100), false);
    assert_eq!((a, b), (HandshakeKind::Full, HandshakeKind::Resumed));
    assert_eq!(snap.handshakes.tls12.full, 1);
    assert_eq!(snap.handshakes.tls12.resumed, 1);
    let c = snap.session_cache.unwrap();
    assert_eq!((c.puts, c.hits), (1, 1), "{c:?}");
}

#[test]
fn tls12_resumes_by_ticket() {
    let (a, b, snap, _) = resume_case(&[Version::Tls12], memory_cache(100), true);
    assert_eq!((a, b), (HandshakeKind::Full, HandshakeKind::Resumed));
    assert_eq!(snap.handshakes.tls12.resumed, 1);
    let t = snap.tickets.unwrap();
    assert_eq!(t.accepted, 1, "{t:?}");
    assert!(t.issued >= 1, "{t:?}");
}

#[test]
fn without_cache_or_tickets_nothing_resumes() {
    for v in [Version::Tls12, Version::Tls13] {
        let (a, b, snap, text) = resume_case(&[v], SessionCache::None, false);
        assert_eq!((a, b), (HandshakeKind::Full, HandshakeKind::Full), "{v}");
        let k = snap.handshakes.get(v);
        assert_eq!((k.full, k.resumed), (2, 0), "{v}");
        assert!(snap.session_cache.is_none() && snap.tickets.is_none());
        assert!(!text.contains("tlslab_session_cache_hits"), "{text}");
    }
}

#[test]
fn cache_capacity_bounds_size_and_counts_evictions() {
    let g = generated();
    let cfg = tls13_cached(&g, 2);
    let server = Server::start(cfg).unwrap();
    let addr = server.https_addr().unwrap();
    // A client that never offers resumption: four full handshakes.
    let sessions = ClientSessions::new();
    sessions.set_offer(false);
    let client = client_config(&g, &[Version::Tls13], Some(sessions), &[]);
    rt().block_on(async {
        for _ in 0..4 {
            assert_eq!(https_get(addr, client.clone(), "/health").await.status, 200);
        }
    });
    // Closed connections write no more (close_notify included).
    eventually("connections closed", || {
        server.snapshot().open_connections == 0
    });
    let snap = server.snapshot();
    let c = snap.session_cache.unwrap();
    assert_eq!(c.puts, 8, "{c:?}");
    assert!(c.size <= 2, "{c:?}");
    assert_eq!(c.evictions, c.puts - c.size, "{c:?}");
    assert!(c.evictions >= 6, "{c:?}");

    // The same figures over the metrics listener.
    let (status, body, head) = plain_get(server.metrics_addr().unwrap(), "/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    let text = String::from_utf8(body).unwrap();
    assert_eq!(metric(&text, "tlslab_session_cache_puts_total"), 8.0);
    assert_eq!(metric(&text, "tlslab_session_cache_capacity"), 2.0);
    assert_eq!(metric(&text, "tlslab_session_cache_size"), c.size as f64);
    assert_eq!(
        metric(&text, "tlslab_session_cache_evictions_total"),
        c.evictions as f64
    );
    assert_eq!(metric(&text, "tlslab_session_cache_hits_total"), 0.0);
    assert_eq!(metric(&text, "tlslab_session_cache_misses_total"), 0.0);
    assert_eq!(metric(&text, "tlslab_session_cache_expirations_total"), 0.0);
    assert_eq!(
        metric(
            &text,
            "tlslab_handshakes_total{transport=\"tcp\",version=\"1.3\",kind=\"full\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_handshakes_total{transport=\"tcp\",version=\"1.3\",kind=\"resumed\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_handshakes_total{transport=\"tcp\",version=\"1.2\",kind=\"full\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_requests_total{transport=\"tcp\",listener=\"https\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_connections_total{transport=\"tcp\",listener=\"https\"}"
        ),
        4.0
    );
    let received = metric(
        &text,
        "tlslab_bytes_received_total{transport=\"tcp\",listener=\"https\"}",
    );
    let sent = metric(
        &text,
        "tlslab_bytes_sent_total{transport=\"tcp\",listener=\"https\"}",
    );
    assert_eq!(received, snap.bytes_received.https as f64);
    assert_eq!(sent, snap.bytes_sent.https as f64);
    // Four handshakes (a certificate chain each way out) plus requests.
    assert!(
        sent > 4.0 * 500.0 && received > 4.0 * 200.0,
        "{sent} {received}"
    );
    assert!(metric(&text, "tlslab_server_worker_cpu_seconds_total") > 0.0);
    assert!(metric(&text, "process_cpu_seconds_total") > 0.0);
    assert!(
        text.contains("# TYPE tlslab_open_connections gauge"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // The metrics scrape itself is not counted as a client connection.
    assert_eq!(server.snapshot().connections.total(), 4);
    let (status, body, _) = plain_get(server.metrics_addr().unwrap(), "/health");
    assert_eq!((status, body.as_slice()), (200, &b"ok\n"[..]));
    server.shutdown();
}

#[test]
fn bad_clients_are_counted_by_reason_and_the_server_keeps_serving() {
    let g = generated();
    let mut cfg = config(&g, Content::Empty);
    cfg.handshake_timeout = Duration::from_millis(300);
    let server = Server::start(cfg).unwrap();
    let addr = server.https_addr().unwrap();

    // Garbage: closed at once, nothing sent back.
    let out = raw(addr, b"\x00\x01\x02 garbage \xff", false);
    assert!(out.is_empty(), "{out:?}");
    // A truncated ClientHello: a handshake record header and a few bytes,
    // then the client closes.
    raw(addr, &[22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3], true);
    // A handshake record that is not a ClientHello.
    let out = raw(addr, &[22, 3, 1, 0, 4, 99, 0, 0, 0], true);
    // rustls answers with an alert record (content type 21).
    assert_eq!(out.first(), Some(&21), "{out:?}");
    // Plain HTTP to the TLS port: told so in plain HTTP.
    let out = raw(
        addr,
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    );
    let (status, body, _) = split_response(&out);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("HTTPS"), "{body:?}");
    // A client that sends nothing until the handshake timeout.
    let started = Instant::now();
    let idle = raw(addr, b"", false);
    assert!(idle.is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // A client that does not trust the server's CA aborts with an alert
    // (a CA of the same name but another key: the signature check fails).
    let other = generated();
    let distrustful = client_config(&other, &[Version::Tls13], None, &[]);
    let good = client_config(&g, &[Version::Tls12, Version::Tls13], None, &[]);
    rt().block_on(async {
        let r = https_get_many(addr, distrustful, &["/health"]).await;
        assert!(r.is_err());
        // And the server still serves.
        let ok = https_get(addr, good, "/health").await;
        assert_eq!((ok.status, ok.body.as_slice()), (200, &b"ok\n"[..]));
    });

    eventually("all failures counted", || {
        server.snapshot().failures_total() >= 6
    });
    let snap = server.snapshot();
    let f = &snap.handshake_failures;
    assert_eq!(f.get("not_tls"), Some(&1), "{f:?}");
    assert_eq!(f.get("eof"), Some(&1), "{f:?}");
    assert_eq!(f.get("http_on_tls_port"), Some(&1), "{f:?}");
    assert_eq!(f.get("timeout"), Some(&1), "{f:?}");
    let alerts: u64 = f
        .iter()
        .filter(|(k, _)| k.starts_with("alert_"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(alerts, 1, "{f:?}");
    assert_eq!(snap.failures_total(), 6, "{f:?}");
    let text = server.metrics_text();
    assert_eq!(
        metric(
            &text,
            "tlslab_handshake_failures_total{transport=\"tcp\",reason=\"not_tls\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "tlslab_handshake_failures_total{transport=\"tcp\",reason=\"http_on_tls_port\"}"
        ),
        1.0
    );
    // The sixth: the record that was not a ClientHello.
    assert_eq!(f.get("unexpected_message"), Some(&1), "{f:?}");
    assert_eq!(snap.handshakes.total(), 1);
    eventually("connections closed", || {
        server.snapshot().open_connections == 0
    });
    let summary = server.shutdown().summary();
    assert!(summary.contains("timeout 1"), "{summary}");
}

#[test]
fn dyn_burns_the_requested_cpu_and_returns_n_bytes() {
    let g = generated();
    let mut cfg = plain_only(config(&g, Content::Empty));
    cfg.threads = 1;
    let server = Server::start(cfg).unwrap();
    let addr = server.http_addr().unwrap();
    let before = server.cpu_time();
    let (status, body, head) = plain_get(addr, "/dyn?work=60000&bytes=123457");
    assert_eq!(status, 200, "{head}");
    assert_eq!(body.len(), 123_457);
    assert!(head.contains("content-length: 123457"), "{head}");
    let burnt: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("x-tlslab-cpu-us: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(burnt >= 60_000, "{burnt}");
    let used = server.cpu_time() - before;
    assert!(used >= Duration::from_millis(60), "{used:?}");
    // Bad parameters are refused with a message.
    let (status, body, _) = plain_get(addr, "/dyn?work=lots");
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("microseconds"));
    let (status, _, _) = plain_get(addr, "/dyn?work=10000001");
    assert_eq!(status, 400);
    let (status, body, _) = plain_get(addr, "/bytes/70000");
    assert_eq!((status, body.len()), (200, 70_000));
    let (status, _, _) = plain_get(addr, "/bytes/1073741825");
    assert_eq!(status, 400);
    let snap = server.shutdown();
    assert_eq!(snap.requests.http, 5);
    assert_eq!(snap.requests.https, 0);
    assert!(snap.worker_cpu >= Duration::from_millis(60));
    assert!(snap.bytes_sent.http > 123_457 + 70_000);
    assert_eq!(snap.connections.http, 5);
}

#[test]
fn specweb96_paths_serve_the_right_bytes_over_one_keepalive_connection() {
    let g = generated();
    let server = Server::start(config(&g, Content::Specweb96)).unwrap();
    let addr = server.https_addr().unwrap();
    let client = client_config(&g, &[Version::Tls13], None, &[b"http/1.1"]);
    let files = tlslab_workload::specweb96::files();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let got = rt().block_on(https_get_many(addr, client, &paths)).unwrap();
    for (f, r) in files.iter().zip(&got) {
        assert_eq!(r.status, 200, "{}", f.path);
        assert_eq!(r.http_version, http::Version::HTTP_11);
        assert_eq!(
            r.headers[http::header::CONTENT_LENGTH],
            f.size.to_string().as_str()
        );
        assert!(
            r.body == tlslab_workload::specweb96::contents(f),
            "{} differs",
            f.path
        );
    }
    let snap = server.shutdown();
    assert_eq!(snap.requests.https, 36);
    assert_eq!(snap.connections.https, 1);
    assert_eq!(snap.handshakes.total(), 1);
    let total: usize = files.iter().map(|f| f.size).sum();
    assert!(snap.bytes_sent.https as usize > total);
}

#[test]
fn root_serves_files_and_refuses_traversal() {
    let parent = tempfile::tempdir().unwrap();
    std::fs::write(parent.path().join("secret.txt"), "do not serve").unwrap();
    let root = parent.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "<p>home</p>").unwrap();
    std::fs::create_dir(root.join("img")).unwrap();
    std::fs::write(root.join("img/a b.png"), [0x89, b'P', b'N', b'G']).unwrap();

    let g = generated();
    let mut cfg = config(&g, Content::Root(root));
    cfg.http = Some(loopback());
    let server = Server::start(cfg).unwrap();
    let plain = server.http_addr().unwrap();
    let (status, body, head) = plain_get(plain, "/");
    assert_eq!((status, body.as_slice()), (200, &b"<p>home</p>"[..]));
    assert!(head.contains("text/html"), "{head}");
    let (status, body, head) = plain_get(plain, "/img/a%20b.png");
    assert_eq!((status, body.len()), (200, 4));
    assert!(head.contains("image/png"), "{head}");
    for evil in [
        "/../secret.txt",
        "/img/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/img/..%2f..%2fsecret.txt",
    ] {
        let (status, body, _) = plain_get(plain, evil);
        assert_eq!(status, 400, "{evil}");
        assert!(!String::from_utf8_lossy(&body).contains("do not serve"));
    }
    let (status, _, _) = plain_get(plain, "/missing.html");
    assert_eq!(status, 404);
    // The same content over TLS.
    let client = client_config(&g, &[Version::Tls12], None, &[]);
    let got = rt().block_on(https_get(
        server.https_addr().unwrap(),
        client,
        "/index.html",
    ));
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, &b"<p>home</p>"[..])
    );
    let snap = server.shutdown();
    assert_eq!(snap.requests.http, 7);
    assert_eq!(snap.requests.https, 1);
    assert_eq!(snap.handshakes.tls12.full, 1);
}

#[test]
fn h2_is_negotiated_by_alpn_and_multiplexes() {
    let g = generated();
    let server = Server::start(config(&g, Content::Specweb96)).unwrap();
    let addr = server.https_addr().unwrap();
    let client = client_config(&g, &[Version::Tls13], None, &[b"h2", b"http/1.1"]);
    let got = rt().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(client)
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (send, conn) =
            hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tls),
            )
            .await
            .unwrap();
        tokio::spawn(conn);
        // Eight concurrent streams on the one connection.
        let mut tasks = Vec::new();
        for i in 0..8 {
            let mut send = send.clone();
            tasks.push(tokio::spawn(async move {
                let req = http::Request::get(format!("https://localhost/specweb96/class2_{i}"))
                    .body(http_body_util::Empty::new())
                    .unwrap();
                let resp = send.send_request(req).await.unwrap();
                assert_eq!(resp.version(), http::Version::HTTP_2);
                use http_body_util::BodyExt;
                resp.into_body().collect().await.unwrap().to_bytes().len()
            }));
        }
        let mut sizes = Vec::new();
        for t in tasks {
            sizes.push(t.await.unwrap());
        }
        sizes
    });
    let want: Vec<usize> = (0..8)
        .map(|i| tlslab_workload::specweb96::size(2, i))
        .collect();
    assert_eq!(got, want);
    let snap = server.shutdown();
    assert_eq!(snap.requests.https, 8);
    assert_eq!(snap.connections.https, 1);
}

#[test]
fn at_the_connection_limit_the_idle_connection_makes_room() {
    let g = generated();
    let mut cfg = plain_only(config(&g, Content::Empty));
    cfg.max_connections = 1;
    let server = Server::start(cfg).unwrap();
    let addr = server.http_addr().unwrap();
    let req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    // First connection: keep-alive, stays open and idle.
    let mut first = std::net::TcpStream::connect(addr).unwrap();
    first.write_all(req).unwrap();
    let got = read_within(&mut first, Duration::from_secs(5)).unwrap();
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    // Second connection: served at once, in the first one's slot (nginx
    // closes idle keep-alive connections the same way when it runs out).
    let mut second = std::net::TcpStream::connect(addr).unwrap();
    second.write_all(req).unwrap();
    let got = read_within(&mut second, Duration::from_secs(1)).unwrap();
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    let got = read_within(&mut first, Duration::from_secs(5));
    assert_eq!(got.map_or(0, |b| b.len()), 0, "the idle one is closed");
    assert_eq!(server.snapshot().open_connections, 1);
    drop(second);
    let snap = server.shutdown();
    assert_eq!(snap.connections.http, 2);
    assert_eq!(snap.requests.http, 2);
    assert_eq!(snap.idle_closed.evicted, 1);
}

#[test]
fn shutdown_lets_in_flight_requests_finish_and_returns_final_counters() {
    let g = generated();
    let mut cfg = config(&g, Content::Empty);
    cfg.http = Some(loopback());
    let server = Server::start(cfg).unwrap();
    let https = server.https_addr().unwrap();
    let plain = server.http_addr().unwrap();
    // An idle keep-alive TLS connection must not hold shutdown up.
    let client = client_config(&g, &[Version::Tls13], None, &[b"http/1.1"]);
    let idle_rt = rt();
    let idle = idle_rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(https).await.unwrap();
        tokio_rustls::TlsConnector::from(client)
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap()
    });
    // An in-flight request that takes 300 ms of CPU.
    let slow = std::thread::spawn(move || plain_get(plain, "/dyn?work=300000&bytes=10"));
    eventually("the slow request to arrive", || {
        server.snapshot().requests.http == 1
    });
    let started = Instant::now();
    let snap = server.shutdown();
    let took = started.elapsed();
    let (status, body, _) = slow.join().unwrap();
    assert_eq!((status, body.len()), (200, 10), "in-flight request cut off");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(snap.requests.http, 1);
    assert_eq!(snap.handshakes.tls13.full, 1);
    assert_eq!(snap.connections.total(), 2);
    assert_eq!(snap.open_connections, 0);
    assert!(
        snap.worker_cpu >= Duration::from_millis(300),
        "{:?}",
        snap.worker_cpu
    );
    assert!(snap.process_cpu >= snap.worker_cpu);
    let text = snap.summary();
    assert!(text.contains("requests: 0 https, 1 http"), "{text}");
    drop(idle);
    // The listeners are closed.
    assert!(std::net::TcpStream::connect(plain).is_err());
}

#[test]
fn start_refuses_unworkable_configs_with_the_fix() {
    let g = generated();
    let mut cfg: ServeConfig = config(&g, Content::Empty);
    cfg.https = None;
    let e = Server::start(cfg).unwrap_err().to_string();
    assert!(e.contains("no listener"), "{e}");
    let mut cfg = config(&g, Content::Empty);
    cfg.threads = 0;
    assert!(
        Server::start(cfg)
            .unwrap_err()
            .to_string()
            .contains("at least 1")
    );
    let mut cfg = config(&g, Content::Empty);
    cfg.max_connections = 0;
    assert!(Server::start(cfg).is_err());
    // A port that is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = config(&g, Content::Empty);
    cfg.https = Some(taken.local_addr().unwrap());
    let e = Server::start(cfg).unwrap_err().to_string();
    assert!(
        e.contains("cannot listen on") && e.contains("port 0"),
        "{e}"
    );
    let mut cfg = config(&g, Content::Empty);
    cfg.tls.max_early_data = 100;
    cfg.tls.tickets = true;
    let e = Server::start(cfg).unwrap_err().to_string();
    assert!(e.contains("--tickets off"), "{e}");
    let mut cfg = config(&g, Content::Empty);
    cfg.pin_cpus = Some(vec![100_000]);
    assert!(Server::start(cfg).is_err());
}

#[test]
fn tls13_early_data_reaches_http_in_order() {
    let g = generated();
    let mut cfg = config(&g, Content::Specweb96);
    cfg.tls.versions = vec![Version::Tls13];
    cfg.tls.max_early_data = 16 * 1024;
    cfg.tls.alpn = vec![b"http/1.1".to_vec()];
    let server = Server::start(cfg).unwrap();
    let addr = server.https_addr().unwrap();
    let mut client = (*client_config(&g, &[Version::Tls13], None, &[b"http/1.1"])).clone();
    client.enable_early_data = true;
    let client = Arc::new(client);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let req = b"GET /specweb96/class0_4 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

    let run = |early: bool| -> (bool, Vec<u8>) {
        let mut conn = rustls::ClientConnection::new(client.clone(), name.clone()).unwrap();
        let mut sent_early = false;
        if early && let Some(mut ed) = conn.early_data() {
            ed.write_all(req).unwrap();
            sent_early = true;
        }
        let mut sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut tls = rustls::Stream::new(&mut conn, &mut sock);
        if !sent_early {
            tls.write_all(req).unwrap();
        }
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out);
        assert!(
            !sent_early || conn.is_early_data_accepted(),
            "early data rejected"
        );
        (sent_early, out)
    };
    // First connection: full handshake, collects a ticket allowing 0-RTT.
    let (early, out) = run(false);
    assert!(!early);
    assert_eq!(split_response(&out).0, 200);
    // Second: the request travels as early data and is answered.
    let (early, out) = run(true);
    assert!(early, "the client had no 0-RTT ticket");
    let (status, body, _) = split_response(&out);
    assert_eq!(status, 200);
    assert_eq!(body.len(), tlslab_workload::specweb96::size(0, 4));
    let snap = server.shutdown();
    assert_eq!(snap.early_data.connections, 1);
    assert_eq!(snap.early_data.bytes, req.len() as u64);
    assert_eq!(snap.early_data.requests, 1, "answered before the handshake");
    assert_eq!(snap.handshakes.tls13.resumed, 1);
    assert_eq!(snap.requests.https, 2);
}
