//! The dispatcher against hostile and failing peers, over real loopback
//! sockets: a slowloris (300 clients trickling a ClientHello) is closed by
//! `hello_timeout` while real clients keep being served; a proxied
//! connection idle both ways is closed by `idle_timeout` (and a busy one
//! is not); a node that resets after reading the hello passes the reset to
//! the client at once. Times are scaled down (hundreds of ms for the
//! seconds and minutes of a deployment) so each test takes seconds.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tlslab_dispatch::{BadInputAction, Config, Dispatcher, HealthCheck, Policy};
use tlslab_testkit::slowloris::{Slowloris, served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A real ClientHello (rustls, TLS 1.2 and 1.3 offered).
fn real_hello() -> Vec<u8> {
    use tlslab_crypto::provider::{Algorithms, Version, build};
    let prov = build(&[Version::Tls12, Version::Tls13], &Algorithms::default()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(prov)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let mut c =
        rustls::ClientConnection::new(Arc::new(cfg), "example.com".try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

/// Reads one TLS record (header and body) or fails.
async fn read_record(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await?;
    let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    Ok(body)
}

/// What the test node does with each connection once it has read one
/// whole TLS record (the ClientHello).
#[derive(Clone, Copy)]
enum Node {
    /// Answers "ok" and closes.
    AnswerAndClose,
    /// Answers "hi" and then echoes whatever comes, never closing first.
    AnswerAndStay,
    /// Resets the connection (`SO_LINGER` 0, then close).
    Reset,
}

async fn node(kind: Node) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                if read_record(&mut s).await.is_err() {
                    return;
                }
                match kind {
                    Node::AnswerAndClose => {
                        let _ = s.write_all(b"ok").await;
                    }
                    Node::AnswerAndStay => {
                        let _ = s.write_all(b"hi").await;
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                    Node::Reset => {
                        let _ = s.set_zero_linger();
                    }
                }
            });
        }
    });
    addr
}

struct Running {
    addr: SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn dispatcher(node: SocketAddr, hello: Duration, idle: Duration) -> Running {
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        backends: vec![node.to_string().parse().unwrap()],
        policy: Policy::Session,
        session_timeout: Duration::from_secs(60),
        max_sessions: NonZeroUsize::new(1000).unwrap(),
        hello_timeout: hello,
        idle_timeout: idle,
        // The default: forward what is not TLS. A stalled hello must be
        // closed anyway.
        bad_input: BadInputAction::Forward,
        send_proxy_v2: false,
        health_check: HealthCheck::Off,
        health_interval: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(2),
        metrics: None,
        transport: tlslab_dispatch::Transport::Tcp,
        quic_lb: Vec::new(),
        max_flows: NonZeroUsize::MIN,
    };
    let d = Dispatcher::bind(cfg).await.unwrap();
    let addr = d.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    tokio::spawn(d.run(rx));
    Running { addr, _stop: stop }
}

/// Reads until EOF or an error; returns what was read and whether the end
/// came (EOF or reset) within `limit`.
async fn read_until_end(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let r = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    (got, r.is_ok())
}

/// One real client: a whole ClientHello, the node's answer, then the end.
async fn real_client(addr: SocketAddr, hello: &[u8]) -> Result<Duration, String> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    s.write_all(hello).await.map_err(|e| e.to_string())?;
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(2)).await;
    if got != b"ok" || !ended {
        return Err(format!("got {got:?}, ended {ended}"));
    }
    Ok(t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_is_closed_by_the_hello_timeout_while_real_clients_are_served() {
    // Scaled: one byte every 200 ms against a 1 s hello timeout (a
    // deployment's one byte every 5 s against 10 s, sped up 10x and more).
    const SLOW: usize = 300;
    let hello_timeout = Duration::from_millis(1000);
    let d = dispatcher(
        node(Node::AnswerAndClose).await,
        hello_timeout,
        Duration::from_secs(60),
    )
    .await;
    let hello = real_hello();
    // A handshake record announcing 16 KiB that never comes.
    let slow = Slowloris::start(d.addr, SLOW, |i| {
        const BYTES: [u8; 11] = [22, 3, 1, 0x40, 0x00, 1, 0, 0x3f, 0xfc, 3, 3];
        BYTES[i % BYTES.len()]
    });
    // Real clients all the while: each served at once.
    let t0 = Instant::now();
    let mut times = Vec::new();
    while t0.elapsed() < Duration::from_millis(2500) {
        let took = real_client(d.addr, &hello)
            .await
            .unwrap_or_else(|e| panic!("a real client was not served during the slowloris: {e}"));
        times.push(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (served, median, worst) = served(times);
    let closed = slow.closed_in_time().await;
    eprintln!(
        "{served} real clients served (median {median:?}, slowest {worst:?}); \
         {closed}/{SLOW} slow clients closed"
    );
    assert!(served >= 20, "only {served} real clients served");
    // Served at once; the slowest is allowed a scheduling hiccup on a
    // shared machine.
    assert!(
        median < Duration::from_millis(250),
        "median real client {median:?}"
    );
    assert!(
        worst < Duration::from_secs(2),
        "slowest real client {worst:?}"
    );
    assert_eq!(
        closed, SLOW as u64,
        "every slow client must be closed by the 1 s hello timeout (within 3 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_both_ways_is_closed_and_a_busy_one_is_not() {
    let idle = Duration::from_millis(600);
    let d = dispatcher(
        node(Node::AnswerAndStay).await,
        Duration::from_secs(5),
        idle,
    )
    .await;
    let hello = real_hello();
    // Idle: the hello, the node's answer, then silence both ways.
    let mut s = TcpStream::connect(d.addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let t = Instant::now();
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(5)).await;
    let took = t.elapsed();
    assert_eq!(got, b"hi");
    assert!(
        ended,
        "an idle proxied connection was not closed within 5 s"
    );
    assert!(
        took >= idle - Duration::from_millis(50) && took < idle + Duration::from_millis(700),
        "closed after {took:?}, want about {idle:?}"
    );
    // Busy: a byte every 200 ms for 1.8 s (3x the idle timeout), echoed.
    let mut s = TcpStream::connect(d.addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let mut buf = [0u8; 2];
    s.read_exact(&mut buf).await.unwrap();
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut one))
            .await
            .expect("echo within 1 s")
            .expect("a busy connection must stay open");
        assert_eq!(&one, b"x");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reset_after_the_hello_reaches_the_client_at_once() {
    let d = dispatcher(
        node(Node::Reset).await,
        Duration::from_secs(5),
        Duration::from_secs(60),
    )
    .await;
    let hello = real_hello();
    // A ClientHello, and a ClientHello followed by 20 KB more records (a
    // large hello the node resets part-way).
    let mut big = hello.clone();
    for _ in 0..20 {
        big.extend_from_slice(&[23, 3, 3, 0x03, 0xe8]);
        big.extend_from_slice(&[0u8; 1000]);
    }
    // Just the hello: the client's read sees the reset itself.
    let mut s = TcpStream::connect(d.addr).await.unwrap();
    let t = Instant::now();
    s.write_all(&hello).await.unwrap();
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
    let took = t.elapsed();
    match r {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("want a reset, got {other:?} after {took:?}"),
    }
    assert!(took < Duration::from_millis(200), "reset after {took:?}");
    for (what, bytes) in [("hello", &hello), ("hello + 20 KB", &big)] {
        let mut s = TcpStream::connect(d.addr).await.unwrap();
        let t = Instant::now();
        // The node may reset before all is written: that is the reset.
        let _ = s.write_all(bytes).await;
        let (got, ended) = read_until_end(&mut s, Duration::from_secs(3)).await;
        let took = t.elapsed();
        assert!(got.is_empty(), "{what}: {got:?}");
        assert!(
            ended && took < Duration::from_millis(200),
            "{what}: the node's reset reached the client after {took:?} (ended: {ended}); \
             direct, it takes a few ms"
        );
    }
}
