//! End-to-end: `tlslab load --h2` against `tlslab serve` (which selects h2
//! by ALPN), checked against the server's metrics and access log; and the
//! usage errors of the flags that do not combine with `--h2`.
//!
//! Every server binds 127.0.0.1 port 0; every load is bounded by `-n` and
//! every child by a wall-clock limit.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::load::{H2_TWO_CLIENTS_TEN_STREAMS, load_ok};
use common::nginx;
use common::{Serve, assert_nums, free_port, num, run_tlslab, show, tempdir};

const LIMIT: Duration = Duration::from_secs(60);

/// The access log's lines once it holds `n` (≤ 3 s: serve flushes it
/// within 100 ms).
fn access_log(path: &Path, n: usize) -> Vec<String> {
    let read = || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(String::from).collect::<Vec<_>>()
    };
    common::poll(Duration::from_secs(3), read, |l| l.len() >= n)
}

#[test]
fn load_h2_two_clients_ten_streams_two_connections_server_logs_http2() {
    let dir = tempdir();
    let log = dir.path().join("access.log");
    let serve = Serve::start(&["--access-log", log.to_str().expect("utf-8")]);
    let json = dir.path().join("h2.json");
    let csv = dir.path().join("h2.csv");
    let url = serve.url("/bytes/512");
    let ca = serve.ca_str();
    let csv_s = csv.to_str().expect("utf-8");
    let mut args = vec![url.as_str(), "--cacert", ca];
    args.extend(H2_TWO_CLIENTS_TEN_STREAMS);
    args.extend(["--requests-per-conn", "0", "--log", csv_s]);
    let (stdout, r) = load_ok(&json, &args, "h2", LIMIT);
    assert!(
        stdout.contains("http: h2 (up to 10 streams per connection); 2 connection(s)"),
        "{stdout}"
    );
    assert_nums(
        &r,
        &[
            ("requests/succeeded", 200.0),
            ("http/connections", 2.0),
            ("http/max_concurrent_streams", 10.0),
            ("http/handshakes_per_request", 0.01),
        ],
    );
    assert_eq!(r["http"]["protocol"], "h2", "{r:#}");
    assert!(num(&r, "client_cpu/per_request_us") > 0.0, "{r:#}");
    let rows = std::fs::read_to_string(&csv).expect("the request log");
    assert_eq!(rows.lines().count(), 201, "a header and one row per stream");

    let m = serve.metrics();
    assert_eq!(
        m.count("tlslab_connections_total", &[("listener", "https")]),
        2.0
    );
    assert_eq!(
        m.count("tlslab_requests_total", &[("listener", "https")]),
        200.0
    );
    let lines = access_log(&log, 200);
    assert_eq!(lines.len(), 200, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"GET /bytes/512 HTTP/2.0\" 200 512 ")),
        "{:?}",
        &lines[..2]
    );
    // `$connection_id` is the fourth field from the end.
    let conns: BTreeSet<&str> = lines.iter().filter_map(|l| l.rsplit(' ').nth(3)).collect();
    assert_eq!(conns.len(), 2, "{conns:?}");
}

#[test]
fn load_h2_usage_errors_say_what_to_drop() {
    let url = format!("https://127.0.0.1:{}/", free_port());
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("--max-concurrent-streams", vec!["-m", "0"]),
        ("choose one", vec!["--h3"]),
    ];
    for (why, extra) in cases {
        let mut args = vec!["load", &url, "--insecure", "--h2", "-n", "1"];
        args.extend(extra);
        common::assert_usage_error(&args, why, LIMIT);
    }
    // -m needs --h2.
    let out = run_tlslab(&["load", &url, "--insecure", "-m", "4", "-n", "1"], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn helper_writes_the_http2_directive_this_nginx_version_wants() {
    assert_eq!(
        nginx::parse_version("nginx version: nginx/1.22.1\n"),
        Some((1, 22, 1))
    );
    assert_eq!(
        nginx::parse_version("nginx version: nginx/1.25.1 (Ubuntu)"),
        Some((1, 25, 1))
    );
    assert_eq!(nginx::parse_version("command not found"), None);
    let dir = tempdir();
    let c = nginx::Config {
        prefix: dir.path().to_path_buf(),
        port: 4433,
        chain: dir.path().join("chain.pem"),
        key: dir.path().join("key.pem"),
        tickets: true,
    };
    let text = c.render_h2((1, 22, 1));
    assert!(text.contains("listen 127.0.0.1:4433 ssl http2;"), "{text}");
    for v in [(1, 25, 1), (1, 26, 0)] {
        let new = c.render_h2(v);
        assert!(new.contains("listen 127.0.0.1:4433 ssl;") && new.contains("http2 on;"));
    }
    assert!(!c.render_h2((1, 25, 0)).contains("http2 on"));
    assert!(text.contains(nginx::H2_FORMAT), "{text}");
    assert!(
        text.contains(&format!("access_log {} tlslab_h2;", c.h2_log().display())),
        "{text}"
    );
}
