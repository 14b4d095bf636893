//! The report of a finished `tlslab load` run: what `--json` prints.
//!
//! Field names are a contract documented field by field in the README section "JSON schemas";
//! change them only together with that file and [`SCHEMA_VERSION`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{KindTotals, PhaseStats, Stats};

/// The version of the JSON layout. Bumped when a field changes meaning or
/// disappears; adding fields keeps it.
pub const SCHEMA_VERSION: u32 = 1;

/// Client busy fraction at or above which the client is taken to be the
/// bottleneck.
pub const SATURATION_THRESHOLD: f64 = 0.90;

/// The report of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Layout version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The options the run used.
    pub config: ConfigEcho,
    /// When and how long the run was measured.
    pub window: Window,
    /// Request counts.
    pub requests: Requests,
    /// Rates over the window.
    pub throughput: Throughput,
    /// Latency per phase.
    pub latency: Latency,
    /// Session reuse: asked for, offered and achieved.
    pub reuse: Reuse,
    /// Handshake sizes, round trips and negotiated parameters.
    pub handshake: HandshakeSummary,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Responses by HTTP status (keys are the status as a string).
    pub status: BTreeMap<String, u64>,
    /// What the client itself spent.
    pub client_cpu: ClientCpu,
    /// Open-loop arrivals (`--rate`); `None` (JSON `null`) for a closed loop.
    #[serde(default)]
    pub open_loop: Option<OpenLoop>,
    /// The e-commerce model's sessions (`--workload ecommerce`); `None`
    /// (JSON `null`) otherwise.
    #[serde(default)]
    pub ecommerce: Option<Ecommerce>,
    /// The access-log replay (`--workload replay`); `None` (JSON `null`)
    /// otherwise.
    #[serde(default)]
    pub replay: Option<Replay>,
    /// The client's cryptographic work per handshake over the window, from
    /// its metering provider; `None` (JSON `null`) without TLS handshakes.
    #[serde(default)]
    pub crypto: Option<CryptoPerHandshake>,
    /// The stages replaced by no-ops on the client (`--ablate`), by name;
    /// empty for a real run. Such a run is insecure and measures a model.
    #[serde(default)]
    pub ablation: Vec<String>,
    /// When a TLS error looked like client and server using different
    /// `--ablate` sets, a sentence saying so and how to fix it.
    #[serde(default)]
    pub ablation_hint: Option<String>,
    /// Set only by `tlslab merge`: the agents merged, the missing ones,
    /// their start skew and saturation. `None` (JSON `null`) for one run.
    #[serde(default)]
    pub distributed: Option<crate::distributed::Distributed>,
    /// The HTTP protocol spoken and the handshake cost amortised over the
    /// requests of a connection; `None` (JSON `null`) in merged reports.
    #[serde(default)]
    pub http: Option<Http>,
    /// How clients backed off after connections that could not be made
    /// (`--retry-backoff`); `None` (JSON `null`, or absent in reports of
    /// older versions) when no client had to wait.
    #[serde(default)]
    pub backoff: Option<Backoff>,
    /// `load --h3`: the QUIC transport's own figures; absent over TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<crate::quic::Transport>,
}

/// The clients' waits after connections that could not be made (refused,
/// reset, unreachable, timed out): exponential backoff with full jitter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// The base B of the backoff, ms: the n-th wait in a row is drawn
    /// below min(B·2ⁿ⁻¹, 32·B).
    pub base_ms: f64,
    /// Waits made (over the whole run, warm-up included).
    pub waits: u64,
    /// Their total length as drawn, in seconds, summed over clients (a
    /// wait cut off by the end of the run counts whole).
    pub waited_s: f64,
}

/// The HTTP protocol of a run and how its handshakes were amortised over
/// requests (HTTP/2 streams, or keep-alive HTTP/1.1 requests). All
/// client-observed over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Http {
    /// `http/1.1`, or `h2` (`--h2`: ALPN h2 over TLS, prior knowledge over
    /// `http://`).
    pub protocol: String,
    /// Streams in flight per connection (`-m`); `None` for HTTP/1.1.
    pub max_concurrent_streams: Option<u32>,
    /// Connections whose first request (stream) was measured.
    pub connections: u64,
    /// Attempted requests per such connection.
    pub requests_per_connection: Option<f64>,
    /// Completed handshakes per completed request.
    pub handshakes_per_request: Option<f64>,
    /// The client's metered crypto time in every operation but
    /// application-data seal and open, in microseconds per completed
    /// request: the handshake's crypto cost amortised.
    pub handshake_crypto_us_per_request: Option<f64>,
    /// The client's application-data seal and open time in microseconds
    /// per completed request: the record layer's crypto cost.
    pub record_crypto_us_per_request: Option<f64>,
}

/// The client's cryptographic operations per handshake, measured by the
/// metering provider between the start and end of the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CryptoPerHandshake {
    /// Handshakes (full + resumed) completed in the window: the divisor.
    pub handshakes: u64,
    /// One entry per operation kind with at least one call, summed over its
    /// labels (schemes, groups).
    pub ops: Vec<CryptoOp>,
}

/// One operation kind in [`CryptoPerHandshake`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CryptoOp {
    /// The operation (`sign`, `verify`, `kx_start`, `seal_application`, ...).
    pub op: String,
    /// Calls in the window.
    pub calls: u64,
    /// Calls divided by handshakes.
    pub calls_per_handshake: f64,
    /// Microseconds spent in the calls, divided by handshakes
    /// (client-observed wall clock inside the provider).
    pub us_per_handshake: f64,
}

impl CryptoPerHandshake {
    /// Builds the per-handshake figures from `(op, calls, nanoseconds)`
    /// totals; ops without calls are left out. `None` when `handshakes` is 0.
    pub fn from_totals<'a>(
        handshakes: u64,
        totals: impl IntoIterator<Item = (&'a str, u64, u64)>,
    ) -> Option<CryptoPerHandshake> {
        if handshakes == 0 {
            return None;
        }
        let n = handshakes as f64;
        let ops = totals
            .into_iter()
            .filter(|&(_, calls, _)| calls > 0)
            .map(|(op, calls, nanos)| CryptoOp {
                op: op.to_string(),
                calls,
                calls_per_handshake: calls as f64 / n,
                us_per_handshake: nanos as f64 / 1e3 / n,
            })
            .collect();
        Some(CryptoPerHandshake { handshakes, ops })
    }
}

/// What an access-log replay did, next to what the log implies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// Requests in the log after filtering.
    pub log_requests: u64,
    /// Browsers (client IPs) in the log after filtering.
    pub log_sessions: u64,
    /// (requests − IPs) / requests: the resumption ratio the log implies.
    pub implied_resumption: f64,
    /// Browsers whose first request was replayed in the window.
    pub sessions_replayed: u64,
    /// Requests replayed in the window.
    pub requests_replayed: u64,
    /// Handshakes the server resumed / completed handshakes.
    pub achieved_resumption: f64,
    /// The window bound LP − LS ≤ window.
    pub window: u64,
    /// Speed-up over the log's timing; `None` = as fast as possible.
    pub speed: Option<f64>,
    /// Log lines skipped as malformed.
    pub skipped_lines: u64,
    /// Listed proxy IPs found in the log, and their requests.
    pub excluded_ips: u64,
    /// Requests of excluded IPs.
    pub excluded_requests: u64,
    /// IPs dropped for exceeding the rate threshold.
    pub rate_ips: u64,
    /// Their requests.
    pub rate_requests: u64,
}

/// What the e-commerce browsers did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ecommerce {
    /// Purchase sessions whose first request was measured.
    pub sessions: u64,
    /// Of those, new customers.
    pub new_customers: u64,
    /// Of those, returning customers.
    pub returning_customers: u64,
    /// Pages whose every object was fetched (successfully or not).
    pub pages: u64,
}

/// How an open-loop run's arrivals went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpenLoop {
    /// Requested arrival rate, per second.
    pub rate: f64,
    /// The arrival process: `poisson` or `constant`.
    pub arrivals: String,
    /// The cap on requests in flight (`--max-in-flight`).
    pub max_in_flight: usize,
    /// Arrivals scheduled in the window (started, dropped or unfinished).
    pub scheduled: u64,
    /// Arrivals whose request started more than 1 ms after its intended time.
    pub late: u64,
    /// Arrivals not started because `max_in_flight` requests were in flight.
    pub dropped: u64,
}

/// The options of the run, echoed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigEcho {
    /// Target URLs.
    pub targets: Vec<String>,
    /// Concurrent clients (closed loop, one connection each at a time).
    pub clients: usize,
    /// Engine worker threads.
    pub threads: usize,
    /// Requests per connection (K); 0 means unlimited keep-alive.
    pub requests_per_conn: u32,
    /// Requested reuse fraction, 0.0–1.0.
    pub reuse: f64,
    /// How sessions are resumed: `id`, `ticket` or `auto`.
    pub resume_with: String,
    /// TLS versions the client offered (`TLSv1.2`, `TLSv1.3`).
    pub versions: Vec<String>,
    /// Duration bound in seconds, if any.
    pub duration_s: Option<f64>,
    /// Request-count bound, if any.
    pub requests: Option<u64>,
    /// Warm-up seconds, not measured.
    pub warmup_s: f64,
    /// Per-connection and per-request timeout in seconds; `None` is infinite.
    pub timeout_s: Option<f64>,
    /// Returns true if and only if TLS 1.3 early data was enabled.
    pub early_data: bool,
    /// The request stream: `urls` or `specweb96`.
    #[serde(default)]
    pub workload: String,
    /// Seed of every random stream of the run.
    #[serde(default)]
    pub seed: u64,
    /// Think time between a client's requests (`0`, `exp:mean=7s`, …).
    #[serde(default)]
    pub think_time: String,
    /// Returns true if and only if a failed request is retried by the same
    /// client, sessions kept.
    #[serde(default)]
    pub retry_on_failure: bool,
}

/// The measurement window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Window start, Unix time in milliseconds.
    pub start_unix_ms: u64,
    /// Window length in seconds, as measured by the client's monotonic clock.
    pub measured_s: f64,
    /// Whose view the numbers are: always `client-observed`.
    pub observed: String,
}

/// Request counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Requests {
    /// Requests attempted in the window (one per CSV log row).
    pub attempted: u64,
    /// Requests whose response arrived completely, any status.
    pub completed: u64,
    /// Completed requests with a 2xx status.
    pub succeeded: u64,
    /// Attempts that ended in an error of any kind (non-2xx included).
    pub errors: u64,
    /// Requests still in flight when the duration ran out; they are not
    /// measured anywhere else.
    pub unfinished: u64,
    /// Attempts that repeated a failed request (`--retry-on-failure`);
    /// counted in `attempted` too.
    #[serde(default)]
    pub retries: u64,
    /// Attempts whose TCP connection the server refused (no listener):
    /// `errors.refused`, counted in `errors` too. 0 in reports of older
    /// versions.
    #[serde(default)]
    pub refused: u64,
}

/// Rates over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Full handshakes per second.
    pub full_handshakes_per_s: f64,
    /// Resumed handshakes per second.
    pub resumed_handshakes_per_s: f64,
    /// Response body bytes per second.
    pub bytes_per_s: f64,
}

/// Latency of one phase, in microseconds. Everything but `count` is `null`
/// when `count` is 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Values recorded.
    pub count: u64,
    /// Exact mean.
    pub mean_us: Option<f64>,
    /// Median (3 significant digits).
    pub p50_us: Option<u64>,
    /// 90th percentile.
    pub p90_us: Option<u64>,
    /// 99th percentile.
    pub p99_us: Option<u64>,
    /// 99.9th percentile.
    pub p999_us: Option<u64>,
    /// Exact maximum.
    pub max_us: Option<u64>,
}

impl From<&PhaseStats> for Phase {
    fn from(p: &PhaseStats) -> Self {
        Phase {
            count: p.count(),
            mean_us: p.mean_us(),
            p50_us: p.quantile_us(0.50),
            p90_us: p.quantile_us(0.90),
            p99_us: p.quantile_us(0.99),
            p999_us: p.quantile_us(0.999),
            max_us: p.max_us(),
        }
    }
}

/// Latency per phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// TCP connect.
    pub connect: Phase,
    /// Full TLS handshakes (end of connect → handshake complete).
    pub handshake_full: Phase,
    /// Resumed TLS handshakes.
    pub handshake_resumed: Phase,
    /// Request write start → response head.
    pub ttfb: Phase,
    /// Response head → last body byte.
    pub transfer: Phase,
    /// Request start (connection start for a connection's first request) →
    /// last body byte.
    pub total: Phase,
}

/// Session reuse.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reuse {
    /// The fraction asked for (`--reuse` / 100).
    pub requested: f64,
    /// Fraction of completed handshakes that offered a stored session.
    pub offered: f64,
    /// Fraction of completed handshakes the server resumed.
    pub achieved: f64,
    /// Completed handshakes (the denominator of both fractions).
    pub handshakes: u64,
    /// Handshakes that offered a session.
    pub offered_count: u64,
    /// Handshakes the server resumed.
    pub resumed_count: u64,
}

/// Counts for one handshake kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HandshakeKindSummary {
    /// Handshakes of this kind.
    pub count: u64,
    /// Mean bytes the client wrote during the handshake.
    pub bytes_out_mean: Option<f64>,
    /// Mean bytes the client read during the handshake.
    pub bytes_in_mean: Option<f64>,
    /// Mean read-after-write turnarounds.
    pub round_trips_mean: Option<f64>,
    /// Mean TLS records the client wrote (handshakes whose records were
    /// counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_out_mean: Option<f64>,
    /// Mean TLS records the client read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_in_mean: Option<f64>,
    /// Mean uncompressed Certificate message body, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_bytes_mean: Option<f64>,
    /// Handshakes whose certificate came compressed (RFC 8879).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cert_compressed_count: u64,
    /// Mean compressed certificate data, bytes, over those handshakes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_compressed_bytes_mean: Option<f64>,
    /// Compressed ÷ uncompressed certificate bytes over those handshakes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_compression_ratio: Option<f64>,
    /// Mean data segments received during the handshake (TCP_INFO); for a
    /// full TLS 1.3 handshake, the server's first flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_segs_in_mean: Option<f64>,
    /// Mean MSS of the server's segments as the client estimated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_mss_mean: Option<f64>,
    /// Share of handshakes whose received segments exceeded an initial
    /// window of 10 segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_initial_window: Option<f64>,
    /// Mean slow-start round trips those segments need from an initial
    /// window of 10 (computed from the measured segments, not timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start_rounds_mean: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<&KindTotals> for HandshakeKindSummary {
    fn from(k: &KindTotals) -> Self {
        let mean = |sum: u64| (k.count > 0).then(|| sum as f64 / k.count as f64);
        let per = |sum: u64, n: u64| (n > 0).then(|| sum as f64 / n as f64);
        HandshakeKindSummary {
            count: k.count,
            bytes_out_mean: mean(k.bytes_out),
            bytes_in_mean: mean(k.bytes_in),
            round_trips_mean: mean(k.round_trips),
            records_out_mean: per(k.records_out, k.records_count),
            records_in_mean: per(k.records_in, k.records_count),
            cert_bytes_mean: per(k.cert_bytes, k.cert_count),
            cert_compressed_count: k.compressed_count,
            cert_compressed_bytes_mean: per(k.compressed_bytes, k.compressed_count),
            cert_compression_ratio: per(k.compressed_bytes, k.compressed_from_bytes),
            data_segs_in_mean: per(k.data_segs_in, k.tcp_count),
            rcv_mss_mean: per(k.rcv_mss, k.tcp_count),
            beyond_initial_window: per(k.beyond_initial_window, k.tcp_count),
            slow_start_rounds_mean: per(k.slow_start_rounds, k.tcp_count),
        }
    }
}

/// Full and resumed handshake counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindCounts {
    /// Full handshakes.
    pub full: u64,
    /// Resumed handshakes.
    pub resumed: u64,
}

/// Early data (0-RTT) counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlyDataCounts {
    /// Connections that sent their first request as early data.
    pub sent: u64,
    /// Of those, the ones the server accepted.
    pub accepted: u64,
}

/// Handshake details.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HandshakeSummary {
    /// Full handshakes (HelloRetryRequest ones included).
    pub full: HandshakeKindSummary,
    /// Resumed handshakes.
    pub resumed: HandshakeKindSummary,
    /// Full handshakes that needed a HelloRetryRequest.
    pub hello_retry_requests: u64,
    /// Handshakes by protocol version.
    pub versions: BTreeMap<String, KindCounts>,
    /// Handshakes by cipher suite.
    pub suites: BTreeMap<String, u64>,
    /// Handshakes by key-exchange group.
    pub groups: BTreeMap<String, u64>,
    /// Early data.
    pub early_data: EarlyDataCounts,
}

/// CPU time the load engine's own threads used over the window, as the
/// engine measured it (per-thread schedstat, so a server in the same process
/// is not billed to the client).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUsage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// CPUs the engine could keep busy: engine threads, capped at the CPUs
    /// the process may run on.
    pub capacity: usize,
}

/// The client's own CPU use.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientCpu {
    /// User CPU seconds of the client process over the window.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// CPU microseconds per completed handshake.
    pub per_handshake_us: Option<f64>,
    /// CPU microseconds per completed request.
    pub per_request_us: Option<f64>,
    /// CPUs the engine could use (threads capped at allowed CPUs).
    pub capacity: usize,
    /// (user + sys) / (window × capacity).
    pub busy_fraction: f64,
    /// Returns true if and only if `busy_fraction` ≥ 0.90.
    pub saturated: bool,
    /// Set when saturated: the run then measures the client, not the server.
    pub warning: Option<String>,
}

fn per_s(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d > 0 { n as f64 / d as f64 } else { 0.0 }
}

impl LoadReport {
    /// Builds the report of a run from its merged statistics.
    ///
    /// `unfinished` is the number of requests cut off when the duration ran
    /// out; `cpu` is what the process used over the window.
    pub fn build(
        config: ConfigEcho,
        window: Window,
        stats: &Stats,
        unfinished: u64,
        cpu: CpuUsage,
    ) -> LoadReport {
        let secs = window.measured_s;
        let handshakes = stats.handshakes();
        let cpu_s = cpu.user_s + cpu.sys_s;
        let per = |n: u64| (n > 0).then(|| cpu_s * 1e6 / n as f64);
        let busy = if secs > 0.0 && cpu.capacity > 0 {
            cpu_s / (secs * cpu.capacity as f64)
        } else {
            0.0
        };
        let saturated = busy >= SATURATION_THRESHOLD;
        let warning = saturated.then(|| {
            format!(
                "the client was {:.0}% busy on {} CPU(s): the result measures the client, not the server; \
                 add --threads, give the client more CPUs, or lower --clients",
                busy * 100.0,
                cpu.capacity
            )
        });
        LoadReport {
            schema_version: SCHEMA_VERSION,
            requests: Requests {
                attempted: stats.attempted,
                completed: stats.completed,
                succeeded: stats.succeeded,
                errors: stats.error_count(),
                unfinished,
                retries: stats.retries,
                refused: stats.errors.get("refused").copied().unwrap_or(0),
            },
            throughput: Throughput {
                requests_per_s: per_s(stats.completed, secs),
                full_handshakes_per_s: per_s(stats.full.count, secs),
                resumed_handshakes_per_s: per_s(stats.resumed.count, secs),
                bytes_per_s: per_s(stats.body_bytes, secs),
            },
            latency: Latency {
                connect: (&stats.connect).into(),
                handshake_full: (&stats.handshake_full).into(),
                handshake_resumed: (&stats.handshake_resumed).into(),
                ttfb: (&stats.ttfb).into(),
                transfer: (&stats.transfer).into(),
                total: (&stats.total).into(),
            },
            reuse: Reuse {
                requested: config.reuse,
                offered: ratio(stats.offered, handshakes),
                achieved: ratio(stats.resumed.count, handshakes),
                handshakes,
                offered_count: stats.offered,
                resumed_count: stats.resumed.count,
            },
            handshake: HandshakeSummary {
                full: (&stats.full).into(),
                resumed: (&stats.resumed).into(),
                hello_retry_requests: stats.hrr,
                versions: stats
                    .by_version
                    .iter()
                    .map(|(k, &(full, resumed))| (k.clone(), KindCounts { full, resumed }))
                    .collect(),
                suites: stats.suites.clone(),
                groups: stats.groups.clone(),
                early_data: EarlyDataCounts {
                    sent: stats.early_data_sent,
                    accepted: stats.early_data_accepted,
                },
            },
            errors: stats.errors.clone(),
            status: stats
                .status
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            client_cpu: ClientCpu {
                user_s: cpu.user_s,
                sys_s: cpu.sys_s,
                per_handshake_us: per(handshakes),
                per_request_us: per(stats.completed),
                capacity: cpu.capacity,
                busy_fraction: busy,
                saturated,
                warning,
            },
            config,
            window,
            open_loop: None,
            ecommerce: None,
            replay: None,
            crypto: None,
            ablation: Vec::new(),
            ablation_hint: None,
            distributed: None,
            http: None,
            backoff: None,
            transport: None,
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Every field is a plain number, string, option or string-keyed map,
        // which serde_json always serializes.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::HandshakeKind;
    use crate::stats::tests::record;

    pub(crate) fn sample() -> LoadReport {
        let mut r = sample_closed();
        r.open_loop = Some(OpenLoop {
            rate: 100.0,
            arrivals: "poisson".into(),
            max_in_flight: 10_000,
            scheduled: 42,
            late: 1,
            dropped: 2,
        });
        r.ecommerce = Some(Ecommerce {
            sessions: 3,
            new_customers: 1,
            returning_customers: 2,
            pages: 15,
        });
        r.replay = Some(Replay {
            log_requests: 100,
            log_sessions: 10,
            implied_resumption: 0.9,
            sessions_replayed: 10,
            requests_replayed: 100,
            achieved_resumption: 0.9,
            window: 10_000,
            speed: Some(2.0),
            skipped_lines: 1,
            excluded_ips: 1,
            excluded_requests: 5,
            rate_ips: 0,
            rate_requests: 0,
        });
        r.crypto = CryptoPerHandshake::from_totals(
            40,
            [
                ("verify", 20, 2_000_000),
                ("kx_start", 40, 1_000_000),
                ("sign", 0, 0),
            ],
        );
        r.ablation = vec!["cipher".into()];
        r.ablation_hint = Some("a record did not decrypt".into());
        r.http = Some(Http {
            protocol: "h2".into(),
            max_concurrent_streams: Some(10),
            connections: 2,
            requests_per_connection: Some(20.0),
            handshakes_per_request: Some(0.05),
            handshake_crypto_us_per_request: Some(12.5),
            record_crypto_us_per_request: Some(1.5),
        });
        r
    }

    #[test]
    fn crypto_per_handshake_divides_and_skips_unused_ops() {
        assert_eq!(CryptoPerHandshake::from_totals(0, [("verify", 3, 9)]), None);
        let c = sample().crypto.unwrap();
        assert_eq!(c.handshakes, 40);
        assert_eq!(c.ops.len(), 2);
        assert_eq!(c.ops[0].op, "verify");
        assert_eq!(c.ops[0].calls_per_handshake, 0.5);
        assert_eq!(c.ops[0].us_per_handshake, 50.0);
        assert_eq!(c.ops[1].calls_per_handshake, 1.0);
        assert_eq!(c.ops[1].us_per_handshake, 25.0);
    }

    fn sample_closed() -> LoadReport {
        let mut s = Stats::default();
        for i in 0..40 {
            let kind = if i % 2 == 0 {
                HandshakeKind::Full
            } else {
                HandshakeKind::Resumed
            };
            s.record(&record((i % 2) as u32, i, Some(kind)));
        }
        LoadReport::build(
            ConfigEcho {
                targets: vec!["https://127.0.0.1:8443/".into()],
                clients: 2,
                threads: 1,
                requests_per_conn: 1,
                reuse: 0.5,
                resume_with: "auto".into(),
                versions: vec!["TLSv1.3".into()],
                duration_s: None,
                requests: Some(40),
                warmup_s: 0.0,
                timeout_s: Some(10.0),
                early_data: false,
                workload: "urls".into(),
                seed: 1,
                think_time: "0".into(),
                retry_on_failure: false,
            },
            Window {
                start_unix_ms: 1_700_000_000_000,
                measured_s: 2.0,
                observed: "client-observed".into(),
            },
            &s,
            0,
            CpuUsage {
                user_s: 1.5,
                sys_s: 0.3,
                capacity: 1,
            },
        )
    }

    #[test]
    fn build_computes_rates_and_ratios() {
        let r = sample();
        assert_eq!(r.requests.attempted, 40);
        assert_eq!(r.throughput.requests_per_s, 20.0);
        assert_eq!(r.throughput.full_handshakes_per_s, 10.0);
        assert_eq!(r.reuse.achieved, 0.5);
        assert_eq!(r.reuse.offered, 0.5);
        assert_eq!(r.handshake.versions["TLSv1.3"].resumed, 20);
        assert_eq!(r.status["200"], 36);
        assert!((r.client_cpu.busy_fraction - 0.9).abs() < 1e-9);
        assert!(r.client_cpu.saturated);
        assert!(r.client_cpu.warning.as_deref().unwrap().contains("90%"));
        assert_eq!(r.client_cpu.per_handshake_us, Some(1.8e6 / 40.0));
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let json = r.to_json();
        let back: LoadReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["window"]["observed"], "client-observed");
        assert!(v["latency"]["ttfb"]["p999_us"].is_u64());
        assert!(v["latency"]["handshake_full"]["mean_us"].is_f64());
    }

    #[test]
    fn empty_phases_are_null_not_zero() {
        let r = LoadReport::build(
            ConfigEcho::default(),
            Window {
                start_unix_ms: 0,
                measured_s: 1.0,
                observed: "client-observed".into(),
            },
            &Stats::default(),
            0,
            CpuUsage::default(),
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["latency"]["total"]["count"], 0);
        assert!(v["latency"]["total"]["p50_us"].is_null());
        assert!(v["client_cpu"]["per_request_us"].is_null());
        assert!(!r.client_cpu.saturated);
    }

    /// Objects whose keys are data (error kinds, statuses, names), not fields.
    const MAPS: &[&str] = &[
        "errors",
        "status",
        "handshake.versions",
        "handshake.suites",
        "handshake.groups",
    ];

    fn leaf_paths(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) if !MAPS.contains(&prefix) => {
                for (k, child) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaf_paths(&p, child, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }

    // Every field `--json` writes must be documented in docs/schema.md
    // table: a row naming the field (or a prefix of it, with `<phase>` for
    // latency phases) that also names its last segment.
    #[test]
    fn every_json_field_is_documented_in_the_schema_doc() {
        let readme = include_str!("../../../docs/schema.md");
        let start = readme
            .find("## JSON schemas")
            .expect("docs/schema.md has a JSON schemas section");
        let schema = &readme[start..];
        // With a `distributed` section, as `tlslab merge` writes it.
        let mut merged = sample();
        merged.distributed = Some(crate::distributed::Distributed {
            start_at_unix_ms: Some(1),
            ..Default::default()
        });
        let v: serde_json::Value = serde_json::from_str(&merged.to_json()).unwrap();
        let mut paths = Vec::new();
        leaf_paths("", &v, &mut paths);
        assert!(paths.len() > 40, "{paths:?}");
        let mut missing = Vec::new();
        for path in &paths {
            let mut segs: Vec<&str> = path.split('.').collect();
            if segs[0] == "latency" && segs.len() > 1 {
                segs[1] = "<phase>";
            }
            let last = *segs.last().unwrap();
            let (ticked, dotted) = (format!("`{last}`"), format!(".{last}`"));
            let documented = (1..=segs.len()).rev().any(|n| {
                let prefix = format!("`{}", segs[..n].join("."));
                schema.lines().any(|line| {
                    line.starts_with('|')
                        && line.contains(&prefix)
                        && (line.contains(&ticked) || line.contains(&dotted))
                })
            });
            if !documented {
                missing.push(path.clone());
            }
        }
        assert!(missing.is_empty(), "undocumented JSON fields: {missing:?}");
    }
}
