//! HTTP/3 over QUIC end to end on 127.0.0.1 (issue 23): `serve --h3` and
//! `load --h3` with the reuse knob and 0-RTT, the server's counts against
//! the client's, and the usage errors of the QUIC flags.

mod common;

use std::time::Duration;

use common::load::load_report;
use common::udp_tap::Tap;
use common::{Metrics, Serve, args_with, num, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

/// A server with stateful tickets and 0-RTT on, HTTP/3 on the TLS port.
fn serve() -> Serve {
    Serve::start(&["--tickets", "off", "--max-early-data", "16384", "--h3"])
}

fn load(s: &Serve, name: &str, extra: &str) -> serde_json::Value {
    load_path(s, name, "/bytes/100", extra)
}

/// `tlslab load URL(path) --h3 --cacert CA EXTRA` (EXTRA's words), which
/// must succeed; its report (written in a temporary directory).
fn load_path(s: &Serve, name: &str, path: &str, extra: &str) -> serde_json::Value {
    let dir = tempdir();
    let json = dir.path().join(format!("{name}.json"));
    let url = s.url(path);
    let ca = s.ca.as_ref().expect("an ephemeral CA").to_str().unwrap();
    let mut args = vec![url.as_str(), "--h3", "--cacert", ca, "--no-progress"];
    args.extend(common::args(extra));
    load_report(&json, &args, LIMIT)
}

/// The requests the server answered over QUIC.
fn quic_requests(m: &Metrics) -> f64 {
    m.count("tlslab_transport_requests_total", &[("transport", "quic")])
}

#[test]
fn h3_reuse_is_what_was_asked_and_the_server_counts_what_the_client_saw() {
    let s = serve();
    let r = load(&s, "reuse", "--reuse 50 -c 2 -n 240");
    assert_eq!(r["transport"]["name"], "quic", "{r:#}");
    assert_eq!(r["http"]["protocol"], "h3", "{r:#}");
    let full = num(&r, "transport/full/count");
    let resumed = num(&r, "transport/resumed/count");
    assert_eq!(num(&r, "requests/succeeded"), 240.0, "{r:#}");
    assert_eq!(full + resumed, 240.0, "{r:#}");
    assert!(num(&r, "transport/full/bytes_in") > num(&r, "transport/resumed/bytes_in"));
    assert!(num(&r, "transport/full/datagrams_out") >= 1.0);
    // Not measured over QUIC, so not printed: no round-trip mean, no
    // empty-named suite.
    assert!(
        r["handshake"]["full"]["round_trips_mean"].is_null(),
        "{r:#}"
    );
    assert!(
        r["handshake"]["suites"]
            .as_object()
            .is_none_or(|m| m.is_empty()),
        "{r:#}"
    );
    assert!(
        r["client_cpu"]["per_handshake_us"].as_f64().is_some(),
        "{r:#}"
    );
    let m = s.metrics();
    let (sf, sr) = (m.quic_handshakes("full"), m.quic_handshakes("resumed"));
    let ratio = sr / (sf + sr);
    assert!(sf + sr >= 200.0, "server saw {sf} full, {sr} resumed");
    assert!((ratio - 0.5).abs() <= 0.01, "server-observed reuse {ratio}");
    assert_eq!((sf, sr), (full, resumed), "server and client disagree");
    assert_eq!(quic_requests(&m), 240.0);
    // One family per concept: QUIC's series of the families TCP has, by
    // transport, equal to the QUIC-only aliases; TCP's stay apart.
    let quic = [("transport", "quic")];
    let tcp = [("transport", "tcp")];
    for (kind, n) in [("full", sf), ("resumed", sr)] {
        let series = [("transport", "quic"), ("version", "1.3"), ("kind", kind)];
        assert_eq!(m.count("tlslab_handshakes_total", &series), n, "{kind}");
    }
    assert_eq!(m.count("tlslab_handshakes_total", &tcp), 0.0);
    assert_eq!(m.count("tlslab_requests_total", &quic), 240.0);
    assert_eq!(m.count("tlslab_requests_total", &tcp), 0.0);
    assert_eq!(
        m.count("tlslab_connections_total", &quic),
        m.count("tlslab_transport_connections_total", &quic)
    );
    assert!(m.get("tlslab_open_connections", &quic).is_some());
}

/// With 0-RTT on, a server task that started on a ClientHello's first
/// datagram (the second, with the rest of a post-quantum key share, held
/// back 100 ms by a relay) could not open HTTP/3's control streams, since
/// the client's transport parameters were not in yet and quinn did not
/// wake the opener when they came: every such connection sat until its
/// idle timeout (about one in four through a plain relay). Each connection
/// must be served, full handshakes and 0-RTT ones.
#[test]
fn a_client_hello_split_across_delayed_datagrams_is_served_with_early_data_on() {
    let s = serve();
    let tap = Tap::with_hold(&[s.https], Some(Duration::from_millis(100)));
    let dir = tempdir();
    let json = dir.path().join("split.json");
    let url = format!("https://{}/bytes/100", tap.addr);
    let ca = s.ca.as_ref().expect("an ephemeral CA").to_str().unwrap();
    let mut args = vec![url.as_str(), "--h3", "--cacert", ca, "--no-progress"];
    args.extend(common::args(
        "--reuse 50 --early-data -c 1 -n 4 --timeout 5s",
    ));
    let r = load_report(&json, &args, LIMIT);
    assert_eq!(num(&r, "requests/succeeded"), 4.0, "{r:#}");
    let flows = tap.flows();
    assert!(
        flows.iter().all(|f| f.len() >= 2 && f[1][0] & 0x80 != 0),
        "every connection's second datagram was the rest of its Initials"
    );
}

#[test]
fn zero_rtt_is_accepted_and_counted_on_both_sides() {
    let s = serve();
    let r = load(&s, "early", "--reuse 100 --early-data -c 1 -n 40");
    let zero = num(&r, "transport/zero_rtt/count");
    assert!(zero >= 30.0, "0-RTT connections: {zero}\n{r:#}");
    assert_eq!(num(&r, "transport/zero_rtt_rejected"), 0.0, "{r:#}");
    assert_eq!(num(&r, "requests/succeeded"), 40.0, "{r:#}");
    let m = s.metrics();
    assert_eq!(
        m.quic_handshakes("early_accepted"),
        zero,
        "server 0-RTT accepted"
    );
    let answered = m.count(
        "tlslab_transport_early_requests_total",
        &[("transport", "quic")],
    );
    assert!(
        answered <= zero,
        "0.5-RTT answers {answered} > 0-RTT connections {zero}"
    );
    assert_eq!(
        m.quic_handshakes("resumed"),
        num(&r, "transport/zero_rtt/count") + num(&r, "transport/resumed/count")
    );
}

#[test]
fn bad_quic_flags_are_usage_errors() {
    let cases = [
        ("serve --quic-retry always", "need --h3"),
        ("serve --h3 nowhere", "--h3 nowhere"),
        ("serve --h3 --tls 1.2", "TLS 1.3"),
        ("serve --h3 --quic-max-connections 0", "admits nobody"),
        ("serve --h3 --quic-idle-timeout 0s", "positive"),
        ("serve --h3 --quic-retry sometimes", "sometimes"),
        ("load --h3 http://127.0.0.1:9/ -n 1", "https://"),
        ("load --h3 --h2 URL -n 1", "exclude"),
        ("load --h3 -m 0 URL -n 1", "-m 0"),
        ("load --h3 --mss 1400 URL -n 1", "--mss is TCP-only"),
        (
            "load --h3 --workload ecommerce --rate 5 --quic-new-socket URL -n 1",
            "share a few UDP sockets",
        ),
        (
            "load --h3 --rate 10 --requests-per-conn 2 URL",
            "one request per arrival",
        ),
        ("load --h3 --tls 1.2 URL -n 1", "TLS 1.3"),
        // -m streams need as many requests on the connection.
        (
            "load --h3 -m 4 URL -n 1",
            "give --requests-per-conn 0 (keep-alive) or at least 4",
        ),
        (
            "load --h3 -m 4 --requests-per-conn 2 URL -n 1",
            "--requests-per-conn 2 closes",
        ),
        ("serve --quic-new-tokens 2", "need --h3"),
        ("serve --h3 --quic-new-tokens 17", "give 0 to 16"),
        ("serve --quic-recv-buffer 1048576", "need --h3"),
        (
            "serve --h3 --quic-recv-buffer 100",
            "give 4096 to 1073741824 bytes",
        ),
    ];
    for (line, why) in cases {
        let args = args_with(line, &[("URL", "https://127.0.0.1:9/")]);
        common::assert_usage_error(&args, why, Duration::from_secs(30));
    }
}

#[test]
fn handshake_bytes_and_datagrams_are_the_handshakes_not_the_response() {
    // Regression: they were read after the first response, so a 200 kB
    // body counted as handshake bytes.
    let s = serve();
    let r = load_path(&s, "big", "/bytes/200000", "--reuse 50 -c 1 -n 4");
    assert_eq!(num(&r, "requests/succeeded"), 4.0, "{r:#}");
    for kind in ["full", "resumed"] {
        let b_in = num(&r, &format!("transport/{kind}/bytes_in"));
        let d_in = num(&r, &format!("transport/{kind}/datagrams_in"));
        let b_out = num(&r, &format!("transport/{kind}/bytes_out"));
        let d_out = num(&r, &format!("transport/{kind}/datagrams_out"));
        // A handshake is a few kB and datagrams each way; the body alone
        // is 200 kB in about 140 datagrams, with about 70 ACKs back. The
        // bounds leave room for retransmitted Initials when the machine is
        // busy (11.5 datagrams out per full handshake were seen with both
        // cores loaded), and the comparison of full against resumed bytes is
        // left out for the same reason.
        assert!(
            (500.0..60_000.0).contains(&b_in),
            "{kind} in: {b_in} B\n{r:#}"
        );
        assert!((1.0..60.0).contains(&d_in), "{kind} in: {d_in} datagrams");
        // The client's Initial is padded to 1200 bytes (RFC 9000 §14.1).
        assert!((1200.0..40_000.0).contains(&b_out), "{kind} out: {b_out} B");
        assert!(
            (1.0..40.0).contains(&d_out),
            "{kind} out: {d_out} datagrams"
        );
    }
}

#[test]
fn h3_open_loop_arrives_at_the_rate_and_reports_like_tcp() {
    let s = serve();
    let r = load(&s, "open", "--rate 100 -d 2s -c 4 --reuse 50");
    let scheduled = num(&r, "open_loop/scheduled");
    // 100/s for 2 s, Poisson: 200 ± 5 sigma.
    assert!((130.0..=270.0).contains(&scheduled), "{scheduled}\n{r:#}");
    let (late, dropped) = (num(&r, "open_loop/late"), num(&r, "open_loop/dropped"));
    assert!(late <= scheduled && dropped <= scheduled, "{r:#}");
    let ok = num(&r, "requests/succeeded");
    assert!(
        ok + dropped >= scheduled * 0.9,
        "{ok} answered of {scheduled}\n{r:#}"
    );
    // One connection per arrival, the reuse knob still steering them.
    let full = num(&r, "transport/full/count");
    let resumed = num(&r, "transport/resumed/count");
    assert!(full + resumed >= ok, "{r:#}");
    let ratio = resumed / (full + resumed);
    assert!((ratio - 0.5).abs() <= 0.1, "reuse {ratio}\n{r:#}");
    // The server answered each request the client saw answered (and at
    // most the ones it attempted: some are cut off at the end).
    let answered = quic_requests(&s.metrics());
    assert!(
        answered >= ok && answered <= num(&r, "requests/attempted") + 1.0,
        "server answered {answered}\n{r:#}"
    );
}

#[test]
fn h3_binds_to_the_source_ip() {
    let s = serve();
    let r = load(&s, "src", "--source-ip 127.0.0.1 -c 2 -n 6");
    assert_eq!(num(&r, "requests/succeeded"), 6.0, "{r:#}");
}

#[test]
fn warm_up_requests_do_not_spend_the_request_budget_as_over_tcp() {
    let s = serve();
    // 0.5 s of warm-up on loopback is hundreds of requests: taken from -n
    // (the old behaviour), none of the 40 would be measured.
    let r = load(&s, "warmup", "-c 2 -n 40 --warmup 500ms");
    assert_eq!(num(&r, "requests/attempted"), 40.0, "{r:#}");
    assert_eq!(num(&r, "requests/succeeded"), 40.0, "{r:#}");
    // Every measured request had its own connection (one per request).
    assert_eq!(num(&r, "http/connections"), 40.0, "{r:#}");
    let hs = num(&r, "transport/full/count") + num(&r, "transport/resumed/count");
    assert_eq!(hs, 40.0, "{r:#}");
    // The server answered the warm-up's requests too.
    let served = quic_requests(&s.metrics());
    assert!(served > 40.0, "the server answered {served} requests");

    // Keep-alive with -m 2: the same budget, on connections kept open.
    let extra = "-c 1 -n 30 --warmup 300ms --requests-per-conn 0 -m 2";
    let r = load(&s, "warmup-ka", extra);
    assert_eq!(num(&r, "requests/succeeded"), 30.0, "{r:#}");
}
