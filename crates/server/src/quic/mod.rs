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
//!
//! Address validation (`--quic-retry`): `off` (none), `always` (a Retry
//! before every handshake without a token) or `under-load` (a Retry while
//! half of `--quic-max-connections` are open). NEW_TOKEN tokens
//! (`--quic-new-tokens`, each an HKDF and an AEAD seal to make, and one
//! more to check when a client returns with it) validate a returning
//! client without a Retry, and lift the 3× anti-amplification limit from
//! its first flight; the listener sends quinn's 2 per connection unless
//! told otherwise (see [`H3Settings::new_tokens`]).

mod session;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response};
use http_body_util::BodyExt;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::access_log::{AccessLog, Pending, Transport, Unfinished, escape};
use crate::content::{Body, Handled};
use crate::idle::ConnInfo;
use crate::{Error, Result};

pub(crate) use stats::{QuicCollector, QuicStats};
pub use stats::{QuicHandshakes, QuicSnapshot};

/// Address validation of the QUIC listener (`--quic-retry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuicRetry {
    /// No Retry packets.
    #[default]
    Off,
    /// A Retry before every handshake from an unvalidated address.
    Always,
    /// A Retry while at least half of the connection limit is open.
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
    /// At most this many QUIC connections at once; more are refused
    /// (`--quic-max-connections`).
    pub max_connections: usize,
    /// Address validation (`--quic-retry`).
    pub retry: QuicRetry,
    /// NEW_TOKEN tokens sent to each client once its handshake completes
    /// (`--quic-new-tokens`); `None`: [`H3Settings::new_tokens`]'s default.
    pub new_tokens: Option<u32>,
}

impl H3Settings {
    /// A listener on `addr`: 30 s idle timeout, 10,000 connections, no Retry.
    pub fn new(addr: SocketAddr) -> Self {
        H3Settings {
            addr,
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            retry: QuicRetry::Off,
            new_tokens: None,
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
    early: bool,
    pub(crate) stats: Arc<QuicStats>,
    /// `--access-log`, shared with the TCP listener.
    pub(crate) access_log: Option<Arc<AccessLog>>,
}

/// The `Alt-Svc` value that the TCP listener adds to its responses.
pub(crate) fn alt_svc(port: u16) -> HeaderValue {
    HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).expect("a valid header value")
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
    let stats = Arc::new(QuicStats::default());
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
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(settings.idle_timeout).map_err(|_| {
        Error::Usage("--quic-idle-timeout is too long; give at most 2^62 ms".into())
    })?;
    transport.max_idle_timeout(Some(idle));
    // Time to answer a handshake is bounded by the same --handshake-timeout
    // as over TCP (checked per connection); quinn's own limit is the idle one.
    let _ = handshake_timeout;
    server.transport_config(Arc::new(transport));
    server.max_incoming(settings.max_connections.saturating_mul(2).max(64));
    let mut tokens = quinn::ValidationTokenConfig::default();
    tokens.sent(settings.new_tokens());
    server.validation_token_config(tokens);
    Ok(Prepared {
        settings: settings.clone(),
        server,
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
pub(crate) fn start(
    p: Prepared,
    handler: Handler,
    burners: Arc<Semaphore>,
    handshake_timeout: Duration,
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
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(p.server),
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
        access_log: p.access_log,
        ids: AtomicU64::new(0),
    });
    let task = tokio::spawn(accept_loop(endpoint.clone(), conn, shutdown));
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
    access_log: Option<Arc<AccessLog>>,
    /// The access log's `$connection_id`s, from 1.
    ids: AtomicU64,
}

async fn accept_loop(ep: quinn::Endpoint, c: Arc<Conn>, mut shutdown: watch::Receiver<bool>) {
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
        if open >= c.max {
            c.stats.refused.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            continue;
        }
        let retry = match c.retry {
            QuicRetry::Off => false,
            QuicRetry::Always => true,
            QuicRetry::UnderLoad => open * 2 >= c.max,
        };
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            if incoming.retry().is_ok() {
                c.stats.retries.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        c.stats.connections.fetch_add(1, Ordering::Relaxed);
        c.stats.open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(incoming, c.clone()));
    }
}

/// Keeps [`QuicStats::open`] right however the connection task ends.
struct Open(Arc<QuicStats>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
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

async fn connection(incoming: quinn::Incoming, c: Arc<Conn>) {
    let _open = Open(c.stats.clone());
    let connecting = match incoming.accept() {
        Ok(x) => x,
        Err(e) => return c.stats.failure(&failure_reason(&e)),
    };
    // With 0-RTT on, the connection is used at once: requests that came in
    // 0-RTT are answered in 0.5-RTT, before the client's Finished.
    let (conn, done) = if c.early {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => (conn, Some(accepted)),
            Err(_) => return c.stats.failure("early_data"),
        }
    } else {
        match tokio::time::timeout(c.handshake_timeout, connecting).await {
            Ok(Ok(conn)) => (conn, None),
            Ok(Err(e)) => return c.stats.failure(&failure_reason(&e)),
            Err(_) => return c.stats.failure("timeout"),
        }
    };
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
    serve_h3(conn, &c, &handshaking).await;
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

async fn serve_h3(conn: quinn::Connection, c: &Arc<Conn>, handshaking: &Arc<AtomicBool>) {
    let quic = conn.clone();
    // What the access log says of every request on this connection.
    let info = c.access_log.as_ref().map(|_| {
        let id = c.ids.fetch_add(1, Ordering::Relaxed) + 1;
        let mut info = ConnInfo::new(quic.remote_address(), id);
        info.tls = ("TLSv1.3", "-");
        Arc::new(info)
    });
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
                let (c, info) = (c.clone(), info.clone());
                tokio::spawn(async move {
                    match resolver.resolve_request().await {
                        Ok((req, stream)) => request(req, stream, early, &c, info).await,
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
        (Some(log), Some(conn)) => Some(Pending {
            log: log.clone(),
            on_conn: conn.next_request(),
            start,
            request: crate::http_conn::request_line(&req),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .map_or_else(|| "-".to_string(), |v| escape(v.as_bytes())),
            status: resp.status().as_u16(),
            sent: 0,
            early,
            transport: Transport::Quic,
            conn,
        }),
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
