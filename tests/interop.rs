//! Interop tests against real peers: nginx (as the server `tlslab load`
//! measures), curl and `openssl s_client` (as clients resuming sessions on
//! `tlslab serve`), and h2load (HTTP/2 and HTTP/1.1 load on `tlslab serve`).
//!
//! Every test is ignored by default because it needs the peers installed.
//! CI runs them with
//! `cargo test --release --test interop -- --ignored --test-threads=1`
//! after `apt-get install -y nginx nghttp2-client curl openssl`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::load::{H2_TWO_CLIENTS_TEN_STREAMS, load_ok, load_run, reuse_case};
use common::nginx::Nginx;
use common::peers::{h2load_protocol, parse_h2load, s_client_sessions};
use common::{
    Metrics, Serve, assert_no_panic, certs, errors, expect_ok, num, run, run_tlslab,
    run_with_input, show, tempdir, tool,
};

const LIMIT: Duration = Duration::from_secs(120);
const HANDSHAKES: &str = "tlslab_handshakes_total";

fn handshakes(m: &Metrics, version: &str, kind: &str) -> f64 {
    m.count(HANDSHAKES, &[("version", version), ("kind", kind)])
}

fn all_handshakes(m: &Metrics, version: &str) -> f64 {
    m.count(HANDSHAKES, &[("version", version)])
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

// ------------------------------------------------------ 1. nginx server ---

/// `tlslab load` against nginx for TLS 1.2/1.3 × reuse 0/50/90/100 %: what
/// tlslab says it achieved must be what nginx logged, request by request.
fn nginx_reuse_matches_access_log(tickets: bool) {
    const CLIENTS: f64 = 4.0;
    const N: usize = 200;
    let dir = tempdir();
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let nginx = Nginx::start(&dir.path().join("nginx"), &c, tickets);
    let t = if tickets { "on" } else { "off" };

    for tls in ["1.2", "1.3"] {
        for reuse in [0u32, 50, 90, 100] {
            let case = format!("nginx tickets {t}, TLS {tls}, reuse {reuse}%");
            // A distinct query string per case separates the cases in one log.
            let uri = format!("/4k.bin?tickets={t}&tls={tls}&reuse={reuse}");
            let json = dir.path().join(format!("{t}-{tls}-{reuse}.json"));
            let (url, n) = (nginx.url(&uri), N.to_string());
            let (_, r) = load_ok(
                &json,
                &[
                    &[url.as_str(), "--cacert", s(&c.ca), "-c", "4", "-n", &n][..],
                    &reuse_case(tls, &reuse.to_string()),
                ]
                .concat(),
                &case,
                LIMIT,
            );
            assert_eq!(num(&r, "requests/succeeded"), N as f64, "{case}: {r:#}");
            let requested = num(&r, "reuse/requested");
            let achieved = num(&r, "reuse/achieved");
            assert!(
                (achieved - requested).abs() <= CLIENTS / N as f64 + 1e-9,
                "{case}: achieved {achieved} vs requested {requested}: {r:#}"
            );

            // nginx logs a request when it completes, before the client has
            // the last byte; still, allow the log a moment.
            let lines = nginx.log_for_at_least(&uri, N);
            assert_eq!(
                lines.len(),
                N,
                "{case}: nginx logged {} requests",
                lines.len()
            );
            let want_proto = format!("TLSv{tls}");
            for l in &lines {
                assert_eq!(l.status, 200, "{case}: {l:?}");
                assert_eq!(l.protocol, want_proto, "{case}: {l:?}");
            }
            let reused = lines.iter().filter(|l| l.reused).count() as f64;
            eprintln!(
                "{case}: tlslab achieved {achieved:.3} ({} resumed), nginx logged {reused} of {N} reused",
                num(&r, "handshake/resumed/count")
            );
            let tolerance = 0.02 * N as f64;
            assert!(
                (reused - achieved * N as f64).abs() <= tolerance,
                "{case}: nginx saw {reused} of {N} requests on resumed sessions; \
                 tlslab reports achieved {achieved} ({} requests) — off by more than 2 %",
                achieved * N as f64
            );
            if reuse == 0 {
                assert_eq!(reused, 0.0, "{case}");
            }
        }
    }
    assert_no_panic(nginx.proc.log_text().as_bytes());
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_tickets_on_reuse_matches_access_log() {
    nginx_reuse_matches_access_log(true);
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_tickets_off_reuse_matches_access_log() {
    nginx_reuse_matches_access_log(false);
}

// --------------------------------------------------------- 2. curl client ---

/// Two transfers in one curl invocation: curl keeps the TLS session of the
/// first connection and offers it on the second. `Connection: close` forces
/// a second connection only over HTTP/1.1 — serve offers h2 by ALPN, and
/// over h2 curl would multiplex both transfers on one connection — hence
/// `--http1.1`.
fn curl_resumes(tls: &str) {
    let serve = Serve::start(&["--tls", tls]);
    let ca = serve.ca.clone().expect("ephemeral CA");
    let url = serve.url("/bytes/4096");
    let mut cmd = Command::new(tool("curl"));
    let line = "--cacert CA --http1.1 -s -o /dev/null -o /dev/null";
    cmd.args(common::args_with(line, &[("CA", s(&ca))]))
        .args([
            "-H",
            "Connection: close",
            "-w",
            "%{http_code} %{num_connects}\\n",
        ])
        .args([&url, &url]);
    let out = run(cmd, LIMIT);
    let stdout = expect_ok(&out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["200 1", "200 1"],
        "two transfers on two connections: {}",
        show(&out)
    );

    let (m, text) = serve.metrics_until(|m| handshakes(m, tls, "resumed") >= 1.0);
    assert_eq!(
        all_handshakes(&m, tls),
        2.0,
        "TLS {tls}: two handshakes:\n{text}"
    );
    assert_eq!(
        handshakes(&m, tls, "resumed"),
        1.0,
        "TLS {tls}: curl's second connection must resume the first's session:\n{text}"
    );
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn curl_resumes_a_tls12_session() {
    curl_resumes("1.2");
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn curl_resumes_a_tls13_session() {
    curl_resumes("1.3");
}

// ------------------------------------------------- 3. openssl s_client ---

fn s_client(serve: &Serve, ca: &Path, extra: &[&str], input: &[u8]) -> String {
    let mut cmd = Command::new(tool("openssl"));
    cmd.args([
        "s_client",
        "-connect",
        &serve.https.to_string(),
        "-CAfile",
        s(ca),
    ])
    .args(extra);
    let out = run_with_input(cmd, input, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("Verify return code: 0 (ok)"),
        "s_client did not verify the chain: {}",
        show(&out)
    );
    stdout
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn openssl_s_client_reconnect_resumes_tls12() {
    let serve = Serve::start(&["--tls", "1.2"]);
    let ca = serve.ca.clone().expect("ephemeral CA");
    let out = s_client(&serve, &ca, &["-tls1_2", "-reconnect"], b"");
    let sessions = s_client_sessions(&out);
    // -reconnect: one connection, then five more with the same session.
    assert_eq!(sessions.len(), 6, "{out}");
    assert!(sessions.iter().all(|(_, p)| p == "TLSv1.2"), "{sessions:?}");
    assert!(!sessions[0].0, "the first connection is new: {sessions:?}");
    let reused = sessions.iter().filter(|(r, _)| *r).count() as f64;
    assert_eq!(reused, 5.0, "{out}");

    let (m, text) = serve.metrics_until(|m| handshakes(m, "1.2", "resumed") >= reused);
    assert_eq!(handshakes(&m, "1.2", "resumed"), reused, "{text}");
    assert_eq!(all_handshakes(&m, "1.2"), sessions.len() as f64, "{text}");
}

/// TLS 1.3 tickets arrive after the handshake, so the session must be kept
/// until the server has sent them: each s_client sends a request with
/// `Connection: close` and, with `-ign_eof`, reads until the server closes —
/// by then the tickets have been processed and `-sess_out` saves a
/// resumable session.
#[test]
#[ignore = "needs peers; run by .ci/run"]
fn openssl_s_client_sess_out_in_resumes_tls13() {
    for tickets in ["on", "off"] {
        let dir = tempdir();
        let serve = Serve::start(&["--tls", "1.3", "--tickets", tickets]);
        let ca = serve.ca.clone().expect("ephemeral CA");
        let sess = dir.path().join("sess.pem");
        let req = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

        // The first connection saves its session, the second resumes it.
        for (flag, resumed) in [("-sess_out", false), ("-sess_in", true)] {
            let out = s_client(&serve, &ca, &["-tls1_3", "-ign_eof", flag, s(&sess)], req);
            assert_eq!(
                s_client_sessions(&out),
                [(resumed, "TLSv1.3".to_string())],
                "tickets {tickets}: {out}"
            );
            assert!(out.contains("HTTP/1.1 200"), "tickets {tickets}: {out}");
            assert!(
                sess.is_file(),
                "tickets {tickets}: s_client wrote no session"
            );
        }

        let (m, text) = serve.metrics_until(|m| handshakes(m, "1.3", "resumed") >= 1.0);
        assert_eq!(
            handshakes(&m, "1.3", "resumed"),
            1.0,
            "tickets {tickets}: {text}"
        );
        assert_eq!(all_handshakes(&m, "1.3"), 2.0, "tickets {tickets}: {text}");
    }
}

// ----------------------------------------------------------- 4. h2load ---

fn h2load_against_specweb96(h1: bool) {
    let serve = Serve::start(&["--fileset", "specweb96"]);
    let mut cmd = Command::new(tool("h2load"));
    cmd.args(["-n", "200", "-c", "4"]);
    if h1 {
        cmd.arg("--h1");
    }
    cmd.arg(serve.url("/specweb96/class1_0"));
    let out = run(cmd, LIMIT);
    let stdout = expect_ok(&out);
    let r = parse_h2load(&stdout).unwrap_or_else(|| panic!("no h2load summary: {}", show(&out)));
    assert_eq!(
        (r.total, r.succeeded, r.failed, r.errored, r.timeout),
        (200, 200, 0, 0, 0),
        "{stdout}"
    );
    let want = if h1 { "http/1.1" } else { "h2" };
    assert_eq!(h2load_protocol(&stdout), Some(want), "{stdout}");

    let m = serve.metrics();
    assert!(
        m.count("tlslab_requests_total", &[("listener", "https")]) >= 200.0,
        "{:?}",
        m.series("tlslab_requests_total")
    );
    // class1_0 is 1024 bytes: 200 responses put at least 200 KiB on the wire.
    assert!(m.count("tlslab_bytes_sent_total", &[]) >= 200.0 * 1024.0);
    let mut proc = serve.proc;
    assert!(
        proc.try_status().is_none(),
        "serve exited:\n{}",
        proc.describe()
    );
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn h2load_http2_against_serve() {
    h2load_against_specweb96(false);
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn h2load_http1_against_serve() {
    h2load_against_specweb96(true);
}

// ------------------------------------------- 5. every workload on nginx ---

/// `tlslab fileset ARGS --out PREFIX/www`, the docroot [`Nginx::start`]
/// serves; then starts nginx (tickets on) on it.
fn nginx_on_fileset(dir: &Path, c: &common::Certs, fileset: &[&str]) -> Nginx {
    let prefix = dir.join("nginx");
    let www = prefix.join("www");
    let mut argv = vec!["fileset", "--out", s(&www)];
    argv.extend_from_slice(fileset);
    let out = run_tlslab(&argv, LIMIT);
    let text = expect_ok(&out);
    assert!(text.contains("wrote "), "{}", show(&out));
    Nginx::start(&prefix, c, true)
}

/// Starts nginx on `tlslab fileset FILESET` ([`nginx_on_fileset`]) and
/// runs `tlslab load URL --cacert CA LOAD --json DIR/NAME.json` against
/// it, expecting success (see [`common::load::load_ok`]); returns nginx
/// and the report.
fn load_on_fileset(
    dir: &Path,
    c: &common::Certs,
    name: &str,
    fileset: &[&str],
    load: &[&str],
) -> (Nginx, serde_json::Value) {
    let nginx = nginx_on_fileset(dir, c, fileset);
    let url = nginx.url("");
    let mut args = vec![url.as_str(), "--cacert", s(&c.ca)];
    args.extend_from_slice(load);
    let json = dir.join(format!("{name}.json"));
    let (_, r) = load_ok(&json, &args, name, LIMIT);
    (nginx, r)
}

/// The multiset of `items`, for order-free comparison.
fn counts<T: Ord + Clone>(
    items: impl IntoIterator<Item = T>,
) -> std::collections::BTreeMap<T, usize> {
    let mut m = std::collections::BTreeMap::new();
    for i in items {
        *m.entry(i).or_default() += 1;
    }
    m
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_serves_the_specweb96_workload_from_fileset() {
    const N: usize = 200;
    let dir = tempdir();
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let n = N.to_string();
    let load = ["--workload", "specweb96", "-c", "4", "-n", &n];
    let (nginx, r) = load_on_fileset(dir.path(), &c, "specweb96", &[], &load);
    assert_eq!(num(&r, "requests/succeeded"), N as f64, "{r:#}");

    let lines = nginx.log_at_least(N);
    assert_eq!(lines.len(), N, "nginx logged {} requests", lines.len());
    assert!(lines.iter().all(|l| l.status == 200), "{lines:?}");
    let want: std::collections::BTreeMap<String, u64> = tlslab_workload::specweb96::files()
        .into_iter()
        .map(|f| (f.path, f.size as u64))
        .collect();
    let sizes = nginx.sizes();
    assert_eq!(sizes.len(), N, "{sizes:?}");
    for (uri, bytes) in &sizes {
        assert_eq!(
            want.get(uri),
            Some(bytes),
            "nginx sent {bytes} bytes for {uri}, not the SPECweb96 file's size"
        );
    }
    // The mix reaches beyond one file: at least the three big classes.
    let classes = counts(sizes.iter().map(|(u, _)| u[..17].to_string()));
    assert!(classes.len() >= 3, "{classes:?}");
    let sent: u64 = sizes.iter().map(|(_, b)| b).sum();
    eprintln!("specweb96 on nginx: {N} requests, {sent} body bytes, classes {classes:?}");
    assert_no_panic(nginx.proc.log_text().as_bytes());
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_serves_the_ecommerce_workload_from_fileset() {
    let dir = tempdir();
    let model = dir.path().join("shop.toml");
    std::fs::write(
        &model,
        "paths = \"files\"\nthink_time = \"0\"\nmax_connections = 4\n",
    )
    .expect("write model");
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let workload = ["--workload", "ecommerce", "--workload-config", s(&model)];
    let load = [&workload[..], &["-c", "3", "-n", "150"]].concat();
    let (nginx, r) = load_on_fileset(dir.path(), &c, "ecommerce", &workload, &load);
    let n = num(&r, "requests/succeeded") as usize;
    assert_eq!(n, 150, "{r:#}");
    let sessions = num(&r, "ecommerce/sessions");
    assert!(sessions >= 3.0, "{r:#}");

    let lines = nginx.log_at_least(n);
    assert_eq!(lines.len(), n, "nginx logged {} requests", lines.len());
    assert!(
        lines
            .iter()
            .all(|l| l.status == 200 && l.uri.starts_with("/ecommerce/")),
        "{lines:?}"
    );
    let full = lines.iter().filter(|l| !l.reused).count() as f64;
    eprintln!(
        "ecommerce on nginx: {n} requests, {sessions} sessions, nginx saw {full} full handshakes"
    );
    assert_eq!(
        full, sessions,
        "one full handshake per purchase session: nginx logged {full} requests on new sessions"
    );
    assert_eq!(full, num(&r, "handshake/full/count"), "{r:#}");
    // nginx sent every file with its size in the model's catalogue.
    let config = tlslab_workload::ecommerce::Config::load(&model).expect("model");
    let catalogue: std::collections::BTreeMap<String, u64> =
        tlslab_workload::ecommerce::Generator::new(config)
            .expect("valid model")
            .files()
            .into_iter()
            .collect();
    let sizes = nginx.sizes();
    assert_eq!(sizes.len(), n, "{sizes:?}");
    for (uri, bytes) in &sizes {
        assert_eq!(catalogue.get(uri), Some(bytes), "{uri}");
    }
    assert_no_panic(nginx.proc.log_text().as_bytes());
}

#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_serves_a_replayed_access_log_from_fileset() {
    const IPS: usize = 5;
    const N: usize = 60;
    let dir = tempdir();
    let log = dir.path().join("access.log");
    let mut text = String::new();
    let mut logged = Vec::new();
    for i in 0..N {
        // Seven files of fixed sizes, each requested with its own query.
        let file = i % 7;
        let uri = format!("/site/d{}/f{file}.html?i={i}", file % 3);
        let size = 500 + 1000 * file;
        text += &format!(
            "10.0.0.{} - - [01/Jan/2024:10:00:{:02} +0000] \"GET {uri} HTTP/1.1\" 200 {size} \"-\" \"ua\"\n",
            i % IPS,
            i / 2
        );
        logged.push((uri, size as u64));
    }
    std::fs::write(&log, text).expect("write log");
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let workload = ["--workload", "replay", "--access-log", s(&log)];
    let load = [&workload[..], &["--replay-paths", "original", "-c", "3"]].concat();
    let (nginx, r) = load_on_fileset(dir.path(), &c, "replay", &workload, &load);
    assert_eq!(num(&r, "requests/succeeded"), N as f64, "{r:#}");

    let lines = nginx.log_at_least(N);
    assert_eq!(lines.len(), N, "nginx logged {} requests", lines.len());
    assert!(lines.iter().all(|l| l.status == 200), "{lines:?}");
    // Every logged request, query included, reached nginx with its size.
    assert_eq!(counts(nginx.sizes()), counts(logged));
    let reused = lines.iter().filter(|l| l.reused).count();
    eprintln!("replay on nginx: {N} requests from {IPS} IPs, nginx saw {reused} reused");
    assert_eq!(
        reused,
        N - IPS,
        "one full handshake per client IP, every other request resumed"
    );

    // fileset's flags: documented, and mismatches are usage errors.
    let help = expect_ok(&run_tlslab(&["fileset", "--help"], LIMIT));
    for flag in ["--workload", "--workload-config", "--access-log"] {
        assert!(help.contains(flag), "{flag} missing from fileset --help");
    }
    let out_dir = dir.path().join("other");
    for args in [
        &["--access-log", s(&log)][..],
        &["--workload", "replay"][..],
        &["--workload", "specweb96", "--workload-config", s(&log)][..],
    ] {
        let mut argv = vec!["fileset", "--out", s(&out_dir)];
        argv.extend_from_slice(args);
        let out = run_tlslab(&argv, LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
    }
    assert_no_panic(nginx.proc.log_text().as_bytes());
}

// ------------------------------------------- HTTP/2 load against nginx ---

/// `tlslab load --h2 -c 2 -m 10 -n 200 --requests-per-conn 0` against nginx
/// with HTTP/2 on (`listen … ssl http2` on 1.22, `http2 on` from 1.25.1):
/// nginx's own log must show 200 requests, all `HTTP/2.0` and 200, on 2
/// connections; `--requests-per-conn 50` 4 or 5, as tlslab counted them.
/// Against an nginx
/// without HTTP/2 every connection fails by kind (no panic, exit 1).
#[test]
#[ignore = "needs peers; run by .ci/run"]
fn nginx_http2_log_shows_load_h2_requests_protocol_and_connections() {
    let dir = tempdir();
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let nginx = Nginx::start_h2(&dir.path().join("nginx"), &c);
    // K = 50: the two clients share the -n budget, so their last
    // connections may split the remainder: 4 or 5 connections.
    for (k, want) in [("0", 2..=2usize), ("50", 4..=5)] {
        let uri = format!("/4k.bin?k={k}");
        let json = dir.path().join(format!("h2-{k}.json"));
        let url = nginx.url(&uri);
        let (_, r) = load_ok(
            &json,
            &[
                &[url.as_str(), "--cacert", s(&c.ca)][..],
                &H2_TWO_CLIENTS_TEN_STREAMS,
                &["--requests-per-conn", k],
            ]
            .concat(),
            &format!("K={k}"),
            LIMIT,
        );
        assert_eq!(num(&r, "requests/succeeded"), 200.0, "K={k}: {r:#}");
        let conns = num(&r, "http/connections") as usize;
        assert!(want.contains(&conns), "K={k}: {r:#}");

        // nginx logs a request when it completes: poll until all are in.
        let lines = nginx.h2_lines_for(&uri, 200);
        assert_eq!(
            lines.len(),
            200,
            "K={k}: nginx logged {} requests",
            lines.len()
        );
        assert!(
            lines.iter().all(|l| l.0 == "HTTP/2.0" && l.1 == 200),
            "K={k}: {:?}",
            &lines[..3]
        );
        let ids: std::collections::BTreeSet<u64> = lines.iter().map(|l| l.2).collect();
        assert_eq!(ids.len(), conns, "K={k}: nginx saw connections {ids:?}");
    }

    // nginx without HTTP/2 refuses a client that offers only h2.
    let plain = Nginx::start(&dir.path().join("nginx-h1"), &c, true);
    let json = dir.path().join("h1-only.json");
    let url = plain.url("/4k.bin");
    let (out, r) = load_run(
        &json,
        &[&url, "--cacert", s(&c.ca), "--h2", "-n", "5"],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_no_panic(&out.stderr);
    let r = r.expect("load wrote --json");
    let e = errors(&r);
    assert_eq!(e.values().sum::<u64>(), 5, "{r:#}");
    assert!(
        e.keys()
            .all(|k| k == "alpn_not_h2" || k.starts_with("tls_alert_")),
        "{e:?}"
    );
}
