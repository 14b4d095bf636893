//! Runtime plumbing shared by tlslab's engines: building a multi-thread
//! tokio runtime whose threads are registered, optionally pinned to CPUs
//! and CPU-time accounted (server-observed CPU in `tlslab-server`,
//! client-observed CPU in `tlslab-load`), and a byte-counting I/O wrapper.
//!
//! - [`RuntimeSpec::build`] gives a tokio runtime and the [`Threads`] that
//!   ran in it; [`Threads::cpu_time`] sums their CPU time, live threads
//!   from `/proc/self/task/<tid>/schedstat` (nanoseconds), falling back to
//!   `/proc/self/task/<tid>/stat` (clock ticks) where schedstat is missing,
//!   and keeps the time of threads that have exited.
//! - [`CpuPin`] is a checked CPU affinity mask; [`allowed_cpus`] lists the
//!   CPUs this process may use; [`thread_cpu_time`] and
//!   [`process_cpu_time`] read the calling thread's and the process's clocks;
//!   [`process_cpu`] sums the threads of another process (a peer, a child).
//! - [`CountingIo`] wraps an `AsyncRead + AsyncWrite` stream and reports
//!   every byte moved to an [`IoObserver`] ([`ByteCount`] is the plain one).
//! - [`idle::Activity`] closes proxied connections idle both ways
//!   (`tlslab dispatch`, `tlslab relay`).
//! - [`qlog::QlogDir`] is a directory of per-connection qlog files
//!   (`--qlog DIR`), capped by count and bytes, whose writers hand whole
//!   JSON-SEQ records to the file (quinn's qlog streamer writes into them).
//! - [`raise_nofile_limit`] lifts the soft file-descriptor limit to the
//!   hard one, once at start.
//! - [`tcp_info`] reads the kernel's TCP_INFO of a socket (segments, MSS,
//!   congestion window): one `unsafe` block.
//! - [`udp_queue`] reads when the kernel received the last datagram a UDP
//!   socket read (`SIOCGSTAMPNS`: one `unsafe` block) and how many it
//!   dropped for a full receive buffer.
//! - [`costs`]: what a thread set's CPU went on (`tlslab lab --explain`):
//!   per-thread syscall, write and task-clock counters from
//!   `perf_event_open`, and allocations counted by [`CountingAlloc`] (the
//!   tlslab binary's global allocator; its `unsafe impl GlobalAlloc` is the
//!   workspace's third `unsafe`), summed by [`Threads::costs`].
//! - [`cork()`] and [`uncorked`] coalesce a connection's flushed writes
//!   (TLS flights, HTTP responses, `close_notify`) into one `write` per
//!   wait of the task that owns it.
//!
//! It is not for measuring anything TLS- or HTTP-specific (handshakes,
//! requests, round trips: the engines build those on top), not for
//! single-thread or current-thread runtimes, and not portable beyond Linux:
//! per-thread CPU time and affinity come from `/proc` and
//! `sched_setaffinity`. It does not choose which CPUs an experiment uses
//! (that is `tlslab-experiment`).

pub mod cork;
pub mod costs;
mod cpu;
mod date;
pub mod idle;
mod io;
mod limits;
mod pin;
pub mod qlog;
mod runtime;
pub mod tcp_info;
pub mod udp_queue;

pub use cork::{Corked, Uncork, cork, uncorked};
pub use costs::{CountingAlloc, ThreadCosts};
pub use cpu::{CpuTime, Threads, process_cpu, process_cpu_time, thread_cpu_time};
pub use date::civil_from_days;
pub use io::{ByteCount, CountingIo, IoObserver};
pub use limits::{NofileLimit, raise_nofile_limit};
pub use pin::{CpuPin, allowed_cpus};
pub use runtime::RuntimeSpec;

/// The unit tests count allocations (`costs`): a counting allocator over
/// the system's.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: CountingAlloc<std::alloc::System> = CountingAlloc::new(std::alloc::System);

/// Why a runtime could not be built or its threads pinned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An empty CPU list was given to pin to.
    #[error("the CPU list to pin to is empty; give at least one CPU number (see `nproc`)")]
    NoCpus,
    /// A CPU this process may not use was asked for.
    #[error(
        "cannot pin to CPU {cpu}: this process may only use CPUs {}; choose among them",
        list(allowed)
    )]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may use.
        allowed: Vec<usize>,
    },
    /// The process's CPU affinity could not be read.
    #[error(
        "cannot read this process's CPU affinity: {0}; run on Linux, where sched_getaffinity is available"
    )]
    Affinity(#[source] std::io::Error),
    /// The kernel refused to pin a thread.
    #[error(
        "cannot pin a thread to CPUs {}: {source}; choose CPUs this process may use (see `taskset -cp $$`)",
        list(cpus)
    )]
    Pin {
        /// The CPUs asked for.
        cpus: Vec<usize>,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A runtime with no worker thread was asked for.
    #[error("0 worker threads cannot run the {name} runtime; use at least 1")]
    NoWorkers {
        /// The runtime's thread name.
        name: String,
    },
    /// Tokio could not start the runtime.
    #[error("cannot start the {name} runtime: {source}; lower the number of worker threads")]
    Build {
        /// The runtime's thread name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `0,1,3`: a CPU list as error messages show it.
fn list(cpus: &[usize]) -> String {
    let v: Vec<String> = cpus.iter().map(usize::to_string).collect();
    v.join(",")
}
