//! The modules only some of the workspace's suites (`tests/*.rs`) use,
//! beside the one test kit (`tlslab-testkit`), which is re-exported here
//! so a suite reaches both as `common::…`:
//! - [`netpath`]: a `tlslab path` started or skipped without root, and code
//!   run inside either end's namespace (the path suites);
//! - [`tshark`]: `path --pcap` captures and key logs read with tshark (the
//!   capture suites);
//! - [`study_doc`]: hand-built results documents (the report suites).
//!
//! All three link `tlslab-path` or stand for one suite's data, which is why
//! they are not in the kit, which every crate's tests build.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

pub mod netpath;
pub mod study_doc;
pub mod tshark;

pub use tlslab_testkit::*;
