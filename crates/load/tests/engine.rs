//! The load engine against an in-process tlslab server on 127.0.0.1.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use tlslab_crypto::pki::Generated;
use tlslab_crypto::provider::{Algorithms, Version};
use tlslab_load::{LoadConfig, ResumeWith, Target, Trust};
use tlslab_report::LoadReportText;
use tlslab_server::{Server, SessionCache, TlsSettings};
use tlslab_stats::LoadReport;

/// A server with a fresh ECDSA chain, one worker thread, an HTTPS and a
/// plain HTTP listener; `tweak` adjusts the TLS settings.
fn server(tweak: impl FnOnce(&mut TlsSettings)) -> (Server, Generated) {
    tls_server(None, tweak)
}

/// The handshake kinds of each client, in connection order: N or R.
fn sequences(rows: &[Row]) -> BTreeMap<u64, String> {
    let mut by_client: BTreeMap<u64, Vec<(u64, char)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["kind"] != "none") {
        let c = if r["kind"] == "resumed" { 'R' } else { 'N' };
        by_client
            .entry(num(r, "client"))
            .or_default()
            .push((num(r, "conn"), c));
    }
    by_client
        .into_iter()
        .map(|(k, mut v)| {
            v.sort();
            (k, v.into_iter().map(|(_, c)| c).collect())
        })
        .collect()
}

#[test]
fn reuse_50_alternates_and_server_agrees_on_tls12_and_tls13() {
    for (version, rtt_full) in [(Version::Tls12, "2"), (Version::Tls13, "1")] {
        let (srv, g) = server(|t| t.versions = vec![version]);
        let mut cfg = config(vec![https(&srv, "/bytes/1000")], &g);
        cfg.requests = Some(40);
        cfg.clients = 2;
        cfg.reuse = 0.5;
        let (report, rows) = run_logged(&mut cfg);
        let snap = srv.shutdown();

        assert_eq!(report.requests.attempted, 40, "{version}");
        assert_eq!(report.requests.succeeded, 40, "{:?}", report.errors);
        assert!(report.throughput.bytes_per_s > 0.0);
        let seqs = sequences(&rows);
        assert_eq!(seqs.len(), 2);
        let mut expected_resumed = 0;
        for (client, s) in &seqs {
            let want: String = (0..s.len())
                .map(|i| if i % 2 == 0 { 'N' } else { 'R' })
                .collect();
            assert_eq!(s, &want, "{version} client {client}");
            expected_resumed += s.len() / 2;
        }
        assert_eq!(report.reuse.resumed_count, expected_resumed as u64);
        assert_eq!(report.reuse.handshakes, 40);
        assert!(
            (report.reuse.achieved - 0.5).abs() <= 0.05,
            "{:?}",
            report.reuse
        );
        assert_eq!(report.reuse.offered_count, report.reuse.resumed_count);
        assert_eq!(report.reuse.requested, 0.5);

        // Every row: the version asked for, round trips as the protocol says.
        for r in &rows {
            assert_eq!(r["version"], version.name());
            assert_eq!(r["status"], "200");
            assert_eq!(num(r, "body_bytes"), 1000);
            let want = if r["kind"] == "resumed" {
                "1"
            } else {
                rtt_full
            };
            assert_eq!(r["round_trips"], want, "{version} {r:?}");
            assert!(num(r, "hs_bytes_in") > 0 && num(r, "hs_bytes_out") > 0);
            assert!(num(r, "total_us") >= num(r, "ttfb_us"));
        }
        // Full handshakes carry the certificate: far more bytes in.
        assert!(
            report.handshake.full.bytes_in_mean.unwrap()
                > report.handshake.resumed.bytes_in_mean.unwrap() + 200.0
        );

        // The server saw the same handshakes.
        let kinds = snap.handshakes.get(version);
        assert_eq!(kinds.resumed, report.reuse.resumed_count, "{snap:?}");
        assert_eq!(kinds.full + kinds.full_hrr, 40 - report.reuse.resumed_count);
        assert_eq!(snap.requests.https, 40);
        assert_eq!(
            report.handshake.versions[version.name()].resumed,
            kinds.resumed
        );
    }
}

#[test]
fn reuse_0_and_100() {
    let (srv, g) = server(|_| {});
    for (reuse, pattern) in [(0.0, 'N'), (1.0, 'R')] {
        let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
        cfg.requests = Some(30);
        cfg.clients = 3;
        cfg.reuse = reuse;
        let (report, rows) = run_logged(&mut cfg);
        assert_eq!(report.requests.succeeded, 30, "{:?}", report.errors);
        for (client, s) in sequences(&rows) {
            let want: String = (0..s.len())
                .map(|i| if i == 0 { 'N' } else { pattern })
                .collect();
            assert_eq!(s, want, "reuse {reuse} client {client}");
        }
        let resumed = report.reuse.resumed_count;
        if reuse == 0.0 {
            assert_eq!(resumed, 0);
            assert_eq!(report.reuse.offered_count, 0);
        } else {
            assert_eq!(resumed, 27);
            assert_eq!(report.latency.handshake_resumed.count, 27);
        }
    }
    let snap = srv.shutdown();
    assert_eq!(snap.handshakes.resumed(), 27);
}

#[test]
fn session_ids_and_tickets_both_resume_tls12() {
    for (tickets, with) in [(false, ResumeWith::Id), (true, ResumeWith::Ticket)] {
        let (srv, g) = server(|t| {
            t.versions = vec![Version::Tls12];
            t.tickets = tickets;
        });
        let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
        cfg.requests = Some(10);
        cfg.reuse = 1.0;
        cfg.resume_with = with;
        let report = tlslab_load::run(&cfg).unwrap();
        let snap = srv.shutdown();
        assert_eq!(
            report.reuse.resumed_count, 9,
            "{with:?}: {:?}",
            report.errors
        );
        assert_eq!(report.config.resume_with, with.name());
        if tickets {
            assert!(snap.tickets.unwrap().accepted >= 9, "{snap:?}");
        } else {
            assert!(snap.session_cache.unwrap().hits >= 9, "{snap:?}");
        }
    }
}

#[test]
fn a_server_that_cannot_resume_gets_full_handshakes_only() {
    // No session cache and no tickets: the server hands out no resumable
    // session (an empty session ID), so the client holds none to offer.
    let (srv, g) = server(|t| {
        t.versions = vec![Version::Tls12];
        t.session_cache = SessionCache::None;
        t.tickets = false;
    });
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
    cfg.requests = Some(6);
    cfg.reuse = 0.5;
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(report.requests.succeeded, 6, "{:?}", report.errors);
    assert_eq!(report.reuse.offered_count, 0, "{:?}", report.reuse);
    assert_eq!(report.reuse.resumed_count, 0);
    assert_eq!(report.reuse.achieved, 0.0);
    assert_eq!(report.reuse.requested, 0.5);
    assert_eq!(srv.shutdown().handshakes.tls12.full, 6);
}

#[test]
fn keep_alive_makes_one_handshake_per_k_requests_and_plain_http_works() {
    let (srv, g) = server(|_| {});
    let http = Target::parse(&format!("http://{}/bytes/100", srv.http_addr().unwrap())).unwrap();
    for target in [https(&srv, "/bytes/100"), http] {
        let tls = target.is_tls();
        let mut cfg = config(vec![target], &g);
        cfg.requests = Some(21);
        cfg.clients = 2;
        cfg.requests_per_conn = 4;
        let (report, rows) = run_logged(&mut cfg);
        assert_eq!(report.requests.succeeded, 21, "{:?}", report.errors);
        let mut per_client: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
        for r in &rows {
            *per_client
                .entry(num(r, "client"))
                .or_default()
                .entry(num(r, "conn"))
                .or_default() += 1;
            if num(r, "req_on_conn") == 0 {
                assert!(!r["connect_us"].is_empty());
                assert_eq!(r["kind"] != "none", tls);
            } else {
                assert_eq!(r["kind"], "none");
                assert_eq!(r["connect_us"], "");
            }
        }
        let mut conns = 0;
        for (client, by_conn) in &per_client {
            let n: u64 = by_conn.values().sum();
            assert_eq!(
                by_conn.len() as u64,
                n.div_ceil(4),
                "client {client}: {by_conn:?}"
            );
            let sizes: Vec<u64> = by_conn.values().copied().collect();
            assert!(
                sizes[..sizes.len() - 1].iter().all(|&s| s == 4),
                "{sizes:?}"
            );
            conns += by_conn.len() as u64;
        }
        if tls {
            assert_eq!(report.reuse.handshakes, conns);
        } else {
            assert_eq!(report.reuse.handshakes, 0);
            assert_eq!(report.latency.connect.count, conns);
        }
    }
    let snap = srv.shutdown();
    assert_eq!(snap.requests.http, 21);
    assert_eq!(snap.requests.https, 21);
}

#[test]
fn refused_port_counts_refused_errors() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let g = generated();
    let mut cfg = config(
        vec![Target::parse(&format!("https://127.0.0.1:{port}/")).unwrap()],
        &g,
    );
    cfg.requests = Some(5);
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.attempted, 5);
    all_failed(&report, "refused", 5);
    assert!(
        rows.iter()
            .all(|r| r["error"] == "refused" && r["status"].is_empty())
    );
    assert_eq!(report.latency.total.count, 0);
}

#[test]
fn server_stopped_mid_run_shows_errors_not_a_crash() {
    let (srv, g) = server(|_| {});
    let mut cfg = config(vec![https(&srv, "/bytes/100")], &g);
    cfg.duration = Some(Duration::from_millis(1500));
    cfg.clients = 2;
    let started = Instant::now();
    let run = std::thread::spawn(move || tlslab_load::run(&cfg).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    drop(srv);
    let report = run.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(report.requests.succeeded > 0);
    let failed: u64 = report.errors.values().sum();
    assert!(failed > 0, "{report:?}");
    assert!(
        report
            .errors
            .keys()
            .all(|k| ["refused", "reset", "closed"].contains(&k.as_str())),
        "{:?}",
        report.errors
    );
    // The window ends when the clients stop at the deadline.
    let m = report.window.measured_s;
    assert!((1.5..3.0).contains(&m), "{:?}", report.window);
}

#[test]
fn silent_server_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Accepts (the kernel does) but never answers the ClientHello.
    let g = generated();
    let mut cfg = config(
        vec![Target::parse(&format!("https://{addr}/")).unwrap()],
        &g,
    );
    cfg.requests = Some(2);
    cfg.timeout = Duration::from_millis(200);
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(
        report.errors.get("timeout"),
        Some(&2),
        "{:?}",
        report.errors
    );
    assert_eq!(report.latency.connect.count, 2);
    drop(l);
}

#[test]
fn duration_bound_run_reports_its_window_and_json_round_trips() {
    let (srv, g) = server(|_| {});
    let mut cfg = config(vec![https(&srv, "/dyn?work=0&bytes=10")], &g);
    cfg.duration = Some(Duration::from_millis(700));
    cfg.warmup = Duration::from_millis(300);
    cfg.clients = 2;
    cfg.reuse = 0.5;
    // Not a terminal here, so nothing is drawn; the ticker must still stop.
    cfg.progress = true;
    let (report, rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();
    let m = report.window.measured_s;
    assert!((0.7..1.5).contains(&m), "{:?}", report.window);
    assert_eq!(report.window.observed, "client-observed");
    assert!(report.requests.completed > 0);
    // The warm-up made requests the report does not count.
    assert!(snap.requests.https > report.requests.completed);
    assert!(rows.iter().all(|r| num(r, "t_start_us") < 700_000));
    let json = report.to_json();
    let back: LoadReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    let table = report.render_table();
    assert!(table.contains("client-observed over"), "{table}");
    assert!(report.client_cpu.user_s + report.client_cpu.sys_s >= 0.0);
}

#[test]
fn hello_retry_request_costs_a_round_trip() {
    let (srv, g) = server(|t| {
        t.versions = vec![Version::Tls13];
        t.algorithms = Algorithms {
            suites: None,
            groups: Some(vec!["x25519".into()]),
            ..Algorithms::default()
        };
    });
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
    cfg.algorithms.groups = Some(vec!["secp384r1".into(), "x25519".into()]);
    cfg.requests = Some(6);
    cfg.clients = 2;
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 6, "{:?}", report.errors);
    // A client's first ClientHello guesses secp384r1 and is retried; it
    // then remembers the server's group (rustls's kx hint) and later
    // handshakes need no retry.
    let first: Vec<&Row> = rows.iter().filter(|r| r["conn"] == "0").collect();
    let clients = first.len() as u64;
    assert!(
        first
            .iter()
            .all(|r| r["hrr"] == "1" && r["round_trips"] == "2"),
        "{rows:?}"
    );
    let later = rows.iter().filter(|r| r["conn"] != "0");
    assert!(
        later
            .clone()
            .all(|r| r["hrr"] == "0" && r["round_trips"] == "1"),
        "{rows:?}"
    );
    assert_eq!(report.handshake.hello_retry_requests, clients);
    assert_eq!(report.handshake.groups.get("x25519"), Some(&6));
    assert_eq!(srv.shutdown().handshakes.tls13.full_hrr, clients);
}

#[test]
fn early_data_is_sent_on_resumption() {
    let (srv, g) = server(|t| {
        t.versions = vec![Version::Tls13];
        t.max_early_data = 16 * 1024;
        t.tickets = false;
    });
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
    cfg.early_data = true;
    cfg.reuse = 1.0;
    cfg.requests = Some(5);
    let (report, rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();
    assert_eq!(report.requests.succeeded, 5, "{:?}", report.errors);
    assert_eq!(report.handshake.early_data.sent, 4, "{rows:?}");
    assert_eq!(report.handshake.early_data.accepted, 4, "{rows:?}");
    assert_eq!(snap.early_data.connections, 4, "{snap:?}");
    assert_eq!(rows[0]["early_data"], "");
}

#[test]
fn certificate_checks_fail_as_tls_errors_unless_insecure() {
    let (srv, g) = server(|_| {});
    let other = generated();
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &other);
    cfg.requests = Some(2);
    let report = tlslab_load::run(&cfg).unwrap();
    // Both test CAs have the same name, so the chain is found and its
    // signature fails (`bad_signature`).
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    let (kind, n) = report.errors.iter().next().unwrap();
    assert!(kind.starts_with("tls_invalid_certificate_"), "{kind}");
    assert_eq!(*n, 2);
    assert_eq!(report.reuse.handshakes, 0);
    cfg.trust = Trust::Insecure;
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(report.requests.succeeded, 2, "{:?}", report.errors);
    let _ = g;
}

#[test]
fn http_errors_are_counted_by_status() {
    let (srv, g) = server(|_| {});
    let mut cfg = config(vec![https(&srv, "/no-such-file")], &g);
    cfg.requests = Some(3);
    cfg.requests_per_conn = 0;
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(report.status.get("404"), Some(&3));
    assert_eq!(report.errors.get("http_404"), Some(&3));
    assert_eq!(report.requests.completed, 3);
    assert_eq!(report.requests.succeeded, 0);
    assert_eq!(report.reuse.handshakes, 1, "keep-alive: one connection");
}

#[test]
fn configuration_errors_say_the_fix() {
    let t = Target::parse("https://127.0.0.1:1/").unwrap();
    let mut cfg = LoadConfig::new(vec![t.clone()]);
    cfg.trust = Trust::CaFile("/no/such/ca.pem".into());
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("/no/such/ca.pem") && e.contains("tlslab certs"),
        "{e}"
    );

    let mut cfg = LoadConfig::new(vec![t.clone()]);
    cfg.versions.clear();
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("--tls"), "{e}");

    let mut cfg = LoadConfig::new(vec![t]);
    cfg.duration = None;
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("-d") && e.contains("-n"), "{e}");

    let mut cfg = LoadConfig::new(vec![Target::parse("http://127.0.0.1:1/").unwrap()]);
    cfg.pin_cpus = Some(vec![100_000]);
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("CPU 100000") && e.contains("may only use CPUs"),
        "{e}"
    );

    let e = Target::parse("ftp://x/").unwrap_err().to_string();
    assert!(
        e.starts_with("bad URL 'ftp://x/': expected https://host[:port]/path"),
        "{e}"
    );
}
