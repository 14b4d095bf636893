//! Running `tlslab load` with a JSON report, the way most suites do.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::{Serve, assert_no_panic, errors, expect_ok, load_json, run_tlslab, show};

/// How long [`replay_on_serve`]'s load may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `tlslab ARGS --json JSON` within `limit`; returns its output and
/// the report, if it wrote one.
pub fn run_json(
    json: &Path,
    args: &[&str],
    limit: Duration,
) -> (Output, Option<serde_json::Value>) {
    let json_s = json.to_str().expect("utf-8 temp path");
    let mut full = args.to_vec();
    full.extend(["--json", json_s]);
    let out = run_tlslab(&full, limit);
    let report = json.is_file().then(|| load_json(json));
    (out, report)
}

/// `tlslab load ARGS --json JSON` ([`run_json`]).
pub fn load_run(
    json: &Path,
    args: &[&str],
    limit: Duration,
) -> (Output, Option<serde_json::Value>) {
    run_json(json, &[&["load"][..], args].concat(), limit)
}

/// [`load_run`] that must succeed: exit 0, no panic, and a report that
/// counts no errors (`what` names the case in the failure message).
/// Returns stdout and the report.
pub fn load_ok(
    json: &Path,
    args: &[&str],
    what: &str,
    limit: Duration,
) -> (String, serde_json::Value) {
    let (out, report) = load_run(json, args, limit);
    let stdout = expect_ok(&out);
    assert_no_panic(&out.stderr);
    let r = report.unwrap_or_else(|| panic!("{what}: load wrote no --json report"));
    assert!(errors(&r).is_empty(), "{what}: errors: {r:#}");
    (stdout, r)
}

/// The flags of one reuse case: one request per connection (a handshake
/// each), TLS version `tls`, `reuse` % of the connections resuming.
pub fn reuse_case<'a>(tls: &'a str, reuse: &'a str) -> [&'a str; 6] {
    ["--requests-per-conn", "1", "--tls", tls, "--reuse", reuse]
}

/// `--h2` with 2 clients × 10 streams and 200 requests: the HTTP/2 load
/// the h2 suites run against `tlslab serve` and nginx.
pub const H2_TWO_CLIENTS_TEN_STREAMS: [&str; 7] = ["--h2", "-c", "2", "-m", "10", "-n", "200"];

/// [`load_ok`] with the report at `DIR/NAME.json`, NAME naming the case.
pub fn load_ok_in(
    dir: &Path,
    name: &str,
    args: &[&str],
    limit: Duration,
) -> (String, serde_json::Value) {
    load_ok(&dir.join(format!("{name}.json")), args, name, limit)
}

impl Serve {
    /// `tlslab load URL --cacert CA ARGS --json JSON` ([`load_run`]) with
    /// URL this server's `path` and CA the one it printed.
    pub fn load(
        &self,
        path: &str,
        args: &[&str],
        json: &Path,
        limit: Duration,
    ) -> (Output, Option<serde_json::Value>) {
        let url = self.url(path);
        let ca = self.ca.as_deref().expect("serve printed its ephemeral CA");
        let mut full = vec![url.as_str(), "--cacert", ca.to_str().expect("utf-8")];
        full.extend_from_slice(args);
        load_run(json, &full, limit)
    }
}

/// A replayed access log against `tlslab serve` ([`replay_on_serve`]).
pub struct Replayed {
    /// What `tlslab load` printed.
    pub out: Output,
    /// Its `--json` report (the replay must have written one).
    pub report: serde_json::Value,
    /// The server's own access log, read after it stopped.
    pub served_log: String,
}

/// Starts `tlslab serve --threads THREADS --access-log DIR/served.log`,
/// replays `log` against it (`tlslab load --workload replay --access-log
/// LOG ARGS --no-progress`), then stops the server with SIGTERM — a
/// graceful stop flushes its access log, and it must stop cleanly — and
/// reads that log.
pub fn replay_on_serve(dir: &Path, threads: &str, log: &Path, args: &[&str]) -> Replayed {
    let served_log = dir.join("served.log");
    let serve = Serve::start(&[
        "--threads",
        threads,
        "--access-log",
        served_log.to_str().expect("utf-8"),
    ]);
    let log = log.to_str().expect("utf-8");
    let mut full = vec!["--workload", "replay", "--access-log", log];
    full.extend_from_slice(args);
    full.push("--no-progress");
    let (out, report) = serve.load("", &full, &dir.join("replay.json"), LIMIT);
    let report = report.unwrap_or_else(|| panic!("load wrote no --json: {}", show(&out)));
    let Serve { proc, tmp, .. } = serve;
    let fin = proc.terminate(Duration::from_secs(10));
    drop(tmp);
    assert!(
        fin.status.is_some_and(|s| s.success()),
        "serve did not stop cleanly: {fin:?}"
    );
    let served_log = std::fs::read_to_string(&served_log).expect("serve's access log");
    Replayed {
        out,
        report,
        served_log,
    }
}

/// [`load_run`] that must exit 0; returns the report.
pub fn load_report(json: &Path, args: &[&str], limit: Duration) -> serde_json::Value {
    let (out, report) = load_run(json, args, limit);
    expect_ok(&out);
    report.unwrap_or_else(|| panic!("load wrote no --json report: {}", show(&out)))
}
