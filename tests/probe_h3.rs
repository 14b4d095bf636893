//! `tlslab probe` over HTTP/3 against a real `tlslab serve --h3` on
//! loopback (issue 34): a full QUIC handshake and a 1-RTT GET, a resumed
//! handshake whose GET leaves in 0-RTT, stored with their transport and
//! reported as seed 003's Table 2 per transport; `--transport both`
//! finding the HTTP/3 endpoint from the TCP response's `Alt-Svc` (on a
//! UDP port the URL does not name), and failing clearly when there is
//! none; the exporter's series labelled by transport; the usage errors.
//!
//! Every server binds 127.0.0.1 (port 0 or a port just found free);
//! every probe run is bounded by `--rounds`, and every child by a
//! wall-clock limit.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{
    Serve, args_with, assert_usage_error, exits, expect_ok, http_get, run, run_tlslab, show,
    start_exporter, tempdir, tlslab,
};

const LIMIT: Duration = Duration::from_secs(60);

/// Stateful tickets and 0-RTT on (QUIC's early data needs both), as in
/// tests/h3.rs.
const ZERO_RTT: [&str; 4] = ["--tickets", "off", "--max-early-data", "16384"];

fn report_json(db: &Path) -> serde_json::Value {
    let db = db.to_str().expect("utf-8");
    let out = run_tlslab(
        &args_with("probe report --db DB --json", &[("DB", db)]),
        LIMIT,
    );
    serde_json::from_str(&expect_ok(&out)).expect("report --json is JSON")
}

/// The report's entry for `url` over `transport`.
fn entry<'a>(r: &'a serde_json::Value, url: &str, transport: &str) -> &'a serde_json::Value {
    r["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["target"] == url && t["transport"] == transport)
        .unwrap_or_else(|| panic!("no {transport} entry for {url} in {r:#}"))
}

fn phases(t: &serde_json::Value) -> Vec<String> {
    t["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["phase"].as_str().expect("name").to_string())
        .collect()
}

/// A UDP port on 127.0.0.1 free a moment ago.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("bind UDP 127.0.0.1:0")
}

/// `tlslab probe URL --cacert CA --db DB EXTRA`.
fn probe(s: &Serve, url: &str, db: &Path, extra: &[&str]) -> std::process::Command {
    let mut cmd = tlslab([
        "probe",
        url,
        "--cacert",
        s.ca_str(),
        "--db",
        db.to_str().expect("utf-8"),
    ]);
    cmd.args(extra);
    cmd
}

#[test]
fn h3_rounds_time_quic_handshakes_and_a_0rtt_get_and_report_them_apart() {
    let mut a = ZERO_RTT.to_vec();
    a.push("--h3");
    let s = Serve::start(&a);
    let url = s.url("/bytes/1024");
    let dir = tempdir();
    let db = dir.path().join("h3.sqlite");
    let out = run(
        probe(
            &s,
            &url,
            &db,
            &["--h3", "--rounds", "3", "--interval", "50ms"],
        ),
        LIMIT,
    );
    let stdout = expect_ok(&out);
    assert!(
        stdout.contains("round 3 committed") && stdout.contains("early data accepted"),
        "{}",
        show(&out)
    );
    let r = report_json(&db);
    assert_eq!(r["samples"], 3, "{r:#}");
    let t = entry(&r, &url, "h3");
    assert!(t["errors"].as_object().expect("errors").is_empty(), "{t:#}");
    assert_eq!(t["resumption_offered"], 3, "{t:#}");
    assert_eq!(t["resumption_accepted"], 3, "{t:#}");
    assert_eq!(t["early_data"]["sent"], 3, "{t:#}");
    assert_eq!(t["early_data"]["accepted"], 3, "{t:#}");
    assert_eq!(t["versions"]["1.3"], 3, "{t:#}");
    // No connect over QUIC; the phases are named for what they are.
    assert_eq!(
        phases(t),
        common::args("dns quic_full quic_resumed ttfb_1rtt get_1rtt get_0rtt_first_byte total")
    );
    let t2 = &t["table2"];
    assert!(t2["tcp_ms"].is_null(), "{t2:#}");
    for k in [
        "ssl_new_ms",
        "ssl_cached_ms",
        "get_ms",
        "zero_rtt_first_byte_ms",
    ] {
        assert!(t2[k].as_f64().is_some_and(|v| v > 0.0), "{k}: {t2:#}");
    }
    // T(new) = QUIC full + 1-RTT GET: no connect term.
    let sum = t2["ssl_new_ms"].as_f64().unwrap() + t2["get_ms"].as_f64().unwrap();
    assert!(
        (t2["t_new_ms"].as_f64().unwrap() - sum).abs() < 1e-6,
        "{t2:#}"
    );
    let db_s = db.to_str().expect("utf-8");
    let text = expect_ok(&run_tlslab(&["probe", "report", "--db", db_s], LIMIT));
    assert!(
        text.contains("over HTTP/3 over QUIC")
            && text.contains("Table 2 over HTTP/3")
            && text.contains("0-RTT GET first byte")
            && text.contains("quic_full"),
        "{text}"
    );
    let csv = expect_ok(&run_tlslab(
        &["probe", "report", "--db", db_s, "--csv"],
        LIMIT,
    ));
    assert!(csv.starts_with("target,transport,phase"), "{csv}");
    assert!(csv.contains(",h3,get_0rtt_first_byte,3,"), "{csv}");
    // The server's own count: one full and one 0-RTT handshake a round.
    let m = s.metrics();
    assert_eq!(m.quic_handshakes("early_accepted"), 3.0, "server 0-RTT");
    assert_eq!(m.quic_handshakes("full"), 3.0, "server full");
}

#[test]
fn both_finds_h3_through_alt_svc_and_stores_each_transport() {
    // HTTP/3 on a UDP port the URL does not name: only Alt-Svc leads there.
    let udp = format!("127.0.0.1:{}", free_udp_port());
    let mut a = ZERO_RTT.to_vec();
    a.extend(["--h3", &udp]);
    let s = Serve::start(&a);
    let url = s.url("/bytes/1024");
    let dir = tempdir();
    let db = dir.path().join("both.sqlite");
    let out = run(
        probe(
            &s,
            &url,
            &db,
            &["--transport", "both", "--rounds", "2", "--interval", "50ms"],
        ),
        LIMIT,
    );
    expect_ok(&out);
    let r = report_json(&db);
    assert_eq!(r["samples"], 4, "{r:#}");
    let tcp = entry(&r, &url, "tcp");
    let h3 = entry(&r, &url, "h3");
    for t in [tcp, h3] {
        assert!(t["errors"].as_object().expect("errors").is_empty(), "{t:#}");
        assert_eq!(t["samples"], 2, "{t:#}");
        assert_eq!(t["resumption_accepted"], 2, "{t:#}");
    }
    assert!(phases(tcp).contains(&"connect".to_string()), "{tcp:#}");
    assert!(!phases(h3).contains(&"connect".to_string()), "{h3:#}");
    assert_eq!(h3["early_data"]["accepted"], 2, "{h3:#}");
    // The SVG charts do not overwrite each other.
    let charts = dir.path().join("charts");
    let (db_s, svg) = (db.to_str().unwrap(), charts.to_str().unwrap());
    expect_ok(&run_tlslab(
        &["probe", "report", "--db", db_s, "--svg", svg],
        LIMIT,
    ));
    assert_eq!(std::fs::read_dir(&charts).expect("charts").count(), 2);
    let h3_svg = std::fs::read_dir(&charts)
        .expect("charts")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with("-h3.svg"))
        .expect("the HTTP/3 chart");
    let svg = std::fs::read_to_string(h3_svg.path()).expect("svg");
    assert!(svg.contains("over HTTP/3"), "{svg}");
}

#[test]
fn both_without_alt_svc_fails_naming_the_fix() {
    let s = Serve::start(&[]);
    let url = s.url("/bytes/16");
    let dir = tempdir();
    let db = dir.path().join("none.sqlite");
    let (db_s, ca) = (db.to_str().unwrap(), s.ca_str());
    let vars = [("URL", url.as_str()), ("CA", ca), ("DB", db_s)];
    let line = "probe URL --cacert CA --db DB --transport both --rounds 1";
    let err = exits(&args_with(line, &vars), 1, LIMIT);
    assert!(
        err.contains("advertises no HTTP/3 endpoint")
            && err.contains("no Alt-Svc header")
            && err.contains("tlslab serve --h3")
            && err.contains("--transport tcp"),
        "{err}"
    );
}

#[test]
fn the_exporter_labels_its_series_by_transport() {
    let mut a = ZERO_RTT.to_vec();
    a.push("--h3");
    let serve = Serve::start(&a);
    let line = "probe exporter --listen 127.0.0.1:0 --cacert CA --transport both";
    let (mut exporter, addr) = start_exporter(line, serve.ca_str(), LIMIT);
    let path = format!("/probe?target={}", serve.url("/bytes/1024"));
    let (status, body) = http_get(addr, &path).expect("scrape");
    assert_eq!(status, 200, "{body}");
    for want in [
        "tlslab_probe_phase_seconds{transport=\"tcp\",phase=\"connect\"}",
        "tlslab_probe_phase_seconds{transport=\"h3\",phase=\"quic_full\"}",
        "tlslab_probe_phase_seconds{transport=\"h3\",phase=\"get_0rtt_first_byte\"}",
        "tlslab_probe_success{transport=\"tcp\"} 1",
        "tlslab_probe_success{transport=\"h3\"} 1",
        "tlslab_probe_early_data_accepted{transport=\"h3\"} 1",
    ] {
        assert!(body.contains(want), "missing {want}:\n{body}");
    }
    assert!(
        !body.contains("transport=\"h3\",phase=\"connect\""),
        "{body}"
    );
    assert_eq!(body.matches("# TYPE tlslab_probe_success gauge").count(), 1);
    // A target without HTTP/3 (and with a CA the exporter does not
    // trust, so its TCP probe fails too): its h3 sample fails, saying why.
    let plain = Serve::start(&[]);
    let path = format!("/probe?target={}", plain.url("/bytes/16"));
    let (status, body) = http_get(addr, &path).expect("scrape");
    assert_eq!(status, 200, "{body}");
    for want in [
        "tlslab_probe_success{transport=\"tcp\"} 0",
        "tlslab_probe_success{transport=\"h3\"} 0",
        "tlslab_probe_error_info{transport=\"h3\",phase=\"alt_svc\",kind=\"no_alt_svc\"} 1",
    ] {
        assert!(body.contains(want), "missing {want}:\n{body}");
    }
    assert!(
        exporter.try_status().is_none(),
        "exporter died: {}",
        exporter.describe()
    );
}

#[test]
fn quic_flags_that_cannot_work_are_usage_errors() {
    let dir = tempdir();
    let db = dir.path().join("u.sqlite");
    let db_s = db.to_str().unwrap();
    assert_usage_error(
        &args_with(
            "probe https://127.0.0.1:1/ --h3 --tls 1.2 --db DB",
            &[("DB", db_s)],
        ),
        "QUIC needs TLS 1.3",
        LIMIT,
    );
    assert_usage_error(
        &args_with(
            "probe https://127.0.0.1:1/ --h3 --transport tcp --db DB",
            &[("DB", db_s)],
        ),
        "--transport",
        LIMIT,
    );
    assert_usage_error(
        &args_with(
            "probe https://127.0.0.1:1/ --transport quic --db DB",
            &[("DB", db_s)],
        ),
        "possible values: tcp, h3, both",
        LIMIT,
    );
    assert!(!db.exists(), "a usage error created the database");
}
