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
//! cryptographic operation. It exposes those, for every listener (the
//! HTTP/3 one's in [`Snapshot::quic`]), as one [`Snapshot`], a human
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
mod cert_compression;
mod config;
mod content;
mod early;
mod error;
mod handshake;
mod http_conn;
mod idle;
mod io;
mod listen;
mod metrics;
mod prefetch;
mod queue;
mod quic;
mod redis_cache;
mod server;
mod shared;
mod signal;
mod snapshot;
mod stats;
mod ticket_keys;
mod tls;

pub use tlslab_crypto::meter::{AblationSet, Op, OpStat, Snapshot as CryptoSnapshot};

pub use admission::{AdmissionStats, Controller, Decisions, HelloKind, Signals};
pub use config::{
    AdmissionMode, AdmissionSettings, CertSource, ConnTimeouts, Content, H2_PING_TIMEOUT,
    METRICS_MAX_CONNECTIONS, METRICS_TIMEOUT, QuicShedWith, RemoteCache, ServeConfig, SessionCache,
    ShedWith, TicketKeys, TlsSettings,
};
pub use content::{DYN_MAX_BYTES, DYN_MAX_WORK, MAX_ROOT_BYTES};
pub use error::{Error, ErrorKind, Result};
pub use idle::Transport;
pub use quic::{
    H3Settings, HelloReads, QuicAdmission, QuicFigures, QuicHandshakes, QuicRetry, QuicShed,
};
pub use redis_cache::RedisStats;
pub use server::Server;
pub use signal::{Signal, wait_for_signal};
pub use snapshot::Snapshot;
pub use stats::{
    EarlyDataStats, HandshakeCounts, IdleClosed, KindCounts, Listener, PerListener,
    TransportFigures,
};
pub use tlslab_crypto::store::{CacheStats, TicketStats};
pub use tlslab_crypto::ticket_keys::TicketKeyStats;
pub use tlslab_runtime::{process_cpu_time, thread_cpu_time};
