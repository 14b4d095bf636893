//! The `/metrics` exposition: every figure of a [`Snapshot`], read at
//! scrape time, as OpenMetrics text (which Prometheus scrapes).

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use tlslab_crypto::meter::OpStat;
use tlslab_crypto::provider::Version;

use crate::cert_compression::{AlgorithmSample, CompressionStats};
use crate::quic::metric_families;
use crate::snapshot::{Snapshot, Sources};
use crate::stats::{IdleClosed, Listener};

/// The content type of [`render`]'s output.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every family, from one [`Snapshot`] per scrape: TCP's and QUIC's
/// figures of one concept in one family, told apart by `transport`.
#[derive(Debug)]
struct StatsCollector(Arc<Sources>);

/// The `transport` label of the TCP listeners' series.
const TCP: &str = "tcp";
/// The `transport` label of the HTTP/3 listener's series.
const QUIC: &str = "quic";

fn counter<N: EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), fmt::Error> {
    ConstCounter::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge<N: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), fmt::Error> {
    ConstGauge::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// Counters of one type, each with its name and help.
fn counters<N: EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    all: impl IntoIterator<Item = (&'static str, &'static str, N)>,
) -> Result<(), fmt::Error> {
    all.into_iter()
        .try_for_each(|(name, help, v)| counter(enc, name, help, v))
}

/// A counter with one sample per label set (also the certificate
/// compression counters').
pub(crate) fn labelled_counter<'l, V: EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Vec<(&'l str, String)>, V)>,
) -> Result<(), fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

/// The meter's non-zero entries as `tlslab_crypto_{calls,seconds,bytes}`
/// counters labelled by op and label, and the ablation as an info metric.
fn crypto(enc: &mut DescriptorEncoder<'_>, s: &Snapshot) -> Result<(), fmt::Error> {
    let labels = |e: &OpStat| {
        vec![
            ("op", e.op.name().to_string()),
            ("label", e.label.to_string()),
        ]
    };
    labelled_counter(
        enc,
        "tlslab_crypto_calls",
        "Cryptographic operations the TLS listener performed, by op (sign, verify, kx_*, seal_*/open_* for handshake and application records, extract, expand, hmac, hash, random, ticket_*, store_*) and label (signature scheme or group; empty for other ops). Non-zero entries only.",
        s.crypto.nonzero().map(|e| (labels(e), e.calls)),
    )?;
    labelled_counter(
        enc,
        "tlslab_crypto_seconds",
        "Wall-clock seconds spent inside those operations (meter overhead of about 70 ns per call included).",
        s.crypto
            .nonzero()
            .map(|e| (labels(e), e.nanos as f64 / 1e9)),
    )?;
    labelled_counter(
        enc,
        "tlslab_crypto_bytes",
        "Bytes those operations handled (plaintext for seals, ciphertext for opens, input for hashes, output for expand and random, value length for the session store).",
        s.crypto.nonzero().map(|e| (labels(e), e.bytes)),
    )?;
    let info = Info::new(vec![("ablation", s.ablation.to_string())]);
    info.encode(enc.encode_descriptor(
        "tlslab_ablation",
        "The TLS stages replaced by no-ops (--ablate), or none. Anything but none is insecure.",
        None,
        MetricType::Info,
    )?)
}

/// A label set from its names and values.
fn labels<'l>(pairs: &[(&'l str, &str)]) -> Vec<(&'l str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// A counter per TCP listener, then one per other transport's (HTTPS)
/// listener.
fn per_listener(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    get: impl Fn(Listener) -> u64,
    others: Option<(&'static str, u64)>,
) -> Result<(), fmt::Error> {
    let series = |t, l| labels(&[("transport", t), ("listener", l)]);
    labelled_counter(
        enc,
        name,
        help,
        Listener::ALL
            .map(|l| (series(TCP, l.name()), get(l)))
            .into_iter()
            .chain(
                others
                    .into_iter()
                    .map(|(t, n)| (series(t, Listener::Https.name()), n)),
            ),
    )
}

impl Collector for StatsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s: Snapshot = self.0.snapshot();
        let quic = s.quic.as_ref();
        let reason = |t, r, n| (labels(&[("transport", t), ("reason", r)]), n);
        let hs = |t, v: Version, kind, n| {
            (
                labels(&[("transport", t), ("version", v.short()), ("kind", kind)]),
                n,
            )
        };
        let (v12, v13) = (s.handshakes.tls12, s.handshakes.tls13);
        let hs = [
            hs(TCP, Version::Tls12, "full", v12.full),
            hs(TCP, Version::Tls12, "resumed", v12.resumed),
            hs(TCP, Version::Tls13, "full", v13.full),
            hs(TCP, Version::Tls13, "resumed", v13.resumed),
            hs(TCP, Version::Tls13, "full_hrr", v13.full_hrr),
        ]
        .into_iter()
        .chain(quic.into_iter().flat_map(|q| {
            let k = q.handshakes;
            [
                hs(QUIC, Version::Tls13, "full", k.full),
                hs(QUIC, Version::Tls13, "resumed", k.resumed),
            ]
        }));
        labelled_counter(
            &mut enc,
            "tlslab_handshakes",
            "Completed TLS handshakes by transport (tcp, quic), protocol version and kind (full, resumed, full_hrr = full after HelloRetryRequest, TCP only).",
            hs,
        )?;
        labelled_counter(
            &mut enc,
            "tlslab_handshake_failures",
            "TLS handshakes that failed or were abandoned, by transport and reason (alert received, decode_error, not_tls, http_on_tls_port, eof, timeout, ...).",
            s.handshake_failures
                .iter()
                .map(|(r, n)| reason(TCP, r, *n))
                .chain(quic.iter().flat_map(|q| {
                    q.handshake_failures
                        .iter()
                        .map(|(r, n)| reason(QUIC, r, *n))
                })),
        )?;
        if let Some(c) = s.session_cache {
            counters(
                &mut enc,
                [
                    (
                        "tlslab_session_cache_hits",
                        "Session-cache lookups that found a live session.",
                        c.hits,
                    ),
                    (
                        "tlslab_session_cache_misses",
                        "Session-cache lookups that found nothing or an expired session.",
                        c.misses,
                    ),
                    (
                        "tlslab_session_cache_evictions",
                        "Sessions dropped because the cache was full.",
                        c.evictions,
                    ),
                    (
                        "tlslab_session_cache_expirations",
                        "Sessions dropped because they outlived the TTL.",
                        c.expirations,
                    ),
                    ("tlslab_session_cache_puts", "Sessions stored.", c.puts),
                ],
            )?;
            gauge(
                &mut enc,
                "tlslab_session_cache_size",
                "Sessions held now.",
                c.size as i64,
            )?;
            gauge(
                &mut enc,
                "tlslab_session_cache_capacity",
                "Configured session-cache capacity.",
                c.capacity as i64,
            )?;
        }
        if let Some(t) = s.tickets {
            counters(
                &mut enc,
                [
                    (
                        "tlslab_tickets_issued",
                        "Stateless session tickets sealed.",
                        t.issued,
                    ),
                    (
                        "tlslab_tickets_accepted",
                        "Stateless session tickets that decrypted.",
                        t.accepted,
                    ),
                    (
                        "tlslab_tickets_rejected",
                        "Stateless session tickets that did not decrypt.",
                        t.rejected,
                    ),
                ],
            )?;
        }
        cluster(&mut enc, &s)?;
        admission(&mut enc, &s)?;
        counters(
            &mut enc,
            [
                (
                    "tlslab_early_data_connections",
                    "Connections whose TLS 1.3 early data was accepted.",
                    s.early_data.connections,
                ),
                (
                    "tlslab_early_data_bytes",
                    "TLS 1.3 early-data bytes accepted and served.",
                    s.early_data.bytes,
                ),
                (
                    "tlslab_early_data_requests",
                    "Requests that arrived in TLS 1.3 early data and were answered before the handshake completed (0-RTT).",
                    s.early_data.requests,
                ),
                (
                    "tlslab_early_data_refused",
                    "Connections that offered TLS 1.3 early data the server refused (replayed or unknown single-use ticket, full handshake); they went on in 1-RTT.",
                    s.early_data.refused,
                ),
            ],
        )?;
        per_listener(
            &mut enc,
            "tlslab_requests",
            "HTTP requests received, by transport and listener.",
            |l| s.requests.get(l),
            quic.map(|q| (QUIC, q.requests)),
        )?;
        per_listener(
            &mut enc,
            "tlslab_bytes_received",
            "Raw bytes read from client sockets, TLS records included, by transport and listener (QUIC: UDP payload, counted as each connection closes).",
            |l| s.bytes_received.get(l),
            quic.map(|q| (QUIC, q.bytes_received)),
        )?;
        per_listener(
            &mut enc,
            "tlslab_bytes_sent",
            "Raw bytes written to client sockets, TLS records included, by transport and listener (QUIC: UDP payload, counted as each connection closes).",
            |l| s.bytes_sent.get(l),
            quic.map(|q| (QUIC, q.bytes_sent)),
        )?;
        per_listener(
            &mut enc,
            "tlslab_connections",
            "Client connections accepted, by transport and listener.",
            |l| s.connections.get(l),
            quic.map(|q| (QUIC, q.connections)),
        )?;
        let idle = |t: &'static str, c: &IdleClosed| {
            [
                ("request_timeout", c.request_timeout),
                ("keepalive_timeout", c.keepalive_timeout),
                ("evicted", c.evicted),
            ]
            .map(|(r, n)| reason(t, r, n))
        };
        labelled_counter(
            &mut enc,
            "tlslab_idle_closed",
            "Connections closed for sitting idle, by transport and reason: no first request within --request-timeout (request_timeout), no next request within --keepalive-timeout (keepalive_timeout), or the longest-idle one at the connection limit (evicted; over QUIC a half-open handshake included).",
            idle(TCP, &s.idle_closed)
                .into_iter()
                .chain(quic.into_iter().flat_map(|q| idle(QUIC, &q.idle_closed))),
        )?;
        let mut open = enc.encode_descriptor(
            "tlslab_open_connections",
            "Client connections open now, by transport.",
            None,
            MetricType::Gauge,
        )?;
        for (t, n) in std::iter::once((TCP, s.open_connections))
            .chain(quic.map(|q| (QUIC, q.open_connections)))
        {
            ConstGauge::new(n as i64).encode(open.encode_family(&[("transport", t)])?)?;
        }
        counter(
            &mut enc,
            "tlslab_server_worker_cpu_seconds",
            "CPU time of the server runtime's threads (schedstat).",
            s.worker_cpu.as_secs_f64(),
        )?;
        counter(
            &mut enc,
            "process_cpu_seconds",
            "CPU time of the whole process (getrusage RUSAGE_SELF).",
            s.process_cpu.as_secs_f64(),
        )?;
        gauge(
            &mut enc,
            "tlslab_uptime_seconds",
            "Seconds since the server started listening.",
            s.uptime.as_secs() as i64,
        )?;
        if let Some(q) = quic {
            metric_families(&mut enc, q)?;
        }
        crypto(&mut enc, &s)
    }
}

/// The Redis-shared cache and the shared ticket keys, when configured.
fn cluster(enc: &mut DescriptorEncoder<'_>, s: &Snapshot) -> Result<(), fmt::Error> {
    if let Some(r) = s.redis {
        let all = [
            (
                "tlslab_redis_hits",
                "Pre-handshake Redis GETs that found the offered session.",
                r.hits,
            ),
            (
                "tlslab_redis_misses",
                "Pre-handshake Redis GETs that found nothing.",
                r.misses,
            ),
            (
                "tlslab_redis_errors",
                "Redis GETs that failed, and lookups skipped while backing off after a failure (each a full handshake).",
                r.errors,
            ),
            (
                "tlslab_redis_timeouts",
                "Redis GETs that did not answer within --redis-timeout (each a full handshake).",
                r.timeouts,
            ),
            (
                "tlslab_redis_local_hits",
                "Offered sessions found in the memory layer, so Redis was not asked.",
                r.local_hits,
            ),
            (
                "tlslab_redis_writes",
                "Session puts written to Redis.",
                r.writes,
            ),
            (
                "tlslab_redis_write_errors",
                "Session puts that failed or timed out at Redis (sessions not shared).",
                r.write_errors,
            ),
            (
                "tlslab_redis_put_drops",
                "Session puts dropped because the queue to Redis was full.",
                r.put_drops,
            ),
        ];
        counters(enc, all)?;
    }
    if let Some(k) = s.ticket_keys {
        gauge(
            enc,
            "tlslab_ticket_key_version",
            "Version of the ticket keys in use (a file's load count, or the version in Redis; 0: local keys, never had the cluster's).",
            k.version as i64,
        )?;
        gauge(
            enc,
            "tlslab_ticket_key_age_seconds",
            "Seconds since the ticket keys in use were installed.",
            k.age_secs as i64,
        )?;
        gauge(
            enc,
            "tlslab_ticket_keys",
            "Ticket keys that decrypt (the encrypting one included).",
            k.keys as i64,
        )?;
        counter(
            enc,
            "tlslab_ticket_key_rotations",
            "Times new ticket keys were installed after the first.",
            k.version.saturating_sub(1),
        )?;
        counter(
            enc,
            "tlslab_ticket_key_name_mismatches",
            "Tickets whose key name matched no key (another cluster's, or a key that aged out).",
            k.name_mismatches,
        )?;
        counter(
            enc,
            "tlslab_ticket_key_bad_tickets",
            "Tickets with a known key name that did not decrypt (tampered or truncated).",
            k.bad_tickets,
        )?;
    }
    Ok(())
}

/// Admission control, when on: every decision and the figures behind it.
fn admission(enc: &mut DescriptorEncoder<'_>, s: &Snapshot) -> Result<(), fmt::Error> {
    let Some(a) = s.admission else {
        return Ok(());
    };
    let decision = |transport: &str, kind: &str, decision: &str| {
        vec![
            ("transport", transport.to_string()),
            ("kind", kind.to_string()),
            ("decision", decision.to_string()),
        ]
    };
    // Every transport's counts are the totals; QUIC's are counted apart
    // and TCP's are the rest.
    let q = a.quic;
    labelled_counter(
        enc,
        "tlslab_admission_decisions",
        "ClientHellos decided by admission control, by transport (tcp; quic: read off the Initials), kind (full: a new full handshake; resume: carries a session this node can resume) and decision (admitted, shed). One budget serves both transports.",
        [
            (
                decision("tcp", "full", "admitted"),
                a.full_admitted.saturating_sub(q.full_admitted),
            ),
            (
                decision("tcp", "full", "shed"),
                a.full_shed.saturating_sub(q.full_shed),
            ),
            (
                decision("tcp", "resume", "admitted"),
                a.resume_admitted.saturating_sub(q.resume_admitted),
            ),
            (
                decision("tcp", "resume", "shed"),
                a.resume_shed.saturating_sub(q.resume_shed),
            ),
            (decision("quic", "full", "admitted"), q.full_admitted),
            (decision("quic", "full", "shed"), q.full_shed),
            (decision("quic", "resume", "admitted"), q.resume_admitted),
            (decision("quic", "resume", "shed"), q.resume_shed),
        ],
    )?;
    counter(
        enc,
        "tlslab_admission_returning_ahead",
        "QUIC full handshakes of returning clients (an Initial with a NEW_TOKEN token this server issued) admitted on a budget borrowed ahead of new clients, when a new client's would have been shed.",
        q.full_returning_ahead,
    )?;
    counter(
        enc,
        "tlslab_admission_misclassified",
        "ClientHellos admitted as resumptions whose handshake ended full (stale or forged ticket); each is charged to the full-handshake budget.",
        a.misclassified,
    )?;
    counter(
        enc,
        "tlslab_admission_unparsed",
        "ClientHellos admission control could not parse (decided as full; rustls then refuses them).",
        a.unparsed,
    )?;
    gauge(
        enc,
        "tlslab_admission_limit",
        "session: new full handshakes admitted per second (-1: unlimited, no overload seen yet); static: the most handshakes in flight.",
        a.limit.unwrap_or(-1.0),
    )?;
    gauge(
        enc,
        "tlslab_admission_handshakes_in_flight",
        "Admitted TLS handshakes not finished yet, full and resumed.",
        a.in_flight as i64,
    )?;
    gauge(
        enc,
        "tlslab_admission_full_handshakes_in_flight",
        "Admitted full TLS handshakes not finished yet (overload signal in session mode).",
        a.full_in_flight as i64,
    )?;
    gauge(
        enc,
        "tlslab_admission_queue_delay_seconds",
        "Mean time new connections' first bytes (ClientHellos) waited in the kernel before the server read them, accept queue included, in the last 100 ms tick (overload signal; kernel receive timestamps, so a slow client does not count).",
        a.queue_delay_seconds,
    )?;
    gauge(
        enc,
        "tlslab_admission_cpu_busy_ratio",
        "CPU saturation of the server's workers in the last tick: (CPU time + time runnable waiting for a CPU, schedstat) over min(threads, CPUs), capped at 1 (overload signal).",
        a.cpu_busy,
    )?;
    gauge(
        enc,
        "tlslab_admission_served_full_handshakes_per_second",
        "Full handshakes per second the server completed while its CPU was saturated, smoothed over about half a second: what admission control takes the server to serve (the limit starts a decrease from it and returns to it once the queue is under its target; 0 until a saturated tick).",
        a.served_full_per_sec,
    )?;
    gauge(
        enc,
        "tlslab_admission_overloaded",
        "1 if the last tick showed overload (queue delay over target with the CPU busy, or too many full handshakes in flight).",
        i64::from(a.overloaded),
    )?;
    counter(
        enc,
        "tlslab_admission_overload_ticks",
        "100 ms ticks that showed overload.",
        a.overload_ticks,
    )
}

/// A registry exposing every figure of `sources`.
pub(crate) fn registry(sources: Arc<Sources>) -> Registry {
    let mut r = Registry::default();
    if let Some(redis) = &sources.redis {
        r.register(
            "tlslab_redis_get_seconds",
            "Latency of answered pre-handshake Redis GETs",
            redis.histogram.clone(),
        );
    }
    r.register_collector(Box::new(StatsCollector(sources)));
    r
}

/// The exposition text of `registry`.
pub(crate) fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would leave a
    // truncated body, which the `# EOF` check of scrapers catches.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// The certificate compression counts as `tlslab_cert_compression_*`
/// counters by algorithm.
#[derive(Debug)]
pub(crate) struct CompressionCollector(pub(crate) Arc<CompressionStats>);

impl Collector for CompressionCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let samples = self.0.samples();
        if samples.is_empty() {
            return Ok(());
        }
        type Field = fn(&AlgorithmSample) -> u64;
        let all: [(&str, &str, Field); 3] = [
            (
                "tlslab_cert_compression_handshakes",
                "Handshakes whose certificate was sent compressed (RFC 8879), by algorithm, over TCP and QUIC.",
                |a| a.handshakes,
            ),
            (
                "tlslab_cert_compression_uncompressed_bytes",
                "Bytes of the certificate messages those handshakes would have sent uncompressed, by algorithm.",
                |a| a.uncompressed,
            ),
            (
                "tlslab_cert_compression_compressed_bytes",
                "Bytes of compressed certificate data those handshakes sent, by algorithm.",
                |a| a.compressed,
            ),
        ];
        for (name, help, field) in all {
            labelled_counter(
                &mut enc,
                name,
                help,
                samples
                    .iter()
                    .map(|a| (vec![("algorithm", a.algorithm.to_string())], field(a))),
            )?;
        }
        Ok(())
    }
}
