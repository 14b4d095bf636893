//! The TCP relay: accept, connect upstream, and move each direction's
//! bytes through a [`Link`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tlslab_runtime::idle::Activity;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::conditions::Conditions;
use crate::error::Error;
use crate::link::Link;

/// How much one read takes from a socket.
const READ_SIZE: usize = 64 * 1024;

/// The most bytes a direction holds in flight (read, not yet delivered)
/// before it stops reading, so that the sender sees TCP back-pressure as
/// behind a real bottleneck's buffer. 4 MiB covers the bandwidth-delay
/// product of 100 Mbit/s at 300 ms RTT. With a `--bandwidth`, a direction
/// holds at most what the bottleneck sends in its delays plus one second
/// ([`window`]), at least [`MIN_WINDOW`].
const WINDOW: usize = 4 * 1024 * 1024;

/// The least a direction may hold: two reads.
const MIN_WINDOW: usize = 2 * READ_SIZE;

/// The default [`RelayConfig::max_queued`]: 128 MiB over all connections.
pub const DEFAULT_MAX_QUEUED: usize = 128 * 1024 * 1024;

/// The default [`RelayConfig::idle_timeout`]: 10 minutes, nginx stream's
/// `proxy_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// How many bytes one direction may hold: `WINDOW` without a bandwidth
/// limit; with one, the bytes the bottleneck sends in the path's delays
/// (both ways, with jitter and a retransmission) plus one second, within
/// `MIN_WINDOW..=WINDOW`. At 100 kbit/s that is 128 KiB, not 4 MiB
/// that would take five minutes to drain.
pub fn window(c: &Conditions) -> usize {
    let Some(bw) = c.bandwidth else {
        return WINDOW;
    };
    let time = (c.delay + c.jitter) * 2 + c.retransmit_delay() + Duration::from_secs(1);
    let bytes = (u128::from(bw.bps()) / 8) * time.as_millis() / 1000;
    usize::try_from(bytes)
        .unwrap_or(WINDOW)
        .clamp(MIN_WINDOW, WINDOW)
}

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
    /// A connection on which no byte moved, either way, for this long is
    /// closed ([`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// The most bytes held (read, not yet delivered) over all connections
    /// and both directions ([`DEFAULT_MAX_QUEUED`], at least 128 KiB); a
    /// direction stops reading while the relay holds this much.
    pub max_queued: usize,
}

impl RelayConfig {
    /// A relay from `listen` to `upstream` with `conditions`, seed 1 and
    /// the default idle timeout and queue cap.
    pub fn new(listen: SocketAddr, upstream: SocketAddr, conditions: Conditions) -> Self {
        RelayConfig {
            listen,
            upstream,
            conditions,
            seed: 1,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_queued: DEFAULT_MAX_QUEUED,
        }
    }

    /// Checks the conditions, the idle timeout and the queue cap.
    pub fn validate(&self) -> Result<(), Error> {
        self.conditions.validate()?;
        if self.idle_timeout.is_zero() {
            return Err(Error::Invalid(
                "idle timeout must be more than 0 (the default is 10m)".into(),
            ));
        }
        if self.max_queued < MIN_WINDOW || self.max_queued > Semaphore::MAX_PERMITS {
            return Err(Error::Invalid(format!(
                "queue cap {} B is out of range: give at least 128KiB (the default is 128MiB)",
                self.max_queued
            )));
        }
        Ok(())
    }
}

/// Parses a byte size: a number with an optional unit, `B`, `k`/`KB`
/// (1000), `KiB` (1024), `M`/`MB`, `MiB`, `G`/`GB`, `GiB` (case does not
/// matter).
pub fn parse_size(s: &str) -> Result<usize, Error> {
    let t = s.trim().to_ascii_lowercase();
    let at = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(at);
    let mult: f64 = match unit.trim() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(Error::Invalid(format!(
                "size {s:?}: unknown unit {u:?}; write it as 128MiB, 64MB or a number of bytes"
            )));
        }
    };
    let v: f64 = num.parse().map_err(|_| {
        Error::Invalid(format!(
            "size {s:?} is not a number; write it as 128MiB, 64MB or a number of bytes"
        ))
    })?;
    let b = v * mult;
    if !b.is_finite() || b < 0.0 || b > usize::MAX as f64 {
        return Err(Error::Invalid(format!("size {s:?} is out of range")));
    }
    Ok(b as usize)
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
    /// Connections closed because nothing moved either way for the idle
    /// timeout.
    pub idle_closed: u64,
    /// Bytes held now (read, not yet delivered), all connections.
    pub queued: u64,
    /// The most bytes ever held at once.
    pub queued_peak: u64,
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
    idle_closed: AtomicU64,
    queued: AtomicU64,
    queued_peak: AtomicU64,
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
            idle_closed: g(&self.idle_closed),
            queued: g(&self.queued),
            queued_peak: g(&self.queued_peak),
        }
    }
}

/// Bytes held by one queued item: returned to the connection's window and
/// the relay-wide cap, and taken off the queued count, when it is
/// delivered or dropped (a connection that ends drops its queue).
struct Held {
    _window: tokio::sync::OwnedSemaphorePermit,
    _global: tokio::sync::OwnedSemaphorePermit,
    bytes: u64,
    counters: Arc<Counters>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.counters
            .queued
            .fetch_sub(self.bytes, Ordering::Relaxed);
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
        cfg.validate()?;
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
    let global = Arc::new(Semaphore::new(cfg.max_queued));
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
                    conns.spawn(relay_one(client, cfg.clone(), seed, global.clone(), counters.clone()));
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
    cfg: RelayConfig,
    seed: u64,
    global: Arc<Semaphore>,
    counters: Arc<Counters>,
) {
    let upstream = cfg.upstream;
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
    let cond = cfg.conditions;
    let shared = Shared {
        counters: counters.clone(),
        global,
        window: window(&cond),
        activity: Activity::new(),
    };
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pipe(cr, sw, Link::new(cond, seed), &shared, Dir::Up);
    let down = pipe(
        sr,
        cw,
        Link::new(cond, seed.wrapping_add(1)),
        &shared,
        Dir::Down,
    );
    // An error either way (a reset, a failed write: a side is gone) ends
    // both directions and drops what they hold; a clean EOF in one leaves
    // the other running (half-close). Nothing moving either way for the
    // idle timeout ends both too.
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => if let Err(e) = r {
            tracing::debug!("relay: connection ended: {e}");
        },
        () = shared.activity.idle_for(cfg.idle_timeout) => {
            counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("relay: connection idle for {:?}; closed", cfg.idle_timeout);
        }
    }
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

/// What the two directions of one connection share.
struct Shared {
    counters: Arc<Counters>,
    /// The relay-wide cap on held bytes.
    global: Arc<Semaphore>,
    /// Bytes one direction may hold.
    window: usize,
    activity: Activity,
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
        /// Returned to the window and the cap when the bytes are delivered.
        _held: Option<Held>,
    },
    Fin {
        release: Instant,
    },
}

/// Returns when the socket has an error (the peer reset it): that side is
/// gone.
async fn gone(s: &TcpStream) -> std::io::Error {
    match s.ready(Interest::ERROR).await {
        Ok(_) => s
            .take_error()
            .ok()
            .flatten()
            .unwrap_or_else(|| std::io::ErrorKind::ConnectionReset.into()),
        Err(e) => e,
    }
}

async fn pipe(
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    mut link: Link,
    shared: &Shared,
    dir: Dir,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    let window = Arc::new(Semaphore::new(shared.window));
    let counters = &shared.counters;
    let reader = async move {
        let mut buf = vec![0u8; READ_SIZE.min(shared.window)];
        loop {
            let n = src.read(&mut buf).await?;
            let now = Instant::now();
            if n == 0 {
                let release = link.schedule_fin(now.into_std()).into();
                let _ = tx.send(Item::Fin { release });
                return Ok::<_, std::io::Error>(());
            }
            shared.activity.touch();
            // Waits while the window or the relay-wide cap is full: the
            // sender's bytes then sit in the kernel's buffers, and TCP
            // slows it down. A reset meanwhile ends the wait.
            let take = async {
                let w = window.clone().acquire_many_owned(n as u32).await;
                let g = shared.global.clone().acquire_many_owned(n as u32).await;
                match (w, g) {
                    (Ok(w), Ok(g)) => Ok((w, g)),
                    _ => Err(std::io::Error::other("the relay is stopping")),
                }
            };
            let (w, g) = tokio::select! {
                r = take => r?,
                e = gone(src.as_ref()) => return Err(e),
            };
            let q = counters.queued.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
            counters.queued_peak.fetch_max(q, Ordering::Relaxed);
            let held = Held {
                _window: w,
                _global: g,
                bytes: n as u64,
                counters: counters.clone(),
            };
            let spans = link.schedule(now.into_std(), n);
            let last = spans.len() - 1;
            let mut held = Some(held);
            for (i, s) in spans.into_iter().enumerate() {
                let item = Item::Data {
                    release: s.release.into(),
                    bytes: buf[s.start..s.end].to_vec(),
                    segments: s.segments,
                    lost: s.lost,
                    _held: if i == last { held.take() } else { None },
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
        loop {
            // While waiting, a reset of the destination ends the
            // connection at once: its peer is gone, so what is queued
            // for it is dropped.
            let item = tokio::select! {
                i = rx.recv() => match i {
                    Some(i) => i,
                    None => return Ok(()),
                },
                e = gone(dst.as_ref()) => return Err(e),
            };
            let release = match &item {
                Item::Data { release, .. } | Item::Fin { release } => *release,
            };
            tokio::select! {
                () = tokio::time::sleep_until(release) => {}
                e = gone(dst.as_ref()) => return Err(e),
            }
            match item {
                Item::Data {
                    bytes,
                    segments,
                    lost,
                    _held,
                    ..
                } => {
                    dst.write_all(&bytes).await?;
                    shared.activity.touch();
                    bytes_counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    counters
                        .segments
                        .fetch_add(u64::from(segments), Ordering::Relaxed);
                    counters.lost.fetch_add(u64::from(lost), Ordering::Relaxed);
                }
                Item::Fin { .. } => {
                    // The peer may already be gone; that ends this
                    // direction either way.
                    let _ = dst.shutdown().await;
                    return Ok(());
                }
            }
        }
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
                        let _ = ready_tx.send(Err(Error::Start {
                            what: "cannot build its runtime",
                            source: Some(e),
                        }));
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
            .map_err(|e| Error::Start {
                what: "cannot spawn its thread",
                source: Some(e),
            })?;
        let addr = ready_rx.recv().map_err(|_| Error::Start {
            what: "the relay thread ended before listening",
            source: None,
        })??;
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
