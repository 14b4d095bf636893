//! Backing off after connections that could not be made.
//!
//! When the server is gone, a connect fails in microseconds (refused), and
//! a client that tries again at once makes tens of thousands of attempts a
//! second per thread. So after the n-th connection in a row that could not
//! be made (name not resolved, refused, reset, unreachable, timed out), a
//! client waits a uniform random time below
//! [`retry_backoff_bound`]`(B, n)` = min(B·2ⁿ⁻¹, 32·B) before its next one:
//! exponential backoff with full jitter, the rule of `tlslab overload
//! --retry-backoff` ([`crate::run_users`]), whose bound this shares. The first
//! connection that is made resets n. A failure after the connection was
//! made (TLS, HTTP, a timed-out request) is the server answering, not the
//! server gone, and does not back off.

use std::sync::atomic::Ordering;

use super::shared::Shared;
use crate::config::retry_backoff_bound;

/// One client's (or replay worker's) backoff state, whatever its protocol.
#[derive(Default)]
pub(super) struct Backoff {
    /// Connections in a row that could not be made.
    failures: u32,
    /// The jitter's stream, made on the first wait (boxed: an idle
    /// client's task keeps this struct; see tests/idle_memory.rs).
    rng: Option<Box<tlslab_workload::Rng>>,
}

/// The stream numbers of the jitter, apart from the workload's streams of
/// the same seed.
const STREAM_BASE: u64 = 0xb0ff_0000_0000;

impl Backoff {
    /// Notes whether the last connection attempt was made.
    pub(super) fn record(&mut self, connected: bool) {
        self.failures = if connected {
            0
        } else {
            self.failures.saturating_add(1)
        };
    }

    /// Waits, after connections that could not be made, for a random time
    /// below the bound; counts the wait in `sh`. `stream` (the client's
    /// number) seeds the jitter with the run's seed.
    pub(super) async fn wait(&mut self, sh: &Shared, stream: u64) {
        use rand::RngExt as _;
        let bound = retry_backoff_bound(sh.retry_backoff, self.failures);
        if self.failures == 0 || bound.is_zero() {
            return;
        }
        let rng = self
            .rng
            .get_or_insert_with(|| Box::new(tlslab_workload::rng(sh.seed, STREAM_BASE + stream)));
        let wait = bound.mul_f64(rng.random::<f64>());
        sh.backoff_waits.fetch_add(1, Ordering::Relaxed);
        sh.backoff_ns
            .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
        tokio::time::sleep(wait).await;
    }
}
