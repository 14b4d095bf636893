//! Distributed load: what one agent of a sharded run writes (`load --out
//! DIR`), and the exact merge of N agents' outputs (`tlslab merge`).
//!
//! An agent directory holds, written in this order:
//! - `requests.csv`: the request log ([`crate::CsvLog`]), one row per request;
//! - `report.json`: the agent's own [`LoadReport`](crate::LoadReport);
//! - `histograms.hlog`: its latency histograms in the HdrHistogram interval
//!   log format (one interval per phase, tagged with the phase name,
//!   V2-deflate encoded, readable by HdrHistogram's `HistogramLogReader`);
//! - `intervals.hlog`: its per-interval latency histograms (`load
//!   --hdr-log`), written during the run; `tlslab merge --hdr-log` merges
//!   them ([`merge_interval_logs`]);
//! - `counters.json`: every other counter of its [`Stats`](crate::Stats) (the exact sums
//!   and maxima of each phase, counts by status, error, version, suite, …);
//! - `complete.json`: the completion marker ([`AgentMarker`]), written
//!   last, through a temporary file and a rename, so that it exists if and
//!   only if everything before it was written and flushed.
//!
//! A directory without the marker belongs to an agent that died or has
//! not finished: [`merge()`] reports it as missing and never counts any of
//! its partial files. Everything in [`Stats`](crate::Stats) is a sum or a histogram, so
//! the merge of the agents equals the statistics of one run that made all
//! their requests: percentiles come from the added histograms, never from
//! averaged percentiles.

mod agent_dir;
mod error;
mod intervals;
mod merge;
#[cfg(test)]
mod tests;

pub use agent_dir::{
    AgentOutput, host_name, now_unix_ms, read_agent_dir, read_csv_log, read_hlog, write_agent_dir,
};
pub use error::{
    COUNTERS_FILE, CSV_FILE, DistributedError, HLOG_FILE, MARKER_FILE, PHASE_TAGS, REPORT_FILE,
};
pub use intervals::{INTERVALS_FILE, MergedIntervals, merge_interval_logs};
pub use merge::{merge, merge_with};
pub use tlslab_schema::agent::{AgentCounters, AgentMarker, RunFlags, ShardId};
pub use tlslab_schema::load::{AgentSummary, Distributed, MissingAgent};
