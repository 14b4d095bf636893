//! The live progress line (`indicatif`, on standard error): a sink that
//! counts records and a ticker that redraws from those counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tlslab_stats::RequestRecord;

/// Counts of measured records so far.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    attempted: AtomicU64,
    completed: AtomicU64,
    errors: AtomicU64,
}

impl Progress {
    /// Counts one measured record.
    pub(crate) fn record(&self, r: &RequestRecord) {
        self.attempted.fetch_add(1, Ordering::Relaxed);
        if r.completed() {
            self.completed.fetch_add(1, Ordering::Relaxed);
        }
        if r.error.is_some() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The line for a run whose window starts at `window_start`.
    fn line(&self, window_start: Instant, now: Instant) -> String {
        if now < window_start {
            let left = window_start - now;
            return format!("warming up, {:.1} s left", left.as_secs_f64());
        }
        let secs = (now - window_start).as_secs_f64();
        let completed = self.completed.load(Ordering::Relaxed);
        let rps = if secs > 0.0 {
            completed as f64 / secs
        } else {
            0.0
        };
        format!(
            "{:.1} s: {} requests ({} completed), {:.0} req/s, {} errors",
            secs,
            self.attempted.load(Ordering::Relaxed),
            completed,
            rps,
            self.errors.load(Ordering::Relaxed)
        )
    }

    /// Redraws the line every 200 ms until the task is dropped; clears it
    /// when dropped.
    pub(crate) async fn draw(&self, window_start: Instant) {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        struct Clear(ProgressBar);
        impl Drop for Clear {
            fn drop(&mut self) {
                self.0.finish_and_clear();
            }
        }
        let bar = Clear(bar);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            bar.0.set_message(self.line(window_start, Instant::now()));
            bar.0.tick();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counts_records() {
        let p = Progress::default();
        let r = RequestRecord {
            error: Some("refused".into()),
            total_us: 1,
            ..RequestRecord::default()
        };
        p.record(&r);
        let start = Instant::now();
        let line = p.line(start, start + Duration::from_secs(2));
        assert_eq!(line, "2.0 s: 1 requests (0 completed), 0 req/s, 1 errors");
        let warm = p.line(start + Duration::from_secs(1), start);
        assert!(warm.starts_with("warming up"), "{warm}");
    }
}
