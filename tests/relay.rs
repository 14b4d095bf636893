//! `tlslab relay` end to end: a TLS handshake through an emulated path
//! takes its true number of round trips (one for TLS 1.3, two for TLS 1.2),
//! measured by `tlslab load` against `tlslab serve`; bad flags are usage
//! errors; SIGTERM prints the counters.

mod common;

use std::time::Duration;

use common::{Relay, Serve, args, args_with, expect_ok, load_json, num, run_tlslab, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

/// Median full-handshake time (ms) of `n` new connections through `relay`.
fn full_handshake_ms(relay: &Relay, ca: &str, tls: &str, dir: &std::path::Path) -> f64 {
    let url = format!("https://{}/bytes/100", relay.addr);
    let json = dir.join(format!("hs-{tls}.json"));
    let line = "load URL --cacert CA --tls TLS -c 1 -n 7 --requests-per-conn 1 --reuse 0 \
                --no-progress --json J";
    let j = json.to_str().unwrap();
    let vars = [("URL", &*url), ("CA", ca), ("TLS", tls), ("J", j)];
    let out = run_tlslab(&args_with(line, &vars), LIMIT);
    expect_ok(&out);
    let report = load_json(&json);
    assert_eq!(num(&report, "latency/handshake_full/count"), 7.0);
    num(&report, "latency/handshake_full/p50_us") / 1000.0
}

#[test]
fn a_handshake_through_the_relay_takes_its_round_trips() {
    let dir = tempdir();
    let serve = Serve::start(&["--tls", "1.2,1.3"]);
    let ca = serve.ca_str();
    // Without the relay, a loopback handshake is a few ms: the baseline
    // that is not RTT.
    let direct = {
        let r = Relay::start(serve.https, &["--delay", "0ms"]);
        full_handshake_ms(&r, ca, "1.3", dir.path())
    };
    let relay = Relay::start(serve.https, &["--delay", "50ms"]);
    const RTT: f64 = 100.0;
    for (tls, rtts) in [("1.3", 1.0), ("1.2", 2.0)] {
        let ms = full_handshake_ms(&relay, ca, tls, dir.path());
        let want = rtts * RTT;
        // Within 10 % of the round trips, after the loopback handshake's own
        // time, which the relay does not add to.
        assert!(
            ms >= want && ms <= want * 1.1 + direct,
            "TLS {tls} full handshake through RTT {RTT} ms took {ms:.1} ms; want {want} ms \
             (+10 %, + {direct:.1} ms of handshake CPU)"
        );
    }
    let finished = relay.proc.terminate(Duration::from_secs(10));
    let stdout = finished.stdout;
    assert!(
        stdout.contains("relay: 14 connections (0 upstream failures)"),
        "{stdout}"
    );
}

#[test]
fn bad_relay_flags_are_usage_errors() {
    for (line, says) in [
        ("relay --upstream 127.0.0.1:1 --loss 100%", "--loss"),
        (
            "relay --upstream 127.0.0.1:1 --bandwidth fast",
            "--bandwidth",
        ),
        ("relay --upstream no-port", "--upstream"),
        ("relay --upstream 127.0.0.1:1 --delay 5000h", "over an hour"),
        (
            "relay --upstream 127.0.0.1:1 --idle-timeout 0s",
            "--idle-timeout",
        ),
        (
            "relay --upstream 127.0.0.1:1 --max-queued 1KiB",
            "--max-queued",
        ),
        (
            "relay --upstream 127.0.0.1:1 --max-queued lots",
            "--max-queued",
        ),
    ] {
        common::assert_usage_error(&args(line), says, LIMIT);
    }
}
