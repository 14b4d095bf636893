//! Server-side counters and the [`Snapshot`] of them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::HandshakeKind;
use serde::Serialize;
use tlslab_crypto::meter::{self, AblationSet, Meter, Op};
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::{CacheStats, CountingTicketer, ServerSessionCache, TicketStats};

use crate::io::ByteCounters;
use tlslab_runtime::{Threads, process_cpu_time};

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

/// The server's counters at one instant. Every figure is observed by the
/// server itself, from its start until `uptime` later.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Time since the server began listening: the window of every other
    /// figure.
    #[serde(serialize_with = "secs")]
    pub uptime: Duration,
    /// Completed TLS handshakes by version and kind.
    pub handshakes: HandshakeCounts,
    /// Failed or abandoned TLS handshakes by reason (`timeout`, `eof`,
    /// `not_tls`, `http_on_tls_port`, `decode_error`, `alert_<name>`, ...).
    pub handshake_failures: BTreeMap<String, u64>,
    /// Session-cache counters (`None` when the cache is off).
    pub session_cache: Option<CacheStats>,
    /// Ticket counters (`None` when tickets are off).
    pub tickets: Option<TicketStats>,
    /// Accepted early data.
    pub early_data: EarlyDataStats,
    /// HTTP requests received (all routes, all statuses).
    pub requests: PerListener,
    /// Raw bytes read from client sockets (TLS records included).
    pub bytes_received: PerListener,
    /// Raw bytes written to client sockets (TLS records included).
    pub bytes_sent: PerListener,
    /// Connections accepted.
    pub connections: PerListener,
    /// Connections open now.
    pub open_connections: u64,
    /// Connections closed for being idle, by reason.
    pub idle_closed: IdleClosed,
    /// CPU time of the server runtime's threads (see
    /// [`Server::cpu_time`](crate::Server::cpu_time)).
    #[serde(serialize_with = "secs")]
    pub worker_cpu: Duration,
    /// CPU time of the whole process (getrusage), which in `lab` includes
    /// the load generator too.
    #[serde(serialize_with = "secs")]
    pub process_cpu: Duration,
    /// The ablations of the TLS listener (empty list: none).
    pub ablation: AblationSet,
    /// The server's cryptographic operations (calls, nanoseconds, bytes per
    /// operation and label), from the metering provider. Serialises as the
    /// list of non-zero entries.
    pub crypto: meter::Snapshot,
    /// The Redis-shared session cache (`None` without one): remote hits,
    /// misses, errors, timeouts, writes, put drops and GET latency.
    pub redis: Option<crate::RedisStats>,
    /// Shared ticket keys (`None` without `--ticket-keys`): version, age,
    /// tickets sealed and opened, key-name mismatches.
    pub ticket_keys: Option<crate::TicketKeyStats>,
    /// Admission control (`None` when `--admission off`): decisions by
    /// kind, the limit, and the overload signals of the last tick.
    pub admission: Option<crate::AdmissionStats>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Snapshot {
    /// All failed handshakes.
    pub fn failures_total(&self) -> u64 {
        self.handshake_failures.values().sum()
    }

    /// The share of session-cache lookups that found a session, if any
    /// lookup happened.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let c = self.session_cache?;
        let lookups = c.hits + c.misses;
        (lookups > 0).then(|| c.hits as f64 / lookups as f64)
    }

    /// The human summary `tlslab serve` prints at shutdown. Its heading
    /// names the window: server-observed, over the uptime.
    pub fn summary(&self) -> String {
        let w = format!("{:.1} s uptime", self.uptime.as_secs_f64());
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tlslab serve summary (all figures server-observed over the {w}):"
        );
        for (v, k) in [
            (Version::Tls13, self.handshakes.tls13),
            (Version::Tls12, self.handshakes.tls12),
        ] {
            let _ = writeln!(
                s,
                "  handshakes {v}: {} full, {} resumed, {} full after HelloRetryRequest",
                k.full, k.resumed, k.full_hrr
            );
        }
        let failures = if self.handshake_failures.is_empty() {
            "none".to_string()
        } else {
            self.handshake_failures
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "  handshake failures: {} ({failures})",
            self.failures_total()
        );
        let _ = writeln!(
            s,
            "  requests: {} https, {} http",
            self.requests.https, self.requests.http
        );
        let _ = writeln!(
            s,
            "  connections: {} https, {} http accepted, {} open now",
            self.connections.https, self.connections.http, self.open_connections
        );
        if self.idle_closed.total() > 0 {
            let _ = writeln!(
                s,
                "  idle connections closed: {} by --request-timeout, {} by --keepalive-timeout, {} to make room at --max-connections",
                self.idle_closed.request_timeout,
                self.idle_closed.keepalive_timeout,
                self.idle_closed.evicted
            );
        }
        let _ = writeln!(
            s,
            "  socket bytes received: {} https, {} http; sent: {} https, {} http",
            self.bytes_received.https,
            self.bytes_received.http,
            self.bytes_sent.https,
            self.bytes_sent.http
        );
        match self.session_cache {
            Some(c) => {
                let ratio = match self.cache_hit_ratio() {
                    Some(r) => format!("{:.1}%", r * 100.0),
                    None => "n/a (no lookups)".into(),
                };
                let _ = writeln!(
                    s,
                    "  session cache: hit ratio {ratio} ({} hits, {} misses), {} stored, {} evicted, {} expired, {}/{} held",
                    c.hits, c.misses, c.puts, c.evictions, c.expirations, c.size, c.capacity
                );
            }
            None => {
                let _ = writeln!(s, "  session cache: off");
            }
        }
        match self.tickets {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "  tickets: {} issued, {} accepted, {} rejected",
                    t.issued, t.accepted, t.rejected
                );
            }
            None => {
                let _ = writeln!(s, "  stateless tickets: off");
            }
        }
        if self.early_data.connections + self.early_data.refused > 0 {
            let _ = writeln!(
                s,
                "  early data: {} connections, {} bytes accepted, {} requests answered before the handshake completed, {} offers refused (replayed or unknown tickets)",
                self.early_data.connections,
                self.early_data.bytes,
                self.early_data.requests,
                self.early_data.refused
            );
        }
        let per_req = match self.requests.total() {
            0 => String::new(),
            n => format!(
                ", {:.1} µs per request (https + http)",
                self.worker_cpu.as_secs_f64() * 1e6 / n as f64
            ),
        };
        let _ = writeln!(
            s,
            "  CPU: server threads {:.3} s{per_req}; whole process {:.3} s",
            self.worker_cpu.as_secs_f64(),
            self.process_cpu.as_secs_f64()
        );
        if let Some(a) = &self.admission {
            let limit = match (a.mode, a.limit) {
                (crate::AdmissionMode::Static, Some(l)) => format!("at most {l:.0} in flight"),
                (_, Some(l)) => format!("limit {l:.1} full handshakes/s"),
                (_, None) => "no limit set (no overload seen)".to_string(),
            };
            let _ = writeln!(
                s,
                "  admission {} (shed with {}): full {} admitted, {} shed; resume {} admitted, {} shed; {} misclassified; {limit}; {} overloaded 100 ms ticks",
                a.mode.name(),
                a.shed_with.name(),
                a.full_admitted,
                a.full_shed,
                a.resume_admitted,
                a.resume_shed,
                a.misclassified,
                a.overload_ticks
            );
        }
        if !self.ablation.is_empty() {
            let _ = writeln!(
                s,
                "  ablation: {} (INSECURE: measurement only)",
                self.ablation
            );
        }
        let ops: Vec<_> = Op::ALL
            .into_iter()
            .map(|op| self.crypto.total(op))
            .filter(|t| t.calls > 0)
            .collect();
        if ops.is_empty() {
            let _ = writeln!(s, "  time per crypto operation: no operations");
        } else {
            let _ = writeln!(
                s,
                "  time per crypto operation (wall time inside the provider, meter overhead included):"
            );
            for t in ops {
                let _ = writeln!(
                    s,
                    "    {:<22} {:>10} calls {:>10.2} µs mean",
                    t.op.name(),
                    t.calls,
                    t.nanos as f64 / 1e3 / t.calls as f64
                );
            }
        }
        s
    }
}

/// The live counters of one server.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) started: Instant,
    /// `[version][kind]`: version 0 = 1.2, 1 = 1.3; kind 0 full, 1
    /// resumed, 2 full with HRR.
    handshakes: [[AtomicU64; 3]; 2],
    failures: Mutex<BTreeMap<String, u64>>,
    early_connections: AtomicU64,
    early_bytes: AtomicU64,
    early_requests: AtomicU64,
    early_refused: AtomicU64,
    requests: [AtomicU64; 2],
    pub(crate) bytes: [Arc<ByteCounters>; 2],
    connections: [AtomicU64; 2],
    open: AtomicU64,
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    pub(crate) ticketer: Option<Arc<CountingTicketer>>,
    pub(crate) threads: Arc<Threads>,
    pub(crate) meter: Arc<Meter>,
    pub(crate) ablation: AblationSet,
    /// The Redis-shared session cache, if any (set once at start).
    pub(crate) redis: std::sync::OnceLock<Option<Arc<crate::redis_cache::RedisStore>>>,
    /// Shared ticket keys, if any (set once at start).
    pub(crate) ticket_keys:
        std::sync::OnceLock<Option<Arc<tlslab_crypto::ticket_keys::TicketKeyRing>>>,
    /// Admission control, if on (set once at start).
    pub(crate) admission: std::sync::OnceLock<Option<Arc<crate::admission::Admission>>>,
    /// The connections past their handshake (set once at start).
    pub(crate) idle: std::sync::OnceLock<Arc<crate::idle::Conns>>,
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
            redis: Default::default(),
            ticket_keys: Default::default(),
            admission: Default::default(),
            idle: Default::default(),
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

    fn per(arr: &[AtomicU64; 2]) -> PerListener {
        PerListener {
            https: arr[0].load(Ordering::Relaxed),
            http: arr[1].load(Ordering::Relaxed),
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let kinds = |v: usize| KindCounts {
            full: self.handshakes[v][0].load(Ordering::Relaxed),
            resumed: self.handshakes[v][1].load(Ordering::Relaxed),
            full_hrr: self.handshakes[v][2].load(Ordering::Relaxed),
        };
        let bytes = |f: fn(&ByteCounters) -> &AtomicU64| PerListener {
            https: f(&self.bytes[0]).load(Ordering::Relaxed),
            http: f(&self.bytes[1]).load(Ordering::Relaxed),
        };
        Snapshot {
            uptime: self.started.elapsed(),
            handshakes: HandshakeCounts {
                tls12: kinds(0),
                tls13: kinds(1),
            },
            handshake_failures: self.failures.lock().clone(),
            session_cache: self.cache.as_ref().map(|c| c.stats()),
            tickets: self.ticketer.as_ref().map(|t| t.stats()),
            early_data: EarlyDataStats {
                connections: self.early_connections.load(Ordering::Relaxed),
                bytes: self.early_bytes.load(Ordering::Relaxed),
                requests: self.early_requests.load(Ordering::Relaxed),
                refused: self.early_refused.load(Ordering::Relaxed),
            },
            requests: Self::per(&self.requests),
            bytes_received: bytes(|b| &b.received),
            bytes_sent: bytes(|b| &b.sent),
            connections: Self::per(&self.connections),
            open_connections: self.open_now(),
            idle_closed: self.idle.get().map_or_else(IdleClosed::default, |r| {
                use crate::idle::CloseReason as R;
                IdleClosed {
                    request_timeout: r.closed(R::RequestTimeout),
                    keepalive_timeout: r.closed(R::KeepaliveTimeout),
                    evicted: r.closed(R::Evicted),
                }
            }),
            worker_cpu: self.threads.cpu_time().total(),
            process_cpu: process_cpu_time(),
            ablation: self.ablation,
            crypto: self.meter.snapshot(),
            redis: self.redis.get().and_then(|r| r.as_ref()).map(|r| r.stats()),
            ticket_keys: self
                .ticket_keys
                .get()
                .and_then(|r| r.as_ref())
                .map(|r| r.stats()),
            admission: self
                .admission
                .get()
                .and_then(|a| a.as_ref())
                .map(|a| a.stats()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_window_and_counts() {
        let stats = Arc::new(Stats::new(
            Some(ServerSessionCache::new(10, Duration::from_secs(60))),
            None,
            Arc::new(Threads::default()),
            Meter::new(),
            "sig,kx".parse().unwrap(),
        ));
        stats.handshake(Some(Version::Tls13), Some(HandshakeKind::Full));
        stats.handshake(Some(Version::Tls13), Some(HandshakeKind::Resumed));
        stats.handshake(Some(Version::Tls12), Some(HandshakeKind::Resumed));
        stats.failure("timeout");
        stats.failure("timeout");
        stats.request(Listener::Http);
        {
            let _g = stats.open(Listener::Https);
            assert_eq!(stats.open_now(), 1);
        }
        let snap = stats.snapshot();
        assert_eq!(snap.open_connections, 0);
        assert_eq!(snap.connections.https, 1);
        assert_eq!(snap.handshakes.tls13.total(), 2);
        assert_eq!(snap.handshakes.resumed(), 2);
        assert_eq!(snap.failures_total(), 2);
        assert_eq!(snap.cache_hit_ratio(), None);
        let text = snap.summary();
        assert!(text.contains("TLSv1.3: 1 full, 1 resumed"), "{text}");
        assert!(text.contains("timeout 2"), "{text}");
        assert!(text.contains("0 https, 1 http"), "{text}");
        assert!(text.contains("n/a (no lookups)"), "{text}");
        assert!(text.contains("ablation: sig,kx (INSECURE"), "{text}");
        assert!(
            text.contains("time per crypto operation: no operations"),
            "{text}"
        );
        // The heading names the window once for every line below it.
        let heading = text.lines().next().unwrap_or_default();
        assert!(heading.contains("server-observed"), "{heading}");
        assert!(heading.contains("s uptime"), "{heading}");
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["handshakes"]["TLSv1.3"]["resumed"], 1);
        assert!(json["uptime"].is_f64());
        assert_eq!(json["ablation"], serde_json::json!(["sig", "kx"]));
        assert_eq!(json["crypto"], serde_json::json!([]));
    }
}
