//! Why a peer could not be found, configured or started.

use std::path::PathBuf;

/// Why a peer could not be found, configured or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A peer's binary is not installed.
    #[error(
        "`{tool}` is not installed (not on PATH, in /usr/sbin or /usr/lib/postgresql/*/bin); \
         install it with `apt-get install -y {package}`"
    )]
    Missing {
        /// The binary looked for.
        tool: String,
        /// The Debian package that has it.
        package: String,
    },
    /// The binary could not be executed.
    #[error("cannot start {name}: {source}; check that it is installed and executable")]
    Spawn {
        /// The peer.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The peer exited before it listened.
    #[error("{name} exited at start ({status}): {log}")]
    Exited {
        /// The peer.
        name: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it wrote.
        log: String,
    },
    /// The peer did not listen in time.
    #[error("{name} did not listen on {addr} within {secs} s: {log}")]
    NotListening {
        /// The peer.
        name: String,
        /// Where it should have listened.
        addr: std::net::SocketAddr,
        /// The limit, seconds.
        secs: u64,
        /// What it wrote.
        log: String,
    },
    /// A file or directory the peer needs could not be written or read.
    #[error("{what} {}: {source}; check the directory is writable", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A command the peer is set up with failed (initdb, pg_ctl).
    #[error("{what} failed: {output}")]
    Command {
        /// The command.
        what: String,
        /// Its output.
        output: String,
    },
    /// The peer could not be pinned.
    #[error(transparent)]
    Pin(#[from] tlslab_runtime::Error),
    /// A key-exchange group nginx cannot be given.
    #[error(
        "--groups {0}: not a group nginx nodes can be given; use x25519, secp256r1, \
         secp384r1, secp521r1 or X25519MLKEM768"
    )]
    UnknownGroup(String),
}

impl Error {
    /// The error with `extra` (such as the peer's own error log) added to
    /// what the peer wrote.
    pub fn with_log(mut self, extra: &str) -> Error {
        if let Error::Exited { log, .. } | Error::NotListening { log, .. } = &mut self {
            log.push('\n');
            log.push_str(extra.trim());
        }
        self
    }

    /// Whether the peer failed because its port was taken meanwhile (the
    /// case [`crate::start_on_free_port`] retries).
    pub fn port_in_use(&self) -> bool {
        match self {
            Error::Exited { log, .. } | Error::NotListening { log, .. } => {
                log.contains("Address already in use")
            }
            _ => false,
        }
    }
}

/// Creates `path` and its parents.
pub(crate) fn mkdirs(path: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(|source| Error::Io {
        what: "cannot create",
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path`.
pub(crate) fn write(path: &std::path::Path, bytes: impl AsRef<[u8]>) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        what: "cannot write",
        path: path.to_path_buf(),
        source,
    })
}
