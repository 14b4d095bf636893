//! The process's file-descriptor limit.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// `RLIMIT_NOFILE` before and after [`raise_nofile_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit the process started with.
    pub soft_before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (the most the soft limit may be raised to).
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, so that a server or
/// load generator is not stopped by the usual 1,024 soft limit while the
/// system allows more. Call it once, at start. Returns both limits; an
/// error (the limits cannot be read or set) leaves them as they were.
pub fn raise_nofile_limit() -> Result<NofileLimit, std::io::Error> {
    let (soft_before, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft_before < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    Ok(NofileLimit {
        soft_before,
        soft,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let l = raise_nofile_limit().unwrap();
        assert_eq!(l.soft, l.hard, "{l:?}");
        assert!(l.soft >= l.soft_before, "{l:?}");
        // Idempotent.
        assert_eq!(raise_nofile_limit().unwrap().soft_before, l.soft);
    }
}
