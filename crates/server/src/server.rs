//! The running server: runtime, listeners, connections, shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::io::Read as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use tlslab_crypto::meter::{self, AblationSet, Meter};
use tlslab_crypto::provider::Version;
use tlslab_runtime::{Corked, CpuPin, RuntimeSpec, cork, uncorked};
use tlslab_wire::Sniff;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::accept::Backoff;
use crate::access_log::{AccessLog, ConnInfo, LoggedBody, Pending, escape};
use crate::admission::{
    Admission, AdmissionMode, HelloKind, InFlight, Resumable, ShedWith, Verdict,
};
use crate::content::{self, Body, Files};
use crate::early::{self, EarlyRequests, EarlyStream, Started};
use crate::idle::{Busy, CLOSE_GRACE, CloseReason, Conns, Timeouts};
use crate::io::{CountingIo, Rewind, SocketBytes};
use crate::metrics;
use crate::queue::FirstBytes;
use crate::stats::{Listener, Snapshot, Stats};
use crate::tls;
use crate::{
    ConnTimeouts, Error, H2_PING_TIMEOUT, METRICS_MAX_CONNECTIONS, METRICS_TIMEOUT, Result,
    ServeConfig,
};

/// How long [`Server::shutdown`] lets in-flight requests finish.
const DRAIN: Duration = Duration::from_secs(5);
/// The listen backlog of every listener.
const BACKLOG: u32 = 4096;

/// What every connection task shares.
struct Shared {
    stats: Arc<Stats>,
    files: Files,
    acceptor: Option<TlsAcceptor>,
    /// The TLS config accepts 0-RTT (`--max-early-data` > 0).
    early_data: bool,
    ablation: AblationSet,
    mismatch_warned: AtomicBool,
    handshake_timeout: Duration,
    conns: Arc<Semaphore>,
    /// Every connection past its handshake, for the idle timeouts and for
    /// making room at the connection limit.
    idle: Arc<Conns>,
    /// The metrics listener's own connection limit.
    metrics_conns: Arc<Semaphore>,
    /// `/dyn` work running on the blocking pool, at most `--threads` at once.
    burners: Arc<Semaphore>,
    auto: auto::Builder<TokioExecutor>,
    /// HTTP/1 only (ALPN http/1.1): hyper's own connection, not the
    /// version-detecting one, whose future has room for an HTTP/2
    /// connection too (see [`serve_http`]).
    h1: http1::Builder,
    h2: auto::Builder<TokioExecutor>,
    registry: Registry,
    access_log: Option<Arc<AccessLog>>,
    /// The last connection number handed out (`$connection_id`).
    next_conn: AtomicU64,
    /// The pre-handshake fetch from a remote session cache.
    prefetch: Option<crate::prefetch::Prefetcher>,
    /// Admission control (`None`: off, and no ClientHello is read for it).
    admission: Option<Arc<Admission>>,
    /// `Alt-Svc` on every TCP response when the QUIC listener is on.
    alt_svc: std::sync::OnceLock<http::HeaderValue>,
}

/// A running server. Dropping it without [`shutdown`](Server::shutdown)
/// stops it abruptly.
pub struct Server {
    rt: Option<Runtime>,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
    https: Option<SocketAddr>,
    http: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    warnings: Vec<String>,
    quic: Option<Box<crate::quic::Listener>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("https", &self.https)
            .field("http", &self.http)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

fn builder(version: Option<&[u8]>, t: &ConnTimeouts) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // The idle timeouts are the registry's (crate::idle): hyper's header
    // read timeout would also run while a kept-alive connection waits.
    b.http1().timer(TokioTimer::new()).header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(t.h2_ping)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    match version {
        Some(b"h2") => b.http2_only(),
        Some(_) => b.http1_only(),
        None => b,
    }
}

fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener> {
    let err = |source| Error::Bind { what, addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(BACKLOG).map_err(err)
}

/// With an ablation, refuses non-loopback addresses unless `allow_remote`;
/// returns the warnings to print at start.
fn ablation_guard(cfg: &ServeConfig) -> Result<Vec<String>> {
    let set = cfg.tls.ablation;
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let mut warnings = vec![format!(
        "INSECURE: --ablate {set} replaces TLS stages with no-ops (see crates/crypto/ABLATIONS.md): this server's connections are not confidential or authenticated. Use it only to measure, with a client started with the same --ablate set."
    )];
    let addrs = [
        ("https", cfg.https),
        ("http", cfg.http),
        ("metrics", cfg.metrics),
    ];
    for (what, addr) in addrs {
        let Some(addr) = addr else { continue };
        if addr.ip().to_canonical().is_loopback() {
            continue;
        }
        if !cfg.allow_remote {
            return Err(Error::Config(format!(
                "--ablate {set} makes TLS insecure, and the {what} address {addr} is not loopback: bind to 127.0.0.1 or add --allow-remote"
            )));
        }
        warnings.push(format!(
            "INSECURE: --allow-remote: the {what} listener on {addr} is reachable from other hosts while --ablate {set} is set."
        ));
    }
    Ok(warnings)
}

impl Server {
    /// Builds the runtime, loads the content, binds the listeners and starts
    /// serving. Returns once every listener is accepting.
    ///
    /// Blocks briefly; call it outside async code (or in `spawn_blocking`).
    pub fn start(cfg: ServeConfig) -> Result<Server> {
        Self::start_with_h3(cfg, None)
    }

    /// [`Server::start`] with an HTTP/3 listener beside the TLS one when
    /// `h3` is set (see [`crate::H3Settings`]).
    pub fn start_with_h3(cfg: ServeConfig, h3: Option<crate::H3Settings>) -> Result<Server> {
        if cfg.https.is_none() && cfg.http.is_none() {
            return Err(Error::Config(
                "no listener: give an HTTPS address, a plain HTTP address, or both".into(),
            ));
        }
        if cfg.threads == 0 {
            return Err(Error::Config(
                "0 worker threads cannot serve; use at least 1".into(),
            ));
        }
        if cfg.max_connections == 0 {
            return Err(Error::Config(
                "a connection limit of 0 admits nobody; use at least 1".into(),
            ));
        }
        if cfg.max_connections > Semaphore::MAX_PERMITS {
            return Err(Error::Config(format!(
                "a connection limit of {} is too large; use at most {}",
                cfg.max_connections,
                Semaphore::MAX_PERMITS
            )));
        }
        if cfg.handshake_timeout.is_zero() {
            return Err(Error::Config(
                "a handshake timeout of 0 fails every handshake; give a positive duration".into(),
            ));
        }
        if cfg.timeouts.request.is_zero() || cfg.timeouts.keepalive.is_zero() {
            return Err(Error::Config(
                "a request or keep-alive timeout of 0 closes every connection; give a positive duration".into(),
            ));
        }
        if cfg.timeouts.h2_ping.is_some_and(|d| d.is_zero()) {
            return Err(Error::Config(
                "an HTTP/2 PING interval of 0 would ping without pause; give a positive duration or none".into(),
            ));
        }
        let warnings = ablation_guard(&cfg)?;
        cfg.admission.validate().map_err(Error::Config)?;
        let access_log = cfg
            .access_log
            .as_deref()
            .map(AccessLog::open)
            .transpose()?
            .map(Arc::new);
        let meter = Meter::new();
        let built = match cfg.https {
            Some(_) => Some(tls::build(&cfg.tls, &meter)?),
            None => None,
        };
        let quic = match (&h3, &built) {
            (Some(h), Some(b)) => Some(crate::quic::prepare(h, &b.config, cfg.handshake_timeout)?),
            (Some(_), None) => {
                return Err(Error::Config(
                    "--h3 needs the TLS listener; give --https too".into(),
                ));
            }
            _ => None,
        };
        let files = Files::load(&cfg.content)?;
        // CpuPin checks the CPUs and that pinning works here before any
        // worker depends on it.
        let pin = cfg.pin_cpus.as_deref().map(CpuPin::new).transpose()?;
        let (rt, threads) = RuntimeSpec::new("tlslab-server", cfg.threads)
            .pinned(pin)
            .build()?;

        let early_data = built
            .as_ref()
            .is_some_and(|b| b.config.max_early_data_size > 0);
        let (cache, ticketer, redis, ring, acceptor) = match built {
            Some(b) => (
                b.cache,
                b.ticketer,
                b.redis,
                b.ring,
                Some(TlsAcceptor::from(b.config)),
            ),
            None => (None, None, None, None, None),
        };
        let stats = Arc::new(Stats::new(
            cache,
            ticketer,
            threads,
            meter,
            cfg.tls.ablation,
        ));
        let _ = stats.redis.set(redis.clone());
        let _ = stats.ticket_keys.set(ring.clone());
        let admission =
            (cfg.admission.mode != AdmissionMode::Off && cfg.https.is_some()).then(|| {
                Arc::new(Admission::new(
                    cfg.admission.clone(),
                    Resumable {
                        cache: stats.cache.clone(),
                        tickets: cfg.tls.tickets,
                        ring: ring.clone(),
                        tls13: cfg.tls.versions.contains(&Version::Tls13),
                    },
                    cfg.threads,
                ))
            });
        let _ = stats.admission.set(admission.clone());
        let conns = Arc::new(Conns::new(Timeouts {
            request: cfg.timeouts.request,
            keepalive: cfg.timeouts.keepalive,
        }));
        let _ = stats.idle.set(conns.clone());
        let mut registry = metrics::registry(stats.clone());
        if let Some(q) = &quic {
            registry.register_collector(Box::new(crate::quic::QuicCollector(q.stats.clone())));
        }
        let prefetch = redis.clone().map(|store| crate::prefetch::Prefetcher {
            store,
            stateless_tickets: cfg.tls.tickets,
            tls13: cfg.tls.versions.contains(&Version::Tls13),
        });
        let shared = Arc::new(Shared {
            stats,
            files,
            acceptor,
            early_data,
            ablation: cfg.tls.ablation,
            mismatch_warned: AtomicBool::new(false),
            handshake_timeout: cfg.handshake_timeout,
            conns: Arc::new(Semaphore::new(cfg.max_connections)),
            idle: conns.clone(),
            metrics_conns: Arc::new(Semaphore::new(METRICS_MAX_CONNECTIONS)),
            burners: Arc::new(Semaphore::new(cfg.threads)),
            auto: builder(None, &cfg.timeouts),
            h1: {
                let mut b = http1::Builder::new();
                b.timer(TokioTimer::new()).header_read_timeout(None);
                b
            },
            h2: builder(Some(b"h2"), &cfg.timeouts),
            registry,
            access_log,
            next_conn: AtomicU64::new(0),
            prefetch,
            admission: admission.clone(),
            alt_svc: std::sync::OnceLock::new(),
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        {
            let _enter = rt.enter();
            if let Some(r) = &redis {
                r.start()?;
            }
            rt.spawn(crate::idle::reap(conns, shutdown_rx.clone()));
            match (&ring, &cfg.tls.ticket_keys) {
                (Some(ring), crate::TicketKeys::File(path)) => crate::ticket_keys::spawn_watch(
                    path.clone(),
                    ring.clone(),
                    shutdown_rx.clone(),
                )?,
                (Some(ring), crate::TicketKeys::Redis { url, key, rotation }) => {
                    let client = redis::Client::open(url.as_str()).map_err(|e| {
                        Error::Config(format!(
                            "--ticket-keys {url}: {e}; give redis://HOST:PORT[/DB]"
                        ))
                    })?;
                    crate::ticket_keys::spawn_redis(
                        crate::ticket_keys::RedisKeys {
                            client,
                            key: key.clone(),
                            rotation: *rotation,
                        },
                        ring.clone(),
                        shutdown_rx.clone(),
                    );
                }
                _ => {}
            }
            if let Some(adm) = &admission {
                // The CPU the workers can use: their number, or fewer CPUs.
                let cpus = cfg.pin_cpus.as_ref().map_or_else(
                    || std::thread::available_parallelism().map_or(1, |n| n.get()),
                    Vec::len,
                );
                rt.spawn(crate::admission::control(
                    adm.clone(),
                    shared.stats.clone(),
                    cfg.threads.min(cpus),
                    shutdown_rx.clone(),
                ));
            }
        }

        let mut loops = Vec::new();
        let mut addrs = [None, None, None];
        {
            let _enter = rt.enter();
            let listeners = [
                ("https", cfg.https, Some(Listener::Https)),
                ("http", cfg.http, Some(Listener::Http)),
                ("metrics", cfg.metrics, None),
            ];
            let mut bound = Vec::new();
            for (i, (what, addr, kind)) in listeners.into_iter().enumerate() {
                if let Some(addr) = addr {
                    let l = bind(what, addr)?;
                    if kind == Some(Listener::Https) && admission.is_some() {
                        // Admission control's queue signal: the kernel
                        // stamps each connection's first bytes.
                        if let Err(e) = crate::queue::stamp_arrivals(&l) {
                            tracing::warn!(
                                "SO_TIMESTAMPNS on the HTTPS listener failed ({e}); admission control times its queue from accept() instead, which counts a slow client's delay as the server's"
                            );
                        }
                    }
                    addrs[i] = Some(l.local_addr().map_err(|source| Error::Bind {
                        what,
                        addr,
                        source,
                    })?);
                    bound.push((l, kind));
                }
            }
            for (l, kind) in bound {
                let shared = shared.clone();
                let rx = shutdown_rx.clone();
                loops.push(match kind {
                    Some(kind) => rt.spawn(accept_loop(l, kind, shared, rx)),
                    None => rt.spawn(metrics_loop(l, shared, rx)),
                });
            }
        }
        let quic = match quic {
            Some(mut p) => {
                p.follow(cfg.https, addrs[0]);
                let _enter = rt.enter();
                let s = shared.clone();
                let handler = Arc::new(move |r: &Request<()>| content::handle(r, &s.files));
                let l = crate::quic::start(
                    p,
                    handler,
                    shared.burners.clone(),
                    cfg.handshake_timeout,
                    shutdown_rx.clone(),
                )?;
                let _ = shared.alt_svc.set(crate::quic::alt_svc(l.addr.port()));
                Some(Box::new(l))
            }
            None => None,
        };
        tracing::info!(
            https = ?addrs[0],
            http = ?addrs[1],
            metrics = ?addrs[2],
            files = shared.files.len(),
            ablation = %cfg.tls.ablation,
            "tlslab server listening"
        );
        for w in &warnings {
            // The caller shows these to the user (the CLI on stderr); the
            // log keeps a copy at info so it is not printed twice.
            tracing::info!("{w}");
        }
        Ok(Server {
            rt: Some(rt),
            shared,
            shutdown_tx,
            loops,
            https: addrs[0],
            http: addrs[1],
            metrics: addrs[2],
            warnings,
            quic,
        })
    }

    /// Warnings the caller must show the user at every start (the CLI
    /// prints them to stderr): non-empty exactly when an ablation is set.
    /// [`Server::start`] has also logged each with `tracing::info!`.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The server's cryptographic operations so far (also in
    /// [`Snapshot::crypto`]).
    pub fn crypto_snapshot(&self) -> meter::Snapshot {
        self.shared.stats.meter.snapshot()
    }

    /// The bound address of the TLS listener.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https
    }

    /// The bound UDP address of the HTTP/3 listener.
    pub fn h3_addr(&self) -> Option<SocketAddr> {
        self.quic.as_ref().map(|q| q.addr)
    }

    /// The HTTP/3 listener's counters now.
    pub fn quic_snapshot(&self) -> Option<crate::QuicSnapshot> {
        self.quic.as_ref().map(|q| q.stats.snapshot())
    }

    /// The bound address of the plain-HTTP listener.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// The bound address of the metrics listener.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        self.shared.stats.snapshot()
    }

    /// The `/metrics` exposition text now (what a scrape would return).
    pub fn metrics_text(&self) -> String {
        metrics::render(&self.shared.registry)
    }

    /// CPU time used so far by the server runtime's threads (all of them,
    /// including ones that already exited): the sum of the first field of
    /// `/proc/self/task/<tid>/schedstat` (see [`tlslab_runtime::Threads`]). This is the server's own CPU,
    /// without the load generator's, when both run in one process.
    pub fn cpu_time(&self) -> Duration {
        self.shared.stats.threads.cpu_time().total()
    }

    /// Stops gracefully: stops accepting, asks every connection to finish
    /// its in-flight requests and close (HTTP/2 GOAWAY, HTTP/1 after the
    /// current response), waits up to 5 s for them, then stops the runtime
    /// and returns the final counters. Blocks; call it outside async code.
    pub fn shutdown(mut self) -> Snapshot {
        let _ = self.shutdown_tx.send(true);
        if let Some(q) = &self.quic {
            q.close();
        }
        let deadline = Instant::now() + DRAIN;
        while Instant::now() < deadline
            && (self.shared.stats.open_now() > 0 || self.loops.iter().any(|l| !l.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let open = self.shared.stats.open_now();
        if open > 0 {
            tracing::warn!(open, "connections still open after 5 s; closing them");
        }
        if let Some(rt) = self.rt.take() {
            // A fresh thread is outside any runtime, so the runtime may block
            // there while its threads stop (and record their CPU time).
            let _ = std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(1))).join();
        }
        if let Some(log) = &self.shared.access_log {
            log.finish();
        }
        self.shared.stats.snapshot()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let _ = self.shutdown_tx.send(true);
            rt.shutdown_background();
        }
        if let Some(log) = &self.shared.access_log {
            log.finish();
        }
    }
}

/// Resolves once shutdown has been asked for (or the server is gone).
async fn stopping(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn accept_loop(
    listener: TcpListener,
    kind: Listener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    loop {
        // Accept first and then take a slot: a loop waiting for a slot
        // before accepting would hold one it does not use (with --http, one
        // listener's idle loop kept a slot from the other).
        let (stream, peer) = tokio::select! {
            x = crate::accept::accept(&listener, &mut backoff, kind.name()) => x,
            _ = stopping(&mut shutdown) => return,
        };
        // Only admission control reads the clock here (the fallback when
        // the kernel gives no receive timestamp).
        let accepted = shared.admission.as_ref().map(|_| Instant::now());
        let permit = match shared.conns.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return,
            Err(TryAcquireError::NoPermits) => match make_room(&shared, &mut shutdown).await {
                Some(p) => p,
                None => return,
            },
        };
        let _ = stream.set_nodelay(true);
        let guard = shared.stats.open(kind);
        let conn = ConnInfo::new(peer, shared.next_conn.fetch_add(1, Ordering::Relaxed) + 1);
        let shared = shared.clone();
        let mut rx = shutdown.clone();
        // The TLS and HTTP state (several KiB) is boxed where each branch
        // starts, so the spawned future is small: spawning a large future
        // copies it more than once per connection, and a future holding
        // both branches inline is the size of their sum, not of the larger
        // (twice the memory per idle connection).
        let fut = async move {
            let _permit = permit;
            let _guard = guard;
            match kind {
                // The response and close_notify, flushed one after the
                // other, leave in one write.
                Listener::Https => {
                    // Boxed: its state would otherwise size every
                    // connection's task, admission control or not.
                    if let (Some(adm), Some(t)) = (&shared.admission, accepted)
                        && !Box::pin(time_queue(adm, t, &stream, &shared, &mut rx)).await
                    {
                        return;
                    }
                    let (corked, uncork) = cork(stream);
                    uncorked(uncork, Box::pin(serve_tls(corked, conn, shared, rx))).await;
                }
                Listener::Http => {
                    let io =
                        CountingIo::new(stream, SocketBytes(shared.stats.bytes_of(Listener::Http)));
                    serve_http(io, Listener::Http, None, None, conn, shared, rx).await;
                }
            }
        };
        tokio::spawn(fut);
    }
}

/// How often a new connection at the limit looks again for an idle
/// connection to close while it waits for a slot.
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// At the connection limit: asks the longest-idle connection to close and
/// takes its slot. With none idle (every connection in a handshake or a
/// request), waits for a slot, looking again for an idle one every
/// [`ROOM_RETRY`]. `None` at shutdown.
async fn make_room(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        shared.idle.evict();
        tokio::select! {
            p = tokio::time::timeout(ROOM_RETRY, shared.conns.clone().acquire_owned()) => match p {
                Ok(Ok(p)) => return Some(p),
                Ok(Err(_)) => return None,
                Err(_) => {}
            },
            _ = stopping(shutdown) => return None,
        }
    }
}

/// Waits for a new TLS connection's first bytes and records how long they
/// waited in the kernel (admission control's queue signal; without a
/// kernel timestamp, since `accepted`). False when the connection ends
/// here: no bytes within the handshake timeout (counted), or shutdown.
async fn time_queue(
    adm: &Admission,
    accepted: Instant,
    stream: &TcpStream,
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let first = tokio::select! {
        r = tokio::time::timeout(shared.handshake_timeout, crate::queue::first_bytes(stream)) => r,
        _ = stopping(shutdown) => return false,
    };
    match first {
        Ok(Ok(FirstBytes::Arrived(at))) => {
            adm.queue_delay(at.map_or_else(|| accepted.elapsed(), crate::queue::waited));
            true
        }
        // The handshake reads the end or the error and counts it.
        Ok(Ok(FirstBytes::Closed) | Err(_)) => true,
        Err(_) => {
            shared.stats.failure("timeout");
            false
        }
    }
}

/// A handshake that completed, or one that goes on in early data.
enum Handshake<T> {
    Done(tokio_rustls::server::TlsStream<T>),
    Early(EarlyStream<T>),
}

/// Reads the whole ClientHello after `first`, classifies it and asks
/// admission control. Admitted (or shed with a 503 later): the bytes read,
/// the in-flight guard and whether a 503 is due. Shed otherwise: the
/// failure reason `admission_shed`, after the alert if `--shed-with alert`.
async fn admit<T: AsyncRead + AsyncWrite + Unpin>(
    adm: &Arc<Admission>,
    io: &mut T,
    first: Vec<u8>,
) -> std::result::Result<(Vec<u8>, Option<(InFlight, bool)>), String> {
    let first = crate::prefetch::read_hello(io, first)
        .await
        .map_err(|e| tls::failure_reason(&e))?;
    let kind =
        crate::prefetch::with_hello(&first, |h| crate::admission::classify(h, &adm.resumable))
            .unwrap_or_else(|| {
                adm.unparsed();
                HelloKind::Full
            });
    match adm.decide(kind) {
        Verdict::Admit(g) => Ok((first, Some((g, false)))),
        Verdict::Shed(Some(g)) => Ok((first, Some((g, true)))),
        Verdict::Shed(None) => {
            if adm.settings.shed_with == ShedWith::Alert {
                let _ = io.write_all(&crate::admission::ALERT_INTERNAL_ERROR).await;
                let _ = io.shutdown().await;
            }
            Err("admission_shed".into())
        }
    }
}

/// `$ssl_protocol` and `$ssl_session_reused`.
fn tls_fields(
    version: Option<Version>,
    kind: Option<rustls::HandshakeKind>,
) -> (&'static str, &'static str) {
    (
        match version {
            Some(Version::Tls12) => "TLSv1.2",
            Some(Version::Tls13) => "TLSv1.3",
            None => "-",
        },
        if kind == Some(rustls::HandshakeKind::Resumed) {
            "r"
        } else {
            "."
        },
    )
}

/// Why the first bytes did not start a TLS handshake.
enum Refused {
    /// A named failure reason.
    Reason(String),
    /// Plain HTTP on the TLS port: answered with a 400, then closed.
    Http,
}

/// How much the first read may take. A ClientHello (with a post-quantum key
/// share about 1.3 KiB) usually fits, so rustls gets it without a second
/// `recvfrom`.
const FIRST_READ: usize = 4096;

/// Reads the first bytes until `tlslab_wire::sniff` decides (it looks at
/// 5). The first read takes whatever is there, up to [`FIRST_READ`]: on a
/// TLS handshake all of it is replayed to rustls.
async fn sniff_start<T: AsyncRead + Unpin>(io: &mut T) -> std::result::Result<Vec<u8>, Refused> {
    let mut buf = vec![0u8; FIRST_READ];
    let mut n = 0;
    loop {
        match tlslab_wire::sniff(&buf[..n.min(5)]) {
            Sniff::TlsHandshake => {
                buf.truncate(n);
                return Ok(buf);
            }
            Sniff::NotTls {
                looks_like_http: true,
            } => return Err(Refused::Http),
            Sniff::NotTls {
                looks_like_http: false,
            } => return Err(Refused::Reason("not_tls".into())),
            Sniff::Incomplete => {}
        }
        match io.read(&mut buf[n..]).await {
            Ok(0) => return Err(Refused::Reason("eof".into())),
            Ok(k) => n += k,
            Err(e) => return Err(Refused::Reason(tls::failure_reason(&e))),
        }
    }
}

/// Tells an HTTP client it reached the TLS port, the way nginx does.
async fn answer_http_on_tls_port<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T) {
    const BODY: &str =
        "This port speaks HTTPS: a plain HTTP request was sent to it. Use https://.\n";
    let resp = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if io.write_all(resp.as_bytes()).await.is_err() {
        return;
    }
    let _ = io.shutdown().await;
    // Read what the client still sends for a moment, so that closing with
    // unread bytes does not reset the connection before it reads the answer.
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        let mut total = 0;
        while total < 64 * 1024 {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(k) => total += k,
            }
        }
    })
    .await;
}

/// The TLS stream of a connection on the TLS listener.
type TlsIo = CountingIo<Corked<TcpStream>>;

async fn serve_tls(
    stream: Corked<TcpStream>,
    mut info: ConnInfo,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let io = CountingIo::new(stream, SocketBytes(shared.stats.bytes_of(Listener::Https)));
    // The handshake's state (the sniffed bytes, the prefetch stage,
    // rustls's handshake, the timeout) is boxed and freed before HTTP
    // starts: inline, this future would be as large as that state for the
    // whole life of the connection, idle or not.
    let Some((hs, admitted)) = Box::pin(handshake(io, &shared, &mut shutdown)).await else {
        return;
    };
    // The handshake is no longer in flight; a 503 shed lives on in `info`.
    let admitted = admitted.map(|(guard, shed)| {
        info.shed_503 = shed;
        guard.kind
    });
    // The HTTP side is built in a plain function: a binding borrowed while
    // it is built (the TLS stream) would otherwise keep its storage in this
    // future for the life of the connection.
    start_http(hs, admitted, info, shared, shutdown).await;
}

/// The HTTP side of a TLS connection whose handshake is done, or goes on
/// in early data.
fn start_http(
    hs: Handshake<Rewind<TlsIo>>,
    admitted: Option<HelloKind>,
    mut info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> HttpTask {
    match hs {
        Handshake::Done(mut tls) => {
            let conn = tls.get_mut().1;
            let version = conn.protocol_version().and_then(Version::from_rustls);
            shared.stats.handshake(version, conn.handshake_kind());
            if admitted == Some(HelloKind::Resume)
                && conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed)
                && let Some(adm) = &shared.admission
            {
                adm.misclassified();
            }
            info.tls = tls_fields(version, conn.handshake_kind());
            let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
            // TLS 1.3 early data arrived before the client's Finished, so it
            // comes before anything still unread: hand it to HTTP first.
            let mut early = Vec::new();
            if let Some(mut ed) = conn.early_data() {
                let _ = ed.read_to_end(&mut early);
                shared.stats.early_data(early.len());
            }
            serve_http(
                Rewind::new(early, tls),
                Listener::Https,
                alpn,
                None,
                info,
                shared,
                shutdown,
            )
        }
        Handshake::Early(s) => {
            // The handshake completes inside the stream, while HTTP runs.
            let Some(conn) = s.connection() else {
                return Box::pin(std::future::ready(()));
            };
            let version = conn.protocol_version().and_then(Version::from_rustls);
            info.tls = tls_fields(version, conn.handshake_kind());
            let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
            let requests = s.requests();
            serve_http(
                s,
                Listener::Https,
                alpn,
                Some(requests),
                info,
                shared,
                shutdown,
            )
        }
    }
}

/// Sniffs, runs the prefetch stage, and completes the TLS handshake (or
/// starts one that goes on in early data), within the handshake timeout.
/// `None` when the connection ends here: the failure is counted.
async fn handshake(
    mut io: TlsIo,
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(Handshake<Rewind<TlsIo>>, Option<(InFlight, bool)>)> {
    let acceptor = shared.acceptor.as_ref()?;
    let stats = &shared.stats;
    let ablation = shared.ablation;
    let handshake = async {
        let first = match sniff_start(&mut io).await {
            Ok(first) => first,
            Err(Refused::Reason(r)) => return Err(r),
            Err(Refused::Http) => {
                answer_http_on_tls_port(&mut io).await;
                return Err("http_on_tls_port".to_string());
            }
        };
        // The prefetch stage reads the whole ClientHello before rustls when
        // a remote session cache needs the session fetched first.
        let first = crate::prefetch::stage(&mut io, first, shared.prefetch.as_ref()).await?;
        // Admission control decides on the whole ClientHello (after the
        // prefetch, so a session fetched from Redis counts as held here).
        let (first, admitted) = match &shared.admission {
            None => (first, None),
            Some(adm) => admit(adm, &mut io, first).await?,
        };
        let accept = if shared.early_data && early::offers_early_data(&first) {
            // 0-RTT: rustls reads the ClientHello and early data here, so
            // that safe requests are answered before the handshake completes.
            match early::start(
                acceptor,
                &first,
                Rewind::new(Vec::new(), io),
                stats.clone(),
                ablation,
                shared.handshake_timeout,
            ) {
                Ok(Started::Early(s)) => return Ok((Handshake::Early(s), admitted)),
                Ok(Started::Refused(accept)) => accept,
                Err(e) => return Err(tls::failure_reason(&e)),
            }
        } else {
            acceptor.accept(Rewind::new(first, io))
        };
        accept
            .await
            .map(|tls| (Handshake::Done(tls), admitted))
            .map_err(|e| {
                let (reason, hint) = tls::handshake_failure(&e, ablation);
                if let Some(hint) = hint {
                    // The first at warn level, the rest at debug: a load
                    // generator with the wrong set fails every connection.
                    if shared.mismatch_warned.swap(true, Ordering::Relaxed) {
                        tracing::debug!("TLS handshake failed: {e}; {hint}");
                    } else {
                        tracing::warn!(
                            "TLS handshake failed: {e}; {hint} (further ablation mismatches are counted as handshake failure reason ablation_mismatch and logged at debug level)"
                        );
                    }
                }
                reason
            })
    };
    let mut hs = tokio::select! {
        r = tokio::time::timeout(shared.handshake_timeout, handshake) => match r {
            Ok(Ok(hs)) => hs,
            Ok(Err(reason)) => {
                stats.failure(&reason);
                return None;
            }
            Err(_) => {
                stats.failure("timeout");
                return None;
            }
        },
        // Handshakes in progress are abandoned at shutdown, not counted.
        _ = stopping(shutdown) => return None,
    };
    if let (Handshake::Done(tls), _) = &mut hs {
        // Session tickets leave now, as nginx sends them, not with the first
        // response: a client that gives up on a slow first request keeps them.
        let (raw, _) = tls.get_mut();
        if let Err(e) = std::future::poll_fn(|cx| raw.get_mut().get_mut().poll_send_held(cx)).await
        {
            stats.failure(&tls::failure_reason(&e));
            return None;
        }
    }
    Some(hs)
}

/// A connection's HTTP, ready to run: the hyper connection, boxed at its
/// own size, driven until it ends or the server shuts down.
type HttpTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Builds the HTTP side of a connection over `io`. Not an `async fn`: the
/// stream and the service move straight into hyper's connection, so no
/// future keeps a second, dead copy of them while the connection lives.
fn serve_http<I>(
    io: I,
    kind: Listener,
    alpn: Option<Vec<u8>>,
    early: Option<Arc<EarlyRequests>>,
    info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> HttpTask
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc_shared = shared.clone();
    let info = Arc::new(info);
    let member = shared.idle.join(&info);
    let conn_info = info.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let s = svc_shared.clone();
        // In progress until its response body is done or dropped.
        let busy = Busy::new(&info);
        let info = info.clone();
        // Claimed when the request is parsed, in request order.
        let early = early.as_ref().is_some_and(|e| e.claim());
        async move {
            let start = Instant::now();
            let on_conn = info.next_request();
            s.stats.request(kind);
            if early {
                // RFC 8470 §5.1, for the handler (and any origin behind it).
                req.headers_mut()
                    .insert("early-data", http::HeaderValue::from_static("1"));
                s.stats.early_request();
            }
            let resp = if info.shed_503 {
                shed_503(&req)
            } else {
                match content::handle(&req, &s.files) {
                    content::Handled::Ready(r) => r,
                    // Boxed: only /dyn pays for the larger future.
                    content::Handled::Burn { work, bytes } => {
                        Box::pin(burn(&s.burners, work, bytes)).await
                    }
                }
            };
            let pending = s.access_log.as_ref().map(|log| Pending {
                log: log.clone(),
                conn: info.clone(),
                on_conn,
                start,
                request: request_line(&req),
                user_agent: req
                    .headers()
                    .get(http::header::USER_AGENT)
                    .map_or_else(|| "-".to_string(), |v| escape(v.as_bytes())),
                status: resp.status().as_u16(),
                sent: 0,
                early,
            });
            let mut resp = resp;
            if let (Listener::Https, Some(v)) = (kind, s.alt_svc.get()) {
                resp.headers_mut().insert(http::header::ALT_SVC, v.clone());
            }
            Ok::<_, Infallible>(resp.map(|b| LoggedBody::new(b, pending, busy)))
        }
    });
    // An HTTP/1.1 connection (the common case over TLS) runs on hyper's
    // HTTP/1 connection alone: the version-detecting connection is an enum
    // as large as its HTTP/2 variant, and it would stay that size for the
    // whole life of every HTTP/1 connection, idle ones included.
    let io = TokioIo::new(io);
    let on = Driven {
        kind,
        info: conn_info,
        _member: member,
        shutdown,
    };
    match alpn.as_deref() {
        Some(b"h2") => Box::pin(drive(
            Box::pin(shared.h2.serve_connection(io, svc).into_owned()),
            |c| c.graceful_shutdown(),
            on,
        )),
        Some(_) => Box::pin(drive(
            Box::pin(shared.h1.serve_connection(io, svc)),
            |c| c.graceful_shutdown(),
            on,
        )),
        None => Box::pin(drive(
            Box::pin(shared.auto.serve_connection(io, svc).into_owned()),
            |c| c.graceful_shutdown(),
            on,
        )),
    }
}

/// Runs `/dyn`'s CPU work on the blocking pool, at most `--threads` at
/// once, so that it never holds a worker thread that other connections
/// need. The blocking threads are the server runtime's own, so their CPU
/// time counts as the server's.
pub(crate) async fn burn(burners: &Arc<Semaphore>, work: Duration, bytes: u64) -> Response<Body> {
    let Ok(_permit) = burners.clone().acquire_owned().await else {
        return content::dyn_response(work, bytes);
    };
    match tokio::task::spawn_blocking(move || content::dyn_response(work, bytes)).await {
        Ok(r) => r,
        Err(e) => content::plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("/dyn work failed: {e}\n"),
        ),
    }
}

/// What [`drive`] needs besides the connection.
struct Driven {
    kind: Listener,
    info: Arc<ConnInfo>,
    /// Leaves the registry when the connection ends.
    _member: crate::idle::Member,
    shutdown: watch::Receiver<bool>,
}

/// Runs a hyper connection until it ends. At shutdown, asks it to finish
/// its in-flight requests (`graceful`) and waits for that. When it has sat
/// idle too long, asks the same and waits at most [`CLOSE_GRACE`]; when it
/// is evicted at the connection limit, polls it once more and drops it.
async fn drive<C, E>(mut conn: Pin<Box<C>>, graceful: fn(Pin<&mut C>), mut on: Driven)
where
    C: Future<Output = std::result::Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::select! {
        r = conn.as_mut() => ended(on.kind, r),
        _ = stopping(&mut on.shutdown) => {
            graceful(conn.as_mut());
            let _ = conn.await;
        }
        why = on.info.idle.closing() => {
            tracing::debug!(listener = on.kind.name(), conn = on.info.id, "closing: {}", why.name());
            graceful(conn.as_mut());
            // Timed out: a moment to say goodbye (HTTP/2's GOAWAY waits for
            // a PING's answer). Evicted: a new client waits for this slot,
            // so one poll writes what can be written at once, and it goes.
            let grace = match why {
                CloseReason::Evicted => Duration::ZERO,
                _ => CLOSE_GRACE,
            };
            let _ = tokio::time::timeout(grace, conn).await;
        }
    }
}

fn ended<E: std::fmt::Display>(kind: Listener, r: std::result::Result<(), E>) {
    if let Err(e) = r {
        tracing::debug!(listener = kind.name(), "connection ended: {e}");
    }
}

/// The answer on a connection shed with `--shed-with 503`.
fn shed_503<B>(req: &Request<B>) -> Response<Body> {
    let mut r = content::plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        "overloaded: admission control shed this connection; retry later\n".into(),
    );
    let h = r.headers_mut();
    h.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    if req.version() < http::Version::HTTP_2 {
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    r
}

/// `$request`: method, path and query, version, escaped.
fn request_line<B>(req: &Request<B>) -> String {
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let version = match req.version() {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    };
    escape(format!("{} {target} {version}", req.method()).as_bytes())
}

async fn metrics_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    loop {
        let (stream, _) = tokio::select! {
            x = crate::accept::accept(&listener, &mut backoff, "metrics") => x,
            _ = stopping(&mut shutdown) => return,
        };
        // Its own limit: scrapers must never take the file descriptors the
        // main listeners need. Over it, the connection is closed at once.
        let Ok(permit) = shared.metrics_conns.clone().try_acquire_owned() else {
            tracing::debug!(
                "metrics connection closed: {METRICS_MAX_CONNECTIONS} metrics connections are open already"
            );
            continue;
        };
        let shared = shared.clone();
        let mut rx = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc_shared = shared.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let s = svc_shared.clone();
                async move { Ok::<_, Infallible>(metrics_response(&req, &s.registry)) }
            });
            // hyper's header read timeout runs from the end of a response
            // to the next complete header: it bounds idle and slow clients.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(METRICS_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stopping(&mut rx) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
}

fn metrics_response<B>(req: &Request<B>, registry: &Registry) -> Response<Body> {
    match req.uri().path() {
        "/metrics" => content::plain(
            StatusCode::OK,
            metrics::CONTENT_TYPE,
            metrics::render(registry),
        ),
        "/health" => content::plain(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        other => content::plain(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!("{other} not found; this address serves /metrics and /health\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CertSource, Content, TlsSettings};

    fn cfg(https: &str, ablation: &str, allow_remote: bool) -> ServeConfig {
        let g = tlslab_crypto::pki::generate(tlslab_crypto::pki::KeyType::EcdsaP256, &[]).unwrap();
        let mut c = ServeConfig::new(
            https.parse().unwrap(),
            Content::Empty,
            TlsSettings::new(CertSource::Generated(g)),
        );
        c.tls.ablation = ablation.parse().unwrap();
        c.allow_remote = allow_remote;
        c
    }

    #[test]
    fn an_early_data_connection_holds_little_more_than_an_ordinary_one() {
        // What an idle connection keeps of its stream lives in hyper's
        // connection; the 0-RTT stream must not make it grow by more than
        // its own bookkeeping (its handshake state is boxed and freed).
        let ordinary =
            std::mem::size_of::<Rewind<tokio_rustls::server::TlsStream<Rewind<TlsIo>>>>();
        let early = std::mem::size_of::<EarlyStream<Rewind<TlsIo>>>();
        println!("stream in an idle connection: early-data {early} B, ordinary {ordinary} B");
        assert!(
            early <= ordinary + 128,
            "early {early} B, ordinary {ordinary} B"
        );
    }

    #[test]
    fn the_guard_refuses_remote_addresses_unless_allowed() {
        // No ablation: any address, no warning.
        assert!(
            ablation_guard(&cfg("0.0.0.0:443", "none", false))
                .unwrap()
                .is_empty()
        );
        // Loopback, IPv4-mapped loopback included: one warning.
        for a in [
            "127.0.0.1:0",
            "127.5.6.7:0",
            "[::1]:0",
            "[::ffff:127.0.0.1]:0",
        ] {
            let w = ablation_guard(&cfg(a, "cipher", false)).unwrap();
            assert_eq!(w.len(), 1, "{a}: {w:?}");
            assert!(w[0].contains("INSECURE: --ablate cipher"), "{w:?}");
        }
        let e = ablation_guard(&cfg("192.0.2.1:443", "cipher", false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("https address 192.0.2.1:443 is not loopback"),
            "{e}"
        );
        assert!(e.contains("bind to 127.0.0.1 or add --allow-remote"), "{e}");
        let mut c = cfg("127.0.0.1:0", "minimal", false);
        c.http = Some("[::ffff:192.0.2.1]:80".parse().unwrap());
        let e = ablation_guard(&c).unwrap_err().to_string();
        assert!(e.contains("http address"), "{e}");
        // Allowed: a second warning names the exposed listener.
        let mut c = cfg("0.0.0.0:443", "sig", true);
        c.metrics = Some("0.0.0.0:9090".parse().unwrap());
        let w = ablation_guard(&c).unwrap();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[1].contains("https listener on 0.0.0.0:443"), "{w:?}");
        assert!(w[2].contains("metrics listener on 0.0.0.0:9090"), "{w:?}");
    }
}
