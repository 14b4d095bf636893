//! End-to-end tests of `tlslab probe` against `tlslab serve` on loopback:
//! rounds stored in SQLite and reported, Table 2 from real handshakes,
//! classified errors (refused, self-signed), kill -9 losing no committed
//! round, SIGTERM finishing cleanly, bad databases and the exporter.
//!
//! Every server binds 127.0.0.1 port 0; every probe run is bounded by
//! `--rounds` or a signal, and every child by a wall-clock limit.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Proc, Serve, args, args_with, argv, assert_no_panic, exits, expect_ok, free_port, http_get,
    run, run_tlslab, show, start_exporter, tempdir, tlslab, usage_error,
};

const LIMIT: Duration = Duration::from_secs(60);

fn report_json(db: &Path) -> serde_json::Value {
    let db = db.to_str().expect("utf-8");
    let out = run_tlslab(
        &args_with("probe report --db DB --json", &[("DB", db)]),
        LIMIT,
    );
    serde_json::from_str(&expect_ok(&out)).expect("report --json is JSON")
}

fn target<'a>(r: &'a serde_json::Value, url: &str) -> &'a serde_json::Value {
    r["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["target"] == url)
        .unwrap_or_else(|| panic!("no target {url} in {r:#}"))
}

/// A `tlslab serve` to probe: its `/bytes/1024` URL, the CA it printed and
/// a temporary directory for the databases.
struct Probed {
    /// Kept running while the probe runs.
    _serve: Serve,
    url: String,
    ca: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl Probed {
    /// Starts `tlslab serve ARGS`.
    fn start(args: &[&str]) -> Probed {
        let serve = Serve::start(args);
        let ca = serve.ca.clone().expect("serve prints its CA");
        let url = serve.url("/bytes/1024");
        Probed {
            _serve: serve,
            url,
            ca,
            dir: tempdir(),
        }
    }

    /// `tlslab probe URL --cacert CA --db DB EXTRA`.
    fn probe(&self, db: &Path, extra: &[&str]) -> std::process::Command {
        let mut cmd = tlslab([
            "probe",
            &self.url,
            "--cacert",
            self.ca.to_str().expect("utf-8"),
            "--db",
            db.to_str().expect("utf-8"),
        ]);
        cmd.args(extra);
        cmd
    }
}

#[test]
fn rounds_against_serve_are_stored_and_reported_with_table_2() {
    let p = Probed::start(&[]);
    let (dir, url) = (&p.dir, &p.url);
    let db = dir.path().join("p.sqlite");
    let out = run(p.probe(&db, &args("--rounds 3 --interval 50ms")), LIMIT);
    let stdout = expect_ok(&out);
    assert!(stdout.contains("round 3 committed"), "{}", show(&out));
    let r = report_json(&db);
    assert_eq!(r["samples"], 3, "{r:#}");
    let t = target(&r, url);
    assert!(t["errors"].as_object().expect("errors").is_empty(), "{t:#}");
    assert_eq!(t["resumption_offered"], 3, "{t:#}");
    assert_eq!(t["resumption_accepted"], 3, "{t:#}");
    assert_eq!(t["versions"]["1.3"], 3, "{t:#}");
    let phases: Vec<&str> = t["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["phase"].as_str().expect("name"))
        .collect();
    assert_eq!(
        phases,
        args("dns connect tls_full tls_resumed ttfb get total")
    );
    let t2 = &t["table2"];
    let new = t2["ssl_new_ms"].as_f64().expect("ssl new");
    let cached = t2["ssl_cached_ms"].as_f64().expect("ssl cached");
    assert!(new > 0.0 && cached > 0.0, "{t2:#}");
    let savings = t2["savings"].as_f64().expect("savings");
    assert!(savings > -1.0 && savings < 1.0, "{t2:#}");
    assert_eq!(t["days"].as_array().expect("days").len(), 1, "{t:#}");
    // The same database as text and CSV.
    let db_s = db.to_str().expect("utf-8");
    let text = expect_ok(&run_tlslab(&["probe", "report", "--db", db_s], LIMIT));
    assert!(
        text.contains("Table 2") && text.contains("tls_full"),
        "{text}"
    );
    assert!(text.contains("10 ms buckets"), "{text}");
    // One SVG chart per target.
    let charts = dir.path().join("charts");
    let svg_dir = charts.to_str().expect("utf-8");
    let vars = [("DB", db_s), ("SVG", svg_dir)];
    let out = run_tlslab(&args_with("probe report --db DB --svg SVG", &vars), LIMIT);
    expect_ok(&out);
    let svgs: Vec<_> = std::fs::read_dir(&charts)
        .expect("charts dir")
        .filter_map(Result::ok)
        .collect();
    assert_eq!(svgs.len(), 1, "{}", show(&out));
    let svg = std::fs::read_to_string(svgs[0].path()).expect("svg");
    assert!(
        svg.starts_with("<svg") && svg.contains("<rect") && svg.contains("resumed (accepted)"),
        "{svg}"
    );
    let csv = expect_ok(&run_tlslab(
        &args_with("probe report --db DB --csv", &vars),
        LIMIT,
    ));
    assert_eq!(csv.lines().count(), 1 + 7, "{csv}");
    // A window with nothing in it.
    let line = "probe report --db DB --json --until 2000-01-01";
    let empty = expect_ok(&run_tlslab(&args_with(line, &vars), LIMIT));
    let e: serde_json::Value = serde_json::from_str(&empty).expect("json");
    assert_eq!(e["samples"], 0, "{e:#}");
}

#[test]
fn failing_targets_are_stored_as_classified_errors_and_the_probe_goes_on() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let db = dir.path().join("e.sqlite");
    let refused = format!("https://127.0.0.1:{}/", free_port());
    let ok = serve.url("/bytes/1024");
    // No --cacert: serve's self-signed chain is not trusted by the webpki roots.
    let head = ["probe", &refused, &ok, "--db", db.to_str().expect("utf-8")];
    let out = run_tlslab(
        &argv(&head, "--rounds 2 --interval 20ms --timeout 5s"),
        LIMIT,
    );
    let stdout = expect_ok(&out);
    assert!(stdout.contains("round 2 committed"), "{}", show(&out));
    assert_no_panic(&out.stderr);
    let r = report_json(&db);
    let a = target(&r, &refused);
    assert_eq!(a["errors"]["connect:refused"], 2, "{a:#}");
    let b = target(&r, &ok);
    let errs = b["errors"].as_object().expect("errors");
    assert_eq!(errs.len(), 1, "{b:#}");
    let (k, n) = errs.iter().next().expect("one kind");
    assert!(k.starts_with("tls_full:") && k.contains("cert"), "{k}");
    assert_eq!(n, 2);
}

#[test]
fn kill_9_loses_no_committed_round_and_sigterm_exits_cleanly() {
    let probed = Probed::start(&[]);
    let dir = &probed.dir;
    let db = dir.path().join("k.sqlite");
    let args = |db: &Path| probed.probe(db, &["--interval", "10ms"]);
    let p = Proc::spawn(args(&db));
    let deadline = Instant::now() + LIMIT;
    let mut committed = Vec::new();
    while committed.len() < 5 {
        let line = p
            .next_line(deadline)
            .unwrap_or_else(|| panic!("no round committed:\n{}", p.describe()));
        if let Some(rest) = line.strip_prefix("round ") {
            let id: i64 = rest
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("id");
            committed.push(id);
        }
    }
    // Killed mid-run: probably inside a round, never at a clean point.
    let _ = p.kill();
    let r = report_json(&db);
    let samples = r["samples"].as_u64().expect("samples");
    assert!(
        samples >= 5,
        "{samples} samples after 5 committed rounds: {r:#}"
    );

    // SIGTERM finishes the round in progress and exits 0.
    let db2 = dir.path().join("t.sqlite");
    let p = Proc::spawn(args(&db2));
    let line = p.next_line(Instant::now() + LIMIT).expect("a first round");
    assert!(line.starts_with("round 1 committed"), "{line}");
    let f = p.terminate(Duration::from_secs(20));
    assert_eq!(f.status.and_then(|s| s.code()), Some(0), "{}", f.stderr);
    assert!(f.stderr.contains("round(s) committed"), "{}", f.stderr);
}

#[test]
fn bad_databases_and_flags_are_usage_errors_that_name_the_fix() {
    let dir = tempdir();
    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, vec![b'x'; 4096]).expect("write");
    let bad_s = bad.to_str().expect("utf-8");
    // Bad content is a runtime failure (exit 1), as in `probe` below
    // (issue 20: it was 2, the usage code).
    let err = exits(&["probe", "report", "--db", bad_s], 1, LIMIT);
    assert!(err.contains("bad.sqlite"), "{err}");
    let line = "probe https://127.0.0.1:1/ --db DB --rounds 1";
    let err = exits(&args_with(line, &[("DB", bad_s)]), 1, LIMIT);
    assert!(err.contains("not a database"), "{err}");
    let missing = dir.path().join("none.sqlite");
    usage_error(
        &["probe", "report", "--db", missing.to_str().expect("utf-8")],
        LIMIT,
    );
    for line in [
        "probe ftp://x/",
        "probe https://127.0.0.1:1/ --db postgres://u@[bad/db",
        "probe https://127.0.0.1:1/ --interval 0s",
        "probe report --since yesterday",
        "probe",
    ] {
        usage_error(&args(line), LIMIT);
    }
}

#[test]
fn the_exporter_answers_one_round_per_scrape() {
    let serve = Serve::start(&[]);
    let line = "probe exporter --listen 127.0.0.1:0 --cacert CA";
    let (mut exporter, addr) = start_exporter(line, serve.ca_str(), LIMIT);
    let path = format!("/probe?target={}", serve.url("/bytes/1024"));
    let (status, body) = http_get(addr, &path).expect("scrape");
    assert_eq!(status, 200, "{body}");
    for want in [
        "tlslab_probe_phase_seconds{transport=\"tcp\",phase=\"tls_full\"}",
        "tlslab_probe_phase_seconds{transport=\"tcp\",phase=\"tls_resumed\"}",
        "tlslab_probe_resumption_accepted{transport=\"tcp\"} 1",
        "tlslab_probe_success{transport=\"tcp\"} 1",
        "tlslab_probe_ssl_earliest_cert_expiry",
        "version=\"1.3\"",
    ] {
        assert!(body.contains(want), "missing {want}:\n{body}");
    }
    let (status, _) = http_get(addr, "/probe").expect("no target");
    assert_eq!(status, 400);
    // The probe times TLS: a plain-HTTP target is refused before any work.
    let (status, body) = http_get(addr, "/probe?target=http://127.0.0.1:1/").expect("http");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("https://127.0.0.1:1/"), "{body}");
    let refused = format!("/probe?target=https://127.0.0.1:{}/", free_port());
    let (_, body) = http_get(addr, &refused).expect("scrape");
    assert!(
        body.contains("tlslab_probe_success{transport=\"tcp\"} 0"),
        "{body}"
    );
    assert!(
        exporter.try_status().is_none(),
        "exporter died: {}",
        exporter.describe()
    );
}

#[test]
fn a_server_that_refuses_resumption_is_stored_as_refused_without_savings() {
    let p = Probed::start(&["--session-cache", "none", "--tickets", "off"]);
    let (dir, url) = (&p.dir, &p.url);
    let db = dir.path().join("r.sqlite");
    let out = run(
        p.probe(&db, &["--rounds", "2", "--interval", "10ms"]),
        LIMIT,
    );
    assert!(expect_ok(&out).contains("(refused)"), "{}", show(&out));
    let r = report_json(&db);
    let t = target(&r, url);
    assert!(t["errors"].as_object().expect("errors").is_empty(), "{t:#}");
    assert_eq!(t["resumption_accepted"], 0, "{t:#}");
    assert!(t["table2"]["ssl_cached_ms"].is_null(), "{t:#}");
    assert!(t["table2"]["savings"].is_null(), "{t:#}");
}
