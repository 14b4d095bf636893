//! Every loop and workload over every protocol behind the load engine's
//! protocol seam (`Client::connection`): HTTP/1.1 and HTTP/2 over TLS and
//! HTTP/3 over QUIC, each run against an in-process tlslab server on
//! 127.0.0.1 and checked against what the server counted and logged.

mod common;
use common::*;

use std::path::Path;
use std::time::{Duration, Instant};

use tlslab_crypto::pki::Generated;
use tlslab_load::{
    Arrivals, Http2, Http3, LoadConfig, OpenLoop, Target, ThinkTime, Users, Workload, run_users,
};
use tlslab_server::{CertSource, Content, H3Settings, ServeConfig, Server, TlsSettings};
use tlslab_stats::LoadReport;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
    H3,
}

impl Proto {
    const ALL: [Proto; 3] = [Proto::H1, Proto::H2, Proto::H3];

    /// Sets the protocol on `cfg`, with 2 streams per connection (1 where
    /// a closed loop's connection carries a single request).
    fn apply(self, cfg: &mut LoadConfig) {
        let m = match cfg.requests_per_conn {
            0 => 2,
            k => k.min(2),
        };
        cfg.http2 = (self == Proto::H2).then_some(Http2 {
            max_concurrent_streams: m,
        });
        cfg.http3 = (self == Proto::H3).then(|| Http3::new(m));
    }

    /// Sets the streams per connection.
    fn streams(self, cfg: &mut LoadConfig, m: u32) {
        if let Some(h2) = &mut cfg.http2 {
            h2.max_concurrent_streams = m;
        }
        if let Some(h3) = &mut cfg.http3 {
            h3.max_concurrent_streams = m;
        }
    }

    /// The request line's version in the server's access log.
    fn log_version(self) -> &'static str {
        match self {
            Proto::H1 => "HTTP/1.1",
            Proto::H2 => "HTTP/2.0",
            Proto::H3 => "HTTP/3.0",
        }
    }

    /// The transport field that ends each line of the access log.
    fn log_transport(self) -> &'static str {
        match self {
            Proto::H3 => " quic",
            _ => " tcp",
        }
    }

    fn report_name(self) -> &'static str {
        match self {
            Proto::H1 => "http/1.1",
            Proto::H2 => "h2",
            Proto::H3 => "h3",
        }
    }

    /// A server serving `content` with a fresh ECDSA chain and one worker
    /// thread, with an HTTP/3 listener for [`Proto::H3`], writing an access
    /// log to `log` if given.
    fn server(self, content: Content, log: Option<&Path>) -> (Server, Generated) {
        let g = generated();
        let tls = TlsSettings::new(CertSource::Generated(g.clone()));
        let mut cfg = ServeConfig::new(loopback(), content, tls);
        cfg.threads = 1;
        cfg.access_log = log.map(Path::to_path_buf);
        // HTTP/3 on the HTTPS listener's port number, over UDP (the server
        // picks a number free for both).
        let h3 = (self == Proto::H3).then(|| H3Settings::new(loopback()));
        match Server::start_with_h3(cfg, h3) {
            Ok(s) => (s, g),
            Err(e) => panic!("{self:?} server: {e}"),
        }
    }

    /// The URL of `path` on `srv` in this protocol.
    fn url(self, srv: &Server, path: &str) -> Target {
        match self {
            Proto::H3 => {
                Target::parse(&format!("https://{}{path}", srv.h3_addr().unwrap())).unwrap()
            }
            _ => https(srv, path),
        }
    }
}

/// The HTTP/3 requests the server answered and its QUIC connections
/// established, once it has answered `want` (or after 10 s).
fn quic_counts(srv: &Server, want: u64) -> (u64, u64) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let q = srv.snapshot().quic.expect("an HTTP/3 listener");
        if q.requests >= want || Instant::now() > end {
            return (q.requests, q.established);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cfg` (set to `proto` by the caller) against `srv`, then checks what both sides
/// saw: every attempted request succeeded, and the server logged exactly
/// that many requests in `proto`'s version, over the connections the
/// client counted.
fn run_checked(
    proto: Proto,
    srv: Server,
    log: &Path,
    cfg: &mut LoadConfig,
    want: u64,
) -> (LoadReport, Vec<Row>) {
    let (report, rows) = run_logged(cfg);
    let quic = (proto == Proto::H3).then(|| quic_counts(&srv, want));
    let snap = srv.shutdown();
    assert_eq!(report.requests.attempted, want, "{proto:?}");
    assert_eq!(
        report.requests.succeeded, want,
        "{proto:?}: {:?}",
        report.errors
    );
    let http = report.http.as_ref().expect("an http section");
    assert_eq!(http.protocol, proto.report_name());
    // Server-observed: the same requests, in the protocol asked for. The
    // warm-up is zero, so the server saw the measured requests only.
    let (requests, connections) = match quic {
        Some(q) => {
            assert_eq!(snap.requests.https, 0, "{proto:?}: {snap:?}");
            q
        }
        None => (snap.requests.https, snap.connections.https),
    };
    assert_eq!(requests, want, "{proto:?}: {snap:?}");
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() as u64, want, "{proto:?}");
    let (version, transport) = (proto.log_version(), proto.log_transport());
    assert!(
        lines
            .iter()
            .all(|l| l.contains(version) && l.ends_with(transport)),
        "{proto:?}: {:?}",
        &lines[..2]
    );
    assert_eq!(
        connections, http.connections,
        "{proto:?}: the server's connections are the client's"
    );
    (report, rows)
}

fn logged_server(proto: Proto, dir: &Path) -> (Server, Generated, std::path::PathBuf) {
    let log = dir.join("access.log");
    let (srv, g) = proto.server(Content::Empty, Some(&log));
    (srv, g, log)
}

#[test]
fn closed_loop_urls_over_every_protocol() {
    for proto in Proto::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (srv, g, log) = logged_server(proto, dir.path());
        let mut cfg = config(vec![proto.url(&srv, "/bytes/100")], &g);
        cfg.clients = 2;
        cfg.requests = Some(40);
        cfg.requests_per_conn = 5;
        proto.apply(&mut cfg);
        let (report, rows) = run_checked(proto, srv, &log, &mut cfg, 40);
        // 5 requests a connection; the clients share the 40, so one may end
        // on a short connection.
        let conns = report.http.unwrap().connections;
        assert!((8..=9).contains(&conns), "{proto:?}: {conns}");
        assert!(rows.iter().all(|r| num(r, "body_bytes") == 100));
    }
}

#[test]
fn open_loop_over_every_protocol_makes_a_connection_per_arrival() {
    for proto in Proto::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (srv, g, log) = logged_server(proto, dir.path());
        let mut cfg = config(vec![proto.url(&srv, "/health")], &g);
        cfg.clients = 4;
        cfg.requests = Some(20);
        cfg.open_loop = Some(OpenLoop {
            rate: 200.0,
            arrivals: Arrivals::Constant,
            max_in_flight: 1000,
        });
        proto.apply(&mut cfg);
        let (report, rows) = run_checked(proto, srv, &log, &mut cfg, 20);
        let ol = report.open_loop.as_ref().expect("open-loop report");
        assert_eq!(ol.scheduled, 20, "{proto:?}");
        assert_eq!(report.http.unwrap().connections, 20, "{proto:?}");
        // Each arrival's request is its connection's first, timed from the
        // intended start (so never shorter than from the actual one).
        assert!(rows.iter().all(|r| num(r, "req_on_conn") == 0));
    }
}

/// The SPECweb96 mix over every protocol, in a closed loop (keep-alive)
/// and in an open loop (a connection an arrival).
#[test]
fn specweb96_over_every_protocol_and_loop() {
    for proto in Proto::ALL {
        for open in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("access.log");
            let (srv, g) = proto.server(Content::Specweb96, Some(&log));
            let mut cfg = config(vec![proto.url(&srv, "")], &g);
            cfg.workload = Workload::Specweb96;
            cfg.clients = 2;
            cfg.requests = Some(20);
            if open {
                cfg.open_loop = Some(OpenLoop {
                    rate: 200.0,
                    arrivals: Arrivals::Poisson,
                    max_in_flight: 1000,
                });
            } else {
                cfg.requests_per_conn = 0;
            }
            proto.apply(&mut cfg);
            let (report, rows) = run_checked(proto, srv, &log, &mut cfg, 20);
            let conns = report.http.as_ref().unwrap().connections;
            if open {
                assert_eq!(report.open_loop.as_ref().unwrap().scheduled, 20);
                assert_eq!(conns, 20, "{proto:?}");
            } else {
                assert!(conns <= 2, "{proto:?}: {conns}");
            }
            assert!(
                rows.iter()
                    .all(|r| r["target"].contains("/specweb96/class")),
                "{proto:?} open {open}"
            );
        }
    }
}

#[test]
fn think_time_over_every_protocol_separates_requests_on_a_connection() {
    for proto in Proto::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (srv, g, log) = logged_server(proto, dir.path());
        let mut cfg = config(vec![proto.url(&srv, "/health")], &g);
        cfg.clients = 1;
        cfg.requests = Some(4);
        cfg.requests_per_conn = 0;
        cfg.think_time = ThinkTime::Const(Duration::from_millis(150));
        // One stream at a time, so the pauses are between requests.
        proto.apply(&mut cfg);
        proto.streams(&mut cfg, 1);
        let (_, rows) = run_checked(proto, srv, &log, &mut cfg, 4);
        let mut starts: Vec<u64> = rows.iter().map(|r| num(r, "t_start_us")).collect();
        starts.sort_unstable();
        for w in starts.windows(2) {
            // At least the think time apart; a busy machine only adds.
            assert!(w[1] - w[0] >= 150_000, "{proto:?}: {starts:?}");
        }
        // Think time is not latency: the median request is shorter than
        // one pause (a loaded machine may make one request slow).
        let mut totals: Vec<u64> = rows.iter().map(|r| num(r, "total_us")).collect();
        totals.sort_unstable();
        assert!(totals[totals.len() / 2] < 150_000, "{proto:?}: {totals:?}");
    }
}

#[test]
fn retry_on_failure_over_every_protocol_repeats_the_failed_request() {
    for proto in Proto::ALL {
        // 100 ms of server CPU per request against a 40 ms timeout: every
        // request fails, and each failure is retried by the same client.
        // Over QUIC the handshake must finish within the timeout too (else
        // no server answered at all): 600 ms against 200 ms.
        let (work, timeout) = match proto {
            Proto::H3 => (600_000, 200),
            _ => (100_000, 40),
        };
        let (srv, g) = proto.server(Content::Empty, None);
        let mut cfg = config(vec![proto.url(&srv, &format!("/dyn?work={work}"))], &g);
        proto.apply(&mut cfg);
        cfg.timeout = Duration::from_millis(timeout);
        cfg.retry_on_failure = true;
        cfg.requests = Some(4);
        let (report, rows) = run_logged(&mut cfg);
        drop(srv);
        assert_eq!(report.requests.attempted, 4, "{proto:?}");
        assert_eq!(
            report.errors.get("timeout"),
            Some(&4),
            "{proto:?}: {:?}",
            report.errors
        );
        assert_eq!(report.requests.retries, 3, "{proto:?}");
        let retried: u64 = rows.iter().map(|r| num(r, "retry")).sum();
        assert_eq!(retried, 3, "{proto:?}");
    }
}

#[test]
fn replay_over_every_protocol_makes_the_logged_requests() {
    use tlslab_workload::replay::{Pacing, PathMode, ReplayPlan, filter, parse};
    let mut text = String::new();
    for i in 0..12u64 {
        let ip = ["10.0.0.1", "10.0.0.2", "10.0.0.3"][i as usize % 3];
        text += &format!(
            "{ip} - - [01/Jan/2024:10:00:00 +0000] \"GET /p{i}.html HTTP/1.1\" 200 {} \"-\" \"t\"\n",
            500 + i
        );
    }
    for proto in Proto::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (srv, g, log) = logged_server(proto, dir.path());
        let (entries, parsed) = parse::parse_str(&text);
        let (entries, filtered) = filter::filter(entries, &Default::default(), None);
        let mut cfg = config(vec![proto.url(&srv, "")], &g);
        cfg.workload = Workload::Replay;
        cfg.duration = None;
        cfg.clients = 2;
        cfg.replay = Some(tlslab_load::Replay {
            plan: std::sync::Arc::new(ReplayPlan::new(&entries, PathMode::Bytes)),
            window: 4,
            pacing: Pacing::AsFastAsPossible,
            skipped_lines: parsed.skipped_count,
            filtered,
        });
        proto.apply(&mut cfg);
        let (report, rows) = run_checked(proto, srv, &log, &mut cfg, 12);
        let mut sizes: Vec<u64> = rows.iter().map(|r| num(r, "body_bytes")).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, (500..512).collect::<Vec<_>>(), "{proto:?}");
        // Three browsers: one full handshake each, the rest resumed.
        assert_eq!(report.handshake.full.count, 3, "{proto:?}");
        assert_eq!(report.handshake.resumed.count, 9, "{proto:?}");
    }
}

/// The e-commerce browser over every protocol and loop: over HTTP/1.1 an
/// object a connection; over HTTP/2 and HTTP/3 a page a connection, the
/// HTML its first stream and the inline objects after it. In an open loop
/// purchase sessions arrive at the rate, each a new browser. Either way
/// one full handshake a purchase session, every other connection resumed.
#[test]
fn ecommerce_over_every_protocol_and_loop() {
    for proto in Proto::ALL {
        for open in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (srv, g, log) = logged_server(proto, dir.path());
            let mut cfg = config(vec![proto.url(&srv, "")], &g);
            cfg.workload = Workload::Ecommerce;
            cfg.ecommerce = Some(tlslab_workload::ecommerce::Config {
                new_customer_percent: 50.0,
                think_time: ThinkTime::Zero,
                revisit_probability: 0.0,
                max_connections: 4,
                ..Default::default()
            });
            cfg.clients = 2;
            cfg.requests = Some(40);
            cfg.open_loop = open.then_some(OpenLoop {
                rate: 20.0,
                arrivals: Arrivals::Constant,
                max_in_flight: 100,
            });
            proto.apply(&mut cfg);
            let (report, rows) = run_checked(proto, srv, &log, &mut cfg, 40);
            let e = report.ecommerce.clone().expect("an e-commerce report");
            let http = report.http.as_ref().unwrap();
            let conns = http.connections;
            if proto != Proto::H1 {
                // The page's parallelism, not -m.
                assert_eq!(http.max_concurrent_streams, Some(4), "{proto:?}");
            }
            assert!(e.sessions >= 2 && e.pages >= 4, "{proto:?} {open}: {e:?}");
            let hs = &report.handshake;
            assert_eq!(hs.full.count, e.sessions, "{proto:?} {open}: {hs:?}");
            assert_eq!(hs.resumed.count, conns - e.sessions, "{proto:?} {open}");
            if let Some(ol) = &report.open_loop {
                // Every arrival that took a request is one session (the
                // budget may stop the last ones before their first).
                assert!(ol.scheduled >= e.sessions, "{proto:?}: {ol:?} {e:?}");
            }
            if proto == Proto::H1 {
                assert_eq!(conns, 40, "{proto:?} {open}");
                continue;
            }
            // A page a connection (the last ones perhaps cut by -n).
            assert!(
                (e.pages..=e.pages + 4).contains(&conns),
                "{proto:?} {open}: {conns} connections, {e:?}"
            );
            let mut by_conn: std::collections::BTreeMap<(String, u64), Vec<&Row>> =
                Default::default();
            for r in &rows {
                let key = (r["client"].clone(), num(r, "conn"));
                by_conn.entry(key).or_default().push(r);
            }
            let mut multiplexed = 0;
            for (key, mut rs) in by_conn {
                rs.sort_by_key(|r| num(r, "req_on_conn"));
                let html = rs[0];
                let html_end = num(html, "t_start_us") + num(html, "total_us");
                for r in &rs[1..] {
                    assert!(
                        num(r, "t_start_us") >= html_end,
                        "{proto:?} {open} {key:?}: an inline object before its HTML ended"
                    );
                }
                multiplexed += usize::from(rs.len() > 1);
            }
            assert!(
                multiplexed > 0,
                "{proto:?} {open}: no page carried inline objects"
            );
        }
    }
}

/// A replay's arrivals are the log's: `--rate` is refused, naming the
/// replay's own pacing.
#[test]
fn open_loop_replay_is_refused_with_its_own_pacing_named() {
    for proto in Proto::ALL {
        let g = generated();
        let t = Target::parse("https://127.0.0.1:1").unwrap();
        let mut cfg = config(vec![t], &g);
        let (entries, _) = tlslab_workload::replay::parse::parse_str(
            "10.0.0.1 - - [01/Jan/2024:10:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n",
        );
        cfg.workload = Workload::Replay;
        cfg.replay = Some(tlslab_load::Replay {
            plan: std::sync::Arc::new(tlslab_workload::replay::ReplayPlan::new(
                &entries,
                tlslab_workload::replay::PathMode::Bytes,
            )),
            window: 4,
            pacing: tlslab_workload::replay::Pacing::AsFastAsPossible,
            skipped_lines: 0,
            filtered: Default::default(),
        });
        cfg.open_loop = Some(OpenLoop {
            rate: 20.0,
            arrivals: Arrivals::Constant,
            max_in_flight: 100,
        });
        proto.apply(&mut cfg);
        let e = tlslab_load::run(&cfg).unwrap_err();
        assert!(e.to_string().contains("--speed"), "{proto:?}: {e}");
    }
}

/// `--early-data` over every protocol: each resumed connection's first
/// request leaves in TLS 1.3 early data (QUIC 0-RTT over HTTP/3), and the
/// server accepts it on each, answering every request once.
#[test]
fn early_data_over_every_protocol() {
    for proto in Proto::ALL {
        let g = generated();
        let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
        tls.max_early_data = 16 * 1024;
        tls.tickets = false;
        let mut scfg = ServeConfig::new(loopback(), Content::Empty, tls);
        scfg.threads = 1;
        let h3 = (proto == Proto::H3).then(|| H3Settings::new(loopback()));
        let srv = Server::start_with_h3(scfg, h3).unwrap();
        let mut cfg = config(vec![proto.url(&srv, "/bytes/10")], &g);
        cfg.early_data = true;
        cfg.reuse = 1.0;
        cfg.requests = Some(5);
        proto.apply(&mut cfg);
        let (report, rows) = run_logged(&mut cfg);
        let (requests, _) = match proto {
            Proto::H3 => quic_counts(&srv, 5),
            _ => (0, 0),
        };
        let snap = srv.shutdown();
        assert_eq!(
            report.requests.succeeded, 5,
            "{proto:?}: {:?}",
            report.errors
        );
        let e = &report.handshake.early_data;
        assert_eq!((e.sent, e.accepted), (4, 4), "{proto:?}: {rows:?}");
        match proto {
            Proto::H3 => assert_eq!(requests, 5, "{snap:?}"),
            _ => {
                assert_eq!(snap.requests.https, 5, "{proto:?}: {snap:?}");
                assert_eq!(snap.early_data.connections, 4, "{proto:?}: {snap:?}");
            }
        }
    }
}

/// The user sessions of `overload` (`run_users`) over every protocol: each
/// request is one connection of the engine's seam (`Client::one_request`),
/// and the server saw exactly the requests, connections and handshakes
/// (full and resumed) the users counted. Bounded: 1 s of arrivals, and
/// sessions of 3 requests get at most 20 s to finish.
#[test]
fn user_sessions_over_every_protocol_make_a_connection_per_request() {
    for proto in Proto::ALL {
        let (srv, g) = proto.server(Content::Empty, None);
        let mut cfg = config(vec![proto.url(&srv, "/bytes/100")], &g);
        proto.apply(&mut cfg);
        proto.streams(&mut cfg, 2);
        let users = Users {
            rate: 10.0,
            requests: 3,
            max_users: 100,
            drain: Duration::from_secs(20),
            then: None,
            retry_backoff: Duration::from_millis(10),
        };
        cfg.duration = Some(Duration::from_secs(1));
        cfg.reuse = 1.0;
        cfg.think_time = ThinkTime::Const(Duration::from_millis(5));
        if proto != Proto::H1 {
            // One request per connection: streams beyond one are refused.
            let e = run_users(&cfg, users).unwrap_err();
            assert!(
                e.is_usage() && e.to_string().contains("-m"),
                "{proto:?}: {e}"
            );
        }
        proto.streams(&mut cfg, 1);
        let r = run_users(&cfg, users).unwrap();
        let want = r.responses;
        let quic = (proto == Proto::H3).then(|| quic_counts(&srv, want));
        let t = srv.shutdown().total();
        eprintln!("{proto:?}: {r:?}\nserver: {t:?}");
        assert!(r.users_arrived > 0, "{proto:?}");
        assert!(r.failures.is_empty(), "{proto:?}: {:?}", r.failures);
        assert_eq!(r.sessions_completed, r.users_arrived, "{proto:?}");
        assert_eq!(want, 3 * r.sessions_completed, "{proto:?}");
        assert_eq!(t.requests, want, "{proto:?}");
        if let Some((requests, established)) = quic {
            assert_eq!((requests, established), (want, want), "{proto:?}");
        } else {
            assert_eq!(t.connections, want, "{proto:?}: a connection per request");
        }
        assert_eq!(t.full_handshakes, r.handshakes_full, "{proto:?}");
        assert_eq!(t.resumed_handshakes, r.handshakes_resumed, "{proto:?}");
        // Every session's first request is full, and (reuse 100 %) its
        // later ones offer the session it stored.
        assert!(r.handshakes_full >= r.sessions_completed, "{proto:?}");
        assert!(r.handshakes_resumed > 0, "{proto:?}");
    }
}
