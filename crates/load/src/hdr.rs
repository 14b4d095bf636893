//! `--hdr-log`: the run's HdrHistogram interval log, opened when the
//! measurement window's start is known and finished after the run.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tlslab_stats::hdr_log::HdrIntervalLog;

use crate::config::LoadConfig;
use crate::error::Error;

/// Opens `cfg.hdr_log`, its interval 0 starting at `window_start`.
pub(crate) fn open(
    cfg: &LoadConfig,
    window_start: Instant,
) -> Result<Option<Arc<HdrIntervalLog>>, Error> {
    let Some(h) = &cfg.hdr_log else {
        return Ok(None);
    };
    let now = Instant::now();
    let wall = SystemTime::now();
    let wall = if window_start >= now {
        wall + (window_start - now)
    } else {
        wall - (now - window_start)
    };
    Ok(Some(Arc::new(HdrIntervalLog::create(
        &h.path,
        h.interval,
        window_start,
        wall,
    )?)))
}

/// Writes the log's last interval.
pub(crate) fn finish(log: Option<&Arc<HdrIntervalLog>>) -> Result<(), Error> {
    match log {
        Some(l) => Ok(l.finish()?),
        None => Ok(()),
    }
}
