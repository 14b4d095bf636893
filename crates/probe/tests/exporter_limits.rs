//! The exporter's HTTP listener against idle and slowloris clients, over
//! real loopback sockets: 300 connections that trickle a request head are
//! closed by the request timeout, and while they are open (more of them
//! than the connection limit) a real scraper is still answered at once,
//! because at the limit the connection idle longest is closed. Times are
//! scaled down (a 1 s timeout, a byte every 200 ms).

use std::time::{Duration, Instant};

use tlslab_probe::ProbeConfig;
use tlslab_probe::exporter::{Limits, serve_with};
use tlslab_testkit::slowloris::{Slowloris, served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn exporter(limits: Limits) -> std::net::SocketAddr {
    let cfg = ProbeConfig::from_load(
        &tlslab_load::LoadConfig::new(Vec::new()),
        Duration::from_secs(2),
    )
    .expect("probe config");
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve_with(l, cfg, limits));
    addr
}

/// A scraper's request: `GET /health`, answered with 200 and closed.
async fn scrape(addr: std::net::SocketAddr) -> Result<Duration, String> {
    let t = Instant::now();
    let run = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&got).into_owned();
        if text.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(format!("answer: {text:?}"))
        }
    };
    match tokio::time::timeout(Duration::from_secs(2), run).await {
        Ok(Ok(())) => Ok(t.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no answer within 2 s".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_are_closed_and_cannot_lock_a_scraper_out() {
    const SLOW: usize = 300;
    let addr = exporter(Limits {
        max_connections: 50,
        request_timeout: Duration::from_secs(1),
    })
    .await;
    let slow = Slowloris::start(addr, SLOW, |i| {
        const HEAD: &[u8] = b"GET /probe?target=https://a.test/ HTTP/1.1\r\nX-Slow: ";
        HEAD.get(i).copied().unwrap_or(b'a')
    });
    // Once the slow clients hold every slot, each scraper closes the one
    // idle longest. (During the burst itself a scraper is just one more
    // new connection and may be the one closed.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let mut times = Vec::new();
    while t0.elapsed() < Duration::from_millis(2500) {
        let took = scrape(addr)
            .await
            .unwrap_or_else(|e| panic!("a scraper was locked out during the slowloris: {e}"));
        times.push(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (served, median, worst) = served(times);
    let closed = slow.closed_in_time().await;
    eprintln!(
        "{served} scrapes answered (median {median:?}, slowest {worst:?}); \
         {closed}/{SLOW} slow clients closed"
    );
    assert!(served >= 20, "only {served} scrapes answered");
    assert!(
        median < Duration::from_millis(250),
        "median scrape {median:?}"
    );
    assert_eq!(
        closed, SLOW as u64,
        "every slow client must be closed within 3 s (1 s request timeout, 50-connection limit)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_by_the_request_timeout() {
    let addr = exporter(Limits {
        max_connections: 8,
        request_timeout: Duration::from_millis(500),
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 256];
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    let took = t.elapsed();
    assert!(r.is_ok(), "an idle connection was still open after 5 s");
    assert!(took < Duration::from_millis(1500), "closed after {took:?}");
    // More idle connections than the limit: a scraper is still answered.
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    scrape(addr)
        .await
        .expect("a scraper at the connection limit");
}
