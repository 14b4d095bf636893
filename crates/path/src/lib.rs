//! A packet-level WAN path, mahimahi's method: the server and the client
//! each live in a network namespace of their own, joined only by a TUN
//! device in each and a user-space forwarder between them. The kernel's
//! own TCP and UDP see a real path: the connect costs a round trip, slow
//! start and loss recovery run, QUIC can cross it.
//!
//! Per direction ([`Direction`]): loss (random or Gilbert–Elliott), a
//! bottleneck link given as a mahimahi delivery trace ([`Trace`]; a
//! constant rate is a generated one) with a drop-tail queue, and a one-way
//! delay with jitter. The model ([`Model`]) has no I/O and takes time as an
//! argument; the forwarder threads drive it from the TUN devices and
//! report their counters, queueing delay, release lateness and CPU
//! ([`PathReport`]).
//!
//! Addresses ([`SERVER_IP`], [`CLIENT_IP`]) exist only inside the two
//! namespaces; nothing is routed outside them. [`Path`] removes both on
//! drop; [`cleanup_stale`] removes those of runs that died.
//!
//! The public interface is:
//! - [`Path::start`], [`Path::handle`], [`Path::stop`]: run a path;
//! - [`PathHandle::enter_server`] / [`PathHandle::enter_client`]: put a
//!   thread (say, a tokio runtime's, from `on_thread_start`) on one end;
//! - [`PathConfig`] (and its `key=value,…` spec), [`Direction`],
//!   [`QueueLimit`], [`Loss`], [`Trace`]: what the path does;
//! - [`Model`]: one direction, for tests with injected time.

mod forward;
mod model;
mod netns;
mod path;
mod report;
mod spec;
mod trace;

pub use forward::{Forwarded, SPIN};
pub use model::{Counters, Model};
pub use netns::{NETNS_DIR, PREFIX, cleanup_stale, privileged, stale};
pub use path::{CLIENT_IP, DEVICE, MTU, Path, PathHandle, SERVER_IP};
pub use report::{DirectionReport, LATE_P99_LIMIT_US, Micros, PathReport};
pub use spec::{Direction, Loss, PathConfig, QueueLimit, parse_duration};
pub use trace::{OPPORTUNITY_BYTES, Trace};

/// What can go wrong. [`Error::is_usage`] tells what the user gave (exit
/// 2) from what the machine refused (exit 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value the user wrote is not usable.
    #[error("{0}")]
    Invalid(String),
    /// A trace file could not be read.
    #[error("cannot read the trace {}: {source}", path.display())]
    TraceFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The forwarder CPUs cannot be used.
    #[error("forwarder CPUs: {0}")]
    Cpus(#[source] tlslab_runtime::Error),
    /// Not root, nor CAP_NET_ADMIN and CAP_SYS_ADMIN.
    #[error(
        "tlslab path needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network \
         namespaces and TUN devices; run it with sudo, or use `tlslab relay`, which needs no \
         privilege (TCP only, delays whole flights rather than packets)"
    )]
    NotPermitted,
    /// A set-up step (a namespace, a device, a thread) failed on an
    /// operating-system error.
    #[error("path set-up: {step}: {source}{fix}")]
    Os {
        /// The step.
        step: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
        /// What to check, after the error (may be empty).
        fix: &'static str,
    },
    /// Creating or entering a namespace or device failed: `ip`'s own
    /// message, or a set-up thread that panicked.
    #[error("path set-up: {0}")]
    Setup(String),
}

impl Error {
    /// Whether the user's input is at fault (a usage error) rather than
    /// the machine.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Invalid(_) | Error::TraceFile { .. } | Error::Cpus(_)
        )
    }

    /// A set-up step that failed on `source`, with what to check.
    pub(crate) fn os(
        step: impl Into<String>,
        fix: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let step = step.into();
        move |source| Error::Os { step, source, fix }
    }
}
