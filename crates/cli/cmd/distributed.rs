//! `tlslab merge`: the agents' `load --out` directories into one report.
//! What `load --shard/--start-at/--out` ask of one run is
//! [`crate::flags::shard`]; the sharding arithmetic is `tlslab_load::shard`;
//! the agent directory and the merge are `tlslab_report::distributed`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tlslab_report::LoadReportText;
use tlslab_report::distributed::{self as dist, MARKER_FILE};

use crate::args::load::MergeArgs;
use crate::output::write_json;
use crate::usage::usage;

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
    if let Some(path) = &a.hdr_log {
        // Only finished agents, as for the report.
        let logs: Vec<PathBuf> = a
            .dirs
            .iter()
            .filter(|d| d.join(MARKER_FILE).exists())
            .map(|d| d.join(dist::INTERVALS_FILE))
            .filter(|p| p.exists())
            .collect();
        if logs.is_empty() {
            anyhow::bail!(
                "--hdr-log {}: no finished agent directory holds {}; the agents must run `load --out DIR` (which writes it)",
                path.display(),
                dist::INTERVALS_FILE
            );
        }
        let m = dist::merge_interval_logs(&logs, path)
            .with_context(|| format!("merging the interval logs into {}", path.display()))?;
        eprintln!(
            "tlslab: merged {} interval logs into {} ({} interval lines)",
            m.logs,
            path.display(),
            m.lines
        );
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
