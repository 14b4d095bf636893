//! `tlslab sweep`: one load configuration per --reuse value, stepped to
//! the knee.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tlslab_load::{SweepOver, Workload};
use tlslab_report::{SweepStepText, SweepText};

use crate::args::load::SweepArgs;
use crate::output::print_and_save;
use crate::usage::bail;

/// Turns `tlslab sweep` flags into one load configuration per --reuse
/// value, and the plan.
pub fn config(
    a: &SweepArgs,
) -> anyhow::Result<(Vec<tlslab_load::LoadConfig>, tlslab_load::SweepPlan)> {
    if a.load.dist.is_set() {
        return bail(
            "--shard, --start-at and --out are for `tlslab load`; sweep runs on one machine",
        );
    }
    if a.load.h3.flood.is_some() {
        return bail("--flood runs beside one `tlslab load --h3`; drop it from the sweep");
    }
    if a.load.max_error_rate.is_some() {
        return bail(
            "--max-error-rate gates one `tlslab load` run; a sweep runs past the knee, where errors are expected",
        );
    }
    let over = match (a.over, a.load.rate) {
        (Some(SweepOver::Rate), None) => return bail("--over rate needs a starting --rate"),
        (Some(SweepOver::Clients), Some(_)) => {
            return bail("--over clients steps a closed loop; drop --rate");
        }
        (Some(over), _) => over,
        (None, Some(_)) => SweepOver::Rate,
        (None, None) => SweepOver::Clients,
    };
    if !(a.factor.is_finite() && a.factor > 1.0) {
        return bail(format!(
            "--factor {}: give a factor above 1, e.g. 2",
            a.factor
        ));
    }
    if a.steps < 2 {
        return bail("--steps must be at least 2 to find a knee");
    }
    if !(a.knee.is_finite() && a.knee >= 0.0) {
        return bail(format!(
            "--knee {}: give a percentage of 0 or more, e.g. 10",
            a.knee
        ));
    }
    if a.load.workload == Workload::Replay {
        return bail("a replay has its own pace; sweep urls, specweb96 or ecommerce workloads");
    }
    let mut configs = Vec::new();
    for &r in &a.load.reuse {
        let mut one = a.load.clone();
        one.reuse = vec![r];
        if one.duration.is_none() && one.requests.is_none() {
            one.duration = Some(Duration::from_secs(2));
        }
        configs.push(crate::flags::load::config(&one)?.prepare(None)?);
    }
    Ok((
        configs,
        tlslab_load::SweepPlan {
            over,
            factor: a.factor,
            max_steps: a.steps,
            knee_gain: a.knee / 100.0,
        },
    ))
}

/// Runs `tlslab sweep`.
pub fn run(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let (configs, plan) = config(&a)?;
    let mut series = Vec::new();
    eprintln!(
        "tlslab sweep: over {}, x{} per step, at most {} steps per reuse value",
        plan.over.name(),
        plan.factor,
        plan.max_steps
    );
    for cfg in &configs {
        eprintln!("reuse {:.0}%:", cfg.reuse * 100.0);
        eprintln!("{}", tlslab_report::SweepStep::header());
        let s = tlslab_load::sweep_series(cfg, &plan, |step| eprintln!("{}", step.row()))
            .context("running the sweep")?;
        series.push(s);
    }
    let report = tlslab_report::SweepReport {
        schema_version: 1,
        over: plan.over.name().into(),
        factor: plan.factor,
        knee_gain: plan.knee_gain,
        step_s: configs
            .first()
            .and_then(|c| c.duration)
            .map(|d| d.as_secs_f64()),
        series,
    };
    print_and_save(&report.render(), &report, a.load.json.as_deref())
}
