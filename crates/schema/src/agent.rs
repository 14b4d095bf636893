//! What one agent of a sharded run writes into its `--out` directory
//! besides its request log, report and histograms: `complete.json` (the
//! completion marker) and `counters.json` (every counter but the
//! histograms).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One agent's place in a sharded run: agent `index` (1-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardId {
    /// 1..=count.
    pub index: u32,
    /// Agents in the run.
    pub count: u32,
}

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `complete.json`: what an agent says about its finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentMarker {
    /// Layout version of the agent directory (1).
    pub schema_version: u32,
    /// Which agent this is.
    pub shard: ShardId,
    /// The shared start time asked for (`--start-at`), Unix ms; `None`
    /// when the agent started at once.
    pub start_at_unix_ms: Option<u64>,
    /// When the agent's measurement window began, Unix ms by its clock.
    pub window_start_unix_ms: u64,
    /// The window's length in seconds (the agent's monotonic clock).
    pub measured_s: f64,
    /// Rows in `requests.csv` (= requests attempted in the window).
    pub csv_rows: u64,
    /// The host the agent ran on (`HOSTNAME`, else `/etc/hostname`).
    pub host: String,
    /// The run's `--seed` before sharding (each agent's report shows its
    /// own derived seed).
    pub run_seed: u64,
    /// The run's `-c`, `-n` and `--rate` before sharding; `None` in the
    /// output of an agent older than this field.
    #[serde(default)]
    pub run_flags: Option<RunFlags>,
}

/// The flags a sharded run splits between its agents, as given to each
/// agent (before the split): agents of one run agree on them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFlags {
    /// `-c`: clients of the whole run.
    pub clients: u64,
    /// `-n`: requests of the whole run, if bounded by a count.
    pub requests: Option<u64>,
    /// `--rate`: arrivals per second of the whole run (open loop).
    pub rate: Option<f64>,
}

/// `counters.json`: the counters of an agent's statistics other than its
/// histograms, so that a merge adds them exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentCounters {
    /// Exact sums per phase, µs, in the order connect, handshake_full,
    /// handshake_resumed, ttfb, transfer, total.
    pub phase_sum_us: Vec<u64>,
    /// Exact maxima per phase, µs, in the same order.
    pub phase_max_us: Vec<u64>,
    /// Requests attempted.
    pub attempted: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests with a 2xx status.
    pub succeeded: u64,
    /// Response body bytes.
    pub body_bytes: u64,
    /// Responses by HTTP status.
    pub status: BTreeMap<u16, u64>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Full handshakes: count, bytes out, bytes in, round trips.
    pub full: [u64; 4],
    /// Resumed handshakes, as `full`.
    pub resumed: [u64; 4],
    /// HelloRetryRequests.
    pub hrr: u64,
    /// Handshakes that offered a stored session.
    pub offered: u64,
    /// (full, resumed) handshakes by protocol version.
    pub by_version: BTreeMap<String, (u64, u64)>,
    /// Handshakes by cipher suite.
    pub suites: BTreeMap<String, u64>,
    /// Handshakes by key-exchange group.
    pub groups: BTreeMap<String, u64>,
    /// Connections that sent early data.
    pub early_data_sent: u64,
    /// Of those, the ones accepted.
    pub early_data_accepted: u64,
    /// Retried attempts.
    pub retries: u64,
}
