//! The server's [`Error`], and its [`ErrorKind`]: usage or runtime.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors from starting or running the server. [`Error::kind`] tells an
/// option to change ([`ErrorKind::Usage`]) from a failure of the machine
/// or of a peer ([`ErrorKind::Runtime`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The options cannot work together, or a value is out of range; the
    /// message names the option to change.
    #[error("invalid server configuration: {0}")]
    Usage(String),
    /// A Redis URL (`--session-cache`, `--ticket-keys`) that does not parse.
    #[error(
        "invalid server configuration: {option} {url} is not a Redis URL; give redis://HOST:PORT[/DB]"
    )]
    RedisUrl {
        /// The option that names it.
        option: &'static str,
        /// The URL given.
        url: String,
        /// Why the redis client refused it.
        source: redis::RedisError,
    },
    /// The `--ticket-keys` file cannot be read.
    #[error(
        "invalid server configuration: --ticket-keys {}: cannot read it; make one with `openssl rand 80 > {}`",
        path.display(),
        path.display()
    )]
    TicketKeyFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Building the TLS configuration failed (bad key material, or the
    /// version/suite/group options leave nothing to negotiate).
    #[error("TLS setup: {0}")]
    Tls(#[from] tlslab_crypto::Error),
    /// rustls rejected the certificate and key.
    #[error(
        "TLS setup: {0}; check that the key matches the first certificate of the chain (regenerate both with `tlslab certs --out DIR`)"
    )]
    Rustls(#[from] rustls::Error),
    /// A listener could not be bound.
    #[error(
        "cannot listen on {addr} for {what}: {source}; pick another address or port (port 0 picks a free one)"
    )]
    Bind {
        /// Which listener ("https", "http", "metrics").
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The content could not be loaded.
    #[error("content: {path}: {problem}")]
    Content {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong and what to do about it.
        problem: String,
    },
    /// The access log could not be created.
    #[error(
        "cannot create the access log {path}: {error}; give a writable file path whose directory exists (--access-log)"
    )]
    AccessLog {
        /// The file.
        path: PathBuf,
        /// The OS error (in the message, so not a separate source).
        error: std::io::Error,
    },
    /// The worker threads could not be pinned or started.
    #[error("server threads: {0}")]
    Threads(#[from] tlslab_runtime::Error),
    /// A thread, a signal handler, or a client of the server could not be
    /// set up.
    #[error("{what}")]
    Setup {
        /// What could not be set up ("cannot install a signal handler").
        what: &'static str,
        /// The underlying error, if there is one.
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// What kind of problem an [`Error`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An option, a file or an address given is wrong: the caller's to
    /// fix before any work.
    Usage,
    /// The machine or a peer failed.
    Runtime,
}

impl Error {
    /// Whether an option to change caused it, or the machine or a peer.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Setup { .. }
            | Error::Tls(tlslab_crypto::Error::Generate(_))
            | Error::Threads(_) => ErrorKind::Runtime,
            _ => ErrorKind::Usage,
        }
    }

    /// True if and only if this is a usage error ([`ErrorKind::Usage`]).
    pub fn is_usage(&self) -> bool {
        self.kind() == ErrorKind::Usage
    }

    /// A [`Error::Setup`] failure with its underlying error.
    pub(crate) fn setup<E>(what: &'static str) -> impl Fn(E) -> Error + Copy
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        move |e| Error::Setup {
            what,
            source: Some(Box::new(e)),
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
