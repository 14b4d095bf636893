//! Building the report of a finished `tlslab load` run from its merged
//! statistics. The report's data types are `tlslab_schema::load`,
//! re-exported here; their field names are a contract documented in
//! docs/schema.md.

pub use tlslab_schema::load::*;

use crate::stats::{PhaseStats, Stats};
use tlslab_schema::counters::KindTotals;

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

/// One handshake kind's means, from its sums.
fn kind_summary(k: &KindTotals) -> HandshakeKindSummary {
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

fn per_s(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d > 0 { n as f64 / d as f64 } else { 0.0 }
}

/// The report of a client-observed window of `measured_s` seconds in
/// which nothing was measured: what a hand-built document (a test, an
/// example) starts from.
pub fn empty_report(measured_s: f64) -> LoadReport {
    build_report(
        ConfigEcho::default(),
        Window {
            start_unix_ms: 0,
            measured_s,
            observed: "client-observed".into(),
        },
        &Stats::default(),
        0,
        CpuUsage::default(),
    )
}

/// A run's report from its merged statistics. `unfinished` is the number
/// of requests cut off when the duration ran out; `cpu` is what the
/// process used over the window.
pub fn build_report(
    config: ConfigEcho,
    window: Window,
    stats: &Stats,
    unfinished: u64,
    cpu: CpuUsage,
) -> LoadReport {
    let secs = window.measured_s;
    let handshakes = stats.counts.handshakes();
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
            attempted: stats.counts.attempted,
            completed: stats.counts.completed,
            succeeded: stats.counts.succeeded,
            errors: stats.counts.error_count(),
            unfinished,
            retries: stats.counts.retries,
            refused: stats.counts.errors.get("refused").copied().unwrap_or(0),
        },
        throughput: Throughput {
            requests_per_s: per_s(stats.counts.completed, secs),
            full_handshakes_per_s: per_s(stats.counts.full.count, secs),
            resumed_handshakes_per_s: per_s(stats.counts.resumed.count, secs),
            bytes_per_s: per_s(stats.counts.body_bytes, secs),
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
            offered: ratio(stats.counts.offered, handshakes),
            achieved: ratio(stats.counts.resumed.count, handshakes),
            handshakes,
            offered_count: stats.counts.offered,
            resumed_count: stats.counts.resumed.count,
        },
        handshake: HandshakeSummary {
            full: kind_summary(&stats.counts.full),
            resumed: kind_summary(&stats.counts.resumed),
            hello_retry_requests: stats.counts.hrr,
            versions: stats
                .counts
                .by_version
                .iter()
                .map(|(k, &(full, resumed))| (k.clone(), KindCounts { full, resumed }))
                .collect(),
            suites: stats.counts.suites.clone(),
            groups: stats.counts.groups.clone(),
            early_data: EarlyDataCounts {
                sent: stats.counts.early_data_sent,
                accepted: stats.counts.early_data_accepted,
            },
        },
        errors: stats.counts.errors.clone(),
        status: stats
            .counts
            .status
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        client_cpu: ClientCpu {
            user_s: cpu.user_s,
            sys_s: cpu.sys_s,
            per_handshake_us: per(handshakes),
            per_request_us: per(stats.counts.completed),
            capacity: cpu.capacity,
            busy_fraction: busy,
            saturated,
            warning,
            costs: None,
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
        socket: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::report as sample;

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
        let r = empty_report(1.0);
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
        merged.distributed = Some(Distributed {
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
