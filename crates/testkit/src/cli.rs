//! The real `tlslab` binary: running it with a time limit, and its long-
//! running commands (`serve`, `relay`, `dispatch`, `probe exporter`)
//! started on 127.0.0.1 port 0, their addresses read from what they print,
//! and stopped on drop; the certificates `tlslab certs` writes.
//!
//! The binary is the one cargo built for this test run: cargo (1.94 and
//! later) names it in `CARGO_BIN_EXE_tlslab` when it runs a suite of the
//! `tlslab` package (`tests/*.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::{
    Metrics, Proc, args_with, assert_no_panic, expect_ok, http_get, load_json, poll, run, show,
    tempdir,
};

/// The `tlslab` binary cargo built for this test run: `CARGO_BIN_EXE_tlslab`
/// as cargo sets it when it runs a suite, or else (a suite's binary run by
/// hand) `tlslab` in the profile directory above the suite's `deps/`.
/// Fails the test, saying how to build it, when neither exists.
pub fn bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CARGO_BIN_EXE_tlslab") {
        return PathBuf::from(p);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tlslab")));
    match beside {
        Some(p) if p.is_file() => p,
        _ => panic!(
            "no tlslab binary: CARGO_BIN_EXE_tlslab is unset and none is beside this suite; \
             run the suite with `cargo test --test NAME`"
        ),
    }
}

/// A `tlslab` command with the given arguments.
pub fn tlslab<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(bin());
    cmd.args(args);
    cmd
}

/// Runs `tlslab ARGS` with a limit (see [`run`]).
pub fn run_tlslab(args: &[&str], limit: Duration) -> Output {
    run(tlslab(args), limit)
}

/// Runs `tlslab args` and asserts it exits `code` without a panic;
/// returns its stderr.
pub fn exits(args: &[&str], code: i32, limit: Duration) -> String {
    let out = run_tlslab(args, limit);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", show(&out));
    assert_no_panic(&out.stderr);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `tlslab args` and asserts a usage error (exit 2, no panic);
/// returns its stderr.
pub fn usage_error(args: &[&str], limit: Duration) -> String {
    exits(args, 2, limit)
}

/// [`usage_error`] whose stderr says `says`.
pub fn assert_usage_error(args: &[&str], says: &str, limit: Duration) {
    let err = usage_error(args, limit);
    assert!(err.contains(says), "{args:?}: must mention {says}: {err}");
}

/// Runs `tlslab experiment run ARGS --out OUT` within `limit`, which must
/// succeed without a panic; returns its stdout and `OUT/results.json`.
pub fn experiment_run(args: &[&str], out: &Path, limit: Duration) -> (String, serde_json::Value) {
    let mut full = vec!["experiment", "run"];
    full.extend_from_slice(args);
    full.extend(["--out", out.to_str().expect("utf-8 temp path")]);
    let run = run_tlslab(&full, limit);
    let stdout = expect_ok(&run);
    assert_no_panic(&run.stderr);
    (stdout, load_json(&out.join("results.json")))
}

/// The files `tlslab certs` writes.
#[derive(Clone, Debug)]
pub struct Certs {
    /// The directory holding them.
    pub dir: PathBuf,
    /// CA certificate (for `--cacert`, `-CAfile`).
    pub ca: PathBuf,
    /// CA key.
    pub ca_key: PathBuf,
    /// Server chain, leaf first.
    pub chain: PathBuf,
    /// Server key.
    pub key: PathBuf,
}

impl Certs {
    /// The paths `tlslab certs --out dir` writes (does not check they exist).
    pub fn at(dir: &Path) -> Certs {
        Certs {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.pem"),
            ca_key: dir.join("ca.key"),
            chain: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}

impl Certs {
    /// `--cert CHAIN --key-file KEY`: `tlslab serve` on these files.
    pub fn serve_flags(&self) -> [&str; 4] {
        let chain = self.chain.to_str().expect("utf-8 temp path");
        [
            "--cert",
            chain,
            "--key-file",
            self.key.to_str().expect("utf-8 temp path"),
        ]
    }
}

/// Runs `tlslab certs --out DIR --key KEY_TYPE [extra]` and returns the
/// paths, failing the test if it fails or a file is missing.
pub fn certs(dir: &Path, key_type: &str, extra: &[&str]) -> Certs {
    let out_dir = dir.to_str().expect("utf-8 temp path");
    let mut args = vec!["certs", "--out", out_dir, "--key", key_type];
    args.extend_from_slice(extra);
    let out = run_tlslab(&args, Duration::from_secs(60));
    expect_ok(&out);
    let c = Certs::at(dir);
    for f in [&c.ca, &c.ca_key, &c.chain, &c.key] {
        assert!(f.is_file(), "tlslab certs did not write {}", f.display());
    }
    c
}

/// `tlslab serve` flags for TLS `tls` without tickets, its session cache
/// the Redis at `url` with GETs bounded by `timeout`.
pub fn redis_cache_flags<'a>(tls: &'a str, url: &'a str, timeout: &'a str) -> [&'a str; 8] {
    [
        "--tls",
        tls,
        "--tickets",
        "off",
        "--session-cache",
        url,
        "--redis-timeout",
        timeout,
    ]
}

/// A running `tlslab serve`, stopped on drop (SIGTERM, SIGKILL after 5 s).
/// Its `TMPDIR` (where it writes an ephemeral CA) is a temporary directory
/// removed after it stops, so even a killed server leaves nothing behind.
pub struct Serve {
    /// The process.
    pub proc: Proc,
    /// The HTTPS listener.
    pub https: SocketAddr,
    /// The plain HTTP listener, if `--http` was given.
    pub http: Option<SocketAddr>,
    /// The metrics listener (always asked for unless the args name one).
    pub metrics: Option<SocketAddr>,
    /// The CA to trust: the one it printed (ephemeral cert) or `None` when
    /// `--cert` was given.
    pub ca: Option<PathBuf>,
    /// The child's TMPDIR; declared last so it is removed after the child
    /// has stopped.
    pub tmp: tempfile::TempDir,
}

/// One `tlslab serve: KIND VALUE` start-up line.
pub fn parse_serve_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("tlslab serve: ")?;
    let (kind, value) = rest.split_once(' ')?;
    Some((kind, value.trim()))
}

/// Starts `tlslab` with `args` (a `dispatch` command line with `--listen`
/// and `--metrics` on port 0) and reads the addresses it prints: the
/// process, its listening address and its `/metrics` address.
pub fn spawn_dispatch(args: &[String]) -> (Proc, SocketAddr, SocketAddr) {
    let proc = Proc::spawn(tlslab(args)).graceful_drop();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut listen, mut metrics) = (None, None);
    while listen.is_none() || metrics.is_none() {
        let line = proc
            .next_line(deadline)
            .unwrap_or_else(|| panic!("dispatch did not start:\n{}", proc.describe()));
        if let Some(a) = line.strip_prefix("tlslab dispatch: listen ") {
            listen = a.trim().parse().ok();
        } else if let Some(u) = line.strip_prefix("tlslab dispatch: metrics ") {
            metrics = url_addr(u.trim());
        }
    }
    (proc, listen.unwrap(), metrics.unwrap())
}

/// `https://127.0.0.1:8443` or `http://127.0.0.1:9/metrics` → the address.
pub fn url_addr(url: &str) -> Option<SocketAddr> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let hostport = rest.split('/').next()?;
    hostport.parse().ok()
}

impl Serve {
    /// Starts `tlslab serve ARGS`, adding `--listen 127.0.0.1:0` and
    /// `--metrics 127.0.0.1:0` unless ARGS name them, and waits (≤ 30 s) for
    /// the start-up lines: https, plus http/metrics if asked for, plus ca
    /// unless `--cert` was given.
    pub fn start(args: &[&str]) -> Serve {
        let has = |f: &str| args.contains(&f);
        let mut full: Vec<&str> = vec!["serve"];
        if !has("--listen") {
            full.extend(["--listen", "127.0.0.1:0"]);
        }
        if !has("--metrics") {
            full.extend(["--metrics", "127.0.0.1:0"]);
        }
        full.extend_from_slice(args);
        let want_http = has("--http");
        let want_ca = !has("--cert");
        let tmp = tempdir();
        let mut cmd = tlslab(&full);
        cmd.env("TMPDIR", tmp.path());
        let proc = Proc::spawn(cmd).graceful_drop();
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut https, mut http, mut metrics, mut ca) = (None, None, None, None);
        while https.is_none()
            || (want_http && http.is_none())
            || metrics.is_none()
            || (want_ca && ca.is_none())
        {
            let Some(line) = proc.next_line(deadline) else {
                panic!(
                    "tlslab serve did not print its addresses within 30 s:\n{}",
                    proc.describe()
                );
            };
            match parse_serve_line(&line) {
                Some(("https", v)) => https = url_addr(v),
                Some(("http", v)) => http = url_addr(v),
                Some(("metrics", v)) => metrics = url_addr(v),
                Some(("ca", v)) => ca = Some(PathBuf::from(v)),
                _ => {}
            }
        }
        let https = https.expect("loop ends only with an https address");
        Serve {
            proc,
            https,
            http,
            metrics,
            ca,
            tmp,
        }
    }

    /// The ephemeral CA's path as text, for `--cacert`; fails the test when
    /// serve printed none (`--cert` given).
    pub fn ca_str(&self) -> &str {
        let ca = self.ca.as_deref().expect("serve printed its ephemeral CA");
        ca.to_str().expect("utf-8 temp path")
    }

    /// `https://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.https)
    }

    /// The current metrics text.
    pub fn metrics_text(&self) -> String {
        let addr = self.metrics.expect("serve was started with --metrics");
        let (status, body) =
            http_get(addr, "/metrics").unwrap_or_else(|e| panic!("GET /metrics: {e}"));
        assert_eq!(status, 200, "GET /metrics: {body}");
        body
    }

    /// The current metrics, parsed.
    pub fn metrics(&self) -> Metrics {
        Metrics::parse(&self.metrics_text())
    }

    /// Polls the metrics (≤ 3 s) until `ok` holds; returns the last scrape
    /// either way (parsed and as text), so the caller's assertion shows it.
    pub fn metrics_until(&self, ok: impl Fn(&Metrics) -> bool) -> (Metrics, String) {
        poll(
            Duration::from_secs(3),
            || {
                let text = self.metrics_text();
                (Metrics::parse(&text), text)
            },
            |(m, _)| ok(m),
        )
    }
}

/// Starts `tlslab LINE` (a `probe exporter --listen 127.0.0.1:0 …` line,
/// with `CA` replaced by `ca`) and waits (≤ `limit`) for its `exporter
/// listening on http://ADDR/` line: the process and its address.
pub fn start_exporter(line: &str, ca: &str, limit: Duration) -> (Proc, SocketAddr) {
    let p = Proc::spawn(tlslab(args_with(line, &[("CA", ca)])));
    let first = p
        .next_line(Instant::now() + limit)
        .expect("the exporter's listening line");
    let addr = first
        .strip_prefix("exporter listening on http://")
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));
    (p, addr)
}

/// A running `tlslab relay` (an emulated WAN path in front of a server),
/// stopped with SIGTERM on drop.
pub struct Relay {
    /// The process.
    pub proc: Proc,
    /// Where clients connect.
    pub addr: SocketAddr,
}

impl Relay {
    /// Starts `tlslab relay --upstream UPSTREAM ARGS` on 127.0.0.1:0 and
    /// waits (≤ 30 s) for its `relay listening on ADDR` line.
    pub fn start(upstream: SocketAddr, args: &[&str]) -> Relay {
        let up = upstream.to_string();
        let mut full = vec!["relay", "--listen", "127.0.0.1:0", "--upstream", &up];
        full.extend_from_slice(args);
        let proc = Proc::spawn(tlslab(&full)).graceful_drop();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Some(line) = proc.next_line(deadline) else {
                panic!(
                    "tlslab relay did not start within 30 s:\n{}",
                    proc.describe()
                );
            };
            if let Some(addr) = line.strip_prefix("relay listening on ") {
                let addr = addr.trim().parse().expect("relay prints a socket address");
                return Relay { proc, addr };
            }
        }
    }
}
