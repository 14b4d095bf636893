//! `tlslab path` (crates/path): the packet-level WAN path against the
//! protocol arithmetic, and its clean-up on every way out.
//!
//! Fast (every `cargo test`): usage errors; the no-root error pointing to
//! `tlslab relay`; as root, the CLI end to end (serve and load across the
//! path), removal on SIGINT, after `kill -9` of a child and on a panic, and
//! `--cleanup` of a dead run's namespaces.
//!
//! The protocol arithmetic (RTTs, goodput, loss, traces) is in
//! `path_timing.rs`.
//!
//! Without root the root tests skip loudly (a failure under CI=true).
//! Addresses: 10.201.0.1/2, inside the namespaces each test creates.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::netpath::{netns_exists, root, root_tempdir, serve_across, start, unprivileged};
use common::{args, run_tlslab, show, tlslab};
use tlslab_path::Path;

const LIMIT: Duration = Duration::from_secs(60);

// ---- fast: usage, privileges, clean-up -------------------------------------

#[test]
fn path_usage_errors_exit_2_before_any_work() {
    for (line, want) in [
        ("path --delay 25", "duration"),
        ("path --queue 0pkt", "queue"),
        ("path --loss 150%", "loss"),
        ("path --up colour=red", "unknown path key"),
        ("path --ge 1%", "Gilbert"),
        (
            "path --uplink-trace /nonexistent/trace",
            "cannot read the trace",
        ),
        ("path -- sleep 1", ":::"),
        ("path -- sleep 1 :::", "both"),
    ] {
        common::assert_usage_error(&args(line), want, LIMIT);
    }
}

#[test]
fn path_without_root_says_so_and_points_to_relay() {
    let Some(mut cmd) = unprivileged("path_without_root_says_so_and_points_to_relay") else {
        return;
    };
    cmd.args(["path", "--delay", "5ms", "--", "true", ":::", "true"]);
    let out = common::run(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs root") && err.contains("tlslab relay"),
        "{err}"
    );
}

fn read_netns_names(p: &common::Proc) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = p.stderr_text();
        let names: Vec<String> = text
            .split_whitespace()
            .filter(|w| w.starts_with(tlslab_path::PREFIX))
            .map(|w| w.trim_end_matches([',', ';']).to_string())
            .collect();
        if names.len() >= 2 {
            return (names[0].clone(), names[1].clone());
        }
        assert!(Instant::now() < deadline, "no namespace names in: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `tlslab path` run ended with exit 1, saying `says`, and left neither
/// of its namespaces behind.
fn failed_and_removed(done: &common::Finished, says: &str, srv: &str, cli: &str) {
    assert_eq!(
        done.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains(says), "{}", done.stderr);
    assert!(
        !netns_exists(srv) && !netns_exists(cli),
        "namespaces left behind"
    );
}

#[test]
fn path_sigint_removes_namespaces_and_stops_the_commands() {
    let Some(dir) = root_tempdir("path_sigint_removes_namespaces_and_stops_the_commands") else {
        return;
    };
    let marker = dir.path().join("client-started");
    let script = format!("touch {}; exec sleep 30", marker.display());
    let p = common::Proc::spawn(tlslab([
        "path", "--delay", "1ms", "--", "sleep", "30", ":::", "sh", "-c", &script,
    ]));
    let (srv, cli) = read_netns_names(&p);
    assert!(netns_exists(&srv) && netns_exists(&cli));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the client never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    p.signal(nix::sys::signal::Signal::SIGINT);
    let done = p.wait(Duration::from_secs(20));
    assert!(
        done.stderr.contains("path up (client → server)"),
        "{}",
        done.stderr
    );
    failed_and_removed(&done, "interrupted", &srv, &cli);
}

#[test]
fn path_survives_kill_9_of_a_child_and_removes_namespaces() {
    if !root("path_survives_kill_9_of_a_child_and_removes_namespaces") {
        return;
    }
    let mut cmd = args("path --delay 1ms -- sleep 30 ::: sh -c");
    cmd.push("sleep 0.3; kill -9 $$");
    let p = common::Proc::spawn(tlslab(cmd));
    let (srv, cli) = read_netns_names(&p);
    let done = p.wait(Duration::from_secs(30));
    failed_and_removed(&done, "killed by signal 9", &srv, &cli);
}

#[test]
fn path_removes_namespaces_on_a_panic() {
    let Some(probe) = start("path_removes_namespaces_on_a_panic", "delay=1ms") else {
        return;
    };
    drop(probe);
    let files = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = files.clone();
    let r = std::panic::catch_unwind(move || {
        let p = Path::start(&"delay=1ms".parse().unwrap()).unwrap();
        seen.lock().unwrap().extend(p.netns_files());
        panic!("a test panic with the path up");
    });
    assert!(r.is_err());
    let files = files.lock().unwrap();
    assert_eq!(files.len(), 2);
    for f in files.iter() {
        assert!(!f.exists(), "{} left behind", f.display());
    }
}

#[test]
fn path_cleanup_removes_namespaces_of_dead_runs_only() {
    if !root("path_cleanup_removes_namespaces_of_dead_runs_only") {
        return;
    }
    // A run that died (pid 4194304 is above Linux's largest pid_max) and
    // one that lives (this process, with a wrong start time: a reused pid).
    let dead = format!("{}4194304-1-0-srv", tlslab_path::PREFIX);
    let reused = format!("{}{}-1-0-cli", tlslab_path::PREFIX, std::process::id());
    // Other tests here start paths, and every start removes stale
    // namespaces too: start ours first so only a parallel test can race.
    let live = start("cleanup", "delay=1ms").expect("privileged");
    let h = live.handle();
    for n in [&dead, &reused] {
        let ok = std::process::Command::new("ip")
            .args(["netns", "add", n])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let out = run_tlslab(&["path", "--cleanup"], LIMIT);
    let text = common::expect_ok(&out);
    assert!(!netns_exists(&dead) && !netns_exists(&reused), "{text}");
    assert!(
        text.contains("removed the stale namespace") || text.contains("no stale"),
        "{text}"
    );
    assert!(
        netns_exists(h.server_netns()),
        "a live run's namespace was removed"
    );
    drop(live);
    assert!(!netns_exists(h.server_netns()));
}

#[test]
fn path_cli_carries_tlslab_serve_and_load_and_reports_counters() {
    let Some(dir) = root_tempdir("path_cli_carries_tlslab_serve_and_load_and_reports_counters")
    else {
        return;
    };
    let json = dir.path().join("path.json");
    let out = common::run(
        tlslab(serve_across(
            &["--delay", "5ms", "--json", json.to_str().unwrap()],
            &args("load https://10.201.0.1:8443/health --insecure -c 1 -n 5"),
        )),
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    let v = common::load_json(&json);
    for d in ["up", "down"] {
        assert!(
            common::num(&v, &format!("{d}/packets_forwarded")) >= 10.0,
            "{v}"
        );
        assert_eq!(common::num(&v, &format!("{d}/dropped_loss")), 0.0);
        assert!(common::num(&v, &format!("{d}/cpu_per_packet_ns")) > 0.0);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("queueing delay p50"), "{err}");
}

// ---- root suite: the protocol arithmetic -----------------------------------
