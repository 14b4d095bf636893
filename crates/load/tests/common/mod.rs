//! Helpers shared by the load engine's integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tlslab_crypto::pki::Generated;
use tlslab_load::{LoadConfig, Target, Trust};
use tlslab_report::LoadReport;
use tlslab_server::Server;

pub fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

pub fn https(s: &Server, path: &str) -> Target {
    Target::parse(&format!("https://{}{path}", s.https_addr().unwrap())).unwrap()
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
