//! Which CPUs this process may use, and pinning threads to some of them.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::Error;

/// The CPUs this process may run on, ascending. If the affinity mask
/// cannot be read, `0..available_parallelism` (at least CPU 0).
pub fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => members(&set),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

fn members(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::count())
        .filter(|c| set.is_set(*c).unwrap_or(false))
        .collect()
}

/// A CPU affinity mask that is known to work here: every CPU in it is one
/// this process may use, and pinning a probe thread to it succeeded.
#[derive(Clone, Debug)]
pub struct CpuPin {
    cpus: Vec<usize>,
    set: CpuSet,
}

impl CpuPin {
    /// Checks `cpus` against the CPUs this process may use and pins a
    /// short-lived probe thread to them, so a runtime's threads can count
    /// on [`pin_current`](CpuPin::pin_current) working.
    pub fn new(cpus: &[usize]) -> Result<CpuPin, Error> {
        if cpus.is_empty() {
            return Err(Error::NoCpus);
        }
        let allowed = sched_getaffinity(Pid::from_raw(0))
            .map_err(|e| Error::Affinity(std::io::Error::from(e)))?;
        let mut set = CpuSet::new();
        for &cpu in cpus {
            if !allowed.is_set(cpu).unwrap_or(false) || set.set(cpu).is_err() {
                return Err(Error::CpuNotAllowed {
                    cpu,
                    allowed: members(&allowed),
                });
            }
        }
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        let pin = CpuPin { cpus, set };
        let probe = pin.clone();
        std::thread::spawn(move || probe.pin_current())
            .join()
            .unwrap_or_else(|_| {
                Err(Error::Pin {
                    cpus: pin.cpus.clone(),
                    source: std::io::Error::other("the probe thread panicked"),
                })
            })?;
        Ok(pin)
    }

    /// The CPUs of the mask, ascending, without repeats.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Pins the calling thread to the mask.
    pub fn pin_current(&self) -> Result<(), Error> {
        self.pin_thread(0)
    }

    /// Pins thread `tid` (of any process this one may act on; 0 is the
    /// calling thread) to the mask.
    pub fn pin_thread(&self, tid: i32) -> Result<(), Error> {
        sched_setaffinity(Pid::from_raw(tid), &self.set).map_err(|e| Error::Pin {
            cpus: self.cpus.clone(),
            source: std::io::Error::from(e),
        })
    }

    /// Pins every thread of process `pid` (its threads started later
    /// inherit the mask).
    pub fn pin_process(&self, pid: u32) -> Result<(), Error> {
        for tid in crate::cpu::tasks(pid) {
            self.pin_thread(tid)?;
        }
        Ok(())
    }
}

/// `Cpus_allowed_list` of the calling thread, as the kernel says it.
#[cfg(test)]
pub(crate) fn cpus_allowed_list() -> String {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| l.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_cpus_match_the_kernel() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]), "{cpus:?}");
        assert_eq!(cpus.len(), nix_count());
    }

    fn nix_count() -> usize {
        members(&sched_getaffinity(Pid::from_raw(0)).unwrap()).len()
    }

    #[test]
    fn pinning_restricts_cpus_allowed_list() {
        let last = *allowed_cpus().last().unwrap();
        let pin = CpuPin::new(&[last, last]).unwrap();
        assert_eq!(pin.cpus(), &[last]);
        let seen = std::thread::spawn(move || {
            pin.pin_current().unwrap();
            cpus_allowed_list()
        })
        .join()
        .unwrap();
        assert_eq!(seen, last.to_string());
        // The probe and the pinned thread left this thread alone.
        assert_eq!(
            cpus_allowed_list().split([',', '-']).count() > 1,
            allowed_cpus().len() > 1
        );
    }

    #[test]
    fn impossible_cpus_are_refused_with_the_usable_list() {
        let allowed = allowed_cpus();
        let err = CpuPin::new(&[allowed[0], 100_000]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("CPU 100000"), "{msg}");
        let list: Vec<String> = allowed.iter().map(usize::to_string).collect();
        assert!(
            msg.contains(&format!("may only use CPUs {}", list.join(","))),
            "{msg}"
        );
        assert!(matches!(CpuPin::new(&[]), Err(Error::NoCpus)));
        assert!(CpuPin::new(&[CpuSet::count()]).is_err());
    }
}
