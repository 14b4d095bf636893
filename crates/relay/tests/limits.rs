//! The relay's bounds over real loopback sockets: a connection idle both
//! ways is closed (a busy one is not), what all connections hold stays
//! under the relay-wide cap, a bandwidth-limited direction holds about a
//! second of its rate rather than 4 MiB, and a client that leaves (a
//! reset) frees its connection and queue at once, not when the queued
//! bytes were due.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use tlslab_relay::{Bandwidth, Conditions, Relay, RelayConfig, window};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that sends `total` bytes to each client as fast as it may,
/// then closes.
async fn flood_server(total: usize) -> SocketAddr {
    let l = TcpListener::bind(loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let block = vec![b'z'; 64 * 1024];
                let mut left = total;
                while left > 0 {
                    let k = left.min(block.len());
                    if s.write_all(&block[..k]).await.is_err() {
                        return;
                    }
                    left -= k;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let idle = Duration::from_millis(500);
    let relay = Relay::start(RelayConfig {
        idle_timeout: idle,
        ..cfg(echo_server().await, delay(5))
    })
    .await
    .unwrap();
    let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
    c.write_all(b"a").await.unwrap();
    let mut one = [0u8; 1];
    c.read_exact(&mut one).await.unwrap();
    let t = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut one))
        .await
        .expect("an idle connection must be closed within 5 s")
        .unwrap_or(0);
    let took = t.elapsed();
    assert_eq!(n, 0);
    assert!(
        took >= idle - Duration::from_millis(50) && took < idle + Duration::from_millis(700),
        "closed after {took:?}, want about {idle:?}"
    );
    // A byte each way every 150 ms for 3 idle timeouts: kept open.
    let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.write_all(b"b").await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), c.read_exact(&mut one))
            .await
            .expect("echo within 1 s")
            .expect("a busy connection must stay open");
    }
    let stats = relay.shutdown().await;
    assert_eq!(stats.idle_closed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_all_connections_hold_stays_under_the_relay_wide_cap() {
    // 16 clients each download 1 MiB through a 200 ms delay: without a cap
    // the relay would hold all 16 MiB at once (each direction may hold 4 MiB).
    const CLIENTS: usize = 16;
    const EACH: usize = 1024 * 1024;
    const CAP: usize = 2 * 1024 * 1024;
    let relay = Relay::start(RelayConfig {
        max_queued: CAP,
        ..cfg(flood_server(EACH).await, delay(200))
    })
    .await
    .unwrap();
    let addr = relay.local_addr();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut got))
                .await
                .expect("download within 20 s")
                .unwrap();
            got.len()
        }));
    }
    let mut most = 0;
    while clients.iter().any(|c| !c.is_finished()) {
        most = most.max(relay.stats().queued);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for c in clients {
        assert_eq!(c.await.unwrap(), EACH, "every byte arrives");
    }
    let stats = relay.shutdown().await;
    eprintln!(
        "held at most {} B (sampled {most} B) under a {CAP} B cap",
        stats.queued_peak
    );
    assert!(stats.queued_peak as usize <= CAP, "{stats:?}");
    assert!(
        stats.queued_peak as usize >= CAP / 2,
        "the cap was never approached: {stats:?}"
    );
    assert_eq!(stats.queued, 0, "{stats:?}");
}

#[test]
fn a_bandwidth_limited_direction_holds_about_a_second_of_its_rate() {
    let slow = Conditions {
        bandwidth: Some(Bandwidth::bits_per_sec(100_000)),
        ..Conditions::default()
    };
    // 100 kbit/s is 12.5 kB/s: a second and an RTO of it is far below the
    // two-read floor.
    assert_eq!(window(&slow), 128 * 1024);
    assert_eq!(window(&Conditions::default()), 4 * 1024 * 1024);
    let fast = Conditions {
        bandwidth: Some(Bandwidth::bits_per_sec(8_000_000)),
        ..delay(5)
    };
    // 1 MB/s for 2 x 5 ms + an RTO (210 ms) + 1 s.
    assert_eq!(window(&fast), 1_220_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_resets_frees_its_connection_and_queue_at_once() {
    // A 5 s delay: what the upstream sent is due 5 s later. The client
    // half-closes, then resets before anything is due.
    let relay = Relay::start(cfg(flood_server(64 * 1024 * 1024).await, delay(5000)))
        .await
        .unwrap();
    let c = TcpStream::connect(relay.local_addr()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while relay.stats().queued < 1024 * 1024 {
        assert!(Instant::now() < deadline, "{:?}", relay.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut c = c;
    c.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(relay.stats().open, 1);
    c.set_zero_linger().unwrap();
    drop(c);
    let t = Instant::now();
    while relay.stats().open > 0 || relay.stats().queued > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "1 s after the client's reset the relay still holds its connection: {:?}",
            relay.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("freed {:?} after the reset", t.elapsed());
}
