//! The [`Snapshot`] of every figure the server keeps, over every
//! transport, its human summary, and [`Sources`], the live parts it is
//! read from.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tlslab_crypto::meter::{self, AblationSet, Op};
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::{CacheStats, TicketStats};
use tlslab_crypto::ticket_keys::{TicketKeyRing, TicketKeyStats};
use tlslab_runtime::process_cpu_time;
use tlslab_runtime::qlog::QlogDir;

use crate::admission::{Admission, AdmissionStats};
use crate::config::AdmissionMode;
use crate::idle::{CloseReason, Conns, Transport};
use crate::quic::{HelloReads, QuicFigures, QuicHandshakes, QuicShed};
use crate::redis_cache::{RedisStats, RedisStore};
use crate::stats::{
    EarlyDataStats, HandshakeCounts, IdleClosed, PerListener, Stats, TransportFigures, get,
};

/// The server's counters at one instant. Every figure is observed by the
/// server itself, from its start until `uptime` later.
///
/// The TCP listeners' figures are the fields from `handshakes` to
/// `idle_closed`, the HTTP/3 listener's are [`quic`](Self::quic); the
/// figures both transports keep are read per transport with
/// [`transport`](Self::transport) and summed with [`total`](Self::total).
/// Everything else (caches, tickets, CPU, crypto, admission) is the
/// server's, shared by both.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Time since the server began listening: the window of every other
    /// figure.
    #[serde(serialize_with = "secs")]
    pub uptime: Duration,
    /// Completed TLS handshakes over TCP by version and kind.
    pub handshakes: HandshakeCounts,
    /// Failed or abandoned TLS handshakes over TCP by reason (`timeout`, `eof`,
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
    /// TCP connections open now.
    pub open_connections: u64,
    /// TCP connections closed for being idle, by reason.
    pub idle_closed: IdleClosed,
    /// The HTTP/3 listener's figures (`None` without one, and absent from
    /// the JSON then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicFigures>,
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
    pub redis: Option<RedisStats>,
    /// Shared ticket keys (`None` without `--ticket-keys`): version, age,
    /// tickets sealed and opened, key-name mismatches.
    pub ticket_keys: Option<TicketKeyStats>,
    /// Admission control (`None` when `--admission off`): decisions by
    /// kind, the limit, and the overload signals of the last tick.
    pub admission: Option<AdmissionStats>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Snapshot {
    /// All failed handshakes over TCP.
    pub fn failures_total(&self) -> u64 {
        self.handshake_failures.values().sum()
    }

    /// The figures both transports keep, of one transport (`None`: QUIC
    /// without an HTTP/3 listener).
    pub fn transport(&self, t: Transport) -> Option<TransportFigures> {
        match t {
            Transport::Tcp => Some(TransportFigures {
                full_handshakes: self.handshakes.total() - self.handshakes.resumed(),
                resumed_handshakes: self.handshakes.resumed(),
                early_data_accepted: self.early_data.connections,
                handshake_failures: self.failures_total(),
                requests: self.requests.total(),
                early_requests: self.early_data.requests,
                bytes_received: self.bytes_received.total(),
                bytes_sent: self.bytes_sent.total(),
                connections: self.connections.total(),
                open_connections: self.open_connections,
                idle_closed: self.idle_closed,
            }),
            Transport::Quic => self.quic.as_ref().map(|q| TransportFigures {
                full_handshakes: q.handshakes.full,
                resumed_handshakes: q.handshakes.resumed,
                early_data_accepted: q.handshakes.early_data_accepted,
                handshake_failures: q.handshake_failures.values().sum::<u64>()
                    + q.shed.refused
                    + q.shed.ignored
                    + q.refused_at_limit,
                requests: q.requests,
                early_requests: q.early_requests,
                bytes_received: q.bytes_received,
                bytes_sent: q.bytes_sent,
                connections: q.connections,
                open_connections: q.open_connections,
                idle_closed: q.idle_closed,
            }),
        }
    }

    /// The figures both transports keep, summed over both.
    pub fn total(&self) -> TransportFigures {
        [Transport::Tcp, Transport::Quic]
            .into_iter()
            .filter_map(|t| self.transport(t))
            .fold(TransportFigures::default(), |a, b| a + b)
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
        if let Some(q) = &self.quic {
            let _ = writeln!(s, "  {}", q.summary());
            if let Some(l) = &q.qlog {
                let _ = writeln!(s, "  {}", l.summary());
            }
        }
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
        let which = match self.quic {
            Some(_) => "https + http + h3",
            None => "https + http",
        };
        let per_req = match self.total().requests {
            0 => String::new(),
            n => format!(
                ", {:.1} µs per request ({which})",
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
                (AdmissionMode::Static, Some(l)) => format!("at most {l:.0} in flight"),
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
            if a.quic.full_returning_ahead > 0 {
                let _ = writeln!(
                    s,
                    "  admission over QUIC: {} full handshakes of returning clients (a NEW_TOKEN token) admitted ahead of new clients",
                    a.quic.full_returning_ahead
                );
            }
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

/// The live parts a [`Snapshot`] is read from.
#[derive(Debug)]
pub(crate) struct Sources {
    /// Every listener's counters.
    pub(crate) stats: Arc<Stats>,
    /// The connections past their handshake.
    pub(crate) idle: Arc<Conns>,
    /// The Redis-shared session cache, if any.
    pub(crate) redis: Option<Arc<RedisStore>>,
    /// Shared ticket keys, if any.
    pub(crate) ticket_keys: Option<Arc<TicketKeyRing>>,
    /// Admission control, if on.
    pub(crate) admission: Option<Arc<Admission>>,
}

impl Sources {
    /// Every figure now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let stats = &self.stats;
        let [requests, connections, bytes_received, bytes_sent] =
            stats.per_listener(Transport::Tcp);
        Snapshot {
            uptime: stats.started.elapsed(),
            handshakes: HandshakeCounts {
                tls12: stats.kinds(0),
                tls13: stats.kinds(1),
            },
            handshake_failures: stats.failures(Transport::Tcp),
            session_cache: stats.cache.as_ref().map(|c| c.stats()),
            tickets: stats.ticketer.as_ref().map(|t| t.stats()),
            early_data: stats.early_data_stats(),
            requests,
            bytes_received,
            bytes_sent,
            connections,
            open_connections: stats.open_now(Transport::Tcp),
            idle_closed: self.idle_closed(Transport::Tcp),
            worker_cpu: stats.threads.cpu_time().total(),
            process_cpu: process_cpu_time(),
            ablation: stats.ablation,
            crypto: stats.meter.snapshot(),
            redis: self.redis.as_ref().map(|r| r.stats()),
            ticket_keys: self.ticket_keys.as_ref().map(|r| r.stats()),
            admission: self.admission.as_ref().map(|a| a.stats()),
            quic: stats.h3.then(|| self.quic()),
        }
    }

    /// The connections of `t` closed for sitting idle, by reason.
    fn idle_closed(&self, t: Transport) -> IdleClosed {
        let closed = |r| self.idle.closed(t, r);
        IdleClosed {
            request_timeout: closed(CloseReason::RequestTimeout),
            keepalive_timeout: closed(CloseReason::KeepaliveTimeout),
            evicted: closed(CloseReason::Evicted),
        }
    }

    /// The HTTP/3 listener's figures.
    fn quic(&self) -> QuicFigures {
        let (stats, q) = (&self.stats, &self.stats.quic);
        let [requests, connections, received, sent] = stats.per_listener(Transport::Quic);
        let k = &q.kinds;
        let (resumed, accepted) = (get(&k.resumed), get(&k.early_accepted));
        let [refused, retried, ignored] = q.shed.each_ref().map(get);
        QuicFigures {
            connections: connections.https,
            established: get(&q.established),
            open_connections: stats.open_now(Transport::Quic),
            refused_at_limit: get(&q.refused),
            idle_closed: self.idle_closed(Transport::Quic),
            retries_sent: get(&q.retries),
            handshakes: QuicHandshakes {
                full: get(&k.hellos).saturating_sub(resumed),
                resumed,
                early_data_accepted: accepted,
                early_data_rejected: get(&k.early_offered).saturating_sub(accepted),
            },
            handshake_failures: stats.failures(Transport::Quic),
            requests: requests.https,
            early_requests: stats.early_requests(Transport::Quic),
            bytes_received: received.https,
            bytes_sent: sent.https,
            datagrams_received: get(&q.datagrams_received),
            datagrams_sent: get(&q.datagrams_sent),
            new_tokens_sent: get(&q.new_tokens),
            gso_segments: get(&q.gso_segments),
            gro_segments: get(&q.gro_segments),
            qlog: q.qlog.as_ref().map(QlogDir::report),
            half_open: get(&q.half_open),
            shed: QuicShed {
                refused,
                retried,
                ignored,
            },
            receive_buffer_bytes: get(&q.recv_buffer),
            receive_drops: q
                .socket
                .get()
                .and_then(|s| tlslab_runtime::udp_queue::receive_drops(s).ok()),
            hello_reads: q.hello_reader.load(Ordering::Relaxed).then(|| HelloReads {
                datagrams: get(&q.hello_datagrams),
                seconds: Duration::from_nanos(get(&q.hello_nanos)).as_secs_f64(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idle::Timeouts;
    use crate::stats::Listener;
    use rustls::HandshakeKind;
    use tlslab_crypto::meter::Meter;
    use tlslab_crypto::store::ServerSessionCache;
    use tlslab_runtime::Threads;

    #[test]
    fn summary_names_window_and_counts() {
        let stats = Arc::new(Stats::new(
            Some(ServerSessionCache::new(10, Duration::from_secs(60))),
            None,
            Arc::new(Threads::default()),
            Meter::new(),
            "sig,kx".parse().unwrap(),
            None,
        ));
        stats.handshake(Some(Version::Tls13), Some(HandshakeKind::Full));
        stats.handshake(Some(Version::Tls13), Some(HandshakeKind::Resumed));
        stats.handshake(Some(Version::Tls12), Some(HandshakeKind::Resumed));
        stats.failure(Transport::Tcp, "timeout");
        stats.failure(Transport::Tcp, "timeout");
        stats.request(Transport::Tcp, Listener::Http, false);
        {
            let _g = stats.open(Transport::Tcp, Listener::Https);
            assert_eq!(stats.open_now(Transport::Tcp), 1);
        }
        let idle = Conns::new(Timeouts {
            request: Duration::from_secs(60),
            keepalive: Duration::from_secs(75),
        });
        let sources = Sources {
            stats,
            idle: Arc::new(idle),
            redis: None,
            ticket_keys: None,
            admission: None,
        };
        let snap = sources.snapshot();
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
        assert!(json.get("quic").is_none(), "no HTTP/3 listener: {json}");
        assert_eq!(snap.transport(Transport::Quic), None);
        assert_eq!(snap.total(), snap.transport(Transport::Tcp).unwrap());
    }

    /// With an HTTP/3 listener the one snapshot carries its figures: per
    /// transport, in total, in the summary and in the JSON.
    #[test]
    fn quic_figures_join_tcp_ones() {
        let stats = Stats::bare(Some(Default::default()));
        stats.handshake(Some(Version::Tls13), Some(HandshakeKind::Full));
        stats.request(Transport::Tcp, Listener::Https, false);
        stats.request(Transport::Tcp, Listener::Https, false);
        let quic = &stats.quic;
        quic.kinds.hellos.fetch_add(3, Ordering::Relaxed);
        quic.kinds.resumed.fetch_add(1, Ordering::Relaxed);
        for early in [false, false, false, false, true] {
            stats.request(Transport::Quic, Listener::Https, early);
        }
        let open: Vec<_> = (0..4).filter_map(|_| stats.reserve(10)).collect();
        quic.shed[0].fetch_add(1, Ordering::Relaxed);
        quic.shed[1].fetch_add(1, Ordering::Relaxed);
        stats.failure(Transport::Quic, "timeout");
        let sources = Sources {
            stats,
            idle: Arc::new(Conns::new(Timeouts {
                request: Duration::from_secs(60),
                keepalive: Duration::from_secs(75),
            })),
            redis: None,
            ticket_keys: None,
            admission: None,
        };
        let snap = sources.snapshot();
        assert_eq!(snap.open_connections, 0, "TCP's open connections");
        let q = snap.transport(Transport::Quic).expect("an HTTP/3 listener");
        assert_eq!((q.full_handshakes, q.resumed_handshakes), (2, 1));
        assert_eq!(q.requests, 5);
        assert_eq!(
            (q.connections, q.open_connections, q.early_requests),
            (4, 4, 1)
        );
        assert_eq!(snap.early_data.requests, 0, "TCP's early requests");
        drop(open);
        assert_eq!(sources.stats.open_now(Transport::Quic), 0);
        assert!(
            sources.stats.reserve(0).is_none(),
            "no room at a limit of 0"
        );
        // The failure, and the refused attempt; the retried one comes back.
        assert_eq!(q.handshake_failures, 2);
        let t = snap.total();
        assert_eq!(t.requests, 7);
        assert_eq!(t.full_handshakes, 3);
        assert_eq!(t.resumed_handshakes, 1);
        let text = snap.summary();
        assert!(text.contains("\n  quic: 4 connections"), "{text}");
        assert!(text.contains("per request (https + http + h3)"), "{text}");
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["quic"]["requests"], 5);
        assert_eq!(json["quic"]["shed"]["retried"], 1);
        assert_eq!(json["requests"]["https"], 2, "TCP's fields unchanged");
    }
}
