//! Seed 000 (Apostolopoulos, Peris, Pradhan, Saha: "Securing Electronic
//! Commerce: Reducing the SSL Overhead"): throughput and server CPU against
//! session reuse (Figs. 4–5). Its cluster figure (Fig. 9) is
//! [`super::seed000_cluster`].

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::study::{Cell, ChartKind, Comparison};

use super::About;
use super::load_cell::LoadRig;
use super::matrix::{Engine, Level, Matrix, Pin};
use super::session::{Session, StudyError, best, compare, ratio};

/// `seed000-reuse`.
pub(super) struct Reuse;

impl super::Study for Reuse {
    fn about(&self) -> About {
        About {
            name: "seed000-reuse",
            title: "Throughput and server CPU against session reuse, TLS 1.2 and 1.3, RSA and ECDSA",
            seed: "seed 000, Figs. 4-5",
            engine: "load",
            duration: "quick ~30 s, full ~7 min",
        }
    }
    fn plan(&self, quick: bool) -> (serde_json::Value, usize) {
        let m = reuse_matrix(quick);
        (m.to_json(), m.cell_count())
    }
    fn run(&self, s: &mut Session) -> Result<(), StudyError> {
        let m = reuse_matrix(s.quick);
        s.say(&format!(
            "seed000-reuse: {} cells of {} s; {}; requests/s client-observed over each cell's \
             window, server CPU per request server-observed",
            m.cell_count(),
            m.cell.as_secs_f64(),
            s.placement.describe()
        ));
        let mut rig = LoadRig::new(s.placement.clone());
        let r = rig.run_matrix(s, &m);
        rig.shutdown();
        r
    }
    fn compare(&self, s: &mut Session) -> Vec<Comparison> {
        reuse_comparisons(&s.doc)
    }
    fn charts(&self) -> &'static [ChartKind] {
        &[
            ChartKind::LatencyThroughput,
            ChartKind::Reuse,
            ChartKind::HandshakePercentiles,
        ]
    }
}

/// The reuse matrix: reuse × version × key × clients.
pub fn reuse_matrix(quick: bool) -> Matrix {
    let (reuse, clients, cell, repeats): (&[f64], &[usize], u64, u32) = if quick {
        (&[0.0, 0.5, 1.0], &[2, 8], 500, 1)
    } else {
        (&[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], &[2, 16], 2000, 3)
    };
    let cell = Duration::from_millis(cell);
    Matrix {
        name: super::Study::about(&Reuse).name.into(),
        title: super::Study::about(&Reuse).title.into(),
        engine: Engine::Load,
        repeats,
        cell,
        warmup: super::matrix::default_warmup(cell),
        pin: Pin::Split,
        path: crate::lab::PATH.into(),
        factors: vec![
            (
                "reuse".into(),
                reuse.iter().map(|&r| Level::Reuse(r)).collect(),
            ),
            (
                "version".into(),
                vec![
                    Level::Version(Version::Tls12),
                    Level::Version(Version::Tls13),
                ],
            ),
            (
                "key".into(),
                vec![Level::Key(KeyType::Rsa2048), Level::Key(KeyType::EcdsaP256)],
            ),
            (
                "clients".into(),
                clients.iter().map(|&c| Level::Clients(c)).collect(),
            ),
        ],
    }
}

fn rps(c: &Cell) -> Option<f64> {
    Some(c.metrics.requests_per_s)
}

const MEASURED_RPS: &str = "client-observed requests/s over each cell's window; median over \
                            repeats, best client count";

fn reuse_comparisons(doc: &tlslab_report::study::StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (v, key, why) in [
        (
            "1.2",
            "rsa2048",
            "one 2020s core against a 1999 server; RSA-2048 signing with aws-lc-rs takes about \
             a millisecond where 1024-bit RSA decryption took tens, and TLS 1.2 adds an ECDHE \
             exchange the paper's RSA key transport did not have",
        ),
        (
            "1.3",
            "ecdsa-p256",
            "ECDSA P-256 signing and X25519 cost a small fraction of an RSA private-key \
             operation, on a CPU with AES-NI, against 1999 hardware running RC4-MD5",
        ),
    ] {
        let f = [("reuse", "0"), ("version", v), ("key", key)];
        let (today, cells) = best(doc, &f, rps);
        out.push(compare(
            &format!("requests/s with no session reuse, TLS {v}, {key}"),
            "Apache: at most 13 requests/s; Netscape: about 7 requests/s (1024-bit RSA, RC4-MD5)",
            "seed 000, SSL performance, Figs. 4-5",
            today,
            "requests/s",
            MEASURED_RPS,
            cells,
            why,
        ));
    }
    for v in ["1.2", "1.3"] {
        for key in ["rsa2048", "ecdsa-p256"] {
            let (full, c0) = best(doc, &[("reuse", "0"), ("version", v), ("key", key)], rps);
            let (res, c1) = best(doc, &[("reuse", "1"), ("version", v), ("key", key)], rps);
            out.push(compare(
                &format!("requests/s at 100 % reuse ÷ at 0 % reuse, TLS {v}, {key}"),
                "≈5x: Apache at most 13 requests/s with no reuse, 60-70 connections/s at \
                 10-15 ms with 100 % reuse",
                "seed 000, SSL performance, Fig. 5",
                ratio(res, full),
                "x",
                MEASURED_RPS,
                [c0, c1].concat(),
                if key == "rsa2048" {
                    "a resumption skips the private-key operation, which still dominates a full \
                     RSA handshake today; what is left (TCP, symmetric crypto, HTTP) bounds the gain"
                } else {
                    "with ECDSA the full handshake is cheap already, so skipping it gains less \
                     than with 1999's RSA"
                },
            ));
        }
    }
    for v in ["1.2", "1.3"] {
        let f0 = [("reuse", "0"), ("version", v), ("key", "rsa2048")];
        let f1 = [("reuse", "1"), ("version", v), ("key", "rsa2048")];
        let least_cpu = |c: &Cell| super::session::cpu_us(c).map(|x| -x);
        let (c_full, ids0) = best(doc, &f0, least_cpu);
        let (c_res, ids1) = best(doc, &f1, least_cpu);
        out.push(compare(
            &format!("server CPU per full-handshake request, TLS {v}, rsa2048"),
            "45 ms for SSL handshake (1024-bit RSA)",
            "seed 000, Overhead Analysis (data transfer overhead paragraph)",
            c_full.map(|x| -x / 1000.0),
            "ms",
            "server-observed: worker CPU time ÷ requests served over each cell (warm-up \
             included); lowest median over client counts",
            ids0.clone(),
            "RSA-2048 private-key operations take about 1 ms on one modern core with \
             aws-lc-rs; the paper's 1024-bit RSA on a 1999 PowerPC took tens of ms",
        ));
        out.push(compare(
            &format!("server CPU, full ÷ resumed handshake request, TLS {v}, rsa2048"),
            "resumed set-up about 3-4 ms, one order of magnitude less than the SSL handshake \
             overhead",
            "seed 000, Overhead Analysis (session setup)",
            ratio(c_full, c_res),
            "x",
            "server-observed CPU per request, median over repeats, lowest over client counts",
            [ids0, ids1].concat(),
            "the ratio still shows the private-key operation dominating; today's resumed \
             connection also pays for TCP set-up and HTTP, which the paper's 3-4 ms excluded",
        ));
    }
    let (hs, cells) = best(doc, &[("reuse", "1"), ("version", "1.3")], |c| {
        tlslab_report::study::CellMetrics::at(&c.metrics.handshake_resumed_us, 50.0)
            .map(|v| -(v as f64))
    });
    out.push(compare(
        "resumed handshake time, TLS 1.3 (p50)",
        "about 3-4 ms",
        "seed 000, Overhead Analysis (session setup)",
        hs.map(|x| -x / 1000.0),
        "ms",
        "client-observed handshake time over loopback (end of TCP connect to handshake \
         complete), p50, lowest over keys and client counts",
        cells,
        "loopback has no network delay and a modern core computes a resumption's key \
         schedule in microseconds",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_reuse_matrix_is_small_and_covers_both_versions_and_keys() {
        let m = reuse_matrix(true);
        assert_eq!(m.cell_count(), 3 * 2 * 2 * 2);
        let p = m.points();
        assert_eq!(p[0].point, "reuse0-tls1.2-rsa2048-c2");
        assert!(reuse_matrix(false).cell_count() > m.cell_count());
    }

    #[test]
    fn comparisons_of_an_empty_document_have_no_figure_of_today() {
        let doc = tlslab_report::study::StudyResults::from_sweep(
            &tlslab_report::SweepReport {
                schema_version: 1,
                over: "clients".into(),
                factor: 2.0,
                knee_gain: 0.1,
                step_s: None,
                series: vec![],
            },
            "x",
        );
        let c = reuse_comparisons(&doc);
        assert!(!c.is_empty());
        assert!(c.iter().all(|c| c.today.is_none() && !c.paper.is_empty()));
    }
}
