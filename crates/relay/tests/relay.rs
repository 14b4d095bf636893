//! The relay over real loopback sockets: the delay is paid per flight, the
//! bandwidth bounds a transfer, half-close and a dead upstream behave as on
//! a real path. Lower bounds are strict (the relay may never be faster than
//! the path it emulates); upper bounds leave room for a loaded machine.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tlslab_relay::{Bandwidth, Conditions, Relay, RelayThread};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A relay under `cond` in front of an echo server, and a client
/// connected to it.
async fn echo_via_relay(cond: Conditions) -> (Relay, TcpStream) {
    let relay = Relay::start(cfg(echo_server().await, cond)).await.unwrap();
    let c = TcpStream::connect(relay.local_addr()).await.unwrap();
    (relay, c)
}

#[tokio::test]
async fn every_round_trip_pays_the_rtt() {
    let (relay, mut c) = echo_via_relay(delay(30)).await;
    c.set_nodelay(true).unwrap();
    let mut buf = [0u8; 5];
    for _ in 0..3 {
        let t = Instant::now();
        c.write_all(b"hello").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        let rtt = t.elapsed();
        assert_eq!(&buf, b"hello");
        assert!(
            rtt >= Duration::from_millis(60),
            "round trip {rtt:?} < RTT 60 ms"
        );
        assert!(rtt < Duration::from_millis(250), "round trip {rtt:?}");
    }
    let stats = relay.shutdown().await;
    assert_eq!(stats.connections, 1);
    assert_eq!((stats.bytes_up, stats.bytes_down), (15, 15));
}

#[tokio::test]
async fn bandwidth_bounds_a_transfer() {
    // 160 kB at 8 Mbit/s is 160 ms on the wire, plus 5 ms of delay.
    let cond = Conditions {
        bandwidth: Some(Bandwidth::bits_per_sec(8_000_000)),
        ..delay(5)
    };
    let (_relay, mut c) = echo_via_relay(cond).await;
    let data = vec![7u8; 160_000];
    let t = Instant::now();
    let (mut r, mut w) = c.split();
    let send = async { w.write_all(&data).await.unwrap() };
    let recv = async {
        let mut got = vec![0u8; data.len()];
        r.read_exact(&mut got).await.unwrap();
        got
    };
    let (_, got) = tokio::join!(send, recv);
    let took = t.elapsed();
    assert_eq!(got, data);
    // Up and down each cross an 8 Mbit/s link; they pipeline, so the
    // echo takes one transfer time plus a little, not two.
    assert!(took >= Duration::from_millis(170), "{took:?}");
    assert!(took < Duration::from_millis(600), "{took:?}");
}

#[tokio::test]
async fn half_close_reaches_the_upstream_and_its_answer_comes_back() {
    let (_relay, mut c) = echo_via_relay(delay(10)).await;
    c.write_all(b"abc").await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut got))
        .await
        .expect("the relay passes the FIN and the answer")
        .unwrap();
    assert_eq!(got, b"abcbye");
}

#[tokio::test]
async fn a_dead_upstream_closes_the_client_and_is_counted() {
    // A port with nothing listening: bind, note it, close.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let relay = Relay::start(cfg(dead, delay(1))).await.unwrap();
    let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("closed promptly")
        .unwrap_or(0);
    assert_eq!(n, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(relay.stats().upstream_failures, 1);
}

#[test]
fn a_relay_thread_serves_sync_callers_and_stops_on_drop() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream = rt.block_on(echo_server());
    let relay = RelayThread::spawn(cfg(upstream, delay(20))).unwrap();
    let addr = relay.local_addr();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    use std::io::{Read, Write};
    let t = Instant::now();
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(40));
    let stats = relay.stop();
    assert_eq!(stats.connections, 1);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );
}

#[tokio::test]
async fn invalid_conditions_are_refused_before_binding() {
    let c = Conditions {
        loss: 1.5,
        ..Conditions::default()
    };
    let err = Relay::start(cfg(loopback(), c)).await.unwrap_err();
    assert!(err.to_string().contains("loss"), "{err}");
}
