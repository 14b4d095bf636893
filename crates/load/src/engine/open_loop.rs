//! The open loop: arrivals at a rate, each one request on a new
//! connection, timed from its intended start, over any protocol.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// When an open loop's arrivals fall: the run's seed (the arrival
/// process's stream), the start of its warm-up (the first arrival's
/// origin) and its deadline.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    pub(super) seed: u64,
    pub(super) run_start: Instant,
    pub(super) deadline: Option<Instant>,
}

/// The open loop: one arrival after another at the intended times, each a
/// task of its own (made by `arrive` from the arrival's number, slot and
/// intended time), so a slow server does not slow the arrivals (no
/// coordinated omission). `slot_at` takes an arrival's slot, `None` when
/// the run is over. The times are kept by a blocking thread sleeping with
/// the OS's precision (tokio's timer has a 1 ms tick, which would make
/// most arrivals late by the 1 ms threshold).
pub(super) async fn arrivals<S, A, F>(
    clock: Clock,
    run: Arc<OpenLoopRun>,
    ol: OpenLoop,
    slot_at: S,
    arrive: A,
) where
    S: Fn(Instant) -> Option<Slot> + Send + 'static,
    A: FnMut(usize, Slot, Instant) -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let handle = tokio::runtime::Handle::current();
    let pending =
        tokio::task::spawn_blocking(move || schedule(clock, &run, ol, slot_at, arrive, &handle))
            .await
            .unwrap_or_default();
    for task in pending {
        let _ = task.await;
    }
}

/// Starts the arrivals at their intended times until the run's bounds;
/// returns the tasks still running.
fn schedule<S, A, F>(
    clock: Clock,
    run: &Arc<OpenLoopRun>,
    ol: OpenLoop,
    slot_at: S,
    mut arrive: A,
    handle: &tokio::runtime::Handle,
) -> Vec<tokio::task::JoinHandle<()>>
where
    S: Fn(Instant) -> Option<Slot>,
    A: FnMut(usize, Slot, Instant) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    // A stream no client uses: clients use `rng(seed, client)`.
    let mut rng = tlslab_workload::rng(clock.seed, u64::MAX);
    let mean = Duration::from_secs_f64(1.0 / ol.rate);
    let gap = match ol.arrivals {
        Arrivals::Poisson => ThinkTime::Exp { mean },
        Arrivals::Constant => ThinkTime::Const(mean),
    };
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut intended = clock.run_start;
    let mut n: usize = 0;
    loop {
        intended += gap.sample(&mut rng);
        if clock.deadline.is_some_and(|d| intended >= d) {
            break;
        }
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        if tasks.len() >= 1024 {
            tasks.retain(|t| !t.is_finished());
        }
        let Some(slot) = slot_at(intended) else {
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
        let work = arrive(n, slot, intended);
        n = n.wrapping_add(1);
        tasks.push(handle.spawn(async move {
            let _place = place;
            if measured && Instant::now().saturating_duration_since(intended) > LATE {
                _place.0.late.fetch_add(1, Ordering::Relaxed);
            }
            work.await;
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

/// The open loop: each arrival one request on a new
/// connection of an identity from the pool, in turn, its latency counted
/// from its intended time.
pub(super) async fn tcp_arrivals(
    sh: Arc<Shared>,
    run: Arc<OpenLoopRun>,
    identities: Vec<Arc<Identity>>,
    ol: OpenLoop,
) {
    let clock = Clock {
        seed: sh.seed,
        run_start: sh.run_start,
        deadline: sh.deadline,
    };
    let slots = sh.clone();
    let arrive = move |n: usize, slot: Slot, intended: Instant| {
        let ident = identities[n % identities.len()].clone();
        let sh = sh.clone();
        async move {
            let deadline = sh.deadline;
            let mut client = Client::new(sh.clone(), ident);
            let _ = until_deadline(deadline, client.connection(&sh, slot, Some(intended))).await;
        }
    };
    arrivals(clock, run, ol, move |t| slots.slot_at(t), arrive).await;
}
