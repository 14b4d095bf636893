//! Seed 001's QUIC column (issue 34): the no-op-and-Amdahl breakdown over
//! TCP+TLS 1.3 and over QUIC (HTTP/3) with the same key, group and server,
//! the two tables side by side, and the stages that make up QUIC's extra
//! server CPU per request (`tlslab breakdown --transport both`).
//!
//! TLS 1.3, because QUIC carries nothing else; ECDSA P-256, `breakdown`'s
//! default key, so the column is the command's default run (the TLS 1.2
//! RSA-2048 table beside it is the paper's configuration, which QUIC
//! cannot run). The pair is kept in the document's `engine_report` under
//! `quic` ([`QuicColumn`]), beside seed 001's TCP report; a resumed
//! document without it runs the pair and adds it.

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::study::{Comparison, EngineReport, StudyResults};
use tlslab_schema::breakdown::{BreakdownPair, QuicColumn};
use tlslab_schema::engine::sort_keys;

use super::super::session::{Session, StudyError, compare, now_ms};
use super::breakdown_cells;
use crate::breakdown::{self, BreakdownConfig, REMAINDER_QUIC, Transport, Workload};

/// The points of the column's cells start so: `quic-column-tcp-…` and
/// `quic-column-quic-…`.
pub(super) const POINT: &str = "quic-column-";

/// The TCP run of the pair; the QUIC run is the same over QUIC.
pub(super) fn plan(quick: bool) -> BreakdownConfig {
    BreakdownConfig {
        workload: Workload::NewConn,
        file_size: 4096,
        version: Version::Tls13,
        key: KeyType::EcdsaP256,
        cell: std::time::Duration::from_millis(if quick { 500 } else { 1000 }),
        clients: 8,
        repeats: if quick { 2 } else { 3 },
        max_time: std::time::Duration::from_secs(if quick { 40 } else { 300 }),
        target_ci95: 0.02,
        transport: Transport::Tcp,
    }
}

/// The command that runs the same pair by hand.
fn command(cfg: &BreakdownConfig) -> String {
    super::breakdown_command(cfg, " --transport both")
}

/// The pair already in the document, if any.
fn recorded(doc: &StudyResults) -> Option<BreakdownPair> {
    doc.engine_report_as::<QuicColumn>()?.quic
}

/// Adds the pair's cells and puts it into the document's engine report
/// under `quic`.
pub(crate) fn record(doc: &mut StudyResults, pair: &BreakdownPair, command: &str, started: u64) {
    for (transport, report) in [("tcp", &pair.tcp), ("quic", &pair.quic)] {
        let prefix = format!("{POINT}{transport}-");
        let factors = [("transport", transport), ("version", "1.3")];
        let first = doc.cells.len();
        let cells = breakdown_cells(report, command, started, (&prefix, &factors, first));
        doc.cells.extend(cells);
    }
    let Ok(value) = serde_json::to_value(pair) else {
        return;
    };
    let mut report = match doc.engine_report.take() {
        Some(EngineReport::Engine(serde_json::Value::Object(m))) => m,
        // No TCP report to stand beside (its run failed before it was
        // written): the column alone.
        _ => serde_json::Map::new(),
    };
    report.insert("quic".into(), value);
    doc.engine_report = Some(EngineReport::Engine(sort_keys(serde_json::Value::Object(
        report,
    ))));
}

/// The column: runs the pair unless the document has it, records it and
/// saves; one unit of the progress bar.
pub(super) fn run(s: &mut Session) -> Result<(), StudyError> {
    if recorded(&s.doc).is_some() {
        return Ok(());
    }
    let cfg = plan(s.quick);
    let started = now_ms();
    let mut lines = Vec::new();
    let pair = breakdown::run_both(&cfg, |l: &str| lines.push(l.to_string()))?;
    for l in &lines {
        s.say(l);
    }
    let d = &pair.difference;
    s.say(&format!(
        "seed001-breakdown: QUIC column: TCP+TLS 1.3 {:.1} µs/req, QUIC {:.1} µs/req (server \
         CPU per request, server-observed): QUIC ÷ TCP {:.2}; the QUIC-only stages and the \
         remainder's growth explain {:.0} % of the {:+.1} µs",
        d.tcp_cpu_us,
        d.quic_cpu_us,
        d.quic_over_tcp,
        d.explained_fraction * 100.0,
        d.extra_us
    ));
    record(&mut s.doc, &pair, &command(&cfg), started);
    s.save()?;
    s.tick();
    Ok(())
}

/// The ids of the column's cells over `transport` (`tcp`, `quic`, or
/// both with `""`).
fn ids(doc: &StudyResults, transport: &str) -> Vec<String> {
    let prefix = format!("{POINT}{transport}");
    doc.cells
        .iter()
        .filter(|c| c.point.starts_with(&prefix))
        .map(|c| c.id.clone())
        .collect()
}

/// The column's paper-against-today rows (none without the pair).
pub(super) fn comparisons(doc: &StudyResults) -> Vec<Comparison> {
    let Some(p) = recorded(doc) else {
        return vec![];
    };
    let d = &p.difference;
    let share = |r: &tlslab_schema::breakdown::BreakdownReport, stage: &str| {
        r.share(stage).map(|s| s.fraction).filter(|x| x.is_finite())
    };
    let pk = match (share(&p.quic, "sig"), share(&p.quic, "kx")) {
        (Some(a), Some(b)) => Some((a + b) * 100.0),
        _ => None,
    };
    const PAIRED: &str = "Amdahl shares from no-op ablation over QUIC (server-observed CPU per \
                          request, paired with adjacent baselines), mean over rounds";
    vec![
        compare(
            "QUIC ÷ TCP+TLS 1.3: server CPU per request (new connection and full handshake each)",
            "not in the paper (QUIC came 20 years later); serve --h3 measured 1.74x (BENCHMARKS.md)",
            "issue 34",
            Some(d.quic_over_tcp),
            "x",
            "server-observed CPU per request of each run's TLS baseline, median over its \
             rounds; the TCP and QUIC runs ran one after the other (ECDSA P-256, x25519, TLS 1.3)",
            ids(doc, ""),
            "quinn's per-packet work (packet and header protection, ACKs, frames) and HTTP/3 \
             replace the kernel's TCP and TLS records; the handshake's crypto is the same",
        ),
        compare(
            "QUIC-only stages + the remainder's growth, against QUIC's measured extra CPU",
            "target: 100 % ± 10",
            "issue 34",
            Some(d.explained_fraction * 100.0).filter(|x| x.is_finite()),
            "%",
            "(packet protection + header protection + QUIC key schedule + (QUIC transport + \
             HTTP/3 − TCP's non-TLS)) ÷ (QUIC baseline − TCP baseline), each share × its own \
             baseline's server CPU per request",
            ids(doc, ""),
            "the other rows' deltas (TCP's record cipher, which QUIC does not use, and the \
             TLS protocol's share) make up the rest; noise in two unpaired baselines adds to it",
        ),
        compare(
            "public-key cryptography's share over QUIC (signature + key exchange)",
            "13% to 58%",
            "seed 001, §3.13",
            pk,
            "%",
            PAIRED,
            ids(doc, "quic"),
            "ECDSA P-256 and x25519 over QUIC with TLS 1.3, every request a full handshake, \
             against 1024-bit RSA over TCP",
        ),
        compare(
            "non-TLS costs' share over QUIC (QUIC transport + HTTP/3)",
            "19 to 45% of the total cost",
            "seed 001, §3.13",
            share(&p.quic, REMAINDER_QUIC).map(|x| x * 100.0),
            "%",
            PAIRED,
            ids(doc, "quic"),
            "quinn's transport and h3 run in the server's process (the kernel's TCP did it over \
             TCP), so they are the server's CPU here",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breakdown::BreakdownReport;

    /// A short pair (two rounds of short cells: not converged, so the
    /// checks are on presence, sums and signs, never on sizes) recorded
    /// into the recorded seed001 document: the column's rows, cells and
    /// comparisons are all there, and the report charts them.
    #[test]
    fn a_short_pair_fills_the_quic_column_and_its_charts() {
        let cfg = BreakdownConfig {
            file_size: 1024,
            cell: std::time::Duration::from_millis(300),
            clients: 4,
            repeats: 2,
            max_time: std::time::Duration::from_secs(1),
            ..plan(true)
        };
        let pair = breakdown::run_both(&cfg, |l: &str| eprintln!("{l}")).expect("the pair runs");
        let mut doc: StudyResults = serde_json::from_str(include_str!(
            "../../../../../docs/results/full/seed001-breakdown/results.json"
        ))
        .unwrap();
        assert!(recorded(&doc).is_none() && comparisons(&doc).is_empty());
        let tcp_rows = doc.cells.len();
        record(&mut doc, &pair, &command(&cfg), 1);
        // Seed 001's own table is still read, and the pair beside it.
        let tcp12 = doc
            .engine_report_as::<BreakdownReport>()
            .expect("the TCP report still reads");
        assert_eq!(tcp12.version, "TLSv1.2");
        let p = recorded(&doc).expect("the column is recorded");
        assert_eq!(
            (p.tcp.transport.as_str(), p.quic.transport.as_str()),
            ("tcp", "quic")
        );
        for r in [&p.tcp, &p.quic] {
            let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
            assert!(
                (total - 1.0).abs() < 1e-6,
                "{} shares sum to {total}",
                r.transport
            );
            assert!(
                r.row("TLS (baseline)")
                    .is_some_and(|b| b.cpu_us_median > 0.0)
            );
        }
        for s in [
            "sig",
            "kx",
            "quic-packet",
            "quic-header",
            "quic-keys",
            REMAINDER_QUIC,
        ] {
            assert!(p.quic.share(s).is_some(), "no QUIC share {s}");
        }
        // The difference's rows add up to the extra CPU it explains.
        let d = &p.difference;
        let delta: f64 = d.stages.iter().map(|s| s.delta_us).sum();
        assert!(
            (delta - d.extra_us).abs() <= 1e-6 * d.extra_us.abs().max(1.0),
            "{delta} against {}",
            d.extra_us
        );
        assert!(d.quic_over_tcp.is_finite() && d.quic_over_tcp > 0.0);
        // A cell for every round of every row of both runs (the baseline
        // row has one a pair), and nothing else moved.
        let n = |r: &BreakdownReport| r.rows.iter().map(|r| r.cpu_us.len()).sum::<usize>();
        assert_eq!(doc.cells.len() - tcp_rows, n(&p.tcp) + n(&p.quic));
        assert_eq!(ids(&doc, "quic").len(), n(&p.quic));
        let now = comparisons(&doc);
        assert_eq!(now.len(), 4);
        assert!(now[0].today.is_some_and(|x| x > 0.0), "{:?}", now[0]);
        assert!(now.iter().all(|c| !c.cells.is_empty()));
        // The report draws the column: both tables and the difference.
        let (charts, _) = tlslab_report::html::charts(&doc);
        for title in [
            tlslab_report::html::BREAKDOWN_PAIR_CHART,
            tlslab_report::html::BREAKDOWN_DIFFERENCE_CHART,
        ] {
            let c = charts
                .iter()
                .find(|c| c.title == title)
                .unwrap_or_else(|| panic!("no chart {title}"));
            assert!(c.data.iter().any(|d| !d.cells.is_empty()), "{title}");
        }
        // And still seed 001's own.
        assert!(charts.iter().any(|c| c.title == "Breakdown"));
    }
}
