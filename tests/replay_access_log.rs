//! The replay invariants, checked against the SERVER's access log: `tlslab
//! load --workload replay` against `tlslab serve --access-log`, both the
//! built binary on 127.0.0.1 port 0.

mod common;

use std::collections::HashMap;

use common::load::replay_on_serve;
use common::{expect_ok, num, show, tempdir};

const IPS: usize = 6;
const LINES: usize = 60;
const WINDOW: usize = 4;

/// The replayed log: line `i` comes from IP `ip_of(i)` and logged
/// `size_of(i)` bytes. Every size is distinct, so the path the load engine
/// requests (`/bytes/<size>`) names the log line it replays: that is how the
/// server's log is matched back to the original (the engine sends the same
/// User-Agent for every browser, and the server sees every browser as
/// 127.0.0.1).
fn ip_of(i: usize) -> usize {
    // A fixed, uneven interleaving in which every IP appears (7 to 15
    // requests each; first appearances at lines 0, 1, 4, 6, 9 and 12).
    (i * i + 3 * i + i / 4) % IPS
}

fn size_of(i: usize) -> u64 {
    // Mixed sizes: tiny, small, medium and large, each made unique by `i`.
    const BASE: [u64; 4] = [0, 300, 4_000, 60_000];
    BASE[i % 4] + i as u64
}

/// One line of the server's log: the log-line index it replays, and the
/// `$ssl_protocol $ssl_session_reused … $connection_id $request_on_conn`
/// fields.
#[derive(Debug)]
struct Served {
    id: usize,
    status: u16,
    bytes: u64,
    protocol: String,
    reused: String,
    conn: u64,
    on_conn: u64,
}

fn parse(line: &str, by_size: &HashMap<u64, usize>) -> Served {
    let (_, rest) = line
        .split_once("] \"GET /bytes/")
        .unwrap_or_else(|| panic!("not a replayed request: {line}"));
    let (size, rest) = rest.split_once(' ').expect("request version");
    let (_, rest) = rest.split_once("\" ").expect("end of request");
    let (head, rest) = rest.split_once(" \"-\" \"").expect("referer");
    let (_ua, tail) = rest.split_once("\" ").expect("user agent");
    let head: Vec<&str> = head.split(' ').collect();
    let tail: Vec<&str> = tail.split(' ').collect();
    assert_eq!((head.len(), tail.len()), (2, 7), "{line}");
    let size: u64 = size.parse().expect("a size");
    Served {
        id: *by_size
            .get(&size)
            .unwrap_or_else(|| panic!("no log line of size {size}: {line}")),
        status: head[0].parse().expect("status"),
        bytes: head[1].parse().expect("bytes"),
        protocol: tail[0].to_string(),
        reused: tail[1].to_string(),
        conn: tail[3].parse().expect("connection id"),
        on_conn: tail[4].parse().expect("request on connection"),
    }
}

#[test]
fn replay_keeps_per_ip_order_window_and_resumption_as_the_server_saw_them() {
    let dir = tempdir();
    let input = dir.path().join("input.log");
    let mut text = String::new();
    for i in 0..LINES {
        text += &format!(
            "10.1.0.{} - - [01/Jan/2024:10:{:02}:{:02} +0000] \"GET /page{i} HTTP/1.1\" 200 {}\n",
            ip_of(i) + 1,
            i / 60,
            i % 60,
            size_of(i)
        );
    }
    std::fs::write(&input, text).unwrap();
    let by_size: HashMap<u64, usize> = (0..LINES).map(|i| (size_of(i), i)).collect();
    assert_eq!(by_size.len(), LINES, "sizes must be distinct");

    let args = ["--window", &WINDOW.to_string(), "-c", "8"];
    let run = replay_on_serve(dir.path(), "2", &input, &args);
    let stdout = expect_ok(&run.out);
    let (out, report, log) = (run.out, run.report, run.served_log);
    let served: Vec<Served> = log.lines().map(|l| parse(l, &by_size)).collect();

    // 1. Every request arrived, exactly once, completely.
    assert_eq!(served.len(), LINES, "{stdout}\n{log}");
    let mut pos = vec![usize::MAX; LINES];
    for (p, s) in served.iter().enumerate() {
        assert_eq!(pos[s.id], usize::MAX, "line {} served twice:\n{log}", s.id);
        pos[s.id] = p;
        assert_eq!((s.status, s.bytes), (200, size_of(s.id)), "{s:?}");
        // The engine replays each request on a connection of its own.
        assert_eq!(s.on_conn, 1, "{s:?}");
    }
    let mut conns: Vec<u64> = served.iter().map(|s| s.conn).collect();
    conns.sort_unstable();
    conns.dedup();
    assert_eq!(conns.len(), LINES);
    assert_eq!(
        num(&report, "requests/succeeded"),
        LINES as f64,
        "{}",
        show(&out)
    );

    // 2. Per IP, the server completed the requests in the log's order.
    for ip in 0..IPS {
        let order: Vec<usize> = served
            .iter()
            .filter(|s| ip_of(s.id) == ip)
            .map(|s| s.id)
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert!(!order.is_empty());
        assert_eq!(order, sorted, "IP {ip} out of order:\n{log}");
    }

    // 3. The window. The scheduler issues request `j` only when j − LS ≤ W,
    // i.e. once every request with index ≤ j − W has completed at the client.
    // A request's server line is queued when its last body frame is handed
    // to the connection, which precedes the client reading the end of it;
    // and `j`'s server line is queued only after `j` was issued. So in the
    // server log every request k ≤ j − W must come before j: checkable from
    // the server's completion order alone, with no clocks compared.
    for j in WINDOW..LINES {
        let latest_required = (0..=j - WINDOW).map(|k| pos[k]).max().unwrap();
        assert!(
            latest_required < pos[j],
            "window {WINDOW} broken: request {j} (served at {}) before some request ≤ {} (served at {latest_required}):\n{log}",
            pos[j],
            j - WINDOW
        );
    }

    // 4. Resumption as implied: each IP's first request a full handshake,
    // every later one resumed (one TLS session per IP).
    let mut seen = [false; IPS];
    for i in 0..LINES {
        let s = &served[pos[i]];
        assert_ne!(s.protocol, "-", "{s:?}");
        let want = if seen[ip_of(i)] { "r" } else { "." };
        seen[ip_of(i)] = true;
        assert_eq!(s.reused, want, "line {i} (IP {}): {s:?}", ip_of(i));
    }
    let resumed = served.iter().filter(|s| s.reused == "r").count();
    assert_eq!(resumed, LINES - IPS);
    let implied = num(&report, "replay/implied_resumption");
    assert!(
        (implied - (LINES - IPS) as f64 / LINES as f64).abs() < 1e-9,
        "{implied}"
    );
    assert!((resumed as f64 / LINES as f64 - implied).abs() < 1e-9);
}
