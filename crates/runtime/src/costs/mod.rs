//! What a set of threads spent its CPU time on, beyond the total
//! (`tlslab lab --explain`): syscalls and writes entered and the task
//! clock (per-thread `perf_event_open` counters), and allocations with
//! their bytes ([`CountingAlloc`]).
//!
//! Off by default: [`enable`] turns the probes on for the whole process,
//! once, and says which are unavailable and why. From then on every thread
//! that registers in a [`crate::Threads`] set opens its counters and takes
//! an allocation slot, and [`crate::Threads::costs`] sums them with the
//! set's CPU time. Threads that registered before [`enable`] are not
//! probed, and make their set's counts unavailable rather than partial.

mod alloc;
mod perf;

use std::sync::OnceLock;
use std::time::Duration;

pub use alloc::CountingAlloc;

use crate::CpuTime;
use alloc::AllocCounts;
use perf::{Events, PerfCounts, ThreadCounters};

/// Cumulative counters of a set of threads (see
/// [`crate::Threads::costs`]); take two and subtract with
/// [`since`](ThreadCosts::since). A count is `None` when it is unavailable
/// (see [`Probes`]) or some thread of the set could not be probed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCosts {
    /// User and system CPU time, as [`crate::Threads::cpu_time`].
    pub cpu: CpuTime,
    /// Syscalls entered.
    pub syscalls: Option<u64>,
    /// Of them, `write`, `writev`, `sendto`, `sendmsg` and `sendmmsg`.
    pub writes: Option<u64>,
    /// The kernel's task clock: time on a CPU, counted by perf (an
    /// independent check on `cpu`).
    pub task_clock: Option<Duration>,
    /// Allocations (`alloc`, `alloc_zeroed` and `realloc` calls).
    pub allocations: Option<u64>,
    /// Bytes asked for by those calls (a `realloc` counts its new size).
    pub allocated_bytes: Option<u64>,
}

impl ThreadCosts {
    /// What happened since `earlier` (each count saturating at zero, and
    /// unavailable if it was unavailable in either).
    pub fn since(self, earlier: ThreadCosts) -> ThreadCosts {
        fn sub(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            Some(a?.saturating_sub(b?))
        }
        ThreadCosts {
            cpu: self.cpu.since(earlier.cpu),
            syscalls: sub(self.syscalls, earlier.syscalls),
            writes: sub(self.writes, earlier.writes),
            task_clock: self
                .task_clock
                .zip(earlier.task_clock)
                .map(|(a, b)| a.saturating_sub(b)),
            allocations: sub(self.allocations, earlier.allocations),
            allocated_bytes: sub(self.allocated_bytes, earlier.allocated_bytes),
        }
    }

    /// As the schema's [`tlslab_schema::costs::WindowCosts`], with the
    /// crypto meter's time over the same window.
    pub fn to_schema(self, crypto: Duration) -> tlslab_schema::costs::WindowCosts {
        tlslab_schema::costs::WindowCosts {
            user_s: self.cpu.user.as_secs_f64(),
            sys_s: self.cpu.sys.as_secs_f64(),
            crypto_s: crypto.as_secs_f64(),
            task_clock_s: self.task_clock.map(|d| d.as_secs_f64()),
            syscalls: self.syscalls,
            writes: self.writes,
            allocations: self.allocations,
            allocated_bytes: self.allocated_bytes,
        }
    }
}

/// Which probes [`enable`] could turn on.
#[derive(Debug)]
pub struct Probes {
    perf: Result<Events, String>,
    allocations: Result<(), String>,
}

impl Probes {
    /// Why syscall and write counts (and the task clock) are unavailable,
    /// with the fix; `None` when they are counted.
    pub fn syscalls_unavailable(&self) -> Option<&str> {
        self.perf.as_ref().err().map(String::as_str)
    }

    /// Why allocation counts are unavailable; `None` when they are counted.
    pub fn allocations_unavailable(&self) -> Option<&str> {
        self.allocations.as_ref().err().map(String::as_str)
    }
}

static PROBES: OnceLock<Probes> = OnceLock::new();

/// Turns the probes on for this process (the first call decides; later
/// ones return the same answer) and says which work. Threads that
/// register in a [`crate::Threads`] set from now on are probed.
pub fn enable() -> &'static Probes {
    PROBES.get_or_init(|| Probes {
        perf: Events::find(),
        allocations: alloc::enable(),
    })
}

/// The probes, if [`enable`] was called.
pub fn probes() -> Option<&'static Probes> {
    PROBES.get()
}

/// The probes of one registered thread.
#[derive(Debug)]
pub(crate) struct Probe {
    counters: Option<ThreadCounters>,
    /// The allocation slot and its counts at registration.
    slot: Option<(usize, AllocCounts)>,
}

/// The counts of a set's threads summed, and whether each kind covers
/// every thread that ever registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    perf: PerfCounts,
    allocs: AllocCounts,
    perf_missing: bool,
    allocs_missing: bool,
}

impl Extra {
    /// No thread, nothing missing.
    pub(crate) const ZERO: Extra = Extra {
        perf: PerfCounts {
            syscalls: 0,
            writes: 0,
            task_clock_ns: 0,
        },
        allocs: AllocCounts {
            allocations: 0,
            bytes: 0,
        },
        perf_missing: false,
        allocs_missing: false,
    };

    pub(crate) fn add(self, o: Extra) -> Extra {
        Extra {
            perf: self.perf.add(o.perf),
            allocs: AllocCounts {
                allocations: self.allocs.allocations + o.allocs.allocations,
                bytes: self.allocs.bytes + o.allocs.bytes,
            },
            perf_missing: self.perf_missing || o.perf_missing,
            allocs_missing: self.allocs_missing || o.allocs_missing,
        }
    }

    /// A thread that registered unprobed: every count is incomplete.
    pub(crate) const UNPROBED: Extra = Extra {
        perf_missing: true,
        allocs_missing: true,
        ..Extra::ZERO
    };

    /// With `cpu`, as the set's [`ThreadCosts`].
    pub(crate) fn with_cpu(self, cpu: CpuTime) -> ThreadCosts {
        let perf = (!self.perf_missing).then_some(self.perf);
        let allocs = (!self.allocs_missing).then_some(self.allocs);
        ThreadCosts {
            cpu,
            syscalls: perf.map(|p| p.syscalls),
            writes: perf.map(|p| p.writes),
            task_clock: perf.map(|p| Duration::from_nanos(p.task_clock_ns)),
            allocations: allocs.map(|a| a.allocations),
            allocated_bytes: allocs.map(|a| a.bytes),
        }
    }
}

impl Probe {
    /// Probes the calling thread, `tid`, if [`enable`] was called.
    pub(crate) fn attach(tid: i32) -> Option<Probe> {
        let p = probes()?;
        let counters = match &p.perf {
            Ok(ev) => ThreadCounters::open(tid, ev)
                .map_err(|e| tracing::warn!("cannot count thread {tid}'s syscalls: {e}"))
                .ok(),
            Err(_) => None,
        };
        let slot = p
            .allocations
            .is_ok()
            .then(alloc::thread_slot)
            .flatten()
            .map(|i| (i, alloc::counts(i)));
        Some(Probe { counters, slot })
    }

    /// The thread's counts since it registered.
    pub(crate) fn read(&mut self) -> Extra {
        let perf = self.counters.as_mut().and_then(|c| c.read().ok());
        let allocs = self
            .slot
            .filter(|_| alloc::counting())
            .map(|(i, base)| alloc::counts(i).since(base));
        Extra {
            perf: perf.unwrap_or_default(),
            allocs: allocs.unwrap_or_default(),
            perf_missing: perf.is_none(),
            allocs_missing: allocs.is_none(),
        }
    }
}

#[cfg(test)]
mod tests;
