//! Replaying a trace in the shape of the classic public ones (host names
//! as clients, `-` byte counts, 304s, odd requests): `tlslab load
//! --workload replay` against `tlslab serve --access-log`, checked by the
//! server's own log.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::load::replay_on_serve;
use common::{assert_nums, expect_ok, num, run_tlslab, show, tempdir};

const LIMIT: Duration = Duration::from_secs(60);

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/workload/testdata/ita_style.log")
}

/// `/bytes/<N>` → how many times, from the server's log.
fn served_sizes(log: &str) -> (BTreeMap<u64, usize>, usize, usize) {
    let mut sizes = BTreeMap::new();
    let (mut full, mut resumed) = (0, 0);
    for line in log.lines() {
        let (_, rest) = line
            .split_once(" /bytes/")
            .unwrap_or_else(|| panic!("not a replayed request: {line}"));
        let size: u64 = rest.split(' ').next().unwrap().parse().unwrap();
        *sizes.entry(size).or_default() += 1;
        // `$ssl_protocol $ssl_session_reused …` follow the user agent.
        let tail: Vec<&str> = line.rsplit("\" ").next().unwrap().split(' ').collect();
        match tail[1] {
            "." => full += 1,
            "r" => resumed += 1,
            other => panic!("reuse mark {other:?} in {line}"),
        }
    }
    (sizes, full, resumed)
}

#[test]
fn host_name_trace_replays_with_a_host_name_excluded() {
    let dir = tempdir();
    let proxies = dir.path().join("proxies");
    std::fs::write(&proxies, "# AOL's proxy, by name\nWWW-B4.proxy.aol.com\n").unwrap();
    let args = ["--exclude-clients", proxies.to_str().unwrap(), "-c", "4"];
    let run = replay_on_serve(dir.path(), "1", &fixture(), &args);
    let (out, report, log) = (run.out, run.report, run.served_log);
    expect_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 2 of 21 lines are malformed: more than 1 %, so a warning with reasons.
    assert!(
        stderr.contains("skipped 2 of 21 lines")
            && stderr.contains("bad target: 1")
            && stderr.contains("truncated line: 1"),
        "{}",
        show(&out)
    );

    // 19 parsed; the proxy's 4 requests dropped: 15 requests from 6 clients.
    assert_nums(
        &report,
        &[
            ("replay/skipped_lines", 2.0),
            ("replay/excluded_ips", 1.0),
            ("replay/excluded_requests", 4.0),
            ("replay/log_requests", 15.0),
            ("replay/log_sessions", 6.0),
        ],
    );
    assert_eq!(num(&report, "requests/succeeded"), 15.0, "{}", show(&out));

    let (sizes, full, resumed) = served_sizes(&log);
    // The logged sizes of the kept lines (`-` is 0), each as often as logged.
    let want: BTreeMap<u64, usize> = [
        (4179, 1),
        (3985, 1),
        (6245, 1),
        // Lines 4 (304 -), 8 (304 0), 12 (404 -), 16 (304 -), 19 (HEAD 0)
        // and 21 (304 -, from `2001:0db8:0::17`).
        (0, 6),
        (40310, 1),
        (1713, 1),
        (64571, 1),
        (5866, 1),
        (1224, 1),
        (3380, 1),
    ]
    .into();
    assert_eq!(sizes, want, "{log}");
    // One full handshake per client (host names and addresses alike; the
    // two spellings of one IPv6 address and of one host name are one
    // client), the rest resumed.
    assert_eq!((full, resumed), (6, 9), "{log}");
}

#[test]
fn strict_makes_a_malformed_line_an_error() {
    let line = "load https://127.0.0.1:9 --workload replay --access-log LOG --strict --no-progress";
    let out = run_tlslab(
        &common::args_with(line, &[("LOG", fixture().to_str().unwrap())]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ita_style.log:13: missing byte count"),
        "{stderr}"
    );
}
