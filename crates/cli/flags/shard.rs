//! `load`'s distributed flags (`--shard`, `--start-at`, `--out`) into an
//! [`Agent`]: this agent's part of a run and its output directory, which
//! `tlslab merge` reads.

use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::Context;
use tlslab_load::shard::Shard;
use tlslab_report::LoadReport;
use tlslab_report::distributed::{self as dist, MARKER_FILE};

use crate::args::load::ShardArgs;
use crate::usage::usage;

/// What the distributed flags ask of one `load` run, validated.
#[derive(Debug, Default)]
pub struct Agent {
    shard: Option<Shard>,
    start_at: Option<SystemTime>,
    out: Option<PathBuf>,
    run_seed: std::cell::Cell<u64>,
    run_flags: std::cell::Cell<Option<dist::RunFlags>>,
}

impl Agent {
    /// Validates the flags (usage errors) without touching the network or
    /// creating anything.
    pub fn from_args(a: &ShardArgs) -> anyhow::Result<Agent> {
        let shard = a
            .shard
            .as_deref()
            .map(str::parse::<Shard>)
            .transpose()
            .map_err(usage)?;
        let start_at = match &a.start_at {
            None => None,
            Some(s) => {
                let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|e| {
                    usage(format!(
                        "--start-at {s}: {e}; give an RFC 3339 UTC time such as 2026-01-01T12:00:00Z"
                    ))
                })?;
                if let Ok(past) = SystemTime::now().duration_since(t)
                    && past > tlslab_load::shard::START_GRACE
                {
                    return Err(usage(format!(
                        "--start-at {s} is {:.1} s in the past (more than the {} s grace); give a time a few \
                         seconds ahead, e.g. $(date -u -d '+10 seconds' +%Y-%m-%dT%H:%M:%SZ)",
                        past.as_secs_f64(),
                        tlslab_load::shard::START_GRACE.as_secs()
                    )));
                }
                Some(t)
            }
        };
        if let Some(dir) = &a.out
            && dir.join(MARKER_FILE).exists()
        {
            return Err(usage(format!(
                "--out {}: it already holds a finished agent output ({MARKER_FILE}); give an empty or new directory",
                dir.display()
            )));
        }
        Ok(Agent {
            shard,
            start_at,
            out: a.out.clone(),
            run_seed: std::cell::Cell::new(0),
            run_flags: std::cell::Cell::new(None),
        })
    }

    /// This agent's shard of the run (`--shard`).
    pub fn shard(&self) -> Option<&Shard> {
        self.shard.as_ref()
    }

    /// Turns the whole run's configuration into this agent's, and creates
    /// the `--out` directory.
    pub fn apply(&self, cfg: &mut tlslab_load::LoadConfig) -> anyhow::Result<()> {
        self.run_seed.set(cfg.seed);
        // The whole run's flags, before the shard takes its part: `merge`
        // checks that its agents agree on them.
        self.run_flags.set(Some(dist::RunFlags {
            clients: cfg.clients as u64,
            requests: cfg.requests,
            rate: cfg.open_loop.map(|o| o.rate),
        }));
        if let Some(s) = &self.shard {
            s.apply(cfg).map_err(usage)?;
        }
        if let Some(dir) = &self.out {
            std::fs::create_dir_all(dir)
                .map_err(|e| usage(format!("--out {}: cannot create it: {e}", dir.display())))?;
            cfg.log = Some(dir.join(dist::CSV_FILE));
        }
        // The engine waits for it after its setup, just before the window.
        cfg.start_at = self.start_at;
        Ok(())
    }

    /// Writes the rest of the `--out` directory after the run.
    pub fn finish(&self, report: &LoadReport) -> anyhow::Result<()> {
        let Some(dir) = &self.out else {
            return Ok(());
        };
        let shard = self
            .shard
            .map_or(dist::ShardId { index: 1, count: 1 }, |s| s.0);
        let start_at_ms = self.start_at.map(|t| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
        let marker = dist::write_agent_dir(
            dir,
            report,
            shard,
            start_at_ms,
            self.run_seed.get(),
            self.run_flags.get(),
        )
        .with_context(|| format!("writing the agent output in {}", dir.display()))?;
        eprintln!(
            "tlslab: agent {shard}: wrote {} rows and {} in {}",
            marker.csv_rows,
            MARKER_FILE,
            dir.display()
        );
        Ok(())
    }
}
