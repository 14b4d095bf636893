//! The report of a finished `tlslab load` run: what `--json` prints, and
//! the `distributed` section `tlslab merge` adds.
//!
//! Field names are a contract documented field by field in docs/schema.md
//! ("JSON schemas"); change them only together with that file and
//! [`SCHEMA_VERSION`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    pub distributed: Option<Distributed>,
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
    pub transport: Option<crate::transport::Transport>,
    /// Bytes on every TCP socket of the run (warm-up and cut-off
    /// connections included), as the client read and wrote them; absent
    /// over QUIC, in merged reports and in reports of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<SocketBytes>,
}

/// The socket bytes of a whole run: TCP payload, client-observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketBytes {
    /// TCP connections made (connected).
    pub connections: u64,
    /// Bytes the client wrote.
    pub bytes_out: u64,
    /// Bytes the client read.
    pub bytes_in: u64,
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
    /// `--source-ip` as given (`load --json` only, when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ip: Option<String>,
    /// `--clients-per-ip` (with `source_ip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_per_ip: Option<u64>,
    /// Source addresses the clients used (with `source_ip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_addresses_used: Option<u64>,
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
    /// With the probes on (`tlslab lab --explain`): the engine threads'
    /// crypto time, syscalls, writes and allocations over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<crate::costs::WindowCosts>,
}

/// One agent in the merged report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// `I/N`.
    pub shard: String,
    /// Its output directory.
    pub dir: String,
    /// The host it ran on.
    pub host: String,
    /// Its window start, Unix ms by its own clock.
    pub window_start_unix_ms: u64,
    /// Its window start minus the earliest agent's, in ms (start skew
    /// plus clock offset between hosts).
    pub start_offset_ms: i64,
    /// Its window length, s.
    pub measured_s: f64,
    /// Requests it attempted.
    pub attempted: u64,
    /// Requests it completed.
    pub completed: u64,
    /// Its client CPU busy fraction.
    pub busy_fraction: f64,
    /// Returns true if and only if its client was saturated.
    pub saturated: bool,
}

/// An agent that is not in the merge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MissingAgent {
    /// `I/N` when known (the index no complete directory had), else `?`.
    pub shard: String,
    /// Its directory, when one was given.
    pub dir: Option<String>,
    /// Why it is missing.
    pub reason: String,
}

/// The `distributed` section of a merged report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distributed {
    /// Agents the run was split into (N of `--shard I/N`).
    pub agents_expected: u32,
    /// Agents whose complete outputs were merged.
    pub agents_merged: u32,
    /// Every merged agent.
    pub agents: Vec<AgentSummary>,
    /// Every agent not merged: died, unfinished or never started.
    pub missing: Vec<MissingAgent>,
    /// Latest minus earliest window start, ms: the start skew between
    /// agents as their clocks see it (includes clock offset between hosts).
    pub start_skew_ms: u64,
    /// The shared `--start-at`, Unix ms, if the agents had one.
    pub start_at_unix_ms: Option<u64>,
    /// Agents whose client was saturated, by `I/N`.
    pub saturated_agents: Vec<String>,
    /// Human-readable warnings (missing agents, saturated agents, mixed
    /// configurations).
    pub warnings: Vec<String>,
}

impl LoadReport {
    /// The errors by kind on one line, most frequent first (`refused 5,
    /// timeout 2`), or `no errors`.
    pub fn error_summary(&self) -> String {
        if self.errors.is_empty() {
            return "no errors".into();
        }
        let mut kinds: Vec<(&String, &u64)> = self.errors.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Why the run failed its exit gate, or `None` when it passed: no
    /// request succeeded (every one failed, was answered non-2xx, or was
    /// cut off unfinished), or more than `max_error_rate` percent of the
    /// attempted requests were errors (non-2xx included; unfinished ones
    /// are not attempts that ended). At 100 any success passes.
    pub fn failed_gate(&self, max_error_rate: f64) -> Option<String> {
        let r = &self.requests;
        if r.succeeded == 0 {
            return Some(if r.attempted == 0 && r.unfinished > 0 {
                format!(
                    "no request finished: all {} were still in flight when the duration ran out; \
                     the server is too slow for this -d (or hangs): give a longer -d or check the server",
                    r.unfinished
                )
            } else if r.attempted == 0 {
                "no request was made in the measurement window; give a longer -d".into()
            } else if r.completed > 0 {
                format!(
                    "no request succeeded: {} of {} got a response, none 2xx ({}); check the URL's path \
                     and the server",
                    r.completed,
                    r.attempted,
                    self.error_summary()
                )
            } else {
                format!(
                    "every request failed ({}); check that the server is up and the URL, \
                     --tls and --cacert are right",
                    self.error_summary()
                )
            });
        }
        let rate = 100.0 * r.errors as f64 / r.attempted.max(1) as f64;
        (rate > max_error_rate).then(|| {
            format!(
                "error rate {rate:.2} % ({} of {} attempted requests failed: {}) is above \
                 --max-error-rate {max_error_rate}",
                r.errors,
                r.attempted,
                self.error_summary()
            )
        })
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Every field is a plain number, string, option or string-keyed map,
        // which serde_json always serializes.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::ConfigEcho;

    #[test]
    fn the_source_address_echo_is_written_only_when_given() {
        let plain = serde_json::to_value(ConfigEcho::default()).unwrap();
        for k in ["source_ip", "clients_per_ip", "source_addresses_used"] {
            assert!(plain.get(k).is_none(), "{k} in {plain}");
        }
        let given = ConfigEcho {
            source_ip: Some("127.0.0.2-127.0.0.5".into()),
            clients_per_ip: Some(2),
            source_addresses_used: Some(3),
            ..ConfigEcho::default()
        };
        let v = serde_json::to_value(&given).unwrap();
        assert_eq!(v["source_ip"], "127.0.0.2-127.0.0.5");
        assert_eq!(
            (
                v["clients_per_ip"].as_u64(),
                v["source_addresses_used"].as_u64()
            ),
            (Some(2), Some(3))
        );
        assert_eq!(serde_json::from_value::<ConfigEcho>(v).unwrap(), given);
    }
}
