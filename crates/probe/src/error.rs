//! The errors that stop the probe.

use crate::store::StoreError;

/// Errors that stop the probe (never a failed target: that is a [`Sample`](crate::Sample)
/// with an error kind).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A zero `--timeout`: every phase would fail at once.
    #[error("--timeout must be more than 0")]
    ZeroTimeout,
    /// Nothing to probe.
    #[error("no targets; give URLs or --targets FILE")]
    NoTargets,
    /// The load client refused the configuration (trust, versions).
    #[error(transparent)]
    Load(#[from] tlslab_load::Error),
    /// `--transport both` found no HTTP/3 endpoint for a target.
    #[error(
        "{target} advertises no HTTP/3 endpoint: {reason}. `--transport both` takes the endpoint \
         from the Alt-Svc header (h3=\":PORT\") of the target's TCP response, as browsers do; \
         enable HTTP/3 on the server (`tlslab serve --h3` sends Alt-Svc), probe over TCP only \
         (--transport tcp), or probe HTTP/3 at the URL's own UDP port (--transport h3)"
    )]
    NoAltSvc {
        /// The target URL.
        target: String,
        /// What the discovery found instead.
        reason: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An I/O failure outside the probed connections.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// True if the configuration cannot work (a usage error, exit 2),
    /// false if the probe failed at run time (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::ZeroTimeout | Error::NoTargets)
    }
}
