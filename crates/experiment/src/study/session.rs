//! One run of a study: the results document in its output directory,
//! written atomically after every cell, the progress, the errors, and the
//! helpers the studies share to compare the paper with today.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};
use tlslab_report::study::{
    Cell, Comparison, Environment, STUDY_KIND, STUDY_SCHEMA_VERSION, StudyResults,
};

use super::matrix::MatrixError;
use crate::pin::Placement;

/// The file a run writes in its output directory.
pub const RESULTS_FILE: &str = "results.json";

/// Why a study could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StudyError {
    /// A bad matrix file, an unknown study, or a `--resume` directory that
    /// does not fit: a usage error (exit 2).
    #[error("{0}")]
    Usage(String),
    /// An engine failed while measuring (exit 1).
    #[error(transparent)]
    Run(#[from] crate::Error),
    /// The results document could not be read or written (exit 1).
    #[error("{path}: {source}; check that the directory exists, is writable and has space")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl StudyError {
    /// Whether this is a usage error (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, StudyError::Usage(_))
    }
}

impl From<MatrixError> for StudyError {
    fn from(e: MatrixError) -> Self {
        StudyError::Usage(e.to_string())
    }
}

/// How a run is done.
pub struct RunOptions {
    /// The directory the document goes to (`DIR/results.json`).
    pub out: PathBuf,
    /// Continue the document already in `out`, skipping its cells.
    pub resume: bool,
    /// The short version of a built-in.
    pub quick: bool,
    /// The command line, recorded in the document.
    pub command_line: Vec<String>,
    /// Draw a progress bar (the caller checks stderr is a terminal).
    pub progress_bar: bool,
    /// The path the round-trip cells cross (the studies that take one,
    /// [`super::Study::takes_path`]).
    pub path: super::PathChoice,
    /// `--pcap DIR`: each run of the packet-level path writes its capture
    /// to `DIR/NAME.pcapng` (NAME: the cell's id, or the path's own name
    /// where several cells share one path), so no capture overwrites
    /// another.
    pub pcap: Option<PathBuf>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The machine and the software, read from /proc.
pub fn environment(placement: &Placement) -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = ["model name", "Hardware", "Processor", "cpu model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key).then(|| v.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown (no model name in /proc/cpuinfo)".into());
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let kernel = format!(
        "{} {}",
        read("/proc/sys/kernel/ostype"),
        read("/proc/sys/kernel/osrelease")
    )
    .trim()
    .to_string();
    Environment {
        cpu_model,
        cores: tlslab_runtime::allowed_cpus().len(),
        kernel,
        hostname: read("/proc/sys/kernel/hostname"),
        tlslab_version: env!("CARGO_PKG_VERSION").into(),
        tls_library: format!(
            "rustls {} with aws-lc-rs {} (the crypto provider)",
            env!("TLSLAB_RUSTLS_VERSION"),
            env!("TLSLAB_AWS_LC_RS_VERSION")
        ),
        placement: placement.describe(),
        loadavg_1m: crate::loadavg(),
    }
}

/// One run of a study: the document, where it goes, and the progress.
pub struct Session {
    /// The document so far.
    pub doc: StudyResults,
    /// Whether this is the `--quick` version.
    pub quick: bool,
    /// Where the server and the client run.
    pub placement: Placement,
    /// The path the round-trip cells cross.
    pub wan: super::PathChoice,
    /// Where packet-path captures go (`--pcap DIR`).
    pcap: Option<PathBuf>,
    path: PathBuf,
    bar: Option<ProgressBar>,
    log: Box<dyn FnMut(&str)>,
    skipped: usize,
}

impl Session {
    /// Opens (or, with `resume`, reopens) the document for a study whose
    /// matrix is `matrix` and whose cells number `planned`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        study: &str,
        title: &str,
        seed: &str,
        matrix: serde_json::Value,
        planned: usize,
        placement: Placement,
        opts: &RunOptions,
        log: Box<dyn FnMut(&str)>,
    ) -> Result<Session, StudyError> {
        let path = opts.out.join(RESULTS_FILE);
        let doc = if opts.resume {
            let doc = read_document(&path)?;
            if doc.study != study {
                return Err(StudyError::Usage(format!(
                    "--resume {}: its document is of study '{}', not '{study}'; give the \
                     directory of an interrupted run of the same study",
                    opts.out.display(),
                    doc.study
                )));
            }
            if doc.quick != opts.quick {
                return Err(StudyError::Usage(format!(
                    "--resume {}: that run was {}; {} --quick to match it",
                    opts.out.display(),
                    if doc.quick {
                        "--quick"
                    } else {
                        "the full version"
                    },
                    if doc.quick { "add" } else { "drop" }
                )));
            }
            if doc.matrix != matrix {
                return Err(StudyError::Usage(format!(
                    "--resume {}: the matrix differs from the one that run declared; resume \
                     with the same configuration, or start afresh with --out NEWDIR",
                    opts.out.display()
                )));
            }
            doc
        } else {
            if path.exists() {
                return Err(StudyError::Usage(format!(
                    "{} already exists; continue that run with --resume {} or choose another \
                     --out directory",
                    path.display(),
                    opts.out.display()
                )));
            }
            std::fs::create_dir_all(&opts.out).map_err(|source| StudyError::Io {
                path: opts.out.clone(),
                source,
            })?;
            StudyResults {
                kind: STUDY_KIND.into(),
                schema_version: STUDY_SCHEMA_VERSION,
                study: study.into(),
                title: title.into(),
                seed: seed.into(),
                quick: opts.quick,
                command_line: opts.command_line.clone(),
                environment: environment(&placement),
                matrix,
                started_unix_ms: now_ms(),
                finished_unix_ms: 0,
                complete: false,
                cells: vec![],
                comparisons: vec![],
                engine_report: None,
                curves: vec![],
                notes: vec![],
                charts: vec![],
            }
        };
        if let Some(dir) = &opts.pcap {
            std::fs::create_dir_all(dir).map_err(|source| StudyError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let skipped = doc.cells.len();
        let bar = opts.progress_bar.then(|| {
            let bar = ProgressBar::new(planned as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} cells, {elapsed} elapsed, ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(study.to_string());
            bar.set_position(skipped.min(planned) as u64);
            bar.reset_eta();
            bar
        });
        let mut s = Session {
            doc,
            quick: opts.quick,
            placement,
            wan: opts.path,
            pcap: opts.pcap.clone(),
            path,
            bar,
            log,
            skipped,
        };
        if let Some(dir) = &opts.pcap {
            s.say(&format!(
                "capturing each run of the packet-level path to {}/NAME.pcapng",
                dir.display()
            ));
        }
        if skipped > 0 {
            s.say(&format!(
                "resuming {}: {skipped} cells already measured, skipped",
                s.path.display()
            ));
        }
        s.save()?;
        Ok(s)
    }

    /// Sets the progress bar's total to `planned` units: a study's plan
    /// counts its round-trip cells over one path kind, and `--path-kind both`
    /// runs them once per kind, so a path study sets its total once it
    /// knows the kinds.
    pub fn set_planned(&mut self, planned: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(planned as u64);
            bar.set_position(self.skipped.min(planned) as u64);
        }
    }

    /// Prints a line (above the bar, if there is one).
    pub fn say(&mut self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => (self.log)(line),
        }
    }

    /// The capture file of the packet-level path run `name` (a cell's id,
    /// or the name of a path several cells share): `DIR/NAME.pcapng` with
    /// `--pcap DIR`, else `None` (no capture).
    pub fn capture(&self, name: &str) -> Option<PathBuf> {
        self.pcap
            .as_ref()
            .map(|dir| dir.join(format!("{name}.pcapng")))
    }

    /// Prints what the capture of path run `name` wrote: its files, its
    /// packet and byte counts, its drops and the writer's CPU.
    pub fn say_capture(&mut self, name: &str, path: &tlslab_path::PathReport) {
        if let Some(p) = &path.pcap {
            self.say(&format!("  {name}: {p}"));
        }
    }

    /// Adds `note` to the document's notes unless it is there already.
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.doc.notes.contains(&note) {
            self.doc.notes.push(note);
        }
    }

    /// Whether the cell `id` is already in the document (a resumed run).
    pub fn has(&self, id: &str) -> bool {
        self.doc.cells.iter().any(|c| c.id == id)
    }

    /// The cell `id`, if measured.
    pub fn cell(&self, id: &str) -> Option<&Cell> {
        self.doc.cells.iter().find(|c| c.id == id)
    }

    /// Cells of the document skipped because a resumed run had them.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Adds a measured cell and writes the document.
    pub fn push(&mut self, mut cell: Cell) -> Result<(), StudyError> {
        cell.order = self.doc.cells.len();
        let line = format!(
            "  {:<44} {}{}",
            cell.id,
            if cell.metrics.requests_per_s > 0.0 {
                format!("{:>9.0} req/s", cell.metrics.requests_per_s)
            } else {
                format!("{:>9} measured", cell.metrics.requests)
            },
            if cell.metrics.server_cpu_us_per_request > 0.0 {
                format!(
                    ", server CPU {:.0} µs/req",
                    cell.metrics.server_cpu_us_per_request
                )
            } else {
                String::new()
            }
        );
        self.doc.cells.push(cell);
        self.save()?;
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        self.say(&line);
        Ok(())
    }

    /// Counts a unit of work that is not a cell (an engine's own run) on
    /// the progress bar.
    pub fn tick(&mut self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Runs a study's engine, one unit of the progress bar, unless a
    /// resumed document has its report already: its progress lines are
    /// printed when it ends, `record` adds its cells and notes (given the
    /// start time), and the document keeps its report.
    pub(crate) fn engine_once<R: serde::Serialize>(
        &mut self,
        run: impl FnOnce(&mut dyn FnMut(&str)) -> Result<R, crate::Error>,
        record: impl FnOnce(&R, &mut StudyResults, u64),
    ) -> Result<(), StudyError> {
        if self.doc.engine_report.is_some() {
            return Ok(());
        }
        let started = now_ms();
        let mut lines = Vec::new();
        let report = run(&mut |l| lines.push(l.to_string()))?;
        for l in &lines {
            self.say(l);
        }
        record(&report, &mut self.doc, started);
        self.doc.engine_report = tlslab_report::study::EngineReport::engine(&report);
        self.save()?;
        self.tick();
        Ok(())
    }

    /// Writes the document: a temporary file in the same directory, then a
    /// rename over `results.json`, so a reader (or a resume) never sees half
    /// a document.
    pub fn save(&self) -> Result<(), StudyError> {
        write_atomic(&self.path, &self.doc)
    }

    /// Marks the document complete, adds the comparisons and writes it.
    pub fn finish(&mut self, comparisons: Vec<Comparison>) -> Result<(), StudyError> {
        self.doc.comparisons = comparisons;
        self.doc.complete = true;
        self.doc.finished_unix_ms = now_ms();
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.save()
    }

    /// Where the document is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a results document.
pub fn read_document(path: &Path) -> Result<StudyResults, StudyError> {
    use tlslab_workload::input::{MAX_JSON_FILE, read_capped};
    let body = read_capped(path, MAX_JSON_FILE).map_err(|e| {
        StudyError::Usage(format!(
            "--resume: cannot read {}: {e}; give the --out directory of the interrupted run",
            path.display()
        ))
    })?;
    serde_json::from_slice(&body).map_err(|e| {
        StudyError::Usage(format!(
            "--resume: {} is not a tlslab experiment results document ({e})",
            path.display()
        ))
    })
}

/// Writes `doc` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, doc: &StudyResults) -> Result<(), StudyError> {
    let body = serde_json::to_vec_pretty(doc).map_err(|e| StudyError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let tmp = path.with_extension("json.tmp");
    let io = |source| StudyError::Io {
        path: tmp.clone(),
        source,
    };
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&body).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(|source| StudyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A paper-against-today row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn compare(
    quantity: &str,
    paper: &str,
    source: &str,
    today: Option<f64>,
    unit: &str,
    measured: &str,
    cells: Vec<String>,
    reason: &str,
) -> Comparison {
    Comparison {
        quantity: quantity.into(),
        paper: paper.into(),
        source: source.into(),
        today: today.filter(|v| v.is_finite()),
        unit: unit.into(),
        measured: measured.into(),
        cells,
        reason: reason.into(),
    }
}

/// A cell's factors (factor → level) from `(factor, level)` pairs.
pub(crate) fn factor_map<'a>(
    pairs: impl IntoIterator<Item = (&'a str, String)>,
) -> std::collections::BTreeMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// A duration as `tlslab`'s flags write it (`500ms`, `2s`).
pub(crate) fn flag_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The median of `f` over each matrix point's cells that match `filter`:
/// (point, median, the cells' ids), in first-run order.
pub(crate) fn point_medians(
    doc: &StudyResults,
    filter: &[(&str, &str)],
    f: impl Fn(&Cell) -> Option<f64>,
) -> Vec<(String, f64, Vec<String>)> {
    let cells = doc.select(filter);
    let mut points: Vec<String> = Vec::new();
    for c in &cells {
        if !points.contains(&c.point) {
            points.push(c.point.clone());
        }
    }
    points
        .into_iter()
        .filter_map(|p| {
            let mine: Vec<&&Cell> = cells.iter().filter(|c| c.point == p).collect();
            let v: Vec<f64> = mine.iter().filter_map(|c| f(c)).collect();
            let m = tlslab_report::study::median(&v);
            m.is_finite()
                .then(|| (p, m, mine.iter().map(|c| c.id.clone()).collect()))
        })
        .collect()
}

/// The single matrix point matching `filter`: its median of `f` and cells.
pub(crate) fn one(
    doc: &StudyResults,
    filter: &[(&str, &str)],
    f: impl Fn(&Cell) -> Option<f64>,
) -> (Option<f64>, Vec<String>) {
    match point_medians(doc, filter, f).into_iter().next() {
        Some((_, m, ids)) => (Some(m), ids),
        None => (None, vec![]),
    }
}

/// The highest per-point median of `f` over the points matching `filter`.
pub(crate) fn best(
    doc: &StudyResults,
    filter: &[(&str, &str)],
    f: impl Fn(&Cell) -> Option<f64>,
) -> (Option<f64>, Vec<String>) {
    match point_medians(doc, filter, f)
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        Some((_, m, ids)) => (Some(m), ids),
        None => (None, vec![]),
    }
}

/// The cell's load report, read back typed.
pub(crate) fn load_report(c: &Cell) -> Option<&tlslab_report::LoadReport> {
    c.load_report()
}

/// The cell's server CPU per request, µs, when it measured one.
pub(crate) fn cpu_us(c: &Cell) -> Option<f64> {
    (c.metrics.server_cpu_us_per_request > 0.0).then_some(c.metrics.server_cpu_us_per_request)
}

/// `a / b` when both are there.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}
