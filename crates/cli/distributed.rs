//! Flags and glue of distributed load: `load --shard/--start-at/--out` and
//! `tlslab merge`. The sharding arithmetic is `tlslab_load::shard`; the
//! agent directory and the merge are `tlslab_report::distributed`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::Context;
use clap::Args;
use tlslab_load::shard::Shard;
use tlslab_report::distributed::{self as dist, MARKER_FILE};
use tlslab_report::{LoadReport, LoadReportText};

use crate::config::usage;

/// The distributed-load flags of `tlslab load`.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "Distributed load")]
pub struct ShardArgs {
    /// Run as agent I of N (1-based): this agent runs 1/N of the clients
    /// (-c), requests (-n) and rate (--rate); replayed client IPs are split
    /// by a stable hash. Give every agent the same other flags.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Start the measurement at this wall-clock time (RFC 3339, e.g.
    /// 2026-01-01T12:00:00Z), so that agents begin together. At most 2 s in
    /// the past.
    #[arg(long, value_name = "RFC3339")]
    pub start_at: Option<String>,

    /// Write this agent's report.json, requests.csv, histograms.hlog (HdrHistogram
    /// interval log), counters.json and, last, complete.json into DIR, for
    /// `tlslab merge`. DIR is created; it must not hold a finished output.
    #[arg(long, value_name = "DIR", conflicts_with = "log")]
    pub out: Option<PathBuf>,
}

impl ShardArgs {
    /// Returns true if and only if any distributed flag was given.
    pub fn is_set(&self) -> bool {
        self.shard.is_some() || self.start_at.is_some() || self.out.is_some()
    }
}

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
    /// Validates the flags (usage errors) without touching the network.
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
        if let Some(dir) = &a.out {
            if dir.join(MARKER_FILE).exists() {
                return Err(usage(format!(
                    "--out {}: it already holds a finished agent output ({MARKER_FILE}); give an empty or new directory",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(dir)
                .map_err(|e| usage(format!("--out {}: cannot create it: {e}", dir.display())))?;
        }
        Ok(Agent {
            shard,
            start_at,
            out: a.out.clone(),
            run_seed: std::cell::Cell::new(0),
            run_flags: std::cell::Cell::new(None),
        })
    }

    /// Turns the whole run's configuration into this agent's.
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

/// Restricts a replayed log's entries to the clients (addresses or host
/// names) of this shard.
pub fn shard_replay<E>(
    a: &ShardArgs,
    entries: Vec<E>,
    client: impl Fn(&E) -> String,
) -> anyhow::Result<Vec<E>> {
    let Some(s) = a.shard.as_deref() else {
        return Ok(entries);
    };
    let shard: Shard = s.parse().map_err(usage)?;
    let mine: Vec<E> = entries
        .into_iter()
        .filter(|e| shard.owns_client(&client(e)))
        .collect();
    if mine.is_empty() {
        return Err(usage(format!(
            "--shard {s}: no client of the access log hashes to this agent; use fewer agents"
        )));
    }
    Ok(mine)
}

/// `tlslab merge`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    tlslab merge out/agent-1 out/agent-2 out/agent-3 --json merged.json\n\n\
    Each DIR is one agent's `load --out DIR`. Counts are summed, HDR histograms added (percentiles \
    come from the merged histograms, never from averaged percentiles) and reuse recomputed from the \
    summed counts. An agent whose directory has no complete.json (it died or is still running), or \
    whose shard has no directory, is reported as MISSING and not counted; the exit code is then 1 \
    unless --allow-missing is given. Agents must be from one run: the same seed, --start-at, -c, -n, \
    --rate, URLs and other load flags, with overlapping windows; otherwise merge names the \
    difference and exits 1 (--force merges them anyway, with a WARNING per difference).")]
pub struct MergeArgs {
    /// The agents' --out directories.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    /// Write the merged report as JSON to FILE (the `load --json` schema plus `distributed`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Exit 0 even when agents are missing (they are still reported).
    #[arg(long)]
    pub allow_missing: bool,

    /// Merge agents that are not from one run (another seed, start time, URL, -c, -n, ...)
    /// instead of refusing with exit 1; each difference is printed as a WARNING.
    #[arg(long)]
    pub force: bool,
}

/// Runs `tlslab merge`.
pub fn merge(a: &MergeArgs) -> anyhow::Result<ExitCode> {
    for d in &a.dirs {
        if !d.is_dir() {
            return Err(usage(format!(
                "{}: no such directory; give the agents' `load --out` directories",
                d.display()
            )));
        }
    }
    // Directories that hold no agent output are the arguments' fault (exit
    // 2); agents that disagree or files that are corrupt are the content's
    // (exit 1).
    let report = dist::merge_with(&a.dirs, a.force).map_err(|e| match e {
        dist::DistributedError::NothingComplete(_) => usage(e),
        dist::DistributedError::Mismatch(_) => anyhow::Error::new(e),
        other => anyhow::Error::new(other).context("merging the agents' outputs"),
    })?;
    if let Some(d) = &report.distributed {
        for w in d.warnings.iter().filter(|w| w.starts_with("--force")) {
            eprintln!("tlslab: WARNING: {w}");
        }
    }
    {
        let mut out = std::io::stdout().lock();
        write!(out, "{}", report.render_table())?;
        write!(out, "{}", report.render_distributed())?;
        out.flush()?;
    }
    if let Some(path) = &a.json {
        write_json(path, &report)?;
    }
    let missing = report.distributed.as_ref().map_or(0, |d| d.missing.len());
    if missing > 0 {
        eprintln!(
            "tlslab: {missing} agent(s) missing: the merged figures cover only the agents listed{}",
            if a.allow_missing {
                ""
            } else {
                " (exit 1; --allow-missing exits 0)"
            }
        );
        if !a.allow_missing {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_json(path: &Path, report: &LoadReport) -> anyhow::Result<()> {
    let body = serde_json::to_vec_pretty(report)?;
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}
