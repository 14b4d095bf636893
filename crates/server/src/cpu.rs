//! CPU time of the server's own threads, and pinning them to CPUs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;
use parking_lot::Mutex;

use crate::{Error, Result};

/// The CPU time the calling thread has used so far (user + system),
/// from `CLOCK_THREAD_CPUTIME_ID`. Zero if the clock cannot be read.
pub fn thread_cpu_time() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// The CPU time (user + system) the whole process has used so far, from
/// `getrusage(RUSAGE_SELF)`. Zero if it cannot be read.
pub fn process_cpu_time() -> Duration {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The threads of one server runtime, so their CPU time can be summed.
///
/// Live threads are read from `/proc/self/task/<tid>/schedstat` (first
/// field: nanoseconds on CPU); a thread that stops adds its final CPU time
/// to `retired` first, so nothing is lost when tokio retires a thread.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    live: Mutex<Vec<i32>>,
    retired_ns: AtomicU64,
}

impl Threads {
    /// Called on each runtime thread as it starts.
    pub(crate) fn register(&self) {
        let tid = nix::unistd::gettid().as_raw();
        self.live.lock().push(tid);
    }

    /// Called on each runtime thread as it stops.
    pub(crate) fn retire(&self) {
        let tid = nix::unistd::gettid().as_raw();
        let mut live = self.live.lock();
        let ns = thread_cpu_time().as_nanos() as u64;
        live.retain(|t| *t != tid);
        self.retired_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The CPU time used by all threads that ever ran in this runtime.
    pub(crate) fn cpu_time(&self) -> Duration {
        let live = self.live.lock();
        let mut ns = self.retired_ns.load(Ordering::Relaxed);
        for tid in live.iter() {
            ns += task_cpu_ns(*tid).unwrap_or(0);
        }
        Duration::from_nanos(ns)
    }

    /// How many threads are running now.
    #[cfg(test)]
    pub(crate) fn live_count(&self) -> usize {
        self.live.lock().len()
    }
}

/// CPU nanoseconds of thread `tid` of this process: schedstat if the
/// kernel provides it, else utime + stime from `stat` (clock-tick grain).
fn task_cpu_ns(tid: i32) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        && let Some(ns) = s.split_whitespace().next().and_then(|f| f.parse().ok())
    {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let ticks = stat_ticks(&stat)?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|h| *h > 0)
        .unwrap_or(100) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

/// utime + stime (clock ticks) from a `/proc/.../stat` line: the 14th and
/// 15th fields, counted after the parenthesised command name, which may
/// itself hold spaces and parentheses.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A CPU affinity mask for `cpus`, checked against the CPUs this process
/// may use.
pub(crate) fn cpu_set(cpus: &[usize]) -> Result<CpuSet> {
    if cpus.is_empty() {
        return Err(Error::Config(
            "the CPU list to pin to is empty; give at least one CPU number (see `nproc`)".into(),
        ));
    }
    let allowed = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| Error::Runtime(format!("cannot read this process's CPU affinity: {e}")))?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        let ok = allowed.is_set(cpu).unwrap_or(false);
        if !ok {
            let usable: Vec<String> = (0..CpuSet::count())
                .filter(|c| allowed.is_set(*c).unwrap_or(false))
                .map(|c| c.to_string())
                .collect();
            return Err(Error::Config(format!(
                "cannot pin to CPU {cpu}: this process may only use CPUs {}; choose among them",
                usable.join(",")
            )));
        }
        set.set(cpu)
            .map_err(|e| Error::Config(format!("cannot pin to CPU {cpu}: {e}")))?;
    }
    Ok(set)
}

/// Pins the calling thread to `set`.
pub(crate) fn pin_current(set: &CpuSet) -> Result<()> {
    sched_setaffinity(Pid::from_raw(0), set)
        .map_err(|e| Error::Runtime(format!("cannot set CPU affinity: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_times_are_summed_and_kept_after_exit() {
        let threads = std::sync::Arc::new(Threads::default());
        let t = threads.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let (tx2, rx2) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            t.register();
            let start = thread_cpu_time();
            while thread_cpu_time() - start < Duration::from_millis(30) {}
            tx.send(()).unwrap();
            rx2.recv().unwrap();
            t.retire();
        });
        rx.recv().unwrap();
        let live = threads.cpu_time();
        assert!(live >= Duration::from_millis(25), "{live:?}");
        assert_eq!(threads.live_count(), 1);
        tx2.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(threads.live_count(), 0);
        let after = threads.cpu_time();
        assert!(after >= live, "{after:?} < {live:?}");
    }

    #[test]
    fn stat_fallback_parses() {
        let line = "4242 (tokio (rt) x) S 1 2 3 4 5 6 7 8 9 10 17 5 0 0 20 0 1 0";
        assert_eq!(stat_ticks(line), Some(22));
        assert_eq!(stat_ticks("garbage"), None);
        let tid = nix::unistd::gettid().as_raw();
        let own = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        assert!(stat_ticks(&own).is_some(), "{own}");
        let start = thread_cpu_time();
        while thread_cpu_time() - start < Duration::from_millis(5) {}
        assert!(task_cpu_ns(tid).unwrap() > 0);
    }

    #[test]
    fn impossible_cpus_are_refused_with_the_usable_list() {
        let err = cpu_set(&[CpuSet::count() + 5]).unwrap_err().to_string();
        assert!(err.contains("may only use CPUs"), "{err}");
        assert!(cpu_set(&[]).is_err());
        let cpu0 = (0..CpuSet::count())
            .find(|c| {
                sched_getaffinity(Pid::from_raw(0))
                    .unwrap()
                    .is_set(*c)
                    .unwrap()
            })
            .unwrap();
        cpu_set(&[cpu0]).unwrap();
    }
}
