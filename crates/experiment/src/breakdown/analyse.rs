//! From the paired cells to the report: medians and spreads per
//! configuration, each stage's paired Amdahl share with its interval and
//! the stopping rule's verdict, the meter's direct attribution, and the
//! derived rows.

use std::collections::BTreeMap;

use tlslab_crypto::meter::AblationSet;
use tlslab_report::interval::{Convergence, Interval};
use tlslab_report::study::median;

use super::plan::{BreakdownConfig, Configuration, Transport, meter_ops, quic_skeleton};
use super::report::{BreakdownReport, Row, Share};
use crate::pin::Placement;

fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / median(v)
}

#[derive(Clone)]
pub(super) struct Cell {
    pub(super) cpu_us: f64,
    pub(super) requests_per_s: f64,
    pub(super) saturated: bool,
    pub(super) server_busy: f64,
    /// Both servers' CPU ÷ window: how busy the server CPU was.
    pub(super) server_side_busy: f64,
    /// Both load engines' CPU ÷ window: how busy the client CPU was.
    pub(super) client_side_busy: f64,
    /// Server µs per request inside each named stage's meter operations.
    pub(super) meter_us: BTreeMap<String, f64>,
    /// Server µs per request inside rustls's QUIC handshake calls (0 over
    /// TCP).
    pub(super) quic_tls_us: f64,
}

/// One cell and the cost of the baseline next to it in time.
#[derive(Clone)]
pub(super) struct Sample {
    pub(super) cell: Cell,
    /// Mean CPU per request of the baseline cells adjacent in time (for a
    /// baseline cell: its own).
    pub(super) paired_base_us: f64,
}

pub(super) fn paired_fractions(s: &[Sample]) -> Vec<f64> {
    s.iter()
        .map(|x| 1.0 - x.cell.cpu_us / x.paired_base_us)
        .collect()
}

fn share(stage: &str, xs: &[f64], target: f64) -> Share {
    let iv = Interval::of(xs);
    let status = iv.convergence(target);
    Share {
        stage: stage.into(),
        fraction: iv.mean,
        ci95: iv.half_width,
        noisy: iv.contains_zero(),
        status,
        rounds_needed: (status != Convergence::Converged && iv.n >= 2)
            .then(|| iv.samples_needed(target))
            .filter(|&n| n != usize::MAX),
        meter_fraction: None,
        meter_ci95: None,
        disagrees: None,
    }
}

/// The QUIC table's last row: what is left of the QUIC skeleton besides
/// rustls's handshake calls.
pub const REMAINDER_QUIC: &str = "QUIC transport + HTTP/3";

pub(super) fn analyse(
    cfg: &BreakdownConfig,
    placement: Placement,
    configs: Vec<Configuration>,
    samples: Vec<Vec<Sample>>,
) -> BreakdownReport {
    let base_i = configs
        .iter()
        .position(|c| c.ablation == Some(AblationSet::NONE))
        .unwrap_or(0);
    let base_cpu: Vec<f64> = samples[base_i].iter().map(|x| x.cell.cpu_us).collect();
    let base = median(&base_cpu);
    let rounds = configs
        .iter()
        .zip(&samples)
        .filter(|(c, _)| c.ablation != Some(AblationSet::NONE))
        .map(|(_, s)| s.len())
        .min()
        .unwrap_or(0);
    let mut rows = Vec::new();
    for (config, ss) in configs.iter().zip(&samples) {
        let cpus: Vec<f64> = ss.iter().map(|x| x.cell.cpu_us).collect();
        let rps: Vec<f64> = ss.iter().map(|x| x.cell.requests_per_s).collect();
        let is_base = config.ablation == Some(AblationSet::NONE);
        let fr = if is_base {
            vec![0.0; ss.len()]
        } else {
            paired_fractions(ss)
        };
        let iv = Interval::of(&fr);
        let m = median(&cpus);
        let sat = ss.iter().filter(|x| x.cell.saturated).count();
        rows.push(Row {
            cpu_us_median: m,
            requests_per_s_median: median(&rps),
            requests_per_s: rps,
            spread: spread(&cpus),
            speedup: 1.0 / (1.0 - iv.mean),
            fraction_removed: iv.mean,
            fraction_ci95: if is_base { 0.0 } else { iv.half_width },
            noisy: !is_base && iv.contains_zero(),
            client_saturated: sat > 0,
            client_saturated_cells: sat,
            server_busy_median: median(&ss.iter().map(|x| x.cell.server_busy).collect::<Vec<_>>()),
            paired_fractions: if is_base { Vec::new() } else { fr },
            cpu_us: cpus,
            config: config.to_schema(),
        });
    }
    // The meter's direct attribution, from the baseline cells.
    let meter_share = |stage: &str| -> Option<Interval> {
        meter_ops(stage)?;
        let xs: Vec<f64> = samples[base_i]
            .iter()
            .filter_map(|x| x.cell.meter_us.get(stage).map(|us| us / x.cell.cpu_us))
            .collect();
        (!xs.is_empty()).then(|| Interval::of(&xs))
    };
    let mut shares = Vec::new();
    let mut named_sum = vec![0.0; rounds];
    for r in rows.iter().filter(|r| r.config.stage.is_some()) {
        let stage = r.config.stage.clone().unwrap_or_default();
        for (k, f) in r.paired_fractions.iter().take(rounds).enumerate() {
            named_sum[k] += f;
        }
        let mut sh = share(&stage, &r.paired_fractions, cfg.target_ci95);
        if let Some(m) = meter_share(&stage) {
            sh.meter_fraction = Some(m.mean);
            sh.meter_ci95 = Some(m.half_width);
            sh.disagrees = Some(Interval::of(&r.paired_fractions).disjoint(&m));
        }
        shares.push(sh);
    }
    // Derived rows, per round from the same round's paired ratios:
    // non-TLS = plain ÷ baseline; TLS protocol = (skeleton − plain) ÷
    // baseline; other TLS = 1 − named − skeleton ÷ baseline.
    let ratio_of = |pred: &dyn Fn(&Configuration) -> bool| -> Option<Vec<f64>> {
        configs
            .iter()
            .position(pred)
            .map(|i| rows[i].paired_fractions.iter().map(|f| 1.0 - f).collect())
    };
    let skel = ratio_of(&|c| c.ablation == Some(AblationSet::skeleton()));
    let plain = ratio_of(&|c| c.ablation.is_none());
    // QUIC has no plain cell: TLS protocol is the time inside rustls's
    // handshake calls in the QUIC skeleton (every crypto stage a no-op)
    // ÷ the baseline beside it, and the rest of the skeleton is QUIC's
    // transport and HTTP/3.
    let quic_skel = configs
        .iter()
        .position(|c| cfg.transport == Transport::Quic && c.ablation == Some(quic_skeleton()));
    if let Some(i) = quic_skel {
        let ss = &samples[i];
        let skel: Vec<f64> = ss
            .iter()
            .map(|x| x.cell.cpu_us / x.paired_base_us)
            .collect();
        let tls: Vec<f64> = ss
            .iter()
            .map(|x| x.cell.quic_tls_us / x.paired_base_us)
            .collect();
        let n = rounds.min(ss.len());
        let other: Vec<f64> = (0..n).map(|k| 1.0 - named_sum[k] - skel[k]).collect();
        let rest: Vec<f64> = (0..n).map(|k| skel[k] - tls[k]).collect();
        shares.push(share("other TLS", &other, cfg.target_ci95));
        shares.push(share("TLS protocol", &tls[..n], cfg.target_ci95));
        shares.push(share(REMAINDER_QUIC, &rest, cfg.target_ci95));
    } else if let (Some(skel), Some(plain)) = (skel, plain) {
        let other: Vec<f64> = (0..rounds).map(|k| 1.0 - named_sum[k] - skel[k]).collect();
        let protocol: Vec<f64> = (0..rounds).map(|k| skel[k] - plain[k]).collect();
        shares.push(share("other TLS", &other, cfg.target_ci95));
        shares.push(share("TLS protocol", &protocol, cfg.target_ci95));
        shares.push(share(
            "non-TLS",
            &plain[..rounds.min(plain.len())],
            cfg.target_ci95,
        ));
    }
    let pairs: Vec<&Cell> = samples
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != base_i)
        .flat_map(|(_, ss)| ss.iter().map(|x| &x.cell))
        .collect();
    let server_cpu_busy = median(&pairs.iter().map(|c| c.server_side_busy).collect::<Vec<_>>());
    let client_cpu_busy = median(&pairs.iter().map(|c| c.client_side_busy).collect::<Vec<_>>());
    let bottleneck = if server_cpu_busy >= 0.85 {
        "server"
    } else if client_cpu_busy >= 0.85 {
        "client"
    } else {
        "neither"
    };
    let named: Vec<&str> = configs.iter().filter_map(|c| c.stage.as_deref()).collect();
    let converged = shares
        .iter()
        .filter(|s| named.contains(&s.stage.as_str()))
        .all(|s| s.status == Convergence::Converged);
    BreakdownReport {
        schema_version: 4,
        transport: cfg.transport.name().into(),
        workload: cfg.workload,
        file_size: cfg.file_size,
        version: cfg.version.name().into(),
        key: cfg.key.name().into(),
        cell_s: cfg.cell.as_secs_f64(),
        clients: cfg.clients,
        repeats: cfg.repeats.max(1),
        rounds,
        max_time_s: cfg.max_time.as_secs_f64(),
        target_ci95: cfg.target_ci95,
        elapsed_s: f64::NAN,
        converged,
        stop_reason: if converged { "converged" } else { "time_cap" }.into(),
        baseline_drift: if base > 0.0 {
            spread(&base_cpu)
        } else {
            f64::NAN
        },
        placement: placement.to_schema(),
        rows,
        shares,
        meter_overhead_ns: f64::NAN,
        server_cpu_busy,
        client_cpu_busy,
        bottleneck: bottleneck.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::breakdown::BreakdownText;
    use crate::breakdown::plan::{Workload, configurations};
    use tlslab_crypto::pki::KeyType;
    use tlslab_crypto::provider::Version;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!((spread(&[90.0, 100.0, 110.0]) - 0.2).abs() < 1e-12);
    }

    fn sample(cpu: f64, base: f64, meter_sig_us: f64) -> Sample {
        Sample {
            cell: Cell {
                cpu_us: cpu,
                requests_per_s: 1e6 / cpu,
                saturated: false,
                server_busy: 0.47,
                server_side_busy: 0.97,
                client_side_busy: 0.5,
                meter_us: [("sig".to_string(), meter_sig_us)].into(),
                quic_tls_us: cpu / 10.0,
            },
            paired_base_us: base,
        }
    }

    fn cfg(workload: Workload) -> BreakdownConfig {
        BreakdownConfig {
            workload,
            file_size: 1024,
            version: Version::Tls13,
            key: KeyType::EcdsaP256,
            cell: Duration::from_secs(1),
            clients: 1,
            repeats: 3,
            max_time: Duration::from_secs(60),
            target_ci95: 0.02,
            transport: Transport::Tcp,
        }
    }

    /// A TCP configuration's server CPU per request, µs: baseline 400;
    /// sig and kx save 100 each, every other stage 10; the skeleton leaves
    /// 80, plain HTTP 40, the cumulative configurations 150.
    fn tcp_cost(c: &Configuration) -> f64 {
        match (&c.ablation, c.stage.as_deref()) {
            (None, _) => 40.0,
            (Some(a), _) if *a == AblationSet::NONE => 400.0,
            (_, Some("sig")) | (_, Some("kx")) => 300.0,
            (_, Some(_)) => 390.0,
            (Some(a), None) if *a == AblationSet::skeleton() => 80.0,
            _ => 150.0,
        }
    }

    #[test]
    fn amdahl_fractions_and_residuals() {
        let cfg = cfg(Workload::NewConn);
        let configs = configurations(cfg.workload, cfg.transport);
        // Baseline 400 µs; sig saves 100, kx 100; every other stage 10;
        // skeleton leaves 80, plain HTTP 40. The baseline drifts by ±10 %
        // across rounds; pairing cancels it exactly.
        let drift = [0.9, 1.0, 1.1];
        let samples = configs
            .iter()
            .map(|c| {
                let v = tcp_cost(c);
                drift
                    .iter()
                    .map(|d| sample(v * d, 400.0 * d, 90.0 * d))
                    .collect()
            })
            .collect();
        let r = analyse(&cfg, Placement::default(), configs, samples);
        assert_eq!(r.rounds, 3);
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap();
        assert!((share("sig").fraction - 0.25).abs() < 1e-9);
        assert!((share("hash").fraction - 0.025).abs() < 1e-9);
        assert!((share("non-TLS").fraction - 0.1).abs() < 1e-9);
        assert!((share("TLS protocol").fraction - 0.1).abs() < 1e-9);
        // 1 − (0.25 + 0.25 + 4 × 0.025) − 0.1 − 0.1 = 0.2
        assert!((share("other TLS").fraction - 0.2).abs() < 1e-9);
        let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
        assert!((total - 1.0).abs() < 1e-9);
        // The drift cancels: zero-width intervals, everything converged.
        for sh in &r.shares {
            assert!(sh.ci95 < 1e-9, "{sh:?}");
            assert_eq!(sh.status, Convergence::Converged, "{sh:?}");
        }
        assert!(r.converged);
        // Without pairing, the raw baseline drift is 20 %.
        assert!((r.baseline_drift - 0.2).abs() < 1e-9);
        // The meter said 90 of 400 µs for sig: 22.5 %, against 25 % ± 0:
        // the two disagree; for kx the meter saw nothing recorded.
        let sig = share("sig");
        assert!((sig.meter_fraction.unwrap() - 0.225).abs() < 1e-9);
        assert_eq!(sig.disagrees, Some(true));
        assert_eq!(share("mac").meter_fraction, None);
        let text = r.render();
        crate::assert_has(&text, &["every share converged", "≠ disagree"]);
    }

    #[test]
    fn quic_shares_split_the_skeleton_into_tls_protocol_and_the_remainder() {
        // Baseline 500 µs; the skeleton leaves 250, of which rustls's
        // handshake calls took 25 (`sample` sets a tenth of the cost).
        let r = quic_report();
        assert_eq!(r.transport, "quic");
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap().fraction;
        assert!((share("quic-packet") - 0.1).abs() < 1e-9);
        assert!((share("quic-header") - 0.04).abs() < 1e-9);
        assert!((share("TLS protocol") - 0.05).abs() < 1e-9);
        assert!((share(REMAINDER_QUIC) - 0.45).abs() < 1e-9);
        assert!((share("other TLS") - 0.01).abs() < 1e-9);
        assert!(r.share("non-TLS").is_none());
        let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!(r.converged);
        crate::assert_has(&r.render(), &["packet protection", REMAINDER_QUIC]);
    }

    fn quic_report() -> BreakdownReport {
        let cfg = BreakdownConfig {
            transport: Transport::Quic,
            ..cfg(Workload::NewConn)
        };
        let configs = configurations(cfg.workload, cfg.transport);
        let samples = configs
            .iter()
            .map(|c| {
                let v = match c.stage.as_deref() {
                    Some("sig") => 400.0,
                    Some("kx") | Some("quic-packet") => 450.0,
                    Some("quic-header") => 480.0,
                    Some("hash") | Some("quic-keys") => 490.0,
                    Some(_) => 495.0,
                    None if c.ablation == Some(AblationSet::NONE) => 500.0,
                    None => 250.0,
                };
                vec![sample(v, 500.0, 0.0); 3]
            })
            .collect();
        analyse(&cfg, Placement::default(), configs, samples)
    }

    #[test]
    fn the_difference_puts_each_quic_stage_in_us_beside_tcps() {
        let cfg = cfg(Workload::NewConn);
        let configs = configurations(cfg.workload, cfg.transport);
        // TCP: baseline 400 µs, plain HTTP 40 (non-TLS 10 %), the rest
        // as in `tcp_cost`.
        let samples = configs
            .iter()
            .map(|c| vec![sample(tcp_cost(c), 400.0, 0.0); 3])
            .collect();
        let tcp = analyse(&cfg, Placement::default(), configs, samples);
        let p = crate::breakdown::pair(tcp, quic_report());
        let d = &p.difference;
        assert!((d.extra_us - 100.0).abs() < 1e-9 && (d.quic_over_tcp - 1.25).abs() < 1e-9);
        // 10 + 4 + 2 % of 500 µs; 45 % of 500 against 10 % of 400.
        assert!((d.quic_only_us - 80.0).abs() < 1e-9, "{d:?}");
        assert!((d.remainder_growth_us - 185.0).abs() < 1e-9, "{d:?}");
        assert!((d.explained_us - 265.0).abs() < 1e-9);
        let sum: f64 = d.stages.iter().map(|s| s.delta_us).sum();
        assert!((sum - d.extra_us).abs() < 1e-9, "{d:?}");
        let row = |n: &str| d.stages.iter().find(|s| s.stage == n).unwrap();
        assert_eq!(row("cipher").quic_us, 0.0);
        assert!((row("remainder").tcp_us - 40.0).abs() < 1e-9);
        assert!((row("remainder").quic_us - 225.0).abs() < 1e-9);
        let text = crate::breakdown::render_pair(&p);
        crate::assert_has(
            &text,
            &["QUIC beside TCP", "QUIC ÷ TCP 1.25", "not within 10 %"],
        );
    }

    #[test]
    fn noisy_and_unconverged_stages_are_named_with_a_reason() {
        let cfg = cfg(Workload::KeepAlive);
        let configs = configurations(cfg.workload, cfg.transport);
        let samples = configs
            .iter()
            .map(|c| match c.stage.as_deref() {
                // ±20 %: far from the ±2-point target (variance).
                Some("rng") => vec![
                    sample(80.0, 100.0, 0.0),
                    sample(99.0, 100.0, 0.0),
                    sample(120.0, 100.0, 0.0),
                ],
                // 10 % ± a little: needs a few more rounds (cap hit).
                Some("hash") => vec![
                    sample(88.0, 100.0, 0.0),
                    sample(90.0, 100.0, 0.0),
                    sample(92.0, 100.0, 0.0),
                ],
                _ => vec![sample(100.0, 100.0, 0.0); 3],
            })
            .collect();
        let r = analyse(&cfg, Placement::default(), configs, samples);
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap();
        let rng = share("rng");
        assert!(rng.noisy);
        assert_eq!(rng.status, Convergence::Variance);
        let hash = share("hash");
        assert!(!hash.noisy);
        assert_eq!(hash.status, Convergence::CapHit, "{hash:?}");
        assert!(hash.rounds_needed.unwrap() > 3);
        // No effect and no spread: 0 ± 0 is "within noise of 0" and converged.
        let sig = share("sig");
        assert_eq!(sig.status, Convergence::Converged);
        assert!(!r.converged);
        let text = r.render();
        let hash = "not converged: hash (the time cap was hit";
        crate::assert_has(&text, &[hash, "rng (variance"]);
    }

    #[test]
    fn every_breakdown_json_field_is_documented_in_the_schema_doc() {
        let cfg = cfg(Workload::Reuse(0.5));
        let configs = configurations(cfg.workload, cfg.transport);
        let samples = configs
            .iter()
            .map(|_| vec![sample(100.0, 100.0, 1.0); 2])
            .collect();
        let r = analyse(&cfg, Placement::default(), configs, samples);
        let v = serde_json::to_value(&r).unwrap();
        let readme = include_str!("../../../../docs/schema.md");
        let start = readme
            .find("### `tlslab breakdown --json")
            .expect("docs/schema.md documents the breakdown JSON");
        let section = &readme[start..];
        let section = &section[..section[4..].find("\n## ").map_or(section.len(), |i| i + 4)];
        let mut names: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        for (list, item) in [("rows", &v["rows"][0]), ("shares", &v["shares"][0])] {
            names.extend(
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(|k| format!("{list}[].{k}")),
            );
        }
        names.extend(
            v["placement"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| format!("placement.{k}")),
        );
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| {
                !section.contains(&format!("`{n}`")) && !section.contains(&format!("`{n}[]`"))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "undocumented breakdown fields: {missing:?}"
        );
    }
}
