//! End-to-end tests of `tlslab dispatch` in front of three real
//! `tlslab serve` nodes on 127.0.0.1 ephemeral ports: session-aware routing
//! for each resumption mechanism against a blind baseline (read from the
//! dispatcher's `/metrics` and the load report), and bad input. Every load
//! is bounded by `-n`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Proc, Serve, expect_ok, http_get, run_tlslab, tlslab, url_addr};

const LIMIT: Duration = Duration::from_secs(90);

/// A running `tlslab dispatch`.
struct Dispatch {
    proc: Proc,
    listen: SocketAddr,
    metrics: SocketAddr,
}

impl Dispatch {
    fn start(nodes: &[Serve], extra: &[&str]) -> Dispatch {
        let mut args: Vec<String> = vec![
            "dispatch".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--metrics".into(),
            "127.0.0.1:0".into(),
        ];
        for n in nodes {
            args.push("--backend".into());
            args.push(n.https.to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = Proc::spawn(tlslab(&args)).graceful_drop();
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut listen, mut metrics) = (None, None);
        while listen.is_none() || metrics.is_none() {
            let line = proc
                .next_line(deadline)
                .unwrap_or_else(|| panic!("dispatch did not start:\n{}", proc.describe()));
            if let Some(a) = line.strip_prefix("tlslab dispatch: listen ") {
                listen = a.trim().parse().ok();
            } else if let Some(u) = line.strip_prefix("tlslab dispatch: metrics ") {
                metrics = url_addr(u.trim());
            }
        }
        Dispatch {
            proc,
            listen: listen.unwrap(),
            metrics: metrics.unwrap(),
        }
    }

    fn metric(&self, name: &str) -> f64 {
        let (status, body) = http_get(self.metrics, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "{body}");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                (k == name).then(|| v.parse::<f64>().ok()).flatten()
            })
            .unwrap_or_else(|| panic!("metric {name} not in:\n{body}"))
    }
}

fn nodes(args: &[&str]) -> Vec<Serve> {
    (0..3).map(|_| Serve::start(args)).collect()
}

/// Loads through the dispatcher: 300 one-request connections, 90 % reuse.
fn load(d: &Dispatch, tls: &str, resume: &str) -> String {
    let url = format!("https://{}/", d.listen);
    let out = run_tlslab(
        &[
            "load",
            &url,
            "-c",
            "4",
            "-n",
            "300",
            "--reuse",
            "90",
            "--insecure",
            "--tls",
            tls,
            "--resume-with",
            resume,
            "--no-progress",
        ],
        LIMIT,
    );
    expect_ok(&out)
}

fn efficiency(serve: &[&str], tls: &str, resume: &str, policy: &str) -> f64 {
    let n = nodes(serve);
    let d = Dispatch::start(&n, &["--policy", policy]);
    load(&d, tls, resume);
    let attempts = d.metric("tlslab_dispatch_resumption_attempts_total");
    let accepted = d.metric("tlslab_dispatch_resumptions_accepted_total");
    assert!(attempts >= 200.0, "{policy}: only {attempts} attempts seen");
    let eff = d.metric("tlslab_dispatch_routing_efficiency");
    assert!((eff - accepted / attempts).abs() < 1e-9);
    // Server-observed: what the nodes resumed agrees with what the
    // dispatcher read from their ServerHellos.
    let resumed: f64 = n
        .iter()
        .map(|s| {
            s.metrics_text()
                .lines()
                .filter(|l| {
                    l.starts_with("tlslab_handshakes_total") && l.contains("kind=\"resumed\"")
                })
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum();
    if resumed > 0.0 {
        assert_eq!(
            resumed, accepted,
            "nodes resumed {resumed}, dispatcher saw {accepted}"
        );
    }
    eff
}

#[test]
fn session_policy_routes_tls12_ids_tls12_tickets_and_tls13_tickets() {
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["--tls", "1.2", "--tickets", "off", "--threads", "1"],
            "1.2",
            "id",
        ),
        (
            &["--tls", "1.2", "--tickets", "on", "--threads", "1"],
            "1.2",
            "ticket",
        ),
        (
            &["--tls", "1.3", "--tickets", "on", "--threads", "1"],
            "1.3",
            "auto",
        ),
    ];
    for (serve, tls, resume) in cases {
        let session = efficiency(serve, tls, resume, "session");
        let blind = efficiency(serve, tls, resume, "round-robin");
        eprintln!("TLS {tls} {resume}: session {session:.3}, round-robin {blind:.3}");
        assert!(
            session >= 0.97,
            "TLS {tls} {resume}: session routing efficiency {session}"
        );
        assert!(
            blind < 0.6,
            "TLS {tls} {resume}: round-robin efficiency {blind} is not blind"
        );
    }
}

#[test]
fn bad_input_is_counted_forwarded_or_closed() {
    let n = nodes(&["--threads", "1"]);
    // Default: forwarded. Plain HTTP on the TLS port reaches a node, which
    // answers (or closes); the dispatcher counts it and keeps working.
    let d = Dispatch::start(&n, &[]);
    let mut s = TcpStream::connect(d.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    // A truncated, malformed ClientHello: a handshake record whose message
    // claims a body longer than the record, then the client closes.
    let mut s = TcpStream::connect(d.listen).unwrap();
    s.write_all(&[22, 3, 1, 0, 4, 1, 0, 0, 0]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = s.read_to_end(&mut sink);
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.metric("tlslab_dispatch_bad_input_total{kind=\"not_tls\"}") < 1.0 {
        assert!(Instant::now() < deadline, "not_tls never counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        d.metric("tlslab_dispatch_bad_input_total{kind=\"malformed\"}")
            + d.metric("tlslab_dispatch_bad_input_total{kind=\"truncated\"}")
            >= 1.0
    );
    // Still routes real TLS afterwards.
    // (Well above round-robin's third: each node's first resumptions are
    // routed blind until the dispatcher has learned its key name, and
    // with four clients several can be in flight by then.)
    load(&d, "1.3", "auto");
    let eff = d.metric("tlslab_dispatch_routing_efficiency");
    assert!(eff >= 0.9, "routing efficiency after bad input: {eff}");

    // --bad-input close: a client that stalls mid-hello is closed after
    // --hello-timeout.
    let d = Dispatch::start(&n, &["--bad-input", "close", "--hello-timeout", "300ms"]);
    let mut s = TcpStream::connect(d.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[22, 3, 1]).unwrap();
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let r = s.read(&mut b);
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "stalled client not closed: {r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(
        d.metric("tlslab_dispatch_bad_input_total{kind=\"timeout\"}"),
        1.0
    );
    assert_eq!(d.metric("tlslab_dispatch_bad_input_closed_total"), 1.0);
    assert!(d.proc.stderr_text().find("panicked").is_none());
}

#[test]
fn a_dead_node_is_routed_around_and_bad_flags_are_usage_errors() {
    let mut n = nodes(&["--tls", "1.3", "--threads", "1"]);
    let d = Dispatch::start(&n, &["--health-interval", "200ms"]);
    load(&d, "1.3", "auto");
    drop(n.pop());
    std::thread::sleep(Duration::from_millis(800));
    // Exits 0: connections to the dead node failed over, not errors.
    load(&d, "1.3", "auto");
    let (_, body) = http_get(d.metrics, "/metrics").unwrap();
    assert!(
        body.lines()
            .any(|l| l.starts_with("tlslab_dispatch_node_up{") && l.ends_with(" 0")),
        "{body}"
    );

    let out = run_tlslab(&["dispatch", "--backend", "nonsense"], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", common::show(&out));
    let out = run_tlslab(&["dispatch", "--backend", "127.0.0.1:1=zz"], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", common::show(&out));
}
