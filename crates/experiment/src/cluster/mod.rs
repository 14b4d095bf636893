//! `tlslab cluster`: seed 000's cluster experiment (Fig. 9).
//!
//! N nodes (default 3, each with its own session cache and its own ticket
//! keys) sit behind a dispatcher; a closed-loop load opens one connection
//! per request and resumes a requested share of them. For each resumption
//! mechanism (TLS 1.2 session IDs, TLS 1.2 tickets, TLS 1.3 tickets), each
//! requested reuse and each arm (a dispatch policy with per-node state, or
//! round-robin with shared state: a Redis-shared session cache or shared
//! ticket keys), one cell measures:
//! - cluster CPU per request, server-observed: the nodes' CPU time summed
//!   over the nodes, divided by the requests they served;
//! - achieved resumption, server-observed: resumed ÷ all handshakes the
//!   nodes completed;
//! - routing efficiency: the share of resumption attempts sent to a node
//!   that accepted them, dispatcher-observed (`tlslab dispatch`'s
//!   `/metrics`); for HAProxy, which cannot tell, the nodes' resumed
//!   handshakes ÷ the client's resumption offers;
//! - throughput, client-observed.
//!
//! Every figure of a cell is taken over the same window: the cell's load
//! run (no warm-up), from just before its first connection to just after
//! its last. Nodes, dispatcher and load are fresh in every cell.
//!
//! Nodes are `tlslab serve` engines embedded in this process (each its own
//! runtime with one worker thread; CPU from its threads' schedstat), or
//! nginx processes (`-p DIR`, `master_process off`, one per node; CPU from
//! `/proc/PID/task/*/schedstat`, resumption from an access log of
//! `$ssl_session_reused`). The dispatcher is `tlslab dispatch` embedded
//! (its own one-thread runtime) or an `haproxy` process in TCP mode with
//! the stick-table recipe for TLS 1.2 session IDs.
//!
//! Over QUIC (`--h3`, [`ClusterConfig::h3`]) the nodes also serve HTTP/3
//! with QUIC-LB connection IDs (`quic.rs`), the dispatcher is `tlslab
//! dispatch --udp` (`dispatch.rs`), the load opens each connection from a
//! new source port, and shared ticket keys come from Redis.
//!
//! CPUs: with two or more CPUs, every node runs on the first; the load,
//! the dispatcher and `redis-server` share the second. The nodes together
//! are one CPU of capacity: the cluster's throughput is what three nodes
//! sharing it sustain.

mod dispatch;
mod nodes;
mod plan;
mod quic;
mod report;
mod run;

pub use nodes::{find_tool, openssl_groups};
pub use plan::{ClusterConfig, ClusterPlacement, DispatcherKind, Mechanism, NodeKind, Sharing};
pub use report::{
    ClusterCell, ClusterReport, ClusterText, RedisGets, SCHEMA_VERSION, Skipped, TargetCheck,
};
pub use run::run;
