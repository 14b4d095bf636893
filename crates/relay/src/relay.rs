//! The TCP relay: accept, connect upstream, and move each direction's
//! bytes through a [`Link`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::link::Link;
use crate::{Conditions, Error};

/// How much one read takes from a socket.
const READ_SIZE: usize = 64 * 1024;

/// Bytes a direction holds in flight (read, not yet delivered) before it
/// stops reading, so that the sender sees TCP back-pressure as behind a
/// real bottleneck's buffer. 4 MiB covers the bandwidth-delay product of
/// 100 Mbit/s at 300 ms RTT.
const WINDOW: usize = 4 * 1024 * 1024;

/// How long the relay waits for the upstream's TCP handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a relay does: where it listens, where it connects, and the path it
/// emulates between them.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// The address to accept clients on (port 0 picks one).
    pub listen: SocketAddr,
    /// The server each client is relayed to.
    pub upstream: SocketAddr,
    /// The conditions of each direction.
    pub conditions: Conditions,
    /// Seeds jitter and loss; connection `i` uses `seed + 2i` upstream and
    /// `seed + 2i + 1` downstream, so runs repeat.
    pub seed: u64,
}

/// Counters since the relay started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Clients accepted.
    pub connections: u64,
    /// Clients whose upstream connection failed (they were closed).
    pub upstream_failures: u64,
    /// Connections open now.
    pub open: u64,
    /// Bytes delivered client → upstream.
    pub bytes_up: u64,
    /// Bytes delivered upstream → client.
    pub bytes_down: u64,
    /// Segments (of at most 1448 bytes) delivered, both directions.
    pub segments: u64,
    /// Segments that were "lost" and delivered a retransmission delay late.
    pub lost: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    upstream_failures: AtomicU64,
    open: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    segments: AtomicU64,
    lost: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RelayStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RelayStats {
            connections: g(&self.connections),
            upstream_failures: g(&self.upstream_failures),
            open: g(&self.open),
            bytes_up: g(&self.bytes_up),
            bytes_down: g(&self.bytes_down),
            segments: g(&self.segments),
            lost: g(&self.lost),
        }
    }
}

/// A running relay on the current tokio runtime. Dropping it stops it and
/// closes every relayed connection.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Relay {
    /// Binds `cfg.listen` and starts relaying. Must be called within a
    /// tokio runtime with timers and I/O enabled.
    pub async fn start(cfg: RelayConfig) -> Result<Relay, Error> {
        cfg.conditions.validate()?;
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| Error::Bind(cfg.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Bind(cfg.listen, e))?;
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, cfg, counters.clone(), stopped));
        Ok(Relay {
            addr,
            counters,
            stop,
            task: Some(task),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters so far.
    pub fn stats(&self) -> RelayStats {
        self.counters.snapshot()
    }

    /// Stops accepting, closes every relayed connection and waits for the
    /// relay's tasks to end. Returns the final counters.
    pub async fn shutdown(mut self) -> RelayStats {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.counters.snapshot()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    cfg: RelayConfig,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    // Dropping the set (at stop) aborts every connection task.
    let mut conns = JoinSet::new();
    let mut next: u64 = 0;
    loop {
        tokio::select! {
            _ = stop_requested(&mut stopped) => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    while conns.try_join_next().is_some() {}
                    counters.connections.fetch_add(1, Ordering::Relaxed);
                    let seed = cfg.seed.wrapping_add(next.wrapping_mul(2));
                    next += 1;
                    conns.spawn(relay_one(client, cfg.upstream, cfg.conditions, seed, counters.clone()));
                }
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::warn!("relay: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    // A closed channel means the `Relay` is gone: stop then too.
    let _ = stopped.wait_for(|s| *s).await;
}

async fn relay_one(
    client: TcpStream,
    upstream: SocketAddr,
    cond: Conditions,
    seed: u64,
    counters: Arc<Counters>,
) {
    let server = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!("relay: upstream {upstream}: {e}");
            counters.upstream_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(_) => {
            tracing::debug!("relay: upstream {upstream}: connect timed out");
            counters.upstream_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    // The relay must add only the emulated delay: Nagle would add its own.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    counters.open.fetch_add(1, Ordering::Relaxed);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pipe(cr, sw, Link::new(cond, seed), &counters, Dir::Up);
    let down = pipe(
        sr,
        cw,
        Link::new(cond, seed.wrapping_add(1)),
        &counters,
        Dir::Down,
    );
    // An error either way (a reset) ends both directions; a clean EOF in
    // one leaves the other running (half-close).
    if let Err(e) = tokio::try_join!(up, down) {
        tracing::debug!("relay: connection ended: {e}");
    }
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

#[derive(Clone, Copy)]
enum Dir {
    Up,
    Down,
}

enum Item {
    Data {
        release: Instant,
        bytes: Vec<u8>,
        segments: u32,
        lost: u32,
        /// Returned to the window when the bytes are delivered.
        _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    },
    Fin {
        release: Instant,
    },
}

async fn pipe(
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    mut link: Link,
    counters: &Counters,
    dir: Dir,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    let window = Arc::new(Semaphore::new(WINDOW));
    let reader = async move {
        let mut buf = vec![0u8; READ_SIZE];
        loop {
            let n = src.read(&mut buf).await?;
            let now = Instant::now();
            if n == 0 {
                let release = link.schedule_fin(now.into_std()).into();
                let _ = tx.send(Item::Fin { release });
                return Ok::<_, std::io::Error>(());
            }
            // Waits while the window is full: the sender's bytes then sit
            // in the kernel's buffers, and TCP slows it down.
            let permit = window
                .clone()
                .acquire_many_owned(n as u32)
                .await
                .map_err(std::io::Error::other)?;
            let spans = link.schedule(now.into_std(), n);
            let last = spans.len() - 1;
            let mut permit = Some(permit);
            for (i, s) in spans.into_iter().enumerate() {
                let item = Item::Data {
                    release: s.release.into(),
                    bytes: buf[s.start..s.end].to_vec(),
                    segments: s.segments,
                    lost: s.lost,
                    _permit: if i == last { permit.take() } else { None },
                };
                if tx.send(item).is_err() {
                    return Ok(());
                }
            }
        }
    };
    let writer = async move {
        let bytes_counter = match dir {
            Dir::Up => &counters.bytes_up,
            Dir::Down => &counters.bytes_down,
        };
        while let Some(item) = rx.recv().await {
            match item {
                Item::Data {
                    release,
                    bytes,
                    segments,
                    lost,
                    _permit,
                } => {
                    tokio::time::sleep_until(release).await;
                    dst.write_all(&bytes).await?;
                    bytes_counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    counters
                        .segments
                        .fetch_add(u64::from(segments), Ordering::Relaxed);
                    counters.lost.fetch_add(u64::from(lost), Ordering::Relaxed);
                }
                Item::Fin { release } => {
                    tokio::time::sleep_until(release).await;
                    // The peer may already be gone; that ends this
                    // direction either way.
                    let _ = dst.shutdown().await;
                    return Ok(());
                }
            }
        }
        Ok(())
    };
    tokio::try_join!(reader, writer).map(|_| ())
}

/// A relay on a thread of its own with its own runtime, for callers that
/// are not async (experiments, tests). Dropping it stops the relay.
#[derive(Debug)]
pub struct RelayThread {
    addr: SocketAddr,
    stats: watch::Receiver<RelayStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<RelayStats>>,
}

impl RelayThread {
    /// Starts a relay on a new thread; returns once it is listening.
    pub fn spawn(cfg: RelayConfig) -> Result<RelayThread, Error> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (stats_tx, stats_rx) = watch::channel(RelayStats::default());
        let thread = std::thread::Builder::new()
            .name("tlslab-relay".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(Error::Runtime(e.to_string())));
                        return RelayStats::default();
                    }
                };
                rt.block_on(async move {
                    let relay = match Relay::start(cfg).await {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return RelayStats::default();
                        }
                    };
                    let _ = ready_tx.send(Ok(relay.local_addr()));
                    let mut stop_rx = stop_rx;
                    let mut tick = tokio::time::interval(Duration::from_millis(100));
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            _ = tick.tick() => { let _ = stats_tx.send(relay.stats()); }
                        }
                    }
                    relay.shutdown().await
                })
            })
            .map_err(|e| Error::Runtime(e.to_string()))?;
        let addr = ready_rx
            .recv()
            .map_err(|_| Error::Runtime("the relay thread ended before listening".into()))??;
        Ok(RelayThread {
            addr,
            stats: stats_rx,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters as of at most 100 ms ago.
    pub fn stats(&self) -> RelayStats {
        *self.stats.borrow()
    }

    /// Stops the relay and returns its final counters.
    pub fn stop(mut self) -> RelayStats {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> RelayStats {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for RelayThread {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
