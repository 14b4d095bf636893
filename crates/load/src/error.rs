//! The load engine's errors, and whether each is the user's to fix.

use std::time::Duration;

/// Why a run could not start or go on. Network failures during a run are
/// not errors; they are counted in the report. [`Error::is_usage`] tells a
/// usage error (the options, before any work: exit 2) from a runtime one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A target URL could not be parsed.
    #[error("bad URL '{url}': expected https://host[:port]/path ({reason})")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A flag's value, or a combination of flags, cannot work; the message
    /// names the flag and the fix.
    #[error("invalid load configuration: {0}")]
    Invalid(String),
    /// The workload model's settings cannot work (the e-commerce model, the
    /// replay's window or speed).
    #[error("invalid load configuration: {0}")]
    Workload(#[source] tlslab_workload::Error),
    /// `--sni` (or the URL's host) is no TLS server name.
    #[error("'{name}' is not a valid TLS server name; give a DNS name or IP address with --sni")]
    ServerName {
        /// The name given.
        name: String,
        /// Why rustls refused it.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The target's host name could not be resolved.
    #[error("cannot resolve {host}:{port}; check the URL")]
    Resolve {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The resolver's error (none when it found no address).
        #[source]
        source: Option<std::io::Error>,
    },
    /// `--start-at` had passed, by more than [`crate::shard::START_GRACE`], when
    /// the run was ready.
    #[error(
        "--start-at is {:.1} s in the past (more than the {} s grace); give a time a few \
         seconds ahead, e.g. $(date -u -d '+10 seconds' +%Y-%m-%dT%H:%M:%SZ)",
        late.as_secs_f64(),
        grace.as_secs()
    )]
    StartPassed {
        /// How long ago the start was.
        late: Duration,
        /// How late a start may be ([`crate::shard::START_GRACE`]).
        grace: Duration,
    },
    /// The TLS options or trust files are unusable.
    #[error("TLS setup: {0}")]
    Crypto(#[from] tlslab_crypto::Error),
    /// rustls rejected the client configuration.
    #[error("TLS setup: {0}; check --tls, --suites and --groups")]
    Rustls(#[from] rustls::Error),
    /// The request log could not be written.
    #[error(transparent)]
    Log(#[from] tlslab_stats::Error),
    /// `load --h3`: no QUIC handshake got any answer from the server.
    #[error(
        "no QUIC server answered at {addr} (UDP): none of {attempts} handshake(s) got a reply \
         (each waits up to {} s, or the run's end); is `tlslab serve` running with --h3, on \
         this port? QUIC listens on UDP, which a TCP-only server or a firewall leaves silent{hint}",
        timeout.as_secs_f64()
    )]
    NoQuicServer {
        /// The server's UDP address.
        addr: std::net::SocketAddr,
        /// Handshakes started.
        attempts: u64,
        /// How long each waited at most (`--timeout`).
        timeout: Duration,
        /// With `--ablate`: the other cause (empty without).
        hint: &'static str,
    },
    /// The engine's threads could not be pinned or started.
    #[error("load engine threads: {0}")]
    Threads(#[from] tlslab_runtime::Error),
}

impl Error {
    /// Whether the options are at fault, before any work (a usage error:
    /// the CLI's exit 2), rather than the run (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::BadUrl { .. }
                | Error::Invalid(_)
                | Error::Workload(_)
                | Error::ServerName { .. }
                | Error::Crypto(_)
                | Error::Rustls(_)
        )
    }
}
