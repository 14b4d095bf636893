//! `tlslab sweep`: load runs at growing client counts or rates until
//! throughput stops growing (the knee), one series per reuse value.

use tlslab_schema::sweep::{SweepSeries, SweepStep};
use tlslab_stats::LoadReport;

use crate::config::LoadConfig;
use crate::error::Error;

/// What a sweep steps.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepOver {
    /// Closed-loop clients (`-c`), starting at the base configuration's.
    Clients,
    /// Open-loop arrival rate (`--rate`), starting at the base
    /// configuration's.
    Rate,
}

impl SweepOver {
    /// `clients` or `rate`.
    pub fn name(self) -> &'static str {
        match self {
            SweepOver::Clients => "clients",
            SweepOver::Rate => "rate",
        }
    }
}

/// How a sweep steps and when it stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepPlan {
    /// What grows from step to step.
    pub over: SweepOver,
    /// Each step multiplies it by this (> 1); client counts grow by at
    /// least one.
    pub factor: f64,
    /// The most steps per series.
    pub max_steps: usize,
    /// The knee: the last step before one whose throughput grew by less
    /// than this fraction (0.10 = 10 %).
    pub knee_gain: f64,
}

/// Returns true if and only if `next` grew by less than `gain` over `prev`,
/// so `prev` is the knee.
pub fn is_knee(prev: f64, next: f64, gain: f64) -> bool {
    next < prev * (1.0 + gain)
}

/// The value of step `k` (from 0) starting at `start`.
fn step_value(plan: &SweepPlan, start: f64, prev: Option<f64>) -> f64 {
    let v = match prev {
        None => start,
        Some(p) => p * plan.factor,
    };
    match (plan.over, prev) {
        (SweepOver::Clients, Some(p)) => v.round().max(p + 1.0),
        (SweepOver::Clients, None) => v.round().max(1.0),
        (SweepOver::Rate, _) => v,
    }
}

fn step_of(report: &LoadReport) -> SweepStep {
    SweepStep {
        clients: report.config.clients,
        rate: report.open_loop.as_ref().map(|o| o.rate),
        requests_per_s: report.throughput.requests_per_s,
        completed: report.requests.completed,
        errors: report.requests.errors,
        reuse_achieved: report.reuse.achieved,
        total_p50_us: report.latency.total.p50_us,
        total_p99_us: report.latency.total.p99_us,
        handshake_full_p50_us: report.latency.handshake_full.p50_us,
        handshake_resumed_p50_us: report.latency.handshake_resumed.p50_us,
        client_busy: report.client_cpu.busy_fraction,
    }
}

/// Runs one series: `base` at growing clients or rates until the knee, an
/// error-dominated step, or `max_steps`. `on_step` sees each step as it
/// finishes.
pub fn sweep_series(
    base: &LoadConfig,
    plan: &SweepPlan,
    mut on_step: impl FnMut(&SweepStep),
) -> Result<SweepSeries, Error> {
    if !(plan.factor.is_finite() && plan.factor > 1.0) {
        return Err(Error::Invalid(
            "the sweep factor must be above 1, e.g. 2 to double each step".into(),
        ));
    }
    if plan.max_steps < 2 {
        return Err(Error::Invalid(
            "a sweep needs at least 2 steps to find a knee; give --steps 2 or more".into(),
        ));
    }
    if !(plan.knee_gain.is_finite() && plan.knee_gain >= 0.0) {
        return Err(Error::Invalid(
            "the knee gain must be a fraction of 0 or more, e.g. 0.10".into(),
        ));
    }
    let start = match plan.over {
        SweepOver::Clients => base.clients as f64,
        SweepOver::Rate => match &base.open_loop {
            Some(o) => o.rate,
            None => {
                return Err(Error::Invalid(
                    "a rate sweep needs a starting --rate".into(),
                ));
            }
        },
    };
    let mut steps = Vec::new();
    let mut value = None;
    let mut knee = None;
    let mut stopped = "steps";
    for k in 0..plan.max_steps {
        let v = step_value(plan, start, value);
        value = Some(v);
        let mut cfg = base.clone();
        match plan.over {
            SweepOver::Clients => cfg.clients = v as usize,
            SweepOver::Rate => {
                if let Some(o) = &mut cfg.open_loop {
                    o.rate = v;
                }
            }
        }
        let report = crate::engine::run(&cfg)?;
        let step = step_of(&report);
        on_step(&step);
        let failing = step.errors * 2 > report.requests.attempted.max(1);
        let flat = k > 0 && is_knee(steps_tput(&steps), step.requests_per_s, plan.knee_gain);
        steps.push(step);
        if failing {
            stopped = "errors";
            knee = k.checked_sub(1);
            break;
        }
        if flat {
            stopped = "knee";
            knee = Some(k - 1);
            break;
        }
    }
    Ok(SweepSeries {
        reuse: base.reuse,
        knee,
        stopped: stopped.into(),
        steps,
    })
}

fn steps_tput(steps: &[SweepStep]) -> f64 {
    steps.last().map_or(0.0, |s| s.requests_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_is_where_growth_stops() {
        assert!(!is_knee(100.0, 180.0, 0.10));
        assert!(is_knee(100.0, 105.0, 0.10));
        assert!(is_knee(100.0, 90.0, 0.10));
        assert!(!is_knee(100.0, 111.0, 0.10));
    }

    #[test]
    fn steps_grow_geometrically_and_clients_by_at_least_one() {
        let plan = SweepPlan {
            over: SweepOver::Clients,
            factor: 1.2,
            max_steps: 5,
            knee_gain: 0.1,
        };
        let mut v = None;
        let mut seen = Vec::new();
        for _ in 0..5 {
            let x = step_value(&plan, 1.0, v);
            seen.push(x);
            v = Some(x);
        }
        assert_eq!(seen, [1.0, 2.0, 3.0, 4.0, 5.0]);
        let plan = SweepPlan {
            over: SweepOver::Rate,
            factor: 2.0,
            ..plan
        };
        assert_eq!(step_value(&plan, 50.0, Some(100.0)), 200.0);
    }
}
