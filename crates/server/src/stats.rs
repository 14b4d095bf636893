//! The server's live counters, and the plain count types a
//! [`Snapshot`](crate::Snapshot) reports them in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use rustls::HandshakeKind;
use serde::Serialize;
use tlslab_crypto::meter::{AblationSet, Meter};
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::{CountingTicketer, ServerSessionCache};
use tlslab_runtime::Threads;

use crate::io::ByteCounters;

/// Which listener a connection or request arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    /// The TLS listener.
    Https,
    /// The plain-HTTP listener.
    Http,
}

impl Listener {
    /// The metric label value (`https`, `http`).
    pub fn name(self) -> &'static str {
        match self {
            Listener::Https => "https",
            Listener::Http => "http",
        }
    }

    pub(crate) const ALL: [Listener; 2] = [Listener::Https, Listener::Http];

    fn idx(self) -> usize {
        self as usize
    }
}

/// A figure per listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PerListener {
    /// On the TLS listener.
    pub https: u64,
    /// On the plain-HTTP listener.
    pub http: u64,
}

impl PerListener {
    /// Both listeners together.
    pub fn total(&self) -> u64 {
        self.https + self.http
    }

    /// The figure of one listener.
    pub fn get(&self, l: Listener) -> u64 {
        match l {
            Listener::Https => self.https,
            Listener::Http => self.http,
        }
    }
}

/// Completed handshakes of one TLS version, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// Full handshakes without a HelloRetryRequest.
    pub full: u64,
    /// Resumed handshakes.
    pub resumed: u64,
    /// Full TLS 1.3 handshakes that needed a HelloRetryRequest.
    pub full_hrr: u64,
}

impl KindCounts {
    /// All handshakes of this version.
    pub fn total(&self) -> u64 {
        self.full + self.resumed + self.full_hrr
    }
}

/// Completed handshakes by version and kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HandshakeCounts {
    /// TLS 1.2.
    #[serde(rename = "TLSv1.2")]
    pub tls12: KindCounts,
    /// TLS 1.3.
    #[serde(rename = "TLSv1.3")]
    pub tls13: KindCounts,
}

impl HandshakeCounts {
    /// The counts of one version.
    pub fn get(&self, v: Version) -> KindCounts {
        match v {
            Version::Tls12 => self.tls12,
            Version::Tls13 => self.tls13,
        }
    }

    /// All completed handshakes.
    pub fn total(&self) -> u64 {
        self.tls12.total() + self.tls13.total()
    }

    /// All resumed handshakes.
    pub fn resumed(&self) -> u64 {
        self.tls12.resumed + self.tls13.resumed
    }
}

/// TLS 1.3 early data (0-RTT) the server accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EarlyDataStats {
    /// Connections whose early data was accepted.
    pub connections: u64,
    /// Early-data bytes accepted and handed to the HTTP layer.
    pub bytes: u64,
    /// Requests that arrived in early data and were answered before the
    /// handshake completed (safe methods only; others wait for it).
    pub requests: u64,
    /// Connections whose ClientHello offered early data that was refused:
    /// a replayed ClientHello (its single-use ticket is already spent), an
    /// unknown or expired ticket, or a full handshake. They go on in 1-RTT.
    pub refused: u64,
}

/// Connections the server closed because they sat idle
/// (`--request-timeout`, `--keepalive-timeout`) or to make room at the
/// `--max-connections` limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IdleClosed {
    /// No first request within `--request-timeout`.
    pub request_timeout: u64,
    /// No next request within `--keepalive-timeout` (HTTP/2: no stream).
    pub keepalive_timeout: u64,
    /// The longest-idle connection, closed at the connection limit so a
    /// new one could be served.
    pub evicted: u64,
}

impl IdleClosed {
    /// All three.
    pub fn total(&self) -> u64 {
        self.request_timeout + self.keepalive_timeout + self.evicted
    }
}

/// The figures both transports keep, for one of them
/// ([`Snapshot::transport`](crate::Snapshot::transport)) or both together
/// ([`Snapshot::total`](crate::Snapshot::total)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TransportFigures {
    /// Completed full handshakes (TCP: after a HelloRetryRequest too).
    pub full_handshakes: u64,
    /// Completed resumed handshakes.
    pub resumed_handshakes: u64,
    /// Of the resumed ones, those whose 0-RTT (TLS 1.3 early data) the
    /// server accepted.
    pub early_data_accepted: u64,
    /// Connections that never completed a handshake, for any reason; over
    /// QUIC with the attempts shed by admission (refused or ignored) or
    /// refused at the connection limit, as a shed TCP connection is a
    /// failure. A QUIC attempt sent a Retry is not counted: its client
    /// comes back.
    pub handshake_failures: u64,
    /// HTTP requests (TCP: both listeners).
    pub requests: u64,
    /// Requests answered before the handshake completed (0-RTT, 0.5-RTT).
    pub early_requests: u64,
    /// Bytes received (TCP: raw socket bytes, TLS records included; QUIC:
    /// UDP payload of closed connections).
    pub bytes_received: u64,
    /// Bytes sent, counted as `bytes_received` is.
    pub bytes_sent: u64,
    /// Connections accepted (QUIC: attempts accepted for a handshake).
    pub connections: u64,
    /// Connections open now.
    pub open_connections: u64,
    /// Connections closed for sitting idle, by reason.
    pub idle_closed: IdleClosed,
}

impl std::ops::Add for TransportFigures {
    type Output = TransportFigures;

    fn add(self, o: TransportFigures) -> TransportFigures {
        let i = |a: IdleClosed, b: IdleClosed| IdleClosed {
            request_timeout: a.request_timeout + b.request_timeout,
            keepalive_timeout: a.keepalive_timeout + b.keepalive_timeout,
            evicted: a.evicted + b.evicted,
        };
        TransportFigures {
            full_handshakes: self.full_handshakes + o.full_handshakes,
            resumed_handshakes: self.resumed_handshakes + o.resumed_handshakes,
            early_data_accepted: self.early_data_accepted + o.early_data_accepted,
            handshake_failures: self.handshake_failures + o.handshake_failures,
            requests: self.requests + o.requests,
            early_requests: self.early_requests + o.early_requests,
            bytes_received: self.bytes_received + o.bytes_received,
            bytes_sent: self.bytes_sent + o.bytes_sent,
            connections: self.connections + o.connections,
            open_connections: self.open_connections + o.open_connections,
            idle_closed: i(self.idle_closed, o.idle_closed),
        }
    }
}

/// The live counters of one server.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) started: Instant,
    /// `[version][kind]`: version 0 = 1.2, 1 = 1.3; kind 0 full, 1
    /// resumed, 2 full with HRR.
    pub(crate) handshakes: [[AtomicU64; 3]; 2],
    pub(crate) failures: Mutex<BTreeMap<String, u64>>,
    pub(crate) early_connections: AtomicU64,
    pub(crate) early_bytes: AtomicU64,
    pub(crate) early_requests: AtomicU64,
    pub(crate) early_refused: AtomicU64,
    pub(crate) requests: [AtomicU64; 2],
    pub(crate) bytes: [Arc<ByteCounters>; 2],
    pub(crate) connections: [AtomicU64; 2],
    open: AtomicU64,
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    pub(crate) ticketer: Option<Arc<CountingTicketer>>,
    pub(crate) threads: Arc<Threads>,
    pub(crate) meter: Arc<Meter>,
    pub(crate) ablation: AblationSet,
}

impl Stats {
    pub(crate) fn new(
        cache: Option<Arc<ServerSessionCache>>,
        ticketer: Option<Arc<CountingTicketer>>,
        threads: Arc<Threads>,
        meter: Arc<Meter>,
        ablation: AblationSet,
    ) -> Self {
        Stats {
            started: Instant::now(),
            handshakes: Default::default(),
            failures: Mutex::new(BTreeMap::new()),
            early_connections: AtomicU64::new(0),
            early_bytes: AtomicU64::new(0),
            early_requests: AtomicU64::new(0),
            early_refused: AtomicU64::new(0),
            requests: Default::default(),
            bytes: Default::default(),
            connections: Default::default(),
            open: AtomicU64::new(0),
            cache,
            ticketer,
            threads,
            meter,
            ablation,
        }
    }

    pub(crate) fn handshake(&self, version: Option<Version>, kind: Option<HandshakeKind>) {
        let v = match version {
            Some(Version::Tls12) => 0,
            Some(Version::Tls13) => 1,
            None => return,
        };
        let k = match kind {
            Some(HandshakeKind::Full) | None => 0,
            Some(HandshakeKind::Resumed) => 1,
            Some(HandshakeKind::FullWithHelloRetryRequest) => 2,
        };
        self.handshakes[v][k].fetch_add(1, Ordering::Relaxed);
    }

    /// Full handshakes completed so far (with and without HRR, both
    /// versions).
    pub(crate) fn full_handshakes(&self) -> u64 {
        self.handshakes
            .iter()
            .map(|k| k[0].load(Ordering::Relaxed) + k[2].load(Ordering::Relaxed))
            .sum()
    }

    pub(crate) fn failure(&self, reason: &str) {
        *self.failures.lock().entry(reason.to_string()).or_insert(0) += 1;
    }

    pub(crate) fn early_data(&self, bytes: usize) {
        self.early_connections.fetch_add(1, Ordering::Relaxed);
        self.early_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn early_request(&self) {
        self.early_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn early_data_refused(&self) {
        self.early_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request(&self, l: Listener) {
        self.requests[l.idx()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bytes_of(&self, l: Listener) -> Arc<ByteCounters> {
        self.bytes[l.idx()].clone()
    }

    /// Counts an accepted connection; the guard counts it closed on drop.
    pub(crate) fn open(self: &Arc<Self>, l: Listener) -> OpenGuard {
        self.connections[l.idx()].fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self.clone())
    }

    pub(crate) fn open_now(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    pub(crate) fn per(arr: &[AtomicU64; 2]) -> PerListener {
        PerListener {
            https: arr[0].load(Ordering::Relaxed),
            http: arr[1].load(Ordering::Relaxed),
        }
    }
}

/// Counts one open connection; decrements on drop.
#[derive(Debug)]
pub(crate) struct OpenGuard(Arc<Stats>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}
