//! The load engine's fixtures, shared by its suites: an in-process server
//! and a bounded `LoadConfig` trusting its CA, and the `--log` CSV read
//! back. The generic pieces (loopback, a test CA) are the one test kit's
//! (`tlslab-testkit`), re-exported here.

#![allow(dead_code, unused_imports)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tlslab_crypto::pki::Generated;
use tlslab_load::{LoadConfig, Target, Trust};
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};
use tlslab_stats::LoadReport;

pub use tlslab_testkit::{generated, loopback};

pub fn https(s: &Server, path: &str) -> Target {
    Target::parse(&format!("https://{}{path}", s.https_addr().unwrap())).unwrap()
}

/// A server with a fresh ECDSA chain, one worker thread, an HTTPS and a
/// plain HTTP listener, writing an access log to `log` if given; `tweak`
/// adjusts the TLS settings.
pub fn tls_server(log: Option<&Path>, tweak: impl FnOnce(&mut TlsSettings)) -> (Server, Generated) {
    let g = generated();
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tweak(&mut tls);
    let mut cfg = ServeConfig::new(loopback(), Content::Empty, tls);
    cfg.http = Some(loopback());
    cfg.threads = 1;
    cfg.access_log = log.map(Path::to_path_buf);
    (Server::start(cfg).unwrap(), g)
}

/// A bounded load config trusting `g`'s CA: 20 s at most, 2 threads, 5 s timeout.
pub fn config(targets: Vec<Target>, g: &Generated) -> LoadConfig {
    let mut c = LoadConfig::new(targets);
    c.trust = Trust::Roots(g.roots().unwrap());
    c.duration = Some(Duration::from_secs(20));
    c.threads = 2;
    c.timeout = Duration::from_secs(5);
    c
}

/// One row of a `--log` CSV, by column name.
pub type Row = BTreeMap<String, String>;

pub fn rows(path: &Path) -> Vec<Row> {
    let mut rd = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    rd.records()
        .map(|r| {
            let r = r.unwrap();
            header
                .iter()
                .cloned()
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

pub fn num(r: &Row, col: &str) -> u64 {
    r[col]
        .parse()
        .unwrap_or_else(|_| panic!("{col} = {:?}", r[col]))
}

/// Checks that no request completed and `n` failed as `kind`.
pub fn all_failed(report: &LoadReport, kind: &str, n: u64) {
    assert_eq!(report.requests.completed, 0);
    assert_eq!(report.errors.get(kind), Some(&n), "{:?}", report.errors);
}

/// Runs `cfg` with a CSV log and checks the log has one row per attempt.
pub fn run_logged(cfg: &mut LoadConfig) -> (LoadReport, Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.csv");
    cfg.log = Some(log.clone());
    let report = tlslab_load::run(cfg).unwrap();
    let rows = rows(&log);
    assert_eq!(rows.len() as u64, report.requests.attempted);
    (report, rows)
}
