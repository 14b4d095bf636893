//! The files `tlslab report` accepts, told apart by their shape:
//! - a results document of `tlslab experiment` (`"kind": "tlslab-experiment"`);
//! - a `tlslab sweep --json` report (`over` and `series`);
//! - a `tlslab load --json` report (`config`, `throughput` and `latency`);
//! - a `tlslab overload --json` report (`points` and
//!   `capacity_users_per_sec`), its QUIC run under `quic` with
//!   `--transport both`: a document of its own with the report as its
//!   engine report and no cells.
//!
//! Every `load --json` file given becomes one cell of a single document
//! ("load runs"), so several runs at different rates or reuse levels chart
//! together; every sweep and every results document is a document of its
//! own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::study::{Cell, STUDY_KIND, StudyResults, fmt_level};
use crate::{LoadReport, SweepReport};

/// What kind of file an input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A results document of `tlslab experiment`.
    Study,
    /// A `tlslab load --json` report.
    Load,
    /// A `tlslab sweep --json` report.
    Sweep,
    /// A `tlslab overload --json` report.
    Overload,
}

/// An input that cannot be reported. Every variant names the file.
/// [`InputError::Read`] is the path's fault (missing, unreadable); every
/// other variant is the content's ([`InputError::is_content`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The file could not be read.
    #[error("{path}: cannot read it ({source}); check the path")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`tlslab_workload::input::MAX_JSON_FILE`].
    #[error("{path}: {source}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The error saying the bound.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error(
        "{path}: not JSON ({msg}); give the JSON file that `tlslab experiment run`, \
         `tlslab load --json FILE`, `tlslab sweep --json FILE` or `tlslab overload --json FILE` \
         wrote"
    )]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        msg: String,
    },
    /// The file is JSON of another kind.
    #[error(
        "{path}: not a tlslab results document, `load --json`, `sweep --json` or \
         `overload --json` report ({what}); `tlslab report` reads only those four"
    )]
    Unknown {
        /// The file.
        path: PathBuf,
        /// What it looked like.
        what: String,
    },
    /// The file looks like one of the four kinds but does not parse as it.
    #[error("{path}: looks like a {kind} but does not parse as one: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The kind it looked like.
        kind: &'static str,
        /// The parser's message.
        msg: String,
    },
}

impl InputError {
    /// Returns true if and only if the file was read but its content is
    /// wrong (too large, not JSON, not a known kind, not parseable): a
    /// runtime failure rather than a usage error.
    pub fn is_content(&self) -> bool {
        !matches!(self, InputError::Read { .. })
    }
}

/// The top of an input: the `kind` a results document names itself by.
#[derive(Default, serde::Deserialize)]
struct Head {
    /// `tlslab-experiment` for a results document; absent in `load` and
    /// `sweep` reports.
    kind: Option<String>,
}

impl Head {
    /// The head of `v` (no kind when `v` is no object, or its `kind` no
    /// string).
    fn of(v: &serde_json::Value) -> Head {
        Head::deserialize(v).unwrap_or_default()
    }
}

/// The kind of a parsed JSON input, by its shape; `None` if it is none of
/// the four.
pub fn detect(v: &serde_json::Value) -> Option<InputKind> {
    let o = v.as_object()?;
    if Head::of(v).kind.as_deref() == Some(STUDY_KIND) {
        Some(InputKind::Study)
    } else if o.contains_key("over") && o.contains_key("series") {
        Some(InputKind::Sweep)
    } else if o.contains_key("points") && o.contains_key("capacity_users_per_sec") {
        Some(InputKind::Overload)
    } else if o.contains_key("config") && o.contains_key("throughput") && o.contains_key("latency")
    {
        Some(InputKind::Load)
    } else {
        None
    }
}

fn describe(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(o) => {
            let keys: Vec<&str> = o.keys().take(8).map(|k| k.as_str()).collect();
            match Head::of(v).kind {
                Some(kind) => format!("its kind is \"{kind}\""),
                None if keys.is_empty() => "an empty object".into(),
                None => format!("an object with keys {}", keys.join(", ")),
            }
        }
        serde_json::Value::Array(_) => "a JSON array".into(),
        _ => "a JSON scalar".into(),
    }
}

/// The `tlslab load` flags that reproduce a run, from its config echo.
pub fn load_command_line(r: &LoadReport) -> String {
    let c = &r.config;
    let mut s = format!("tlslab load {}", c.targets.join(" "));
    s.push_str(&format!(" -c {}", c.clients));
    if c.requests_per_conn != 1 {
        s.push_str(&format!(" --requests-per-conn {}", c.requests_per_conn));
    }
    if c.reuse > 0.0 {
        s.push_str(&format!(" --reuse {}", fmt_level(c.reuse * 100.0)));
    }
    if !c.versions.is_empty() {
        let v: Vec<&str> = c
            .versions
            .iter()
            .map(|v| v.trim_start_matches("TLSv"))
            .collect();
        s.push_str(&format!(" --tls {}", v.join(",")));
    }
    if let Some(d) = c.duration_s {
        s.push_str(&format!(" -d {d}s"));
    }
    if let Some(n) = c.requests {
        s.push_str(&format!(" -n {n}"));
    }
    if c.warmup_s > 0.0 {
        s.push_str(&format!(" --warmup {}s", c.warmup_s));
    }
    if let Some(o) = &r.open_loop {
        s.push_str(&format!(" --rate {} --arrivals {}", o.rate, o.arrivals));
    }
    if c.workload != "urls" {
        s.push_str(&format!(" --workload {}", c.workload));
    }
    s
}

/// One cell per `load --json` report, in the order given; `names` are the
/// files (shown in the cell's command line).
pub fn loads_document(loads: &[(String, LoadReport)]) -> StudyResults {
    let mut cells: Vec<Cell> = Vec::new();
    for (i, (name, r)) in loads.iter().enumerate() {
        let mut one = StudyResults::from_load(r, name);
        let Some(mut cell) = one.cells.pop() else {
            continue;
        };
        let point = format!("load{}", i + 1);
        cell.id = format!("{point}-r1");
        cell.point = point;
        cell.order = i;
        if let Some(o) = &r.open_loop {
            cell.factors.insert("rate".into(), format!("{}", o.rate));
        }
        if r.config.requests_per_conn != 1 {
            cell.factors.insert(
                "requests_per_conn".into(),
                r.config.requests_per_conn.to_string(),
            );
        }
        cell.command_line = format!("{}   (from {name})", load_command_line(r));
        cells.push(cell);
    }
    let title = if loads.len() == 1 {
        loads[0].0.clone()
    } else {
        format!("{} load runs", loads.len())
    };
    let mut doc = StudyResults::from_load(&loads[0].1, &title);
    doc.title = format!("{title}: tlslab load --json report{}", {
        if loads.len() == 1 { "" } else { "s" }
    });
    doc.cells = cells;
    doc
}

/// A document of an `overload --json` report: no cells (the points are
/// in the report, which the overload charts read), the report as its
/// engine report, and what it did not run as notes.
pub fn overload_document(r: &tlslab_schema::overload::OverloadReport, name: &str) -> StudyResults {
    let mut doc = StudyResults::imported(
        name,
        if r.quic.is_some() {
            "a `tlslab overload --transport both --json` report (TCP and QUIC)"
        } else {
            "a `tlslab overload --json` report"
        },
        vec![],
    );
    doc.engine_report = crate::study::EngineReport::engine(r);
    for q in std::iter::once(r).chain(r.quic.as_deref()) {
        doc.notes
            .extend(q.not_run.iter().map(|n| match q.transport.as_str() {
                "h3" => format!("over QUIC: {n}"),
                _ => n.clone(),
            }));
    }
    doc
}

/// Reads every input and returns the documents to report, in the order
/// given (all `load --json` files together, where the first of them was).
pub fn read_inputs(paths: &[PathBuf]) -> Result<Vec<StudyResults>, InputError> {
    enum Slot {
        Doc(Box<StudyResults>),
        Loads,
    }
    let mut slots: Vec<Slot> = Vec::new();
    let mut loads: Vec<(String, LoadReport)> = Vec::new();
    for path in paths {
        let (kind, v) = read_one(path)?;
        let invalid = |kind: &'static str, e: serde_json::Error| InputError::Invalid {
            path: path.clone(),
            kind,
            msg: e.to_string(),
        };
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        match kind {
            InputKind::Study => {
                let d: StudyResults = serde_json::from_value(v)
                    .map_err(|e| invalid("tlslab experiment results document", e))?;
                slots.push(Slot::Doc(Box::new(d)));
            }
            InputKind::Sweep => {
                let s: SweepReport = serde_json::from_value(v)
                    .map_err(|e| invalid("`tlslab sweep --json` report", e))?;
                slots.push(Slot::Doc(Box::new(StudyResults::from_sweep(&s, &name))));
            }
            InputKind::Overload => {
                let r: tlslab_schema::overload::OverloadReport = serde_json::from_value(v)
                    .map_err(|e| invalid("`tlslab overload --json` report", e))?;
                slots.push(Slot::Doc(Box::new(overload_document(&r, &name))));
            }
            InputKind::Load => {
                let l: LoadReport = serde_json::from_value(v)
                    .map_err(|e| invalid("`tlslab load --json` report", e))?;
                if loads.is_empty() {
                    slots.push(Slot::Loads);
                }
                loads.push((name, l));
            }
        }
    }
    let mut loads_doc = (!loads.is_empty()).then(|| loads_document(&loads));
    Ok(slots
        .into_iter()
        .filter_map(|s| match s {
            Slot::Doc(d) => Some(*d),
            Slot::Loads => loads_doc.take(),
        })
        .collect())
}

/// Reads and classifies one file.
pub fn read_one(path: &Path) -> Result<(InputKind, serde_json::Value), InputError> {
    use tlslab_workload::input::{MAX_JSON_FILE, read_capped};
    let bytes = read_capped(path, MAX_JSON_FILE).map_err(|source| {
        if source.kind() == std::io::ErrorKind::FileTooLarge {
            InputError::TooLarge {
                path: path.to_path_buf(),
                source,
            }
        } else {
            InputError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let text = String::from_utf8(bytes).map_err(|e| InputError::NotJson {
        path: path.to_path_buf(),
        msg: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| InputError::NotJson {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    match detect(&v) {
        Some(k) => Ok((k, v)),
        None => Err(InputError::Unknown {
            path: path.to_path_buf(),
            what: describe(&v),
        }),
    }
}

/// The factor levels of every cell, for tests and summaries.
pub fn factor_levels(d: &StudyResults) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in &d.cells {
        for (k, v) in &c.factors {
            let e = out.entry(k.clone()).or_default();
            if !e.contains(v) {
                e.push(v.clone());
            }
        }
    }
    out
}
