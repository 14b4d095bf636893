//! `tlslab`: the command-line front of the tlslab engines.
//!
//! This binary only wires flags to engines: `args` holds the raw flags
//! (clap), `config` validates them into engine configurations without doing
//! network I/O, and each subcommand below hands the result to its engine and
//! prints what comes back. Exit codes: 0 success, 1 runtime failure, 2 usage
//! error (bad flags, bad files named by flags).

mod args;
mod cluster_args;
mod config;
mod dispatch_cmd;
mod distributed;
mod experiment_args;
mod h3_args;
mod overload_args;
mod path_cmd;
mod probe;
mod report_args;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::args::{Cli, Command};
use crate::config::Usage;

/// mimalloc instead of glibc malloc: the server and the load generator
/// allocate and free small buffers on every handshake and request (rustls
/// messages, hyper headers, tokio tasks). glibc's malloc/free took about
/// 8 % of `tlslab serve`'s CPU per full TLS 1.3 handshake, mimalloc's about
/// half of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    init_tracing(&cli.log_level);
    // Once, for every command: servers, proxies and load generators all
    // hold one descriptor per connection.
    match tlslab_runtime::raise_nofile_limit() {
        Ok(l) => tracing::info!(
            "RLIMIT_NOFILE: soft limit {} (was {}), hard limit {}",
            l.soft,
            l.soft_before,
            l.hard
        ),
        Err(e) => tracing::warn!(
            "cannot raise the file-descriptor limit (RLIMIT_NOFILE): {e}; at most `ulimit -n` connections can be open"
        ),
    }
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("tlslab: {err:#}");
            if err.downcast_ref::<Usage>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    config::output_files(&cli.command)?;
    match cli.command {
        Command::Certs(a) => certs(a),
        Command::Serve(a) => serve(a),
        Command::Load(a) => load(a),
        Command::Lab(a) => lab(a),
        Command::Breakdown(a) => breakdown(a),
        Command::Fileset(a) => fileset(a),
        Command::Sweep(a) => sweep(a),
        Command::Probe(a) => probe::run(a),
        Command::Relay(a) => relay(a),
        Command::Path(a) => path_cmd::run(a),
        Command::Dispatch(a) => dispatch_cmd::run(a),
        Command::Merge(a) => distributed::merge(&a),
        Command::Overload(a) => overload_args::run(&a),
        Command::Cluster(a) => cluster_args::run(&a),
        Command::Report(a) => report_args::report(&a),
        Command::Plan(a) => report_args::plan(&a),
        Command::Experiment(a) => experiment_args::run(a),
    }
}

fn relay(a: args::RelayArgs) -> anyhow::Result<ExitCode> {
    let cfg = config::relay(&a)?;
    let (upstream, conditions) = (cfg.upstream, cfg.conditions);
    let relay = tlslab_relay::RelayThread::spawn(cfg).map_err(|e| match e {
        tlslab_relay::Error::Bind(..) => config::usage(format!("--listen: {e}")),
        other => anyhow::Error::new(other),
    })?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "relay listening on {}", relay.local_addr())?;
        writeln!(out, "relay: to {upstream}; {conditions}")?;
        out.flush()?;
    }
    tlslab_server::wait_for_signal().context("waiting for SIGINT/SIGTERM")?;
    let s = relay.stop();
    println!(
        "relay: {} connections ({} upstream failures), {} bytes up, {} bytes down, \
         {} segments, {} lost (delayed as retransmitted)",
        s.connections, s.upstream_failures, s.bytes_up, s.bytes_down, s.segments, s.lost
    );
    Ok(ExitCode::SUCCESS)
}

fn sweep(a: args::SweepArgs) -> anyhow::Result<ExitCode> {
    if a.load.dist.is_set() {
        return Err(config::usage(
            "--shard, --start-at and --out are for `tlslab load`; sweep runs on one machine",
        ));
    }
    if a.load.max_error_rate.is_some() {
        return Err(config::usage(
            "--max-error-rate gates one `tlslab load` run; a sweep runs past the knee, where errors are expected",
        ));
    }
    let (configs, plan) = config::sweep(&a)?;
    let mut series = Vec::new();
    eprintln!(
        "tlslab sweep: over {}, x{} per step, at most {} steps per reuse value",
        plan.over.name(),
        plan.factor,
        plan.max_steps
    );
    for cfg in &configs {
        eprintln!("reuse {:.0}%:", cfg.reuse * 100.0);
        eprintln!("{}", tlslab_report::SweepStep::header());
        let s = tlslab_load::sweep_series(cfg, &plan, |step| eprintln!("{}", step.row()))
            .context("running the sweep")?;
        series.push(s);
    }
    let report = tlslab_report::SweepReport {
        schema_version: 1,
        over: plan.over.name().into(),
        factor: plan.factor,
        knee_gain: plan.knee_gain,
        step_s: configs
            .first()
            .and_then(|c| c.duration)
            .map(|d| d.as_secs_f64()),
        series,
    };
    print!("{}", report.render());
    if let Some(path) = &a.load.json {
        let body = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn fileset(a: args::FilesetArgs) -> anyhow::Result<ExitCode> {
    use tlslab_workload::fileset::{Overwrite, write_sized};
    let files = config::fileset_files(&a)?;
    let overwrite = if a.force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    };
    let written = write_sized(
        &a.out,
        files.files.iter().map(|(p, n)| (p.as_str(), *n)),
        overwrite,
    )
    .map_err(|e| match e {
        tlslab_workload::Error::Exists { .. } => config::usage(format!("{e} (--force overwrites)")),
        tlslab_workload::Error::Invalid(_) => config::usage(e),
        other => anyhow::Error::new(other),
    })?;
    let bytes: u64 = files.files.iter().map(|(_, n)| n).sum();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "wrote {} files, {bytes} bytes, under {}",
        written.len(),
        a.out.display()
    )?;
    if !files.skipped.is_empty() {
        writeln!(
            out,
            "skipped {} logged paths that cannot be files (e.g. {}); a replay with \
             --replay-paths original gets 404 for them",
            files.skipped.len(),
            files.skipped[0]
        )?;
    }
    writeln!(
        out,
        "serve them with nginx `root {0};`, Apache `DocumentRoot {0}` or `tlslab serve --root {0}`; \
         load them with `tlslab load https://HOST:PORT {1}`",
        a.out.display(),
        files.load_hint
    )?;
    Ok(ExitCode::SUCCESS)
}

fn certs(a: args::CertsArgs) -> anyhow::Result<ExitCode> {
    let key_type = config::key_type(&a.key)?;
    let mid = a
        .intermediate_key
        .as_deref()
        .map(config::key_type)
        .transpose()?;
    let generated =
        tlslab_crypto::pki::generate_chain(key_type, mid, &a.san).map_err(config::usage)?;
    let written = generated.write_to(&a.out).map_err(config::usage)?;
    let mut out = std::io::stdout().lock();
    for path in written {
        writeln!(out, "wrote {}", path.display())?;
    }
    writeln!(
        out,
        "clients trust {}; serve with --cert {} --key {}",
        a.out.join(tlslab_crypto::pki::CA_CERT_FILE).display(),
        a.out.join(tlslab_crypto::pki::CHAIN_FILE).display(),
        a.out.join(tlslab_crypto::pki::KEY_FILE).display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn serve(a: args::ServeArgs) -> anyhow::Result<ExitCode> {
    let prepared = config::serve(&a)?;
    let h3 = a.h3.settings(
        prepared.config.https,
        prepared
            .config
            .tls
            .versions
            .contains(&tlslab_crypto::provider::Version::Tls13),
    )?;
    let server =
        tlslab_server::Server::start_with_h3(prepared.config, h3).context("starting the server")?;
    for w in server.warnings() {
        eprintln!("tlslab: WARNING: {w}");
    }
    {
        let mut out = std::io::stdout().lock();
        if let Some(addr) = server.https_addr() {
            writeln!(out, "tlslab serve: https https://{addr}")?;
        }
        if let Some(addr) = server.h3_addr() {
            writeln!(out, "tlslab serve: h3 https://{addr} (UDP)")?;
        }
        if let Some(addr) = server.http_addr() {
            writeln!(out, "tlslab serve: http http://{addr}")?;
        }
        if let Some(addr) = server.metrics_addr() {
            writeln!(out, "tlslab serve: metrics http://{addr}/metrics")?;
        }
        if let Some(ca) = &prepared.ephemeral_ca {
            writeln!(out, "tlslab serve: ca {}", ca.display())?;
        }
        if let Some(p) = config::node_prefix(a.node_tag.as_deref())? {
            let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "tlslab serve: node-tag {hex}")?;
        }
        out.flush()?;
    }
    tlslab_server::wait_for_signal().context("waiting for SIGINT/SIGTERM")?;
    let quic = server.quic_snapshot();
    let summary = server.shutdown();
    if let Some(dir) = prepared.ephemeral_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    println!("{}", summary.summary());
    if let Some(q) = quic {
        println!("{}", q.summary());
    }
    Ok(ExitCode::SUCCESS)
}

fn load(a: args::LoadArgs) -> anyhow::Result<ExitCode> {
    let agent = distributed::Agent::from_args(&a.dist)?;
    let mut cfg = config::load(&a)?;
    agent.apply(&mut cfg)?;
    cfg.progress = !a.no_progress && std::io::stderr().is_terminal();
    if a.insecure {
        eprintln!(
            "tlslab: WARNING: --insecure: server certificates are NOT verified; \
             timings are valid, the connection is not authenticated"
        );
    }
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
        let mut json = serde_json::to_value(&report)?;
        // The echo of --source-ip / --clients-per-ip (not part of the
        // report crate's config echo, so added here, only when given).
        if let (Some(s), Some(c)) = (&cfg.source_ip, json.get_mut("config"))
            && let Some(c) = c.as_object_mut()
        {
            c.insert("source_ip".into(), a.source_ip.clone().into());
            c.insert("clients_per_ip".into(), s.per_ip().into());
            c.insert(
                "source_addresses_used".into(),
                (s.used(cfg.clients) as u64).into(),
            );
        }
        let body = serde_json::to_vec_pretty(&json)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    agent.finish(&report)?;
    if let Some(why) = report.failed_gate(a.max_error_rate.unwrap_or(100.0)) {
        eprintln!("tlslab: {why}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn lab(a: args::LabArgs) -> anyhow::Result<ExitCode> {
    let cfg = config::lab(&a)?;
    let report =
        tlslab_experiment::lab::run(&cfg, |line| eprintln!("{line}")).context("running the lab")?;
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let body = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn breakdown(a: args::BreakdownArgs) -> anyhow::Result<ExitCode> {
    let cfg = config::breakdown(&a)?;
    eprintln!(
        "tlslab: WARNING: breakdown runs an embedded loopback server and client with TLS stages \
         replaced by no-ops (insecure; for measurement only)"
    );
    let report = tlslab_experiment::breakdown::run(&cfg, |line| eprintln!("{line}"))
        .context("running the breakdown")?;
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let body = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
