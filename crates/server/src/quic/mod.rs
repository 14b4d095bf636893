//! HTTP/3 over QUIC (`serve --h3`), beside the TCP listener: quinn, h3 and
//! h3-quinn on the TCP listener's own rustls configuration (the metering
//! provider, session cache, ticketer and certificate), with ALPN `h3`
//! only, serving the same content through the same handler.
//!
//! 0-RTT: with `--max-early-data` > 0 (which, as over TCP, needs stateful
//! tickets: `--tickets off` and a session cache) the listener accepts
//! 0-RTT (QUIC allows only "unlimited" early data, so the limit becomes
//! rustls's `u32::MAX`) and answers requests in 0.5-RTT, before the
//! client's Finished. Replay protection is rustls's: a stateful ticket is
//! taken out of the cache on use, so a replayed ClientHello finds no
//! session and its 0-RTT data is rejected; quinn adds none of its own.
//! Requests that arrived in 0-RTT are counted and marked `early-data: 1`.
//! With a Redis cache of TLS 1.3 tickets, the PSK a ClientHello offers is
//! claimed in Redis before the handshake, as over TCP ([`sniff`] reads the
//! ClientHello off the Initials), so a ticket resumes, and its 0-RTT is
//! answered, at most once in the cluster.
//!
//! Address validation (`--quic-retry`): `under-load` (the default: a
//! Retry while half of `--quic-max-connections` are open), `always` (a
//! Retry before every handshake without a token) or `off` (none). A flood
//! of Initials that never continue (half-open handshakes) from spoofed or
//! throw-away addresses cannot answer a Retry, so under load it takes no
//! slot.
//!
//! The connection limit and the idle timeouts are the TCP listener's (see
//! [`crate::idle`]): every QUIC connection is an entry of the same
//! registry, marked QUIC, from the start of its handshake. A half-open
//! handshake counts as idle since it began; after the handshake a
//! connection is idle while no request stream is in progress (PINGs do
//! not count), and `--request-timeout` / `--keepalive-timeout` close it
//! with H3_NO_ERROR. At `--quic-max-connections` a new attempt waits (at
//! most [`ROOM_WAIT`]) while the longest-idle QUIC connection, idle for
//! at least [`EVICT_MIN_IDLE`](crate::idle::EVICT_MIN_IDLE), is closed to
//! make room; with nothing idle it is refused. NEW_TOKEN tokens
//! (`--quic-new-tokens`, each an HKDF and an AEAD seal to make, and one
//! more to check when a client returns with it) validate a returning
//! client without a Retry, and lift the 3× anti-amplification limit from
//! its first flight; the listener sends quinn's 2 per connection unless
//! told otherwise (see [`H3Settings::new_tokens`]).

mod session;
mod sniff;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response};
use http_body_util::BodyExt;
use tlslab_runtime::qlog::{QlogDir, QlogOptions};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::access_log::{AccessLog, Pending, Unfinished};
use crate::content::{Body, Handled};
use crate::idle::{Busy, ConnInfo, Conns, Member, Transport};
use crate::redis_cache::RedisStore;
use crate::{Error, Result};

pub(crate) use stats::{QuicCollector, QuicStats};
pub use stats::{QuicHandshakes, QuicSnapshot};

/// Address validation of the QUIC listener (`--quic-retry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuicRetry {
    /// No Retry packets.
    Off,
    /// A Retry before every handshake from an unvalidated address.
    Always,
    /// A Retry while at least half of the connection limit is open.
    #[default]
    UnderLoad,
}

/// The QUIC listener's settings (`serve --h3 ADDR` and its flags).
#[derive(Clone, Debug)]
pub struct H3Settings {
    /// The UDP address (`--h3`).
    pub addr: SocketAddr,
    /// A connection with no packets for this long is closed
    /// (`--quic-idle-timeout`).
    pub idle_timeout: Duration,
    /// At most this many QUIC connections at once; at the limit the
    /// longest-idle one is closed to make room, and with none idle a new
    /// one is refused (`--quic-max-connections`).
    pub max_connections: usize,
    /// Address validation (`--quic-retry`).
    pub retry: QuicRetry,
    /// NEW_TOKEN tokens sent to each client once its handshake completes
    /// (`--quic-new-tokens`); `None`: [`H3Settings::new_tokens`]'s default.
    pub new_tokens: Option<u32>,
    /// `--qlog DIR`: one qlog file per connection accepted for a handshake,
    /// `DIR/server-<connection id>.sqlog` (the access log's
    /// `$connection_id`), up to the caps.
    pub qlog: Option<QlogOptions>,
}

impl H3Settings {
    /// A listener on `addr`: 30 s idle timeout, 10,000 connections, a
    /// Retry from half of them on.
    pub fn new(addr: SocketAddr) -> Self {
        H3Settings {
            addr,
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            retry: QuicRetry::UnderLoad,
            new_tokens: None,
            qlog: None,
        }
    }

    /// NEW_TOKEN tokens per connection: as set, else quinn's default of
    /// 2, whatever `--quic-retry` says. A token spares a returning client
    /// the Retry's round trip, and lifts the 3× anti-amplification limit
    /// from its first flight (RFC 9000 §8.1.3), as deployed servers do.
    /// Sending none saves about 9 µs of server CPU per handshake (a
    /// profile; `bench/quic.sh` cannot resolve it, BENCHMARKS.md, issue
    /// 23), too little to change the protocol's behaviour by default.
    pub fn new_tokens(&self) -> u32 {
        self.new_tokens.unwrap_or(QUINN_NEW_TOKENS)
    }
}

/// quinn's default number of NEW_TOKEN tokens per connection.
const QUINN_NEW_TOKENS: u32 = 2;

/// What answers a request: the TCP listener's handler, shared.
pub(crate) type Handler = Arc<dyn Fn(&Request<()>) -> Handled + Send + Sync>;

/// The QUIC listener's configuration, built before the runtime starts.
pub(crate) struct Prepared {
    settings: H3Settings,
    server: quinn::ServerConfig,
    /// The idle timeout of every connection's transport.
    idle: quinn::IdleTimeout,
    early: bool,
    pub(crate) stats: Arc<QuicStats>,
    /// `--access-log`, shared with the TCP listener.
    pub(crate) access_log: Option<Arc<AccessLog>>,
}

/// The `Alt-Svc` value that the TCP listener adds to its responses.
pub(crate) fn alt_svc(port: u16) -> HeaderValue {
    HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).expect("a valid header value")
}

/// The transport of every connection: quinn's defaults with the idle
/// timeout (`--quic-idle-timeout`).
fn transport(idle: quinn::IdleTimeout) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(idle));
    t
}

/// Builds the QUIC configuration from the TCP listener's rustls one.
pub(crate) fn prepare(
    settings: &H3Settings,
    tcp: &rustls::ServerConfig,
    handshake_timeout: Duration,
) -> Result<Prepared> {
    if settings.max_connections == 0 {
        return Err(Error::Usage(
            "--quic-max-connections 0 admits nobody; use at least 1".into(),
        ));
    }
    let qlog = settings
        .qlog
        .as_ref()
        .map(|q| {
            QlogDir::open(q, "server").map_err(|e| {
                Error::Usage(format!(
                    "--qlog {}: {e}; give a directory this user can create or write",
                    q.dir.display()
                ))
            })
        })
        .transpose()?;
    let stats = Arc::new(QuicStats {
        qlog,
        ..QuicStats::default()
    });
    let mut config = tcp.clone();
    config.alpn_protocols = vec![b"h3".to_vec()];
    let early = tcp.max_early_data_size > 0;
    // QUIC allows early data "unlimited" or off (RFC 9001 §4.6.1).
    config.max_early_data_size = if early { u32::MAX } else { 0 };
    config.send_half_rtt_data = early;
    config.key_log = Arc::new(session::KindLog {
        kinds: stats.kinds.clone(),
        inner: tcp.key_log.clone(),
    });
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(config)).map_err(|e| {
        Error::Usage(format!(
            "--h3: {e}; QUIC needs TLS 1.3 with TLS13_AES_128_GCM_SHA256 (use --tls 1.3 or 1.2,1.3 and keep that suite)"
        ))
    })?;
    let crypto = Arc::new(session::Counting {
        inner: Arc::new(quic),
        kinds: stats.kinds.clone(),
    });
    let mut server = quinn::ServerConfig::with_crypto(crypto);
    let idle = quinn::IdleTimeout::try_from(settings.idle_timeout).map_err(|_| {
        Error::Usage("--quic-idle-timeout is too long; give at most 2^62 ms".into())
    })?;
    // Time to answer a handshake is bounded by the same --handshake-timeout
    // as over TCP (checked per connection); quinn's own limit is the idle one.
    let _ = handshake_timeout;
    server.transport_config(Arc::new(transport(idle)));
    server.max_incoming(settings.max_connections.saturating_mul(2).max(64));
    let mut tokens = quinn::ValidationTokenConfig::default();
    tokens.sent(settings.new_tokens());
    server.validation_token_config(tokens);
    Ok(Prepared {
        settings: settings.clone(),
        server,
        idle,
        early,
        stats,
        access_log: None,
    })
}

impl Prepared {
    /// `--h3` on the TLS listener's address with port 0: the UDP port the
    /// TCP one was given, so that one port number serves both.
    pub(crate) fn follow(&mut self, configured: Option<SocketAddr>, bound: Option<SocketAddr>) {
        if let (Some(c), Some(b)) = (configured, bound)
            && c == self.settings.addr
            && c.port() == 0
        {
            self.settings.addr.set_port(b.port());
        }
    }
}

/// A running QUIC listener.
pub(crate) struct Listener {
    pub(crate) addr: SocketAddr,
    pub(crate) stats: Arc<QuicStats>,
    endpoint: quinn::Endpoint,
    _task: JoinHandle<()>,
}

impl Listener {
    /// Closes every connection (HTTP/3 clients see an application close).
    pub(crate) fn close(&self) {
        self.endpoint.close(0u32.into(), b"server shutting down");
    }
}

/// Binds the UDP socket and starts accepting; call inside the runtime.
/// `idle` is the server's connection registry, shared with TCP.
pub(crate) fn start(
    p: Prepared,
    handler: Handler,
    burners: Arc<Semaphore>,
    handshake_timeout: Duration,
    idle: Arc<Conns>,
    remote: Option<Arc<RedisStore>>,
    shutdown: watch::Receiver<bool>,
) -> Result<Listener> {
    let addr = p.settings.addr;
    let bind_err = |source| Error::Bind {
        what: "h3",
        addr,
        source,
    };
    let socket = std::net::UdpSocket::bind(addr).map_err(bind_err)?;
    // The same probe quinn's runtime makes on this socket: report what it finds.
    if let Ok(state) = quinn::udp::UdpSocketState::new((&socket).into()) {
        p.stats
            .gso_segments
            .store(state.max_gso_segments() as u64, Ordering::Relaxed);
        p.stats
            .gro_segments
            .store(state.gro_segments() as u64, Ordering::Relaxed);
    }
    let runtime = quinn::default_runtime().ok_or_else(|| Error::Setup {
        what: "--h3: no tokio runtime to run quinn on",
        source: None,
    })?;
    let socket = runtime.wrap_udp_socket(socket).map_err(bind_err)?;
    // A remote cache of TLS 1.3 tickets: read each ClientHello off its
    // Initials, so that its PSK is claimed before the handshake.
    let (socket, prefetch) = match remote {
        Some(store) => {
            let hellos = sniff::Hellos::new();
            let s: Arc<dyn quinn::AsyncUdpSocket> = Arc::new(sniff::SniffSocket {
                inner: socket,
                hellos: hellos.clone(),
            });
            (s, Some((hellos, store)))
        }
        None => (socket, None),
    };
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        Some(p.server.clone()),
        socket,
        runtime,
    )
    .map_err(bind_err)?;
    let local = endpoint.local_addr().map_err(bind_err)?;
    let conn = Arc::new(Conn {
        stats: p.stats.clone(),
        handler,
        burners,
        early: p.early,
        handshake_timeout,
        max: p.settings.max_connections as u64,
        retry: p.settings.retry,
        idle,
        next_id: AtomicU64::new(0),
        waiting: AtomicU64::new(0),
        access_log: p.access_log,
        prefetch,
        server: p.server,
        idle_timeout: p.idle,
    });
    let (room, waiting) = mpsc::channel(ROOM_QUEUE);
    tokio::spawn(room_loop(waiting, conn.clone(), shutdown.clone()));
    let task = tokio::spawn(accept_loop(endpoint.clone(), conn, room, shutdown));
    tracing::info!(h3 = %local, "tlslab QUIC listener (HTTP/3) listening");
    Ok(Listener {
        addr: local,
        stats: p.stats,
        endpoint,
        _task: task,
    })
}

/// What every QUIC connection task shares.
struct Conn {
    stats: Arc<QuicStats>,
    handler: Handler,
    burners: Arc<Semaphore>,
    early: bool,
    handshake_timeout: Duration,
    max: u64,
    retry: QuicRetry,
    /// The server's connection registry (idle timeouts, eviction).
    idle: Arc<Conns>,
    /// The last QUIC connection number handed out.
    next_id: AtomicU64,
    /// Attempts queued for room at the limit.
    waiting: AtomicU64,
    access_log: Option<Arc<AccessLog>>,
    /// With a remote cache of TLS 1.3 tickets: the ClientHellos read off
    /// the Initials, and the store to claim their PSKs in.
    prefetch: Option<(Arc<sniff::Hellos>, Arc<RedisStore>)>,
    /// The endpoint's server configuration, and its transport's idle
    /// timeout: with `--qlog`, a connection gets a copy with a transport of
    /// its own, writing its qlog file.
    server: quinn::ServerConfig,
    idle_timeout: quinn::IdleTimeout,
}

impl Conn {
    /// Accepts `incoming`: with `--qlog` (while the caps leave room), with
    /// a transport writing `server-<id>.sqlog`, event times from now.
    fn accept(
        &self,
        incoming: quinn::Incoming,
        info: &ConnInfo,
    ) -> Result<quinn::Connecting, quinn::ConnectionError> {
        let Some(file) = self
            .stats
            .qlog
            .as_ref()
            .and_then(|q| q.next(&info.id.to_string()))
        else {
            return incoming.accept();
        };
        let mut q = quinn::QlogConfig::default();
        q.writer(Box::new(file))
            .title(Some(format!("tlslab serve: connection {}", info.id)))
            .description(Some(format!(
                "HTTP/3 from {}, as the server saw it",
                incoming.remote_address()
            )))
            .start_time(std::time::Instant::now());
        let mut t = transport(self.idle_timeout);
        t.qlog_stream(q.into_stream());
        let mut server = self.server.clone();
        server.transport_config(Arc::new(t));
        incoming.accept_with(Arc::new(server))
    }

    /// Takes a slot under `--quic-max-connections`, if one is free.
    fn reserve(&self) -> bool {
        self.stats
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                (o < self.max).then_some(o + 1)
            })
            .is_ok()
    }
}

/// How long an attempt that finds the QUIC listener full waits for an
/// evicted connection's slot before it is refused.
pub(crate) const ROOM_WAIT: Duration = Duration::from_secs(1);

/// How long a waiting attempt waits for the slot of the connection it
/// asked to close before it looks again: it is woken as soon as any QUIC
/// connection ends ([`QuicStats::freed`]). (A fixed 20 ms sleep here capped
/// admissions at the limit near 50/s, so a flood of clients that connect
/// and stay, arriving faster than that, queued real clients behind it.)
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// Attempts that may wait for room at once; more are refused at once
/// (quinn's `max_incoming` bounds the attempts it holds in any case).
const ROOM_QUEUE: usize = 64;

async fn accept_loop(
    ep: quinn::Endpoint,
    c: Arc<Conn>,
    room: mpsc::Sender<(quinn::Incoming, tokio::time::Instant)>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let incoming = tokio::select! {
            i = ep.accept() => match i {
                Some(i) => i,
                None => return,
            },
            _ = shutdown.wait_for(|s| *s) => {
                ep.close(0u32.into(), b"server shutting down");
                return;
            }
        };
        let open = c.stats.open.load(Ordering::Relaxed);
        let retry = match c.retry {
            QuicRetry::Off => false,
            QuicRetry::Always => true,
            QuicRetry::UnderLoad => open * 2 >= c.max,
        };
        // First, so that an address that cannot answer a Retry (a flood of
        // Initials) never waits for room or takes a slot.
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            if incoming.retry().is_ok() {
                c.stats.retries.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        // Attempts already waiting for room go first.
        if c.waiting.load(Ordering::Relaxed) == 0 && c.reserve() {
            admit(incoming, &c);
            continue;
        }
        c.waiting.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = room.try_send((incoming, tokio::time::Instant::now())) {
            c.waiting.fetch_sub(1, Ordering::Relaxed);
            let (mpsc::error::TrySendError::Full((incoming, _))
            | mpsc::error::TrySendError::Closed((incoming, _))) = e;
            c.stats.refused.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
        }
    }
}

/// At `--quic-max-connections`: for each waiting attempt in turn, asks the
/// longest-idle QUIC connection to close and takes its slot; refuses the
/// attempt when no slot frees within [`ROOM_WAIT`] of its arrival.
async fn room_loop(
    mut queue: mpsc::Receiver<(quinn::Incoming, tokio::time::Instant)>,
    c: Arc<Conn>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (incoming, arrived) = tokio::select! {
            x = queue.recv() => match x {
                Some(x) => x,
                None => return,
            },
            _ = shutdown.wait_for(|s| *s) => return,
        };
        loop {
            if c.reserve() {
                admit(incoming, &c);
                break;
            }
            if arrived.elapsed() >= ROOM_WAIT {
                c.stats.refused.fetch_add(1, Ordering::Relaxed);
                incoming.refuse();
                break;
            }
            c.idle.evict(Transport::Quic);
            let _ = tokio::time::timeout(ROOM_RETRY, c.stats.freed.notified()).await;
        }
        c.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts a connection in a slot already reserved: it joins the registry
/// in its handshake phase, so the next eviction sees it.
fn admit(incoming: quinn::Incoming, c: &Arc<Conn>) {
    c.stats.connections.fetch_add(1, Ordering::Relaxed);
    let id = c.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    let info = Arc::new(ConnInfo::quic(incoming.remote_address(), id));
    let member = c.idle.join_handshake(&info);
    tokio::spawn(connection(incoming, c.clone(), info, member));
}

/// Keeps [`QuicStats::open`] right however the connection task ends.
struct Open(Arc<QuicStats>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.freed.notify_one();
    }
}

fn failure_reason(e: &quinn::ConnectionError) -> String {
    use quinn::ConnectionError as E;
    match e {
        E::TimedOut => "timeout".into(),
        E::Reset => "reset".into(),
        E::TransportError(t) => format!("transport_{:?}", t.code).to_ascii_lowercase(),
        E::ConnectionClosed(_) | E::ApplicationClosed(_) => "closed".into(),
        E::LocallyClosed => "locally_closed".into(),
        E::VersionMismatch => "version_mismatch".into(),
        E::CidsExhausted => "cids_exhausted".into(),
    }
}

async fn connection(incoming: quinn::Incoming, c: Arc<Conn>, info: Arc<ConnInfo>, member: Member) {
    // Dropped in reverse order: the slot frees before the registry entry
    // goes, so an eviction under way ends only once its slot is free.
    let _member = member;
    let _open = Open(c.stats.clone());
    // The PSK the ClientHello offers is claimed in Redis first (GETDEL),
    // as over TCP: rustls resumes only a claimed ticket. A ClientHello not
    // read in time (a lost datagram) is a full handshake.
    if let Some((hellos, store)) = &c.prefetch
        && let Some(psk) = hellos
            .offered(
                incoming.remote_address(),
                &incoming.orig_dst_cid(),
                sniff::HELLO_WAIT,
            )
            .await
        && !psk.is_empty()
    {
        store.prefetch(&psk, true).await;
    }
    let mut connecting = match c.accept(incoming, &info) {
        Ok(x) => x,
        Err(e) => return c.stats.failure(&failure_reason(&e)),
    };
    // With 0-RTT on, the connection is used once the whole ClientHello is
    // in: requests that came in 0-RTT are answered in 0.5-RTT, before the
    // client's Finished. Not before: quinn's 0.5-RTT conversion succeeds
    // on the first datagram, and a ClientHello in two (a post-quantum key
    // share) leaves the client's transport parameters unknown, so HTTP/3's
    // control streams cannot open, and quinn does not wake them when the
    // parameters arrive: the connection sat until its idle timeout
    // whenever the second datagram came after the task started (through
    // any relay or delayed path; tests/quic_replay.rs found it).
    if c.early {
        tokio::select! {
            r = tokio::time::timeout(c.handshake_timeout, connecting.handshake_data()) => match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return c.stats.failure(&failure_reason(&e)),
                Err(_) => return c.stats.failure("timeout"),
            },
            why = info.idle.closing() => return c.stats.failure(why.name()),
        }
    }
    let (conn, done) = if c.early {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => (conn, Some(accepted)),
            Err(_) => return c.stats.failure("early_data"),
        }
    } else {
        // A half-open handshake is idle: evicted, it is dropped (quinn
        // closes it).
        tokio::select! {
            r = tokio::time::timeout(c.handshake_timeout, connecting) => match r {
                Ok(Ok(conn)) => (conn, None),
                Ok(Err(e)) => return c.stats.failure(&failure_reason(&e)),
                Err(_) => return c.stats.failure("timeout"),
            },
            why = info.idle.closing() => return c.stats.failure(why.name()),
        }
    };
    // The HTTP side starts: the request timeout runs from now.
    info.idle.start();
    let handshaking = Arc::new(AtomicBool::new(done.is_some()));
    match done {
        // quinn resolves this when the handshake completes (its value is
        // the client's view of 0-RTT; on a server it is always false), or
        // with false when the connection ends first.
        Some(done) => {
            let (stats, conn2, flag) = (c.stats.clone(), conn.clone(), handshaking.clone());
            let timeout = c.handshake_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, done).await;
                flag.store(false, Ordering::Relaxed);
                match conn2.close_reason() {
                    None => stats.established.fetch_add(1, Ordering::Relaxed),
                    Some(e) => {
                        stats.failure(&failure_reason(&e));
                        0
                    }
                };
            });
        }
        None => {
            c.stats.established.fetch_add(1, Ordering::Relaxed);
        }
    }
    let quic = conn.clone();
    let serve = serve_h3(conn, &c, &handshaking, &info);
    tokio::pin!(serve);
    tokio::select! {
        _ = &mut serve => {}
        why = info.idle.closing() => {
            // Idle (nothing in progress): nothing to finish.
            tracing::debug!(quic = info.id, "closing: {}", why.name());
            quic.close(H3_NO_ERROR, why.name().as_bytes());
        }
    }
    let s = quic.stats();
    let st = &c.stats;
    st.bytes_received
        .fetch_add(s.udp_rx.bytes, Ordering::Relaxed);
    st.bytes_sent.fetch_add(s.udp_tx.bytes, Ordering::Relaxed);
    st.datagrams_received
        .fetch_add(s.udp_rx.datagrams, Ordering::Relaxed);
    st.datagrams_sent
        .fetch_add(s.udp_tx.datagrams, Ordering::Relaxed);
    st.new_tokens
        .fetch_add(s.frame_tx.new_token, Ordering::Relaxed);
}

/// HTTP/3's "no error" application close code (RFC 9114 §8.1).
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

async fn serve_h3(
    conn: quinn::Connection,
    c: &Arc<Conn>,
    handshaking: &Arc<AtomicBool>,
    info: &Arc<ConnInfo>,
) {
    let quic = conn.clone();
    // What the access log says of every request on this connection.
    let log_info = c.access_log.as_ref().map(|_| info.clone());
    let mut h3 =
        match h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!("h3 connection setup failed: {e}");
                return;
            }
        };
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                // In 0-RTT: on a connection whose 0-RTT the server accepted,
                // accepted before the handshake completed.
                let early = handshaking.load(Ordering::Relaxed)
                    && quic
                        .handshake_data()
                        .and_then(|d| d.downcast::<session::ZeroRtt>().ok())
                        .is_some_and(|z| z.0);
                let (c, info, log_info) = (c.clone(), info.clone(), log_info.clone());
                tokio::spawn(async move {
                    match resolver.resolve_request().await {
                        // In progress from its complete header to its
                        // response's end, as over TCP.
                        Ok((req, stream)) => {
                            let _busy = Busy::owned(info.clone());
                            request(req, stream, early, &c, log_info).await
                        }
                        Err(e) => tracing::debug!("h3 request failed: {e}"),
                    }
                });
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("h3 connection ended: {e}");
                return;
            }
        }
    }
}

async fn request<S>(
    mut req: Request<()>,
    mut stream: h3::server::RequestStream<S, Bytes>,
    early: bool,
    c: &Conn,
    info: Option<Arc<ConnInfo>>,
) where
    S: h3::quic::BidiStream<Bytes>,
{
    let start = std::time::Instant::now();
    c.stats.requests.fetch_add(1, Ordering::Relaxed);
    if early {
        req.headers_mut()
            .insert("early-data", HeaderValue::from_static("1"));
        c.stats.early_requests.fetch_add(1, Ordering::Relaxed);
    }
    let resp = match (c.handler)(&req) {
        Handled::Ready(r) => r,
        Handled::Burn { work, bytes } => crate::http_conn::burn(&c.burners, work, bytes).await,
    };
    // The access-log line is queued when this function ends, however it
    // ends, with the bytes handed to the stream, as over TCP.
    let mut logged = Unfinished(match (&c.access_log, info) {
        (Some(log), Some(conn)) => {
            let on_conn = conn.next_request();
            Some(Pending::new(
                log,
                conn,
                on_conn,
                start,
                &req,
                resp.status(),
                early,
            ))
        }
        _ => None,
    });
    let (parts, mut body): (_, Body) = resp.into_parts();
    if stream
        .send_response(Response::from_parts(parts, ()))
        .await
        .is_err()
    {
        return;
    }
    if req.method() != http::Method::HEAD {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(mut data) = frame.into_data() {
                let chunk = data.copy_to_bytes(data.remaining());
                logged.sent(chunk.len());
                if stream.send_data(chunk).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = stream.finish().await;
    // The response is complete. A GET's FIN may still be on its way: ask
    // the client to stop sending with H3_NO_ERROR (RFC 9114 §4.1), not with
    // the bare 0 that dropping the stream would send.
    stream.stop_sending(h3::error::Code::H3_NO_ERROR);
}
