//! The serde schemas of every JSON file tlslab writes, shared by the
//! writers and the readers of those files.
//!
//! This crate is at the bottom of the layering: it holds plain data types,
//! their serde attributes, trivial accessors and exact merges of sums, and
//! depends on nothing but serde and serde_json (clap behind a feature).
//! Building a report from measurements (HDR histograms) and rendering it
//! (tables, Markdown, HTML, SVG) live above it, in `tlslab-report` and the
//! crates that measure.
//!
//! - [`load`]: `tlslab load --json` ([`load::LoadReport`]), with the
//!   `distributed` section that `tlslab merge` adds.
//! - [`breakdown`]: `tlslab breakdown --json`
//!   ([`breakdown::BreakdownReport`]).
//! - [`cluster`]: `tlslab cluster --json` ([`cluster::ClusterReport`]).
//! - [`lab`]: `tlslab lab --json` ([`lab::LabReport`]), and [`costs`]:
//!   its `--explain` split of CPU per request.
//! - [`overload`]: `tlslab overload --json` ([`overload::OverloadReport`])
//!   and the user-session figures of `tlslab load --users`.
//! - [`agent`]: an agent's `complete.json` and `counters.json` (`load --out`).
//! - [`counters`]: the exact counters of a load's statistics, kept in
//!   memory by `tlslab-report`'s `Stats` and written to `counters.json`.
//! - [`sweep`]: `tlslab sweep --json` ([`sweep::SweepReport`]).
//! - [`study`]: `tlslab experiment`'s results document
//!   ([`study::StudyResults`]), and its [`engine`] report.

pub mod agent;
pub mod breakdown;
pub mod cluster;
pub mod costs;
pub mod counters;
pub mod engine;
pub mod float;
pub mod lab;
pub mod load;
pub mod overload;
pub mod placement;
pub mod study;
mod study_docs;
pub mod sweep;
pub mod transport;
