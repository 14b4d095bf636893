//! Tests of the agent directory and the merge.

use std::fs;
use std::path::{Path, PathBuf};

use super::agent_dir::phases;
use super::*;
use crate::fixtures::record;
use crate::model::ConfigEcho;
use crate::model::{CpuUsage, LoadReport, Window};
use crate::record::{HandshakeTcp, HandshakeWire, RequestRecord};
use crate::stats::Stats;
use crate::{CsvLog, HandshakeKind};

/// The `--start-at` of the agents' run.
const START_AT_MS: u64 = 4_000;

fn recs(range: std::ops::Range<u64>) -> Vec<RequestRecord> {
    range
        .map(|i| {
            let kind = match i % 3 {
                0 => Some(HandshakeKind::Full),
                1 => Some(HandshakeKind::Resumed),
                _ => None,
            };
            let mut r = record((i % 5) as u32, i, kind);
            r.total_us = 100 + i * i % 50_000;
            // Full handshakes carry wire figures (some compressed, some
            // with TCP_INFO), which the merge must keep.
            if let (Some(HandshakeKind::Full), Some(h)) = (kind, r.handshake.as_mut()) {
                h.wire = Some(HandshakeWire {
                    records_out: 3,
                    records_in: 5 + (i % 2) as u32,
                    cert_bytes: Some(4_000 + i as u32),
                    cert_compressed_bytes: (i % 2 == 0).then_some(2_000),
                    cert_compression: (i % 2 == 0).then(|| "brotli".into()),
                    tcp: (i % 4 == 0).then_some(HandshakeTcp {
                        data_segs_in: 4 + (i % 13) as u32,
                        data_segs_out: 2,
                        rcv_mss: 1_448,
                        total_retrans: (i % 7 == 0).into(),
                    }),
                });
            }
            r
        })
        .collect()
}

/// Writes a complete agent directory holding `records`, of a run with
/// seed 7, `-c 6` and one start time.
fn agent(dir: &Path, shard: ShardId, records: &[RequestRecord], start_ms: u64) -> Stats {
    agent_of_run(dir, shard, records, start_ms, 7, 6)
}

/// Like [`agent`], of the run with `seed` and `-c clients`.
fn agent_of_run(
    dir: &Path,
    shard: ShardId,
    records: &[RequestRecord],
    start_ms: u64,
    seed: u64,
    clients: u64,
) -> Stats {
    fs::create_dir_all(dir).unwrap();
    let (log, sink) = CsvLog::create(&dir.join(CSV_FILE), vec!["https://h/".into()]).unwrap();
    let mut stats = Stats::default();
    for r in records {
        stats.record(r);
        assert!(sink.record(r.clone()));
    }
    drop(sink);
    log.finish().unwrap();
    let config = ConfigEcho {
        clients: 2,
        reuse: 0.5,
        ..Default::default()
    };
    let window = Window {
        start_unix_ms: start_ms,
        measured_s: 2.0,
        observed: "client-observed".into(),
    };
    let cpu = CpuUsage {
        user_s: 0.1,
        sys_s: 0.1,
        capacity: 1,
    };
    let report = crate::build_report(config, window, &stats, 0, cpu);
    write_agent_dir(
        dir,
        &report,
        shard,
        Some(START_AT_MS),
        seed,
        Some(RunFlags {
            clients,
            requests: None,
            rate: None,
        }),
    )
    .unwrap();
    stats
}

#[test]
fn agent_directory_round_trips_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("a");
    let records = recs(0..500);
    let stats = agent(&d, ShardId { index: 1, count: 1 }, &records, 1000);
    let back = read_agent_dir(&d).unwrap().expect("complete");
    assert_eq!(back.marker.csv_rows, 500);
    assert_eq!(back.stats.counts.attempted, stats.counts.attempted);
    assert_eq!(back.stats.counts.full, stats.counts.full);
    assert!(back.stats.counts.full.records_count > 100);
    assert!(back.stats.counts.full.compressed_count > 0);
    assert!(back.stats.counts.full.tcp_count > 0);
    assert_eq!(back.stats.counts.by_version, stats.counts.by_version);
    for (a, b) in phases(&back.stats).iter().zip(phases(&stats)) {
        assert_eq!(a.count(), b.count());
        assert_eq!(a.mean_us(), b.mean_us());
        assert_eq!(a.max_us(), b.max_us());
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(a.quantile_us(q), b.quantile_us(q));
        }
    }
    // The log is an interval log HdrHistogram's own reader accepts.
    let text = fs::read_to_string(d.join(HLOG_FILE)).unwrap();
    assert!(text.contains("#[StartTime: 1.000"), "{text}");
    assert!(text.contains("Tag=total,0.000,2.000,"), "{text}");
}

#[test]
fn merge_of_agents_equals_one_run_and_names_the_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let all = recs(0..900);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("a{i}"))).collect();
    let mut whole = Stats::default();
    all.iter().for_each(|r| whole.record(r));
    for (i, part) in all.chunks(300).enumerate() {
        agent(
            &dirs[i],
            ShardId {
                index: i as u32 + 1,
                count: 3,
            },
            part,
            5_000 + i as u64 * 3,
        );
    }
    let m = merge(&dirs).unwrap();
    assert_eq!(m.requests.attempted, 900);
    assert_eq!(m.reuse.resumed_count, whole.counts.resumed.count);
    assert_eq!(m.latency.total.p99_us, whole.total.quantile_us(0.99));
    assert_eq!(m.latency.total.p50_us, whole.total.quantile_us(0.5));
    assert_eq!(m.latency.total.mean_us, whole.total.mean_us());
    assert_eq!(m.config.clients, 6);
    assert_eq!(m.config.seed, 7);
    let d = m.distributed.as_ref().unwrap();
    assert_eq!((d.agents_merged, d.start_skew_ms), (3, 6));
    assert!(d.missing.is_empty() && d.warnings.is_empty(), "{d:?}");

    // Agent 2 dies: its marker is gone, its partial files are ignored.
    fs::remove_file(dirs[1].join(MARKER_FILE)).unwrap();
    let m = merge(&dirs).unwrap();
    assert_eq!(m.requests.attempted, 600);
    let d = m.distributed.unwrap();
    assert_eq!(d.missing.len(), 1);
    assert_eq!(d.missing[0].shard, "2/3");
    assert!(d.warnings[0].contains("MISSING"), "{:?}", d.warnings);

    // Only agent 1 given: 2/3 and 3/3 are missing.
    let m = merge(&dirs[..1]).unwrap();
    let shards: Vec<_> = m
        .distributed
        .unwrap()
        .missing
        .into_iter()
        .map(|m| m.shard)
        .collect();
    assert_eq!(shards, ["2/3", "3/3"]);

    // The same shard twice is an error, not a double count.
    let e = merge(&[dirs[0].clone(), dirs[0].clone()]).unwrap_err();
    assert!(e.to_string().contains("both hold shard 1/3"), "{e}");
    // Nothing complete.
    let e = merge(&dirs[1..2]).unwrap_err();
    assert!(e.to_string().contains("no agent output is complete"), "{e}");
}

// Issue 20: merge combined agents of different runs silently, and a
// different target, -c or -n was only a WARNING with exit 0.
#[test]
fn agents_of_different_runs_are_refused_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = |index| ShardId { index, count: 2 };
    let d = |name: &str| tmp.path().join(name);
    agent(&d("a1"), shard(1), &recs(0..10), 5_000);
    agent(&d("a2"), shard(2), &recs(0..10), 5_010);
    agent_of_run(&d("seed"), shard(2), &recs(0..10), 5_010, 8, 6);
    agent_of_run(&d("clients"), shard(2), &recs(0..10), 5_010, 7, 12);
    // Same seed and flags, but measured a minute later.
    agent(&d("later"), shard(2), &recs(0..10), 65_000);
    assert!(merge(&[d("a1"), d("a2")]).is_ok());
    for (other, want) in [
        ("seed", "has seed 8 but agent 1/2"),
        ("clients", "has -c 12 but agent 1/2"),
        ("later", "do not overlap"),
    ] {
        let dirs = [d("a1"), d(other)];
        let e = merge(&dirs).unwrap_err();
        assert!(matches!(e, DistributedError::Mismatch(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(want) && msg.contains("--force"), "{msg}");
        let m = merge_with(&dirs, true).unwrap();
        assert_eq!(m.requests.attempted, 20);
        let w = m.distributed.unwrap().warnings;
        assert!(w.iter().any(|w| w.contains(want)), "{w:?}");
    }
    // A different target, from the agent's report.
    let p = d("a2").join(REPORT_FILE);
    let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    r.config.targets = vec!["https://other/".into()];
    fs::write(&p, r.to_json()).unwrap();
    let e = merge(&[d("a1"), d("a2")]).unwrap_err();
    assert!(e.to_string().contains("has targets https://other/"), "{e}");
    // A workload that draws paths: the shards' paths differ, the server not.
    for (dir, path) in [("a1", "/bytes/1"), ("a2", "/bytes/2")] {
        let p = d(dir).join(REPORT_FILE);
        let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        r.config.workload = "replay".into();
        r.config.targets = vec![format!("https://h:1{path}")];
        fs::write(&p, r.to_json()).unwrap();
    }
    assert!(merge(&[d("a1"), d("a2")]).is_ok());
}

#[test]
fn saturated_agents_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = (1..=2).map(|i| tmp.path().join(format!("a{i}"))).collect();
    for (i, d) in dirs.iter().enumerate() {
        agent(
            d,
            ShardId {
                index: i as u32 + 1,
                count: 2,
            },
            &recs(0..10),
            0,
        );
    }
    // Mark agent 2 saturated in its report.
    let p = dirs[1].join(REPORT_FILE);
    let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    r.client_cpu.busy_fraction = 0.97;
    r.client_cpu.saturated = true;
    fs::write(&p, r.to_json()).unwrap();
    let m = merge(&dirs).unwrap();
    assert!(m.client_cpu.saturated);
    let w = m.client_cpu.warning.unwrap();
    assert!(w.contains("agent(s) 2/2 were saturated"), "{w}");
    assert_eq!(m.distributed.unwrap().saturated_agents, ["2/2"]);
}

#[test]
fn a_layout_1_request_log_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("old.csv");
    let cols = &crate::CSV_COLUMNS[..crate::CSV_COLUMNS.len() - crate::WIRE_COLUMNS];
    let row = "7,0,0,0,https://h/,200,,90,400,full,0,TLSv1.3,TLS13_AES_128_GCM_SHA256,X25519,\
               300,2000,1,50,10,600,1024,0,,0";
    fs::write(&path, format!("{}\n{row}\n", cols.join(","))).unwrap();
    let recs = read_csv_log(&path).unwrap();
    assert_eq!(recs.len(), 1);
    let h = recs[0].handshake.as_ref().unwrap();
    assert_eq!((h.bytes_in, h.round_trips), (2000, 1));
    assert_eq!(h.wire, None);
    // A header that is neither layout is refused.
    fs::write(&path, format!("{},extra\n", cols.join(","))).unwrap();
    assert!(read_csv_log(&path).is_err());
}
