//! Seeing inside a run with the field's own tools (issue 35): key logs
//! (`--keylog`, `SSLKEYLOGFILE`) and HdrHistogram interval logs
//! (`--hdr-log`) that python's `hdrh` reads. The test that needs python is
//! `#[ignore]` and run by `.ci/run` with `--ignored`. tshark decrypting a
//! capture that `path --pcap` took with `load`'s key log is in
//! tests/path_pcap.rs (it needs root).

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::load::{load_report, load_run};
use common::tshark::{TLS13, labels};
use common::{Serve, expect_ok, num, require, run, show, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

// Before issue 35 `load`, `serve` and `probe` wrote no key log: --keylog
// was an unknown flag and SSLKEYLOGFILE was ignored.
#[test]
fn keylog_of_load_and_serve_holds_every_tcp_and_quic_traffic_secret() {
    let dir = tempdir();
    let server_log = dir.path().join("server.keys");
    let s = Serve::start(&["--h3", "--keylog", server_log.to_str().unwrap()]);
    assert!(
        s.proc
            .stderr_shows("WARNING: TLS key log", Duration::from_secs(5)),
        "serve --keylog warns: {}",
        s.proc.stderr_text()
    );
    for (name, extra) in [("tcp", &[][..]), ("quic", &["--h3"][..])] {
        let client_log = dir.path().join(format!("{name}.keys"));
        let json = dir.path().join(format!("{name}.json"));
        let url = s.url("/bytes/100");
        let mut args = vec![
            url.as_str(),
            "--cacert",
            s.ca_str(),
            "--tls",
            "1.3",
            "-c",
            "1",
            "-n",
            "3",
            "--no-progress",
            "--keylog",
            client_log.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (out, r) = load_run(&json, &args, LIMIT);
        expect_ok(&out);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("WARNING: TLS key log"),
            "{name}: no warning: {}",
            show(&out)
        );
        assert_eq!(num(&r.unwrap(), "requests/succeeded"), 3.0);
        assert_eq!(mode(&client_log), 0o600, "{name}: the key log is private");
        let (labels, randoms) = labels(&client_log);
        for l in TLS13 {
            assert!(labels.contains(l), "{name}: no {l} in {labels:?}");
        }
        assert_eq!(randoms.len(), 3, "{name}: one client random per connection");
    }
    // The server logged the same connections (both transports). It is
    // still running: its lines reach the file within the key log's flush
    // interval (200 ms).
    let (labels, randoms) = common::poll(
        Duration::from_secs(2),
        || labels(&server_log),
        |(l, r)| r.len() >= 6 && TLS13.iter().all(|x| l.contains(*x)),
    );
    for l in TLS13 {
        assert!(labels.contains(l), "server: no {l} in {labels:?}");
    }
    assert_eq!(randoms.len(), 6, "server: 3 TCP + 3 QUIC connections");
    assert_eq!(mode(&server_log), 0o600);
}

// SSLKEYLOGFILE was ignored before issue 35; curl honours it.
#[test]
fn sslkeylogfile_is_honoured_when_no_keylog_flag_is_given() {
    let dir = tempdir();
    let s = Serve::start(&[]);
    let keys = dir.path().join("env.keys");
    let json = dir.path().join("r.json");
    let url = s.url("/bytes/10");
    let mut cmd = common::tlslab([
        "load",
        &url,
        "--cacert",
        s.ca_str(),
        "--tls",
        "1.2",
        "-c",
        "1",
        "-n",
        "2",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ]);
    cmd.env("SSLKEYLOGFILE", &keys);
    let out = run(cmd, LIMIT);
    expect_ok(&out);
    let (labels, randoms) = labels(&keys);
    assert_eq!(
        labels,
        BTreeSet::from(["CLIENT_RANDOM".to_string()]),
        "TLS 1.2 logs its master secret"
    );
    assert_eq!(randoms.len(), 2);
}

/// Decodes an interval log with python's `hdrh`: per tag, the count and
/// the p50 and p99 of the intervals added together.
const HDRH_SCRIPT: &str = r#"
import json, math, sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
out = {}
for tag in ("total", "handshake", "ttfb"):
    acc = HdrHistogram(1, 3600000000, 3)
    reader = HistogramLogReader(sys.argv[1], acc)
    n = 0
    while True:
        h = reader.get_next_interval_histogram()
        if h is None:
            break
        if h.get_tag() == tag:
            acc.add(h)
            n += 1
    total = acc.get_total_count()
    # The report's rank (Rust hdrhistogram's): ceil(q * N); python's
    # get_value_at_percentile rounds q * N to the nearest rank, so ask it
    # for the percentile whose rounding gives that rank.
    at = lambda q: acc.get_value_at_percentile(100 * (max(1, math.ceil(q * total)) - 0.4) / total)
    out[tag] = {"intervals": n, "count": total, "p50": at(0.5), "p99": at(0.99)}
print(json.dumps(out))
"#;

/// Whether `a` and `b` are within one bucket of a 3-significant-digit
/// histogram (a relative 0.1 %, at least 1 µs).
fn one_bucket(a: f64, b: f64) -> bool {
    (a - b).abs() <= (a.max(b) * 0.001).max(1.0)
}

// Before issue 35 load wrote no interval log: --hdr-log was unknown.
#[test]
#[ignore = "needs python3 with hdrh (.ci/run)"]
fn hdr_log_decoded_by_python_hdrh_gives_the_reports_percentiles() {
    if !require("python3") {
        return;
    }
    let dir = tempdir();
    let s = Serve::start(&[]);
    let hlog = dir.path().join("run.hlog");
    let json = dir.path().join("r.json");
    let url = s.url("/bytes/1000");
    let r = load_report(
        &json,
        &[
            &url,
            "--cacert",
            s.ca_str(),
            "-c",
            "2",
            "-d",
            "3s",
            "--no-progress",
            "--hdr-log",
            hlog.to_str().unwrap(),
            "--hdr-interval",
            "500ms",
        ],
        LIMIT,
    );
    let text = std::fs::read_to_string(&hlog).unwrap();
    assert!(text.contains("#[StartTime: "), "{text}");
    assert!(text.contains("#[BaseTime: "), "{text}");
    assert!(text.contains("Tag=total,"), "{text}");
    let out = Command::new("python3")
        .args(["-c", HDRH_SCRIPT, hlog.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "python hdrh: {}", show(&out));
    let py: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = &py["total"];
    assert!(
        num(total, "intervals") >= 4.0,
        "3 s at 500 ms gives several intervals: {py}"
    );
    assert_eq!(
        num(total, "count"),
        num(&r, "requests/completed"),
        "{py} vs {r:#}"
    );
    for (q, key) in [
        ("p50", "latency/total/p50_us"),
        ("p99", "latency/total/p99_us"),
    ] {
        let (a, b) = (num(total, q), num(&r, key));
        assert!(one_bucket(a, b), "total {q}: hdrh {a}, --json {b}");
    }
    assert_eq!(
        num(&py["handshake"], "count"),
        num(&r, "latency/handshake_full/count") + num(&r, "latency/handshake_resumed/count")
    );
}
