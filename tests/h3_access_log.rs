//! `serve --h3 --access-log`: HTTP/3 requests are logged like those over
//! TCP, and every line ends in its transport (`tcp` or `quic`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Serve, expect_ok, load_json, num, run_tlslab, tempdir};

/// `load [--h3] -c 2 -n N` of `/bytes/100` against `s`; every request must
/// succeed.
fn load(s: &Serve, h3: bool, n: u32) {
    let dir = tempdir();
    let json = dir.path().join("load.json");
    let (url, n_arg) = (s.url("/bytes/100"), n.to_string());
    let mut args = vec![
        "load",
        &url,
        "--cacert",
        s.ca_str(),
        "-c",
        "2",
        "-n",
        &n_arg,
    ];
    if h3 {
        args.push("--h3");
    }
    args.extend(["--no-progress", "--json", json.to_str().expect("utf-8")]);
    expect_ok(&run_tlslab(&args, Duration::from_secs(60)));
    let r = load_json(&json);
    assert_eq!(num(&r, "requests/succeeded"), f64::from(n), "{r:#}");
}

/// The access log's lines once it holds `n` (≤ 3 s: serve writes it
/// within 100 ms).
fn lines(path: &Path, n: usize) -> Vec<String> {
    let read = || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(String::from).collect::<Vec<_>>()
    };
    common::poll(Duration::from_secs(3), read, |l| l.len() >= n)
}

// Issue 29: `serve --h3 --access-log` answered 8 HTTP/3 requests and
// wrote 0 bytes to the log.
#[test]
fn http3_requests_are_logged_with_transport_quic() {
    let dir = tempdir();
    let log = dir.path().join("access.log");
    let s = Serve::start(&["--h3", "--access-log", log.to_str().expect("utf-8")]);
    load(&s, true, 8);
    load(&s, false, 3);
    let got = lines(&log, 11);
    assert_eq!(got.len(), 11, "{got:#?}");
    let quic: Vec<&String> = got.iter().filter(|l| l.ends_with(" quic")).collect();
    let tcp: Vec<&String> = got.iter().filter(|l| l.ends_with(" tcp")).collect();
    assert_eq!((quic.len(), tcp.len()), (8, 3), "{got:#?}");
    for l in &quic {
        assert!(
            l.starts_with("127.0.0.1 - - [") && l.contains("\"GET /bytes/100 HTTP/3.0\" 200 100 "),
            "{l}"
        );
        // $ssl_protocol, $ssl_session_reused (unknown per QUIC connection),
        // then the time, the connection, the request on it, early data.
        let tail: Vec<&str> = l.rsplit(' ').take(7).collect();
        assert_eq!((tail[6], tail[5]), ("TLSv1.3", "-"), "{l}");
        assert_eq!(tail[1], ".", "{l}");
        let on_conn: u64 = tail[2].parse().expect("$request_on_conn");
        assert!(on_conn >= 1, "{l}");
    }
    for l in &tcp {
        assert!(
            l.contains("\"GET /bytes/100 HTTP/") && l.contains("\" 200 100 "),
            "{l}"
        );
        assert!(l.contains(" TLSv1.3 "), "{l}");
    }
}
