//! The exact merge of many agents' outputs into one report (`tlslab
//! merge`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use tlslab_schema::load::{AgentSummary, Distributed, MissingAgent};

use super::agent_dir::{AgentOutput, read_agent_dir};
use super::error::{DistributedError, MARKER_FILE, Result};
use crate::model::{
    ClientCpu, CpuUsage, CryptoOp, CryptoPerHandshake, LoadReport, SATURATION_THRESHOLD, Window,
};
use crate::stats::Stats;

/// Merges agent directories into one report in `load`'s schema, with a
/// `distributed` section. Directories without a completion marker, and
/// shard indexes for which no directory was given, are listed as missing;
/// their data is not counted. Agents that are not from one run (see
/// [`merge_with`]) are a [`DistributedError::Mismatch`].
pub fn merge(dirs: &[PathBuf]) -> Result<LoadReport> {
    merge_with(dirs, false)
}

/// Like [`merge`]. Agents of one run share the run's seed, `--start-at`,
/// `-c`, `-n` and `--rate` (before sharding), its targets, requests per
/// connection, reuse, resumption, versions, workload, think time, retries,
/// duration, warm-up, timeout and early data, and their windows overlap.
/// Any difference is a [`DistributedError::Mismatch`] naming it, unless
/// `force`: then the agents are merged and each difference is a warning.
pub fn merge_with(dirs: &[PathBuf], force: bool) -> Result<LoadReport> {
    let mut agents = Vec::new();
    let mut missing = Vec::new();
    for d in dirs {
        match read_agent_dir(d)? {
            Some(a) => agents.push(a),
            None => missing.push(MissingAgent {
                shard: "?".into(),
                dir: Some(d.display().to_string()),
                reason: format!(
                    "no {MARKER_FILE}: the agent died mid-run or has not finished; its partial files are not counted"
                ),
            }),
        }
    }
    if agents.is_empty() {
        return Err(DistributedError::NothingComplete(
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    agents.sort_by_key(|a| a.marker.shard.index);
    let n = agents[0].marker.shard.count;
    for w in agents.windows(2) {
        if w[0].marker.shard == w[1].marker.shard {
            return Err(DistributedError::Mismatch(format!(
                "{} and {} both hold shard {}; give each agent's directory once",
                w[0].dir.display(),
                w[1].dir.display(),
                w[0].marker.shard
            )));
        }
    }
    if let Some(a) = agents.iter().find(|a| a.marker.shard.count != n) {
        return Err(DistributedError::Mismatch(format!(
            "{} is shard {} but {} is shard {}: they are not from one run",
            a.dir.display(),
            a.marker.shard,
            agents[0].dir.display(),
            agents[0].marker.shard
        )));
    }
    let differences = run_differences(&agents);
    if !differences.is_empty() && !force {
        return Err(DistributedError::Mismatch(format!(
            "the agents are not from one run: {}; merge the outputs of one run (every agent given \
             the same flags and --start-at), or add --force to merge them anyway",
            differences.join("; ")
        )));
    }
    let present: Vec<u32> = agents.iter().map(|a| a.marker.shard.index).collect();
    let mut absent: Vec<u32> = (1..=n).filter(|i| !present.contains(i)).collect();
    // A marker-less directory stands for one of the absent indexes; name
    // them by index when it is unambiguous.
    if missing.len() == 1 && absent.len() == 1 {
        missing[0].shard = format!("{}/{n}", absent[0]);
        absent.clear();
    }
    let unnamed = missing.len();
    for i in absent.into_iter().skip(unnamed) {
        missing.push(MissingAgent {
            shard: format!("{i}/{n}"),
            dir: None,
            reason: "no directory of this shard was given".into(),
        });
    }

    let mut stats = Stats::default();
    agents.iter().for_each(|a| stats.merge(&a.stats));
    let t0 = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms)
        .min()
        .unwrap_or(0);
    let t_last = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms)
        .max()
        .unwrap_or(0);
    let end_ms = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms as f64 + a.marker.measured_s * 1e3)
        .fold(0.0f64, f64::max);
    let first = &agents[0].report;
    let mut config = first.config.clone();
    config.clients = agents.iter().map(|a| a.report.config.clients).sum();
    config.threads = agents.iter().map(|a| a.report.config.threads).sum();
    config.seed = agents[0].marker.run_seed;
    config.requests = agents
        .iter()
        .map(|a| a.report.config.requests)
        .sum::<Option<u64>>();
    let window = Window {
        start_unix_ms: t0,
        measured_s: ((end_ms - t0 as f64) / 1e3).max(0.0),
        // The contract value; the merged window (earliest agent's start to
        // the latest agent's end) is documented with `tlslab merge`.
        observed: "client-observed".into(),
    };
    let cpu = CpuUsage {
        user_s: agents.iter().map(|a| a.report.client_cpu.user_s).sum(),
        sys_s: agents.iter().map(|a| a.report.client_cpu.sys_s).sum(),
        capacity: agents.iter().map(|a| a.report.client_cpu.capacity).sum(),
    };
    let unfinished = agents.iter().map(|a| a.report.requests.unfinished).sum();
    let mut report = crate::build_report(config, window, &stats, unfinished, cpu);

    // CPU: busy over each agent's own window and capacity.
    let cpu_capacity_s: f64 = agents
        .iter()
        .map(|a| a.report.window.measured_s * a.report.client_cpu.capacity as f64)
        .sum();
    let saturated_agents: Vec<String> = agents
        .iter()
        .filter(|a| {
            a.report.client_cpu.saturated
                || a.report.client_cpu.busy_fraction >= SATURATION_THRESHOLD
        })
        .map(|a| a.marker.shard.to_string())
        .collect();
    let busy = if cpu_capacity_s > 0.0 {
        (cpu.user_s + cpu.sys_s) / cpu_capacity_s
    } else {
        0.0
    };
    report.client_cpu = ClientCpu {
        busy_fraction: busy,
        saturated: !saturated_agents.is_empty(),
        warning: (!saturated_agents.is_empty()).then(|| {
            format!(
                "agent(s) {} were saturated (client CPU ≥ {:.0}% busy): the merged result measures those clients, \
                 not the server; add agents or give them more CPUs",
                saturated_agents.join(", "),
                SATURATION_THRESHOLD * 100.0
            )
        }),
        ..report.client_cpu
    };

    report.open_loop = merge_open_loop(&agents);
    report.ecommerce = agents
        .iter()
        .try_fold(crate::model::Ecommerce::default(), |mut acc, a| {
            let e = a.report.ecommerce.as_ref()?;
            acc.sessions += e.sessions;
            acc.new_customers += e.new_customers;
            acc.returning_customers += e.returning_customers;
            acc.pages += e.pages;
            Some(acc)
        });
    report.replay = merge_replay(&agents, report.reuse.achieved);
    report.crypto = merge_crypto(&agents);
    report.backoff = agents
        .iter()
        .filter_map(|a| a.report.backoff.as_ref())
        .fold(None, |acc: Option<crate::model::Backoff>, b| {
            let mut acc = acc.unwrap_or_else(|| crate::model::Backoff {
                base_ms: b.base_ms,
                ..Default::default()
            });
            acc.waits += b.waits;
            acc.waited_s += b.waited_s;
            Some(acc)
        });
    report.ablation = first.ablation.clone();
    report.ablation_hint = agents.iter().find_map(|a| a.report.ablation_hint.clone());

    let mut warnings = Vec::new();
    for m in &missing {
        warnings.push(format!(
            "agent {} is MISSING ({}){}: the merge covers {} of {n} agents and is NOT the whole run",
            m.shard,
            m.reason,
            m.dir
                .as_deref()
                .map(|d| format!(" in {d}"))
                .unwrap_or_default(),
            agents.len()
        ));
    }
    if let Some(w) = &report.client_cpu.warning {
        warnings.push(w.clone());
    }
    for d in differences {
        warnings.push(format!(
            "--force: merged although {d}; the config shown is the first agent's"
        ));
    }
    let start_at = agents.iter().find_map(|a| a.marker.start_at_unix_ms);
    report.distributed = Some(Distributed {
        agents_expected: n,
        agents_merged: agents.len() as u32,
        agents: agents
            .iter()
            .map(|a| AgentSummary {
                shard: a.marker.shard.to_string(),
                dir: a.dir.display().to_string(),
                host: a.marker.host.clone(),
                window_start_unix_ms: a.marker.window_start_unix_ms,
                start_offset_ms: a.marker.window_start_unix_ms as i64 - t0 as i64,
                measured_s: a.marker.measured_s,
                attempted: a.stats.counts.attempted,
                completed: a.stats.counts.completed,
                busy_fraction: a.report.client_cpu.busy_fraction,
                saturated: a.report.client_cpu.saturated
                    || a.report.client_cpu.busy_fraction >= SATURATION_THRESHOLD,
            })
            .collect(),
        missing,
        start_skew_ms: t_last - t0,
        start_at_unix_ms: start_at,
        saturated_agents,
        warnings,
    });
    Ok(report)
}

/// Each way the agents differ from the first (lowest shard): what differs,
/// which agents, and both values. Empty when they are from one run.
fn run_differences(agents: &[AgentOutput]) -> Vec<String> {
    let Some(first) = agents.first() else {
        return Vec::new();
    };
    let name = |a: &AgentOutput| format!("agent {} ({})", a.marker.shard, a.dir.display());
    let mut out = Vec::new();
    let mut check = |what: &str, f: &dyn Fn(&AgentOutput) -> Option<String>| {
        let Some(want) = f(first) else { return };
        if let Some((a, got)) = agents[1..]
            .iter()
            .find_map(|a| f(a).filter(|g| *g != want).map(|g| (a, g)))
        {
            out.push(format!(
                "{} has {what} {} but {} has {}",
                name(a),
                shorten(&got),
                name(first),
                shorten(&want)
            ));
        }
    };
    fn opt(v: Option<String>) -> String {
        v.unwrap_or_else(|| "none".into())
    }
    check("seed", &|a| Some(a.marker.run_seed.to_string()));
    check("--start-at (Unix ms)", &|a| {
        Some(opt(a.marker.start_at_unix_ms.map(|t| t.to_string())))
    });
    check("-c", &|a| a.marker.run_flags.map(|f| f.clients.to_string()));
    check("-n", &|a| {
        a.marker
            .run_flags
            .map(|f| opt(f.requests.map(|n| n.to_string())))
    });
    check("--rate", &|a| {
        a.marker
            .run_flags
            .map(|f| opt(f.rate.map(|r| r.to_string())))
    });
    let config = |f: fn(&crate::model::ConfigEcho) -> String| {
        move |a: &AgentOutput| Some(f(&a.report.config))
    };
    check("targets", &config(targets_key));
    check(
        "requests per connection",
        &config(|c| c.requests_per_conn.to_string()),
    );
    check("reuse", &config(|c| c.reuse.to_string()));
    check("resumption", &config(|c| c.resume_with.clone()));
    check("TLS versions", &config(|c| c.versions.join(",")));
    check("workload", &config(|c| c.workload.clone()));
    check("think time", &config(|c| c.think_time.clone()));
    check(
        "retry on failure",
        &config(|c| c.retry_on_failure.to_string()),
    );
    check(
        "duration (s)",
        &config(|c| opt(c.duration_s.map(|d| d.to_string()))),
    );
    check("warm-up (s)", &config(|c| c.warmup_s.to_string()));
    check(
        "timeout (s)",
        &config(|c| opt(c.timeout_s.map(|d| d.to_string()))),
    );
    check("early data", &config(|c| c.early_data.to_string()));
    // Agents of one run measure at the same time: windows that do not
    // overlap (beyond a second of clock offset between hosts) belong to
    // runs made one after another.
    let end = |a: &AgentOutput| {
        a.marker.window_start_unix_ms + (a.marker.measured_s.max(0.0) * 1e3) as u64
    };
    if let (Some(late), Some(early)) = (
        agents.iter().max_by_key(|a| a.marker.window_start_unix_ms),
        agents.iter().min_by_key(|a| end(a)),
    ) && late.marker.window_start_unix_ms > end(early) + WINDOW_SLACK_MS
    {
        out.push(format!(
            "{}'s window starts {} ms after {}'s ended (their windows do not overlap)",
            name(late),
            late.marker.window_start_unix_ms - end(early),
            name(early)
        ));
    }
    out
}

/// The targets agents of one run share: the URLs themselves for the urls
/// workload; for a workload that draws its paths (specweb96, ecommerce,
/// replay, whose shards replay different paths) the servers they went to.
fn targets_key(c: &crate::model::ConfigEcho) -> String {
    if c.workload.is_empty() || c.workload == "urls" {
        return c.targets.join(" ");
    }
    let mut origins: Vec<&str> = c
        .targets
        .iter()
        .map(|t| {
            let after = t.find("://").map_or(0, |i| i + 3);
            t.get(after..)
                .and_then(|rest| rest.find('/'))
                .map_or(t.as_str(), |end| &t[..after + end])
        })
        .collect();
    origins.sort_unstable();
    origins.dedup();
    origins.join(" ")
}

/// A value cut to 120 characters for a message.
fn shorten(v: &str) -> String {
    match v.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &v[..i]),
        None => v.to_string(),
    }
}

/// How far apart (clock offset between hosts) two windows of one run may
/// be and still count as overlapping, ms.
const WINDOW_SLACK_MS: u64 = 1000;

fn merge_open_loop(agents: &[AgentOutput]) -> Option<crate::model::OpenLoop> {
    let (first, rest) = agents.split_first()?;
    let mut acc = first.report.open_loop.clone()?;
    for a in rest {
        let o = a.report.open_loop.as_ref()?;
        acc.rate += o.rate;
        acc.max_in_flight += o.max_in_flight;
        acc.scheduled += o.scheduled;
        acc.late += o.late;
        acc.dropped += o.dropped;
    }
    Some(acc)
}

fn merge_replay(agents: &[AgentOutput], achieved: f64) -> Option<crate::model::Replay> {
    // The log is parsed and filtered by every agent (skipped and filtered
    // counts are the whole log's); its browsers are split between them.
    let (first, rest) = agents.split_first()?;
    let mut acc = first.report.replay.clone()?;
    for a in rest {
        let r = a.report.replay.as_ref()?;
        acc.log_requests += r.log_requests;
        acc.log_sessions += r.log_sessions;
        acc.sessions_replayed += r.sessions_replayed;
        acc.requests_replayed += r.requests_replayed;
    }
    acc.implied_resumption = if acc.log_requests > 0 {
        (acc.log_requests - acc.log_sessions.min(acc.log_requests)) as f64 / acc.log_requests as f64
    } else {
        0.0
    };
    acc.achieved_resumption = achieved;
    Some(acc)
}

fn merge_crypto(agents: &[AgentOutput]) -> Option<CryptoPerHandshake> {
    let mut totals: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut handshakes = 0u64;
    for a in agents {
        let c = a.report.crypto.as_ref()?;
        handshakes += c.handshakes;
        for op in &c.ops {
            let e = totals.entry(op.op.clone()).or_default();
            e.0 += op.calls;
            // Back to nanoseconds: us_per_handshake × handshakes × 1000.
            e.1 += (op.us_per_handshake * c.handshakes as f64 * 1e3).round() as u64;
        }
    }
    let ops: Vec<CryptoOp> = CryptoPerHandshake::from_totals(
        handshakes,
        totals.iter().map(|(k, &(c, ns))| (k.as_str(), c, ns)),
    )?
    .ops;
    Some(CryptoPerHandshake { handshakes, ops })
}
