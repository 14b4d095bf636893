//! `tlslab lab --explain`: where a side's CPU time per request went.
//! Field names are documented in docs/schema.md ("`tlslab lab --json
//! FILE`") and docs/lab.md says how each part is measured.

use serde::{Deserialize, Serialize};

use crate::float::or_nan;

/// What a set of threads did over a window, in totals: its CPU time, the
/// crypto meter's time, and the probes' counts (`None`: unavailable).
/// A load report carries the client's as `client_cpu.costs` when the
/// probes are on (`tlslab lab --explain`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowCosts {
    /// User CPU seconds of the threads.
    #[serde(deserialize_with = "or_nan")]
    pub user_s: f64,
    /// System (kernel) CPU seconds of the threads.
    #[serde(deserialize_with = "or_nan")]
    pub sys_s: f64,
    /// Seconds inside the metering provider's cryptographic operations
    /// (wall clock; session-store look-ups left out).
    #[serde(deserialize_with = "or_nan")]
    pub crypto_s: f64,
    /// The threads' time on a CPU as perf's task clock counted it.
    pub task_clock_s: Option<f64>,
    /// Syscalls entered.
    pub syscalls: Option<u64>,
    /// Of them, `write`, `writev`, `sendto`, `sendmsg` and `sendmmsg`.
    pub writes: Option<u64>,
    /// Allocations (`alloc`, `alloc_zeroed`, `realloc`).
    pub allocations: Option<u64>,
    /// Bytes those allocations asked for.
    pub allocated_bytes: Option<u64>,
}

/// One side's CPU time per request, split into parts. `cpu_us` =
/// `crypto_us` + `kernel_us` + `remainder_us`; the counts are per request
/// too. `None`: unavailable (see [`Explain`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostSplit {
    /// The requests divided by: served (server) or completed (client).
    pub requests: u64,
    /// CPU time per request (user + system), µs.
    #[serde(deserialize_with = "or_nan")]
    pub cpu_us: f64,
    /// User time per request, µs.
    #[serde(deserialize_with = "or_nan")]
    pub user_us: f64,
    /// Kernel (system) time per request, µs.
    #[serde(deserialize_with = "or_nan")]
    pub kernel_us: f64,
    /// Time in the crypto meter's operations per request, µs.
    #[serde(deserialize_with = "or_nan")]
    pub crypto_us: f64,
    /// `cpu_us` − `crypto_us` − `kernel_us`: user time outside the
    /// metered crypto (HTTP, TLS framing, the runtime, allocation), µs.
    #[serde(deserialize_with = "or_nan")]
    pub remainder_us: f64,
    /// perf's task clock per request, µs: a check on `cpu_us` that does
    /// not come from `/proc`.
    pub task_clock_us: Option<f64>,
    /// Syscalls per request.
    pub syscalls: Option<f64>,
    /// Write-family syscalls per request.
    pub writes: Option<f64>,
    /// Allocations per request.
    pub allocations: Option<f64>,
    /// Bytes allocated per request.
    pub allocated_bytes: Option<f64>,
    /// Consistency checks that failed (a part larger than the whole, the
    /// crypto time above the user time, the task clock off `cpu_us` by
    /// more than 10 %).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A cell's split, server-observed and client-observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CellCosts {
    /// The server worker's threads over the whole run (warm-up included),
    /// per request served.
    pub server: CostSplit,
    /// The load engine's threads over the client's window, per request
    /// completed.
    pub client: CostSplit,
}

/// What `--explain` could measure on this run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    /// Why syscall and write counts and the task clock are missing (with
    /// the fix), or `None` when they were counted.
    pub syscalls_unavailable: Option<String>,
    /// Why allocation counts are missing, or `None` when they were counted.
    pub allocations_unavailable: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_reads_back_and_omits_no_warnings() {
        let c = CellCosts {
            server: CostSplit {
                requests: 10,
                cpu_us: 30.0,
                user_us: 20.0,
                kernel_us: 10.0,
                crypto_us: 5.0,
                remainder_us: 15.0,
                task_clock_us: Some(31.0),
                syscalls: Some(4.0),
                writes: Some(1.0),
                allocations: None,
                allocated_bytes: None,
                warnings: vec![],
            },
            client: CostSplit::default(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert!(v["server"].get("warnings").is_none(), "{v}");
        assert!(v["server"]["allocations"].is_null(), "{v}");
        let back: CellCosts = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }
}
