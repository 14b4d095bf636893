//! Why a relay could not start, or its conditions were refused.

use std::net::SocketAddr;

/// Why a relay could not start or its conditions were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The conditions or a value written for them are invalid.
    #[error("{0}")]
    Invalid(String),
    /// The listening address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
    /// The runtime or thread for the relay could not start.
    #[error("cannot start the relay: {what}")]
    Start {
        /// What failed ("cannot build its runtime").
        what: &'static str,
        /// The OS error, if there is one.
        #[source]
        source: Option<std::io::Error>,
    },
}

impl Error {
    /// True if and only if a value or an address given caused it (the
    /// caller's to fix), not the machine.
    pub fn is_usage(&self) -> bool {
        !matches!(self, Error::Start { .. })
    }
}
