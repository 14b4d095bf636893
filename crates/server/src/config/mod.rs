//! What [`Server::start`](crate::Server::start) is given: listeners,
//! content, TLS settings, timeouts and limits.

mod admission;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tlslab_crypto::meter::AblationSet;
use tlslab_crypto::provider::{Algorithms, Version};

use tokio::sync::Semaphore;

pub use self::admission::{AdmissionMode, AdmissionSettings, QuicShedWith, ShedWith};
use crate::error::{Error, Result};

/// Everything [`Server::start`](crate::Server::start) needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The TLS listener address (`None`: no TLS listener). Port 0 picks a
    /// free port; read it back with [`Server::https_addr`](crate::Server::https_addr).
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
    /// [`Server::start`](crate::Server::start) refuses any listener address that is not loopback
    /// unless this is true. Without an ablation it has no effect.
    pub allow_remote: bool,
    /// `--access-log FILE`: if set, the file is created (truncated) and one
    /// line per completed request is written to it by a dedicated thread
    /// behind a bounded channel (request handling waits when it is full; no
    /// line is lost), flushed whenever the queue runs dry and at
    /// [`Server::shutdown`](crate::Server::shutdown). Format (nginx combined plus TLS fields):
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
    /// Checks the options that need no I/O (those of the listeners, the
    /// threads, the limits and timeouts, and admission control);
    /// [`Server::start`](crate::Server::start) does it first. The error
    /// names the option to change.
    pub fn validate(&self) -> Result<()> {
        let t = &self.timeouts;
        let limit = Semaphore::MAX_PERMITS;
        let rules = [
            (self.https.is_none() && self.http.is_none(), "no listener: give an HTTPS address, a plain HTTP address, or both".to_string()),
            (self.threads == 0, "0 worker threads cannot serve; use at least 1".into()),
            (self.max_connections == 0, "a connection limit of 0 admits nobody; use at least 1".into()),
            (self.max_connections > limit, format!("a connection limit of {} is too large; use at most {limit}", self.max_connections)),
            (self.handshake_timeout.is_zero(), "a handshake timeout of 0 fails every handshake; give a positive duration".into()),
            (t.request.is_zero() || t.keepalive.is_zero(), "a request or keep-alive timeout of 0 closes every connection; give a positive duration".into()),
            (t.h2_ping.is_some_and(|d| d.is_zero()), "an HTTP/2 PING interval of 0 would ping without pause; give a positive duration or none".into()),
        ];
        match rules.into_iter().find(|(broken, _)| *broken) {
            Some((_, problem)) => Err(Error::Usage(problem)),
            None => self.admission.validate().map_err(Error::Usage),
        }
    }

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
    /// (at most [`MAX_ROOT_BYTES`](crate::MAX_ROOT_BYTES) in total). `/` and `/dir/` serve
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
    /// and a memory session cache ([`Server::start`](crate::Server::start) refuses otherwise);
    /// single-use stateful tickets make each 0-RTT flight unreplayable.
    /// Accepted early data is handed to the HTTP layer ahead of the
    /// post-handshake bytes, in order, never dropped, and its responses
    /// leave as 0.5-RTT data before the client's Finished (`early.rs`), so
    /// a 0-RTT request costs the client one round trip fewer.
    pub max_early_data: u32,
    /// ALPN protocols offered, in preference order (default `h2`,
    /// `http/1.1`). Empty: no ALPN (HTTP version found from the first bytes).
    pub alpn: Vec<Vec<u8>>,
    /// `--ablate`: TLS stages replaced by same-size no-ops (see
    /// `crates/crypto/ABLATIONS.md`); [`AblationSet::NONE`] by default.
    /// Anything else makes the listener INSECURE: [`Server::start`](crate::Server::start) then
    /// binds loopback addresses only (unless
    /// [`ServeConfig::allow_remote`]) and returns a warning in
    /// [`Server::warnings`](crate::Server::warnings). Clients must use the same set; a client with
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
    /// `--keylog` (or `SSLKEYLOGFILE`): append the TLS secrets of every
    /// connection, TCP and QUIC (the QUIC listener's configuration is a
    /// copy of this one), to this file in the NSS key log format, created
    /// 0600. `None`: no key log.
    pub key_log: Option<std::path::PathBuf>,
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
            key_log: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_first_broken_rule_as_a_usage_error() {
        let g = tlslab_crypto::pki::generate(tlslab_crypto::pki::KeyType::EcdsaP256, &[]).unwrap();
        let tls = TlsSettings::new(CertSource::Generated(g));
        let mut c = ServeConfig::new("127.0.0.1:0".parse().unwrap(), Content::Empty, tls);
        assert!(c.validate().is_ok());
        (c.threads, c.max_connections) = (0, 0);
        let e = c.validate().unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("0 worker threads"), "{e}");
        // A setup failure is the machine's, and keeps its cause.
        let e = Error::setup("cannot start x")(std::io::Error::other("boom"));
        assert_eq!(e.kind(), crate::ErrorKind::Runtime);
        assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "boom");
    }
}
