//! Admission control of QUIC connection attempts on 127.0.0.1 (issue
//! 33): `serve --h3 --admission session` admits an HTTP/3 client that
//! resumes and sheds a new one, as `--quic-shed-with` says, with the
//! decisions on `/metrics` by transport, and a returning client (a
//! NEW_TOKEN token) ahead of new ones; the `retry-threshold` policy sends
//! Retry once handshakes from unvalidated addresses are half-open; and the
//! usage errors of the flags.

mod common;

use std::time::Duration;

use common::load::{load_ok, load_run};
use common::{Metrics, Serve, args_with, num, tempdir};

const LIMIT: Duration = Duration::from_secs(60);

/// `tlslab load URL --h3 --cacert CA LINE` (LINE's words) with a JSON
/// report, which must succeed with no errors.
fn load(s: &Serve, line: &str) -> serde_json::Value {
    let dir = tempdir();
    let json = dir.path().join("load.json");
    let url = s.url("/bytes/100");
    load_ok(&json, &h3_args(s, &url, line), line, LIMIT).1
}

/// `URL --h3 --cacert CA --no-progress` and LINE's words.
fn h3_args<'a>(s: &'a Serve, url: &'a str, line: &'a str) -> Vec<&'a str> {
    let mut args = vec![url, "--h3", "--cacert", s.ca_str(), "--no-progress"];
    args.extend(common::args(line));
    args
}

/// The same, expected to fail: its report, if it wrote one, and stderr.
fn load_failing(s: &Serve, line: &str) -> (Option<serde_json::Value>, String) {
    let dir = tempdir();
    let json = dir.path().join("load.json");
    let url = s.url("/bytes/100");
    let (out, report) = load_run(&json, &h3_args(s, &url, line), LIMIT);
    common::assert_no_panic(&out.stderr);
    (report, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `tlslab_admission_decisions_total{transport,kind,decision}`.
fn decisions(m: &Metrics, transport: &str, kind: &str, decision: &str) -> f64 {
    m.count(
        "tlslab_admission_decisions_total",
        &[
            ("transport", transport),
            ("kind", kind),
            ("decision", decision),
        ],
    )
}

fn shed(m: &Metrics, action: &str) -> f64 {
    m.count(
        "tlslab_transport_admission_shed_total",
        &[("transport", "quic"), ("action", action)],
    )
}

/// `serve --h3 --admission session` with a budget of one full handshake
/// (then one per 20 s, longer than a test), stateful tickets, and `extra`.
fn one_full_handshake_budget(extra: &[&str]) -> Serve {
    let mut args = vec![
        "--tickets",
        "off",
        "--h3",
        "--admission",
        "session",
        "--admission-fixed-limit",
        "0.05/s",
    ];
    args.extend_from_slice(extra);
    Serve::start(&args)
}

/// A server with `session` admission over TCP and QUIC whose budget is
/// one full handshake (then one per 20 s, longer than the test): the
/// first HTTP/3 client's full handshake is admitted and its resumptions
/// must be; a new client after it must be shed by `how`.
fn a_resumed_client_is_admitted_and_a_new_one_shed(how: &str) -> Metrics {
    let s = one_full_handshake_budget(&["--quic-shed-with", how]);
    // One full handshake (the budget's one), then 11 resumptions.
    let r = load(&s, "--reuse 100 -c 1 -n 12");
    assert_eq!(num(&r, "requests/succeeded"), 12.0, "{r:#}");
    assert_eq!(num(&r, "transport/full/count"), 1.0, "{r:#}");
    assert_eq!(num(&r, "transport/resumed/count"), 11.0, "{r:#}");
    // New clients: no budget left. Refused or retried, they fail; ignored,
    // they never hear from the server (`load` says so and writes no report).
    let (r, stderr) = load_failing(&s, "--reuse 0 -c 1 -n 2 --timeout 1500ms");
    match r {
        Some(r) => assert_eq!(num(&r, "requests/succeeded"), 0.0, "{how}: {r:#}"),
        None => assert!(
            how == "ignore" && stderr.contains("no QUIC server answered"),
            "{how}: {stderr}"
        ),
    }
    let m = s.metrics();
    let text = s.metrics_text();
    assert_eq!(decisions(&m, "quic", "full", "admitted"), 1.0, "{text}");
    assert!(
        decisions(&m, "quic", "resume", "admitted") >= 11.0,
        "{text}"
    );
    assert_eq!(decisions(&m, "quic", "resume", "shed"), 0.0, "{text}");
    assert!(decisions(&m, "quic", "full", "shed") >= 2.0, "{text}");
    // Nothing came over TCP.
    assert_eq!(decisions(&m, "tcp", "full", "admitted"), 0.0, "{text}");
    assert_eq!(decisions(&m, "tcp", "full", "shed"), 0.0, "{text}");
    // The ClientHello reader ran on every attempt's Initials.
    assert!(
        m.count("tlslab_transport_hello_read_datagrams_total", &[]) >= 14.0,
        "{text}"
    );
    // No handshake was started for a shed attempt.
    assert_eq!(m.quic_handshakes("full"), 1.0, "{text}");
    m
}

/// A returning client goes ahead of new ones: with a budget of one full
/// handshake, a client that never resumes makes its first full handshake
/// on the budget and its second, whose Initial carries the NEW_TOKEN token
/// the first connection got, on a borrowed one; a new client (a new
/// process: no token) after it is shed.
#[test]
fn session_admission_over_quic_admits_a_returning_client_ahead_of_a_new_one() {
    let s = one_full_handshake_budget(&[]);
    let r = load(&s, "--reuse 0 -c 1 -n 2");
    assert_eq!(num(&r, "requests/succeeded"), 2.0, "{r:#}");
    assert_eq!(num(&r, "transport/full/count"), 2.0, "{r:#}");
    let (r, stderr) = load_failing(&s, "--reuse 0 -c 1 -n 1 --timeout 1500ms");
    let r = r.unwrap_or_else(|| panic!("a refused client writes its report: {stderr}"));
    assert_eq!(num(&r, "requests/succeeded"), 0.0, "{r:#}");
    let m = s.metrics();
    let text = s.metrics_text();
    assert_eq!(decisions(&m, "quic", "full", "admitted"), 2.0, "{text}");
    assert_eq!(
        m.count("tlslab_admission_returning_ahead_total", &[]),
        1.0,
        "{text}"
    );
    assert!(decisions(&m, "quic", "full", "shed") >= 1.0, "{text}");
    assert_eq!(m.quic_handshakes("full"), 2.0, "{text}");
}

#[test]
fn session_admission_over_quic_refuses_a_new_client_and_admits_a_resumed_one() {
    let m = a_resumed_client_is_admitted_and_a_new_one_shed("refuse");
    assert!(shed(&m, "refuse") >= 2.0);
    assert_eq!(shed(&m, "retry") + shed(&m, "ignore"), 0.0);
}

#[test]
fn session_admission_over_quic_sends_a_retry_then_refuses_the_validated_attempt() {
    let m = a_resumed_client_is_admitted_and_a_new_one_shed("retry");
    // Each new client gets a Retry, answers it with the token, and its
    // validated attempt, which cannot be retried again, is refused.
    assert!(shed(&m, "retry") >= 2.0);
    assert!(shed(&m, "refuse") >= 2.0);
    assert!(m.count("tlslab_transport_retries_total", &[("transport", "quic")]) >= 2.0);
    assert_eq!(shed(&m, "ignore"), 0.0);
}

#[test]
fn session_admission_over_quic_ignores_a_new_client() {
    let m = a_resumed_client_is_admitted_and_a_new_one_shed("ignore");
    // The client retransmits its Initial after each probe timeout: every
    // copy is a new attempt, ignored again.
    assert!(shed(&m, "ignore") >= 2.0);
    assert_eq!(shed(&m, "refuse") + shed(&m, "retry"), 0.0);
}

/// HAProxy's rule: with one handshake from an unvalidated address
/// half-open (a flood of Initials that never continue), every new
/// unvalidated attempt gets a Retry; the real client follows it and is
/// served.
#[test]
fn retry_threshold_retries_once_handshakes_are_half_open() {
    let s = Serve::start(&["--h3", "--quic-retry-threshold", "1"]);
    let r = load(
        &s,
        "-c 1 -d 2s --flood valid --flood-rate 50 --flood-max 100 --confirm-flood",
    );
    assert!(num(&r, "requests/succeeded") > 0.0, "{r:#}");
    assert!(num(&r, "transport/flood/received/retry") > 0.0, "{r:#}");
    let m = s.metrics();
    let text = s.metrics_text();
    assert!(
        m.count("tlslab_transport_retries_total", &[("transport", "quic")]) >= 50.0,
        "{text}"
    );
    // The flood's first Initials hold handshakes half-open (they never
    // continue; the handshake timeout ends them).
    assert!(
        m.count("tlslab_transport_half_open", &[("transport", "quic")]) >= 1.0,
        "{text}"
    );
}

#[test]
fn bad_quic_admission_flags_are_usage_errors() {
    let cases = [
        ("serve --quic-shed-with ignore", "need --h3"),
        ("serve --quic-admission session", "need --h3"),
        ("serve --h3 --quic-admission session", "--admission session"),
        ("serve --h3 --quic-shed-with retry", "--admission session"),
        (
            "serve --h3 --admission static --max-handshakes-in-flight 5",
            "--quic-max-connections",
        ),
        (
            "serve --h3 --quic-admission static",
            "--quic-max-connections",
        ),
        (
            "serve --h3 --quic-admission retry-threshold",
            "--quic-retry-threshold N",
        ),
        ("serve --h3 --quic-retry-threshold 0", "at least 1"),
        (
            "serve --h3 --quic-retry-threshold 4 --quic-retry always",
            "drop --quic-retry",
        ),
        (
            "serve --h3 --admission session --quic-admission off --quic-retry-threshold 4",
            "--quic-retry-threshold is the retry-threshold policy's",
        ),
        ("serve --h3 --quic-shed-with close", "close"),
        ("serve --admission-fixed-limit 5/s", "--admission session"),
        (
            "serve --admission session --admission-fixed-limit fast",
            "not a rate",
        ),
    ];
    for (line, why) in cases {
        common::assert_usage_error(&args_with(line, &[]), why, Duration::from_secs(30));
    }
}
