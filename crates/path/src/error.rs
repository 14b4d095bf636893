//! What can go wrong on a path, and whether the user can fix it.

/// What can go wrong. [`Error::is_usage`] tells what the user gave (exit
/// 2) from what the machine refused (exit 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value the user wrote is not usable.
    #[error("{0}")]
    Invalid(String),
    /// A trace file could not be read.
    #[error("cannot read the trace {}: {source}", path.display())]
    TraceFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The forwarder CPUs cannot be used.
    #[error("forwarder CPUs: {0}")]
    Cpus(#[source] tlslab_runtime::Error),
    /// Not root, nor CAP_NET_ADMIN and CAP_SYS_ADMIN.
    #[error(
        "tlslab path needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network \
         namespaces and TUN devices; run it with sudo, or use `tlslab relay`, which needs no \
         privilege (TCP only, delays whole flights rather than packets)"
    )]
    NotPermitted,
    /// A set-up step (a namespace, a device, a thread) failed on an
    /// operating-system error.
    #[error("path set-up: {step}: {source}{fix}")]
    Os {
        /// The step.
        step: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
        /// What to check, after the error (may be empty).
        fix: &'static str,
    },
    /// Creating or entering a namespace or device failed: `ip`'s own
    /// message, or a set-up thread that panicked.
    #[error("path set-up: {0}")]
    Setup(String),
}

impl Error {
    /// Whether the user's input is at fault (a usage error) rather than
    /// the machine.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Invalid(_) | Error::TraceFile { .. } | Error::Cpus(_)
        )
    }

    /// A set-up step that failed on `source`, with what to check.
    pub(crate) fn os(
        step: impl Into<String>,
        fix: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let step = step.into();
        move |source| Error::Os { step, source, fix }
    }
}
