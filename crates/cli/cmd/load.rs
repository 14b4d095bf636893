//! `tlslab load`: its flags into a plan ([`crate::flags::load`]), the access
//! log of a replay read and sharded, the load crate's own checks, and the
//! run.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use tlslab_report::LoadReportText;

use crate::args::load::LoadArgs;
use crate::flags::load::config;
use crate::flags::shard::Agent;
use crate::output::write_json;

/// Runs `tlslab load`.
pub fn run(a: LoadArgs) -> anyhow::Result<ExitCode> {
    let agent = Agent::from_args(&a.dist)?;
    let mut cfg = config(&a)?.prepare(agent.shard())?;
    agent.apply(&mut cfg)?;
    cfg.progress = !a.no_progress && std::io::stderr().is_terminal();
    crate::output::warn_key_log(cfg.key_log.as_deref());
    crate::flags::warn_insecure(a.insecure);
    if !cfg.ablation.is_empty() {
        eprintln!(
            "tlslab: WARNING: --ablate {}: INSECURE: these TLS stages are replaced by no-ops; \
             the connections protect nothing and the numbers measure a model, not real TLS",
            cfg.ablation
        );
    }
    if let Some(s) = &cfg.source_ip {
        eprintln!(
            "tlslab load: source addresses {}; {} clients use {} of them",
            s.describe(),
            cfg.clients,
            s.used(cfg.clients)
        );
    }
    let report =
        a.h3.run(&cfg, a.max_concurrent_streams)
            .context("running the load")?;
    print!("{}", report.render_table());
    if let Some(path) = &a.json {
        // The echo of --source-ip / --clients-per-ip (not part of the
        // load crate's config echo, so added here, only when given).
        let mut json = report.clone();
        if let Some(s) = &cfg.source_ip {
            json.config.source_ip = a.source_ip.clone();
            json.config.clients_per_ip = Some(s.per_ip() as u64);
            json.config.source_addresses_used = Some(s.used(cfg.clients) as u64);
        }
        // Through `Value`: the file's keys are sorted, as they always were
        // (sorted explicitly: qlog turns on serde_json's preserve_order).
        write_json(
            path,
            &tlslab_schema::engine::sort_keys(serde_json::to_value(&json)?),
        )?;
    }
    agent.finish(&report)?;
    if let Some(why) = report.failed_gate(a.max_error_rate.unwrap_or(100.0)) {
        eprintln!("tlslab: {why}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
