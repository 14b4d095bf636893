//! TLS 1.3 0-RTT end to end, through a relay that delays 50 ms each way:
//! `tlslab load --early-data` sends each resumed connection's request as
//! early data, `tlslab serve` answers it before the client's Finished, and
//! the request completes one round trip sooner than without early data.
//! Both runs are measured side by side against one server.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::{Relay, Serve, args, args_with, expect_ok, run_tlslab, tempdir};

const LIMIT: Duration = Duration::from_secs(120);
/// The relay's round trip: 50 ms each way.
const RTT_MS: f64 = 100.0;

/// One row of `load --log`, by column name.
fn rows(csv: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            head.iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `n` one-request connections through `relay`, resuming each;
/// returns the rows of the resumed ones.
fn run(relay: &Relay, ca: &str, early: bool, dir: &Path, n: u32) -> Vec<HashMap<String, String>> {
    let url = format!("https://{}/bytes/100", relay.addr);
    let csv = dir.join(format!("early-{early}.csv"));
    let n = n.to_string();
    let line = "load URL --cacert CA --tls 1.3 -c 1 -n N --requests-per-conn 1 --reuse 100 \
                --no-progress --log CSV";
    let log = csv.to_str().unwrap();
    let vars = [("URL", &*url), ("CA", ca), ("N", &n), ("CSV", log)];
    let mut args = args_with(line, &vars);
    if early {
        args.push("--early-data");
    }
    expect_ok(&run_tlslab(&args, LIMIT));
    rows(&csv)
        .into_iter()
        .filter(|r| r["kind"] == "resumed" && r["status"] == "200")
        .collect()
}

#[test]
fn a_resumed_zero_rtt_request_saves_one_round_trip() {
    let dir = tempdir();
    let serve = Serve::start(&args("--tls 1.3 --tickets off --max-early-data 16384"));
    let ca = serve.ca_str();
    let relay = Relay::start(serve.https, &["--delay", "50ms"]);

    let plain = run(&relay, ca, false, dir.path(), 7);
    let early = run(&relay, ca, true, dir.path(), 9);
    assert!(plain.len() >= 3, "too few resumed connections: {plain:?}");
    assert!(
        plain.iter().all(|r| r["early_data"].is_empty()),
        "{plain:?}"
    );
    // A single-use ticket is spent by each resumption; a connection that
    // closes after its 0-RTT answer leaves before its new tickets arrive,
    // so only every other connection resumes.
    let accepted: Vec<_> = early
        .iter()
        .filter(|r| r["early_data"] == "accepted")
        .collect();
    assert!(accepted.len() >= 3, "too few 0-RTT connections: {early:?}");

    // `total_us` of a connection's first request runs from the connection
    // start to the last body byte: connect, handshake and request.
    let total_ms = |rs: &[&HashMap<String, String>]| {
        median(
            rs.iter()
                .map(|r| r["total_us"].parse::<f64>().unwrap() / 1000.0)
                .collect(),
        )
    };
    let without = total_ms(&plain.iter().collect::<Vec<_>>());
    let with = total_ms(&accepted);
    let saved = without - with;
    // Without 0-RTT: 1 RTT of handshake, 1 RTT of request. With it: one
    // RTT in all. The rest (loopback, CPU) is a few ms in both.
    assert!(
        (0.7 * RTT_MS..=1.3 * RTT_MS).contains(&saved),
        "0-RTT saved {saved:.1} ms ({without:.1} ms → {with:.1} ms); want one RTT, {RTT_MS} ms"
    );
    assert!(
        with < 1.5 * RTT_MS,
        "a 0-RTT request took {with:.1} ms; want about one RTT"
    );

    // The server saw the requests in early data and answered them before
    // the handshake completed.
    let m = serve.metrics();
    let answered = m
        .get("tlslab_early_data_requests_total", &[])
        .expect("tlslab_early_data_requests_total");
    assert_eq!(answered, accepted.len() as f64, "{}", serve.metrics_text());
}
