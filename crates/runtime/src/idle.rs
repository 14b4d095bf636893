//! An idle timer for a proxied connection: each direction stamps the time
//! it last moved a byte ([`Activity::touch`], one relaxed store), and one
//! watchdog future ([`Activity::idle_for`]) returns once nothing has moved
//! either way for a limit. `tlslab dispatch` and `tlslab relay` close a
//! connection when it returns.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

/// When a connection last moved a byte, in milliseconds since it started.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// Starts the clock: the connection counts as active now.
    pub fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Records that a byte moved now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Relaxed);
    }

    /// How long since a byte last moved.
    pub fn idle(&self) -> Duration {
        let last = self.start + Duration::from_millis(self.last_ms.load(Relaxed));
        Instant::now().saturating_duration_since(last)
    }

    /// Returns once nothing has moved for `limit` (it re-arms its timer at
    /// each deadline rather than at each byte, so a busy connection costs
    /// one timer wake-up per `limit`).
    pub async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Relaxed));
            let deadline = last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_for_returns_after_the_last_touch_plus_the_limit() {
        let a = Activity::new();
        let t0 = Instant::now();
        let limit = Duration::from_millis(300);
        let watch = a.idle_for(limit);
        let touches = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(120)).await;
                a.touch();
            }
        };
        let ((), ()) = tokio::join!(watch, touches);
        // Last touch at 600 ms, so idle from 900 ms.
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(890) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        assert!(a.idle() >= limit);
    }
}
