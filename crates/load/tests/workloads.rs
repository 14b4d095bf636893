//! Workload models, client behaviours and the open loop, against an
//! in-process tlslab server on 127.0.0.1.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tlslab_crypto::pki::Generated;
use tlslab_load::{Arrivals, LoadConfig, OpenLoop, ThinkTime, Workload};
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};
use tlslab_stats::LoadReport;

fn server(content: Content, threads: usize) -> (Server, Generated) {
    let g = generated();
    let tls = TlsSettings::new(CertSource::Generated(g.clone()));
    let mut cfg = ServeConfig::new(loopback(), content, tls);
    cfg.threads = threads;
    (Server::start(cfg).unwrap(), g)
}

/// Each client's request paths (the part after the origin), in order.
fn paths_by_client(rows: &[Row]) -> BTreeMap<u64, Vec<String>> {
    let mut by: BTreeMap<u64, Vec<(u64, u64, String)>> = BTreeMap::new();
    for r in rows {
        let path = r["target"]
            .split_once("/specweb96/")
            .map_or_else(|| r["target"].clone(), |(_, p)| p.to_string());
        by.entry(num(r, "client"))
            .or_default()
            .push((num(r, "conn"), num(r, "req_on_conn"), path));
    }
    by.into_iter()
        .map(|(c, mut v)| {
            v.sort();
            (c, v.into_iter().map(|(_, _, p)| p).collect())
        })
        .collect()
}

/// The handshake kinds of client 0, in connection order: N or R.
fn kinds(rows: &[Row]) -> String {
    let mut v: Vec<(u64, char)> = rows
        .iter()
        .filter(|r| r["kind"] != "none")
        .map(|r| {
            (
                num(r, "conn"),
                if r["kind"] == "resumed" { 'R' } else { 'N' },
            )
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, c)| c).collect()
}

#[test]
fn specweb96_paths_follow_the_mix_and_the_seed() {
    let (srv, g) = server(Content::Specweb96, 1);
    let run = |seed: u64| {
        let mut cfg = config(vec![https(&srv, "")], &g);
        cfg.workload = Workload::Specweb96;
        cfg.seed = seed;
        cfg.clients = 2;
        cfg.requests_per_conn = 0;
        cfg.requests = Some(300);
        run_logged(&mut cfg)
    };
    let (report, rows) = run(7);
    assert_eq!(report.requests.succeeded, 300, "{:?}", report.errors);
    assert_eq!(report.config.workload, "specweb96");
    assert_eq!(report.config.seed, 7);
    assert_eq!(report.config.targets.len(), 36);
    let sizes: BTreeMap<String, usize> = tlslab_workload::specweb96::files()
        .into_iter()
        .map(|f| (f.path, f.size))
        .collect();
    let mut class = [0u32; 4];
    for r in &rows {
        let i = r["target"].find("/specweb96/").expect("a SPECweb96 path");
        let path = r["target"][i..].to_string();
        // The body is the file's size: the server holds the same set.
        assert_eq!(num(r, "body_bytes") as usize, sizes[&path], "{path}");
        let c: usize = path["/specweb96/class".len()..][..1].parse().unwrap();
        class[c] += 1;
    }
    // 35/50/14/1 %: class 1 leads, class 3 is rare.
    assert!(
        class[1] > class[0] && class[0] > class[2] && class[2] > class[3],
        "{class:?}"
    );

    // The same seed gives each client the same paths; another seed does not.
    let a = paths_by_client(&rows);
    let (_, rows_again) = run(7);
    let (_, rows_other) = run(8);
    let b = paths_by_client(&rows_again);
    let c = paths_by_client(&rows_other);
    // The 300 requests are shared by whichever client is free first, so a
    // busy machine can leave one client with few of them (CI once gave one
    // 21). Compare the prefix every run has: 16 draws from 36 paths collide
    // by chance with odds far below 1e-12.
    let n = [&a, &b, &c]
        .iter()
        .flat_map(|m| [0, 1].map(|k| m.get(&k).map_or(0, Vec::len)))
        .min()
        .unwrap()
        .min(100);
    assert!(n >= 16, "a client made only {n} requests of 300");
    for client in [0, 1] {
        assert_eq!(a[&client][..n], b[&client][..n], "client {client}");
        assert_ne!(a[&client][..n], c[&client][..n], "client {client}");
    }
    // Clients draw different streams.
    assert_ne!(a[&0][..n], a[&1][..n]);
}

#[test]
fn specweb96_needs_one_base_url() {
    let (srv, g) = server(Content::Specweb96, 1);
    let mut cfg = config(vec![https(&srv, "/specweb96/class1_1")], &g);
    cfg.workload = Workload::Specweb96;
    cfg.requests = Some(1);
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("base URL"), "{e}");
}

#[test]
fn think_time_paces_clients_and_is_not_latency() {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/health")], &g);
    cfg.think_time = "const:60ms".parse::<ThinkTime>().unwrap();
    cfg.requests = Some(6);
    let t = Instant::now();
    let (report, rows) = run_logged(&mut cfg);
    let took = t.elapsed();
    assert_eq!(report.requests.succeeded, 6, "{:?}", report.errors);
    // Five pauses between six requests.
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(report.config.think_time, "const:60ms");
    let p50 = report.latency.total.p50_us.unwrap();
    assert!(p50 < 60_000, "think time leaked into latency: {p50} µs");
    // Consecutive starts are at least one think time apart.
    let mut starts: Vec<u64> = rows.iter().map(|r| num(r, "t_start_us")).collect();
    starts.sort();
    for w in starts.windows(2) {
        assert!(w[1] - w[0] >= 60_000, "{starts:?}");
    }
}

/// A request that always times out: 100 ms of server CPU against a 40 ms
/// timeout. The think time lets the server finish burning before the next
/// handshake, so (on a machine that is not overloaded) only the request
/// itself fails.
fn failing(retry: bool) -> (LoadReport, Vec<Row>) {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/dyn?work=100000")], &g);
    cfg.versions = vec![tlslab_crypto::provider::Version::Tls13];
    cfg.timeout = Duration::from_millis(40);
    cfg.think_time = ThinkTime::Const(Duration::from_millis(120));
    cfg.reuse = 1.0;
    cfg.retry_on_failure = retry;
    cfg.requests = Some(6);
    run_logged(&mut cfg)
}

#[test]
fn retry_on_failure_keeps_the_client_and_its_sessions() {
    let (with, rows) = failing(true);
    assert_eq!(with.requests.attempted, 6);
    assert_eq!(with.errors.get("timeout"), Some(&6), "{:?}", with.errors);
    assert_eq!(with.requests.retries, 5);
    assert!(with.config.retry_on_failure);
    // A handshake may time out on a busy machine; those that completed
    // are one full one, then resumptions.
    let k = kinds(&rows);
    assert!(
        k.len() >= 3 && k.starts_with('N') && !k[1..].contains('N'),
        "{k}"
    );
    let retried: Vec<u64> = rows.iter().map(|r| num(r, "retry")).collect();
    assert_eq!(retried.iter().sum::<u64>(), 5);

    // Without it each failure makes a new client: nothing to resume.
    let (without, rows) = failing(false);
    assert_eq!(without.errors.get("timeout"), Some(&6));
    assert_eq!(without.requests.retries, 0);
    let k = kinds(&rows);
    assert!(k.len() >= 3 && !k.contains('R'), "{k}");
}

fn open(rate: f64, arrivals: Arrivals, max_in_flight: usize) -> Option<OpenLoop> {
    Some(OpenLoop {
        rate,
        arrivals,
        max_in_flight,
    })
}

#[test]
fn open_loop_arrivals_are_deterministic_and_counted() {
    let (srv, g) = server(Content::Empty, 1);
    let run = |seed: u64, arrivals| {
        let mut cfg = config(vec![https(&srv, "/health")], &g);
        cfg.open_loop = open(200.0, arrivals, 10_000);
        cfg.seed = seed;
        cfg.clients = 4;
        cfg.requests = Some(40);
        run_logged(&mut cfg)
    };
    let starts = |rows: &[Row]| {
        let mut s: Vec<u64> = rows.iter().map(|r| num(r, "t_start_us")).collect();
        s.sort();
        s
    };
    let (report, rows) = run(3, Arrivals::Poisson);
    let ol = report.open_loop.clone().expect("open-loop report");
    assert_eq!(ol.scheduled, 40);
    assert_eq!(ol.arrivals, "poisson");
    assert_eq!(ol.dropped, 0);
    assert!(ol.late <= ol.scheduled);
    assert_eq!(report.requests.attempted, 40);
    assert_eq!(report.requests.succeeded, 40, "{:?}", report.errors);
    // Intended start times come from the seed alone.
    let (_, again) = run(3, Arrivals::Poisson);
    let (_, other) = run(4, Arrivals::Poisson);
    assert_eq!(starts(&rows), starts(&again));
    assert_ne!(starts(&rows), starts(&other));
    // Constant arrivals at 200/s: exactly 5 ms apart.
    let (_, constant) = run(3, Arrivals::Constant);
    let s = starts(&constant);
    for w in s.windows(2) {
        assert!((4_998..=5_002).contains(&(w[1] - w[0])), "{s:?}");
    }
    // The identities of the pool are used in turn.
    let clients: std::collections::BTreeSet<u64> = rows.iter().map(|r| num(r, "client")).collect();
    assert_eq!(clients.len(), 4);
}

/// Every scheduled arrival was attempted, left unfinished or dropped.
fn assert_arrivals_accounted(report: &LoadReport) {
    let ol = report.open_loop.as_ref().unwrap();
    assert_eq!(
        report.requests.attempted + report.requests.unfinished + ol.dropped,
        ol.scheduled,
        "{:?} {ol:?}",
        report.requests
    );
}

#[test]
fn open_loop_above_capacity_queues_and_latency_counts_from_intended_start() {
    // One server thread, 20 ms of CPU per request: about 50 req/s at best.
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/dyn?work=20000")], &g);
    cfg.open_loop = open(100.0, Arrivals::Constant, 10_000);
    cfg.clients = 2;
    cfg.duration = Some(Duration::from_millis(1500));
    cfg.timeout = Duration::from_secs(10);
    let report = tlslab_load::run(&cfg).unwrap();
    let ol = report.open_loop.clone().unwrap();
    assert!((140..=151).contains(&ol.scheduled), "{ol:?}");
    // The client count does not cap concurrency: arrivals pile up on the
    // server and wait, and their wait is latency.
    let p50 = report.latency.total.p50_us.unwrap();
    assert!(p50 > 100_000, "p50 total {p50} µs: queueing not measured");
    assert!(report.requests.unfinished > 2, "{:?}", report.requests);
    assert!(report.requests.completed > 20, "{:?}", report.requests);
    assert_arrivals_accounted(&report);
}

#[test]
fn open_loop_drops_arrivals_beyond_max_in_flight() {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/dyn?work=20000")], &g);
    cfg.open_loop = open(200.0, Arrivals::Constant, 3);
    cfg.duration = Some(Duration::from_millis(500));
    let report = tlslab_load::run(&cfg).unwrap();
    let ol = report.open_loop.clone().unwrap();
    assert!(ol.dropped > 30, "{ol:?}");
    assert_arrivals_accounted(&report);
}

#[test]
fn open_loop_rejects_closed_loop_behaviours() {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/health")], &g);
    cfg.open_loop = open(10.0, Arrivals::Poisson, 10);
    cfg.retry_on_failure = true;
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("closed-loop"), "{e}");
    cfg.retry_on_failure = false;
    cfg.open_loop = open(0.0, Arrivals::Poisson, 10);
    let e = tlslab_load::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("--rate"), "{e}");
}

fn ecommerce_model(new_percent: f64, max_connections: usize) -> tlslab_workload::ecommerce::Config {
    tlslab_workload::ecommerce::Config {
        new_customer_percent: new_percent,
        think_time: ThinkTime::Zero,
        revisit_probability: 0.0,
        max_connections,
        ..Default::default()
    }
}

#[test]
fn ecommerce_sessions_make_one_full_handshake_each_and_fetch_pages_in_order() {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "")], &g);
    cfg.workload = Workload::Ecommerce;
    cfg.ecommerce = Some(ecommerce_model(50.0, 1));
    cfg.clients = 2;
    cfg.requests = Some(120);
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 120, "{:?}", report.errors);
    let e = report.ecommerce.clone().expect("e-commerce report");
    assert!(e.sessions >= 8, "{e:?}");
    assert_eq!(e.new_customers + e.returning_customers, e.sessions);
    assert!(e.new_customers > 0 && e.returning_customers > 0, "{e:?}");
    // One full handshake per purchase session, every other one resumed.
    assert_eq!(
        report.handshake.full.count, e.sessions,
        "{:?}",
        report.handshake
    );
    assert_eq!(report.handshake.resumed.count, 120 - e.sessions);

    // With one connection per browser the requests of client 0 follow the
    // flow exactly: a new customer's session is 17 requests, a returning
    // one's 10, and each starts with the sign-in page's HTML (11264 B).
    let mut c0: Vec<&Row> = rows.iter().filter(|r| r["client"] == "0").collect();
    c0.sort_by_key(|r| num(r, "conn"));
    let sizes: Vec<u64> = c0.iter().map(|r| num(r, "body_bytes")).collect();
    let mut i = 0;
    let mut sessions = 0;
    while i < sizes.len() {
        assert_eq!(
            sizes[i], 11_264,
            "session {sessions} at request {i}: {sizes:?}"
        );
        assert_eq!(c0[i]["kind"], "full", "{i}");
        // Sign-in is followed by register (new) or shipping (returning).
        let len = match sizes.get(i + 3) {
            Some(14_336) => 17,
            Some(12_288) => 10,
            None => break,
            Some(other) => panic!("unexpected page after sign-in: {other} B"),
        };
        for r in c0.iter().skip(i + 1).take(len - 1) {
            assert_eq!(r["kind"], "resumed", "{r:?}");
        }
        i += len;
        sessions += 1;
    }
    assert!(sessions >= 3, "{sizes:?}");
}

#[test]
fn ecommerce_fetches_inline_objects_in_parallel_after_the_html() {
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "")], &g);
    cfg.workload = Workload::Ecommerce;
    cfg.ecommerce = Some(ecommerce_model(0.0, 4));
    cfg.requests = Some(40);
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 40, "{:?}", report.errors);
    // Sign-in: HTML (11264 B), then 3072 B and 1024 B together. The inline
    // objects start after the HTML has arrived.
    let mut rs: Vec<&Row> = rows.iter().collect();
    rs.sort_by_key(|r| num(r, "conn"));
    let html = rs[0];
    assert_eq!(num(html, "body_bytes"), 11_264);
    let html_end = num(html, "t_start_us") + num(html, "total_us");
    let inline: Vec<&&Row> = rs[1..3].iter().collect();
    let mut sizes: Vec<u64> = inline.iter().map(|r| num(r, "body_bytes")).collect();
    sizes.sort();
    assert_eq!(sizes, [1_024, 3_072]);
    for r in &inline {
        assert!(num(r, "t_start_us") >= html_end, "{r:?} before {html_end}");
    }
    // ... and overlap each other: two connections at once.
    let (a, b) = (inline[0], inline[1]);
    let (a0, b0) = (num(a, "t_start_us"), num(b, "t_start_us"));
    let (first, second) = if a0 <= b0 { (a, b0) } else { (b, a0) };
    assert!(
        second < num(first, "t_start_us") + num(first, "total_us"),
        "inline objects did not overlap: {inline:?}"
    );
}

/// An access log: 4 IPs, 24 requests in 3 s of log time, each with a
/// distinct size so rows can be matched to log lines (size = 1000 + line).
fn access_log() -> (String, Vec<(String, u64)>) {
    let mut text = String::new();
    let mut lines = Vec::new();
    for i in 0..24u64 {
        let ip = format!("10.0.0.{}", [1, 2, 1, 3, 4, 2][i as usize % 6]);
        let size = 1000 + i;
        text += &format!(
            "{ip} - - [01/Jan/2024:10:00:{:02} +0000] \"GET /page{i}.html HTTP/1.1\" 200 {size} \"-\" \"test\"\n",
            i / 8
        );
        lines.push((ip, size));
    }
    text += "this line is not a log line\n";
    (text, lines)
}

fn replay_config(
    srv: &Server,
    g: &Generated,
    window: usize,
    pacing: tlslab_workload::replay::Pacing,
) -> LoadConfig {
    use tlslab_workload::replay::{PathMode, ReplayPlan, filter, parse};
    let (text, _) = access_log();
    let (entries, parsed) = parse::parse_str(&text);
    let (entries, filtered) = filter::filter(entries, &Default::default(), None);
    let mut cfg = config(vec![https(srv, "")], g);
    cfg.workload = Workload::Replay;
    cfg.duration = None;
    cfg.clients = 3;
    cfg.replay = Some(tlslab_load::Replay {
        plan: std::sync::Arc::new(ReplayPlan::new(&entries, PathMode::Bytes)),
        window,
        pacing,
        skipped_lines: parsed.skipped_count,
        filtered,
    });
    cfg
}

#[test]
fn replay_keeps_per_ip_order_and_resumes_as_the_log_implies() {
    use tlslab_workload::replay::Pacing;
    let (srv, g) = server(Content::Empty, 1);
    let (_, lines) = access_log();
    let mut cfg = replay_config(&srv, &g, 10_000, Pacing::AsFastAsPossible);
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 24, "{:?}", report.errors);
    let r = report.replay.clone().expect("replay report");
    assert_eq!((r.log_requests, r.log_sessions), (24, 4));
    assert_eq!((r.requests_replayed, r.sessions_replayed), (24, 4));
    assert_eq!(r.skipped_lines, 1);
    assert!((r.implied_resumption - 20.0 / 24.0).abs() < 1e-9);
    // One full handshake per IP: achieved = implied.
    assert_eq!(report.handshake.full.count, 4);
    assert!(
        (r.achieved_resumption - r.implied_resumption).abs() < 1e-9,
        "{r:?}"
    );
    // Each IP's requests went out in log order, one after another.
    let mut by_ip: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (ip, size) in &lines {
        by_ip.entry(ip.as_str()).or_default().push(*size);
    }
    let mut by_size: BTreeMap<u64, &Row> = BTreeMap::new();
    for row in &rows {
        by_size.insert(num(row, "body_bytes"), row);
    }
    for (ip, sizes) in &by_ip {
        let client = &by_size[&sizes[0]]["client"];
        for w in sizes.windows(2) {
            let (a, b) = (by_size[&w[0]], by_size[&w[1]]);
            assert_eq!(&b["client"], client, "{ip}: one browser per IP");
            assert!(
                num(b, "t_start_us") >= num(a, "t_start_us") + num(a, "total_us"),
                "{ip}: {} started before {} ended",
                w[1],
                w[0]
            );
        }
    }
}

#[test]
fn replay_window_one_is_log_order_and_speed_follows_the_log_clock() {
    use tlslab_workload::replay::Pacing;
    let (srv, g) = server(Content::Empty, 1);
    let (_, lines) = access_log();
    let mut cfg = replay_config(&srv, &g, 1, Pacing::AsFastAsPossible);
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 24, "{:?}", report.errors);
    let mut rs: Vec<&Row> = rows.iter().collect();
    rs.sort_by_key(|r| num(r, "t_start_us"));
    let sizes: Vec<u64> = rs.iter().map(|r| num(r, "body_bytes")).collect();
    let want: Vec<u64> = lines.iter().map(|(_, s)| *s).collect();
    assert_eq!(sizes, want);

    // The log spans 2 s (seconds 0, 1, 2); at speed 10 the last
    // requests are due after 0.2 s.
    let mut cfg = replay_config(&srv, &g, 10_000, Pacing::Timed { speed: 10.0 });
    let (report, rows) = run_logged(&mut cfg);
    assert_eq!(report.requests.succeeded, 24);
    assert_eq!(report.replay.as_ref().unwrap().speed, Some(10.0));
    let last = rows.iter().map(|r| num(r, "t_start_us")).max().unwrap();
    assert!(last >= 200_000, "{last}");
    // Nothing starts before it is due (second 1 at 0.1 s, second 2 at
    // 0.2 s). How soon after is the machine's speed: three workers make
    // the first second's eight requests one full handshake each, and a
    // loaded CI machine once took 113 ms for them. At speed 1 the log's
    // seconds would be 1 s apart: the first second's requests all start
    // well before that.
    let starts = |lo: u64, hi: u64| -> Vec<u64> {
        rows.iter()
            .filter(|r| (lo..hi).contains(&num(r, "body_bytes")))
            .map(|r| num(r, "t_start_us"))
            .collect()
    };
    let (first, second, third) = (starts(1000, 1008), starts(1008, 1016), starts(1016, 1024));
    assert!(first.iter().all(|&t| t < 1_000_000), "{first:?}");
    assert!(second.iter().all(|&t| t >= 100_000), "{second:?}");
    assert!(third.iter().all(|&t| t >= 200_000), "{third:?}");
}

#[test]
fn sweep_stops_at_the_knee_of_a_saturated_server() {
    // One server thread, 5 ms of CPU per request: at most 200 req/s, which
    // two or four clients already reach.
    let (srv, g) = server(Content::Empty, 1);
    let mut cfg = config(vec![https(&srv, "/dyn?work=5000")], &g);
    cfg.clients = 1;
    cfg.duration = Some(Duration::from_millis(400));
    let plan = tlslab_load::SweepPlan {
        over: tlslab_load::SweepOver::Clients,
        factor: 2.0,
        max_steps: 7,
        knee_gain: 0.10,
    };
    let mut seen = 0;
    let s = tlslab_load::sweep_series(&cfg, &plan, |_| seen += 1).unwrap();
    assert_eq!(seen, s.steps.len());
    assert_eq!(s.stopped, "knee", "{s:?}");
    let knee = s.knee.expect("a knee");
    assert_eq!(
        knee + 2,
        s.steps.len(),
        "the series stops one step past the knee"
    );
    assert!(s.steps.len() < 7, "{s:?}");
    let clients: Vec<usize> = s.steps.iter().map(|st| st.clients).collect();
    assert_eq!(
        clients[..3.min(clients.len())],
        [1, 2, 4][..3.min(clients.len())]
    );
    let (first, last) = (&s.steps[0], &s.steps[s.steps.len() - 1]);
    assert!(
        last.total_p50_us.unwrap() > first.total_p50_us.unwrap(),
        "queueing raises latency: {s:?}"
    );
    let tput: Vec<f64> = s.steps.iter().map(|st| st.requests_per_s).collect();
    assert!(
        tlslab_load::is_knee(tput[knee], tput[knee + 1], 0.10),
        "{tput:?}"
    );
}
