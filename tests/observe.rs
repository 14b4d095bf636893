//! Seeing inside a run with the field's own tools (issue 35): key logs
//! (`--keylog`, `SSLKEYLOGFILE`) that tshark decrypts TCP and QUIC
//! captures with, and HdrHistogram interval logs (`--hdr-log`) that
//! python's `hdrh` reads. The tests that need tshark, dumpcap or python
//! are `#[ignore]` and run by `.ci/run` with `--ignored`.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::load::{load_report, load_run};
use common::{Proc, Serve, expect_ok, num, require, run, show, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

/// The labels of a key log's lines, and the client randoms they name.
fn labels(keylog: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(keylog).unwrap_or_else(|e| panic!("{keylog:?}: {e}"));
    let (mut labels, mut randoms) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "not an NSS key log line: {line:?}");
        assert_eq!(f[1].len(), 64, "a client random is 32 bytes: {line:?}");
        assert!(f[2].len() >= 64, "a secret is at least 32 bytes: {line:?}");
        labels.insert(f[0].to_string());
        randoms.insert(f[1].to_string());
    }
    (labels, randoms)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

const TLS13: [&str; 4] = [
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
];

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
    // The server logged the same connections (both transports).
    let (labels, randoms) = labels(&server_log);
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

/// Runs `dumpcap` on the loopback interface for `filter` into `pcap`
/// until the returned process is stopped.
fn capture(pcap: &Path, filter: &str) -> Proc {
    let mut cmd = Command::new(common::tool("dumpcap"));
    cmd.args(["-i", "lo", "-f", filter, "-w", pcap.to_str().unwrap()]);
    let p = Proc::spawn(cmd);
    assert!(
        p.stderr_shows("Capturing on", Duration::from_secs(10)),
        "dumpcap did not start: {}",
        p.stderr_text()
    );
    p
}

/// `tshark -r PCAP -o tls.keylog_file:KEYS ARGS`, its stdout.
fn tshark(pcap: &Path, keys: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(common::tool("tshark"));
    cmd.args(["-r", pcap.to_str().unwrap(), "-o"])
        .arg(format!("tls.keylog_file:{}", keys.display()))
        .args(args);
    expect_ok(&run(cmd, LIMIT))
}

/// Decodes QPACK header blocks with pylsqpack (which aioquic installs):
/// tshark prints every HTTP/3 frame payload of a packet with a HEADERS
/// frame (hex); each is tried as a header block (a static-table-only
/// block decodes alone) and the `:path` values found are printed.
const QPACK_SCRIPT: &str = r#"
import sys
from pylsqpack import Decoder
for tok in sys.stdin.read().split():
    try:
        _, headers = Decoder(4096, 16).feed_header(0, bytes.fromhex(tok.replace(":", "")))
    except Exception:
        continue
    for k, v in headers:
        if k == b":path":
            print(v.decode())
"#;

// Before issue 35 no key log existed, so a capture of a run could not be
// decrypted: tshark showed TLS application data and QUIC protected payload.
#[test]
#[ignore = "needs tshark, dumpcap (root) and python3 with aioquic (.ci/run)"]
fn tshark_decrypts_tls13_and_quic_captures_with_the_key_log_load_wrote() {
    if !require("tshark") || !require("dumpcap") || !require("python3") {
        return;
    }
    let dir = tempdir();
    let s = Serve::start(&["--h3"]);
    let port = s.https.port();
    for (name, extra, path) in [
        ("tls13", &["--tls", "1.3"][..], "/bytes/111?observe=tls13"),
        ("quic", &["--h3"][..], "/bytes/222?observe=quic"),
    ] {
        let pcap = dir.path().join(format!("{name}.pcapng"));
        let keys = dir.path().join(format!("{name}.keys"));
        let cap = capture(&pcap, &format!("port {port}"));
        let json = dir.path().join(format!("{name}.json"));
        let url = s.url(path);
        let mut args = vec![
            url.as_str(),
            "--cacert",
            s.ca_str(),
            "-c",
            "1",
            "-n",
            "2",
            "--no-progress",
            "--keylog",
            keys.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = load_report(&json, &args, LIMIT);
        assert_eq!(num(&r, "requests/succeeded"), 2.0);
        // Let dumpcap write the last packets, then stop it.
        std::thread::sleep(Duration::from_millis(500));
        cap.terminate(Duration::from_secs(10));
        if name == "tls13" {
            // HTTP/1.1 inside TLS 1.3: the request line, decrypted.
            let uris = tshark(
                &pcap,
                &keys,
                &[
                    "-Y",
                    "http.request",
                    "-T",
                    "fields",
                    "-e",
                    "http.request.uri",
                ],
            );
            assert_eq!(
                uris.lines().filter(|l| *l == path).count(),
                2,
                "tshark shows both decrypted requests: {uris:?}"
            );
            let (labels, _) = labels(&keys);
            assert!(labels.contains("CLIENT_TRAFFIC_SECRET_0"), "{labels:?}");
        } else {
            let (labels, _) = labels(&keys);
            for l in TLS13 {
                assert!(labels.contains(l), "QUIC key log lacks {l}: {labels:?}");
            }
            // HTTP/3 HEADERS frames (type 1), decrypted; Wireshark 4.0 does
            // not decode QPACK, so their blocks are decoded with pylsqpack.
            let blocks = tshark(
                &pcap,
                &keys,
                &[
                    "-Y",
                    "http3.frame_type == 1",
                    "-T",
                    "fields",
                    "-e",
                    "http3.frame_payload",
                    "-E",
                    "occurrence=a",
                    "-E",
                    "aggregator= ",
                ],
            );
            let mut py = Command::new("python3");
            py.args(["-c", QPACK_SCRIPT]);
            let out = common::run_with_input(py, blocks.as_bytes(), LIMIT);
            let paths = expect_ok(&out);
            // Wireshark 4.0 (Debian 12) dissects the HTTP/3 frames of the
            // first connection of a capture; later ones are left undecoded.
            assert!(
                paths.lines().any(|l| l == path),
                "decrypted HTTP/3 request: {paths:?} from {blocks:?}"
            );
        }
    }
}
