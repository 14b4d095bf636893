//! `tlslab breakdown`: the method of seed 001 for today's stack.
//!
//! Each configuration replaces TLS stages with no-ops on client and server
//! alike (`tlslab_crypto::meter::AblationSet`), runs the same closed-loop
//! workload against an embedded server pinned to one CPU from a load engine
//! pinned to another, and measures the server's CPU time per request
//! (server-observed). A stage's share of the cost follows from Amdahl's law
//! with an (almost) infinite stage speed-up: `fraction = 1 − 1/speedup`,
//! where `speedup = cost(baseline) / cost(stage removed)`.
//!
//! Why CPU per request rather than requests per second: seed 001 measured a
//! saturated server's throughput, which is proportional to 1 / (server CPU
//! per request). On a two-CPU machine the client, not the server, is often
//! the bottleneck, so client-observed requests/s would measure the client.
//! Both are reported; the fractions use the server-observed figure.

use std::time::Duration;

use tlslab_crypto::meter::{Ablation, AblationSet};
use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_server::Content;

use crate::Error;
use crate::cell::{self, Listeners};
use crate::pin::Placement;

/// The request pattern of every cell.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "reuse")]
pub enum Workload {
    /// A new connection and a full handshake per request.
    NewConn,
    /// A new connection per request; this share (0–1) of them resumed.
    Reuse(f64),
    /// Connections kept alive.
    KeepAlive,
}

impl Workload {
    fn describe(self) -> String {
        match self {
            Workload::NewConn => "new connection and full handshake per request".into(),
            Workload::Reuse(r) => format!("new connection per request, {:.0}% resumed", r * 100.0),
            Workload::KeepAlive => "keep-alive connections".into(),
        }
    }
}

/// What `breakdown` runs.
#[derive(Clone, Debug)]
pub struct BreakdownConfig {
    /// The request pattern.
    pub workload: Workload,
    /// Response body size in bytes (served from `/bytes/<N>`).
    pub file_size: u64,
    /// TLS version of every TLS cell.
    pub version: Version,
    /// Certificate key type.
    pub key: KeyType,
    /// Measurement time per cell.
    pub cell: Duration,
    /// Closed-loop clients.
    pub clients: usize,
    /// Runs per configuration (the spread is reported).
    pub repeats: usize,
}

/// One configuration of the breakdown.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Configuration {
    /// Its label, after seed 001 where one exists.
    pub name: String,
    /// The stages replaced by no-ops; `None` is plain HTTP (no TLS at all).
    pub ablation: Option<AblationSet>,
    /// Whether this row is a single stage whose Amdahl fraction is part of
    /// the cost table.
    pub stage: Option<String>,
}

/// The configurations run, in order: plain HTTP, the TLS baseline, each
/// stage alone, seed 001's cumulative configurations, skeleton, minimal.
pub fn configurations(workload: Workload) -> Vec<Configuration> {
    let mut out = vec![
        Configuration {
            name: "plain HTTP".into(),
            ablation: None,
            stage: None,
        },
        Configuration {
            name: "TLS (baseline)".into(),
            ablation: Some(AblationSet::NONE),
            stage: None,
        },
    ];
    let resumes = matches!(workload, Workload::Reuse(r) if r > 0.0);
    for (a, label) in [
        (Ablation::Sig, "no signatures"),
        (Ablation::Kx, "no key exchange"),
        (Ablation::Cipher, "NULL cipher"),
        (Ablation::Mac, "no MAC (cipher only)"),
        (Ablation::Hash, "no hash"),
        (Ablation::Rng, "no randomness"),
        (Ablation::Cache, "perfect cache"),
    ] {
        // A perfect cache only matters when sessions are resumed.
        if a == Ablation::Cache && !resumes {
            continue;
        }
        out.push(Configuration {
            name: label.into(),
            ablation: Some(AblationSet::NONE.with(a)),
            stage: Some(a.name().into()),
        });
    }
    let pkx = AblationSet::NONE.with(Ablation::Sig).with(Ablation::Kx);
    let pkx_rng_cache = pkx.with(Ablation::Rng).with(Ablation::Cache);
    // Seed 001's "PKX, NULL, no MAC, no randomness, perfect cache" is, in
    // rustls, exactly the skeleton: every crypto stage is a no-op while the
    // protocol machinery still runs (rustls cannot skip it; ABLATIONS.md).
    for (name, set) in [
        ("PKX (no sig, no kx)", pkx),
        ("PKX, no randomness, perfect cache", pkx_rng_cache),
        (
            "skeleton (every crypto stage a no-op)",
            AblationSet::skeleton(),
        ),
        ("minimal setup, encrypted data", AblationSet::minimal()),
    ] {
        out.push(Configuration {
            name: name.into(),
            ablation: Some(set),
            stage: None,
        });
    }
    out
}

/// The measurements of one configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The configuration.
    pub config: Configuration,
    /// Server CPU per request in µs for each repeat (server-observed).
    pub cpu_us: Vec<f64>,
    /// Client-observed requests/s for each repeat.
    pub requests_per_s: Vec<f64>,
    /// Median server CPU per request, µs.
    pub cpu_us_median: f64,
    /// Median client-observed requests/s.
    pub requests_per_s_median: f64,
    /// (max − min) / median of `cpu_us`.
    pub spread: f64,
    /// cost(baseline) / cost(this configuration).
    pub speedup: f64,
    /// Amdahl: 1 − 1/speedup, the share of the baseline cost this
    /// configuration removed.
    pub fraction_removed: f64,
    /// Returns true if and only if the spread of this row (or of the
    /// baseline) is larger than the effect measured, so the fraction is
    /// not distinguishable from noise.
    pub noisy: bool,
    /// Returns true if and only if the client was ≥ 90 % busy in some repeat.
    pub client_saturated: bool,
}

/// One line of the cost table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Share {
    /// The stage (`sig`, `kx`, …), `other TLS`, `TLS protocol` or `non-TLS`.
    pub stage: String,
    /// Its share of the baseline server CPU per request, 0–1.
    pub fraction: f64,
    /// Whether the underlying measurement was noisy.
    pub noisy: bool,
}

/// The result of a breakdown.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BreakdownReport {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// The workload.
    pub workload: Workload,
    /// Response body size in bytes.
    pub file_size: u64,
    /// TLS version.
    pub version: Version,
    /// Certificate key type.
    pub key: String,
    /// Seconds per cell.
    pub cell_s: f64,
    /// Clients per cell.
    pub clients: usize,
    /// Repeats per configuration.
    pub repeats: usize,
    /// Where server and client ran.
    pub placement: Placement,
    /// Every configuration.
    pub rows: Vec<Row>,
    /// The Amdahl cost table: each stage, other TLS, TLS protocol, non-TLS.
    pub shares: Vec<Share>,
    /// The crypto meter's own cost per recorded operation, in ns, measured
    /// at the start of this run (client and server always meter).
    pub meter_overhead_ns: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / median(v)
}

struct Cell {
    cpu_us: f64,
    requests_per_s: f64,
    saturated: bool,
}

/// Runs the breakdown. `progress` receives one line per cell.
pub fn run(
    cfg: &BreakdownConfig,
    mut progress: impl FnMut(&str),
) -> Result<BreakdownReport, Error> {
    let placement = Placement::split();
    let configs = configurations(cfg.workload);
    let repeats = cfg.repeats.max(1);
    progress(&format!(
        "tlslab breakdown: {} configurations × {repeats} repeats of {:.1} s; {}; {}; {}",
        configs.len(),
        cfg.cell.as_secs_f64(),
        cfg.workload.describe(),
        cfg.version,
        placement.describe()
    ));
    let meter_overhead_ns = tlslab_crypto::meter::self_overhead().as_secs_f64() * 1e9;
    let generated = pki::generate(cfg.key, &[])?;
    let roots = generated.roots()?;
    let mut cells: Vec<Vec<Cell>> = configs.iter().map(|_| Vec::new()).collect();
    // Repeats go round the configurations, so slow drifts of a shared
    // machine spread over all of them instead of biasing one.
    for rep in 0..repeats {
        for (i, c) in configs.iter().enumerate() {
            let cell = run_cell(cfg, &placement, &generated, &roots, c)?;
            progress(&format!(
                "  [{}/{repeats}] {:<58} {:>8.1} µs/req  {:>8.0} req/s",
                rep + 1,
                c.name,
                cell.cpu_us,
                cell.requests_per_s
            ));
            cells[i].push(cell);
        }
    }
    let mut report = analyse(cfg, placement, configs, cells);
    report.meter_overhead_ns = meter_overhead_ns;
    Ok(report)
}

fn run_cell(
    cfg: &BreakdownConfig,
    placement: &Placement,
    generated: &pki::Generated,
    roots: &rustls::RootCertStore,
    c: &Configuration,
) -> Result<Cell, Error> {
    let ablation = c.ablation.unwrap_or(AblationSet::NONE);
    let tls = c.ablation.is_some();
    let server = cell::start_server(
        generated.clone(),
        vec![cfg.version],
        Content::Empty,
        Listeners {
            https: tls,
            http: !tls,
        },
        ablation,
        placement,
    )?;
    let path = format!("/bytes/{}", cfg.file_size);
    let url = match (server.https_addr(), server.http_addr()) {
        (Some(a), _) => format!("https://localhost:{}{path}", a.port()),
        (None, Some(a)) => format!("http://{a}{path}"),
        (None, None) => unreachable!("one listener is always configured"),
    };
    let (k, reuse) = match cfg.workload {
        Workload::NewConn => (1, 0.0),
        Workload::Reuse(r) => (1, r),
        Workload::KeepAlive => (0, 0.0),
    };
    let mut load = cell::cell_load(
        &url,
        cfg.cell,
        cfg.clients,
        placement,
        vec![cfg.version],
        roots,
        k,
        reuse,
    )?;
    load.ablation = ablation;
    let result = cell::measure(&server, &load, &c.name);
    server.shutdown();
    let m = result?;
    Ok(Cell {
        cpu_us: m.server_cpu_us_per_request,
        requests_per_s: m.report.throughput.requests_per_s,
        saturated: m.report.client_cpu.saturated,
    })
}

fn analyse(
    cfg: &BreakdownConfig,
    placement: Placement,
    configs: Vec<Configuration>,
    cells: Vec<Vec<Cell>>,
) -> BreakdownReport {
    let cpu: Vec<Vec<f64>> = cells
        .iter()
        .map(|c| c.iter().map(|x| x.cpu_us).collect())
        .collect();
    let base_i = configs
        .iter()
        .position(|c| c.ablation == Some(AblationSet::NONE))
        .unwrap_or(0);
    let base = median(&cpu[base_i]);
    let base_range = spread(&cpu[base_i]) * base;
    let mut rows = Vec::new();
    for ((config, cs), cpus) in configs.into_iter().zip(&cells).zip(&cpu) {
        let m = median(cpus);
        let range = spread(cpus) * m;
        let effect = (base - m).abs();
        rows.push(Row {
            cpu_us_median: m,
            requests_per_s: cs.iter().map(|x| x.requests_per_s).collect(),
            requests_per_s_median: median(&cs.iter().map(|x| x.requests_per_s).collect::<Vec<_>>()),
            spread: spread(cpus),
            speedup: base / m,
            fraction_removed: 1.0 - m / base,
            noisy: config.ablation != Some(AblationSet::NONE) && range.max(base_range) > effect,
            client_saturated: cs.iter().any(|x| x.saturated),
            cpu_us: cpus.clone(),
            config,
        });
    }
    let mut shares = Vec::new();
    for r in rows.iter().filter(|r| r.config.stage.is_some()) {
        shares.push(Share {
            stage: r.config.stage.clone().unwrap_or_default(),
            fraction: r.fraction_removed,
            noisy: r.noisy,
        });
    }
    let skeleton = rows
        .iter()
        .find(|r| r.config.ablation == Some(AblationSet::skeleton()));
    let plain = rows.iter().find(|r| r.config.ablation.is_none());
    if let (Some(skel), Some(plain)) = (skeleton, plain) {
        let non_tls = plain.cpu_us_median / base;
        let protocol = (skel.cpu_us_median - plain.cpu_us_median) / base;
        let named: f64 = shares.iter().map(|s| s.fraction).sum();
        shares.push(Share {
            stage: "other TLS".into(),
            fraction: 1.0 - named - protocol - non_tls,
            noisy: shares.iter().any(|s| s.noisy) || skel.noisy,
        });
        shares.push(Share {
            stage: "TLS protocol".into(),
            fraction: protocol,
            noisy: skel.noisy,
        });
        shares.push(Share {
            stage: "non-TLS".into(),
            fraction: non_tls,
            noisy: false,
        });
    }
    BreakdownReport {
        schema_version: 1,
        workload: cfg.workload,
        file_size: cfg.file_size,
        version: cfg.version,
        key: cfg.key.name().into(),
        cell_s: cfg.cell.as_secs_f64(),
        clients: cfg.clients,
        repeats: cfg.repeats.max(1),
        placement,
        rows,
        shares,
        meter_overhead_ns: f64::NAN,
    }
}

impl BreakdownReport {
    /// The human tables.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nWhere the TLS cost goes: {} {}, {}, {} B responses, {} clients, {} × {:.1} s per configuration; {}.",
            self.version,
            self.key,
            match self.workload {
                Workload::NewConn => "new connection and full handshake per request".to_string(),
                Workload::Reuse(r) =>
                    format!("new connection per request, {:.0}% resumed", r * 100.0),
                Workload::KeepAlive => "keep-alive".to_string(),
            },
            self.file_size,
            self.clients,
            self.repeats,
            self.cell_s,
            self.placement.describe()
        );
        let _ = writeln!(
            s,
            "Cost = server CPU per request (server-observed, median of the repeats); req/s is client-observed.\n\
             Stages are replaced by no-ops on client and server alike. fraction = 1 − 1/speedup (Amdahl).\n\
             Client and server meter every crypto operation; the meter costs {:.0} ns per operation \
             (measured at the start of this run), in every configuration alike.",
            self.meter_overhead_ns
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<58} {:>11} {:>7} {:>9} {:>8} {:>9}",
            "configuration", "CPU/req", "spread", "req/s", "speedup", "fraction"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<58} {:>8.1} µs {:>6.1}% {:>9.0} {:>7.2}x {:>8.1}%{}{}",
                r.config.name,
                r.cpu_us_median,
                r.spread * 100.0,
                r.requests_per_s_median,
                r.speedup,
                r.fraction_removed * 100.0,
                if r.noisy { " ~" } else { "" },
                if r.client_saturated { " !" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "~ spread larger than the effect: not distinguishable from noise.  \
             ! client ≥90 % busy (req/s measures the client; CPU/req is unaffected)."
        );
        let _ = writeln!(
            s,
            "\nCost table (share of the TLS baseline's server CPU per request):"
        );
        for sh in &self.shares {
            let _ = writeln!(
                s,
                "  {:<12} {:>6.1}%{}",
                sh.stage,
                sh.fraction * 100.0,
                if sh.noisy { " ~" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "non-TLS = plain HTTP's cost ÷ baseline's (server and kernel without TLS). \
             TLS protocol = (skeleton − plain HTTP) ÷ baseline: rustls's state machine, record \
             framing and the handshake's extra traffic, which no no-op removes. other TLS = what \
             the named stages, TLS protocol and non-TLS leave (interactions between stages, noise)."
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!((spread(&[90.0, 100.0, 110.0]) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn cache_only_with_resumption() {
        let stages = |w| {
            configurations(w)
                .into_iter()
                .filter_map(|c| c.stage)
                .collect::<Vec<_>>()
        };
        assert!(!stages(Workload::NewConn).contains(&"cache".to_string()));
        assert!(stages(Workload::Reuse(0.5)).contains(&"cache".to_string()));
    }

    fn cell(cpu: f64) -> Cell {
        Cell {
            cpu_us: cpu,
            requests_per_s: 1e6 / cpu,
            saturated: false,
        }
    }

    #[test]
    fn amdahl_fractions_and_residuals() {
        let cfg = BreakdownConfig {
            workload: Workload::NewConn,
            file_size: 1024,
            version: Version::Tls13,
            key: KeyType::EcdsaP256,
            cell: Duration::from_secs(1),
            clients: 1,
            repeats: 3,
        };
        let configs = configurations(cfg.workload);
        // Baseline 400 µs; sig saves 100, kx 100; every other stage 10;
        // skeleton leaves 80, plain HTTP 40.
        let cells = configs
            .iter()
            .map(|c| {
                let v = match (&c.ablation, c.stage.as_deref()) {
                    (None, _) => 40.0,
                    (Some(a), _) if *a == AblationSet::NONE => 400.0,
                    (_, Some("sig")) | (_, Some("kx")) => 300.0,
                    (_, Some(_)) => 390.0,
                    (Some(a), None) if *a == AblationSet::skeleton() => 80.0,
                    _ => 150.0,
                };
                vec![cell(v * 0.99), cell(v), cell(v * 1.01)]
            })
            .collect();
        let r = analyse(
            &cfg,
            Placement {
                server: vec![],
                client: vec![],
            },
            configs,
            cells,
        );
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap().fraction;
        assert!((share("sig") - 0.25).abs() < 1e-9);
        assert!((share("hash") - 0.025).abs() < 1e-9);
        assert!((share("non-TLS") - 0.1).abs() < 1e-9);
        assert!((share("TLS protocol") - 0.1).abs() < 1e-9);
        // 1 − (0.25 + 0.25 + 4 × 0.025) − 0.1 − 0.1 = 0.2
        assert!((share("other TLS") - 0.2).abs() < 1e-9);
        let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
        assert!((total - 1.0).abs() < 1e-9);
        // A 10 µs effect inside a ±4 µs spread is fine; inside ±1 % of 400 it is not noisy.
        assert!(
            !r.rows
                .iter()
                .find(|x| x.config.stage.as_deref() == Some("hash"))
                .unwrap()
                .noisy
        );
    }

    #[test]
    fn effects_inside_the_spread_are_flagged() {
        let cfg = BreakdownConfig {
            workload: Workload::KeepAlive,
            file_size: 1024,
            version: Version::Tls13,
            key: KeyType::EcdsaP256,
            cell: Duration::from_secs(1),
            clients: 1,
            repeats: 3,
        };
        let configs = configurations(cfg.workload);
        let cells = configs
            .iter()
            .map(|c| match c.stage.as_deref() {
                Some("rng") => vec![cell(80.0), cell(99.0), cell(120.0)],
                _ => vec![cell(100.0), cell(100.0), cell(100.0)],
            })
            .collect();
        let r = analyse(
            &cfg,
            Placement {
                server: vec![],
                client: vec![],
            },
            configs,
            cells,
        );
        let rng = r
            .rows
            .iter()
            .find(|x| x.config.stage.as_deref() == Some("rng"))
            .unwrap();
        assert!(rng.noisy);
        let sig = r
            .rows
            .iter()
            .find(|x| x.config.stage.as_deref() == Some("sig"))
            .unwrap();
        // No effect and no spread: 0 > 0 is false, so not flagged as noisy.
        assert!(!sig.noisy);
    }
}
