//! The open loop: arrivals at a rate, each one request on a new
//! connection (or, with the e-commerce model, a new browser's purchase
//! session), timed from its intended start, over any protocol.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::browser::BrowserRun;
use super::client::Client;
use super::identity::Identity;
use super::shared::{Shared, Slot, until_deadline};
use crate::config::{Arrivals, OpenLoop};
use tlslab_workload::think::ThinkTime;

/// An open loop's state: requests in flight now; measured arrivals, the
/// late ones and the dropped ones.
#[derive(Default)]
pub(super) struct OpenLoopRun {
    in_flight: AtomicUsize,
    scheduled: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
}

impl OpenLoopRun {
    /// The report's `open_loop` section.
    pub(super) fn report(&self, ol: &OpenLoop) -> tlslab_stats::OpenLoop {
        tlslab_stats::OpenLoop {
            rate: ol.rate,
            arrivals: ol.arrivals.name().into(),
            max_in_flight: ol.max_in_flight,
            scheduled: self.scheduled.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// An open loop's arrivals are this much late before they count as late.
const LATE: Duration = Duration::from_millis(1);

/// The open loop: arrivals at the intended times, each one request on a
/// new connection of an identity from the pool, in turn, and a task of its
/// own, so a slow server does not slow the arrivals (no coordinated
/// omission); its latency counts from its intended time. With `browser`
/// (the e-commerce model) each arrival is instead a new browser (an
/// identity of its own, with an empty session store) making one purchase
/// session, holding its in-flight place until the session ends. The times are
/// kept by a blocking thread sleeping with the OS's precision (tokio's
/// timer has a 1 ms tick, which would make most arrivals late by the 1 ms
/// threshold).
pub(super) async fn open_arrivals(
    sh: Arc<Shared>,
    run: Arc<OpenLoopRun>,
    identities: Vec<Arc<Identity>>,
    ol: OpenLoop,
    browser: Option<Arc<BrowserRun>>,
) {
    let handle = tokio::runtime::Handle::current();
    let pending = tokio::task::spawn_blocking(move || {
        schedule(&sh, &run, &identities, ol, browser.as_ref(), &handle)
    })
    .await
    .unwrap_or_default();
    for task in pending {
        let _ = task.await;
    }
}

/// Starts the arrivals at their intended times until the run's bounds;
/// returns the tasks still running.
fn schedule(
    sh: &Arc<Shared>,
    run: &Arc<OpenLoopRun>,
    identities: &[Arc<Identity>],
    ol: OpenLoop,
    browser: Option<&Arc<BrowserRun>>,
    handle: &tokio::runtime::Handle,
) -> Vec<tokio::task::JoinHandle<()>> {
    // A stream no client uses: clients use `rng(seed, client)`.
    let mut rng = tlslab_workload::rng(sh.seed, u64::MAX);
    let mean = Duration::from_secs_f64(1.0 / ol.rate);
    let gap = match ol.arrivals {
        Arrivals::Poisson => ThinkTime::Exp { mean },
        Arrivals::Constant => ThinkTime::Const(mean),
    };
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut intended = sh.run_start;
    let mut n: usize = 0;
    loop {
        intended += gap.sample(&mut rng);
        if sh.deadline.is_some_and(|d| intended >= d) {
            break;
        }
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        if tasks.len() >= 1024 {
            tasks.retain(|t| !t.is_finished());
        }
        let Some(slot) = sh.slot_at(intended) else {
            break;
        };
        let measured = slot == Slot::Measured;
        if measured {
            run.scheduled.fetch_add(1, Ordering::Relaxed);
        }
        let cap = ol.max_in_flight;
        if run
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f < cap).then_some(f + 1)
            })
            .is_err()
        {
            if measured {
                run.dropped.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let place = Place(run.clone());
        let pooled = identities[n % identities.len()].clone();
        let browser = browser.cloned();
        // A browser's number: after the pool's, so its model stream is
        // its own.
        let id = (identities.len() + n) as u32;
        n = n.wrapping_add(1);
        let sh = sh.clone();
        tasks.push(handle.spawn(async move {
            let _place = place;
            if measured && Instant::now().saturating_duration_since(intended) > LATE {
                _place.0.late.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(b) = browser {
                let mut client = Client::new(sh.clone(), Arc::new(Identity::new(&sh, id)));
                let work = client.arrive(&b, slot, intended);
                let _ = until_deadline(sh.deadline, Box::pin(work)).await;
                return;
            }
            let mut client = Client::new(sh.clone(), pooled);
            let work = client.connection(&sh, slot, Some(intended));
            let _ = until_deadline(sh.deadline, work).await;
        }));
    }
    tasks
}

/// Releases an open-loop in-flight place when dropped.
struct Place(Arc<OpenLoopRun>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
