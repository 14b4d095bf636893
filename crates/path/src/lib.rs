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
//! drop; [`cleanup_stale`] ends the processes left in those of runs that
//! died and removes them.
//!
//! The public interface is:
//! - [`Path::start`], [`Path::handle`], [`Path::stop`]: run a path;
//! - [`PathHandle::enter_server`] / [`PathHandle::enter_client`]: put a
//!   thread (say, a tokio runtime's, from `on_thread_start`) on one end;
//! - [`PathConfig`] (and its `key=value,…` spec), [`Direction`],
//!   [`QueueLimit`], [`Loss`], [`Trace`]: what the path does;
//! - [`Model`]: one direction, for tests with injected time;
//! - [`PcapConfig`] / [`PcapReport`]: the capture (`pcap=FILE`).

mod error;
mod forward;
mod model;
mod netns;
mod path;
mod pcap;
mod report;
mod spec;
mod trace;

pub use error::Error;
pub use forward::{Forwarded, SPIN};
pub use model::{Counters, DropCause, Model};
pub use netns::{NETNS_DIR, PREFIX, Removed, cleanup_stale, pids, privileged, stale};
pub use path::{CLIENT_IP, DEVICE, MTU, Path, PathHandle, SERVER_IP};
pub use pcap::{DROP_COMMENT, PcapReport};
pub use report::{DirectionReport, LATE_P99_LIMIT_US, Micros, PathReport};
pub use spec::{
    DEFAULT_PCAP_SIZE, Direction, Loss, MAX_PCAP_FILES, MIN_PCAP_SIZE, PathConfig, PcapConfig,
    QueueLimit, parse_bytes, parse_duration,
};
pub use trace::{MAX_TRACE_BYTES, MAX_TRACE_LINES, OPPORTUNITY_BYTES, Trace};
