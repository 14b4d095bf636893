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
//! most [`ROOM_WAIT`](door::ROOM_WAIT)) while the longest-idle QUIC connection, idle for
//! at least [`EVICT_MIN_IDLE`](crate::idle::EVICT_MIN_IDLE), is closed to
//! make room; with nothing idle it is refused. NEW_TOKEN tokens
//! (`--quic-new-tokens`, each an HKDF and an AEAD seal to make, and one
//! more to check when a client returns with it) validate a returning
//! client without a Retry, and lift the 3× anti-amplification limit from
//! its first flight; the listener sends quinn's 2 per connection unless
//! told otherwise (see [`H3Settings::new_tokens`]).
//!
//! Connection IDs (`--quic-lb`, [`lb`]): QUIC-LB ones that carry the
//! node's server ID for a balancer in front, else quinn's random ones.
//!
//! Admission (`--quic-admission off|static|retry-threshold|session`,
//! [`door`]): what happens to a connection attempt before its handshake,
//! from address validation to the TCP listener's session-aware admission
//! control, decided on the client's first Initial.

mod door;
mod figures;
mod initial_keys;
mod lb;
mod session;
mod sniff;
mod socket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response};
use http_body_util::BodyExt;
use tlslab_runtime::qlog::{QlogDir, QlogOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::access_log::{Pending, Unfinished};
use crate::admission::Admission;
use crate::config::{AdmissionMode, QuicShedWith};
use crate::content::{Body, Handled};
use crate::error::{Error, Result};
use crate::idle::{Busy, ConnInfo, Member, Transport};
use crate::redis_cache::RedisStore;
use crate::shared::Shared;
use crate::stats::{self, OpenGuard, QuicCounters, Stats};

pub use door::QuicAdmission;
pub(crate) use figures::encode as metric_families;
pub use figures::{HelloReads, QuicFigures, QuicHandshakes, QuicShed};

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
    /// The admission policy (`--quic-admission`; `session` needs the
    /// server's `--admission session`).
    pub admission: QuicAdmission,
    /// How an attempt shed by the `session` policy is refused
    /// (`--quic-shed-with`).
    pub shed_with: QuicShedWith,
    /// `--quic-lb`: QUIC-LB connection IDs carrying this node's server ID
    /// (else quinn's random 8-byte ones).
    pub quic_lb: Option<tlslab_crypto::quic::LbConfig>,
    /// The UDP socket's receive buffer asked for, bytes
    /// (`--quic-recv-buffer`); `None`: the system's default.
    pub recv_buffer: Option<usize>,
}

impl H3Settings {
    /// A listener on `addr`: 30 s idle timeout, 10,000 connections, a
    /// Retry from half of them on, the system's receive buffer.
    pub fn new(addr: SocketAddr) -> Self {
        H3Settings {
            addr,
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            retry: QuicRetry::UnderLoad,
            new_tokens: None,
            qlog: None,
            admission: QuicAdmission::Off,
            shed_with: QuicShedWith::Refuse,
            quic_lb: None,
            recv_buffer: None,
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

/// The QUIC listener's configuration, built before the runtime starts.
pub(crate) struct Prepared {
    settings: H3Settings,
    server: quinn::ServerConfig,
    /// The idle timeout of every connection's transport.
    idle: quinn::IdleTimeout,
    early: bool,
    /// Its counters, for the server's [`Stats`].
    pub(crate) counters: QuicCounters,
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
    meter: &Arc<tlslab_crypto::meter::Meter>,
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
    let counters = QuicCounters {
        qlog,
        ..QuicCounters::default()
    };
    let mut config = tcp.clone();
    config.alpn_protocols = vec![b"h3".to_vec()];
    let early = tcp.max_early_data_size > 0;
    // QUIC allows early data "unlimited" or off (RFC 9001 §4.6.1).
    config.max_early_data_size = if early { u32::MAX } else { 0 };
    config.send_half_rtt_data = early;
    config.key_log = Arc::new(session::KindLog {
        kinds: counters.kinds.clone(),
        inner: tcp.key_log.clone(),
    });
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(config)).map_err(|e| {
        Error::Usage(format!(
            "--h3: {e}; QUIC needs TLS 1.3 with TLS13_AES_128_GCM_SHA256 (use --tls 1.3 or 1.2,1.3 and keep that suite)"
        ))
    })?;
    let crypto = Arc::new(session::Counting {
        lazy_initial: initial_keys::rfc_initial_keys(&quic),
        inner: Arc::new(quic),
        kinds: counters.kinds.clone(),
        meter: meter.clone(),
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
        counters,
    })
}

impl Prepared {
    /// Whether the listener takes the TLS listener's port number: `--h3`
    /// on its address (`configured`) with port 0.
    pub(crate) fn follows(&self, configured: Option<SocketAddr>) -> bool {
        configured == Some(self.settings.addr) && self.settings.addr.port() == 0
    }

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
    endpoint: quinn::Endpoint,
    _task: JoinHandle<()>,
}

impl Listener {
    /// Closes every connection (HTTP/3 clients see an application close).
    pub(crate) fn close(&self) {
        self.endpoint.close(0u32.into(), b"server shutting down");
    }
}

/// Binds the UDP socket and starts accepting, beside the TCP listeners of
/// `shared` (their counters, connection registry, content, access log);
/// call inside the runtime. Starts the listener on `p`'s address, or on
/// `bound` (a UDP socket already bound there) if given.
pub(crate) fn start(
    p: Prepared,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    bound: Option<std::net::UdpSocket>,
) -> Result<Listener> {
    let stats = shared.stats.clone();
    // TLS 1.3 tickets in a remote cache: claimed before the handshake,
    // over QUIC as over TCP.
    let remote = shared.prefetch.as_ref().filter(|p| !p.stateless_tickets);
    let remote = remote.map(|p| p.store.clone());
    let policy = p.settings.admission;
    let session = policy == QuicAdmission::Session;
    let admission = shared.admission.clone();
    let admission = admission.filter(|a| session && a.settings.mode == AdmissionMode::Session);
    if session && admission.is_none() {
        return Err(Error::Usage(
            "--quic-admission session needs --admission session (one controller for both transports)".into(),
        ));
    }
    let addr = p.settings.addr;
    let bind_err = |source| Error::Bind {
        what: "h3",
        addr,
        source,
    };
    let socket = match bound {
        Some(s) => s,
        None => std::net::UdpSocket::bind(addr).map_err(bind_err)?,
    };
    // The same probe quinn's runtime makes on this socket: report what it finds.
    let q = &stats.quic;
    if let Ok(state) = quinn::udp::UdpSocketState::new((&socket).into()) {
        q.gso_segments
            .store(state.max_gso_segments() as u64, Ordering::Relaxed);
        q.gro_segments
            .store(state.gro_segments() as u64, Ordering::Relaxed);
    }
    let runtime = quinn::default_runtime().ok_or_else(|| Error::Setup {
        what: "--h3: no tokio runtime to run quinn on",
        source: None,
    })?;
    let granted = socket::size_recv_buffer(&socket, p.settings.recv_buffer).map_err(bind_err)?;
    q.recv_buffer.store(granted as u64, Ordering::Relaxed);
    if let Ok(dup) = socket.try_clone() {
        q.socket.set(dup).ok();
    }
    // Admission control times how long each Initial waited in the socket's
    // queue from the kernel's receive stamps, read through a duplicate, and
    // watches it for drops.
    let stamps = match &admission {
        Some(adm) => {
            adm.watch_quic_socket(socket.try_clone().map_err(bind_err)?);
            Some(socket.try_clone().map_err(bind_err)?)
        }
        None => None,
    };
    let socket = runtime.wrap_udp_socket(socket).map_err(bind_err)?;
    // A remote cache of TLS 1.3 tickets, or session-aware admission: read
    // each ClientHello off its Initials, so that its PSK is claimed before
    // the handshake, or classified before the admission decision.
    let (socket, hellos) = if remote.is_some() || admission.is_some() {
        let hellos = sniff::Hellos::new(stats.clone());
        let s: Arc<dyn quinn::AsyncUdpSocket> =
            Arc::new(sniff::SniffSocket::new(socket, hellos.clone(), stamps));
        (s, Some(hellos))
    } else {
        (socket, None)
    };
    let mut endpoint_config = quinn::EndpointConfig::default();
    if let Some(lb) = p.settings.quic_lb.clone() {
        endpoint_config.cid_generator(move || Box::new(lb::LbCids::new(&lb)));
    }
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        endpoint_config,
        Some(p.server.clone()),
        socket,
        runtime,
    )
    .map_err(bind_err)?;
    let local = endpoint.local_addr().map_err(bind_err)?;
    let conn = Arc::new(Conn {
        stats,
        shared,
        early: p.early,
        max: p.settings.max_connections as u64,
        retry: p.settings.retry,
        next_id: AtomicU64::new(0),
        waiting: AtomicU64::new(0),
        hellos,
        store: remote,
        admission,
        policy,
        shed_with: p.settings.shed_with,
        server: p.server,
        idle_timeout: p.idle,
    });
    let task = door::spawn(endpoint.clone(), conn, shutdown);
    tracing::info!(h3 = %local, "tlslab QUIC listener (HTTP/3) listening");
    Ok(Listener {
        addr: local,
        endpoint,
        _task: task,
    })
}

/// What every QUIC connection task shares.
struct Conn {
    /// `shared.stats`.
    stats: Arc<Stats>,
    /// What the TCP listeners share: the connection registry (idle
    /// timeouts, eviction), content, `/dyn` slots, access log, timeouts.
    shared: Arc<Shared>,
    early: bool,
    max: u64,
    retry: QuicRetry,
    /// The last QUIC connection number handed out.
    next_id: AtomicU64,
    /// Attempts queued for room at the limit.
    waiting: AtomicU64,
    /// With a remote cache of TLS 1.3 tickets or `session` admission: the
    /// ClientHellos read off the Initials.
    hellos: Option<Arc<sniff::Hellos>>,
    /// A remote cache of TLS 1.3 tickets to claim their PSKs in.
    store: Option<Arc<RedisStore>>,
    /// `session`: the server's admission control.
    admission: Option<Arc<Admission>>,
    policy: QuicAdmission,
    shed_with: QuicShedWith,
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
            .quic
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
}

/// `step` of a handshake within `--handshake-timeout`, unless the
/// connection is asked to close first; else the reason it failed.
async fn within<T>(
    c: &Conn,
    info: &ConnInfo,
    step: impl Future<Output = Result<T, quinn::ConnectionError>>,
) -> Result<T, String> {
    tokio::select! {
        r = tokio::time::timeout(c.shared.handshake_timeout, step) => match r {
            Ok(r) => r.map_err(|e| failure_reason(&e)),
            Err(_) => Err("timeout".into()),
        },
        why = info.idle.closing() => Err(why.name().into()),
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

async fn connection(
    a: door::Attempt,
    open: OpenGuard,
    half_open: Option<door::HalfOpen>,
    c: Arc<Conn>,
    info: Arc<ConnInfo>,
    member: Member,
) {
    // Dropped in reverse order: the slot frees before the registry entry
    // goes, so an eviction under way ends only once its slot is free.
    let _member = member;
    let _open = open;
    let door::Attempt {
        incoming,
        mut guard,
        hello_read,
    } = a;
    // The PSK the ClientHello offers is claimed in Redis first (GETDEL),
    // as over TCP: rustls resumes only a claimed ticket. A ClientHello not
    // read in time (a lost datagram) is a full handshake. (Under `session`
    // admission the door has done it.)
    if let (Some(hellos), Some(store), false) = (&c.hellos, &c.store, hello_read)
        && let Some(found) = hellos
            .offered(
                incoming.remote_address(),
                &incoming.orig_dst_cid(),
                sniff::HELLO_WAIT,
            )
            .await
        && !found.psk.is_empty()
    {
        store.prefetch(&found.psk, true).await;
    }
    let handshake = async {
        let mut connecting = c.accept(incoming, &info).map_err(|e| failure_reason(&e))?;
        // With 0-RTT on, the connection is used once the whole ClientHello
        // is in: requests that came in 0-RTT are answered in 0.5-RTT,
        // before the client's Finished. Not before: quinn's 0.5-RTT
        // conversion succeeds on the first datagram, and a ClientHello in
        // two (a post-quantum key share) leaves the client's transport
        // parameters unknown, so HTTP/3's control streams cannot open, and
        // quinn does not wake them when the parameters arrive: the
        // connection sat until its idle timeout whenever the second
        // datagram came after the task started (through any relay or
        // delayed path; tests/quic_replay.rs found it).
        if c.early {
            within(&c, &info, connecting.handshake_data()).await?;
            let (conn, accepted) = connecting.into_0rtt().map_err(|_| "early_data")?;
            return Ok((conn, Some(accepted)));
        }
        // Admission's in-flight count is of handshakes the server still
        // has work for: once the whole ClientHello is in, rustls has made
        // the server's flight (key share, signature), and what remains is
        // waiting for the client. A flood of ClientHellos that never
        // continue would otherwise count in flight until the handshake
        // timeout and hold the controller at its floor (issue 33's valid
        // flood: legitimate goodput 0.02 with full handshakes needed).
        if let Some(g) = guard.take() {
            within(&c, &info, connecting.handshake_data()).await?;
            g.done();
        }
        // A half-open handshake is idle: evicted, it is dropped (quinn
        // closes it).
        Ok::<_, String>((within(&c, &info, connecting).await?, None))
    };
    let (conn, done) = match handshake.await {
        Ok(x) => x,
        Err(why) => return c.stats.failure(Transport::Quic, &why),
    };
    // The server's handshake work is done (with 0-RTT, its flight is out):
    // no longer in flight for admission control, nor half-open.
    if let Some(g) = guard.take() {
        g.done();
    }
    drop(half_open);
    // The HTTP side starts: the request timeout runs from now.
    info.idle.start();
    let handshaking = Arc::new(AtomicBool::new(done.is_some()));
    match done {
        // quinn resolves this when the handshake completes (its value is
        // the client's view of 0-RTT; on a server it is always false), or
        // with false when the connection ends first.
        Some(done) => {
            let (stats, conn2, flag) = (c.stats.clone(), conn.clone(), handshaking.clone());
            let timeout = c.shared.handshake_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, done).await;
                flag.store(false, Ordering::Relaxed);
                match conn2.close_reason() {
                    None => stats.quic.established.fetch_add(1, Ordering::Relaxed),
                    Some(e) => {
                        stats.failure(Transport::Quic, &failure_reason(&e));
                        0
                    }
                };
            });
        }
        None => {
            c.stats.quic.established.fetch_add(1, Ordering::Relaxed);
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
    c.stats.quic_closed(&quic.stats());
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
    let log_info = c.shared.access_log.as_ref().map(|_| info.clone());
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
    c.stats
        .request(Transport::Quic, stats::Listener::Https, early);
    if early {
        req.headers_mut()
            .insert("early-data", HeaderValue::from_static("1"));
    }
    let resp = match crate::content::handle(&req, &c.shared.files) {
        Handled::Ready(r) => r,
        Handled::Burn { work, bytes } => {
            crate::http_conn::burn(&c.shared.burners, work, bytes).await
        }
    };
    // The access-log line is queued when this function ends, however it
    // ends, with the bytes handed to the stream, as over TCP.
    let mut logged = Unfinished(match (&c.shared.access_log, info) {
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
