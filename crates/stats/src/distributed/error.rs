//! The files of an agent directory and the errors of reading, writing
//! and merging them.

use std::path::Path;

/// The agent's request log in its `--out` directory.
pub const CSV_FILE: &str = "requests.csv";
/// The agent's report in its `--out` directory.
pub const REPORT_FILE: &str = "report.json";
/// The agent's histograms (HdrHistogram interval log).
pub const HLOG_FILE: &str = "histograms.hlog";
/// The agent's counters.
pub const COUNTERS_FILE: &str = "counters.json";
/// The completion marker, written last and atomically.
pub const MARKER_FILE: &str = "complete.json";

/// The phases, as tagged in the interval log, in [`Stats`](crate::Stats) order.
pub const PHASE_TAGS: [&str; 6] = [
    "connect",
    "handshake_full",
    "handshake_resumed",
    "ttfb",
    "transfer",
    "total",
];

/// Errors reading or writing agent outputs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistributedError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file exists but its content is not what an agent writes.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The agents do not belong to one run (another seed, start time,
    /// target, `-c`, `-n`, …), or one shard was given twice.
    #[error("{0}")]
    Mismatch(String),
    /// No agent directory has a completion marker.
    #[error(
        "no agent output is complete ({0}); each agent writes {MARKER_FILE} last, when its run ended"
    )]
    NothingComplete(String),
}

pub(super) type Result<T> = std::result::Result<T, DistributedError>;

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DistributedError + '_ {
    move |source| DistributedError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads an agent file whole, at most
/// [`MAX_JSON_FILE`](tlslab_workload::input::MAX_JSON_FILE) bytes: a
/// larger one is corrupt, not a reason to exhaust memory.
pub(super) fn read_input(path: &Path) -> Result<Vec<u8>> {
    use tlslab_workload::input::{MAX_JSON_FILE, read_capped};
    read_capped(path, MAX_JSON_FILE).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            corrupt(path, e)
        } else {
            io_err(path)(e)
        }
    })
}

pub(super) fn corrupt(path: &Path, reason: impl std::fmt::Display) -> DistributedError {
    DistributedError::Corrupt {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}
