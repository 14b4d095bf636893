//! Rounds over time: every target once per round (concurrently, one
//! connection at a time per target), each round committed whole.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use tokio::signal::unix::{SignalKind, signal};

use crate::config::{ProbeConfig, Transports};
use crate::error::Error;
use crate::sample::{Sample, now_ms};
use crate::store::{Store, StoreError};
use crate::transport::{discover, probe_each};

/// When rounds run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// From the start of one round to the start of the next.
    pub interval: Duration,
    /// Each gap is `interval` plus a uniform draw in `[0, jitter]`.
    pub jitter: Duration,
    /// Stop after this many rounds (`None`: until SIGTERM or SIGINT).
    pub rounds: Option<u64>,
}

/// Runs rounds until `schedule.rounds` are done or SIGTERM/SIGINT arrives
/// (the round in progress finishes and is committed first). Each committed
/// round is passed to `on_round` with its id. Returns the rounds committed.
/// With [`Transports::Both`], each target's HTTP/3 endpoint is found from
/// its `Alt-Svc` before the first round ([`Error::NoAltSvc`] if it
/// advertises none); each round then follows what its TCP response says.
pub async fn run<S: Store>(
    cfg: &ProbeConfig,
    targets: &[String],
    schedule: &Schedule,
    store: &mut S,
    mut on_round: impl FnMut(i64, &[Sample]),
) -> Result<u64, Error> {
    if targets.is_empty() {
        return Err(Error::NoTargets);
    }
    let mut known = Vec::with_capacity(targets.len());
    for t in targets {
        known.push(match cfg.transports {
            Transports::Both => Some(discover(cfg, t).await?),
            Transports::Tcp | Transports::H3 => None,
        });
    }
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        u64::try_from(now_ms()).unwrap_or(0) ^ u64::from(std::process::id()),
    );
    let mut done = 0u64;
    let mut stop = false;
    loop {
        let started = tokio::time::Instant::now();
        let started_ms = now_ms();
        let round = async {
            let mut set = tokio::task::JoinSet::new();
            for (i, t) in targets.iter().enumerate() {
                let cfg = cfg.clone();
                let t = t.clone();
                let known = known[i].clone();
                set.spawn(async move { (i, probe_each(&cfg, &t, known.as_ref()).await) });
            }
            let mut out: Vec<Vec<Sample>> = vec![Vec::new(); targets.len()];
            while let Some(r) = set.join_next().await {
                if let Ok((i, s)) = r {
                    out[i] = s;
                }
            }
            out.into_iter().flatten().collect::<Vec<_>>()
        };
        tokio::pin!(round);
        let samples = loop {
            tokio::select! {
                s = &mut round => break s,
                _ = term.recv() => stop = true,
                _ = int.recv() => stop = true,
            }
        };
        match store.commit_round(started_ms, &samples) {
            Ok(id) => on_round(id, &samples),
            // The database is down: the round waits in memory, the probe
            // goes on, and the next commit retries.
            Err(e @ StoreError::Queued { .. }) => tracing::warn!("{e}"),
            Err(e) => return Err(e.into()),
        }
        done += 1;
        if stop || schedule.rounds.is_some_and(|n| done >= n) {
            store.flush()?;
            return Ok(done);
        }
        let jitter = if schedule.jitter.is_zero() {
            Duration::ZERO
        } else {
            schedule.jitter.mul_f64(rng.random_range(0.0..=1.0))
        };
        let next = started + schedule.interval + jitter;
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = term.recv() => { store.flush()?; return Ok(done) }
            _ = int.recv() => { store.flush()?; return Ok(done) }
        }
    }
}
