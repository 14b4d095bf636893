//! Access-log replay: workers that take the next request the scheduler
//! allows and make it as its IP's browser.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tlslab_workload::replay::{Pacing, Scheduler};

use super::backoff::Backoff;
use super::client::Client;
use super::identity::Identity;
use super::shared::{Shared, Slot, until_deadline};
use crate::config::Replay;

/// A replay in progress.
pub(super) struct ReplayRun {
    spec: Replay,
    /// Created when the replay starts (its clock starts then).
    sched: parking_lot::Mutex<Option<(Scheduler, Instant)>>,
    /// Woken when a request completes.
    notify: tokio::sync::Notify,
    /// Browsers whose first request was measured; measured requests.
    sessions: AtomicU64,
    requests: AtomicU64,
}

impl ReplayRun {
    pub(super) fn new(spec: Replay) -> Self {
        ReplayRun {
            spec,
            sched: parking_lot::Mutex::new(None),
            notify: tokio::sync::Notify::new(),
            sessions: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// The report's `replay` section; `achieved` is the run's resumption.
    pub(super) fn report(&self, achieved: f64) -> tlslab_stats::Replay {
        let (r, plan) = (&self.spec, self.spec.plan.summary());
        tlslab_stats::Replay {
            log_requests: plan.requests,
            log_sessions: plan.sessions,
            implied_resumption: plan.implied_resumption_ratio,
            sessions_replayed: self.sessions.load(Ordering::Relaxed),
            requests_replayed: self.requests.load(Ordering::Relaxed),
            achieved_resumption: achieved,
            window: r.window as u64,
            speed: match r.pacing {
                Pacing::AsFastAsPossible => None,
                Pacing::Timed { speed } => Some(speed),
            },
            skipped_lines: r.skipped_lines,
            excluded_ips: r.filtered.excluded_ips,
            excluded_requests: r.filtered.excluded_requests,
            rate_ips: r.filtered.rate_ips,
            rate_requests: r.filtered.rate_requests,
        }
    }

    /// The browsers of the log (one per client IP).
    pub(super) fn browsers(&self) -> usize {
        self.spec.plan.browsers()
    }
}

/// Waits at most this long for a completion before looking again.
const REPLAY_POLL: Duration = Duration::from_millis(10);

/// One replay worker: takes the next request the scheduler allows (per-IP
/// order, window bound, pacing), makes it as its IP's browser on a new
/// connection, and reports it complete (failed ones too, so the window
/// moves on).
pub(super) async fn replay_worker(
    sh: Arc<Shared>,
    run: Arc<ReplayRun>,
    browsers: Arc<Vec<Arc<Identity>>>,
) {
    let deadline = sh.deadline;
    let _ = until_deadline(deadline, async {
        // The worker's backoff, carried through the client of each request.
        let mut backoff = Backoff::default();
        loop {
            let notified = run.notify.notified();
            let (req, wait) = {
                let mut guard = run.sched.lock();
                let (sched, start) = guard.get_or_insert_with(|| {
                    let s = Scheduler::new(run.spec.plan.clone(), run.spec.window, run.spec.pacing)
                        .unwrap_or_else(|_| {
                            // Checked before the run started.
                            Scheduler::new(run.spec.plan.clone(), 1, Pacing::AsFastAsPossible)
                                .expect("window 1, no pacing is valid")
                        });
                    (s, Instant::now())
                });
                if sched.finished() {
                    return;
                }
                let now = start.elapsed();
                match sched.issue_at(now) {
                    Some(r) => (Some(r), None),
                    None => (None, sched.next_due().map(|d| d.saturating_sub(now))),
                }
            };
            let Some(req) = req else {
                let wait = wait
                    .unwrap_or(REPLAY_POLL)
                    .clamp(Duration::from_micros(100), REPLAY_POLL);
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            };
            let Some(slot) = sh.next_slot() else { return };
            let Some(ident) = browsers.get(req.browser) else {
                return;
            };
            if slot == Slot::Measured {
                run.requests.fetch_add(1, Ordering::Relaxed);
                if req.full_handshake {
                    run.sessions.fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut c = Client::new(sh.clone(), ident.clone());
            c.fixed = sh.target_of(&req.path);
            c.backoff = std::mem::take(&mut backoff);
            c.back_off().await;
            c.connection(&sh, slot, None).await;
            backoff = std::mem::take(&mut c.backoff);
            let _ = run.sched.lock().as_mut().map(|(s, _)| s.complete(req.id));
            run.notify.notify_waiters();
        }
    })
    .await;
}
