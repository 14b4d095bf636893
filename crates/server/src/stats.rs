//! The server's live counters, one [`Stats`] for every listener, and the
//! plain count types a [`Snapshot`](crate::Snapshot) reports them in.
//!
//! The figures both transports keep are counted once, indexed by
//! [`Transport`] and, where TCP has two, [`Listener`] (QUIC's one is
//! `Https`): connections accepted, open, requests, requests answered
//! early, socket bytes, handshake failures by reason. Beside them: TCP's
//! handshakes by version and kind and its early data, as rustls reports
//! them per connection, and [`QuicCounters`], the HTTP/3 listener's own
//! (handshake kinds from its key log, which sees every ServerHello and
//! resumption; retries, shed attempts, datagrams, GSO/GRO, the receive
//! buffer, the ClientHello reader, qlog). Every counter is a relaxed
//! atomic added to through one `Arc<Stats>`; only failure reasons lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use rustls::HandshakeKind;
use serde::Serialize;
use tlslab_crypto::meter::{AblationSet, Meter};
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::{CountingTicketer, ServerSessionCache};
use tlslab_runtime::Threads;
use tlslab_runtime::qlog::QlogDir;

use crate::idle::Transport;
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

/// The live counters of the server, its TCP and QUIC listeners alike.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) started: Instant,
    /// `[transport][listener]`: connections accepted (QUIC: attempts
    /// accepted for a handshake), requests, and socket bytes (QUIC: UDP
    /// payload, added as each connection closes).
    connections: [[AtomicU64; 2]; 2],
    requests: [[AtomicU64; 2]; 2],
    bytes: [[Arc<ByteCounters>; 2]; 2],
    /// `[transport]`: connections open now, requests answered before the
    /// handshake completed, and failed handshakes by reason.
    open: [AtomicU64; 2],
    early_requests: [AtomicU64; 2],
    failures: [Mutex<BTreeMap<String, u64>>; 2],
    /// TCP's handshakes, `[version][kind]`: version 0 = 1.2, 1 = 1.3;
    /// kind 0 full, 1 resumed, 2 full with HRR.
    handshakes: [[AtomicU64; 3]; 2],
    /// TCP's accepted early data: connections, bytes; and refused offers.
    early: [AtomicU64; 3],
    /// The HTTP/3 listener's own counters; `h3`: it is on.
    pub(crate) quic: QuicCounters,
    pub(crate) h3: bool,
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    pub(crate) ticketer: Option<Arc<CountingTicketer>>,
    pub(crate) threads: Arc<Threads>,
    pub(crate) meter: Arc<Meter>,
    pub(crate) ablation: AblationSet,
}

/// Handshake kinds as the TLS layer of the QUIC listener saw them
/// (`quic::session`: its key log and crypto sessions add to them).
#[derive(Debug, Default)]
pub(crate) struct Kinds {
    /// ServerHellos sent (full and resumed).
    pub(crate) hellos: AtomicU64,
    /// Resumed handshakes (a PSK accepted).
    pub(crate) resumed: AtomicU64,
    /// ClientHellos that offered 0-RTT.
    pub(crate) early_offered: AtomicU64,
    /// 0-RTT accepted (the server derived 0-RTT keys).
    pub(crate) early_accepted: AtomicU64,
}

/// The figures only the QUIC listener keeps: the part of [`Stats`] that
/// [`QuicFigures`](crate::QuicFigures) reports beside the shared ones.
#[derive(Debug, Default)]
pub(crate) struct QuicCounters {
    /// Shared with the listener's rustls configuration, built before the
    /// server's `Stats`.
    pub(crate) kinds: Arc<Kinds>,
    pub(crate) established: AtomicU64,
    /// Attempts refused at `--quic-max-connections`.
    pub(crate) refused: AtomicU64,
    pub(crate) retries: AtomicU64,
    /// Datagrams received and sent, and NEW_TOKEN frames sent, on closed
    /// connections.
    pub(crate) datagrams_received: AtomicU64,
    pub(crate) datagrams_sent: AtomicU64,
    pub(crate) new_tokens: AtomicU64,
    /// quinn-udp's segments per `sendmsg` and per receive (1: none).
    pub(crate) gso_segments: AtomicU64,
    pub(crate) gro_segments: AtomicU64,
    /// Handshakes from unvalidated addresses in progress (the
    /// `retry-threshold` policy's count).
    pub(crate) half_open: AtomicU64,
    /// Attempts shed by `session` admission, by `--quic-shed-with` action
    /// (refuse, retry, ignore).
    pub(crate) shed: [AtomicU64; 3],
    /// The kernel's figure for the socket's receive buffer
    /// (`--quic-recv-buffer`), and a duplicate of the socket to read its
    /// drops from.
    pub(crate) recv_buffer: AtomicU64,
    pub(crate) socket: OnceLock<std::net::UdpSocket>,
    /// The ClientHello reader on the socket (`quic::sniff`): installed,
    /// and the long-header datagrams it read and the nanoseconds it took.
    pub(crate) hello_reader: AtomicBool,
    pub(crate) hello_datagrams: AtomicU64,
    pub(crate) hello_nanos: AtomicU64,
    /// Woken when a connection ends and its slot frees: the attempts
    /// waiting for room at the limit.
    pub(crate) freed: tokio::sync::Notify,
    /// `--qlog DIR`.
    pub(crate) qlog: Option<QlogDir>,
}

/// Reads one counter.
pub(crate) fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Stats {
    /// The counters of a server; `quic`: its HTTP/3 listener's, if on.
    pub(crate) fn new(
        cache: Option<Arc<ServerSessionCache>>,
        ticketer: Option<Arc<CountingTicketer>>,
        threads: Arc<Threads>,
        meter: Arc<Meter>,
        ablation: AblationSet,
        quic: Option<QuicCounters>,
    ) -> Self {
        Stats {
            started: Instant::now(),
            connections: Default::default(),
            requests: Default::default(),
            bytes: Default::default(),
            open: Default::default(),
            early_requests: Default::default(),
            failures: Default::default(),
            handshakes: Default::default(),
            early: Default::default(),
            h3: quic.is_some(),
            quic: quic.unwrap_or_default(),
            cache,
            ticketer,
            threads,
            meter,
            ablation,
        }
    }

    /// A completed TCP handshake.
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

    /// TCP's handshakes of one version (0 = 1.2, 1 = 1.3).
    pub(crate) fn kinds(&self, v: usize) -> KindCounts {
        let [full, resumed, full_hrr] = self.handshakes[v].each_ref().map(get);
        KindCounts {
            full,
            resumed,
            full_hrr,
        }
    }

    /// Full TCP handshakes completed so far (with and without HRR, both
    /// versions).
    pub(crate) fn full_handshakes(&self) -> u64 {
        (0..2)
            .map(|v| self.kinds(v))
            .map(|k| k.full + k.full_hrr)
            .sum()
    }

    /// A connection of `t` that failed before or during its handshake.
    pub(crate) fn failure(&self, t: Transport, reason: &str) {
        *self.failures[t as usize]
            .lock()
            .entry(reason.to_string())
            .or_default() += 1;
    }

    pub(crate) fn failures(&self, t: Transport) -> BTreeMap<String, u64> {
        self.failures[t as usize].lock().clone()
    }

    /// TCP early data accepted on a connection.
    pub(crate) fn early_data(&self, bytes: usize) {
        self.early[0].fetch_add(1, Ordering::Relaxed);
        self.early[1].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn early_data_refused(&self) {
        self.early[2].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn early_data_stats(&self) -> EarlyDataStats {
        let [connections, bytes, refused] = self.early.each_ref().map(get);
        EarlyDataStats {
            connections,
            bytes,
            requests: self.early_requests(Transport::Tcp),
            refused,
        }
    }

    /// A request on listener `l` of `t`; `early`: taken up before the
    /// handshake completed.
    pub(crate) fn request(&self, t: Transport, l: Listener, early: bool) {
        self.requests[t as usize][l as usize].fetch_add(1, Ordering::Relaxed);
        if early {
            self.early_requests[t as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn early_requests(&self, t: Transport) -> u64 {
        get(&self.early_requests[t as usize])
    }

    /// The byte counters of listener `l` of `t`.
    pub(crate) fn bytes_of(&self, t: Transport, l: Listener) -> Arc<ByteCounters> {
        self.bytes[t as usize][l as usize].clone()
    }

    /// Requests, connections accepted, bytes received and sent of `t`, per
    /// listener.
    pub(crate) fn per_listener(&self, t: Transport) -> [PerListener; 4] {
        let t = t as usize;
        let per = |f: &dyn Fn(usize) -> u64| PerListener {
            https: f(0),
            http: f(1),
        };
        [
            per(&|l| get(&self.requests[t][l])),
            per(&|l| get(&self.connections[t][l])),
            per(&|l| get(&self.bytes[t][l].received)),
            per(&|l| get(&self.bytes[t][l].sent)),
        ]
    }

    /// Counts a connection accepted on listener `l` of `t`; the guard
    /// counts it closed on drop.
    pub(crate) fn open(self: &Arc<Self>, t: Transport, l: Listener) -> OpenGuard {
        self.connections[t as usize][l as usize].fetch_add(1, Ordering::Relaxed);
        self.open[t as usize].fetch_add(1, Ordering::Relaxed);
        OpenGuard(self.clone(), t)
    }

    /// A QUIC connection accepted for a handshake, if fewer than `max` are
    /// open (`--quic-max-connections`).
    pub(crate) fn reserve(self: &Arc<Self>, max: u64) -> Option<OpenGuard> {
        let q = Transport::Quic as usize;
        self.open[q]
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                (o < max).then_some(o + 1)
            })
            .ok()?;
        self.connections[q][Listener::Https as usize].fetch_add(1, Ordering::Relaxed);
        Some(OpenGuard(self.clone(), Transport::Quic))
    }

    pub(crate) fn open_now(&self, t: Transport) -> u64 {
        get(&self.open[t as usize])
    }

    /// A QUIC connection's transport figures, as it closes.
    pub(crate) fn quic_closed(&self, s: &quinn::ConnectionStats) {
        let (b, q) = (&self.bytes[Transport::Quic as usize][0], &self.quic);
        b.received.fetch_add(s.udp_rx.bytes, Ordering::Relaxed);
        b.sent.fetch_add(s.udp_tx.bytes, Ordering::Relaxed);
        q.datagrams_received
            .fetch_add(s.udp_rx.datagrams, Ordering::Relaxed);
        q.datagrams_sent
            .fetch_add(s.udp_tx.datagrams, Ordering::Relaxed);
        q.new_tokens
            .fetch_add(s.frame_tx.new_token, Ordering::Relaxed);
    }
}

#[cfg(test)]
impl Stats {
    /// A unit test's counters: no session cache, tickets or ablation.
    pub(crate) fn bare(quic: Option<QuicCounters>) -> Arc<Self> {
        let threads = Arc::new(Threads::default());
        let none = AblationSet::default();
        Arc::new(Stats::new(None, None, threads, Meter::new(), none, quic))
    }
}

/// Counts one open connection; decrements on drop (over QUIC, and frees
/// its slot for an attempt waiting at the limit).
#[derive(Debug)]
pub(crate) struct OpenGuard(Arc<Stats>, Transport);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open[self.1 as usize].fetch_sub(1, Ordering::Relaxed);
        if self.1 == Transport::Quic {
            self.0.quic.freed.notify_one();
        }
    }
}
