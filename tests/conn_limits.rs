//! The connection limits against clients that hold a slot and do nothing
//! (issue 29, second hardening round), over TCP (`--max-connections`) and
//! QUIC (`--quic-max-connections`): at the limit the longest-idle
//! connection closes to make room, and a real client is served within a
//! second. Everything runs on 127.0.0.1, bounded in count and time.
//!
//! The half-open QUIC flood here is a test-only helper: a quinn client
//! sends its Initials to a capture socket, and those real ClientHellos are
//! replayed to the server from fresh sockets that never read an answer.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Metrics, Serve, expect_ok, load_json, num, rt, run_tlslab, tempdir};

/// A bound on every wait here.
const WAIT: Duration = Duration::from_secs(10);

fn quic(m: &Metrics, name: &str) -> f64 {
    m.count(name, &[("transport", "quic")])
}

fn quic_closed(m: &Metrics, reason: &str) -> f64 {
    m.count(
        "tlslab_transport_idle_closed_total",
        &[("transport", "quic"), ("reason", reason)],
    )
}

/// A QUIC client config trusting `ca` (ALPN h3), sending a PING every
/// `keep_alive` if set.
fn client_config(ca: &Path, keep_alive: Option<Duration>) -> quinn::ClientConfig {
    let tls = common::tls_client(ca, b"h3");
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls))
        .expect("a QUIC-capable rustls config");
    let mut c = quinn::ClientConfig::new(Arc::new(quic));
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(WAIT.try_into().expect("a valid idle timeout")));
    t.keep_alive_interval(keep_alive);
    c.transport_config(Arc::new(t));
    c
}

/// A handshake from a new UDP endpoint: the connection with its endpoint,
/// how long it took, or why it failed.
async fn connect(
    s: &Serve,
    keep_alive: Option<Duration>,
) -> Result<(quinn::Endpoint, quinn::Connection, Duration), quinn::ConnectionError> {
    let ep = quinn::Endpoint::client((std::net::Ipv4Addr::LOCALHOST, 0).into())
        .expect("a UDP socket on 127.0.0.1");
    let ca = s.ca.as_ref().expect("an ephemeral CA");
    let t0 = Instant::now();
    let connecting = ep
        .connect_with(client_config(ca, keep_alive), s.https, "localhost")
        .expect("a connection attempt");
    match tokio::time::timeout(WAIT, connecting).await {
        Ok(r) => r.map(|c| (ep, c, t0.elapsed())),
        Err(_) => panic!("QUIC handshake took over {WAIT:?}"),
    }
}

/// `n` real QUIC Initials (each a whole ClientHello, one or two
/// datagrams) that a quinn client sent to a capture socket, by
/// destination connection ID.
async fn capture_initials(ca: &Path, n: usize) -> Vec<Vec<Vec<u8>>> {
    let capture = UdpSocket::bind("127.0.0.1:0").expect("a capture socket");
    capture.set_nonblocking(true).expect("non-blocking");
    let to = capture.local_addr().expect("its address");
    let ep = quinn::Endpoint::client((std::net::Ipv4Addr::LOCALHOST, 0).into())
        .expect("a UDP socket on 127.0.0.1");
    let _attempts: Vec<_> = (0..n)
        .map(|_| {
            ep.connect_with(client_config(ca, None), to, "localhost")
                .expect("a connection attempt")
        })
        .collect();
    let mut by_cid: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    let mut buf = [0u8; 2048];
    let t0 = Instant::now();
    // The first flight of each attempt, before any retransmission.
    while t0.elapsed() < Duration::from_millis(200) || by_cid.len() < n {
        // Let quinn's driver run between reads.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        while let Ok((k, _)) = capture.recv_from(&mut buf) {
            // Long header: flags, version (4), DCID length, DCID.
            let d = &buf[..k];
            if k > 6 && d[0] & 0x80 != 0 {
                let len = usize::from(d[5]);
                if let Some(cid) = d.get(6..6 + len) {
                    let flight = by_cid.entry(cid.to_vec()).or_default();
                    if flight.len() < 2 {
                        flight.push(d.to_vec());
                    }
                }
            }
        }
        assert!(
            t0.elapsed() < WAIT,
            "captured {} of {n} Initials",
            by_cid.len()
        );
    }
    ep.close(0u32.into(), b"captured");
    by_cid.into_values().take(n).collect()
}

/// Sends each captured Initial to `server` from its own socket, which
/// never reads an answer (a half-open handshake); the sockets are kept
/// open so no ICMP error reaches the server.
fn flood(server: SocketAddr, initials: &[Vec<Vec<u8>>]) -> Vec<UdpSocket> {
    initials
        .iter()
        .map(|flight| {
            let s = UdpSocket::bind("127.0.0.1:0").expect("a flood socket");
            for d in flight {
                let _ = s.send_to(d, server);
            }
            s
        })
        .collect()
}

/// `load --h3 -c 1 -n N` of `/bytes/100` against `s`: the requests that
/// succeeded.
fn load_h3(s: &Serve, n: u32) -> f64 {
    let dir = tempdir();
    let json = dir.path().join("load.json");
    let (url, n_arg) = (s.url("/bytes/100"), n.to_string());
    let json_arg = json.to_str().expect("a utf-8 path");
    let args = [
        "load",
        &url,
        "--h3",
        "--cacert",
        s.ca_str(),
        "-c",
        "1",
        "-n",
        &n_arg,
        "--no-progress",
        "--json",
        json_arg,
    ];
    expect_ok(&run_tlslab(&args, Duration::from_secs(60)));
    num(&load_json(&json), "requests/succeeded")
}

// Regression, issue 29 finding 1: with `--quic-retry off`, Initials that
// never continue held every slot until the 10 s handshake timeout, and a
// real client was refused.
#[test]
fn half_open_quic_handshakes_cannot_lock_out_a_real_client() {
    let s = Serve::start(&[
        "--h3",
        "--quic-max-connections",
        "20",
        "--quic-retry",
        "off",
    ]);
    let rt = rt();
    let ca = s.ca.clone().expect("an ephemeral CA");
    // Five more than the limit: those wait for room in front of the real
    // client, each behind an eviction.
    let initials = rt.block_on(capture_initials(&ca, 25));
    let _flood = flood(s.https, &initials);
    let (m, text) = s.metrics_until(|m| quic(m, "tlslab_transport_open_connections") == 20.0);
    assert_eq!(
        quic(&m, "tlslab_transport_open_connections"),
        20.0,
        "{text}"
    );
    rt.block_on(async {
        let (ep, c, took) = connect(&s, None)
            .await
            .expect("a real client is served at the limit under the flood");
        assert!(took < Duration::from_secs(1), "handshake took {took:?}");
        c.close(0u32.into(), b"done");
        ep.wait_idle().await;
    });
    assert_eq!(load_h3(&s, 5), 5.0);
    let m = s.metrics();
    assert!(quic_closed(&m, "evicted") >= 2.0, "{}", s.metrics_text());
    assert!(
        m.count(
            "tlslab_transport_handshake_failures_total",
            &[("transport", "quic"), ("reason", "evicted")],
        ) >= 2.0,
        "{}",
        s.metrics_text()
    );
}

// Regression, issue 29 finding 1: `--quic-retry` was `off` by default, so
// the same flood filled the slots of a server started with the defaults.
#[test]
fn by_default_a_half_open_flood_gets_retries_and_takes_no_slot() {
    let s = Serve::start(&["--h3", "--quic-max-connections", "20"]);
    let rt = rt();
    let ca = s.ca.clone().expect("an ephemeral CA");
    let initials = rt.block_on(capture_initials(&ca, 60));
    let _flood = flood(s.https, &initials);
    // 50 of the 60 come after half the limit is open; a loaded machine's
    // socket buffer may drop some of the burst, so ask for most, not all.
    let (m, text) = s.metrics_until(|m| quic(m, "tlslab_transport_retries_total") >= 20.0);
    assert!(quic(&m, "tlslab_transport_retries_total") >= 20.0, "{text}");
    assert!(
        quic(&m, "tlslab_transport_open_connections") <= 10.0,
        "{text}"
    );
    rt.block_on(async {
        let (ep, c, took) = connect(&s, None)
            .await
            .expect("a real client is served under the flood");
        assert!(took < Duration::from_secs(1), "handshake took {took:?}");
        c.close(0u32.into(), b"done");
        ep.wait_idle().await;
    });
    assert_eq!(load_h3(&s, 5), 5.0);
}

// Regression, issue 29 finding 2: QUIC clients that only sent PINGs held
// their slots past --quic-idle-timeout (PINGs reset quinn's idle timer),
// QUIC had no request or keep-alive timeout, and at the limit a new
// client was refused instead of the longest-idle one closed.
#[test]
fn quiet_quic_clients_are_evicted_at_the_limit_and_closed_at_the_request_timeout() {
    let s = Serve::start(&[
        "--h3",
        "--quic-max-connections",
        "5",
        "--request-timeout",
        "3s",
        "--keepalive-timeout",
        "3s",
    ]);
    let rt = rt();
    rt.block_on(async {
        let ping = Some(Duration::from_millis(200));
        let mut quiet = Vec::new();
        for i in 0..5 {
            quiet.push(
                connect(&s, ping)
                    .await
                    .unwrap_or_else(|e| panic!("quiet {i}: {e}")),
            );
        }
        // Idle (PINGs only) for longer than the least idle time to evict.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let t0 = Instant::now();
        let (ep, c, took) = connect(&s, None)
            .await
            .expect("a new client is served at the limit");
        assert!(took < Duration::from_secs(1), "handshake took {took:?}");
        // The longest-idle one, the first, made room with H3_NO_ERROR.
        let first = tokio::time::timeout(WAIT, quiet[0].1.closed())
            .await
            .expect("the first quiet client is closed");
        match first {
            quinn::ConnectionError::ApplicationClosed(a) => {
                assert_eq!(a.error_code, quinn::VarInt::from_u32(0x100), "{a:?}")
            }
            e => panic!("the evicted client saw {e}"),
        }
        c.close(0u32.into(), b"done");
        ep.wait_idle().await;
        // The others: closed at the request timeout, whatever their PINGs.
        for (i, (_, q, _)) in quiet.iter().enumerate().skip(1) {
            let why = tokio::time::timeout(WAIT, q.closed())
                .await
                .unwrap_or_else(|_| panic!("quiet {i} still open after {WAIT:?}"));
            assert!(
                matches!(why, quinn::ConnectionError::ApplicationClosed(_)),
                "quiet {i}: {why}"
            );
        }
        let held = t0.elapsed();
        assert!(
            held >= Duration::from_millis(1500) && held < Duration::from_secs(5),
            "the quiet clients were closed {held:?} after the eviction, not at about 3 s"
        );
    });
    let m = s.metrics();
    assert_eq!(quic_closed(&m, "evicted"), 1.0, "{}", s.metrics_text());
    assert_eq!(
        quic_closed(&m, "request_timeout"),
        4.0,
        "{}",
        s.metrics_text()
    );
    // The server is not worn out: load --h3 is served in full.
    assert_eq!(load_h3(&s, 3), 3.0);
}

/// `GET /health` over HTTPS: the status line and how long the request
/// took from connect.
fn https_get(addr: SocketAddr, ca: &Path) -> (String, Duration) {
    let t0 = Instant::now();
    let text = common::https_get_health(addr, ca);
    (
        text.lines().next().unwrap_or_default().to_string(),
        t0.elapsed(),
    )
}

// Regression, issue 29 finding 7: TCP sockets that sent nothing to the
// HTTPS port were still before their handshake, so the limit could not
// evict them and a real client waited for the handshake timeout.
#[test]
fn silent_sockets_on_the_https_port_are_evicted_oldest_first_at_the_limit() {
    let s = Serve::start(&["--max-connections", "10"]);
    // Apart in time, so that "oldest" is one socket (the registry's
    // stamps are in milliseconds, taken when the server's task starts).
    let mut silent: Vec<TcpStream> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(30));
            TcpStream::connect_timeout(&s.https, WAIT).expect("a silent connection")
        })
        .collect();
    let (m, text) = s.metrics_until(|m| m.count("tlslab_open_connections", &[]) == 10.0);
    assert_eq!(m.count("tlslab_open_connections", &[]), 10.0, "{text}");
    std::thread::sleep(Duration::from_millis(700));
    let ca = s.ca.clone().expect("an ephemeral CA");
    let (status, took) = https_get(s.https, &ca);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(took < Duration::from_secs(1), "served after {took:?}");
    // The oldest silent one made room: the server closed it.
    silent[0]
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("a read timeout");
    let mut b = [0u8; 16];
    // Closed: end of stream or a reset, not the read timeout.
    let oldest = silent[0].read(&mut b);
    assert!(
        matches!(&oldest, Ok(0))
            || oldest.as_ref().is_err_and(|e| !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )),
        "the oldest silent socket is still open: {oldest:?}"
    );
    silent[9]
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let e = silent[9].read(&mut b).expect_err("the youngest is kept");
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{e}"
    );
    let m = s.metrics();
    assert_eq!(
        m.count("tlslab_idle_closed_total", &[("reason", "evicted")]),
        1.0,
        "{}",
        s.metrics_text()
    );
    silent.clear();
}

/// `load --h3 --flood KIND` for `secs` against `s` beside a one-client
/// load: the JSON report and stderr.
fn load_h3_flood(s: &Serve, kind: &str, rate: &str, secs: &str) -> (serde_json::Value, String) {
    let dir = tempdir();
    let json = dir.path().join("load.json");
    let url = s.url("/bytes/100");
    let json_arg = json.to_str().expect("a utf-8 path");
    let line = "load URL --h3 --cacert CA -c 1 -d D --no-progress --json J \
                --flood KIND --flood-rate R --confirm-flood";
    let vars = [
        ("URL", url.as_str()),
        ("CA", s.ca_str()),
        ("D", secs),
        ("J", json_arg),
        ("KIND", kind),
        ("R", rate),
    ];
    let out = run_tlslab(&common::args_with(line, &vars), Duration::from_secs(60));
    expect_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (load_json(&json), stderr)
}

// Issue 29: the QUIC floods as a CLI (`load --h3 --flood KIND`), loudly
// warned, bounded by the run, and reporting what was sent and what came
// back; the real client beside each flood is served in full.
#[test]
fn load_h3_flood_sends_each_kind_and_reports_what_came_back() {
    let s = Serve::start(&[
        "--h3",
        "--quic-max-connections",
        "20",
        "--request-timeout",
        "1s",
    ]);
    // Valid Initials: past half the limit the server answers with Retry.
    let (r, stderr) = load_h3_flood(&s, "valid", "200/s", "2s");
    assert!(stderr.contains("WARNING: --flood valid"), "{stderr}");
    assert!(common::errors(&r).values().sum::<u64>() == 0, "{r}");
    assert!(num(&r, "requests/succeeded") > 0.0, "{r}");
    assert_eq!(r["transport"]["flood"]["kind"], "valid", "{r}");
    let valid = num(&r, "transport/flood/valid");
    assert!(valid >= 200.0, "2 s at 200/s: {r}");
    assert!(valid <= 401.0, "bounded by the run: {r}");
    assert!(num(&r, "transport/flood/received/retry") > 0.0, "{r}");
    assert!(
        num(&r, "transport/flood/received/datagrams") >= num(&r, "transport/flood/received/retry"),
        "{r}"
    );
    // Junk: sent, counted; the server keeps no state for it.
    let (r, _) = load_h3_flood(&s, "junk", "500", "2s");
    assert!(common::errors(&r).values().sum::<u64>() == 0, "{r}");
    let junk = num(&r, "transport/flood/junk_random") + num(&r, "transport/flood/junk_header");
    assert!(junk >= 500.0, "{r}");
    assert_eq!(num(&r, "transport/flood/valid"), 0.0, "{r}");
    // PING-only clients past the limit: evicted there, or closed at the
    // request timeout, and counted as closed by the server.
    let (r, stderr) = load_h3_flood(&s, "ping-only", "15", "3s");
    assert!(stderr.contains("WARNING: --flood ping-only"), "{stderr}");
    assert!(common::errors(&r).values().sum::<u64>() == 0, "{r}");
    assert!(num(&r, "requests/succeeded") > 0.0, "{r}");
    let p = "transport/flood/ping_only";
    assert!(num(&r, &format!("{p}/connected")) >= 20.0, "{r}");
    assert!(num(&r, &format!("{p}/closed_by_server")) > 0.0, "{r}");
    assert!(num(&r, &format!("{p}/clients")) <= 46.0, "bounded: {r}");
    let m = s.metrics();
    assert!(quic_closed(&m, "evicted") + quic_closed(&m, "request_timeout") > 0.0);
}
