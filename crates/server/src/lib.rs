//! The tlslab server engine: the HTTPS (and optional plain HTTP) server
//! behind `tlslab serve`, also embedded in-process by `tlslab lab`.
//!
//! This crate is for serving a fixed, in-memory content set over TLS (via
//! tokio-rustls and hyper, HTTP/1.1 keep-alive and HTTP/2 by ALPN) with the
//! TLS knobs tlslab studies switchable (versions, suites, groups, session
//! cache, tickets, early data), and for observing what that costs the
//! server: handshakes by version and kind, session-cache and ticket
//! counters, raw socket bytes, failures by reason, the CPU time of the
//! server's own worker threads, and the calls, time and bytes of every
//! cryptographic operation. It exposes those as a [`Snapshot`], a human
//! [`Snapshot::summary`] and Prometheus/OpenMetrics text on a separate
//! metrics address.
//!
//! The TLS listener always runs on the metering provider
//! (`tlslab_crypto::meter::metered`, with the session store and ticketer
//! wrapped too): recording costs about 70 ns per operation, about 1.5 % of
//! a full handshake's CPU time, paid in every configuration so that runs
//! stay comparable. With [`TlsSettings::ablation`] set, the ablated stages
//! are replaced first (`tlslab_crypto::meter::ablated`) and the meter still
//! counts their (now nearly free) calls.
//!
//! A cluster of servers can share its session state
//! ([`TlsSettings::remote_cache`], [`TlsSettings::ticket_keys`]): a session
//! cache in Redis, fetched asynchronously before the handshake from the
//! session ID or PSK identity of the ClientHello (never blocking the event
//! loop; a slow or absent Redis means full handshakes), and ticket keys in
//! nginx's 80-byte layout from a file (reloaded on SIGHUP and change) or
//! from Redis (rotated by one elected node).
//!
//! It is not for general web serving: content is loaded into memory at
//! start (at most 1 GiB), there is no configuration language, no request
//! bodies are used, and no client authentication is done. It does not
//! generate load (that is `tlslab-load`) and does not parse TLS itself
//! beyond classifying the first bytes of a connection and reading the
//! offered session from the ClientHello (`tlslab-wire`).
//!
//! Routes, on both the TLS and the plain listener (GET and HEAD; other
//! methods get 405): the content's files; `/health` → `ok`;
//! `/bytes/<N>` → N filler bytes; `/dyn?work=<µs>&bytes=<N>` → burns that
//! much CPU time (a busy loop on the thread CPU clock) on the runtime's
//! blocking pool, at most [`ServeConfig::threads`] requests at once, so
//! that application work never stalls the event loop of other connections
//! (the pool's threads are the runtime's, so their CPU time is the
//! server's), then returns N bytes, with the CPU time burnt in the
//! `x-tlslab-cpu-us` header. Work is capped at 10 s and N at 1 GiB; bad parameters get a 400
//! naming the problem. Every fixed body carries `Content-Length`.
//!
//! [`Server::start`], [`Server::shutdown`] and [`wait_for_signal`] block the
//! calling thread; call them from synchronous code (or `spawn_blocking`).
//! The server runs on its own multi-thread tokio runtime.

mod accept;
mod access_log;
mod admission;
mod content;
mod early;
mod idle;
mod io;
mod metrics;
mod prefetch;
mod queue;
mod quic;
mod redis_cache;
mod server;
mod signal;
mod stats;
mod ticket_keys;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tlslab_crypto::provider::{Algorithms, Version};

pub use tlslab_crypto::meter::{AblationSet, Op, OpStat, Snapshot as CryptoSnapshot};

pub use admission::{
    AdmissionMode, AdmissionSettings, AdmissionStats, Controller, HelloKind, ShedWith, Signals,
};
pub use content::{DYN_MAX_BYTES, DYN_MAX_WORK, MAX_ROOT_BYTES};
pub use quic::{H3Settings, QuicHandshakes, QuicRetry, QuicSnapshot};
pub use redis_cache::RedisStats;
pub use server::Server;
pub use signal::{Signal, wait_for_signal};
pub use stats::{
    EarlyDataStats, HandshakeCounts, IdleClosed, KindCounts, Listener, PerListener, Snapshot,
};
pub use tlslab_crypto::store::{CacheStats, TicketStats};
pub use tlslab_crypto::ticket_keys::TicketKeyStats;
pub use tlslab_runtime::{process_cpu_time, thread_cpu_time};

/// Everything [`Server::start`] needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The TLS listener address (`None`: no TLS listener). Port 0 picks a
    /// free port; read it back with [`Server::https_addr`].
    pub https: Option<SocketAddr>,
    /// An optional plain-HTTP listener serving the same content, the
    /// baseline for "what does TLS cost".
    pub http: Option<SocketAddr>,
    /// An optional address serving `GET /metrics` (OpenMetrics text, which
    /// Prometheus scrapes) and `GET /health`. Its own traffic is not
    /// counted in the connection, request or byte figures.
    pub metrics: Option<SocketAddr>,
    /// What is served.
    pub content: Content,
    /// TLS settings of the HTTPS listener.
    pub tls: TlsSettings,
    /// Tokio worker threads (at least 1).
    pub threads: usize,
    /// If set, every runtime thread is pinned to exactly this set of CPUs
    /// (its affinity mask is the whole set; the kernel places threads
    /// within it). `lab` passes a single CPU.
    pub pin_cpus: Option<Vec<usize>>,
    /// A TLS handshake (from accept to the client's Finished) must complete
    /// within this; otherwise the connection is closed and counted as the
    /// failure reason `timeout`.
    pub handshake_timeout: Duration,
    /// How long a connection may sit idle: before its first request, after
    /// a response, and HTTP/2's PING keep-alive.
    pub timeouts: ConnTimeouts,
    /// At most this many connections (TLS and plain together) are open at
    /// once. A new connection at the limit makes the longest-idle open
    /// connection close (gracefully) and takes its slot; when none is idle
    /// (all in a handshake or a request), it waits until one is. The
    /// metrics listener has its own limit ([`METRICS_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// `--allow-remote`: with an ablation ([`TlsSettings::ablation`]) set,
    /// [`Server::start`] refuses any listener address that is not loopback
    /// unless this is true. Without an ablation it has no effect.
    pub allow_remote: bool,
    /// `--access-log FILE`: if set, the file is created (truncated) and one
    /// line per completed request is written to it by a dedicated thread
    /// behind a bounded channel (request handling waits when it is full; no
    /// line is lost), flushed whenever the queue runs dry and at
    /// [`Server::shutdown`]. Format (nginx combined plus TLS fields):
    /// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent
    /// "-" "$http_user_agent" $ssl_protocol $ssl_session_reused
    /// $request_time_us $connection_id $request_on_conn`, with `$time_local`
    /// in UTC, `$ssl_protocol` `TLSv1.2`/`TLSv1.3`, `$ssl_session_reused`
    /// `r` (resumed) or `.` (full), both `-` on the plain listener. A line is
    /// queued when its response completes, so the file lists requests in
    /// the order their service completed.
    pub access_log: Option<PathBuf>,
    /// Admission control of new TLS handshakes (`--admission`,
    /// `--shed-with`, `--max-handshakes-in-flight`); off by default, when
    /// no ClientHello is read ahead of rustls for it. See the `admission`
    /// module docs for the model.
    pub admission: AdmissionSettings,
}

impl ServeConfig {
    /// A configuration with an HTTPS listener on `https`, serving `content`
    /// with `tls`: no plain or metrics listener, one worker thread per CPU,
    /// no pinning, a 10 s handshake timeout, [`ConnTimeouts::default`], at
    /// most 10,000 connections and
    /// (with an ablation) loopback addresses only.
    pub fn new(https: SocketAddr, content: Content, tls: TlsSettings) -> Self {
        ServeConfig {
            https: Some(https),
            http: None,
            metrics: None,
            content,
            tls,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pin_cpus: None,
            handshake_timeout: Duration::from_secs(10),
            timeouts: ConnTimeouts::default(),
            max_connections: 10_000,
            allow_remote: false,
            access_log: None,
            admission: AdmissionSettings::default(),
        }
    }
}

/// The most connections the metrics listener keeps open at once; more are
/// closed as soon as they are accepted.
pub const METRICS_MAX_CONNECTIONS: usize = 64;
/// How long a metrics connection may take to send a request header, and
/// stay idle between requests.
pub const METRICS_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection past its TLS handshake may sit idle (nothing in
/// progress: no request or HTTP/2 stream open), with nginx's defaults. The
/// time a client takes to send a request header counts as idle, so a
/// client that trickles its header (slowloris) is closed too. A connection
/// still in its TLS handshake (protocol detection included) is bounded by
/// [`ServeConfig::handshake_timeout`] instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnTimeouts {
    /// `--request-timeout`: from the start of HTTP (after the handshake,
    /// or at accept on the plain listener) to the first request's complete
    /// header; nginx's `client_header_timeout`, 60 s. It also bounds HTTP
    /// version detection on the plain listener (zero bytes, or a partial
    /// HTTP/2 preface).
    pub request: Duration,
    /// `--keepalive-timeout`: from the end of a response to the next
    /// request's complete header (HTTP/2: while no stream is open);
    /// nginx's `keepalive_timeout`, 75 s.
    pub keepalive: Duration,
    /// `--h2-ping-interval`: an HTTP/2 connection that has read nothing
    /// for this long is sent a PING, and closed if no answer comes within
    /// [`H2_PING_TIMEOUT`] (a dead peer, even with a stream open). `None`:
    /// no PINGs. Default 60 s.
    pub h2_ping: Option<Duration>,
}

/// How long an HTTP/2 PING keep-alive waits for its answer.
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

impl Default for ConnTimeouts {
    fn default() -> Self {
        ConnTimeouts {
            request: Duration::from_secs(60),
            keepalive: Duration::from_secs(75),
            h2_ping: Some(Duration::from_secs(60)),
        }
    }
}

/// What the server serves, besides the routes that are always there
/// (`/health`, `/dyn?work=<µs>&bytes=<N>`, `/bytes/<N>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Only the built-in routes.
    Empty,
    /// The regular files under this directory, read into memory at start
    /// (at most [`MAX_ROOT_BYTES`] in total). `/` and `/dir/` serve
    /// `index.html` of that directory if present. Symbolic links to files
    /// are followed; symbolic links to directories are not.
    Root(PathBuf),
    /// The 36 files of the SPECweb96 set under `/specweb96/`, generated in
    /// memory (see `tlslab_workload::specweb96`).
    Specweb96,
}

/// Where the server's certificate chain and key come from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// PEM files: the chain (leaf first) and its private key.
    Files {
        /// The PEM certificate chain.
        chain: PathBuf,
        /// The PEM private key.
        key: PathBuf,
    },
    /// A chain generated in memory with `tlslab_crypto::pki::generate`.
    Generated(tlslab_crypto::pki::Generated),
}

/// Server-side TLS session storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCache {
    /// No server-side storage: TLS 1.2 session IDs and stateful TLS 1.3
    /// tickets cannot resume (only stateless tickets can, if enabled).
    None,
    /// A bounded in-memory cache (`tlslab_crypto::store::ServerSessionCache`).
    Memory {
        /// Maximum number of sessions held.
        capacity: usize,
        /// How long a session stays resumable.
        ttl: Duration,
    },
}

/// A session cache shared through Redis (`--session-cache redis://…` or
/// `memory:N+redis://…`), beside [`TlsSettings::session_cache`], which it
/// replaces when set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCache {
    /// `redis://HOST:PORT[/DB]`.
    pub url: String,
    /// The capacity of the memory layer in front of Redis (`memory:N+`),
    /// or `None` for Redis alone (a small staging area then holds
    /// prefetched sessions until their handshake).
    pub memory: Option<usize>,
    /// Session lifetime: the TTL of each Redis key and of the memory layer.
    pub ttl: Duration,
    /// Prefix of every Redis key (`--redis-prefix`).
    pub prefix: String,
    /// Bound on each pre-handshake GET (`--redis-timeout`).
    pub timeout: Duration,
}

/// Where the keys that seal session tickets come from (`--ticket-keys`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TicketKeys {
    /// A ticketer of this process alone (rustls's aws-lc-rs ticketer).
    #[default]
    Local,
    /// A file of 80-byte keys (nginx's `ssl_session_ticket_key` layout),
    /// re-read on SIGHUP and when it changes.
    File(PathBuf),
    /// The cluster's current and previous keys in Redis under one
    /// versioned key; one node at a time (elected by a Redis lock with a
    /// TTL) rotates them every `rotation`, publishing a new key before any
    /// node encrypts with it.
    Redis {
        /// `redis://HOST:PORT[/DB]`.
        url: String,
        /// The Redis key of the key set (its lock is `{key}:lock`).
        key: String,
        /// `--ticket-key-rotation`.
        rotation: Duration,
    },
}

/// TLS settings of the HTTPS listener.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// Protocol versions offered (`--tls`).
    pub versions: Vec<Version>,
    /// Cipher suites and key-exchange groups (`--suites`, `--groups`).
    pub algorithms: Algorithms,
    /// The certificate chain and key.
    pub cert: CertSource,
    /// Server-side session storage (`--session-cache`).
    pub session_cache: SessionCache,
    /// Stateless session tickets (`--tickets on|off`). On: TLS 1.2 tickets
    /// and stateless TLS 1.3 tickets sealed by a rotating aws-lc-rs
    /// ticketer. Off: TLS 1.2 resumes by session ID and TLS 1.3 tickets are
    /// stateful (stored in the session cache), as rustls does by default.
    pub tickets: bool,
    /// `--max-early-data`: the most TLS 1.3 0-RTT bytes accepted per
    /// connection (0 = early data off). rustls accepts early data only on
    /// stateful resumption, so a non-zero value requires `tickets: false`
    /// and a memory session cache ([`Server::start`] refuses otherwise);
    /// single-use stateful tickets make each 0-RTT flight unreplayable.
    /// Accepted early data is handed to the HTTP layer ahead of the
    /// post-handshake bytes, in order, never dropped; but tokio-rustls has
    /// no server 0.5-RTT path, so the server answers only once the
    /// handshake is complete and 0-RTT saves the client no round trip here.
    pub max_early_data: u32,
    /// ALPN protocols offered, in preference order (default `h2`,
    /// `http/1.1`). Empty: no ALPN (HTTP version found from the first bytes).
    pub alpn: Vec<Vec<u8>>,
    /// `--ablate`: TLS stages replaced by same-size no-ops (see
    /// `crates/crypto/ABLATIONS.md`); [`AblationSet::NONE`] by default.
    /// Anything else makes the listener INSECURE: [`Server::start`] then
    /// binds loopback addresses only (unless
    /// [`ServeConfig::allow_remote`]) and returns a warning in
    /// [`Server::warnings`]. Clients must use the same set; a client with
    /// another set fails the handshake (counted as `ablation_mismatch` where
    /// the server can tell). `cache` needs a memory session cache; with it,
    /// TLS 1.2 session-ID lookups hit a perfect cache, so the session-cache
    /// counters see only TLS 1.3 traffic.
    pub ablation: AblationSet,
    /// A session cache shared through Redis; when set it replaces
    /// [`TlsSettings::session_cache`].
    pub remote_cache: Option<RemoteCache>,
    /// Where ticket keys come from (with `tickets: true`).
    pub ticket_keys: TicketKeys,
    /// `--cert-compression`: RFC 8879 algorithms the server compresses its
    /// chain with, in preference order, when the client offers one (each
    /// chain is compressed once per algorithm and cached). Empty (the
    /// default): the chain is always sent uncompressed.
    pub cert_compression: Vec<tlslab_crypto::compress::CertCompression>,
}

impl TlsSettings {
    /// Settings with `cert` and tlslab's defaults: TLS 1.2 and 1.3, default
    /// suites and groups, a memory session cache of 20,480 sessions kept for
    /// 5 minutes, tickets off, no early data, ALPN `h2` and `http/1.1`, no
    /// ablation.
    pub fn new(cert: CertSource) -> Self {
        TlsSettings {
            versions: vec![Version::Tls12, Version::Tls13],
            algorithms: Algorithms::default(),
            cert,
            session_cache: SessionCache::Memory {
                capacity: 20_480,
                ttl: Duration::from_secs(300),
            },
            tickets: false,
            max_early_data: 0,
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            ablation: AblationSet::NONE,
            remote_cache: None,
            ticket_keys: TicketKeys::Local,
            cert_compression: Vec::new(),
        }
    }
}

/// Errors from starting or running the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work; the message says which option to change.
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// Building the TLS configuration failed (bad key material, or the
    /// version/suite/group options leave nothing to negotiate).
    #[error("TLS setup: {0}")]
    Tls(#[from] tlslab_crypto::Error),
    /// rustls rejected the certificate and key.
    #[error(
        "TLS setup: {0}; check that the key matches the first certificate of the chain (regenerate both with `tlslab certs --out DIR`)"
    )]
    Rustls(#[from] rustls::Error),
    /// A listener could not be bound.
    #[error(
        "cannot listen on {addr} for {what}: {source}; pick another address or port (port 0 picks a free one)"
    )]
    Bind {
        /// Which listener ("https", "http", "metrics").
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The content could not be loaded.
    #[error("content: {path}: {problem}")]
    Content {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong and what to do about it.
        problem: String,
    },
    /// The runtime, thread pinning or signal handling could not be set up.
    #[error("{0}")]
    Runtime(String),
    /// The access log could not be created.
    #[error(
        "cannot create the access log {path}: {error}; give a writable file path whose directory exists (--access-log)"
    )]
    AccessLog {
        /// The file.
        path: PathBuf,
        /// The OS error (in the message, so not a separate source).
        error: std::io::Error,
    },
    /// The worker threads could not be pinned or started.
    #[error("server threads: {0}")]
    Threads(#[from] tlslab_runtime::Error),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
