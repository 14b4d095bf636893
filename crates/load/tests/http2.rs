//! `--h2`: the load engine speaking HTTP/2 to an in-process tlslab server
//! on 127.0.0.1, checked against the server's counters and access log.

mod common;
use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tlslab_crypto::pki::Generated;
use tlslab_load::{Http2, Target};
use tlslab_server::{Server, TlsSettings};

/// A one-thread server with HTTPS and plain listeners writing an access
/// log to `log`; `tweak` adjusts the TLS settings.
fn server(log: &Path, tweak: impl FnOnce(&mut TlsSettings)) -> (Server, Generated) {
    tls_server(Some(log), tweak)
}

/// The server's access log after shutdown: (`$request`, `$connection_id`)
/// per line.
fn access_log(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| {
            let request = l.split('"').nth(1).unwrap().to_string();
            let fields: Vec<&str> = l.rsplit(' ').collect();
            // ... $connection_id $request_on_conn $ssl_early_data $transport
            (request, fields[3].to_string())
        })
        .collect()
}

/// Rows per (client, conn).
fn per_connection(rows: &[Row]) -> BTreeMap<(u64, u64), Vec<&Row>> {
    let mut m: BTreeMap<(u64, u64), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        m.entry((num(r, "client"), num(r, "conn")))
            .or_default()
            .push(r);
    }
    m
}

/// The most streams of one connection whose [start, start + total]
/// intervals overlap.
fn max_overlap(rows: &[&Row]) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for r in rows {
        let s = num(r, "t_start_us");
        events.push((s, 1));
        events.push((s + num(r, "total_us"), -1));
    }
    events.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut top) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        top = top.max(now);
    }
    top as usize
}

#[test]
fn two_clients_ten_streams_make_two_connections_the_server_sees_as_http2() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (srv, g) = server(&log, |_| {});
    let mut cfg = config(vec![https(&srv, "/bytes/1000")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 10,
    });
    cfg.clients = 2;
    cfg.requests = Some(200);
    cfg.requests_per_conn = 0;
    let (report, rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();

    assert_eq!(report.requests.attempted, 200);
    assert_eq!(report.requests.succeeded, 200, "{:?}", report.errors);
    assert_eq!(report.reuse.handshakes, 2);
    assert_eq!(report.latency.ttfb.count, 200);
    assert_eq!(report.latency.total.count, 200);
    let http = report.http.as_ref().unwrap();
    assert_eq!(http.protocol, "h2");
    assert_eq!(http.max_concurrent_streams, Some(10));
    assert_eq!(http.connections, 2);
    assert_eq!(http.requests_per_connection, Some(100.0));
    assert_eq!(http.handshakes_per_request, Some(0.01));
    let hs = http.handshake_crypto_us_per_request.unwrap();
    let rec = http.record_crypto_us_per_request.unwrap();
    assert!(hs > 0.0 && rec > 0.0, "{http:?}");

    // One CSV row per stream; each connection's first stream carries the
    // handshake, and up to 10 (but more than 1) streams overlapped.
    let conns = per_connection(&rows);
    assert_eq!(conns.len(), 2, "{:?}", conns.keys());
    for ((client, conn), streams) in &conns {
        let mut on_conn: Vec<u64> = streams.iter().map(|r| num(r, "req_on_conn")).collect();
        on_conn.sort_unstable();
        assert_eq!(on_conn, (0..streams.len() as u64).collect::<Vec<_>>());
        for r in streams {
            let first = num(r, "req_on_conn") == 0;
            assert_eq!(
                r["kind"] != "none",
                first,
                "client {client} conn {conn}: {r:?}"
            );
            assert_eq!(!r["connect_us"].is_empty(), first);
            assert_eq!(num(r, "body_bytes"), 1000);
            assert!(num(r, "total_us") >= num(r, "ttfb_us"));
        }
        let top = max_overlap(streams);
        assert!(
            (2..=10).contains(&top),
            "client {client}: {top} streams overlapped"
        );
    }

    // The server: two connections, 200 HTTP/2 requests.
    assert_eq!(snap.connections.https, 2, "{snap:?}");
    assert_eq!(snap.requests.https, 200);
    let lines = access_log(&log);
    assert_eq!(lines.len(), 200);
    assert!(
        lines.iter().all(|(r, _)| r == "GET /bytes/1000 HTTP/2.0"),
        "{:?}",
        &lines[..3]
    );
    let ids: BTreeSet<&String> = lines.iter().map(|(_, c)| c).collect();
    assert_eq!(ids.len(), 2);
}

/// More streams than the server takes at once (tlslab serve, as hyper's
/// server, takes 200): the streams beyond its SETTINGS wait on the client
/// rather than being sent before those SETTINGS arrived and refused
/// (REFUSED_STREAM, counted as `reset`).
#[test]
fn streams_beyond_the_servers_limit_wait_instead_of_being_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (srv, g) = server(&log, |_| {});
    let mut cfg = config(vec![https(&srv, "/bytes/100")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 300,
    });
    cfg.clients = 1;
    cfg.requests = Some(600);
    cfg.requests_per_conn = 0;
    let (report, _rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();

    assert_eq!(report.requests.succeeded, 600, "{:?}", report.errors);
    assert_eq!(report.http.as_ref().unwrap().connections, 1);
    assert_eq!(snap.requests.https, 600, "{snap:?}");
}

#[test]
fn requests_per_conn_counts_streams_and_reuse_is_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (srv, g) = server(&log, |t| t.tickets = true);
    let mut cfg = config(vec![https(&srv, "/bytes/100")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 10,
    });
    cfg.clients = 2;
    cfg.requests = Some(200);
    cfg.requests_per_conn = 50;
    cfg.reuse = 1.0;
    let (report, rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();

    assert_eq!(report.requests.succeeded, 200, "{:?}", report.errors);
    // Every connection but each client's last carries exactly K = 50
    // streams (the two clients share the -n budget, so their last
    // connections may split the remainder: 4 or 5 connections in all).
    let conns = per_connection(&rows);
    let mut by_client: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for ((client, _), streams) in &conns {
        by_client.entry(*client).or_default().push(streams.len());
    }
    for (client, sizes) in &by_client {
        let n: usize = sizes.iter().sum();
        assert_eq!(sizes.len(), n.div_ceil(50), "client {client}: {sizes:?}");
        assert!(
            sizes[..sizes.len() - 1].iter().all(|&k| k == 50),
            "{sizes:?}"
        );
    }
    let n_conns = conns.len() as u64;
    assert!((4..=5).contains(&n_conns), "{by_client:?}");
    // Each client: a full handshake, then resumption on every connection.
    assert_eq!(report.reuse.handshakes, n_conns);
    assert_eq!(report.reuse.resumed_count, n_conns - 2);
    let http = report.http.as_ref().unwrap();
    assert_eq!(http.connections, n_conns);
    assert_eq!(http.handshakes_per_request, Some(n_conns as f64 / 200.0));
    assert_eq!(snap.connections.https, n_conns);
    assert_eq!(snap.handshakes.resumed(), n_conns - 2);
    let lines = access_log(&log);
    assert_eq!(lines.len(), 200);
    assert!(lines.iter().all(|(r, _)| r.ends_with(" HTTP/2.0")));
}

#[test]
fn plain_http_speaks_h2c_with_prior_knowledge() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (srv, g) = server(&log, |_| {});
    let url = format!("http://{}/bytes/10", srv.http_addr().unwrap());
    let mut cfg = config(vec![Target::parse(&url).unwrap()], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 4,
    });
    cfg.clients = 2;
    cfg.requests = Some(40);
    cfg.requests_per_conn = 0;
    let (report, rows) = run_logged(&mut cfg);
    let snap = srv.shutdown();
    assert_eq!(report.requests.succeeded, 40, "{:?}", report.errors);
    assert_eq!(report.reuse.handshakes, 0);
    // A connection per client (on a busy machine one client may take all
    // 40 before the other's task runs), each kept for all its requests.
    let conns = report.http.as_ref().unwrap().connections;
    assert!((1..=2).contains(&conns), "{conns}");
    assert_eq!(per_connection(&rows).len() as u64, conns);
    assert_eq!(snap.connections.http, conns);
    assert_eq!(snap.requests.http, 40);
    let lines = access_log(&log);
    assert!(lines.iter().all(|(r, _)| r == "GET /bytes/10 HTTP/2.0"));
}

#[test]
fn a_server_without_h2_fails_connections_by_kind_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    // No ALPN at all: the handshake works, but nothing selected h2.
    let (srv, g) = server(&dir.path().join("a.log"), |t| t.alpn = Vec::new());
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 4,
    });
    cfg.clients = 2;
    cfg.requests = Some(10);
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(report.requests.attempted, 10);
    all_failed(&report, "alpn_not_h2", 10);
    let snap = srv.shutdown();
    assert_eq!(snap.requests.https, 0);

    // ALPN http/1.1 only: the server refuses the handshake itself.
    let (srv, g) = server(&dir.path().join("b.log"), |t| {
        t.alpn = vec![b"http/1.1".to_vec()]
    });
    let mut cfg = config(vec![https(&srv, "/bytes/10")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 4,
    });
    cfg.requests = Some(5);
    let report = tlslab_load::run(&cfg).unwrap();
    all_failed(&report, "tls_alert_no_application_protocol", 5);
    srv.shutdown();
}

#[test]
fn the_deadline_cuts_streams_off_as_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, g) = server(&dir.path().join("a.log"), |_| {});
    let mut cfg = config(vec![https(&srv, "/bytes/100")], &g);
    cfg.http2 = Some(Http2 {
        max_concurrent_streams: 8,
    });
    cfg.clients = 2;
    cfg.requests_per_conn = 0;
    cfg.duration = Some(Duration::from_millis(600));
    let report = tlslab_load::run(&cfg).unwrap();
    srv.shutdown();
    assert!(report.requests.succeeded > 16, "{:?}", report.requests);
    assert_eq!(report.requests.errors, 0, "{:?}", report.errors);
    // Streams in flight at the end: at most 8 per connection.
    assert!(report.requests.unfinished <= 16, "{:?}", report.requests);
    assert_eq!(report.http.as_ref().unwrap().connections, 2);
}

#[test]
fn h2_rejects_what_it_cannot_do() {
    let g = generated();
    let t = Target::parse("https://127.0.0.1:1/").unwrap();
    let base = || {
        let mut c = config(vec![t.clone()], &g);
        c.http2 = Some(Http2 {
            max_concurrent_streams: 4,
        });
        c
    };
    let mut c = base();
    c.http2 = Some(Http2 {
        max_concurrent_streams: 0,
    });
    let e = tlslab_load::run(&c).unwrap_err().to_string();
    assert!(e.contains("--max-concurrent-streams"), "{e}");
}
