//! `tlslab experiment`: a declared matrix of cells, or one of the built-in
//! studies that redo a seed paper's figures, run with interleaved repeats
//! into one results document ([`tlslab_report::study::StudyResults`]).
//!
//! - [`matrix`]: the TOML matrix (engine, factors, levels, repeats, cell
//!   duration, pinning) parsed into a typed [`matrix::Matrix`], with errors
//!   that name the key and the fix.
//! - [`Session`]: one run: the document in its output directory, written
//!   atomically (temporary file and rename) after every cell, so a run
//!   interrupted at any point resumes with `--resume DIR`, skipping the cells
//!   already in it; and the progress bar (indicatif, only on a terminal).
//! - [`builtins`]: the studies, each a [`Study`] in its own file, with its
//!   paper's figures embedded as reference data and compared with today's,
//!   measured.
//!
//! Every figure comes from an engine: the load engine (client-observed), the
//! embedded server (server-observed CPU), the probe, `breakdown`,
//! `overload` or `cluster`.

use tlslab_report::study::{ChartKind, Comparison, StudyResults};

use crate::pin::Placement;

mod load_cell;
pub mod matrix;
mod path_kind;
mod pq;
mod quic_vs_tcp;
pub mod rtt_path;
mod seed000_cluster;
mod seed000_reuse;
mod seed001_breakdown;
mod seed002_overload;
mod seed003_table2;
mod seed004_handshake;
mod session;

pub use crate::rig::Transport;
pub use load_cell::LoadRig;
pub use matrix::{Matrix, MatrixError};
pub use rtt_path::{PathChoice, PathKind};
pub use seed000_cluster::FIG9_REFERENCE;
pub use session::{
    RESULTS_FILE, RunOptions, Session, StudyError, environment, now_ms, read_document, write_atomic,
};

/// A built-in study: what it redoes, its plan, how it measures its cells,
/// how it sets the paper's figures beside today's, and whether it takes a
/// path. Adding a study is one file implementing this and one line in
/// [`builtins`] (docs/experiment.md).
pub trait Study: Sync {
    /// Its name, title, paper, engine and duration.
    fn about(&self) -> About;
    /// Whether its round-trip cells take `--path-kind` (relay, packet or
    /// both); any other study refuses a path other than the default.
    fn takes_path(&self) -> bool {
        false
    }
    /// Whether some of its cells cross the packet-level path whatever
    /// `--path-kind` says (so `--pcap` has packets to capture).
    fn crosses_packet_path(&self) -> bool {
        false
    }
    /// Whether it replaces TLS stages with no-ops (loopback only), which the
    /// command line must confirm with `--insecure-ablation`.
    fn insecure_ablation(&self) -> bool {
        false
    }
    /// The planned matrix (recorded in the document and compared on
    /// `--resume`) and its number of units (cells, or an engine's own run)
    /// for the progress bar, for `--quick` or the full version.
    fn plan(&self, quick: bool) -> (serde_json::Value, usize);
    /// Measures the cells into the session's document (a resumed run skips
    /// the cells it has).
    fn run(&self, s: &mut Session) -> Result<(), StudyError>;
    /// The paper's figures against today's, from the measured document (a
    /// study may add its model curves and notes to it here).
    fn compare(&self, s: &mut Session) -> Vec<Comparison>;
    /// The figures `tlslab report` draws of its document (written to the
    /// document's `charts`).
    fn charts(&self) -> &'static [ChartKind];
}

/// What `experiment list` says of a study.
#[derive(Clone, Copy, Debug)]
pub struct About {
    /// Its name, as `experiment run NAME` takes it.
    pub name: &'static str,
    /// A one-line title.
    pub title: &'static str,
    /// The seed paper and the figures it redoes.
    pub seed: &'static str,
    /// The engine it drives.
    pub engine: &'static str,
    /// How long the `--quick` and full versions take, roughly.
    pub duration: &'static str,
}

/// The built-in studies, in seed order: the one list of them.
pub fn builtins() -> &'static [&'static dyn Study] {
    &[
        &seed000_reuse::Reuse,
        &seed000_cluster::Cluster,
        &seed000_cluster::ClusterH3,
        &seed001_breakdown::Breakdown,
        &seed002_overload::Overload,
        &seed003_table2::Table2,
        &seed004_handshake::Handshake,
        &quic_vs_tcp::QuicVsTcp,
    ]
}

/// The names of the studies that take `--path-kind`, for messages.
pub fn path_studies() -> String {
    let names = builtins().iter().filter(|b| b.takes_path());
    crate::join(names.map(|b| b.about().name), " and ")
}

/// The built-in named `name`.
pub fn builtin(name: &str) -> Result<&'static dyn Study, StudyError> {
    builtins()
        .iter()
        .copied()
        .find(|b| b.about().name == name)
        .ok_or_else(|| {
            StudyError::Usage(format!(
                "no built-in study '{name}'; `tlslab experiment list` lists them ({}), or run your \
             own matrix with `tlslab experiment run --config FILE.toml`",
                crate::join(builtins().iter().map(|b| b.about().name), ", ")
            ))
        })
}

/// The `experiment list` table.
pub fn render_list() -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut rows = vec![tlslab_report::header("study|engine|status|paper|title")];
    rows.extend(builtins().iter().map(|b| {
        let a = b.about();
        let status = format!("runs ({})", a.duration);
        vec![
            a.name.into(),
            a.engine.into(),
            status,
            a.seed.into(),
            a.title.into(),
        ]
    }));
    s.push_str(&tlslab_report::columns(
        "",
        &[-18, -12, -34, -46, -1],
        &rows,
    ));
    let _ = writeln!(
        s,
        "\nrun one with `tlslab experiment run NAME [--quick] --out DIR`; your own matrix with \
         `tlslab experiment run --config FILE.toml --out DIR` (docs/experiment.md)."
    );
    s
}

/// Runs a built-in study into `opts.out`: its plan, its cells, then its
/// comparisons.
pub fn run_builtin(
    b: &dyn Study,
    opts: &RunOptions,
    log: Box<dyn FnMut(&str)>,
) -> Result<StudyResults, StudyError> {
    if opts.path != PathChoice::Relay {
        if !b.takes_path() {
            return Err(StudyError::Usage(format!(
                "--path-kind {}: {} has no round-trip cells; --path-kind is for {}",
                opts.path.name(),
                b.about().name,
                path_studies()
            )));
        }
        opts.path.check()?;
    }
    check_pcap(b, opts)?;
    let placement = Placement::split();
    let (mut matrix, units) = b.plan(opts.quick);
    // A resumed run must cross the same path.
    if let (Some(m), PathChoice::Packet | PathChoice::Both) = (matrix.as_object_mut(), opts.path) {
        m.insert("path".into(), opts.path.name().into());
    }
    // Sorted as every section a document writes (the build's serde_json
    // keeps insertion order), so a written document reads back and writes
    // the same bytes.
    let matrix = tlslab_schema::engine::sort_keys(matrix);
    let a = b.about();
    let mut s = Session::open(a.name, a.title, a.seed, matrix, units, placement, opts, log)?;
    s.doc.charts = b.charts().to_vec();
    b.run(&mut s)?;
    let comparisons = b.compare(&mut s);
    s.finish(comparisons)?;
    Ok(s.doc)
}

/// `--pcap DIR` is for a study whose cells cross the packet-level path:
/// a path study ([`Study::takes_path`]) with `--path-kind packet|both`, and
/// one that always crosses it ([`Study::crosses_packet_path`]); a usage
/// error otherwise, or without the privilege the path needs.
fn check_pcap(study: &dyn Study, opts: &RunOptions) -> Result<(), StudyError> {
    let Some(dir) = &opts.pcap else {
        return Ok(());
    };
    let crosses =
        (study.takes_path() && opts.path != PathChoice::Relay) || study.crosses_packet_path();
    if !crosses {
        let always = builtins().iter().filter(|b| b.crosses_packet_path());
        return Err(StudyError::Usage(format!(
            "--pcap {}: {} {}; --pcap captures the packet-level path, which the \
             round-trip cells of {} cross with --path-kind packet or both, as do {}'s \
             time-to-first-byte cells",
            dir.display(),
            study.about().name,
            if study.takes_path() {
                "crosses tlslab relay (--path-kind relay), which has no packets to capture"
            } else {
                "crosses no packet-level path"
            },
            path_studies(),
            crate::join(always.map(|b| b.about().name), " and ")
        )));
    }
    if !tlslab_path::privileged() {
        return Err(StudyError::Usage(format!(
            "--pcap {}: the packet-level path needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); \
             run as root (sudo)",
            dir.display()
        )));
    }
    Ok(())
}

/// Runs a declared matrix into `opts.out`.
pub fn run_matrix(
    m: &Matrix,
    opts: &RunOptions,
    log: Box<dyn FnMut(&str)>,
) -> Result<StudyResults, StudyError> {
    if opts.path != PathChoice::Relay {
        return Err(StudyError::Usage(format!(
            "--path-kind {}: a matrix's cells run on loopback; --path-kind is for the built-in studies {}",
            opts.path.name(),
            path_studies()
        )));
    }
    if opts.pcap.is_some() {
        return Err(StudyError::Usage(
            "--pcap: a matrix's cells run on loopback, with no packet-level path to capture; \
             capture loopback with dumpcap -i lo"
                .into(),
        ));
    }
    let placement = m.placement();
    let mut s = Session::open(
        &m.name,
        &m.title,
        "",
        m.to_json(),
        m.cell_count(),
        placement,
        opts,
        log,
    )?;
    let mut rig = LoadRig::new(s.placement.clone());
    rig.run_matrix(&mut s, m)?;
    rig.shutdown();
    s.finish(vec![])?;
    Ok(s.doc)
}

#[cfg(test)]
mod tests {
    use super::session::compare;
    use super::*;
    use tlslab_report::study::{
        Cell, CellMetrics, Curve, EngineReport, STUDY_KIND, STUDY_SCHEMA_VERSION,
    };

    fn document() -> StudyResults {
        let cell = Cell {
            id: "p-r1".into(),
            point: "p".into(),
            factors: [("reuse".to_string(), "0".to_string())].into(),
            repeat: 1,
            order: 0,
            command_line: "tlslab load".into(),
            started_unix_ms: 1,
            metrics: CellMetrics {
                connect_p50_us: Some(1),
                ttfb_p50_us: Some(1),
                full_bytes_out: Some(1.0),
                full_bytes_in: Some(1.0),
                full_round_trips: Some(1.0),
                resumed_bytes_out: Some(1.0),
                resumed_bytes_in: Some(1.0),
                resumed_round_trips: Some(1.0),
                version: Some("1.3".into()),
                group: Some("x".into()),
                suite: Some("y".into()),
                ..CellMetrics::default()
            },
            load: Some(serde_json::from_value(serde_json::json!({})).unwrap()),
        };
        StudyResults {
            kind: STUDY_KIND.into(),
            schema_version: STUDY_SCHEMA_VERSION,
            study: "s".into(),
            title: "t".into(),
            seed: "x".into(),
            quick: true,
            command_line: vec!["tlslab".into()],
            environment: environment(&Placement::split()),
            matrix: serde_json::json!({}),
            started_unix_ms: 1,
            finished_unix_ms: 2,
            complete: true,
            cells: vec![cell],
            comparisons: vec![compare("q", "p", "s", Some(1.0), "u", "m", vec![], "r")],
            engine_report: Some(EngineReport::Engine(serde_json::json!({}))),
            curves: vec![Curve {
                name: "n".into(),
                chart: "c".into(),
                x: "x".into(),
                y: "y".into(),
                points: vec![(0.0, 1.0)],
            }],
            notes: vec!["n".into()],
            charts: vec![ChartKind::Reuse],
        }
    }

    #[test]
    fn every_results_field_is_documented_in_the_schema_doc() {
        let v = serde_json::to_value(document()).unwrap();
        let readme = include_str!("../../../../docs/schema.md");
        let start = readme
            .find("### `tlslab experiment run … --out DIR`")
            .expect("docs/schema.md documents results.json");
        let section = &readme[start..];
        let section = &section[..section[4..].find("\n## ").map_or(section.len(), |i| i + 4)];
        let mut names: Vec<(String, String)> = Vec::new();
        for (k, val) in v.as_object().unwrap() {
            match k.as_str() {
                "environment" | "cells" | "comparisons" => {
                    let item = if val.is_array() { &val[0] } else { val };
                    let prefix = if val.is_array() {
                        format!("{k}[]")
                    } else {
                        k.clone()
                    };
                    for (kk, vv) in item.as_object().unwrap() {
                        if kk == "metrics" {
                            for m in vv.as_object().unwrap().keys() {
                                names.push((format!("{prefix}.metrics.{m}"), format!(".{m}")));
                            }
                        } else {
                            names.push((format!("{prefix}.{kk}"), format!("{prefix}.{kk}")));
                        }
                    }
                }
                "curves" => names.push(("curves[]".into(), "curves[]".into())),
                _ => names.push((k.clone(), k.clone())),
            }
        }
        let missing: Vec<&String> = names
            .iter()
            .filter(|(full, short)| {
                !section.contains(&format!("`{full}`")) && !section.contains(&format!("`{short}`"))
            })
            .map(|(f, _)| f)
            .collect();
        assert!(
            missing.is_empty(),
            "undocumented results fields: {missing:?}"
        );
    }

    #[test]
    fn the_document_is_written_atomically_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("tlslab-study-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(RESULTS_FILE);
        let d = document();
        write_atomic(&path, &d).unwrap();
        assert!(!path.with_extension("json.tmp").exists());
        let back = read_document(&path).unwrap();
        assert_eq!(back.cells[0].id, "p-r1");
        assert_eq!(back.notes, d.notes);
        std::fs::write(&path, b"{").unwrap();
        assert!(read_document(&path).unwrap_err().is_usage());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A quick run across `path`, refused before it writes its directory.
    fn quick_options(path: PathChoice) -> RunOptions {
        RunOptions {
            out: std::env::temp_dir().join("tlslab-never-written"),
            resume: false,
            quick: true,
            command_line: vec![],
            progress_bar: false,
            path,
            pcap: None,
        }
    }

    // --pcap DIR is refused (exit 2, before any work) where no cell crosses
    // the packet-level path, naming the studies and --path that do.
    #[test]
    fn pcap_is_for_studies_that_cross_the_packet_path() {
        let opts = |path| RunOptions {
            pcap: Some("caps".into()),
            ..quick_options(path)
        };
        for (study, path) in [
            ("seed000-reuse", PathChoice::Relay),
            ("seed003-table2", PathChoice::Relay),
            ("seed004-handshake", PathChoice::Relay),
        ] {
            let e = check_pcap(builtin(study).unwrap(), &opts(path)).unwrap_err();
            assert!(e.is_usage(), "{e}");
            crate::assert_has(
                &e.to_string(),
                &[
                    "--pcap caps",
                    study,
                    "--path-kind packet or both",
                    "quic-vs-tcp",
                ],
            );
        }
        for (study, path) in [
            ("seed003-table2", PathChoice::Packet),
            ("seed004-handshake", PathChoice::Both),
            ("quic-vs-tcp", PathChoice::Relay),
        ] {
            let r = check_pcap(builtin(study).unwrap(), &opts(path));
            if tlslab_path::privileged() {
                assert!(r.is_ok(), "{study}: {r:?}");
            } else {
                let e = r.unwrap_err();
                assert!(e.is_usage() && e.to_string().contains("root"), "{e}");
            }
        }
        let none = quick_options(PathChoice::Relay);
        assert!(check_pcap(builtin("seed000-reuse").unwrap(), &none).is_ok());
    }

    // Each study's declared charts are those its committed documents
    // (docs/results/, most written before studies declared them) draw by
    // what their cells support.
    #[test]
    fn declared_charts_are_those_the_committed_documents_support() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results");
        let titles = |d: &StudyResults| -> Vec<String> {
            let charts = tlslab_report::html::charts(d).0;
            charts.into_iter().map(|c| c.title).collect()
        };
        let mut checked = 0;
        for b in builtins() {
            for dir in ["", "full/"] {
                let path = format!("{root}/{dir}{}/results.json", b.about().name);
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                let mut doc: StudyResults = serde_json::from_str(&text).unwrap();
                doc.charts.clear();
                let supported = titles(&doc);
                doc.charts = b.charts().to_vec();
                assert_eq!(titles(&doc), supported, "{path}");
                checked += 1;
            }
        }
        assert!(checked >= 12, "{checked} documents");
    }

    #[test]
    fn the_list_names_every_builtin_and_unknown_names_are_usage_errors() {
        let list = render_list();
        for b in builtins() {
            assert!(list.contains(b.about().name));
            assert_eq!(
                builtin(b.about().name).unwrap().about().title,
                b.about().title
            );
        }
        assert!(builtin("nope").is_err_and(|e| e.is_usage()));
        assert_eq!(path_studies(), "seed003-table2 and seed004-handshake");
    }

    // --path-kind other than relay is refused (exit 2, before any work) by a
    // study without round-trip cells, naming the studies that take it.
    #[test]
    fn a_path_is_for_the_studies_that_take_one() {
        let opts = quick_options(PathChoice::Packet);
        let b = builtin("seed000-cluster").unwrap();
        let e = run_builtin(b, &opts, Box::new(|_| {})).unwrap_err();
        assert!(e.is_usage(), "{e}");
        crate::assert_has(
            &e.to_string(),
            &[
                "--path-kind packet",
                "seed000-cluster",
                "seed003-table2 and seed004-handshake",
            ],
        );
        assert!(!opts.out.exists());
    }
}
