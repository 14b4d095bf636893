//! Building a multi-thread tokio runtime whose threads are accounted.

use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::{CpuPin, Error, Threads};

/// What runtime to build: a multi-thread tokio runtime (I/O and time
/// enabled) whose every thread, workers and blocking pool alike, registers
/// in a [`Threads`] as it starts, retires as it stops, and is pinned to
/// `pin` if one is given.
#[derive(Clone, Debug)]
pub struct RuntimeSpec {
    /// Name of the runtime's threads (as `top -H` shows them).
    pub name: String,
    /// Number of worker threads (at least 1).
    pub worker_threads: usize,
    /// CPUs to pin every thread of the runtime to; `None` leaves them free.
    pub pin: Option<CpuPin>,
}

impl RuntimeSpec {
    /// A runtime named `name` with `worker_threads` unpinned workers.
    pub fn new(name: impl Into<String>, worker_threads: usize) -> RuntimeSpec {
        RuntimeSpec {
            name: name.into(),
            worker_threads,
            pin: None,
        }
    }

    /// The same runtime, its threads pinned to `pin` (or left free: `None`).
    pub fn pinned(mut self, pin: Option<CpuPin>) -> RuntimeSpec {
        self.pin = pin;
        self
    }

    /// Builds the runtime. The returned [`Threads`] sums the CPU time of
    /// its threads; the thread that calls `block_on` is not one of them
    /// unless it [`register`](Threads::register)s itself.
    ///
    /// A thread that cannot be pinned (the mask was checked when the
    /// [`CpuPin`] was made, so this is rare) runs unpinned with a warning.
    pub fn build(self) -> Result<(Runtime, Arc<Threads>), Error> {
        if self.worker_threads == 0 {
            return Err(Error::NoWorkers { name: self.name });
        }
        let threads = Arc::new(Threads::default());
        let (on_start, on_stop) = (threads.clone(), threads.clone());
        let pin = self.pin;
        let name = self.name.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.worker_threads)
            .thread_name(self.name.clone())
            .enable_all()
            .on_thread_start(move || {
                on_start.register();
                if let Some(pin) = &pin
                    && let Err(e) = pin.pin_current()
                {
                    tracing::warn!(runtime = %name, "{e}");
                }
            })
            .on_thread_stop(move || on_stop.retire())
            .build()
            .map_err(|source| Error::Build {
                name: self.name,
                source,
            })?;
        Ok((rt, threads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pin::cpus_allowed_list;
    use crate::{allowed_cpus, thread_cpu_time};
    use std::time::Duration;

    #[test]
    fn workers_are_pinned_registered_and_accounted() {
        let cpu = allowed_cpus()[0];
        let pin = CpuPin::new(&[cpu]).unwrap();
        let (rt, threads) = RuntimeSpec::new("rt-test", 2)
            .pinned(Some(pin))
            .build()
            .unwrap();
        let before = threads.cpu_time().total();
        let (lists, spun) = rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..2 {
                tasks.push(tokio::spawn(async {
                    let start = thread_cpu_time();
                    while thread_cpu_time() - start < Duration::from_millis(60) {}
                    (cpus_allowed_list(), thread_cpu_time() - start)
                }));
            }
            let mut lists = Vec::new();
            let mut spun = Duration::ZERO;
            for t in tasks {
                let (l, s) = t.await.unwrap();
                lists.push(l);
                spun += s;
            }
            (lists, spun)
        });
        assert!(lists.iter().all(|l| *l == cpu.to_string()), "{lists:?}");
        assert!(threads.live_count() >= 2, "{}", threads.live_count());
        let used = threads.cpu_time().total() - before;
        assert!(
            used + Duration::from_millis(20) >= spun,
            "{used:?} < {spun:?}"
        );
        // The blocking pool is registered too.
        let list = rt.block_on(async {
            tokio::task::spawn_blocking(cpus_allowed_list)
                .await
                .unwrap()
        });
        assert_eq!(list, cpu.to_string());
        let live = threads.cpu_time();
        rt.shutdown_timeout(Duration::from_secs(5));
        assert_eq!(threads.live_count(), 0);
        assert!(threads.cpu_time().total() >= live.total());
    }

    #[test]
    fn zero_workers_is_an_error_not_a_panic() {
        let err = RuntimeSpec::new("none", 0).build().unwrap_err();
        assert!(err.to_string().contains("use at least 1"), "{err}");
    }

    #[test]
    fn unpinned_runtime_keeps_the_process_mask() {
        let want = cpus_allowed_list();
        let (rt, threads) = RuntimeSpec::new("free", 1).build().unwrap();
        let got = rt.block_on(async { tokio::spawn(async { cpus_allowed_list() }).await.unwrap() });
        assert_eq!(got, want);
        assert_eq!(threads.live_count(), 1);
    }
}
