//! Seed 001 (Coarfa, Druschel, Wallach: "Performance Analysis of TLS Web
//! Servers"): the no-op-and-Amdahl cost breakdown (Fig. 10 and the cost
//! table of §3.13) through `breakdown`, and the session cache's benefit
//! (§3.7, §3.13): throughput with session reuse against without. Its QUIC
//! column ([`quic_column`], issue 34) runs the breakdown over TCP+TLS 1.3
//! and over QUIC and names the stages that make up the difference.

use std::collections::BTreeMap;
use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::study::{Cell, CellMetrics, Comparison, StudyResults};

use super::About;
use super::load_cell::LoadRig;
use super::matrix::CellSpec;
use super::session::{Session, StudyError, compare, flag_duration, one, ratio};
use crate::breakdown::{self, BreakdownConfig, BreakdownReport, Workload};
use tlslab_report::study::ChartKind;

mod quic_column;

/// `seed001-breakdown`.
pub(super) struct Breakdown;

impl super::Study for Breakdown {
    fn about(&self) -> About {
        About {
            name: "seed001-breakdown",
            title: "Where a TLS server's CPU goes (no-op ablation, Amdahl), over TCP and over QUIC, and what the session cache saves",
            seed: "seed 001, Fig. 10, §3.7, §3.13",
            engine: "breakdown",
            duration: "quick ~2 min, full ~15 min",
        }
    }
    fn insecure_ablation(&self) -> bool {
        true
    }
    fn plan(&self, quick: bool) -> (serde_json::Value, usize) {
        let (cfg, cache) = plan(quick);
        let q = quic_column::plan(quick);
        (
            serde_json::json!({
                "quic_column": {
                    "transport": "both",
                    "workload": "new-conn",
                    "version": q.version.short(),
                    "key": q.key.name(),
                    "cell_s": q.cell.as_secs_f64(),
                    "clients": q.clients,
                    "repeats": q.repeats,
                    "max_time_s": q.max_time.as_secs_f64(),
                    "target_ci95": q.target_ci95,
                },
                "breakdown": {
                    "workload": "new-conn",
                    "version": cfg.version.short(),
                    "key": cfg.key.name(),
                    "cell_s": cfg.cell.as_secs_f64(),
                    "clients": cfg.clients,
                    "repeats": cfg.repeats,
                    "max_time_s": cfg.max_time.as_secs_f64(),
                    "target_ci95": cfg.target_ci95,
                },
                "session_cache": {
                    "points": cache.0.iter().map(|p| &p.point).collect::<Vec<_>>(),
                    "repeats": cache.1,
                    "cell_s": cache.0[0].cell.as_secs_f64(),
                },
            }),
            2 + cache.0.len() * cache.1 as usize,
        )
    }
    fn run(&self, s: &mut Session) -> Result<(), StudyError> {
        let (cfg, (points, repeats)) = plan(s.quick);
        s.say(&format!(
            "seed001-breakdown: WARNING: the breakdown runs an embedded loopback server and client \
             with TLS stages replaced by no-ops (insecure; for measurement only), over TCP with TLS \
             1.2, then over TCP+TLS 1.3 and QUIC side by side; then {} session cache cells; {}",
            points.len() * repeats as usize,
            s.placement.describe()
        ));
        // The breakdown engine: one unit, skipped on resume once recorded.
        let command = breakdown_command(&cfg, "");
        s.engine_once(
            |progress| breakdown::run(&cfg, progress),
            |report, doc, started| {
                doc.cells.extend(breakdown_cells(
                    report,
                    &command,
                    started,
                    ("breakdown-", &[], 0),
                ))
            },
        )?;
        quic_column::run(s)?;
        let mut rig = LoadRig::new(s.placement.clone());
        let r = rig.run_cells(s, &points, repeats);
        rig.shutdown();
        r
    }
    fn compare(&self, s: &mut Session) -> Vec<Comparison> {
        let mut c = comparisons(&s.doc);
        c.extend(quic_column::comparisons(&s.doc));
        c
    }
    fn charts(&self) -> &'static [ChartKind] {
        &[
            ChartKind::Reuse,
            ChartKind::HandshakePercentiles,
            ChartKind::Breakdown,
        ]
    }
}

/// The reuse share of the "with session cache" cells.
const CACHED_REUSE: f64 = 0.8;

type CachePlan = (Vec<CellSpec>, u32);

fn plan(quick: bool) -> (BreakdownConfig, CachePlan) {
    let cfg = BreakdownConfig {
        workload: Workload::NewConn,
        file_size: 4096,
        version: Version::Tls12,
        key: KeyType::Rsa2048,
        cell: Duration::from_millis(if quick { 500 } else { 1000 }),
        clients: 8,
        repeats: if quick { 2 } else { 3 },
        max_time: Duration::from_secs(if quick { 40 } else { 300 }),
        target_ci95: 0.02,
        transport: breakdown::Transport::Tcp,
    };
    let cell = Duration::from_millis(if quick { 500 } else { 2000 });
    let points = [0.0, CACHED_REUSE]
        .iter()
        .map(|&r| {
            let level = tlslab_report::study::fmt_level(r);
            let mut s = CellSpec::new(format!("cache-reuse{level}"), cell);
            s.key = KeyType::Rsa2048;
            s.versions = vec![Version::Tls12];
            s.reuse = r;
            s.factors = BTreeMap::from([
                ("reuse".to_string(), level),
                ("version".to_string(), "1.2".to_string()),
                ("key".to_string(), "rsa2048".to_string()),
            ]);
            s
        })
        .collect();
    (cfg, (points, if quick { 1 } else { 3 }))
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `tlslab breakdown` with `cfg`'s settings and `extra` flags (e.g.
/// ` --transport both`): the command that runs the same by hand.
fn breakdown_command(cfg: &BreakdownConfig, extra: &str) -> String {
    format!(
        "tlslab breakdown --insecure-ablation{extra} --workload new-conn --tls {} --key-type {} \
         --file-size {} --cell {} --repeats {} --max-time {} --target-ci {} -c {}",
        cfg.version.short(),
        cfg.key.name(),
        cfg.file_size,
        flag_duration(cfg.cell),
        cfg.repeats,
        flag_duration(cfg.max_time),
        cfg.target_ci95 * 100.0,
        cfg.clients
    )
}

/// One cell per configuration and round of the breakdown (its raw
/// per-round figures), points `{prefix}{configuration}`, with `factors`
/// beside the configuration; `order` counts on from `first`.
fn breakdown_cells(
    r: &BreakdownReport,
    command: &str,
    started: u64,
    (prefix, factors, first): (&str, &[(&str, &str)], usize),
) -> Vec<Cell> {
    let mut out = Vec::new();
    for row in &r.rows {
        let point = format!("{prefix}{}", slug(&row.config.name));
        let mut f = BTreeMap::from([("configuration".to_string(), row.config.name.clone())]);
        f.extend(factors.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        for (i, (cpu, rps)) in row.cpu_us.iter().zip(&row.requests_per_s).enumerate() {
            out.push(Cell {
                id: format!("{point}-r{}", i + 1),
                point: point.clone(),
                factors: f.clone(),
                repeat: i as u32 + 1,
                order: first + out.len(),
                command_line: command.to_string(),
                started_unix_ms: started,
                metrics: CellMetrics {
                    requests_per_s: *rps,
                    window_s: r.cell_s,
                    server_cpu_us_per_request: *cpu,
                    client_saturated: row.client_saturated,
                    ..CellMetrics::default()
                },
                load: None,
            });
        }
    }
    out
}

fn comparisons(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    let report = doc.engine_report_as::<BreakdownReport>();
    let row = |name: &str| -> (Option<f64>, Vec<String>) {
        match report.as_ref().and_then(|r| r.row(name)) {
            Some(r) => {
                let point = format!("breakdown-{}", slug(&r.config.name));
                let ids = doc
                    .cells
                    .iter()
                    .filter(|c| c.point == point)
                    .map(|c| c.id.clone())
                    .collect();
                (Some(r.cpu_us_median).filter(|x| x.is_finite()), ids)
            }
            None => (None, vec![]),
        }
    };
    let (plain, c_plain) = row("plain HTTP");
    let (tls, c_tls) = row("TLS (baseline)");
    let (minimal, c_min) = row("minimal setup");
    let joined = |a: &[String], b: &[String]| [a, b].concat();
    const CPU: &str = "server-observed CPU per request (worker CPU ÷ requests served), median over \
                       the breakdown's rounds; throughput of a CPU-bound server is its inverse";
    out.push(compare(
        "TLS throughput relative to non-TLS (new connection and full handshake per request)",
        "21-37 % (CS trace), 11-16 % (Amazon trace): Apache + TLS on 500 MHz, 933 MHz and \
         dual 933 MHz servers",
        "seed 001, Fig. 10",
        ratio(plain, tls).map(|x| x * 100.0),
        "%",
        CPU,
        joined(&c_plain, &c_tls),
        "every request here is a full handshake (no reuse, unlike both traces) on TLS 1.2 with \
         RSA-2048 and ECDHE, but one modern core does an RSA signature in about 1 ms",
    ));
    out.push(compare(
        "minimal setup, encrypted data: throughput relative to non-TLS",
        "56-67 % (CS trace), 47-53 % (Amazon trace)",
        "seed 001, Fig. 10",
        ratio(plain, minimal).map(|x| x * 100.0),
        "%",
        CPU,
        joined(&c_plain, &c_min),
        "AES-GCM with AES-NI costs little per 4 KiB response; what remains is TLS record \
         framing and rustls' state machine",
    ));
    out.push(compare(
        "TLS connection set-up's share of the cost",
        "45 % to 62 % (CS trace), 65 % to 79 % (Amazon trace)",
        "seed 001, §3.10 (after Fig. 10)",
        ratio(minimal, tls).map(|x| (1.0 - x) * 100.0),
        "%",
        "1 − CPU(minimal setup) ÷ CPU(TLS baseline), server-observed (Amdahl)",
        joined(&c_min, &c_tls),
        "a full handshake per request makes set-up dominate, as in the Amazon trace's short \
         sessions; today's public-key cost per handshake is far smaller",
    ));
    out.push(compare(
        "TLS overhead over an insecure server",
        "a factor of 3.4 to 9",
        "seed 001, §3.13",
        ratio(tls, plain),
        "x",
        CPU,
        joined(&c_tls, &c_plain),
        "every request a full handshake here; RSA-2048 on a modern core is cheaper relative to \
         serving a 4 KiB file than 1024-bit RSA was on a 500-933 MHz Pentium III",
    ));
    let share = |stage: &str| -> Option<f64> {
        Some(report.as_ref()?.share(stage)?.fraction).filter(|x| x.is_finite())
    };
    let all_bd: Vec<String> = doc
        .cells
        .iter()
        .filter(|c| c.point.starts_with("breakdown-"))
        .map(|c| c.id.clone())
        .collect();
    let pk = match (share("sig"), share("kx")) {
        (Some(a), Some(b)) => Some((a + b) * 100.0),
        _ => None,
    };
    out.push(compare(
        "public-key cryptography's share of the cost (signature + key exchange)",
        "13% to 58%",
        "seed 001, §3.13",
        pk,
        "%",
        "Amdahl shares from no-op ablation (server-observed CPU per request, paired with \
         adjacent baselines), mean over rounds",
        all_bd.clone(),
        "RSA-2048 signing plus ECDHE on aws-lc-rs against 1024-bit RSA decryption on OpenSSL \
         0.9.x; the paper's range spans its traces' reuse rates, here every request is full",
    ));
    out.push(compare(
        "non-TLS costs' share",
        "19 to 45% of the total cost",
        "seed 001, §3.13",
        share("non-TLS").map(|x| x * 100.0),
        "%",
        "CPU(plain HTTP) ÷ CPU(TLS baseline) per round, server-observed",
        all_bd,
        "tlslab serve (tokio, hyper) serves a static file with far less CPU than Apache 1.3 \
         with a process per connection; kernel TCP set-up remains",
    ));
    let (no_cache, c0) = one(doc, &[("reuse", "0")], |c| {
        Some(c.metrics.server_cpu_us_per_request)
    });
    let lvl = tlslab_report::study::fmt_level(CACHED_REUSE);
    let (cached, c1) = one(doc, &[("reuse", lvl.as_str())], |c| {
        Some(c.metrics.server_cpu_us_per_request)
    });
    let (rps0, _) = one(doc, &[("reuse", "0")], |c| Some(c.metrics.requests_per_s));
    let (rps1, _) = one(doc, &[("reuse", lvl.as_str())], |c| {
        Some(c.metrics.requests_per_s)
    });
    out.push(compare(
        "session cache: throughput with it ÷ without it",
        "a factor of 2.4-2.7 (CS trace) and 2.2-2.4 (Amazon trace)",
        "seed 001, §3.7 and §3.13",
        ratio(no_cache, cached),
        "x",
        &format!(
            "server-observed CPU per request with {:.0} % of connections resumed against none \
             (TLS 1.2, RSA-2048), median over repeats; client-observed requests/s ratio {}",
            CACHED_REUSE * 100.0,
            ratio(rps1, rps0).map_or("–".into(), |x| format!("{x:.2}x"))
        ),
        joined(&c0, &c1),
        "the traces' own reuse rates are not in the paper's text, so 80 % stands in; a \
         resumption skips the RSA signature and ECDHE that dominate a full handshake",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_anchor_safe() {
        assert_eq!(slug("TLS (baseline)"), "tls-baseline");
        assert_eq!(
            slug("PKX, no randomness, perfect cache"),
            "pkx-no-randomness-perfect-cache"
        );
    }

    #[test]
    fn comparisons_read_the_recorded_breakdown_report() {
        let doc: StudyResults = serde_json::from_str(include_str!(
            "../../../../docs/results/full/seed001-breakdown/results.json"
        ))
        .unwrap();
        let now = comparisons(&doc);
        // Every figure the breakdown report gives is found, and equals the
        // one the run that wrote the document computed.
        for was in &doc.comparisons {
            let c = now.iter().find(|c| c.quantity == was.quantity).unwrap();
            assert_eq!(c.today, was.today, "{}", c.quantity);
            assert_eq!(c.cells, was.cells, "{}", c.quantity);
        }
        assert!(now.iter().filter(|c| c.today.is_some()).count() >= 5);
    }

    #[test]
    fn the_plan_counts_the_engine_runs_and_the_cache_cells() {
        let (_, units) = super::super::Study::plan(&Breakdown, true);
        assert_eq!(units, 2 + 2);
        let (_, units) = super::super::Study::plan(&Breakdown, false);
        assert_eq!(units, 2 + 2 * 3);
    }
}
