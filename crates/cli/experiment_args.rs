//! `tlslab experiment`: list the built-in studies, run one, or run a
//! declared TOML matrix, into a results document (`DIR/results.json`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tlslab_experiment::study::{self, Matrix, RunOptions, StudyError};
use tlslab_report::study::StudyResults;

/// `tlslab experiment`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  tlslab experiment list\n  \
    tlslab experiment run seed000-reuse --quick --out results/reuse\n  \
    tlslab experiment run --config matrix.toml --out results/mine\n  \
    tlslab experiment run --resume results/mine --config matrix.toml\n\n\
    Each cell runs an embedded server on loopback pinned to one CPU and the load engine pinned \
    to another; repeats are interleaved (every point once per round). The results document \
    (docs/schema.md: results.json) holds every raw cell with an equivalent command \
    line, the environment, and for a built-in study its paper's figures against today's. It is \
    rewritten atomically after every cell, so an interrupted run continues with --resume DIR.")]
pub struct ExperimentArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ExperimentCommand,
}

/// The `experiment` subcommands.
#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// List the built-in studies, their engines and whether each can run in this build.
    List,
    /// Run a built-in study (NAME) or a declared matrix (--config FILE.toml).
    Run(RunArgs),
}

/// `tlslab experiment run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A built-in study (`tlslab experiment list`).
    #[arg(
        value_name = "NAME",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub name: Option<String>,

    /// A declared matrix: engine, factors and levels, repeats, cell duration, pinning
    /// (docs/experiment.md shows the format).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// The short version of a built-in study (fewer levels, shorter cells, one repeat).
    #[arg(long)]
    pub quick: bool,

    /// Write the results document to DIR/results.json (default: ./experiment-NAME). DIR must
    /// not hold one already.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub out: Option<PathBuf>,

    /// Continue the interrupted run whose document is DIR/results.json: cells already in it
    /// are skipped. Give the same NAME (and --quick) or --config as the first run.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,

    /// Confirm that a study replacing TLS stages with no-ops (seed001-breakdown) may run its
    /// embedded server and client that way (insecure; both stay on loopback).
    #[arg(long)]
    pub insecure_ablation: bool,

    /// No progress bar (it is drawn only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs `tlslab experiment`.
pub fn run(a: ExperimentArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        ExperimentCommand::List => {
            print!("{}", study::render_list());
            Ok(ExitCode::SUCCESS)
        }
        ExperimentCommand::Run(r) => run_study(r),
    }
}

fn usage_or_runtime(e: StudyError) -> anyhow::Error {
    if e.is_usage() {
        crate::config::usage(e)
    } else {
        anyhow::Error::new(e).context("running the experiment")
    }
}

fn run_study(a: RunArgs) -> anyhow::Result<ExitCode> {
    let command_line: Vec<String> = std::env::args().collect();
    let progress_bar = !a.no_progress && std::io::stderr().is_terminal();
    let log: Box<dyn FnMut(&str)> = Box::new(|l: &str| eprintln!("{l}"));
    let dir = |name: &str| {
        a.resume
            .clone()
            .or_else(|| a.out.clone())
            .unwrap_or_else(|| PathBuf::from(format!("experiment-{name}")))
    };
    let doc = if let Some(path) = &a.config {
        if a.quick {
            return Err(crate::config::usage(
                "--quick is for built-in studies; in a matrix file set `cell` and `repeats`",
            ));
        }
        let m = Matrix::from_file(path).map_err(crate::config::usage)?;
        let opts = RunOptions {
            out: dir(&m.name),
            resume: a.resume.is_some(),
            quick: false,
            command_line,
            progress_bar,
        };
        eprintln!(
            "tlslab experiment: {}: {} cells ({} repeats, interleaved) of {} s each, into {}",
            m.name,
            m.cell_count(),
            m.repeats,
            m.cell.as_secs_f64(),
            opts.out.join(study::RESULTS_FILE).display()
        );
        study::run_matrix(&m, &opts, log).map_err(usage_or_runtime)?
    } else {
        let name = a.name.as_deref().unwrap_or_default();
        let b = study::builtin(name).map_err(usage_or_runtime)?;
        if b.landed && b.insecure_ablation && !a.insecure_ablation {
            return Err(crate::config::usage(format!(
                "{name} replaces TLS stages with no-ops on its loopback server and client \
                 (insecure, for measurement only); confirm with --insecure-ablation"
            )));
        }
        let opts = RunOptions {
            out: dir(name),
            resume: a.resume.is_some(),
            quick: a.quick,
            command_line,
            progress_bar,
        };
        if b.landed {
            eprintln!(
                "tlslab experiment: {name}{} ({}), into {}",
                if a.quick { " --quick" } else { "" },
                b.seed,
                opts.out.join(study::RESULTS_FILE).display()
            );
        }
        study::run_builtin(&b, &opts, log).map_err(usage_or_runtime)?
    };
    print_summary(&doc, &a)?;
    Ok(ExitCode::SUCCESS)
}

fn print_summary(doc: &StudyResults, a: &RunArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\n{}: {} cells measured{}; {}",
        doc.study,
        doc.cells.len(),
        if a.resume.is_some() {
            " (resumed run)"
        } else {
            ""
        },
        doc.environment.placement
    )?;
    if !doc.comparisons.is_empty() {
        writeln!(
            out,
            "\nPaper against today (today's figure measured; see each row's method in the document):"
        )?;
        for c in &doc.comparisons {
            let today = c.today.map_or_else(
                || "not measured".to_string(),
                |v| {
                    if v.abs() >= 100.0 {
                        format!("{v:.0} {}", c.unit)
                    } else {
                        format!("{v:.2} {}", c.unit)
                    }
                },
            );
            writeln!(
                out,
                "- {}\n    paper: {} ({})\n    today: {today}\n    why: {}",
                c.quantity, c.paper, c.source, c.reason
            )?;
        }
    }
    for n in &doc.notes {
        writeln!(out, "note: {n}")?;
    }
    let dir = a
        .resume
        .clone()
        .or_else(|| a.out.clone())
        .unwrap_or_else(|| PathBuf::from(format!("experiment-{}", doc.study)));
    writeln!(
        out,
        "\nresults: {}",
        dir.join(study::RESULTS_FILE).display()
    )?;
    Ok(())
}
