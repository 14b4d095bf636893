//! Accepting connections when `accept` fails: out of file descriptors
//! (EMFILE, ENFILE) or kernel memory, an accept loop that retried at once
//! would spin on the CPU the existing connections need. Every accept loop
//! backs off instead, from 50 ms doubling to 1 s, warns once per streak of
//! failures and says when accepting works again.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The first wait after a failed accept.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// The longest wait between failed accepts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The back-off state of one accept loop.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// Failures in the current streak.
    failures: u64,
}

impl Backoff {
    /// Records a failure; returns how long to wait before the next accept.
    pub(crate) fn failed(&mut self) -> Duration {
        let d = BACKOFF_MIN
            .saturating_mul(1 << self.failures.min(16) as u32)
            .min(BACKOFF_MAX);
        self.failures += 1;
        d
    }

    /// Records a success; returns the length of the streak it ended.
    pub(crate) fn succeeded(&mut self) -> Option<u64> {
        (self.failures > 0).then(|| std::mem::take(&mut self.failures))
    }
}

/// Whether an accept error means the process or system is out of file
/// descriptors.
fn out_of_fds(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EMFILE) | Some(nix::libc::ENFILE)
    )
}

/// Accepts the next connection, backing off after failures. `what` names
/// the listener in the log.
pub(crate) async fn accept(
    listener: &TcpListener,
    backoff: &mut Backoff,
    what: &'static str,
) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(x) => {
                if let Some(n) = backoff.succeeded() {
                    tracing::warn!(
                        listener = what,
                        "accepting connections again after {n} failed accepts"
                    );
                }
                return x;
            }
            Err(e) => {
                let first = backoff.failures == 0;
                let wait = backoff.failed();
                let hint = if out_of_fds(&e) {
                    "; the process is out of file descriptors: raise `ulimit -n` or lower --max-connections"
                } else {
                    ""
                };
                if first {
                    tracing::warn!(
                        listener = what,
                        "accept failed: {e}{hint}; backing off (50 ms doubling to 1 s) while existing connections are served"
                    );
                } else {
                    tracing::debug!(listener = what, "accept failed: {e}; waiting {wait:?}");
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_a_second_and_resets_on_success() {
        let mut b = Backoff::default();
        assert_eq!(b.succeeded(), None);
        let waits: Vec<u64> = (0..8).map(|_| b.failed().as_millis() as u64).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        for _ in 0..100 {
            assert_eq!(b.failed(), BACKOFF_MAX);
        }
        assert_eq!(b.succeeded(), Some(108));
        assert_eq!(b.succeeded(), None);
        assert_eq!(b.failed(), BACKOFF_MIN);
    }

    #[test]
    fn emfile_and_enfile_are_out_of_fds() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert!(out_of_fds(&e(nix::libc::EMFILE)));
        assert!(out_of_fds(&e(nix::libc::ENFILE)));
        assert!(!out_of_fds(&e(nix::libc::ECONNABORTED)));
    }
}
