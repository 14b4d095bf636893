//! Step one: the command line as clap sees it, one file per family of
//! subcommands. Nothing here does I/O or imports the commands; `cmd/`
//! turns these flags into engine configurations.

pub mod h3;
pub mod lab;
pub mod load;
pub mod peers;
pub mod probe;
pub mod serve;
pub mod tools;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// tlslab: measure what TLS costs an HTTPS server, and what wins it back.
#[derive(Debug, Parser)]
#[command(
    name = "tlslab",
    version,
    about = "A laboratory for measuring what TLS costs an HTTPS server",
    long_about = "tlslab measures what TLS costs an HTTPS server.\n\n\
        `serve` is an HTTPS/HTTP server whose session cache, tickets, versions, suites, groups and \
        certificates can all be switched, with Prometheus metrics. `load` is a load generator with \
        a session-reuse knob that times TCP connect, full and resumed handshakes, first byte and \
        transfer separately, closed- or open-loop, over URLs, the SPECweb96 mix, an e-commerce \
        browser model or a replayed access log. `sweep` steps `load` to the knee. `relay` emulates a WAN \
        path (delay, jitter, bandwidth, loss) in user space. `fileset` writes \
        a workload's files (SPECweb96, e-commerce, replay) for other servers. `lab` runs serve and load on this machine and prints \
        what TLS costs here.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 usage error.",
    after_help = "Start with `tlslab lab --quick`. Every subcommand has its own --help."
)]
pub struct Cli {
    /// Log verbosity for diagnostics on stderr (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    pub log_level: String,

    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a CA and a server certificate chain signed by it.
    Certs(serve::CertsArgs),
    /// Run the HTTPS (and optional plain HTTP) server.
    Serve(serve::ServeArgs),
    /// Generate HTTPS load against one or more URLs and report per-phase timings.
    Load(load::LoadArgs),
    /// Run serve and load together on this machine and print what TLS costs here.
    Lab(lab::LabArgs),
    /// Replace TLS stages with no-ops one at a time and print seed 001's Amdahl cost table.
    Breakdown(lab::BreakdownArgs),
    /// Write a workload's files (specweb96, ecommerce, replay) to a directory, for nginx, Apache or `serve --root`.
    Fileset(tools::FilesetArgs),
    /// Step `load`'s client count or rate until throughput stops growing (the knee),
    /// one latency-vs-throughput series per --reuse value.
    Sweep(load::SweepArgs),
    /// Time full against resumed handshakes of HTTPS sites over days (seed 003's WebPerf),
    /// store them in SQLite, report them, or serve them to Prometheus.
    Probe(probe::ProbeArgs),
    /// Relay TCP to a server through an emulated WAN path (delay, jitter, bandwidth, loss).
    Relay(tools::RelayArgs),
    /// Run a server and a client command in two network namespaces joined by a packet-level WAN
    /// path (delay, jitter, rate or mahimahi trace, drop-tail queue, loss); needs root.
    Path(tools::PathArgs),
    /// A TLS-session-aware L4 load balancer: routes resumptions to the node that holds the session.
    Dispatch(tools::DispatchArgs),
    /// Merge the `load --shard I/N --out DIR` outputs of N agents into one exact report.
    Merge(load::MergeArgs),
    /// Drive an embedded server from 0.5x to 4x its capacity with user sessions (seed 002's
    /// collapse) and compare admission control off, static and session-aware.
    Overload(lab::OverloadArgs),
    /// Seed 000's cluster experiment (Fig. 9): N nodes behind a blind or session-aware dispatcher,
    /// or sharing session state, swept over reuse and resumption mechanisms.
    Cluster(lab::ClusterArgs),
    /// Write a self-contained HTML (inline SVG charts) or Markdown report of experiment results,
    /// `load --json`, `sweep --json` and `overload --json` files.
    Report(tools::ReportArgs),
    /// The capacity model: connections/s and requests/s per core, cores for a load, response
    /// time by M/M/c and seed 004's 300/(1-ρ); `--check` measures it.
    Plan(tools::PlanArgs),
    /// Run a declared matrix, or a seed paper's study, into one resumable results document
    /// with the paper's figures beside today's (`experiment list` names the studies).
    Experiment(lab::ExperimentArgs),
    /// Outside peers' config files (nginx, Apache, HAProxy), for the benchmark scripts.
    #[command(hide = true)]
    Peers(peers::PeersArgs),
}

impl Command {
    /// Every output file named by a flag, as `(flag, path)`: the one list,
    /// checked before any work (directories that a subcommand creates, such
    /// as `load --out` and `fileset --out`, are not in it).
    pub fn output_files(&self) -> Vec<(&'static str, Option<&PathBuf>)> {
        use Command as C;
        match self {
            C::Load(a) => vec![("--json", a.json.as_ref()), ("--log", a.log.as_ref())],
            C::Sweep(a) => vec![
                ("--json", a.load.json.as_ref()),
                ("--log", a.load.log.as_ref()),
            ],
            C::Serve(a) => vec![("--access-log", a.access_log.as_ref())],
            C::Lab(lab::LabArgs { json, .. })
            | C::Breakdown(lab::BreakdownArgs { json, .. })
            | C::Merge(load::MergeArgs { json, .. })
            | C::Overload(lab::OverloadArgs { json, .. })
            | C::Cluster(lab::ClusterArgs { json, .. })
            | C::Plan(tools::PlanArgs { json, .. }) => vec![("--json", json.as_ref())],
            C::Path(a) => vec![("--json", a.json.as_ref()), ("--pcap", a.pcap.as_ref())],
            C::Report(a) => vec![("--html", a.html.as_ref()), ("--md", a.md.as_ref())],
            C::Certs(_)
            | C::Fileset(_)
            | C::Probe(_)
            | C::Relay(_)
            | C::Dispatch(_)
            | C::Experiment(_)
            | C::Peers(_) => vec![],
        }
    }
}
