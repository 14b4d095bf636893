//! `tlslab probe` against inputs that used to hang it or grow it (issue
//! 20): an `http://` target is a usage error before any work; a
//! PostgreSQL server that accepts TCP and never answers fails `probe` and
//! `probe report` with exit 1 within the 5 s connect timeout; a 100 MB
//! response is counted without being held (the probe's peak RSS stays far
//! below the body's size). Servers bind 127.0.0.1; every run is bounded.

mod common;

use std::time::{Duration, Instant};

use common::{
    Proc, Serve, args_with, assert_no_panic, assert_usage_error, run_tlslab, show, tempdir, tlslab,
};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn an_http_target_is_a_usage_error_before_any_work() {
    let dir = tempdir();
    let db = dir.path().join("p.sqlite");
    let list = dir.path().join("targets.txt");
    std::fs::write(&list, "# one plain-HTTP target\nhttp://127.0.0.1:1/x\n").expect("write");
    let (db_s, list_s) = (db.to_str().expect("utf-8"), list.to_str().expect("utf-8"));
    let vars = [("DB", db_s), ("LIST", list_s)];
    for line in [
        "probe http://127.0.0.1:1/ --db DB",
        "probe --targets LIST --db DB",
    ] {
        assert_usage_error(&args_with(line, &vars), "https://127.0.0.1:1/", LIMIT);
    }
    // Before any work: no database was created.
    assert!(!db.exists(), "the probe opened its database first");
}

#[test]
fn a_postgres_server_that_never_answers_fails_within_the_connect_timeout() {
    // Bound and never accepted: the kernel completes the TCP handshake and
    // no byte ever comes back.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "postgres://probe@127.0.0.1:{}/probe",
        silent.local_addr().expect("addr").port()
    );
    for line in [
        "probe https://127.0.0.1:1/ --db URL --rounds 1",
        "probe report --db URL",
    ] {
        let args = args_with(line, &[("URL", &url)]);
        let t = Instant::now();
        // Before the fix each hung for more than 40 s.
        let out = run_tlslab(&args, Duration::from_secs(20));
        let took = t.elapsed();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", show(&out));
        assert!(
            took < Duration::from_secs(12),
            "{args:?} took {took:?}; the connect timeout is 5 s"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no answer within 5s") && err.contains("127.0.0.1"),
            "{args:?}: {err}"
        );
        assert_no_panic(&out.stderr);
    }
    drop(silent);
}

/// The peak RSS (VmHWM, kB) of a running process, if it still runs.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[test]
fn a_large_body_is_counted_without_being_held() {
    const BODY: u64 = 100_000_000;
    let serve = Serve::start(&[]);
    let ca = serve.ca.clone().expect("ca");
    let dir = tempdir();
    let db = dir.path().join("p.sqlite");
    let url = serve.url(&format!("/bytes/{BODY}"));
    let line = "probe URL --cacert CA --db DB --rounds 1 --timeout 50s";
    let (ca, db) = (ca.to_str().expect("utf-8"), db.to_str().expect("utf-8"));
    let mut p = Proc::spawn(tlslab(args_with(
        line,
        &[("URL", &url), ("CA", ca), ("DB", db)],
    )));
    let pid = p.pid();
    let deadline = Instant::now() + LIMIT;
    let mut peak = 0;
    while p.try_status().is_none() {
        assert!(Instant::now() < deadline, "probe ran over {LIMIT:?}");
        if let Some(kb) = peak_rss_kb(pid) {
            peak = peak.max(kb);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let done = p.wait(Duration::from_secs(5));
    assert!(done.status.is_some_and(|s| s.success()), "{}", done.stderr);
    assert!(
        done.stdout.contains(&format!(" {BODY} B ")),
        "the body was not counted in full: {}",
        done.stdout
    );
    eprintln!("probe of a {BODY}-byte body: peak RSS {} MB", peak / 1024);
    // Before the fix the whole body was held: 268 MB for this run.
    assert!(
        peak > 0 && peak < 80 * 1024,
        "peak RSS {peak} kB for a {BODY}-byte body"
    );
}
