//! Issue 20's regression tests for the command line: exit codes that tell
//! the truth, usage errors before any work, bounded reads of the files a
//! user names, and a load that backs off a dead server.
//!
//! Every server binds 127.0.0.1; every load is bounded by `-n` or `-d` and
//! every child by a wall-clock limit.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::load::load_run;
use common::{
    Serve, args, args_with, assert_no_panic, errors, free_port, load_json, num, run_tlslab, show,
    tempdir,
};

const LIMIT: Duration = Duration::from_secs(60);

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A plain HTTP server on 127.0.0.1 that answers every request with
/// `500 Internal Server Error` and closes; it stops when dropped (and
/// after a minute in any case).
struct Http500 {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Http500 {
    fn start() -> Http500 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let addr = l.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + LIMIT;
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = c.set_nonblocking(false);
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
                    match c.read(&mut buf) {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let _ = c.write_all(
                    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\noops\n",
                );
            }
        });
        Http500 { addr, stop }
    }
}

impl Drop for Http500 {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ------------------------------------------------------------ exit codes ---

// Issue 20: `load` checked `attempted > 0 && completed == 0`, so a run
// whose every response was an HTTP 500 exited 0.
#[test]
fn load_exits_1_when_every_response_is_an_http_500() {
    let dir = tempdir();
    let srv = Http500::start();
    let json = dir.path().join("r.json");
    let url = format!("http://{}/", srv.addr);
    let (out, r) = load_run(&json, &[&url, "-c", "2", "-n", "10"], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = r.expect("load wrote --json");
    assert_eq!(num(&r, "requests/completed"), 10.0, "{r:#}");
    assert_eq!(num(&r, "requests/succeeded"), 0.0, "{r:#}");
    assert_eq!(errors(&r).get("http_500"), Some(&10), "{r:#}");
    let err = stderr(&out);
    assert!(
        err.contains("none 2xx") && err.contains("http_500 10"),
        "{err}"
    );
    assert_no_panic(&out.stderr);
}

// Issue 20: a run whose every request was still in flight when -d ran out
// attempted nothing that ended, so `attempted > 0` was false: exit 0.
#[test]
fn load_exits_1_when_every_request_is_unfinished() {
    let dir = tempdir();
    // Connections complete in the kernel's backlog; nothing ever answers.
    let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let url = format!("http://{}/", silent.local_addr().expect("addr"));
    let json = dir.path().join("r.json");
    let (out, r) = load_run(&json, &[&url, "-c", "2", "-d", "1s"], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = r.expect("load wrote --json");
    assert_eq!(num(&r, "requests/attempted"), 0.0, "{r:#}");
    assert_eq!(num(&r, "requests/unfinished"), 2.0, "{r:#}");
    assert!(
        stderr(&out).contains("no request finished"),
        "{}",
        show(&out)
    );
}

#[test]
fn max_error_rate_gates_the_exit_code_and_says_the_rate() {
    let serve = Serve::start(&[]);
    let (ok, missing) = (serve.url("/health"), serve.url("/no/such/file"));
    // One client walks the two URLs in turn: exactly half are 404s.
    let run = |extra: &[&str]| {
        let vars = [
            ("OK", ok.as_str()),
            ("MISSING", &missing),
            ("CA", serve.ca_str()),
        ];
        let mut args = args_with("load OK MISSING --cacert CA -c 1 -n 20", &vars);
        args.extend_from_slice(extra);
        run_tlslab(&args, LIMIT)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "default 100 %: {}", show(&out));
    let out = run(&["--max-error-rate", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = run(&["--max-error-rate", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("error rate 50.00 % (10 of 20") && err.contains("--max-error-rate 10"),
        "{err}"
    );
}

// --------------------------------------------- usage errors before work ---

/// Runs `args`; asserts exit 2 within a few seconds (no run was made) and
/// that stderr mentions `want`.
fn usage_error(args: &[&str], want: &str) {
    fails_fast(args, 2, want, Duration::from_secs(5));
}

/// Runs `args`; asserts exit `code` within `bound` (before any real work),
/// no panic, and that stderr mentions `want`.
fn fails_fast(args: &[&str], code: i32, want: &str, bound: Duration) {
    let t0 = Instant::now();
    let out = run_tlslab(args, LIMIT);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", show(&out));
    let err = stderr(&out);
    assert!(err.contains(want), "{args:?}: want {want:?} in: {err}");
    assert!(
        t0.elapsed() < bound,
        "{args:?} took {:?}: a usage error must come before any work",
        t0.elapsed()
    );
    assert_no_panic(&out.stderr);
}

// Issue 20: `-d 1y`, `--timeout 0s` and `--sni ''` passed the flag checks
// and failed in the engine with exit 1; `--threads` had no upper bound;
// an output file in a missing directory failed only after the run.
#[test]
fn bad_load_flags_are_usage_errors_before_any_work() {
    let dir = tempdir();
    let url = format!("https://127.0.0.1:{}/", free_port());
    let missing = dir.path().join("no-such-dir").join("out.json");
    let missing = s(&missing);
    let base = ["load", url.as_str(), "--insecure", "-n", "3"];
    let with = |extra: &[&'static str]| -> Vec<String> {
        base.iter()
            .chain(extra.iter())
            .map(|a| a.to_string())
            .collect()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (with(&["-d", "1y"]), "at most 365 days"),
        (with(&["--warmup", "400d"]), "at most 365 days"),
        (with(&["--timeout", "0s"]), "--timeout 0"),
        (with(&["--sni", ""]), "--sni is empty"),
        (with(&["--sni", "bad name!"]), "not a valid TLS server name"),
        (with(&["--threads", "5000"]), "more than the 1024"),
        (with(&["--threads", "0"]), "at least 1 thread"),
        (with(&["--max-error-rate", "150"]), "0 to 100"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        usage_error(&args, want);
    }
    for flag in ["--json", "--log"] {
        let mut args = base.to_vec();
        args.extend([flag, missing]);
        usage_error(&args, "does not exist");
    }
    let d = s(dir.path());
    usage_error(&["load", &url, "--insecure", "--json", d], "is a directory");
    usage_error(
        &["sweep", &url, "--insecure", "--max-error-rate", "5"],
        "--max-error-rate",
    );
}

#[test]
fn output_files_in_missing_directories_are_usage_errors_on_every_subcommand() {
    let dir = tempdir();
    let missing = dir.path().join("no-such-dir").join("out");
    let missing = s(&missing);
    let junk = dir.path().join("in.json");
    std::fs::write(&junk, "{}").expect("write");
    let junk = s(&junk);
    // `lab` and `overload` would otherwise run for many seconds first.
    for args in [
        vec!["lab", "--quick", "--json", missing],
        vec!["overload", "--quick", "--json", missing],
        vec!["sweep", "https://127.0.0.1:9/", "--json", missing],
        vec!["merge", s(dir.path()), "--json", missing],
        vec!["report", junk, "--html", missing],
        vec!["report", junk, "--md", missing],
        args_with(
            "plan --full-us 1 --resumed-us 1 --request-us 1 --json M",
            &[("M", missing)],
        ),
        vec!["serve", "--listen", "127.0.0.1:0", "--access-log", missing],
    ] {
        usage_error(&args, "does not exist");
    }
}

#[test]
fn threads_have_an_upper_bound_on_every_subcommand() {
    for args in [
        vec!["serve", "--listen", "127.0.0.1:0", "--threads", "100000"],
        vec!["sweep", "https://127.0.0.1:9/", "--threads", "2000"],
        vec!["dispatch", "--backend", "127.0.0.1:9", "--threads", "1025"],
    ] {
        usage_error(&args, "1024");
    }
}

// ---------------------------------------------------------- bounded input ---

/// A Combined Log Format line of client `ip`.
fn log_line(ip: &str) -> String {
    format!(r#"{ip} - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 100 "-" "curl""#)
}

// Issue 20: replay read lines without a bound, so `--access-log /dev/zero`
// grew memory until the OOM killer ran.
#[test]
fn access_log_lines_are_capped_and_an_endless_line_stops() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let base = serve.url("/").trim_end_matches('/').to_string();
    let log = dir.path().join("access.log");
    let long = format!("{} \"{}\"", log_line("10.0.0.2"), "x".repeat(100_000));
    let text = format!(
        "{}\n{long}\n{}\n{}\n",
        log_line("10.0.0.1"),
        log_line("10.0.0.1"),
        log_line("10.0.0.3")
    );
    std::fs::write(&log, text).expect("write log");
    let json = dir.path().join("r.json");
    let replay_of = |log: &str, extra: &[&str]| {
        let vars = [("URL", base.as_str()), ("CA", serve.ca_str()), ("LOG", log)];
        let mut args = args_with(
            "load URL --cacert CA --workload replay --access-log LOG",
            &vars,
        );
        args.extend_from_slice(extra);
        run_tlslab(&args, LIMIT)
    };
    let replay = |extra: &[&str]| replay_of(s(&log), &[&["--json", s(&json)][..], extra].concat());
    // The over-long line is skipped, counted and named with its reason.
    let out = replay(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("line too long: 1") && err.contains("64 KiB"),
        "{err}"
    );
    let r = load_json(&json);
    assert_eq!(num(&r, "replay/skipped_lines"), 1.0, "{r:#}");
    assert_eq!(num(&r, "requests/attempted"), 3.0, "{r:#}");
    // --strict: an error naming the line (exit 1: bad content).
    let out = replay(&["--strict"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = stderr(&out);
    assert!(err.contains(":2:") && err.contains("64 KiB"), "{err}");

    // /dev/zero: one endless line. It stops at once, in bounded memory.
    let t0 = Instant::now();
    let out = replay_of("/dev/zero", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("16 MiB") && err.contains("not a text file"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_no_panic(&out.stderr);
}

// Issue 20: every other reader of a user's file read it whole, unbounded.
#[test]
fn other_user_files_are_read_with_a_size_cap() {
    let dir = tempdir();
    let html = dir.path().join("out.html");
    let url = format!("https://127.0.0.1:{}/", free_port());
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        // A report input's content: a runtime failure.
        (vec!["report", "/dev/zero", "--html", s(&html)], 1, "64 MiB"),
        // Configuration files named by flags: usage errors.
        (
            args_with(
                "load URL --insecure -n 1 --workload ecommerce --workload-config /dev/zero",
                &[("URL", &url)],
            ),
            2,
            "16 MiB",
        ),
        (
            args_with("load URL -n 1 --cacert /dev/zero", &[("URL", &url)]),
            2,
            "16 MiB",
        ),
        (args("plan --costs /dev/zero"), 1, "64 MiB"),
        (
            args("serve --listen 127.0.0.1:0 --ticket-keys /dev/zero"),
            2,
            "16 MiB",
        ),
    ];
    for (args, code, want) in cases {
        fails_fast(&args, code, want, Duration::from_secs(10));
    }
    assert!(!html.exists());
}

// --------------------------------------------------------------- backoff ---

// Issue 20: after the server died, `load` retried refused connections in a
// tight loop (thousands a second per client).
#[test]
fn load_backs_off_a_closed_port_and_reports_the_refusals() {
    let dir = tempdir();
    let json = dir.path().join("r.json");
    let url = format!("https://127.0.0.1:{}/", free_port());
    let args = [url.as_str(), "--insecure", "-c", "4", "-d", "2s"];
    let (out, r) = load_run(&json, &args, LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = r.expect("load wrote --json");
    let attempted = num(&r, "requests/attempted");
    // With the 10 ms base, 4 clients make about 60 attempts in 2 s; a
    // tight loop made tens of thousands.
    assert!(
        (4.0..200.0).contains(&attempted),
        "{attempted} attempts in 2 s: {r:#}"
    );
    assert_eq!(num(&r, "requests/refused"), attempted, "{r:#}");
    assert_eq!(errors(&r).get("refused").copied(), Some(attempted as u64));
    assert!(num(&r, "backoff/waits") >= attempted - 4.0 - 4.0, "{r:#}");
    assert_eq!(num(&r, "backoff/base_ms"), 10.0, "{r:#}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{attempted} refused")) && text.contains("backoff: "),
        "{text}"
    );
    // --retry-backoff 0 restores the tight loop (for comparison).
    let args = [url.as_str(), "--insecure", "-c", "1", "-d", "500ms"];
    let (out, r) = load_run(
        &json,
        &[&args[..], &["--retry-backoff", "0"]].concat(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let tight = num(&r.expect("load wrote --json"), "requests/attempted");
    assert!(tight > 200.0, "without backoff: {tight} attempts in 0.5 s");
}

// Issue 29: `serve --cert <ML-DSA> --tls 1.2` started without a word and
// then failed every handshake (TLS 1.2 cannot sign with ML-DSA).
#[test]
fn serve_refuses_an_ml_dsa_cert_with_tls_1_2_as_a_usage_error() {
    let dir = tempdir();
    let c = common::certs(dir.path(), "mldsa65", &[]);
    let mut line = vec!["serve", "--listen", "127.0.0.1:0"];
    line.extend(c.serve_flags());
    let err = common::usage_error(&[&line[..], &["--tls", "1.2"]].concat(), LIMIT);
    assert!(
        err.contains("ML-DSA") && err.contains("--tls 1.3"),
        "the message must name the problem and the fix: {err}"
    );
    // An ECDSA chain with TLS 1.2 is fine: the check names ML-DSA keys only
    // (checked without starting a server: a bad --alpn after it fails).
    let dir2 = tempdir();
    let e = common::certs(dir2.path(), "ecdsa-p256", &[]);
    let mut line = vec!["serve", "--listen", "127.0.0.1:0", "--tls", "1.2"];
    line.extend(e.serve_flags());
    let err = common::usage_error(&[&line[..], &["--alpn", "spdy"]].concat(), LIMIT);
    assert!(!err.contains("ML-DSA") && err.contains("--alpn"), "{err}");
}

// Issue 29: `certs --san ''` wrote a certificate with an empty SAN and CN.
#[test]
fn certs_refuses_an_empty_san_as_a_usage_error() {
    for san in ["", "localhost,,127.0.0.1", "localhost, "] {
        let dir = tempdir();
        let out = dir.path().join("c");
        let line = ["certs", "--out", s(&out), "--san", san];
        let err = common::usage_error(&line, LIMIT);
        assert!(
            err.contains("--san") && err.contains("empty"),
            "{san:?}: {err}"
        );
        assert!(
            !out.join("server.pem").exists(),
            "{san:?}: wrote a certificate"
        );
    }
}
