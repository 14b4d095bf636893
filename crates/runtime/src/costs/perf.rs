//! Per-thread kernel counters from `perf_event_open`: syscalls entered
//! (the `raw_syscalls:sys_enter` tracepoint), the write family among them
//! (`syscalls:sys_enter_write`, `writev`, `sendto`, `sendmsg`,
//! `sendmmsg`), and the task clock (the kernel's own count of the
//! thread's time on a CPU, a check on the `/proc` figures).
//!
//! Tracepoints need their ids from tracefs and, for a process that is not
//! root (no `CAP_PERFMON`), `kernel.perf_event_paranoid` at -1. When
//! either is missing the counts are unavailable, with the reason and the
//! fix; they are never guessed.

use perf_event::events::{Software, Tracepoint};
use perf_event::{Builder, Counter};

/// The tracepoint that fires on every syscall entry.
pub(crate) const SYSCALLS: &str = "raw_syscalls/sys_enter";

/// The syscalls that write to a socket or file: counted as "writes".
pub(crate) const WRITES: [&str; 5] = [
    "syscalls/sys_enter_write",
    "syscalls/sys_enter_writev",
    "syscalls/sys_enter_sendto",
    "syscalls/sys_enter_sendmsg",
    "syscalls/sys_enter_sendmmsg",
];

/// Where tracefs lists its events: its own mount point, or under debugfs.
const EVENT_DIRS: [&str; 2] = [
    "/sys/kernel/tracing/events",
    "/sys/kernel/debug/tracing/events",
];

/// The tracepoint ids to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Events {
    syscalls: u64,
    writes: [u64; WRITES.len()],
}

impl Events {
    /// Reads the ids from tracefs and opens one set of counters on the
    /// calling thread to check that the kernel lets this process count.
    pub(crate) fn find() -> Result<Events, String> {
        let syscalls = tracepoint_id(SYSCALLS)?;
        let mut writes = [0; WRITES.len()];
        for (id, name) in writes.iter_mut().zip(WRITES) {
            *id = tracepoint_id(name)?;
        }
        let events = Events { syscalls, writes };
        let tid = nix::unistd::gettid().as_raw();
        ThreadCounters::open(tid, &events).map_err(|e| {
            format!(
                "perf_event_open of the {SYSCALLS} tracepoint failed: {e}; run as root, or \
                 allow it with `sysctl -w kernel.perf_event_paranoid=-1` (it is {} here)",
                paranoid().unwrap_or_else(|| "unreadable".into())
            )
        })?;
        Ok(events)
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, trimmed.
fn paranoid() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .map(|s| s.trim().to_string())
}

/// The id of tracepoint `name` (`group/event`), from the first events
/// directory that has it.
fn tracepoint_id(name: &str) -> Result<u64, String> {
    let mut errors = Vec::new();
    for dir in EVENT_DIRS {
        let path = format!("{dir}/{name}/id");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                return parse_id(&text)
                    .ok_or_else(|| format!("{path} holds {:?}, not a tracepoint id", text.trim()));
            }
            Err(e) => errors.push(format!("{path}: {e}")),
        }
    }
    Err(format!(
        "cannot read the id of tracepoint {name} ({}); run as root (tracefs is root's), with \
         tracefs mounted: `mount -t tracefs nodev /sys/kernel/tracing`",
        errors.join("; ")
    ))
}

/// A tracefs `id` file's number.
pub(crate) fn parse_id(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The counts of one thread, or of a set summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PerfCounts {
    pub syscalls: u64,
    pub writes: u64,
    pub task_clock_ns: u64,
}

impl PerfCounts {
    pub(crate) fn add(self, o: PerfCounts) -> PerfCounts {
        PerfCounts {
            syscalls: self.syscalls + o.syscalls,
            writes: self.writes + o.writes,
            task_clock_ns: self.task_clock_ns + o.task_clock_ns,
        }
    }
}

/// Open counters on one thread (one descriptor per event).
#[derive(Debug)]
pub(crate) struct ThreadCounters {
    syscalls: Counter,
    writes: Vec<Counter>,
    task_clock: Counter,
}

fn counter(builder: &mut Builder<'_>, tid: i32) -> std::io::Result<Counter> {
    builder
        .observe_pid(tid)
        .any_cpu()
        .include_kernel()
        .enabled(true)
        .build()
}

impl ThreadCounters {
    /// Starts counting thread `tid` of this process.
    pub(crate) fn open(tid: i32, ev: &Events) -> std::io::Result<ThreadCounters> {
        let syscalls = counter(&mut Builder::new(Tracepoint::with_id(ev.syscalls)), tid)?;
        let writes = ev
            .writes
            .iter()
            .map(|id| counter(&mut Builder::new(Tracepoint::with_id(*id)), tid))
            .collect::<std::io::Result<Vec<_>>>()?;
        let task_clock = counter(&mut Builder::new(Software::TASK_CLOCK), tid)?;
        Ok(ThreadCounters {
            syscalls,
            writes,
            task_clock,
        })
    }

    /// The counts since the counters were opened.
    pub(crate) fn read(&mut self) -> std::io::Result<PerfCounts> {
        let mut writes = 0;
        for w in &mut self.writes {
            writes += w.read()?;
        }
        Ok(PerfCounts {
            syscalls: self.syscalls.read()?,
            writes,
            task_clock_ns: self.task_clock.read()?,
        })
    }
}
