//! CPU time: the calling thread's, the process's, and the sum over a set
//! of registered threads (live ones read from `/proc`, exited ones kept).

use std::ops::Add;
use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use parking_lot::Mutex;

use crate::costs::{Extra, Probe, ThreadCosts};

/// The CPU time the calling thread has used so far (user + system),
/// from `CLOCK_THREAD_CPUTIME_ID` (nanoseconds). Zero if the clock cannot
/// be read.
pub fn thread_cpu_time() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// The CPU time (user + system) the whole process has used so far, from
/// `getrusage(RUSAGE_SELF)` (microseconds). Zero if it cannot be read.
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

/// User and system CPU time.
///
/// Their sum is the precise figure (schedstat nanoseconds where the kernel
/// has them); the split between user and system follows the ratio of the
/// clock-tick `utime`/`stime` counters, as the kernel itself splits a
/// thread's runtime. A thread with no tick yet counts as all user time.
/// [`since`](CpuTime::since) splits a window by the ticks of that window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel on the threads' behalf.
    pub sys: Duration,
    /// The `utime` and `stime` clock ticks the split came from.
    ticks: [u64; 2],
}

impl CpuTime {
    /// User plus system time.
    pub fn total(self) -> Duration {
        self.user + self.sys
    }

    /// The time used since `earlier`: the difference of the totals
    /// (saturating at zero), split in the ratio of the ticks counted in
    /// between. (Subtracting each part would not keep the total: both
    /// parts follow the whole-life tick ratio, which moves.)
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        let total = self.total().saturating_sub(earlier.total());
        let ns = total.as_nanos().min(u128::from(u64::MAX)) as u64;
        split(
            ns,
            self.ticks[0].saturating_sub(earlier.ticks[0]),
            self.ticks[1].saturating_sub(earlier.ticks[1]),
        )
    }
}

impl Add for CpuTime {
    type Output = CpuTime;

    fn add(self, o: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user + o.user,
            sys: self.sys + o.sys,
            ticks: [self.ticks[0] + o.ticks[0], self.ticks[1] + o.ticks[1]],
        }
    }
}

/// A set of threads whose CPU time is summed: typically every thread of
/// one runtime (see [`crate::RuntimeSpec::build`]), plus any other thread
/// that [`register`](Threads::register)s itself.
///
/// A thread registers as it starts and [`retire`](Threads::retire)s as it
/// stops; retiring adds its final CPU time to a kept sum, so nothing is
/// lost when tokio ends an idle blocking thread.
#[derive(Debug, Default)]
pub struct Threads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    live: Vec<Member>,
    retired: CpuTime,
    /// The probes' final counts of retired threads.
    retired_extra: Extra,
}

/// A live registered thread, probed if [`crate::costs::enable`] was called
/// before it registered.
#[derive(Debug)]
struct Member {
    tid: i32,
    probe: Option<Probe>,
}

impl Member {
    fn extra(&mut self) -> Extra {
        self.probe.as_mut().map_or(Extra::UNPROBED, Probe::read)
    }
}

impl Threads {
    /// Adds the calling thread (once; registering again does nothing).
    pub fn register(&self) {
        let tid = nix::unistd::gettid().as_raw();
        let mut inner = self.inner.lock();
        if !inner.live.iter().any(|m| m.tid == tid) {
            let probe = Probe::attach(tid);
            inner.live.push(Member { tid, probe });
        }
    }

    /// Moves the calling thread, which is about to exit, from the live set
    /// to the kept sum. Does nothing for a thread that did not register.
    pub fn retire(&self) {
        let tid = nix::unistd::gettid().as_raw();
        let mut inner = self.inner.lock();
        let Some(i) = inner.live.iter().position(|m| m.tid == tid) else {
            return;
        };
        let mut member = inner.live.swap_remove(i);
        let last = task_cpu(tid).unwrap_or_default();
        inner.retired = inner.retired + last;
        inner.retired_extra = inner.retired_extra.add(member.extra());
    }

    /// The CPU time used by every thread that ever registered: the live
    /// ones as of now, plus the retired ones' final figures.
    pub fn cpu_time(&self) -> CpuTime {
        let inner = self.inner.lock();
        inner
            .live
            .iter()
            .filter_map(|m| task_cpu(m.tid))
            .fold(inner.retired, Add::add)
    }

    /// [`cpu_time`](Self::cpu_time) with what the probes counted (see
    /// [`crate::costs`]): syscalls, writes, the task clock and allocations
    /// of every thread that ever registered, each `None` unless every one
    /// of them was probed.
    pub fn costs(&self) -> ThreadCosts {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let mut cpu = inner.retired;
        let mut extra = inner.retired_extra;
        for m in &mut inner.live {
            cpu = cpu + task_cpu(m.tid).unwrap_or_default();
            extra = extra.add(m.extra());
        }
        extra.with_cpu(cpu)
    }

    /// The time the live threads have spent runnable but waiting for a
    /// CPU (the second field of `/proc/self/task/<tid>/schedstat`): with
    /// [`cpu_time`](Self::cpu_time), how much CPU they wanted. Zero where
    /// the kernel has no schedstat. Retired threads are not counted, so use
    /// it for rates over short windows (a saturating difference).
    pub fn run_queue_wait(&self) -> Duration {
        let inner = self.inner.lock();
        let ns: u64 = inner
            .live
            .iter()
            .filter_map(|m| {
                let tid = m.tid;
                let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
                s.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .sum();
        Duration::from_nanos(ns)
    }

    /// How many registered threads have not retired.
    pub fn live_count(&self) -> usize {
        self.inner.lock().live.len()
    }
}

/// The CPU time of every live thread of process `pid` (any process this
/// one may read in `/proc`, such as a child): the sum of
/// `/proc/PID/task/*`, read as for [`Threads`]. Zero for a process that
/// is gone.
pub fn process_cpu(pid: u32) -> CpuTime {
    tasks(pid)
        .into_iter()
        .filter_map(|tid| task_cpu_in(&format!("/proc/{pid}/task/{tid}")))
        .fold(CpuTime::default(), Add::add)
}

/// The thread ids of process `pid` (empty if it is gone).
pub(crate) fn tasks(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// CPU time of thread `tid` of this process.
fn task_cpu(tid: i32) -> Option<CpuTime> {
    task_cpu_in(&format!("/proc/self/task/{tid}"))
}

/// CPU time of the thread whose `/proc` directory is `dir`: the total
/// from `schedstat` (nanoseconds) where the kernel provides it, else from
/// `stat` (clock ticks), split into user and system by the `stat` tick
/// counters.
fn task_cpu_in(dir: &str) -> Option<CpuTime> {
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let (utime, stime) = stat_ticks(&stat)?;
    let total_ns = std::fs::read_to_string(format!("{dir}/schedstat"))
        .ok()
        .and_then(|s| schedstat_ns(&s))
        .unwrap_or_else(|| ticks_to_ns(utime.saturating_add(stime)));
    Some(split(total_ns, utime, stime))
}

/// The first field of a `schedstat` line: nanoseconds spent on a CPU.
fn schedstat_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

/// utime and stime (clock ticks): the 14th and 15th fields of a
/// `/proc/.../stat` line, counted after the parenthesised command name,
/// which may itself hold spaces and parentheses.
fn stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

fn ticks_to_ns(ticks: u64) -> u64 {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|h| *h > 0)
        .map_or(100, |h| h as u64);
    (u128::from(ticks) * 1_000_000_000 / u128::from(hz)).min(u128::from(u64::MAX)) as u64
}

/// Splits `total_ns` into user and system time in the ratio utime:stime.
fn split(total_ns: u64, utime: u64, stime: u64) -> CpuTime {
    let ticks = u128::from(utime) + u128::from(stime);
    let sys_ns = (u128::from(total_ns) * u128::from(stime))
        .checked_div(ticks)
        .map_or(0, |ns| ns as u64);
    CpuTime {
        user: Duration::from_nanos(total_ns - sys_ns),
        sys: Duration::from_nanos(sys_ns),
        ticks: [utime, stime],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::mpsc;

    /// Spins until the calling thread has used `d` more CPU time.
    fn spin(d: Duration) -> Duration {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - start < d {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        thread_cpu_time() - start
    }

    #[test]
    fn stat_fields_after_odd_command_names() {
        let line = "4242 (tokio (rt) x) S 1 2 3 4 5 6 7 8 9 10 17 5 0 0 20 0 1 0";
        assert_eq!(stat_ticks(line), Some((17, 5)));
        assert_eq!(stat_ticks("garbage"), None);
        assert_eq!(stat_ticks("1 (x) S 1 2"), None);
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        assert!(stat_ticks(&own).is_some(), "{own}");
    }

    #[test]
    fn schedstat_first_field_is_nanoseconds() {
        assert_eq!(schedstat_ns("183262 2656484 3\n"), Some(183_262));
        assert_eq!(schedstat_ns(""), None);
        assert_eq!(schedstat_ns("x 1 2"), None);
    }

    #[test]
    fn stat_fallback_converts_ticks_at_the_clock_rate() {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as u64;
        assert_eq!(ticks_to_ns(hz), 1_000_000_000);
        assert_eq!(ticks_to_ns(0), 0);
        assert_eq!(ticks_to_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn split_keeps_the_total_and_follows_the_tick_ratio() {
        let t = split(1_000, 3, 1);
        assert_eq!(t.total(), Duration::from_nanos(1_000));
        assert_eq!(t.sys, Duration::from_nanos(250));
        assert_eq!(split(1_000, 0, 0).user, Duration::from_nanos(1_000));
        assert_eq!(split(7, 0, 5).sys, Duration::from_nanos(7));
        assert_eq!(
            split(u64::MAX, u64::MAX, u64::MAX).total().as_nanos(),
            u64::MAX as u128
        );
    }

    #[test]
    fn a_window_keeps_its_total_and_is_split_by_its_own_ticks() {
        // Half and half over the thread's life so far...
        let before = split(1_000_000, 50, 50);
        // ...then 100 µs more, all of it in the kernel: the whole-life
        // split now gives user less than before.
        let after = split(1_100_000, 50, 70);
        assert!(after.user < before.user);
        let d = after.since(before);
        assert_eq!(d.total(), Duration::from_micros(100));
        assert_eq!(d.sys, Duration::from_micros(100));
        // A window without a tick counts as user time; a later `earlier`
        // saturates at zero.
        let d = split(1_200_000, 50, 70).since(after);
        assert_eq!(
            (d.user, d.sys),
            (Duration::from_micros(100), Duration::ZERO)
        );
        assert_eq!(before.since(after).total(), Duration::ZERO);
        // Sums keep the ticks, so a window over a set splits by the set's.
        let set = before + split(500, 1, 3);
        assert_eq!(set.since(before).sys, Duration::from_nanos(375));
    }

    #[test]
    fn busy_thread_grows_by_about_the_time_it_spun() {
        let t = Threads::default();
        t.register();
        let before = t.cpu_time();
        let spun = spin(Duration::from_millis(200));
        let used = t.cpu_time().since(before).total();
        // schedstat and the thread clock read the same counter; allow for
        // the reads themselves and for the stat fallback's tick grain.
        assert!(
            used + Duration::from_millis(20) >= spun,
            "{used:?} < {spun:?}"
        );
        assert!(
            used <= spun + Duration::from_millis(40),
            "{used:?} > {spun:?}"
        );
    }

    #[test]
    fn times_are_summed_over_threads_and_kept_after_exit() {
        let threads = Arc::new(Threads::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let mut handles = Vec::new();
        let go_rx = Arc::new(Mutex::new(go_rx));
        for _ in 0..2 {
            let (t, ready_tx, go_rx) = (threads.clone(), ready_tx.clone(), go_rx.clone());
            handles.push(std::thread::spawn(move || {
                t.register();
                ready_tx.send(spin(Duration::from_millis(40))).unwrap();
                go_rx.lock().recv().unwrap();
                t.retire();
            }));
        }
        let spun: Duration = (0..2).map(|_| ready_rx.recv().unwrap()).sum();
        assert_eq!(threads.live_count(), 2);
        let live = threads.cpu_time().total();
        assert!(
            live + Duration::from_millis(20) >= spun,
            "{live:?} < {spun:?}"
        );
        for _ in 0..2 {
            go_tx.send(()).unwrap();
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(threads.live_count(), 0);
        let after = threads.cpu_time().total();
        assert!(after >= live, "{after:?} < {live:?}");
        assert!(
            after <= live + Duration::from_millis(40),
            "{after:?} ≫ {live:?}"
        );
    }

    #[test]
    fn unregistered_threads_are_not_counted() {
        let t = Threads::default();
        t.retire();
        assert_eq!(t.live_count(), 0);
        spin(Duration::from_millis(20));
        assert_eq!(t.cpu_time(), CpuTime::default());
        t.register();
        t.register();
        assert_eq!(t.live_count(), 1);
    }

    #[test]
    fn process_clock_covers_the_thread_clock() {
        spin(Duration::from_millis(20));
        assert!(process_cpu_time() >= thread_cpu_time());
        assert!(thread_cpu_time() >= Duration::from_millis(20));
    }
}
