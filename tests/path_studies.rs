//! The studies' round-trip cells over the packet-level path (`experiment
//! run … --path-kind packet|both`) against the relay, checked as round-trip
//! COUNTS within a quarter RTT (the machine is shared; see
//! tests/path_timing.rs):
//!
//! - seed003-table2: the TCP connect T is one RTT over the packet path and
//!   about nothing through the relay; TLS 1.2's full handshake two RTTs
//!   and TLS 1.3's one over both; over the packet path its HTTP/3 cells
//!   have no connect, a one-RTT QUIC handshake and a 0-RTT GET whose first
//!   byte is one RTT from the first packet.
//! - seed004-handshake's post-quantum cells: at 100 ms RTT an ML-DSA-87
//!   chain (a first flight above the initial window of 10 segments) costs
//!   one RTT more than an ECDSA chain over the packet path, and not
//!   through the relay; the forwarder's bytes less headers equal the
//!   load's socket bytes within 1 %.
//! - the same sweep over QUIC (`load --h3`): at 100 ms RTT an ML-DSA-44
//!   chain (a first flight above QUIC's initial congestion window of
//!   12,000 B, and above the anti-amplification limit of 3 × the client's
//!   Initial for its first connection) costs QUIC one RTT more than an
//!   ECDSA chain, though it stays within TCP's initial window.
//!
//! `#[ignore]`: root (network namespaces, TUN), run by .ci/run with
//! `--release --test-threads=1`; without root a loud skip (a failure
//! under CI=true). The non-root checks (`--path-kind packet` refused without
//! root, option parsing) are in tests/experiment.rs and the crate's units.

mod common;

use std::time::Duration;

use common::netpath::{root, root_tempdir};
use common::{args, experiment_run};
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_experiment::pin::Placement;
use tlslab_experiment::study::matrix::CellSpec;
use tlslab_experiment::study::rtt_path::{ByteCheck, PathKind};
use tlslab_experiment::study::{LoadRig, Transport};
use tlslab_report::study::CellMetrics;

/// Asserts `v` ms is `rtts` round trips of `rtt` ms, within a quarter RTT
/// above (and 0.1 ms below: a path never delivers early).
fn rounds(what: &str, v: f64, rtts: f64, rtt: f64) {
    assert!(
        v >= rtts * rtt - 0.1 && v <= rtts * rtt + rtt / 4.0,
        "{what}: {v:.2} ms, want {rtts} RTT of {rtt} ms"
    );
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn seed003_connect_is_one_rtt_over_the_packet_path_and_local_through_the_relay() {
    let Some(dir) = root_tempdir("seed003 over the packet path") else {
        return;
    };
    let out_dir = dir.path().join("s3");
    let args = args("seed003-table2 --quick --path-kind both --no-progress");
    let (_, doc) = experiment_run(&args, &out_dir, Duration::from_secs(120));
    let cells = doc["cells"].as_array().unwrap();
    // 2 RTTs × 2 versions × 2 paths, and 2 RTTs over HTTP/3 (packet only).
    assert_eq!(cells.len(), 10, "{doc}");
    for c in cells {
        let f = &c["factors"];
        if f["transport"] == "h3" {
            assert_eq!(f["path"], "packet", "{c}");
            let rtt: f64 = f["rtt_ms"].as_str().unwrap().parse().unwrap();
            let m = &c["metrics"];
            assert!(m["connect_p50_us"].is_null(), "no connect over QUIC: {c}");
            let snc = m["handshake_full_us"][0][1].as_f64().unwrap() / 1000.0;
            let zero = m["ttfb_p50_us"].as_f64().unwrap() / 1000.0;
            let id = c["id"].as_str().unwrap();
            eprintln!("{id}: QUIC full {snc:.2} ms, 0-RTT GET first byte {zero:.2} ms");
            rounds(&format!("{id} QUIC full"), snc, 1.0, rtt);
            rounds(&format!("{id} 0-RTT first byte"), zero, 1.0, rtt);
            assert!(c["command_line"].as_str().unwrap().contains("--h3"), "{c}");
            continue;
        }
        let f = &c["factors"];
        let rtt: f64 = f["rtt_ms"].as_str().unwrap().parse().unwrap();
        let kind = f["path"].as_str().unwrap();
        let ms = |v: &serde_json::Value| v.as_f64().unwrap() / 1000.0;
        let t = ms(&c["metrics"]["connect_p50_us"]);
        let snc = ms(&c["metrics"]["handshake_full_us"][0][1]);
        let id = c["id"].as_str().unwrap();
        eprintln!("{id}: T {t:.2} ms, Snc {snc:.2} ms");
        // The full handshake's round trips: at least that many RTTs both
        // ways; across the packet path not one more (RSA-2048 adds a few
        // ms; the relay, in-process, adds more per flight on a busy
        // machine: 31.8 ms for TLS 1.2 at 10 ms RTT in a debug build).
        let hs = if f["version"] == "1.2" { 2.0 } else { 1.0 };
        assert!(
            snc >= hs * rtt - 0.1,
            "{id}: Snc {snc} ms, want {hs} RTT of {rtt} ms"
        );
        if kind == "packet" {
            assert!(
                snc < (hs + 1.0) * rtt,
                "{id}: Snc {snc} ms, want {hs} RTT of {rtt} ms"
            );
            rounds(&format!("{id} T"), t, 1.0, rtt);
            assert!(
                c["command_line"].as_str().unwrap().contains("tlslab path"),
                "{c}"
            );
        } else {
            assert_eq!(kind, "relay");
            assert!(t < rtt / 4.0, "{id}: T {t} ms through the relay");
        }
    }
    // The forwarder's report is kept per packet cell.
    let probe = &doc["engine_report"]["probe"];
    assert!(
        probe["rtt10ms-tls1.3-packet-r1"]["packet_path"]["down"]["packets_forwarded"]
            .as_u64()
            .unwrap()
            > 0,
        "{probe}"
    );
    // The report says which column to trust from which path.
    let notes = doc["notes"].to_string();
    assert!(
        notes.contains("trust its Snc, Sc and H, not its T"),
        "{notes}"
    );
}

/// One post-quantum round-trip cell: TLS 1.3, X25519MLKEM768, a chain of
/// `key` (leaf and intermediate), 1 client, `n` full handshakes.
fn pq_cell(key: KeyType, kind: PathKind, rtt_ms: u64, n: u64) -> CellSpec {
    let mut s = CellSpec::new(
        format!("pq-{}-{}", key.name(), kind.name()),
        Duration::from_secs(5),
    );
    s.warmup = Duration::ZERO;
    s.versions = vec![Version::Tls13];
    s.key = key;
    s.intermediate = Some(key);
    s.group = Some("X25519MLKEM768".into());
    s.reuse = 0.0;
    s.clients = 1;
    s.mss = Some(1460);
    s.rtt = Some(Duration::from_millis(rtt_ms));
    s.wan = kind;
    s.requests = Some(n);
    s
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn a_chain_above_the_initial_window_costs_one_more_rtt_over_the_packet_path_only() {
    if !root("pq over the packet path") {
        return;
    }
    const RTT: f64 = 100.0;
    let mut rig = LoadRig::new(Placement::split());
    for kind in [PathKind::Relay, PathKind::Packet] {
        for (key, extra) in [(KeyType::EcdsaP256, 0.0), (KeyType::MlDsa87, 1.0)] {
            let spec = pq_cell(key, kind, RTT as u64, 4);
            let c = rig
                .run(&spec, 1)
                .unwrap_or_else(|e| panic!("{}: {e}", spec.point));
            let m = &c.metrics;
            let hs = CellMetrics::at(&m.handshake_full_us, 50.0).unwrap() as f64 / 1000.0;
            let t = m.connect_p50_us.unwrap() as f64 / 1000.0;
            let load: tlslab_report::LoadReport = c.load_report().unwrap().clone();
            let segs = load.handshake.full.data_segs_in_mean.unwrap();
            eprintln!(
                "{}: connect {t:.2} ms, handshake {hs:.2} ms, {segs:.1} segments in, {} B in",
                c.id,
                m.full_bytes_in.unwrap_or(0.0)
            );
            assert_eq!(load.requests.completed, 4, "{}", c.id);
            // The flight sizes that make the point: ECDSA within 10
            // segments, ML-DSA-87 beyond.
            assert!((segs > 10.0) == (extra > 0.0), "{}: {segs} segments", c.id);
            match kind {
                PathKind::Packet => {
                    rounds(&format!("{} connect", c.id), t, 1.0, RTT);
                    rounds(&format!("{} handshake", c.id), hs, 1.0 + extra, RTT);
                }
                PathKind::Relay => {
                    assert!(t < RTT / 4.0, "{}: connect {t} ms", c.id);
                    rounds(&format!("{} handshake", c.id), hs, 1.0, RTT);
                }
            }
        }
    }
    rig.shutdown();
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn handshake_bytes_match_the_packet_count_on_the_path_within_one_percent() {
    if !root("byte check over the packet path") {
        return;
    }
    let mut rig = LoadRig::new(Placement::split());
    for key in [KeyType::EcdsaP256, KeyType::MlDsa65] {
        let spec = pq_cell(key, PathKind::Packet, 20, 10);
        let c = rig
            .run(&spec, 1)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.point));
        let reports = rig.take_path_reports();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].0, c.id);
        let check: ByteCheck = serde_json::from_value(reports[0].1["byte_check"].clone()).unwrap();
        eprintln!("{}: {check:?}", c.id);
        assert_eq!(check.connections, 10, "{check:?}");
        assert!(check.within_1pct(), "{check:?}");
        // The handshakes are a good part of the bytes (the rest is the
        // 4 KiB response, the request, the tickets and the close).
        let total = (check.socket_in + check.socket_out) as f64;
        assert!(check.handshake_bytes > 0.3 * total, "{check:?}");
    }
    rig.shutdown();
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn a_pq_chain_above_quics_first_flight_limit_costs_quic_one_more_rtt() {
    if !root("pq over QUIC across the packet path") {
        return;
    }
    const RTT: f64 = 100.0;
    let mut rig = LoadRig::new(Placement::split());
    for (key, extra) in [(KeyType::EcdsaP256, 0.0), (KeyType::MlDsa44, 1.0)] {
        let mut spec = pq_cell(key, PathKind::Packet, RTT as u64, 4);
        spec.point = format!("pq-quic-{}-packet", key.name());
        spec.transport = Transport::Quic;
        spec.mss = None;
        let c = rig
            .run(&spec, 1)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.point));
        let load: tlslab_report::LoadReport = c.load_report().unwrap().clone();
        let t = load.transport.expect("a QUIC cell's transport section");
        let hs = t.full.handshake_p50_us.unwrap() as f64 / 1000.0;
        let first = t.full.first_byte_p50_us.unwrap() as f64 / 1000.0;
        let bytes_in = t.full.bytes_in.unwrap();
        eprintln!(
            "{}: handshake {hs:.2} ms, first byte {first:.2} ms, {bytes_in:.0} B in {:.1} \
             datagrams, {:.0} B out in {:.1}",
            c.id,
            t.full.datagrams_in.unwrap(),
            t.full.bytes_out.unwrap(),
            t.full.datagrams_out.unwrap()
        );
        assert_eq!(load.requests.completed, 4, "{}", c.id);
        assert_eq!(t.full.count, 4, "{}", c.id);
        assert!(c.command_line.contains("--h3 -m 1"), "{}", c.command_line);
        // ECDSA's flight is within 3 × 2,400 B (the hybrid ClientHello's
        // two Initial datagrams) and 12,000 B; ML-DSA-44's beyond both.
        assert!(
            (bytes_in > 12_000.0) == (extra > 0.0),
            "{}: {bytes_in} B",
            c.id
        );
        // No connect: the handshake from the first datagram, the first
        // byte one RTT later.
        rounds(&format!("{} handshake", c.id), hs, 1.0 + extra, RTT);
        rounds(&format!("{} first byte", c.id), first, 2.0 + extra, RTT);
        // The path carried it: the forwarder's report, and no TCP byte
        // check (QUIC's sockets are not counted).
        let reports = rig.take_path_reports();
        assert_eq!(reports.len(), 1);
        assert!(
            reports[0].1["packet_path"]["down"]["packets_forwarded"]
                .as_u64()
                .unwrap()
                > 0,
            "{}",
            reports[0].1
        );
        assert!(reports[0].1["byte_check"].is_null(), "{}", reports[0].1);
    }
    rig.shutdown();
    // The sweep runs these cells for every chain at every RTT with
    // `--path-kind packet|both`: its plan is checked by the crate's unit tests
    // (study::pq).
}
