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
        // Issue 29: these were accepted as a 384 B queue, a clap error
        // about '-5', and a 1.07 GB read of /dev/zero.
        ("path --queue 18446744073709552kB", "too large"),
        ("path --delay -5ms", "cannot be negative"),
        ("path --jitter -1ms", "cannot be negative"),
        ("path --up delay=-5ms", "cannot be negative"),
        ("path --uplink-trace /dev/zero", "16 MiB"),
        ("path --pcap-size 10MB", "--pcap"),
        ("path --pcap /tmp/x.pcapng --pcap-size 10kB", "1MB"),
        ("path --pcap /tmp/x.pcapng --pcap-files 0", "pcap-files"),
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

/// The processes inside a namespace (`ip netns pids`).
fn netns_pids(name: &str) -> Vec<u32> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Returns true if and only if process `pid` is gone or a zombie.
fn dead(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_none_or(|st| st == "Z" || st == "X")
    })
}

/// Polls (≤ `limit`) until every pid is dead; the ones still alive.
fn alive_after(pids: &[u32], limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| !dead(p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Issue 29: after `kill -9` of `tlslab path`, its server and client
// commands kept running, orphaned to PID 1.
#[test]
fn path_kill_9_of_tlslab_path_ends_its_commands() {
    if !root("path_kill_9_of_tlslab_path_ends_its_commands") {
        return;
    }
    let p = common::Proc::spawn(tlslab(args("path --delay 1ms -- sleep 300 ::: sleep 300")));
    let (srv, cli) = read_netns_names(&p);
    let pids = common::poll(
        Duration::from_secs(10),
        || [netns_pids(&srv), netns_pids(&cli)],
        |[s, c]| !s.is_empty() && !c.is_empty(),
    );
    let pids: Vec<u32> = pids.concat();
    assert_eq!(pids.len(), 2, "{pids:?}");
    p.signal(nix::sys::signal::Signal::SIGKILL);
    let alive = alive_after(&pids, Duration::from_secs(10));
    // (A survivor holds the output pipe: end it, or the wait below hangs.)
    for &pid in &alive {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    // Reaped, the run is dead: the namespaces outlive it and --cleanup
    // removes them (and ends what is left in them, so a failure here
    // leaves nothing running).
    let _ = p.wait(Duration::from_secs(5));
    let out = run_tlslab(&["path", "--cleanup"], LIMIT);
    assert!(alive.is_empty(), "still running after kill -9: {alive:?}");
    common::expect_ok(&out);
    assert!(!netns_exists(&srv) && !netns_exists(&cli));
}

// Issue 29: `path --cleanup` removed a dead run's namespaces but left the
// processes inside them running.
#[test]
fn path_cleanup_kills_processes_left_in_a_dead_runs_namespace() {
    if !root("path_cleanup_kills_processes_left_in_a_dead_runs_namespace") {
        return;
    }
    // A run that died: pid 4194305 is above Linux's largest pid_max.
    let dead_run = format!("{}4194305-1-0-srv", tlslab_path::PREFIX);
    let ok = std::process::Command::new("ip")
        .args(["netns", "add", &dead_run])
        .status()
        .unwrap();
    assert!(ok.success());
    let mut left = std::process::Command::new("ip")
        .args(["netns", "exec", &dead_run, "sleep", "300"])
        .spawn()
        .unwrap();
    let pid = left.id();
    common::poll(
        Duration::from_secs(10),
        || netns_pids(&dead_run),
        |p| p.contains(&pid),
    );
    let out = run_tlslab(&["path", "--cleanup"], LIMIT);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = left.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() >= deadline {
            let _ = left.kill();
            let _ = left.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = common::expect_ok(&out);
    assert!(
        status.is_some(),
        "the process in the dead run's namespace survived: {text}"
    );
    assert!(!netns_exists(&dead_run), "{text}");
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
