//! The loop that feeds the controller: every tick it reads the signals
//! from the server's counters and publishes the new limit to the gate.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::controller::{Controller, Signals};
use super::gate::Admission;
use crate::config::AdmissionMode;
use crate::stats::Stats;

/// How often the controller looks at the signals.
const TICK: Duration = Duration::from_millis(100);

/// Runs the controller until `shutdown`: every [`TICK`], reads the
/// signals, updates the limit (in `session` mode) and publishes both.
pub(crate) async fn control(
    adm: Arc<Admission>,
    stats: Arc<Stats>,
    cpu_budget: usize,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let s = &adm.settings;
    let mut ctl = Controller::new(s.queue_delay_target, s.cpu_high, adm.in_flight_cap);
    let mut at = Instant::now();
    let threads = &stats.threads;
    let mut cpu = threads.cpu_time().total();
    let mut wait = threads.run_queue_wait();
    // Full handshakes completed: TCP's by the server's counts, QUIC's as
    // their server flights are made.
    let full_completed = || stats.full_handshakes() + adm.quic_full_done.load(Ordering::Relaxed);
    let mut completed = full_completed();
    let mut drops = adm.quic_drops();
    let mut full_admitted = 0;
    let mut full_shed = 0;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let now = Instant::now();
        let dt = now.duration_since(at).as_secs_f64().max(1e-3);
        let cpu_now = threads.cpu_time().total();
        // CPU used plus time spent runnable waiting for a CPU: what the
        // workers wanted, which on a shared machine (other processes on
        // the same cores) shows saturation that CPU time alone does not.
        let wait_now = threads.run_queue_wait();
        let wanted = cpu_now.saturating_sub(cpu) + wait_now.saturating_sub(wait);
        let busy = (wanted.as_secs_f64() / dt / cpu_budget.max(1) as f64).clamp(0.0, 1.0);
        let n = adm.delay_n.swap(0, Ordering::Relaxed);
        let ns = adm.delay_ns.swap(0, Ordering::Relaxed);
        let fa = adm.admitted[0].load(Ordering::Relaxed);
        let fs = adm.shed[0].load(Ordering::Relaxed);
        let fc = full_completed();
        let dropped = adm.quic_drops();
        let sig = Signals {
            queue_delay: Duration::from_nanos(ns.checked_div(n).unwrap_or(0)),
            cpu_busy: busy,
            in_flight: adm.full_in_flight.load(Ordering::Relaxed),
            full_admitted_rate: (fa - full_admitted) as f64 / dt,
            full_completed_rate: (fc - completed) as f64 / dt,
            full_shed: fs - full_shed,
            queue_drops: dropped.saturating_sub(drops),
        };
        drops = dropped;
        (at, cpu, wait, full_admitted, full_shed, completed) = (now, cpu_now, wait_now, fa, fs, fc);
        let overloaded = ctl.overloaded(&sig);
        if overloaded {
            adm.overload_ticks.fetch_add(1, Ordering::Relaxed);
        }
        // The controller runs in any case (its estimate is reported); with
        // --admission-fixed-limit its limit is not applied.
        if adm.settings.mode == AdmissionMode::Session
            && let Some(l) = ctl.update(&sig)
            && adm.settings.fixed_limit.is_none()
        {
            adm.limit.store(l.to_bits(), Ordering::Relaxed);
        }
        // Every tick's inputs and decision (RUST_LOG=tlslab_server::admission=debug).
        tracing::debug!(
            queue_delay_us = sig.queue_delay.as_micros() as u64,
            cpu_busy = sig.cpu_busy,
            in_flight = sig.in_flight,
            full_admitted_per_s = sig.full_admitted_rate,
            full_completed_per_s = sig.full_completed_rate,
            full_shed = sig.full_shed,
            queue_drops = sig.queue_drops,
            overloaded,
            limit = ctl.limit(),
            served_full_per_s = ctl.served(),
            "admission tick"
        );
        *adm.last.lock() = (sig, overloaded, ctl.served());
    }
}
