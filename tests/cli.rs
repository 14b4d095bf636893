//! End-to-end tests of the `tlslab` binary that need no external peers:
//! `certs`, `serve` + `load` round trips checked against the server's own
//! metrics, bad input and exit codes, hostile bytes on the TLS port, a
//! server that dies mid-run, and `lab --quick`.
//!
//! Every server binds 127.0.0.1 port 0; every load is bounded by `-n` or
//! `-d` and every child by a wall-clock limit.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::load::{load_ok_in, load_run, reuse_case, run_json};
use common::{
    Metrics, Proc, Serve, args, args_with, argv, assert_no_panic, certs, errors, expect_ok,
    http_get, load_json, num, run_tlslab, show, tempdir, tlslab,
};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `tlslab load` with `--json DIR/name.json` appended; returns the
/// process output and the parsed report (if it was written).
fn load(
    dir: &Path,
    name: &str,
    args: &[&str],
) -> (std::process::Output, Option<serde_json::Value>) {
    load_run(&dir.join(format!("{name}.json")), args, LIMIT)
}

const HANDSHAKES: &str = "tlslab_handshakes_total";
const FAILURES: &str = "tlslab_handshake_failures_total";

fn handshakes(m: &Metrics, version: &str, kind: &str) -> f64 {
    m.count(HANDSHAKES, &[("version", version), ("kind", kind)])
}

// ---------------------------------------------------------------- certs ---

#[test]
fn certs_writes_a_usable_ca_and_chain_for_each_key_type() {
    for key_type in ["rsa2048", "ecdsa-p256", "ecdsa-p384", "ed25519"] {
        let dir = tempdir();
        let c = certs(dir.path(), key_type, &[]);
        let read = |p: &Path| std::fs::read_to_string(p).expect("read PEM");
        assert_eq!(
            read(&c.ca).matches("BEGIN CERTIFICATE").count(),
            1,
            "{key_type}: ca.pem"
        );
        assert_eq!(
            read(&c.chain).matches("BEGIN CERTIFICATE").count(),
            2,
            "{key_type}: server.pem must hold the leaf then the CA"
        );
        for key in [&c.key, &c.ca_key] {
            assert!(
                read(key).contains("PRIVATE KEY"),
                "{key_type}: {}",
                key.display()
            );
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(key)
                .expect("stat key")
                .permissions()
                .mode();
            assert_eq!(
                mode & 0o077,
                0,
                "{key_type}: {} is readable by others",
                key.display()
            );
        }

        // The files work: serve them, trust the CA, and both versions connect.
        let serve = Serve::start(&c.serve_flags());
        assert!(
            serve.ca.is_none(),
            "serve printed an ephemeral CA although --cert was given"
        );
        for tls in ["1.2", "1.3"] {
            let url = serve.url("/health");
            let ca = c.ca.to_str().expect("utf-8");
            let args = args_with(
                "URL --cacert CA -c 1 -n 3 --tls TLS",
                &[("URL", &url), ("CA", ca), ("TLS", tls)],
            );
            let (_, r) = load_ok_in(dir.path(), &format!("{key_type}-{tls}"), &args, LIMIT);
            assert_eq!(
                num(&r, "requests/succeeded"),
                3.0,
                "{key_type} TLS {tls}: {r:#}"
            );
        }
    }
}

// An ML-DSA-44 leaf under an ECDSA intermediate, served with brotli
// certificate compression, loaded by a client that offers it: tlslab
// against tlslab (Debian's OpenSSL 3.0 has neither ML-DSA nor RFC 8879).
#[test]
fn certs_serve_and_load_a_mixed_post_quantum_chain_compressed() {
    let dir = tempdir();
    let c = certs(dir.path(), "mldsa44", &["--intermediate-key", "ecdsa-p256"]);
    let read = |p: &Path| std::fs::read_to_string(p).expect("read PEM");
    assert_eq!(read(&c.chain).matches("BEGIN CERTIFICATE").count(), 2);
    assert_ne!(read(&c.ca), "", "ca.pem");
    let serve = Serve::start(&argv(
        &c.serve_flags(),
        "--tls 1.3 --cert-compression brotli",
    ));
    let url = serve.url("/health");
    let ca = c.ca.to_str().expect("utf-8");
    let flags = "-c 1 -n 3 --tls 1.3 --cert-compression brotli,zlib --mss 1460";
    let (out, report) = load(dir.path(), "pq", &argv(&[&url, "--cacert", ca], flags));
    expect_ok(&out);
    let r = report.expect("load wrote --json");
    assert_eq!(num(&r, "requests/succeeded"), 3.0, "{r:#}");
    assert_eq!(
        num(&r, "handshake/full/cert_compressed_count"),
        3.0,
        "{r:#}"
    );
    assert!(
        num(&r, "handshake/full/cert_compressed_bytes_mean")
            < num(&r, "handshake/full/cert_bytes_mean"),
        "{r:#}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("full handshake wire:"));
    // The server counts what it compressed, per handshake, as the client
    // saw it (issue 24 point 2).
    let m = serve.metrics();
    let brotli = [("algorithm", "brotli")];
    let sent = m.count("tlslab_cert_compression_compressed_bytes_total", &brotli);
    let from = m.count("tlslab_cert_compression_uncompressed_bytes_total", &brotli);
    assert_eq!(
        m.count("tlslab_cert_compression_handshakes_total", &brotli),
        3.0
    );
    assert_eq!(
        sent / 3.0,
        num(&r, "handshake/full/cert_compressed_bytes_mean"),
        "server and client disagree on the compressed size"
    );
    assert_eq!(from / 3.0, num(&r, "handshake/full/cert_bytes_mean"));
    assert!(sent < from, "{sent} compressed from {from}");
}

#[test]
fn certs_san_decides_which_name_verifies() {
    let dir = tempdir();
    let c = certs(dir.path(), "ecdsa-p256", &["--san", "example.test"]);
    let serve = Serve::start(&c.serve_flags());
    let url = serve.url("/health");
    let ca = c.ca.to_str().expect("utf-8");

    // 127.0.0.1 is not among the SANs: every handshake fails verification.
    let (out, report) = load(
        dir.path(),
        "ip",
        &argv(&[&url, "--cacert", ca], "-c 1 -n 2"),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "all requests failed → exit 1: {}",
        show(&out)
    );
    let r = report.expect("load writes --json even when every request fails");
    let errs = errors(&r);
    assert!(
        errs.keys().any(|k| k.starts_with("tls")),
        "expected a TLS verification error kind, got {errs:?}"
    );
    assert_no_panic(&out.stderr);

    // With the SAN as SNI/verification name it works.
    let args = argv(&[&url, "--cacert", ca], "--sni example.test -c 1 -n 2");
    let (_, r) = load_ok_in(dir.path(), "sni", &args, LIMIT);
    assert_eq!(num(&r, "requests/succeeded"), 2.0);
}

// ------------------------------------------------- serve + load + metrics ---

#[test]
fn load_achieves_requested_reuse_and_server_metrics_agree() {
    let dir = tempdir();
    let serve = Serve::start(&["--tls", "1.2,1.3"]);
    let ca = serve.ca_str();
    let url = serve.url("/bytes/1024");
    const CLIENTS: f64 = 2.0;
    const N: f64 = 40.0;

    for tls in ["1.2", "1.3"] {
        for reuse in [0u32, 50, 100] {
            let case = format!("TLS {tls} reuse {reuse}%");
            let before = serve.metrics();
            let reuse_s = reuse.to_string();
            let args = [
                &argv(&[&url, "--cacert", ca], "-c 2 -n 40")[..],
                &reuse_case(tls, &reuse_s),
            ]
            .concat();
            let (_, r) = load_ok_in(dir.path(), &format!("{tls}-{reuse}"), &args, LIMIT);

            assert_eq!(num(&r, "requests/succeeded"), N, "{case}: {r:#}");

            let full = num(&r, "handshake/full/count");
            let resumed = num(&r, "handshake/resumed/count");
            assert_eq!(
                full + resumed,
                N,
                "{case}: one handshake per request with K=1: {r:#}"
            );

            assert_eq!(num(&r, "reuse/resumed_count"), resumed, "{case}: {r:#}");
            assert_eq!(num(&r, "requests/attempted"), N, "{case}: {r:#}");
            let requested = num(&r, "reuse/requested");
            let offered = num(&r, "reuse/offered");
            let achieved = num(&r, "reuse/achieved");
            assert!(
                (requested - f64::from(reuse) / 100.0).abs() < 1e-9,
                "{case}: {r:#}"
            );
            assert!(
                (achieved - resumed / N).abs() < 1e-9,
                "{case}: achieved must be resumed/connections: {r:#}"
            );
            assert!(
                offered + 1e-9 >= achieved,
                "{case}: accepted more than offered: {r:#}"
            );
            // Each client's first connection is necessarily full, and the
            // split of N over the clients may be uneven by one.
            assert!(
                (achieved - requested).abs() <= CLIENTS / N + 1e-9,
                "{case}: achieved {achieved} vs requested {requested}: {r:#}"
            );
            if reuse == 0 {
                assert_eq!(resumed, 0.0, "{case}: {r:#}");
                assert_eq!(offered, 0.0, "{case}: nothing may be offered at 0 %: {r:#}");
            }
            if reuse == 100 {
                assert!(resumed >= N - CLIENTS, "{case}: {r:#}");
            }
            if full > 0.0 {
                assert!(
                    num(&r, "latency/handshake_full/p50_us") > 0.0,
                    "{case}: {r:#}"
                );
            }
            assert!(num(&r, "throughput/requests_per_s") > 0.0, "{case}: {r:#}");

            // The server saw exactly the same handshakes.
            let resumed_before = handshakes(&before, tls, "resumed");
            let full_before =
                handshakes(&before, tls, "full") + handshakes(&before, tls, "full_hrr");
            let (after, text) = serve.metrics_until(|m| {
                handshakes(m, tls, "resumed") - resumed_before == resumed
                    && handshakes(m, tls, "full") + handshakes(m, tls, "full_hrr") - full_before
                        == full
            });
            let server_resumed = handshakes(&after, tls, "resumed") - resumed_before;
            let server_full =
                handshakes(&after, tls, "full") + handshakes(&after, tls, "full_hrr") - full_before;
            assert_eq!(
                server_resumed, resumed,
                "{case}: server counted {server_resumed} resumed, load {resumed}\n{text}"
            );
            assert_eq!(
                server_full, full,
                "{case}: server counted {server_full} full, load {full}\n{text}"
            );
        }
    }
}

#[test]
fn plain_http_listener_and_specweb96_fileset_serve_the_same_content() {
    let dir = tempdir();
    let serve = Serve::start(&["--http", "127.0.0.1:0", "--fileset", "specweb96"]);
    let http = serve.http.expect("serve printed its http listener");
    let (status, body) = http_get(http, "/health").expect("GET /health");
    assert_eq!((status, body.trim()), (200, "ok"));
    // class1_3 is (3 + 1) × 1024 × 10 / 10 = 4096 bytes.
    let (status, body) = http_get(http, "/specweb96/class1_3").expect("GET specweb96 file");
    assert_eq!((status, body.len()), (200, 4096));
    let (status, _) = http_get(http, "/specweb96/class9_9").expect("GET missing file");
    assert_eq!(status, 404);

    let url = format!("http://{http}/specweb96/class0_0");
    let (_, r) = load_ok_in(dir.path(), "plain", &[&url, "-c", "1", "-n", "5"], LIMIT);
    assert_eq!(num(&r, "requests/succeeded"), 5.0);
    assert_eq!(
        num(&r, "handshake/full/count") + num(&r, "handshake/resumed/count"),
        0.0
    );
    let m = serve.metrics();
    assert!(
        m.count("tlslab_requests_total", &[("listener", "http")]) >= 5.0,
        "{:?}",
        m.series("tlslab_requests_total")
    );
}

// ------------------------------------------------- hostile bytes on :443 ---

/// The first 45 bytes of a ClientHello: a handshake record announcing 512
/// bytes, the handshake header, legacy_version and part of the random.
fn truncated_client_hello() -> Vec<u8> {
    let mut b = vec![0x16, 0x03, 0x01, 0x02, 0x00]; // record: handshake, 512 bytes
    b.extend([0x01, 0x00, 0x01, 0xfc]); // ClientHello, 508 bytes
    b.extend([0x03, 0x03]); // legacy_version TLS 1.2
    b.extend([0x42; 34]); // part of the random
    b
}

#[test]
fn garbage_and_truncated_hellos_are_closed_counted_and_survived() {
    let dir = tempdir();
    let serve = Serve::start(&["--handshake-timeout", "1s"]);
    let limit = Duration::from_secs(8);

    let cases: [(&str, Vec<u8>, bool); 4] = [
        (
            "not_tls",
            b"\x00\x01\x02garbage that is not TLS at all\r\n".to_vec(),
            false,
        ),
        (
            "http_on_tls_port",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            false,
        ),
        ("eof", truncated_client_hello(), true),
        ("timeout", truncated_client_hello(), false),
    ];
    for (reason, bytes, shutdown) in &cases {
        let (_, closed) = common::raw_exchange(serve.https, bytes, *shutdown, limit);
        assert!(
            closed,
            "{reason}: serve did not close the connection within {limit:?}"
        );
    }
    let (m, text) = serve.metrics_until(|m| {
        cases
            .iter()
            .all(|(reason, _, _)| m.count(FAILURES, &[("reason", reason)]) >= 1.0)
    });
    for (reason, _, _) in &cases {
        assert_eq!(
            m.count(FAILURES, &[("reason", reason)]),
            1.0,
            "failure reason {reason}:\n{text}"
        );
    }
    assert_eq!(
        m.count(HANDSHAKES, &[]),
        0.0,
        "no handshake completed, none may be counted:\n{text}"
    );

    // And it still serves.
    let (ca, url) = (serve.ca_str(), serve.url("/health"));
    load_ok_in(
        dir.path(),
        "after",
        &argv(&[&url, "--cacert", ca], "-c 1 -n 3"),
        LIMIT,
    );

    let mut proc = serve.proc;
    assert!(
        proc.try_status().is_none(),
        "serve exited:\n{}",
        proc.describe()
    );
    assert_no_panic(proc.stderr_text().as_bytes());
}

// -------------------------------------------------- lifecycle & failure ---

#[test]
fn serve_stops_gracefully_on_sigterm_with_a_summary() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let ca = serve.ca.clone().expect("ephemeral CA");
    let json = dir.path().join("pre.json");
    let (out, _) = serve.load("/bytes/100", &["-c", "1", "-n", "4"], &json, LIMIT);
    expect_ok(&out);
    let start_lines = serve.proc.stdout_lines().len();
    let done = serve.proc.terminate(Duration::from_secs(15));
    let status = done
        .status
        .expect("serve did not stop within 15 s of SIGTERM");
    assert_eq!(status.code(), Some(0), "{done:?}");
    let summary: Vec<&str> = done.stdout.lines().skip(start_lines).collect();
    assert!(!summary.is_empty(), "no summary after SIGTERM: {done:?}");
    assert!(
        !ca.exists(),
        "a graceful stop should remove the ephemeral CA {}",
        ca.display()
    );
    // The 4 requests just made are in it.
    assert!(
        summary
            .iter()
            .any(|l| l.contains("requests")
                && l.split(|c: char| !c.is_ascii_digit()).any(|w| w == "4")),
        "summary does not count the 4 requests: {done:?}"
    );
    assert_no_panic(done.stderr.as_bytes());
}

#[test]
fn load_survives_the_server_dying_mid_run() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let ca = serve.ca.clone().expect("ephemeral CA");
    let json = dir.path().join("killed.json");
    let url = serve.url("/bytes/1000");
    let head = ["load", &url, "--cacert", ca.to_str().expect("utf-8")];
    let head = [&head[..], &["--json", json.to_str().expect("utf-8")]].concat();
    let load = Proc::spawn(tlslab(argv(&head, "-c 2 -d 4s --timeout 2s")));
    // Let some requests succeed, then kill the server outright.
    let served = || serve.metrics().count("tlslab_requests_total", &[]);
    common::poll(Duration::from_secs(10), served, |&n| n >= 10.0);
    let killed = serve.proc.kill();
    assert!(killed.status.is_some());
    let done = load.wait(Duration::from_secs(30));
    let status = done
        .status
        .unwrap_or_else(|| panic!("load hung after the server died: {done:?}"));
    assert_no_panic(done.stderr.as_bytes());
    assert_eq!(
        status.code(),
        Some(0),
        "some requests succeeded → exit 0: {done:?}"
    );
    let r = load_json(&json);
    assert!(num(&r, "requests/succeeded") >= 1.0, "{r:#}");
    let errs = errors(&r);
    assert!(
        errs.values().sum::<u64>() > 0,
        "a dead server must show up as errors: {errs:?}"
    );
    assert!(
        errs.contains_key("refused") || errs.contains_key("reset"),
        "expected refused/reset errors, got {errs:?}"
    );
}

#[test]
fn lab_quick_prints_its_table_in_reasonable_time() {
    let dir = tempdir();
    let json = dir.path().join("lab.json");
    let started = Instant::now();
    let lab = ["lab", "--quick", "--json", json.to_str().expect("utf-8")];
    let out = run_tlslab(&lab, Duration::from_secs(120));
    let took = started.elapsed();
    let stdout = expect_ok(&out);
    assert_no_panic(&out.stderr);
    assert!(
        stdout.lines().count() >= 3,
        "lab printed no table:\n{stdout}"
    );
    let r = load_json(&json);
    assert!(r.is_object(), "{r:#}");
    // Writer and readers share one type: the report reads back as
    // tlslab-schema's and writes the same JSON.
    let typed: tlslab_schema::lab::LabReport = serde_json::from_value(r.clone()).expect("lab");
    assert_eq!(serde_json::to_value(&typed).expect("lab"), r);
    lab_has_quic_cells_whose_counts_agree(&r);
    assert!(
        stdout.contains("HTTP/3 over QUIC against TCP+TLS 1.3"),
        "{stdout}"
    );
    assert!(
        took < Duration::from_secs(60),
        "lab --quick took {took:?} (debug build)"
    );
}

/// The lab's QUIC cells (issue 23): each ran, is compared with a TCP+TLS
/// 1.3 cell with its key and group, and the server counted the handshakes
/// the client saw, by kind, over the cell's window (give or take the
/// connections in flight at its two edges: 2 per client).
fn lab_has_quic_cells_whose_counts_agree(r: &serde_json::Value) {
    let cells = r["cells"].as_array().expect("cells");
    let clients = r["clients"].as_u64().expect("clients");
    let cell = |mode: &str| {
        cells
            .iter()
            .find(|c| c["mode"] == mode)
            .unwrap_or_else(|| panic!("no {mode} cell: {r:#}"))
    };
    for mode in args("quic_full quic_resumed quic_zero_rtt quic_keep_alive tls_zero_rtt") {
        let c = cell(mode);
        assert_eq!(c["version"], "TLSv1.3", "{c:#}");
        assert!(num(c, "requests") > 0.0, "{c:#}");
        assert!(num(c, "server_cpu_us_per_request") > 0.0, "{c:#}");
        let transport = if mode.starts_with("quic") {
            "quic"
        } else {
            "tcp"
        };
        assert_eq!(c["transport"], transport, "{c:#}");
        for kind in ["full", "resumed", "zero_rtt"] {
            let s = num(c, &format!("server_handshakes/{kind}"));
            let k = num(c, &format!("client_handshakes/{kind}"));
            assert!(
                (s - k).abs() <= 2.0 * clients as f64,
                "{mode}: the server counted {s} {kind} handshakes, the client {k}: {c:#}"
            );
        }
    }
    // Each pattern did what it says, on both sides.
    assert!(num(cell("quic_full"), "server_handshakes/full") >= 10.0);
    assert!(num(cell("quic_resumed"), "server_handshakes/resumed") >= 10.0);
    for mode in ["quic_zero_rtt", "tls_zero_rtt"] {
        assert!(
            num(cell(mode), "client_handshakes/zero_rtt") >= 10.0,
            "{:#}",
            cell(mode)
        );
        assert!(num(cell(mode), "server_handshakes/zero_rtt") >= 10.0);
    }
    let ratios = r["quic_ratios"].as_array().expect("quic_ratios");
    assert_eq!(ratios.len(), 4, "{r:#}");
    for q in ratios {
        assert_eq!(q["key"], "ecdsa-p256", "{q:#}");
        assert!(q["group"].as_str().is_some_and(|g| !g.is_empty()), "{q:#}");
        let ratio = num(q, "cpu_quic_over_tcp");
        let expect = num(q, "quic_cpu_us_per_request") / num(q, "tcp_cpu_us_per_request");
        assert!(ratio > 0.0 && (ratio - expect).abs() < 1e-9, "{q:#}");
    }
}

#[test]
fn breakdown_needs_confirmation_and_reports_a_cost_table() {
    let out = run_tlslab(&["breakdown", "--quick"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure-ablation"));

    let dir = tempdir();
    let json = dir.path().join("breakdown.json");
    let args = args("breakdown --insecure-ablation --cell 0.3s --repeats 2 --max-time 1s -c 4");
    let (out, _) = run_json(&json, &args, Duration::from_secs(180));
    let stdout = expect_ok(&out);
    assert_no_panic(&out.stderr);
    assert!(stdout.contains("Cost table"), "{stdout}");
    // Two rounds, then the 1 s cap: the run says whether it converged and why not.
    assert!(
        stdout.contains("Convergence (target ±2.0 points, cap 1 s)"),
        "{stdout}"
    );
    assert!(stdout.contains("server-observed"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("WARNING"));
    let r = load_json(&json);
    // The report reads back as tlslab-schema's type and writes the same JSON
    // (a breakdown of two rounds has non-finite figures: written as null).
    let typed: tlslab_schema::breakdown::BreakdownReport =
        serde_json::from_value(r.clone()).expect("breakdown");
    assert_eq!(serde_json::to_value(&typed).expect("breakdown"), r);
    let rows = r["rows"].as_array().expect("rows");
    // plain, baseline, six single stages (no cache without resumption),
    // PKX, PKX + rng + cache, skeleton, minimal.
    assert_eq!(rows.len(), 12, "{r:#}");
    for row in rows {
        assert!(row["cpu_us_median"].as_f64().expect("cpu") > 0.0, "{row:#}");
    }
    // The shares partition the baseline's cost.
    let total: f64 = r["shares"]
        .as_array()
        .expect("shares")
        .iter()
        .map(|s| s["fraction"].as_f64().expect("fraction"))
        .sum();
    assert!((total - 1.0).abs() < 1e-6, "{r:#}");
    // Intervals, convergence and the meter column, consistent with the text.
    assert_eq!(r["rounds"].as_u64(), Some(2), "{r:#}");
    let converged = r["converged"].as_bool().expect("converged");
    assert_eq!(
        r["stop_reason"].as_str(),
        Some(if converged { "converged" } else { "time_cap" })
    );
    for sh in r["shares"].as_array().expect("shares") {
        let stage = sh["stage"].as_str().expect("stage");
        let status = sh["status"].as_str().expect("status");
        assert!(
            ["converged", "cap_hit", "variance"].contains(&status),
            "{sh:#}"
        );
        let ci = sh["ci95"].as_f64().expect("ci95");
        assert!(ci >= 0.0, "{sh:#}");
        assert_eq!(status == "converged", ci <= 0.02, "{sh:#}");
        if status != "converged" {
            assert!(stdout.contains(&format!("{stage} (")), "{stage}: {stdout}");
        }
        let metered = ["sig", "kx", "cipher", "hash", "rng"].contains(&stage);
        assert_eq!(sh["meter_fraction"].is_f64(), metered, "{sh:#}");
        if metered {
            let m = sh["meter_fraction"].as_f64().expect("meter");
            assert!((0.0..1.0).contains(&m), "{sh:#}");
            assert!(sh["disagrees"].is_boolean(), "{sh:#}");
        }
    }
    // Signing and key exchange cost something on the server in a full handshake.
    let meter = |n: &str| {
        r["shares"]
            .as_array()
            .expect("shares")
            .iter()
            .find(|s| s["stage"] == n)
            .expect("stage")["meter_fraction"]
            .as_f64()
            .expect("meter")
    };
    assert!(meter("sig") > 0.0 && meter("kx") > 0.0, "{r:#}");
    for row in rows {
        assert!(
            row["server_busy_median"].as_f64().expect("busy") > 0.0,
            "{row:#}"
        );
        assert!(
            row["fraction_ci95"].is_number() || row["fraction_ci95"].is_null(),
            "{row:#}"
        );
    }
}

// ------------------------------------------------- the metrics helper ---

#[test]
fn helper_parses_prometheus_text() {
    let m = Metrics::parse(
        "# HELP tlslab_handshakes_total Handshakes.\n\
         # TYPE tlslab_handshakes_total counter\n\
         tlslab_handshakes_total{version=\"1.2\",kind=\"full\"} 3\n\
         tlslab_handshakes_total{version=\"1.2\",kind=\"resumed\"} 5\n\
         tlslab_handshakes_total{version=\"1.3\",kind=\"resumed\"} 7\n\
         tlslab_open_connections 2\n\
         odd{a=\"x\\\"y\"} 1.5\n",
    );
    assert_eq!(m.get(HANDSHAKES, &[("version", "1.2")]), Some(8.0));
    assert_eq!(m.get(HANDSHAKES, &[("kind", "resumed")]), Some(12.0));
    assert_eq!(
        m.get(HANDSHAKES, &[("version", "1.3"), ("kind", "full")]),
        None
    );
    assert_eq!(
        m.count(HANDSHAKES, &[("version", "1.3"), ("kind", "full")]),
        0.0
    );
    assert_eq!(m.get("tlslab_open_connections", &[]), Some(2.0));
    assert_eq!(m.get("odd", &[("a", "x\"y")]), Some(1.5));
}

#[test]
fn breakdown_over_both_transports_sets_quic_beside_tcp() {
    // QUIC runs TLS 1.3 only: a usage error before any work.
    let out = run_tlslab(
        &["breakdown", "--insecure-ablation", "--h3", "--tls", "1.2"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls 1.3"));

    let dir = tempdir();
    let json = dir.path().join("both.json");
    let args = args(
        "breakdown --insecure-ablation --transport both --cell 0.3s --repeats 2 --max-time 1s -c 4",
    );
    let (out, _) = run_json(&json, &args, Duration::from_secs(300));
    let stdout = expect_ok(&out);
    assert_no_panic(&out.stderr);
    for part in [
        "Where the TLS cost goes over QUIC (HTTP/3)",
        "packet protection",
        "header protection",
        "QUIC key schedule",
        "QUIC beside TCP",
        "The difference is made up mostly of",
    ] {
        assert!(stdout.contains(part), "no {part:?} in {stdout}");
    }
    let r = load_json(&json);
    let typed: tlslab_schema::breakdown::BreakdownPair =
        serde_json::from_value(r.clone()).expect("breakdown pair");
    assert_eq!(serde_json::to_value(&typed).expect("pair"), r);
    assert_eq!(typed.tcp.transport, "tcp");
    assert_eq!(typed.quic.transport, "quic");
    // Each table's shares partition its baseline; the differences, the
    // two baselines' difference.
    for t in [&typed.tcp, &typed.quic] {
        let total: f64 = t.shares.iter().map(|s| s.fraction).sum();
        assert!((total - 1.0).abs() < 1e-6, "{t:#?}");
    }
    let d = &typed.difference;
    let sum: f64 = d.stages.iter().map(|s| s.delta_us).sum();
    assert!((sum - d.extra_us).abs() < 1e-6 * d.quic_cpu_us, "{d:#?}");
    assert!(d.tcp_cpu_us > 0.0 && d.quic_cpu_us > 0.0, "{d:#?}");
    assert!(
        (d.explained_us - d.quic_only_us - d.remainder_growth_us).abs() < 1e-9,
        "{d:#?}"
    );
}
