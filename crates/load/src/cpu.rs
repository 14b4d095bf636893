//! CPU time of the engine's own threads, and pinning them.
//!
//! The engine counts only its own threads (tokio workers, its blocking
//! pool, and the thread that called [`crate::run`]), not the whole process,
//! so a server embedded in the same process (as `tlslab lab` does) is not
//! billed to the client. User and system time come from
//! `/proc/self/task/<tid>/stat`, in clock ticks (usually 10 ms).

use std::time::Duration;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use parking_lot::Mutex;

use crate::Error;

/// User and system CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub(crate) user: Duration,
    pub(crate) sys: Duration,
}

impl CpuTimes {
    pub(crate) fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }
}

/// The threads of the engine, so their CPU time can be summed.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    live: Mutex<Vec<i32>>,
    /// (user, system) ticks of threads that have exited.
    retired: Mutex<(u64, u64)>,
}

impl Threads {
    /// Adds the calling thread.
    pub(crate) fn register(&self) {
        self.live.lock().push(nix::unistd::gettid().as_raw());
    }

    /// Moves the calling thread, which is about to exit, to the retired sum.
    pub(crate) fn retire(&self) {
        let tid = nix::unistd::gettid().as_raw();
        let ticks = task_ticks(tid).unwrap_or((0, 0));
        let mut live = self.live.lock();
        live.retain(|t| *t != tid);
        let mut r = self.retired.lock();
        r.0 += ticks.0;
        r.1 += ticks.1;
    }

    /// CPU time of every thread that ever registered.
    pub(crate) fn times(&self) -> CpuTimes {
        let live = self.live.lock();
        let (mut user, mut sys) = *self.retired.lock();
        for &tid in live.iter() {
            if let Some((u, s)) = task_ticks(tid) {
                user += u;
                sys += s;
            }
        }
        let hz = clock_ticks_per_second();
        let d = |ticks: u64| Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz);
        CpuTimes {
            user: d(user),
            sys: d(sys),
        }
    }
}

fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|h| *h > 0)
        .unwrap_or(100) as u64
}

/// (utime, stime) in clock ticks of thread `tid` of this process.
fn task_ticks(tid: i32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat_ticks(&stat)
}

/// utime and stime: fields 14 and 15 of a `stat` line, counted after the
/// parenthesised command name (which may hold spaces and parentheses).
fn stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The number of CPUs this process may run on.
pub(crate) fn allowed_cpus() -> usize {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|c| set.is_set(*c).unwrap_or(false))
            .count()
            .max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// An affinity mask for `cpus`, checked against the CPUs this process may
/// use, and checked to work by pinning a probe thread.
pub(crate) fn pin_set(cpus: &[usize]) -> Result<CpuSet, Error> {
    if cpus.is_empty() {
        return Err(Error::Config(
            "the CPU list to pin the engine to is empty; give at least one CPU number (see `nproc`)"
                .into(),
        ));
    }
    let allowed = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| Error::Runtime(format!("cannot read this process's CPU affinity: {e}")))?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if !allowed.is_set(cpu).unwrap_or(false) {
            let usable: Vec<String> = (0..CpuSet::count())
                .filter(|c| allowed.is_set(*c).unwrap_or(false))
                .map(|c| c.to_string())
                .collect();
            return Err(Error::Config(format!(
                "cannot pin the engine to CPU {cpu}: this process may only use CPUs {}; choose among them",
                usable.join(",")
            )));
        }
        set.set(cpu)
            .map_err(|e| Error::Config(format!("cannot pin the engine to CPU {cpu}: {e}")))?;
    }
    std::thread::spawn(move || pin_current(&set))
        .join()
        .map_err(|_| Error::Runtime("the CPU-pinning probe thread panicked".into()))??;
    Ok(set)
}

/// Pins the calling thread to `set`.
pub(crate) fn pin_current(set: &CpuSet) -> Result<(), Error> {
    sched_setaffinity(Pid::from_raw(0), set)
        .map_err(|e| Error::Runtime(format!("cannot pin an engine thread: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_odd_command_names() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0";
        assert_eq!(stat_ticks(line), Some((111, 222)));
        assert_eq!(stat_ticks("garbage"), None);
    }

    #[test]
    fn busy_thread_accumulates_cpu() {
        let t = Threads::default();
        t.register();
        let before = t.times();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(150) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let used = t.times().since(before);
        assert!(
            used.user + used.sys >= Duration::from_millis(50),
            "{used:?}"
        );
    }
}
