//! `tlslab`: the command-line front of the tlslab engines.
//!
//! Flags flow one way: `args` holds the raw flags (clap), `cmd` turns
//! each subcommand's into its engine's configuration and runs it, and
//! `main` dispatches. `usage`, `parse` and `output` are leaves every layer
//! may use. Exit codes: 0 success, 1 runtime failure, 2 usage error (bad
//! flags, bad files named by flags).

// The doc comments of `args` are clap's `--help` text, written for a
// terminal: `<arm>`, `host:port` in brackets and bare URLs there are the
// user's words, not rustdoc markup.
#![allow(
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links,
    rustdoc::bare_urls
)]

mod args;
mod cmd;
mod flags;
mod output;
mod parse;
mod usage;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

/// mimalloc instead of glibc malloc: the server and the load generator
/// allocate and free small buffers on every handshake and request (rustls
/// messages, hyper headers, tokio tasks). glibc's malloc/free took about
/// 8 % of `tlslab serve`'s CPU per full TLS 1.3 handshake, mimalloc's about
/// half of that. Wrapped in a counter of allocations per thread that
/// counts only under `lab --explain` (otherwise one relaxed load per
/// allocation; docs/lab.md gives the cost of both).
#[global_allocator]
static GLOBAL: tlslab_runtime::CountingAlloc<mimalloc::MiMalloc> =
    tlslab_runtime::CountingAlloc::new(mimalloc::MiMalloc);

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
    let code = run(cli).unwrap_or_else(|err| usage::exit_code(&err));
    // Key log lines still in memory (--keylog, SSLKEYLOGFILE).
    tlslab_crypto::keylog::flush_all();
    code
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    output::check(&cli.command.output_files())?;
    match cli.command {
        Command::Certs(a) => cmd::serve::certs(&a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Load(a) => cmd::load::run(a),
        Command::Lab(a) => cmd::lab::lab(&a),
        Command::Breakdown(a) => cmd::lab::breakdown(&a),
        Command::Fileset(a) => cmd::tools::fileset(&a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Relay(a) => cmd::tools::relay(&a),
        Command::Path(a) => cmd::path::run(a),
        Command::Dispatch(a) => cmd::dispatch::run(&a),
        Command::Merge(a) => cmd::distributed::merge(&a),
        Command::Overload(a) => cmd::lab::overload(&a),
        Command::Cluster(a) => cmd::lab::cluster(&a),
        Command::Report(a) => cmd::report::report(&a),
        Command::Plan(a) => cmd::report::plan(&a),
        Command::Experiment(a) => cmd::experiment::run(a),
        Command::Peers(a) => cmd::peers::run(&a),
    }
}
