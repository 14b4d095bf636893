//! `tlslab experiment`: list the built-in studies, run one, or run a
//! declared TOML matrix, into a results document (`DIR/results.json`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use tlslab_experiment::study::{self, Matrix, PathChoice, RunOptions, StudyError};
use tlslab_report::study::StudyResults;

use crate::args::lab::{ExperimentArgs, ExperimentCommand, RunArgs};
use crate::usage::usage;

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
        usage(e)
    } else {
        anyhow::Error::new(e).context("running the experiment")
    }
}

fn run_study(a: RunArgs) -> anyhow::Result<ExitCode> {
    let command_line: Vec<String> = std::env::args().collect();
    let progress_bar = !a.no_progress && std::io::stderr().is_terminal();
    let log: Box<dyn FnMut(&str)> = Box::new(|l: &str| eprintln!("{l}"));
    // The options of the run whose results are under `name` (a matrix
    // refuses --quick below, so `quick` is false for one).
    let opts = |name: &str| RunOptions {
        out: results_dir(&a, name),
        resume: a.resume.is_some(),
        quick: a.quick,
        command_line,
        progress_bar,
        path: a.path,
        pcap: a.pcap.clone(),
    };
    let doc = if let Some(path) = &a.config {
        if a.quick {
            return Err(usage(
                "--quick is for built-in studies; in a matrix file set `cell` and `repeats`",
            ));
        }
        if a.path != PathChoice::Relay {
            return Err(usage(format!(
                "--path-kind is for the built-in studies {}; a matrix's cells run on loopback",
                study::path_studies()
            )));
        }
        let m = Matrix::from_file(path).map_err(usage)?;
        let opts = opts(&m.name);
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
        if b.insecure_ablation() && !a.insecure_ablation {
            return Err(usage(format!(
                "{name} replaces TLS stages with no-ops on its loopback server and client \
                 (insecure, for measurement only); confirm with --insecure-ablation"
            )));
        }
        let opts = opts(name);
        eprintln!(
            "tlslab experiment: {name}{}{} ({}), into {}",
            if a.quick { " --quick" } else { "" },
            if a.path == PathChoice::Relay {
                String::new()
            } else {
                format!(" --path-kind {}", a.path.name())
            },
            b.about().seed,
            opts.out.join(study::RESULTS_FILE).display()
        );
        study::run_builtin(b, &opts, log).map_err(usage_or_runtime)?
    };
    print_summary(&doc, &a)?;
    Ok(ExitCode::SUCCESS)
}

/// Where the results document goes: --resume DIR, --out DIR, or
/// ./experiment-NAME.
fn results_dir(a: &RunArgs, name: &str) -> PathBuf {
    a.resume
        .clone()
        .or_else(|| a.out.clone())
        .unwrap_or_else(|| PathBuf::from(format!("experiment-{name}")))
}

fn print_summary(doc: &StudyResults, a: &RunArgs) -> anyhow::Result<()> {
    let dir = |name: &str| results_dir(a, name).join(study::RESULTS_FILE);
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
    writeln!(out, "\nresults: {}", dir(&doc.study).display())?;
    Ok(())
}
