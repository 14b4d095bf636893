//! The QUIC analysis on a hand-built document: each figure from the
//! cells it names, QUIC cells kept out of TCP's rows and TCP's out of
//! QUIC's.

use tlslab_report::LoadReport;
use tlslab_report::quic::{Transport as QuicSection, TransportPhase};
use tlslab_report::study::{Cell, CellMetrics, StudyResults, Verbatim};

use super::*;

fn report(transport: Option<TransportPhase>) -> Verbatim<LoadReport> {
    let mut r = tlslab_report::empty_report(1.0);
    r.transport = transport.map(|full| QuicSection {
        name: "quic".into(),
        max_concurrent_streams: 1,
        full,
        ..QuicSection::default()
    });
    Verbatim::new(r).unwrap()
}

/// A cell of the sweep: `quic` with its transport section, else TCP with
/// `tcp_in` bytes in, 1,511 out.
#[allow(clippy::too_many_arguments)]
fn cell(
    chain: &str,
    comp: &str,
    kx: &str,
    rtt_ms: Option<u64>,
    quic: Option<TransportPhase>,
    tcp_in: f64,
    cpu_us: f64,
    hs_us: u64,
) -> Cell {
    let mut factors: Vec<(&str, String)> = vec![
        ("sweep", "pq".into()),
        ("chain", chain.into()),
        ("compression", comp.into()),
        ("kx", kx.into()),
    ];
    let t = if quic.is_some() { "quic-" } else { "" };
    let point = match rtt_ms {
        Some(r) => {
            factors.push(("rtt_ms", r.to_string()));
            factors.push(("path", "packet".into()));
            format!("pq-{t}rtt{r}-{chain}-{comp}-{kx}-packet")
        }
        None => format!("pq-{t}{chain}-{comp}-{kx}"),
    };
    if quic.is_some() {
        factors.push(("transport", "quic".into()));
    }
    // The TCP client's bytes: 327 B with X25519, 1,511 B with the hybrid.
    let tcp_out = if kx == "x25519" { 327.0 } else { 1511.0 };
    let (bytes_in, bytes_out) = match &quic {
        Some(q) => (q.bytes_in, q.bytes_out),
        None => (Some(tcp_in), Some(tcp_out)),
    };
    Cell {
        id: format!("{point}-r1"),
        point,
        factors: crate::study::session::factor_map(factors),
        repeat: 1,
        order: 0,
        command_line: String::new(),
        started_unix_ms: 0,
        metrics: CellMetrics {
            server_cpu_us_per_request: cpu_us,
            server_sign_us: Some(cpu_us / 4.0),
            full_bytes_in: bytes_in,
            full_bytes_out: bytes_out,
            handshake_full_us: vec![(50.0, hs_us)],
            connect_p50_us: Some(hs_us),
            ttfb_p50_us: Some(hs_us),
            ..CellMetrics::default()
        },
        load: Some(report(quic)),
    }
}

fn phase(out: f64, dg_out: f64, bytes_in: f64, dg_in: f64, hs_us: u64) -> TransportPhase {
    TransportPhase {
        count: 8,
        handshake_p50_us: Some(hs_us),
        first_byte_p50_us: Some(hs_us + 100_000),
        bytes_out: Some(out),
        bytes_in: Some(bytes_in),
        datagrams_out: Some(dg_out),
        datagrams_in: Some(dg_in),
        packets_out: None,
    }
}

fn doc(cells: Vec<Cell>) -> StudyResults {
    StudyResults {
        quick: true,
        ..StudyResults::imported("seed004-handshake", "the post-quantum sweep", cells)
    }
}

const KX: &str = "X25519MLKEM768";

/// ECDSA P-256, the ML-DSA-44 leaf under ECDSA and ML-DSA-44 over QUIC on
/// loopback and at 100 ms RTT; TCP cells of ECDSA P-256 and ML-DSA-44.
fn sample() -> StudyResults {
    let mut cells = Vec::new();
    // (chain, QUIC server bytes, datagrams, timed handshake at 100 ms).
    for (chain, bytes, dg, hs) in [
        ("ecdsa-p256", 2_826.0, 4.0, 102_000),
        ("mldsa44/ecdsa-p256", 6_600.0, 6.0, 101_500),
        // Over 3 × 2,400 B, within 12,000 B: one round trip.
        ("ecdsa-p256/mldsa44", 8_967.0, 8.6, 101_600),
        ("mldsa44", 12_728.0, 11.0, 203_000),
    ] {
        // The client's datagrams: more for the larger flights (its ACKs).
        let out_dg = if chain == "mldsa44" { 5.0 } else { 3.0 };
        let q = phase(out_dg * 1200.0, out_dg, bytes, dg, 400);
        cells.push(cell(chain, "none", KX, None, Some(q), 0.0, 800.0, 400));
        let x = phase(2400.0, 2.0, bytes - 1088.0, dg, 400);
        cells.push(cell(
            chain,
            "none",
            "x25519",
            None,
            Some(x),
            0.0,
            700.0,
            400,
        ));
        let q = phase(out_dg * 1200.0, out_dg, bytes, dg, hs);
        cells.push(cell(chain, "none", KX, Some(100), Some(q), 0.0, 800.0, hs));
    }
    let brotli = phase(3600.0, 3.0, 12_428.0, 11.0, 400);
    cells.push(cell(
        "mldsa44",
        "brotli",
        KX,
        None,
        Some(brotli),
        0.0,
        800.0,
        400,
    ));
    for (chain, tcp_in, hs) in [
        ("ecdsa-p256", 2_352.0, 100_500),
        ("mldsa44", 11_886.0, 101_000),
    ] {
        cells.push(cell(chain, "none", KX, None, None, tcp_in, 400.0, 300));
        let x = tcp_in - 1088.0;
        cells.push(cell(chain, "none", "x25519", None, None, x, 380.0, 300));
        cells.push(cell(
            chain,
            "brotli",
            KX,
            None,
            None,
            tcp_in - 284.0,
            400.0,
            300,
        ));
        cells.push(cell(chain, "none", KX, Some(100), None, tcp_in, 400.0, hs));
    }
    doc(cells)
}

fn row<'a>(rows: &'a [Comparison], q: &str) -> &'a Comparison {
    rows.iter()
        .find(|r| r.quantity.starts_with(q))
        .unwrap_or_else(|| {
            panic!(
                "no row {q}: {:#?}",
                rows.iter().map(|r| &r.quantity).collect::<Vec<_>>()
            )
        })
}

#[test]
fn the_client_initial_is_its_tcp_client_hello_in_padded_datagrams() {
    let d = sample();
    // 1,511 − 85 = 1,426 B: two datagrams; 327 − 85 = 242 B: one.
    assert_eq!(client_initial(&d, KX), Some((2.0, 2400.0, 1426.0)));
    assert_eq!(client_initial(&d, "x25519"), Some((1.0, 1200.0, 242.0)));
    assert_eq!(client_initial(&d, "secp384r1"), None);
}

#[test]
fn quic_rows_come_from_quic_cells_and_the_arithmetic_predicts_the_extra_rtt() {
    let d = sample();
    let rows = analyse(&d);
    // Bytes both ways: the QUIC cell's, not TCP's 1,511 + 2,352.
    let b = row(
        &rows,
        "bytes per full handshake over QUIC, both ways, chain ecdsa-p256, X25519MLKEM768",
    );
    assert_eq!(b.today, Some(3600.0 + 2826.0));
    assert!(
        b.measured.contains("3 datagrams") || b.measured.contains("3.0 datagrams"),
        "{}",
        b.measured
    );
    crate::assert_has(&b.measured, &["3863 B both ways"]);
    // CPU: 0.8 ms over QUIC, twice TCP's, a quarter of it the signature.
    let c = row(
        &rows,
        "server CPU per full handshake over QUIC, chain mldsa44",
    );
    assert_eq!(c.today, Some(0.8));
    crate::assert_has(&c.measured, &["QUIC ÷ TCP = 2.00", "200.0 µs, 25 %"]);
    // Compression: 12,428 ÷ 12,728, 300 B saved against TCP's 284.
    let z = row(&rows, "server handshake flight over QUIC with brotli");
    assert!((z.today.unwrap() - 12_428.0 / 12_728.0 * 100.0).abs() < 1e-9);
    crate::assert_has(&z.measured, &["300 B saved over QUIC against 284 B"]);
    // Round trips at 100 ms: the congestion window of 12,000 B decides;
    // the anti-amplification limit (3 × 2,400 B) is stated beside it.
    let rt = |chain: &str| {
        row(
            &rows,
            &format!(
                "handshake round trips over QUIC at 100 ms RTT against the first flight's \
                 limit, chain {chain},"
            ),
        )
    };
    let r = rt("mldsa44");
    assert_eq!(r.today, Some(2.03));
    let parts = ["= 12000 B", "= 7200 B", "predicts 2 RTT", "predicted agree"];
    crate::assert_has(&r.measured, &parts);
    for chain in ["mldsa44/ecdsa-p256", "ecdsa-p256/mldsa44"] {
        let m = &rt(chain).measured;
        crate::assert_has(m, &["predicts 1 RTT", "predicted agree"]);
    }
    // TTFB: QUIC's first byte beside TCP's connect + handshake + request.
    let t = row(
        &rows,
        "time to first byte over QUIC at 100 ms RTT, chain mldsa44,",
    );
    assert_eq!(t.today, Some(303.0));
    crate::assert_has(&t.measured, &["303.0 ms (3.03 RTTs)"]);
    // The threshold: ML-DSA-44 (12,728 B) costs the extra RTT, the ECDSA
    // leaf under ML-DSA-44 (8,967 B) does not; 12,000 B between them.
    let th = row(
        &rows,
        "smallest server flight timed to cost QUIC an extra round trip",
    );
    assert_eq!(th.today, Some(12_728.0));
    crate::assert_has(
        &th.measured,
        &[
            "chain mldsa44,",
            "8967 B in 8.6 datagrams (ecdsa-p256/mldsa44, 1.02 RTTs)",
            "the measured transition matches it",
            "agree for 4 of 4",
        ],
    );
}

#[test]
fn tcp_rows_ignore_quic_cells() {
    let d = sample();
    let rows = super::super::analyse(&d);
    // TCP's bytes row for ECDSA: its own cell (1,511 + 2,352 B).
    let b = row(
        &rows,
        "bytes per full handshake, both ways, TLS 1.3, chain ecdsa-p256, X25519MLKEM768",
    );
    assert_eq!(b.today, Some(3863.0));
    // No TCP row for a chain that only has QUIC cells.
    assert!(
        !rows.iter().any(|r| r
            .quantity
            .starts_with("bytes per full handshake, both ways, TLS 1.3, chain mldsa44/ecdsa-p256"))
    );
    assert!(!rows.iter().any(|r| {
        r.quantity
            .starts_with("time to first byte at 100 ms RTT, chain mldsa44/ecdsa-p256")
    }));
    // TCP's packet-path threshold has no QUIC cell either: both TCP chains
    // are timed within one RTT, so there is no TCP threshold row.
    assert!(
        !rows
            .iter()
            .any(|r| r.quantity.starts_with("smallest server first flight timed"))
    );
    let t = row(
        &rows,
        "time to first byte at 100 ms RTT, chain mldsa44, path packet",
    );
    assert_eq!(t.today, Some(303.0));
}
