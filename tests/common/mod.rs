//! Helpers shared by the workspace's suites (`tests/*.rs`): running the
//! real `tlslab` binary with a time limit, spawning `tlslab serve` on
//! ephemeral ports and reading the addresses it prints, killing children on
//! drop and reading JSON reports, on top of the one test kit
//! (`tlslab-testkit`: bounded waits, the skip rule, free ports, temporary
//! directories, metrics and raw HTTP), re-exported here.
//!
//! Every helper is bounded in time: a child that outlives its limit is
//! killed and the test fails with everything it printed.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

pub mod load;
pub mod netpath;
pub mod nginx;
pub mod peers;
pub mod quic_lb;
pub mod study_doc;
pub mod tshark;
pub mod udp_tap;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use tlslab_peers::{Finished, wait_for_port, wait_timeout};
pub use tlslab_testkit::*;

/// The `tlslab` binary cargo built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tlslab"))
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

/// Reads a pipe to the end on a thread; returns what it read when joined.
fn drain<R: Read + Send + 'static>(mut r: R) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` with stdin closed and its output captured; kills it and fails
/// the test if it runs longer than `limit`.
pub fn run(cmd: Command, limit: Duration) -> Output {
    run_fed(cmd, None, limit)
}

/// Like [`run`], but feeds `input` on stdin and then closes it.
pub fn run_with_input(cmd: Command, input: &[u8], limit: Duration) -> Output {
    run_fed(cmd, Some(input), limit)
}

fn run_fed(mut cmd: Command, input: Option<&[u8]>, limit: Duration) -> Output {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let feeder = child.stdin.take().zip(input).map(|(mut stdin, input)| {
        let input = input.to_vec();
        // Dropping stdin closes it.
        std::thread::spawn(move || drop(stdin.write_all(&input)))
    });
    let out = drain(child.stdout.take().expect("stdout is piped"));
    let err = drain(child.stderr.take().expect("stderr is piped"));
    let status = wait_timeout(&mut child, limit);
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!(
            "{shown} did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    });
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The words of `line`, split at whitespace: literal flags written the way
/// they are typed (`args("-c 1 -n 3")`). A path, or any value that may hold
/// a space, goes as its own item (see [`argv`]), never through this.
pub fn args(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `head` as given (URLs, paths), then the words of `line` ([`args`]).
pub fn argv<'a>(head: &[&'a str], line: &'a str) -> Vec<&'a str> {
    [head, &args(line)].concat()
}

/// [`args`] with each word that is a name in `vars` replaced by its value,
/// after the split (so a value may hold spaces):
/// `args_with("load URL -n 1", &[("URL", &url)])`.
pub fn args_with<'a>(line: &'a str, vars: &[(&str, &'a str)]) -> Vec<&'a str> {
    let value = |w| vars.iter().find(|(k, _)| *k == w).map_or(w, |(_, v)| *v);
    line.split_whitespace().map(value).collect()
}

/// Runs `tlslab ARGS` with a limit (see [`run`]).
pub fn run_tlslab(args: &[&str], limit: Duration) -> Output {
    run(tlslab(args), limit)
}

/// Formats a command's output for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
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

/// Asserts a command exited 0 and returns its stdout.
pub fn expect_ok(out: &Output) -> String {
    assert!(out.status.success(), "command failed: {}", show(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails the test if a process's stderr shows a Rust panic.
pub fn assert_no_panic(stderr: &[u8]) {
    let s = String::from_utf8_lossy(stderr);
    assert!(
        !s.contains("panicked") && !s.contains("RUST_BACKTRACE"),
        "the process panicked:\n{s}"
    );
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

/// Loads a JSON file (a `--json` report).
pub fn load_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read JSON report {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()))
}

/// The number at a `/`-separated path in a JSON value (`"reuse/achieved"`),
/// failing the test with the whole report if it is absent.
pub fn num(v: &serde_json::Value, path: &str) -> f64 {
    let ptr = format!("/{path}");
    v.pointer(&ptr)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("report has no number at {path}:\n{v:#}"))
}

/// Asserts [`num`] at each `(path, value)` of `want`, naming the path and
/// showing the whole report on a mismatch.
pub fn assert_nums(v: &serde_json::Value, want: &[(&str, f64)]) {
    for &(path, value) in want {
        assert_eq!(num(v, path), value, "{path}: {v:#}");
    }
}

/// The `errors` object of a load report as kind → count.
pub fn errors(v: &serde_json::Value) -> BTreeMap<String, u64> {
    let e = v
        .get("errors")
        .unwrap_or_else(|| panic!("report has no `errors`:\n{v:#}"));
    let obj = e
        .as_object()
        .unwrap_or_else(|| panic!("report `errors` is not an object:\n{v:#}"));
    obj.iter()
        .map(|(k, n)| {
            let n = n
                .as_u64()
                .unwrap_or_else(|| panic!("errors.{k} is not a count: {n}"));
            (k.clone(), n)
        })
        .collect()
}

/// A child process (tlslab-peers' [`tlslab_peers::Proc`]: its own process
/// group, killed on drop) with its stdout lines collected; a start failure
/// fails the test.
pub struct Proc(tlslab_peers::Proc);

impl Proc {
    /// Spawns `cmd` with stdin closed, stdout collected as lines and
    /// stderr in a temporary file.
    pub fn spawn(cmd: Command) -> Proc {
        let shown = format!("{cmd:?}");
        Proc(tlslab_peers::Proc::spawn_lines(cmd, &shown).unwrap_or_else(|e| panic!("{e}")))
    }

    /// See [`tlslab_peers::Proc::graceful_drop`].
    pub fn graceful_drop(self) -> Proc {
        Proc(self.0.graceful_drop())
    }

    /// See [`tlslab_peers::Proc::wait`].
    pub fn wait(self, limit: Duration) -> Finished {
        self.0.wait(limit)
    }

    /// See [`tlslab_peers::Proc::terminate`].
    pub fn terminate(self, limit: Duration) -> Finished {
        self.0.terminate(limit)
    }

    /// See [`tlslab_peers::Proc::kill`].
    pub fn kill(self) -> Finished {
        self.0.kill()
    }

    /// Everything on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.0.log_text()
    }

    /// Polls stderr (≤ `limit`) until it contains `needle`; whether it did.
    pub fn stderr_shows(&self, needle: &str, limit: Duration) -> bool {
        poll(limit, || self.stderr_text(), |t| t.contains(needle)).contains(needle)
    }
}

impl std::ops::Deref for Proc {
    type Target = tlslab_peers::Proc;
    fn deref(&self) -> &tlslab_peers::Proc {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut tlslab_peers::Proc {
        &mut self.0
    }
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
