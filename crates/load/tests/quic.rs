//! `load --h3` against servers that refuse or say nothing (issue 29 finding
//! 4), the bounded Initial flood and the PING-only clients (issue 33 item
//! 4), on 127.0.0.1.

mod common;

use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{generated, loopback};
use tlslab_crypto::pki::{self, KeyType};
use tlslab_load::quic::flood::{self, Flood, FloodKind};
use tlslab_load::{Error, Http3, LoadConfig, Target, Trust};

const STREAMS: Http3 = Http3 {
    max_concurrent_streams: 1,
    flood: None,
    qlog: None,
    new_socket: false,
    rebind_after: None,
};

/// A closed-loop `--h3` config against `addr`: one client for `secs`,
/// certificates unchecked.
fn h3_config(addr: SocketAddr, secs: u64) -> LoadConfig {
    let mut c = LoadConfig::new(vec![Target::parse(&format!("https://{addr}/")).unwrap()]);
    c.http3 = Some(STREAMS);
    c.trust = Trust::Insecure;
    c.duration = Some(Duration::from_secs(secs));
    c.clients = 1;
    c.threads = 1;
    c.timeout = Duration::from_secs(1);
    c
}

/// A QUIC server that refuses every connection (CONNECTION_REFUSED), and
/// counts the attempts, on a runtime of its own.
fn refusing_server() -> (SocketAddr, Arc<AtomicU64>, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let g = pki::generate(KeyType::EcdsaP256, &["localhost".into()]).unwrap();
    let config =
        quinn::ServerConfig::with_single_cert(g.chain_der().unwrap(), g.key_der().unwrap())
            .unwrap();
    let endpoint = {
        let _in = rt.enter();
        quinn::Endpoint::server(config, loopback()).unwrap()
    };
    let addr = endpoint.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let count = seen.clone();
    rt.spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
        }
    });
    (addr, seen, rt)
}

// Issue 29 finding 4: against a refusing server `load --h3` tried again
// at once, 34,488 attempts and 8.6 s of CPU in 8 s; it backs off now.
#[test]
fn h3_backs_off_against_a_refusing_server() {
    let (addr, seen, _rt) = refusing_server();
    let cfg = h3_config(addr, 2);
    let report = tlslab_load::run(&cfg).expect("the server answers (it refuses)");
    let attempts = seen.load(Ordering::Relaxed);
    // 10 ms base, doubling to 320 ms: about 15 attempts in 2 s; at once,
    // thousands.
    assert!(attempts >= 2, "{attempts} attempts");
    assert!(attempts < 100, "{attempts} attempts in 2 s: no backoff");
    assert_eq!(report.requests.succeeded, 0);
    assert!(report.errors.get("refused").copied().unwrap_or(0) >= 2);
    let b = report.backoff.expect("the waits are reported");
    assert!(b.waits >= 1 && b.waited_s > 0.0, "{b:?}");
}

// Issue 29 finding 4: against a UDP port where nobody answers, `load --h3`
// said "the server is too slow (or hangs)"; it says nothing answered.
#[test]
fn h3_says_no_quic_server_answered_on_a_silent_port() {
    let silent = UdpSocket::bind(loopback()).unwrap();
    let addr = silent.local_addr().unwrap();
    let cfg = h3_config(addr, 1);
    let err = tlslab_load::run(&cfg).expect_err("nothing answered");
    assert!(matches!(err, Error::NoQuicServer { .. }), "{err:?}");
    assert!(!err.is_usage(), "a runtime failure: exit 1");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("no QUIC server answered at {addr} (UDP)")),
        "{msg}"
    );
    assert!(msg.contains("--h3"), "{msg}");
}

/// Datagrams received on `sink` until `quiet` passes without one: their
/// sizes and source addresses.
fn drain(sink: &UdpSocket, quiet: Duration) -> Vec<(Vec<u8>, SocketAddr)> {
    sink.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = sink.recv_from(&mut buf) {
        got.push((buf[..n].to_vec(), from));
        if got.len() > 100_000 {
            break;
        }
    }
    got
}

#[test]
fn a_mixed_flood_sends_each_kind_from_many_ports_and_stops_by_itself() {
    let sink = UdpSocket::bind(loopback()).unwrap();
    let target = sink.local_addr().unwrap();
    let tls = flood::tls_for(&LoadConfig::new(vec![
        Target::parse(&format!("https://{target}/")).unwrap(),
    ]))
    .unwrap();
    let f = Flood::new(target, FloodKind::Mixed, 300, Duration::from_secs(1));
    let t0 = Instant::now();
    let running = flood::start(f, tls).unwrap();
    let got = drain(&sink, Duration::from_millis(500));
    let sent = running.wait();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "ends at its duration"
    );
    // 300 a second for 1 s, a third of each kind.
    assert!(
        (250..=300).contains(&(sent.valid + sent.junk_random + sent.junk_header)),
        "{sent:?}"
    );
    for n in [sent.valid, sent.junk_random, sent.junk_header] {
        assert!((80..=100).contains(&n), "{sent:?}");
    }
    // X25519MLKEM768's key share does not fit one Initial: two datagrams.
    assert_eq!(sent.valid_datagrams, 2 * sent.valid, "{sent:?}");
    assert_eq!(sent.send_errors, 0);
    let total = sent.valid_datagrams + sent.junk_random + sent.junk_header;
    assert_eq!(got.len() as u64, total, "the sink got every datagram");
    let ports: HashSet<u16> = got.iter().map(|(_, a)| a.port()).collect();
    assert_eq!(
        ports.len(),
        flood::DEFAULT_SOCKETS,
        "from many source ports"
    );
    // Every datagram is Initial-sized; the headers and valid ones are v1
    // Initials (long header, type 0).
    assert!(got.iter().all(|(d, _)| d.len() >= 1200));
    let initials = got
        .iter()
        .filter(|(d, _)| d[0] & 0xf0 == 0xc0 && d[1..5] == [0, 0, 0, 1])
        .count() as u64;
    assert!(
        initials >= sent.valid_datagrams + sent.junk_header,
        "{initials} v1 Initials of {total}"
    );
}

#[test]
fn a_flood_stops_at_its_count_and_when_asked() {
    let sink = UdpSocket::bind(loopback()).unwrap();
    let target = sink.local_addr().unwrap();
    let tls = flood::tls_for(&LoadConfig::new(vec![
        Target::parse(&format!("https://{target}/")).unwrap(),
    ]))
    .unwrap();
    let mut f = Flood::new(target, FloodKind::Junk, 1000, Duration::from_secs(60));
    f.max_initials = 50;
    f.sockets = 4;
    let t0 = Instant::now();
    let sent = flood::start(f.clone(), tls.clone()).unwrap().wait();
    assert_eq!(sent.junk_random + sent.junk_header, 50, "{sent:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    f.max_initials = flood::MAX_INITIALS;
    let running = flood::start(f, tls).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t1 = Instant::now();
    let sent = running.stop();
    assert!(t1.elapsed() < Duration::from_secs(1), "stops when asked");
    assert!(sent.junk_random > 0 && sent.elapsed_s < 5.0, "{sent:?}");
    // Loopback only.
    let far = Flood::new(
        "10.0.0.1:443".parse().unwrap(),
        FloodKind::Junk,
        10,
        Duration::from_secs(1),
    );
    let tls = flood::tls_for(&LoadConfig::new(vec![
        Target::parse("https://127.0.0.1/").unwrap(),
    ]))
    .unwrap();
    assert!(flood::start(far, tls).is_err());
}

#[test]
fn ping_only_clients_hold_connections_with_pings_and_no_request() {
    let g = generated();
    let tls = tlslab_server::TlsSettings::new(tlslab_server::CertSource::Generated(g));
    let cfg = tlslab_server::ServeConfig::new(loopback(), tlslab_server::Content::Empty, tls);
    let h3 = tlslab_server::H3Settings::new(loopback());
    let server = tlslab_server::Server::start_with_h3(cfg, Some(h3)).unwrap();
    let addr = server.h3_addr().unwrap();
    let tls = flood::tls_for(&LoadConfig::new(vec![
        Target::parse(&format!("https://{addr}/")).unwrap(),
    ]))
    .unwrap();
    let rt = tlslab_testkit::rt();
    let r = rt
        .block_on(flood::ping_only(
            addr,
            "localhost",
            tls,
            3,
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
        .unwrap();
    assert_eq!((r.connected, r.failed, r.closed_early), (3, 0, 0), "{r:?}");
    assert!(r.pings >= 3 * 5, "{r:?}");
    let s = server.snapshot().quic.unwrap();
    assert!(s.established >= 3, "{s:?}");
    assert_eq!(s.requests, 0, "no request");
}
