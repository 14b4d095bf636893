//! End-to-end tests of `tlslab cluster` (seed 000's Fig. 9): the quick run
//! with embedded tlslab nodes behind embedded tlslab dispatch; and, run by
//! .ci/run with `--ignored`, nginx nodes, HAProxy, and the Redis-shared
//! cache and shared ticket keys. Every run is bounded (`--cell`, reuse and
//! arm lists) and uses 127.0.0.1 ephemeral ports only.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{args, expect_ok, load_json, require, run_tlslab, tempdir};

const LIMIT: Duration = Duration::from_secs(300);

/// The cell of `mechanism`, `arm` at `reuse` (0–1).
fn cell<'a>(
    report: &'a serde_json::Value,
    mechanism: &str,
    arm: &str,
    reuse: f64,
) -> &'a serde_json::Value {
    report["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|c| {
            c["mechanism"] == mechanism
                && c["arm"] == arm
                && (c["reuse_requested"].as_f64().unwrap() - reuse).abs() < 1e-9
        })
        .unwrap_or_else(|| panic!("no cell {mechanism} {arm} {reuse}: {report:#}"))
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v:#}"))
}

fn run_cluster(dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let json = dir.join("cluster.json");
    let json_s = json.to_str().unwrap().to_string();
    let mut full = vec!["cluster", "--json", &json_s];
    full.extend_from_slice(args);
    let out = run_tlslab(&full, LIMIT);
    let text = expect_ok(&out);
    (text, load_json(&json))
}

/// The suites with an outside peer: `None` (a skip, see
/// [`common::require`]) without `peer`; else [`run_cluster`] at 80 % reuse,
/// 3 s cells, TLS 1.2 IDs and TLS 1.3 tickets, plus `args`.
fn peer_cluster(peer: &str, args: &[&str]) -> Option<(String, serde_json::Value)> {
    if !require(peer) {
        return None;
    }
    let dir = tempdir();
    let at_80 = self::args("--reuse 80 --cell 3s --mechanism tls12-id,tls13-ticket");
    Some(run_cluster(dir.path(), &[&at_80[..], args].concat()))
}

/// Session-aware routing at 80 % reuse sends ≥ 99 % of resumption attempts
/// to the node that holds the session and resumes about the requested
/// share; round-robin resumes clearly less; each cell's figures are there
/// and the JSON is complete.
#[test]
fn quick_run_session_aware_routes_and_round_robin_does_not() {
    let dir = tempdir();
    let line = "--quick --mechanism tls12-id,tls13-ticket --cell 2s -c 8";
    let (text, report) = run_cluster(dir.path(), &args(line));
    assert!(text.contains("Fig. 9 shape, tls12-id"), "{text}");
    assert!(text.contains("placement:"), "{text}");
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["nodes"], 3);
    assert_eq!(report["cells"].as_array().unwrap().len(), 2 * 2 * 2);
    for m in ["tls12-id", "tls13-ticket"] {
        let se = cell(&report, m, "session", 0.8);
        let rr = cell(&report, m, "round-robin", 0.8);
        assert_eq!(se["routing_efficiency_source"], "dispatcher");
        let eff = f(se, "routing_efficiency");
        assert!(eff >= 0.99, "{m}: session routing efficiency {eff}: {se:#}");
        let (se_res, rr_res) = (f(se, "resumption_achieved"), f(rr, "resumption_achieved"));
        assert!(se_res >= 0.75, "{m}: session resumed {se_res}: {se:#}");
        assert!(
            rr_res < 0.6 && rr_res < se_res - 0.2,
            "{m}: round-robin resumed {rr_res}, session {se_res}"
        );
        let rr_eff = f(rr, "routing_efficiency");
        assert!(rr_eff < 0.6, "{m}: round-robin routing efficiency {rr_eff}");
        for c in [se, rr] {
            assert!(
                f(c, "requests") > 0.0 && f(c, "throughput_rps") > 0.0,
                "{c:#}"
            );
            assert!(f(c, "cluster_cpu_us_per_request") > 0.0, "{c:#}");
            assert_eq!(c["node_cpu_s"].as_array().unwrap().len(), 3);
            assert_eq!(f(c, "errors"), 0.0, "{c:#}");
        }
        // Resumption saves server CPU.
        assert!(
            f(se, "cluster_cpu_us_per_request") < f(rr, "cluster_cpu_us_per_request"),
            "{m}: session {se:#} round-robin {rr:#}"
        );
        // At 0 % reuse nothing resumes.
        let zero = cell(&report, m, "session", 0.0);
        assert_eq!(f(zero, "resumed"), 0.0, "{zero:#}");
    }
    assert!(report["targets"].as_array().unwrap().len() >= 2);
}

/// Bad flags are usage errors (exit 2) that name the flag.
#[test]
fn bad_flags_are_usage_errors() {
    for (args, needle) in [
        (vec!["cluster", "--reuse", "120"], "--reuse"),
        (vec!["cluster", "--mechanism", "tls14"], "tls14"),
        (vec!["cluster", "--policy", "sticky"], "sticky"),
        (vec!["cluster", "--node-count", "1"], "--node-count"),
        (vec!["cluster", "--key", "dsa"], "--key"),
        (vec!["cluster", "--groups", "ffdhe9"], "--groups ffdhe9"),
        (
            vec!["cluster", "--h3", "--policy", "round-robin"],
            "--policy round-robin",
        ),
        (
            vec!["cluster", "--h3", "--mechanism", "tls12-id"],
            "tls13-ticket",
        ),
        (
            vec!["cluster", "--h3", "--nodes", "nginx"],
            "--nodes tlslab",
        ),
    ] {
        common::assert_usage_error(&args, needle, Duration::from_secs(30));
    }
}

/// The sharing arms with a real redis-server: at 80 % reuse round-robin
/// with a Redis-shared cache (TLS 1.2 IDs, TLS 1.3 stateful tickets; GETs
/// bounded at 100 ms) and with shared ticket keys (TLS 1.3 tickets)
/// resumes ≥ 95 % of the requested share.
#[test]
#[ignore = "needs redis-server; .ci/run runs it with --ignored"]
fn sharing_arms_resume_across_nodes() {
    let Some((text, report)) = peer_cluster(
        "redis-server",
        // Sharing, not the GET bound, is under test here (tests/redis.rs
        // tests the bound): a loaded CI machine misses 5 ms often.
        &args(
            "--policy round-robin --sharing none,redis-cache,shared-ticket-keys \
             --redis-timeout 100ms",
        ),
    ) else {
        return;
    };
    assert!(text.contains("rr+redis-cache"), "{text}");
    for (m, arm) in [
        ("tls12-id", "round-robin+redis-cache"),
        ("tls13-ticket", "round-robin+redis-cache"),
        ("tls13-ticket", "round-robin+shared-ticket-keys"),
    ] {
        let c = cell(&report, m, arm, 0.8);
        let r = f(c, "achieved_over_requested");
        assert!(r >= 0.95, "{m} {arm}: achieved/requested {r}: {c:#}");
        assert_eq!(f(c, "errors"), 0.0, "{c:#}");
    }
    // tls12-id has no ticket-key arm, and says so.
    let skipped = report["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["mechanism"] == "tls12-id" && s["arm"] == "round-robin+shared-ticket-keys"),
        "{report:#}"
    );
    let rr = cell(&report, "tls12-id", "round-robin", 0.8);
    assert!(f(rr, "resumption_achieved") < 0.6, "{rr:#}");
}

/// Three nginx nodes (own session cache zone and ticket key file each)
/// behind tlslab dispatch: session-aware routing resumes TLS 1.2 IDs and
/// TLS 1.3 tickets (routed by key name), round-robin does not; node CPU
/// comes from /proc.
#[test]
#[ignore = "needs nginx; .ci/run runs it with --ignored"]
fn nginx_nodes() {
    let Some((_, report)) = peer_cluster(
        "nginx",
        &[
            "--nodes", "nginx",
            // nginx's ssl_ecdh_curve, spelled for OpenSSL: nginx refuses
            // to start on a name it does not know.
            "--groups", "x25519",
        ],
    ) else {
        return;
    };
    assert_eq!(report["node_kind"], "nginx");
    assert_eq!(report["groups"], serde_json::json!(["x25519"]));
    for m in ["tls12-id", "tls13-ticket"] {
        let se = cell(&report, m, "session", 0.8);
        let rr = cell(&report, m, "round-robin", 0.8);
        assert!(f(se, "routing_efficiency") >= 0.99, "{m}: {se:#}");
        assert!(
            f(se, "resumption_achieved") > f(rr, "resumption_achieved") + 0.2,
            "{m}: {se:#} {rr:#}"
        );
        assert!(f(se, "cluster_cpu_us_per_request") > 0.0, "{se:#}");
        assert_eq!(f(se, "errors"), 0.0, "{se:#}");
    }
}

/// HAProxy in TCP mode: its stick-table recipe keeps TLS 1.2 session IDs
/// on their node (routing efficiency, from the nodes, well above
/// round-robin's) but not TLS 1.3 tickets.
#[test]
#[ignore = "needs haproxy; .ci/run runs it with --ignored"]
fn haproxy_dispatcher() {
    let Some((_, report)) = peer_cluster("haproxy", &["--dispatcher", "haproxy"]) else {
        return;
    };
    assert_eq!(report["dispatcher"], "haproxy");
    let se = cell(&report, "tls12-id", "session", 0.8);
    let rr = cell(&report, "tls12-id", "round-robin", 0.8);
    assert_eq!(se["routing_efficiency_source"], "nodes/client-offers");
    assert!(
        f(se, "resumption_achieved") > f(rr, "resumption_achieved") + 0.2,
        "{se:#} {rr:#}"
    );
    let t13 = cell(&report, "tls13-ticket", "session", 0.8);
    assert!(f(t13, "resumption_achieved") < 0.6, "{t13:#}");
    for c in [se, rr, t13] {
        assert_eq!(f(c, "errors"), 0.0, "{c:#}");
        assert!(f(c, "dispatcher_cpu_us_per_conn") > 0.0, "{c:#}");
    }
}

/// `cluster --h3 --quick`: the cluster over QUIC (HTTP/3 nodes with
/// QUIC-LB connection IDs behind `dispatch --udp`, a new client port per
/// connection). At 80 % reuse `session` and `blind` with ticket keys
/// shared through Redis resume about what the client offered; `blind` and
/// `cid` about 1/3 of it (3 nodes: the 4-tuple hash of a new port finds
/// the ticket's issuer one time in three). Loose bounds: CI is loaded.
#[test]
#[ignore = "needs redis-server (shared ticket keys); .ci/run runs it with --ignored"]
fn h3_quick_run_session_and_shared_keys_resume_blind_does_not() {
    if !require("redis-server") {
        return;
    }
    let dir = tempdir();
    let (text, report) = run_cluster(dir.path(), &args("--h3 --quick --cell 2s -c 8"));
    assert!(text.contains("tlslab dispatch --udp"), "{text}");
    assert!(text.contains("Fig. 9 shape, tls13-ticket"), "{text}");
    assert_eq!(report["h3"], true);
    assert_eq!(report["cells"].as_array().unwrap().len(), 4 * 2);
    let share = |c: &serde_json::Value| {
        let offered = f(c, "resumption_offered");
        assert!(offered > 0.5, "{c:#}");
        f(c, "resumption_achieved") / offered
    };
    for arm in ["session", "blind+shared-ticket-keys"] {
        let c = cell(&report, "tls13-ticket", arm, 0.8);
        let (offered, got) = (f(c, "resumption_offered"), f(c, "resumption_achieved"));
        assert!(
            (got - offered).abs() <= 0.05,
            "{arm}: resumed {got} of offered {offered}: {c:#}"
        );
    }
    let se = cell(&report, "tls13-ticket", "session", 0.8);
    assert!(f(se, "routing_efficiency") >= 0.97, "{se:#}");
    for arm in ["blind", "cid"] {
        let c = cell(&report, "tls13-ticket", arm, 0.8);
        let r = share(c);
        assert!(
            (0.1..=0.6).contains(&r),
            "{arm}: resumed {r} of the offered share: {c:#}"
        );
    }
    for c in report["cells"].as_array().unwrap() {
        assert_eq!(f(c, "errors"), 0.0, "{c:#}");
        assert!(f(c, "cluster_cpu_us_per_request") > 0.0, "{c:#}");
        assert!(f(c, "latency_p50_us") > 0.0, "{c:#}");
        assert_eq!(c["node_requests"].as_array().unwrap().len(), 3);
    }
    // At 0 % reuse nothing resumes.
    assert_eq!(
        f(cell(&report, "tls13-ticket", "session", 0.0), "resumed"),
        0.0
    );
}
