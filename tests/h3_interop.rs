//! HTTP/3 interop with real peers (issue 23), run by `.ci/run` with
//! `--ignored`: Debian's ngtcp2 examples (`gtlsclient`, `gtlsserver`,
//! packages ngtcp2-client and ngtcp2-server). A missing peer is a loud
//! skip locally and a failure under CI=true.

mod common;

use std::time::{Duration, Instant};

use common::{
    Proc, Serve, expect_ok, free_port, have, run, run_tlslab, skip_or_fail, tempdir, tool,
};

const LIMIT: Duration = Duration::from_secs(60);

/// `gtlsclient --session-file F --disable-early-data` twice against
/// `serve --h3`: the second connection resumes, and serve counts it.
/// (Debian 12's gtlsclient crashes when it resumes with early data on.)
#[test]
#[ignore = "needs gtlsclient (apt-get install ngtcp2-client); run by .ci/run"]
fn gtlsclient_resumes_against_serve_h3() {
    if !have("gtlsclient") {
        return skip_or_fail(
            "gtlsclient_resumes_against_serve_h3",
            "gtlsclient is not installed (apt-get install ngtcp2-client)",
        );
    }
    let s = Serve::start(&["--h3"]);
    let dir = tempdir();
    let sess = dir.path().join("session");
    let tp = dir.path().join("tp");
    let port = s.https.port().to_string();
    let url = format!("https://127.0.0.1:{port}/bytes/10");
    for i in 0..2 {
        let mut cmd = std::process::Command::new(tool("gtlsclient"));
        cmd.args(["--session-file", sess.to_str().unwrap()])
            .args(["--tp-file", tp.to_str().unwrap()])
            .args(["--disable-early-data", "--exit-on-all-streams-close", "-q"])
            .args(["--no-quic-dump", "--no-http-dump", "--timeout=10s"])
            .args(["127.0.0.1", &port, &url]);
        let out = run(cmd, LIMIT);
        assert!(
            out.status.success(),
            "gtlsclient run {i}: {}",
            common::show(&out)
        );
    }
    let m = s.metrics();
    let get = |k: &str| {
        m.count(
            "tlslab_transport_handshakes_total",
            &[("transport", "quic"), ("kind", k)],
        )
    };
    assert_eq!(
        (get("full"), get("resumed")),
        (1.0, 1.0),
        "{}",
        s.metrics_text()
    );
    assert_eq!(
        m.count("tlslab_transport_requests_total", &[("transport", "quic")]),
        2.0
    );
}

/// `load --h3` against `gtlsserver` completes, and resumes as asked.
#[test]
#[ignore = "needs gtlsserver (apt-get install ngtcp2-server); run by .ci/run"]
fn load_h3_completes_against_gtlsserver() {
    if !have("gtlsserver") {
        return skip_or_fail(
            "load_h3_completes_against_gtlsserver",
            "gtlsserver is not installed (apt-get install ngtcp2-server)",
        );
    }
    let dir = tempdir();
    let certs = dir.path().join("certs");
    expect_ok(&run_tlslab(
        &["certs", "--out", certs.to_str().unwrap()],
        LIMIT,
    ));
    let htdocs = dir.path().join("htdocs");
    std::fs::create_dir(&htdocs).unwrap();
    std::fs::write(htdocs.join("f.bin"), vec![7u8; 1000]).unwrap();
    let port = free_port().to_string();
    let mut cmd = std::process::Command::new(tool("gtlsserver"));
    cmd.args([
        "-q",
        "--htdocs",
        htdocs.to_str().unwrap(),
        "127.0.0.1",
        &port,
    ])
    .arg(certs.join("server.key"))
    .arg(certs.join("server.pem"));
    let server = Proc::spawn(cmd);
    // gtlsserver prints nothing when ready: give it a moment.
    let ready = Instant::now() + Duration::from_millis(500);
    while Instant::now() < ready {
        std::thread::sleep(Duration::from_millis(50));
    }
    let json = dir.path().join("r.json");
    let url = format!("https://localhost:{port}/f.bin");
    let ca = certs.join("ca.pem");
    let out = run_tlslab(
        &[
            "load",
            &url,
            "--h3",
            "--cacert",
            ca.to_str().unwrap(),
            "--reuse",
            "50",
            "-n",
            "20",
            "-c",
            "1",
            "--no-progress",
            "--json",
            json.to_str().unwrap(),
        ],
        LIMIT,
    );
    let text = expect_ok(&out);
    drop(server);
    let r = common::load_json(&json);
    assert_eq!(common::num(&r, "requests/succeeded"), 20.0, "{text}");
    assert_eq!(common::num(&r, "transport/resumed/count"), 10.0, "{text}");
}
