//! The forwarder: one thread per direction reads IP packets from one TUN
//! device, runs them through the direction's [`Model`], and writes each to
//! the other TUN device when its time comes.
//!
//! With a capture (`pcap=FILE`), each packet forwarded or dropped is handed
//! to the capture's writer thread ([`crate::pcap`]) without waiting.
//!
//! Timing: the thread sleeps in `ppoll` on the TUN device with a 1 ns timer
//! slack until [`SPIN`] before the next release, then spins the rest, so a
//! release is not late by a sleeping thread's overshoot. Each release's
//! lateness (actual minus scheduled time) is recorded.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;
use tlslab_runtime::{CpuPin, thread_cpu_time};
use tun_rs::SyncDevice;

use crate::model::{Counters, Model, histogram};
use crate::pcap::{Mark, Tap};

/// How long before a release the forwarder stops sleeping and spins.
pub const SPIN: Duration = Duration::from_micros(50);

/// The longest sleep, so a stop request is seen within it.
const MAX_WAIT: Duration = Duration::from_millis(5);

/// Packets read per round before the model is polled again.
const BATCH: usize = 64;

/// What one forwarder thread did.
#[derive(Clone, Debug)]
pub struct Forwarded {
    /// The model's counters.
    pub counters: Counters,
    /// Packets the far TUN device refused.
    pub dropped_write: u64,
    /// Release lateness (actual minus scheduled time), nanoseconds.
    pub lateness: Histogram<u64>,
    /// The thread's CPU time.
    pub cpu: Duration,
    /// The thread's lifetime.
    pub wall: Duration,
    /// Whether the thread ran under SCHED_FIFO (see `RT_PRIORITY`).
    pub realtime: bool,
}

/// The SCHED_FIFO priority of the forwarder threads. A busy machine
/// would otherwise delay their wake-ups by milliseconds; a forwarder only
/// spins for [`SPIN`] before a release and sleeps otherwise, and the
/// kernel's real-time throttling keeps 5 % of each CPU for everyone else.
pub const RT_PRIORITY: u32 = 20;

/// Puts the calling thread under SCHED_FIFO with `chrt` (util-linux; the
/// crate forbids the unsafe `sched_setscheduler` call). Returns true if
/// and only if it took effect; a warning otherwise.
fn realtime() -> bool {
    let tid = nix::unistd::gettid().to_string();
    let ok = std::process::Command::new("chrt")
        .args(["-f", "-p", &RT_PRIORITY.to_string(), &tid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        tracing::warn!(
            "path forwarder: cannot run under SCHED_FIFO (chrt -f -p {RT_PRIORITY} {tid} failed); \
             on a busy machine its releases will be late"
        );
    }
    ok
}

pub(crate) struct Forwarder {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Forwarded>>,
}

impl Forwarder {
    pub(crate) fn spawn(
        name: &str,
        rx: Arc<SyncDevice>,
        tx: Arc<SyncDevice>,
        model: Model,
        epoch: Instant,
        pin: Option<CpuPin>,
        tap: Option<Tap>,
    ) -> std::io::Result<Forwarder> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("tlslab-path-{name}"))
            .spawn(move || {
                if let Some(pin) = pin
                    && let Err(e) = pin.pin_current()
                {
                    tracing::warn!("path forwarder: {e}");
                }
                let realtime = realtime();
                let mut done = run(&rx, &tx, model, epoch, &flag, tap.as_ref());
                done.realtime = realtime;
                done
            })?;
        Ok(Forwarder {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and returns what it did (`None` if it panicked).
    pub(crate) fn stop(mut self) -> Option<Forwarded> {
        self.finish()
    }

    fn finish(&mut self) -> Option<Forwarded> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take()?.join().ok()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn ns_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

fn run(
    rx: &SyncDevice,
    tx: &SyncDevice,
    mut model: Model,
    epoch: Instant,
    stop: &AtomicBool,
    tap: Option<&Tap>,
) -> Forwarded {
    let started = Instant::now();
    let cpu0 = thread_cpu_time();
    // Sleep precisely: the default 50 µs timer slack would be added to
    // every wake-up.
    let _ = nix::sys::prctl::set_timerslack(1);
    let mut lateness = histogram();
    let mut dropped_write = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = ns_since(epoch);
        let next = model.poll(now, |release, data| {
            let _ = lateness.record(now.saturating_sub(release));
            let sent = tx.send(&data).is_ok();
            if !sent {
                dropped_write += 1;
            }
            if let Some(tap) = tap {
                tap.put(
                    now,
                    if sent {
                        Mark::Forwarded
                    } else {
                        Mark::WriteRefused
                    },
                    data,
                );
            }
        });
        let mut got = 0;
        while got < BATCH {
            match rx.recv(&mut buf) {
                Ok(n) if n > 0 => {
                    let now = ns_since(epoch);
                    if let Some((cause, data)) = model.arrive(now, buf[..n].to_vec())
                        && let Some(tap) = tap
                    {
                        tap.put(now, Mark::Dropped(cause), data);
                    }
                    got += 1;
                }
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("path forwarder: reading the TUN device: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                    break;
                }
            }
        }
        if got > 0 {
            continue;
        }
        let now = ns_since(epoch);
        let wait = next
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        if wait > SPIN {
            let sleep = wait - SPIN;
            let mut fds = [PollFd::new(rx.as_fd(), PollFlags::POLLIN)];
            let _ = ppoll(&mut fds, Some(TimeSpec::from_duration(sleep)), None);
        } else {
            std::hint::spin_loop();
        }
    }
    Forwarded {
        counters: model.counters().clone(),
        dropped_write,
        lateness,
        cpu: thread_cpu_time().saturating_sub(cpu0),
        wall: started.elapsed(),
        realtime: false,
    }
}
