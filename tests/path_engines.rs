//! `probe` and `cluster` across the packet-level WAN path (`--path SPEC`,
//! crates/path), and `probe` under `tlslab path -- SERVER ::: CLIENT`.
//!
//! Fast (every `cargo test`): a bad spec and flags that do not go with
//! `--path` are usage errors (exit 2) before any work; without root the
//! error points to `tlslab relay`.
//!
//! `#[ignore]` (root; run by .ci/run, `--release --test-threads=1`): the
//! probe's TCP connect reads one RTT and its handshakes and GETs their
//! round-trip counts, within a quarter RTT; a cluster run completes over
//! the path with its report attached, its connect one RTT and its
//! latency at least the three round trips of connect, TLS 1.3 handshake
//! and GET; over HTTP/3 (`--transport both`, QUIC across the path) the
//! full and resumed QUIC handshakes, the 0-RTT GET's first byte and the
//! 1-RTT GET each read one RTT (asserted within 1 to 1.6 RTT); nginx
//! nodes behind HAProxy and a Redis-shared cache run in the
//! server namespace too.
//!
//! Without root the root tests skip loudly (a failure under CI=true).
//! Addresses: 10.201.0.1/2, inside the namespaces each run creates.

mod common;

use std::time::Duration;

use common::netpath::{root, root_tempdir, serve_across, unprivileged};
use common::{args, args_with, argv, assert_usage_error, run_tlslab, show, skip_or_fail, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

// ---- fast: usage and privilege ---------------------------------------------

#[test]
fn path_flags_of_probe_and_cluster_are_checked_before_any_work() {
    let dir = tempdir();
    let db = dir.path().join("p.sqlite");
    let db = db.to_str().unwrap();
    for (line, want) in [
        ("probe --path delay=25 --db DB", "duration"),
        ("probe --path colour=red --db DB", "keys: delay"),
        (
            "probe --path delay=5ms https://example.com/ --db DB",
            "tlslab path",
        ),
        (
            "probe --path delay=5ms --insecure --db DB",
            "--insecure does not go with --path",
        ),
        (
            "probe --path delay=5ms --db postgres://u@127.0.0.1/p",
            "SQLite",
        ),
        ("probe --path delay=5ms --rounds 0 --db DB", "--rounds"),
        ("cluster --path loss=150%", "loss"),
        ("cluster --path delay=5ms --node-count 1", "2 nodes"),
        ("lab --path queue=0pkt", "queue"),
    ] {
        let args = args_with(line, &[("DB", db)]);
        assert_usage_error(&args, want, LIMIT);
    }
    assert!(
        !dir.path().join("p.sqlite").exists(),
        "a usage error created the database"
    );
}

#[test]
fn probe_and_cluster_over_a_path_without_root_point_to_relay() {
    let test = "probe_and_cluster_over_a_path_without_root_point_to_relay";
    let dir = tempdir();
    // Writable by user nobody, for the database the probe must not create.
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(
        &out_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let db = out_dir.join("p.sqlite");
    let json = out_dir.join("c.json");
    let (db_s, json_s) = (db.to_str().unwrap(), json.to_str().unwrap());
    for args in [
        args_with("probe --path delay=5ms --rounds 1 --db DB", &[("DB", db_s)]),
        args_with(
            "cluster --quick --path delay=5ms --json J",
            &[("J", json_s)],
        ),
    ] {
        let Some(mut cmd) = unprivileged(test) else {
            return;
        };
        cmd.args(&args);
        let out = common::run(cmd, LIMIT);
        assert_eq!(out.status.code(), Some(1), "{args:?}\n{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("needs root") && err.contains("tlslab relay"),
            "{args:?}: {err}"
        );
    }
    assert!(
        !db.exists(),
        "the probe created its database before failing"
    );
}

// ---- root: the round trips -------------------------------------------------

/// Probe rounds per run.
const ROUNDS: &str = "7";

/// `head`, then [`ROUNDS`] rounds 100 ms apart into the database `db`.
fn probe<'a>(head: &[&'a str], db: &'a str) -> Vec<&'a str> {
    let mut a = head.to_vec();
    a.extend(["--rounds", ROUNDS, "--interval", "100ms", "--db", db]);
    a
}

/// The probe's samples in `db`.
fn samples(db: &std::path::Path) -> Vec<tlslab_probe::Sample> {
    let store = tlslab_probe::open_store(db.to_str().unwrap(), false).expect("the probe's db");
    store.samples(None, None).expect("samples")
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median of a sample field, ms.
fn median_ms(s: &[tlslab_probe::Sample], f: fn(&tlslab_probe::Sample) -> Option<i64>) -> f64 {
    median(s.iter().filter_map(f).map(|us| us as f64 / 1e3).collect())
}

/// Asserts `ms` is `rtts` round trips of `rtt` ms, within a quarter RTT.
/// An unoptimised build (a plain `cargo test`) adds up to 10 ms of
/// handshake CPU above it (6 ms seen for a TLS 1.2 ECDSA handshake).
fn rtts(what: &str, ms: f64, rtts: f64, rtt: f64) {
    let cpu = if cfg!(debug_assertions) { 10.0 } else { 0.0 };
    assert!(
        ms >= rtts * rtt - 0.25 * rtt && ms <= rtts * rtt + 0.25 * rtt + cpu,
        "{what}: {ms:.2} ms, expected {rtts} RTT of {rtt} ms (± a quarter RTT, + {cpu} ms)"
    );
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn probe_over_a_path_reads_one_rtt_connect_and_the_handshake_round_trips() {
    if !root("probe_over_a_path_reads_one_rtt_connect_and_the_handshake_round_trips") {
        return;
    }
    const RTT: f64 = 20.0;
    let dir = tempdir();
    // TLS 1.3: full handshake 1 RTT; TLS 1.2: full 2, resumed 1; a GET 1.
    for (tls, full) in [("1.3", 1.0), ("1.2", 2.0)] {
        let db = dir.path().join(format!("probe-{tls}.sqlite"));
        let args = probe(
            &argv(&["probe", "--tls", tls], "--path delay=10ms"),
            db.to_str().unwrap(),
        );
        let out = run_tlslab(&args, LIMIT);
        assert!(out.status.success(), "{}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("server (embedded tlslab serve")
                && text.contains("path down (server → client)"),
            "no server or path report: {text}"
        );
        let s = samples(&db);
        assert_eq!(s.len().to_string(), ROUNDS, "{text}");
        assert!(s.iter().all(|x| x.error_kind.is_none()), "{s:?}");
        assert!(
            s.iter().all(|x| x.resumption_accepted == Some(true)),
            "{s:?}"
        );
        let connect = median_ms(&s, |x| x.connect_us);
        eprintln!(
            "TLS {tls}: connect {connect:.2} ms, full {:.2} ms, resumed {:.2} ms, GET {:.2} ms",
            median_ms(&s, |x| x.tls_full_us),
            median_ms(&s, |x| x.tls_resumed_us),
            median_ms(&s, |x| x.get_us)
        );
        rtts("TCP connect", connect, 1.0, RTT);
        rtts(
            "full handshake",
            median_ms(&s, |x| x.tls_full_us),
            full,
            RTT,
        );
        let resumed = median_ms(&s, |x| x.tls_resumed_us);
        rtts("resumed handshake", resumed, 1.0, RTT);
        rtts("GET", median_ms(&s, |x| x.get_us), 1.0, RTT);
        // The probe's own count of the handshake's round trips.
        for x in &s {
            assert_eq!(x.full_handshake_round_trips, Some(full as i64), "{x:?}");
        }
    }
}

/// Asserts `ms` is between `lo` and `hi` round trips of `rtt` ms (and a
/// debug build's handshake CPU, as in [`rtts`]).
fn within_rtts(what: &str, ms: f64, lo: f64, hi: f64, rtt: f64) {
    let cpu = if cfg!(debug_assertions) { 10.0 } else { 0.0 };
    assert!(
        ms >= lo * rtt && ms <= hi * rtt + cpu,
        "{what}: {ms:.2} ms, expected {lo} to {hi} RTT of {rtt} ms (+ {cpu} ms)"
    );
}

/// Issue 34's target: over HTTP/3 across the path at 50 ms RTT, the full
/// QUIC handshake, the resumed one, the 0-RTT GET's first byte (from the
/// first packet: there is no connect) and the 1-RTT GET each take one
/// round trip. Asserted loosely (1 to 1.6 RTT) on a shared machine; the
/// figures are printed (BENCHMARKS.md has them).
#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn probe_over_h3_across_a_path_reads_one_rtt_per_phase() {
    if !root("probe_over_h3_across_a_path_reads_one_rtt_per_phase") {
        return;
    }
    const RTT: f64 = 50.0;
    let dir = tempdir();
    let db = dir.path().join("probe-h3.sqlite");
    let args = probe(
        &argv(&["probe"], "--transport both --path delay=25ms"),
        db.to_str().unwrap(),
    );
    let out = run_tlslab(&args, LIMIT);
    assert!(out.status.success(), "{}", show(&out));
    let all = samples(&db);
    let (h3, tcp): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|x| x.transport == tlslab_probe::Transport::H3);
    assert_eq!(h3.len().to_string(), ROUNDS, "{h3:?}");
    assert_eq!(tcp.len().to_string(), ROUNDS, "{tcp:?}");
    assert!(h3.iter().all(|x| x.error_kind.is_none()), "{h3:?}");
    assert!(h3.iter().all(|x| x.connect_us.is_none()), "{h3:?}");
    assert!(
        h3.iter()
            .all(|x| x.resumption_accepted == Some(true) && x.early_data_accepted == Some(true)),
        "{h3:?}"
    );
    let full = median_ms(&h3, |x| x.tls_full_us);
    let resumed = median_ms(&h3, |x| x.tls_resumed_us);
    let zero = median_ms(&h3, |x| x.zero_rtt_ttfb_us);
    let get = median_ms(&h3, |x| x.get_us);
    let ttfb = median_ms(&h3, |x| x.ttfb_us);
    eprintln!(
        "HTTP/3 at {RTT} ms RTT (medians of {ROUNDS}): full QUIC handshake {full:.2} ms, resumed \
         {resumed:.2} ms, 0-RTT GET first byte {zero:.2} ms, 1-RTT GET {get:.2} ms (first byte \
         {ttfb:.2} ms); TCP connect {:.2} ms, TLS full {:.2} ms, GET {:.2} ms",
        median_ms(&tcp, |x| x.connect_us),
        median_ms(&tcp, |x| x.tls_full_us),
        median_ms(&tcp, |x| x.get_us)
    );
    within_rtts("full QUIC handshake", full, 1.0, 1.6, RTT);
    within_rtts("resumed QUIC handshake", resumed, 1.0, 1.6, RTT);
    within_rtts("0-RTT GET first byte", zero, 1.0, 1.6, RTT);
    within_rtts("1-RTT GET", get, 1.0, 1.6, RTT);
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn probe_under_tlslab_path_times_an_outside_server_across_it() {
    let Some(dir) = root_tempdir("probe_under_tlslab_path_times_an_outside_server_across_it")
    else {
        return;
    };
    let db = dir.path().join("wrapped.sqlite");
    let out = common::run(
        common::tlslab(serve_across(
            &["--delay", "10ms"],
            &probe(
                &["probe", "https://10.201.0.1:8443/health", "--insecure"],
                db.to_str().unwrap(),
            ),
        )),
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    let s = samples(&db);
    assert_eq!(s.len().to_string(), ROUNDS);
    rtts("TCP connect", median_ms(&s, |x| x.connect_us), 1.0, 20.0);
    rtts("GET", median_ms(&s, |x| x.get_us), 1.0, 20.0);
}

/// The cell of `v` whose `key` is `value`.
fn cell<'a>(v: &'a serde_json::Value, key: &str, value: &str) -> &'a serde_json::Value {
    v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[key] == value)
        .unwrap_or_else(|| panic!("no cell with {key} {value}: {v}"))
}

/// Runs `tlslab cluster` of `mechanism` at 80 % reuse with `extra` over
/// `delay=5ms` (RTT 10 ms), two nodes, one client, 600 ms cells; its JSON.
fn cluster_over_path(test: &str, mechanism: &str, extra: &[&str]) -> Option<serde_json::Value> {
    if !root(test) {
        return None;
    }
    let dir = tempdir();
    let json = dir.path().join("cluster.json");
    let line = "cluster --quick --path delay=5ms --cell 600ms -c 1 --node-count 2 --mechanism M \
                --reuse 80 --json J";
    let args = args_with(line, &[("M", mechanism), ("J", json.to_str().unwrap())]);
    let out = run_tlslab(&[&args[..], extra].concat(), LIMIT);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Across a packet-level WAN path"), "{text}");
    let v = common::load_json(&json);
    assert!(
        common::num(&v, "wan_path/up/packets_forwarded") > 20.0
            && common::num(&v, "wan_path/down/packets_forwarded") > 20.0,
        "{v}"
    );
    assert_eq!(common::num(&v, "wan_path/down/dropped_loss"), 0.0);
    for c in v["cells"].as_array().unwrap() {
        assert!(common::num(c, "requests") >= 5.0, "{c}");
        assert_eq!(common::num(c, "errors"), 0.0, "{c}");
        let connect = common::num(c, "connect_p50_us") / 1e3;
        let latency = common::num(c, "latency_p50_us") / 1e3;
        eprintln!(
            "{}: connect p50 {connect:.2} ms, latency p50 {latency:.2} ms",
            c["arm"]
        );
        rtts("connect to the dispatcher", connect, 1.0, 10.0);
        // One request per connection: connect, a handshake (one round
        // trip or more) and the GET.
        assert!(latency >= 3.0 * 10.0 - 2.5, "{c}");
        // Nodes and dispatcher are on the server end; the path's CPU and
        // the nodes' are measured apart.
        assert!(common::num(c, "cluster_cpu_us_per_request") > 0.0, "{c}");
    }
    Some(v)
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn cluster_over_a_path_runs_every_server_part_on_the_server_end() {
    let Some(v) = cluster_over_path(
        "cluster_over_a_path_runs_every_server_part_on_the_server_end",
        "tls13-ticket",
        &["--policy", "session"],
    ) else {
        return;
    };
    let c = cell(&v, "arm", "session");
    // Session-aware dispatch read the resumption attempts across the path.
    assert!(common::num(c, "resumption_achieved") > 0.5, "{c}");
    assert_eq!(c["routing_efficiency_source"], "dispatcher");
}

#[test]
#[ignore = "root; peers; run by .ci/run with --release --test-threads=1"]
fn cluster_over_a_path_starts_nginx_haproxy_and_redis_on_the_server_end() {
    let test = "cluster_over_a_path_starts_nginx_haproxy_and_redis_on_the_server_end";
    for tool in ["nginx", "haproxy"] {
        if !common::have(tool) {
            skip_or_fail(test, &format!("{tool} is not installed"));
            return;
        }
    }
    let Some(v) = cluster_over_path(
        test,
        "tls12-id",
        &args("--nodes nginx --dispatcher haproxy --policy session"),
    ) else {
        return;
    };
    let session = cell(&v, "arm", "session");
    assert!(
        common::num(session, "resumption_achieved") > 0.5,
        "{session}"
    );
    if !common::have("redis-server") {
        skip_or_fail(test, "redis-server is not installed");
        return;
    }
    let v = cluster_over_path(
        test,
        "tls12-id",
        &args("--policy round-robin --sharing redis-cache"),
    )
    .expect("root was there a moment ago");
    let c = cell(&v, "sharing", "redis-cache");
    assert!(common::num(c, "redis_gets/hits") > 0.0, "{c}");
}
