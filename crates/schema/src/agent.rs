//! What one agent of a sharded run writes into its `--out` directory
//! besides its request log, report and histograms: `complete.json` (the
//! completion marker) and `counters.json` (every counter but the
//! histograms).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::counters::Counters;

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
    /// Layout version of the agent directory: 2 since `counters.json`
    /// keeps every handshake sum (1 kept four); a merge reads both.
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
/// histograms, so that a merge adds them exactly. Layout 1 kept only
/// `[count, bytes_out, bytes_in, round_trips]` of each handshake kind (and
/// so lost the record, certificate and TCP sums); both forms read.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AgentCounters {
    /// Exact sums per phase, µs, in the order connect, handshake_full,
    /// handshake_resumed, ttfb, transfer, total.
    pub phase_sum_us: Vec<u64>,
    /// Exact maxima per phase, µs, in the same order.
    pub phase_max_us: Vec<u64>,
    /// Every other counter, at the top level of the JSON.
    #[serde(flatten)]
    pub counts: Counters,
}

impl<'de> Deserialize<'de> for AgentCounters {
    /// By hand: serde's `flatten` buffers the document and then cannot read
    /// `status`'s numeric keys ("200"), so the phases are taken off a JSON
    /// value and the rest is read as [`Counters`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = serde_json::Value::deserialize(d)?;
        let mut phases = |key: &'static str| -> Result<Vec<u64>, D::Error> {
            let x = v
                .as_object_mut()
                .and_then(|o| o.remove(key))
                .ok_or_else(|| D::Error::missing_field(key))?;
            serde_json::from_value(x).map_err(D::Error::custom)
        };
        let phase_sum_us = phases("phase_sum_us")?;
        let phase_max_us = phases("phase_max_us")?;
        let counts = serde_json::from_value(v).map_err(D::Error::custom)?;
        Ok(AgentCounters {
            phase_sum_us,
            phase_max_us,
            counts,
        })
    }
}
