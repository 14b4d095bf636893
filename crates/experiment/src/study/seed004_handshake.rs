//! Seed 004 (Mainkar, Reeser: "Performance Implications of Security
//! Protocols", AT&T Labs, 2000): a handshake adds about 2 KB and two round
//! trips, and about 300 ms of server CPU, so `300/(1−ρ)` ms to the response
//! time at server utilisation ρ. Redone for TLS 1.2 and 1.3 with RSA, ECDSA
//! and the post-quantum hybrid X25519MLKEM768, by the load engine's
//! client-observed byte and round-trip counters; and the response-time model
//! against latency measured open-loop at a few utilisations.

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::capacity::seed004_response;
use tlslab_report::study::{Cell, Comparison, Curve, StudyResults, fmt_level};

use super::About;
use super::load_cell::LoadRig;
use super::matrix::{CellSpec, point_name};
use super::rtt_path::{PathChoice, PathKind};
use super::session::{Session, StudyError, compare, cpu_us, one, ratio};
use tlslab_report::study::ChartKind;

/// `seed004-handshake`.
pub(super) struct Handshake;

impl super::Study for Handshake {
    fn about(&self) -> About {
        About {
            name: "seed004-handshake",
            title: "Bytes and round trips per handshake (RSA, ECDSA, ML-DSA chains, X25519MLKEM768, certificate compression, over TCP and QUIC) and the 300/(1-ρ) response-time model",
            seed: "seed 004, Factors Affecting Performance I-II",
            engine: "load",
            duration: "quick ~2 min, ~3 min with --path-kind both; full ~11 min with --path-kind both",
        }
    }
    fn takes_path(&self) -> bool {
        true
    }
    fn plan(&self, quick: bool) -> (serde_json::Value, usize) {
        let p = plan(quick);
        let points: Vec<&str> = p
            .bytes
            .iter()
            .chain(&p.closed)
            .map(|c| c.point.as_str())
            .collect();
        let pq_points: Vec<&str> = p.pq.iter().map(|c| c.point.as_str()).collect();
        (
            serde_json::json!({
                "handshake_points": points,
                "pq_sweep_points": pq_points,
                "utilisations": p.utils,
                "repeats": p.repeats,
                "cell_s": p.cell.as_secs_f64(),
                "open_loop_cell_s": p.open_cell.as_secs_f64(),
            }),
            units(&p),
        )
    }
    fn run(&self, s: &mut Session) -> Result<(), StudyError> {
        let p = plan_over(s.quick, s.wan.kinds());
        // The plan above counts the round-trip cells over the relay only.
        s.set_planned(units(&p));
        for why in p.bytes.iter().filter_map(CellSpec::excluded) {
            s.note(why);
        }
        s.say(&format!(
            "seed004-handshake: handshake bytes and round trips (client-observed by the load \
             engine's socket counters), then the response-time model at utilisations {:?}; {}",
            p.utils,
            s.placement.describe()
        ));
        let quic_note = super::pq::quic_relay_note(s.wan.kinds());
        for note in s
            .wan
            .kinds()
            .iter()
            .map(|&k| super::pq::trust_note(k))
            .chain(quic_note)
        {
            s.note(note);
        }
        if let Some(note) = quic_note {
            s.say(&format!("seed004-handshake: {note}"));
        }
        let mut rig = LoadRig::new(s.placement.clone());
        let r = run_cells(s, &p, &mut rig);
        rig.shutdown();
        r
    }
    fn compare(&self, s: &mut Session) -> Vec<Comparison> {
        let (curves, mut comparisons) = analyse(&s.doc, &plan_over(s.quick, s.wan.kinds()));
        comparisons.extend(super::pq::analyse(&s.doc));
        s.doc.curves = curves;
        comparisons
    }
    fn charts(&self) -> &'static [ChartKind] {
        &[
            ChartKind::LatencyThroughput,
            ChartKind::Reuse,
            ChartKind::HandshakePercentiles,
            ChartKind::Goodput,
            ChartKind::PostQuantum,
            ChartKind::Curves,
        ]
    }
}

/// The cells `p` runs (the progress bar's total).
fn units(p: &Plan) -> usize {
    (p.bytes.iter().filter(|c| c.excluded().is_none()).count() + p.closed.len() + p.utils.len())
        * p.repeats as usize
        + p.pq.len() * p.pq_repeats as usize
}

struct Plan {
    bytes: Vec<CellSpec>,
    /// The post-quantum sweep (`super::pq`).
    pq: Vec<CellSpec>,
    pq_repeats: u32,
    closed: Vec<CellSpec>,
    utils: Vec<f64>,
    repeats: u32,
    cell: Duration,
    open_cell: Duration,
}

fn spec(point_factors: &[(&str, &str)], cell: Duration) -> CellSpec {
    let mut s = CellSpec::new(point_name(point_factors), cell);
    for (f, l) in point_factors {
        match *f {
            "version" => {
                s.versions = vec![if *l == "1.2" {
                    Version::Tls12
                } else {
                    Version::Tls13
                }]
            }
            "key" => s.key = l.parse().unwrap_or(KeyType::EcdsaP256),
            "group" => s.group = Some(l.to_string()),
            "reuse" => s.reuse = l.parse().unwrap_or(0.0),
            "clients" => s.clients = l.parse().unwrap_or(1),
            _ => {}
        }
        s.factors.insert(f.to_string(), l.to_string());
    }
    s
}

/// The model's configuration: RSA-2048, TLS 1.3, X25519, a full handshake
/// per request (seed 004's worst case: no session reuse).
const MODEL: [(&str, &str); 4] = [
    ("version", "1.3"),
    ("key", "rsa2048"),
    ("group", "x25519"),
    ("reuse", "0"),
];

fn plan(quick: bool) -> Plan {
    plan_over(quick, &[PathKind::Relay])
}

/// The plan with the post-quantum sweep's round-trip cells over `kinds`.
fn plan_over(quick: bool, kinds: &[PathKind]) -> Plan {
    let cell = Duration::from_millis(if quick { 500 } else { 2000 });
    let mut bytes = Vec::new();
    for key in ["rsa2048", "ecdsa-p256"] {
        for v in ["1.2", "1.3"] {
            for g in ["x25519", "X25519MLKEM768"] {
                let mut s = spec(
                    &[("version", v), ("key", key), ("group", g), ("reuse", "0.5")],
                    cell,
                );
                s.clients = 2;
                bytes.push(s);
            }
        }
    }
    let closed = ["1", "8"]
        .iter()
        .map(|c| {
            let mut f: Vec<(&str, &str)> = MODEL.to_vec();
            f.push(("clients", *c));
            let mut s = spec(&f, cell);
            s.point = format!("model-c{c}");
            s
        })
        .collect();
    Plan {
        bytes,
        pq: super::pq::plan(quick, kinds),
        pq_repeats: if quick { 1 } else { 2 },
        closed,
        utils: if quick {
            vec![0.3, 0.6]
        } else {
            vec![0.2, 0.4, 0.6, 0.8]
        },
        repeats: if quick { 1 } else { 3 },
        cell,
        open_cell: Duration::from_millis(if quick { 1000 } else { 3000 }),
    }
}

fn mean_latency_ms(c: &Cell) -> Option<f64> {
    super::session::load_report(c)?
        .latency
        .total
        .mean_us
        .map(|us| us / 1000.0)
}

fn run_cells(s: &mut Session, p: &Plan, rig: &mut LoadRig) -> Result<(), StudyError> {
    let closed_first = [p.bytes.clone(), p.closed.clone()].concat();
    rig.run_cells(s, &closed_first, p.repeats)?;
    // The capacity: requests/s of the closed loop with 8 clients (every
    // request a full handshake), client-observed. Its inverse is the
    // effective service time S, which on a shared machine is longer than
    // the server's CPU per request.
    let (capacity, _) = one(&s.doc, &[("clients", "8")], |c| {
        Some(c.metrics.requests_per_s)
    });
    let Some(capacity) = capacity.filter(|c| *c > 0.0) else {
        return Err(StudyError::Run(crate::Error::empty(
            "model-c8",
            "no capacity measured",
        )));
    };
    let mut open = Vec::new();
    for &u in &p.utils {
        let lvl = fmt_level(u);
        let mut f: Vec<(&str, &str)> = MODEL.to_vec();
        f.push(("utilisation", lvl.as_str()));
        let mut c = spec(&f, p.open_cell);
        c.point = format!("model-util{lvl}");
        let rate = (u * capacity * 10.0).round() / 10.0;
        c.rate = Some(rate);
        c.clients = 64;
        c.factors.insert("rate".into(), fmt_level(rate));
        open.push(c);
    }
    rig.run_cells(s, &open, p.repeats)?;
    s.say(&format!(
        "seed004-handshake: the post-quantum sweep, {} cells x {} repeat(s) (chains, \
         compression, groups, over TCP and QUIC; TTFB over {} at {:?} ms RTT)",
        p.pq.len(),
        p.pq_repeats,
        match s.wan {
            PathChoice::Relay => "tlslab relay",
            PathChoice::Packet => "the packet-level path",
            PathChoice::Both => "tlslab relay and the packet-level path",
        },
        super::pq::RTTS_MS
    ));
    rig.run_cells(s, &p.pq, p.pq_repeats)
}

fn analyse(doc: &StudyResults, p: &Plan) -> (Vec<Curve>, Vec<Comparison>) {
    let mut out = Vec::new();
    let full_bytes = |c: &Cell| Some(c.metrics.full_bytes_in? + c.metrics.full_bytes_out?);
    let pq_reason = "X25519MLKEM768 adds an ML-KEM-768 key share (1184 bytes) to the \
                     ClientHello and a ciphertext (1088 bytes) to the ServerHello";
    for key in ["rsa2048", "ecdsa-p256"] {
        for v in ["1.2", "1.3"] {
            for g in ["x25519", "X25519MLKEM768"] {
                let f = [("version", v), ("key", key), ("group", g), ("reuse", "0.5")];
                let (b, cells) = one(doc, &f, full_bytes);
                if b.is_none() {
                    continue;
                }
                out.push(compare(
                    &format!("bytes per full handshake, both ways, TLS {v}, {key}, {g}"),
                    "~2KBs added to total application traffic",
                    "seed 004, Factors Affecting Performance I",
                    b,
                    "bytes",
                    "client-observed: socket bytes written and read from the first ClientHello \
                     to the end of the handshake, mean over the cell's full handshakes",
                    cells,
                    match (key, g) {
                        (_, "X25519MLKEM768") => pq_reason,
                        ("rsa2048", _) => {
                            "an RSA-2048 certificate and signature (about 256 bytes each, \
                             chain of leaf and CA) where the paper had 1024-bit RSA"
                        }
                        _ => {
                            "ECDSA P-256 keys and signatures are a quarter of RSA-2048's, so \
                             the certificate chain is smaller than in 2000"
                        }
                    },
                ));
            }
            // How much bigger the post-quantum handshake is.
            let (classic, c0) = one(
                doc,
                &[("version", v), ("key", key), ("group", "x25519")],
                full_bytes,
            );
            let (pq, c1) = one(
                doc,
                &[("version", v), ("key", key), ("group", "X25519MLKEM768")],
                full_bytes,
            );
            if let (Some(a), Some(b)) = (classic, pq) {
                out.push(compare(
                    &format!(
                        "post-quantum handshake: X25519MLKEM768 bytes − X25519 bytes, TLS {v}, {key}"
                    ),
                    "~2KBs per handshake in all (no post-quantum key exchange in 2000)",
                    "seed 004, Factors Affecting Performance I",
                    Some(b - a),
                    "bytes",
                    &format!(
                        "difference of the two cells' mean bytes per full handshake \
                         (client-observed); {:.0} % more",
                        (b / a - 1.0) * 100.0
                    ),
                    [c0, c1].concat(),
                    pq_reason,
                ));
            }
        }
    }
    let tls12_rsa = [("version", "1.2"), ("key", "rsa2048"), ("group", "x25519")];
    let (srv_in, c_in) = one(doc, &tls12_rsa, |c| c.metrics.full_bytes_in);
    out.push(compare(
        "bytes the server sends in a full handshake, TLS 1.2, rsa2048",
        "about 750 bytes with a self-signed certificate, each further certificate about \
         750 bytes more",
        "seed 000, Overhead Analysis (session setup)",
        srv_in,
        "bytes",
        "client-observed bytes read during the handshake, mean",
        c_in.clone(),
        "a two-certificate chain (leaf and CA) with RSA-2048 keys, and an ECDHE key share \
         and signature the paper's RSA key transport did not send",
    ));
    let (cli_out, _) = one(doc, &tls12_rsa, |c| c.metrics.full_bytes_out);
    out.push(compare(
        "bytes the client sends in a full handshake, TLS 1.2, rsa2048",
        "about 250 bytes",
        "seed 000, Overhead Analysis (session setup)",
        cli_out,
        "bytes",
        "client-observed bytes written during the handshake, mean",
        c_in,
        "today's ClientHello lists many suites, groups, signature schemes and extensions \
         (SNI, ALPN, session ticket)",
    ));
    for v in ["1.2", "1.3"] {
        let f = [("version", v), ("key", "ecdsa-p256"), ("group", "x25519")];
        let (rt, cells) = one(doc, &f, |c| c.metrics.full_round_trips);
        out.push(compare(
            &format!("round trips a full handshake adds, TLS {v}"),
            "~2 RTTs (4 RTTs for a secure SSL socket against 2 for a clear TCP socket)",
            "seed 004, Factors Affecting Performance I",
            rt,
            "RTTs",
            "client-observed: read-after-write turnarounds during the handshake, mean",
            cells.clone(),
            if v == "1.2" {
                "TLS 1.2's full handshake keeps SSL 3.0's two round trips"
            } else {
                "TLS 1.3 sends the key share in the ClientHello: one round trip"
            },
        ));
        let (rr, _) = one(doc, &f, |c| c.metrics.resumed_round_trips);
        out.push(compare(
            &format!("round trips a resumed handshake adds, TLS {v}"),
            "avoids 1 out of 2 extra RTTs",
            "seed 004, Factors Affecting Performance II",
            rr,
            "RTTs",
            "client-observed: read-after-write turnarounds during resumed handshakes, mean",
            cells,
            "an abbreviated handshake takes one round trip, then and now",
        ));
    }
    // The response-time model.
    let (s_us, s_cells) = one(doc, &[("clients", "8")], cpu_us);
    let (r1, r1_cells) = one(doc, &[("clients", "1")], mean_latency_ms);
    out.push(compare(
        "server CPU per full handshake (with its one request)",
        "O(300ms) of additional server CPU consumption (session-key generation + 1024-bit \
         RSA decryption)",
        "seed 004, Factors Affecting Performance I",
        s_us.map(|us| us / 1000.0),
        "ms",
        "server-observed: worker CPU ÷ requests served, closed loop with 8 clients, TLS 1.3, \
         RSA-2048, X25519, no reuse",
        s_cells.clone(),
        "RSA-2048 signing with aws-lc-rs on one modern core takes about 1 ms; the paper's \
         300 ms was a 1999 server's CPU under its web server",
    ));
    let (capacity, cap_cells) = one(doc, &[("clients", "8")], |c| Some(c.metrics.requests_per_s));
    let mut curves = Vec::new();
    if let (Some(capacity), Some(r1)) = (capacity.filter(|c| *c > 0.0), r1) {
        // The effective service time: the inverse of the capacity.
        let s_ms = 1000.0 / capacity;
        // The time every request spends outside the server's queue: the
        // unloaded response time less one service time.
        let base = (r1 - s_ms).max(0.0);
        let pts: Vec<(f64, f64)> = (0..19)
            .map(|i| {
                let rho = i as f64 * 0.05;
                (rho, base + seed004_response(s_ms, rho))
            })
            .collect();
        curves.push(Curve {
            name: format!("base + S/(1−ρ), S = {s_ms:.2} ms (1/capacity), base = {base:.2} ms"),
            chart: "Response time against server utilisation (seed 004's model)".into(),
            x: "utilisation ρ = throughput ÷ capacity".into(),
            y: "mean response time, ms".into(),
            points: pts,
        });
        for &u in &p.utils {
            let lvl = fmt_level(u);
            let f = [("utilisation", lvl.as_str())];
            let (lat, cells) = one(doc, &f, mean_latency_ms);
            let (thr, _) = one(doc, &f, |c| Some(c.metrics.requests_per_s));
            let (Some(lat), Some(thr)) = (lat, thr) else {
                continue;
            };
            let rho = (thr / capacity).min(0.99);
            let model = base + seed004_response(s_ms, rho);
            out.push(compare(
                &format!("mean response time at ρ = {rho:.2} (target {u})"),
                &format!(
                    "300/(1−ρ) ms added: {:.0} ms at ρ = {rho:.2}",
                    seed004_response(300.0, rho)
                ),
                "seed 004, Factors Affecting Performance I",
                Some(lat),
                "ms",
                &format!(
                    "client-observed mean latency (connect, handshake, request), open loop \
                     (Poisson arrivals) at {:.1}/s; ρ = completed requests/s ÷ the closed-loop \
                     capacity {capacity:.1}/s (client-observed); today's model base + \
                     S/(1−ρ) predicts {model:.2} ms ({:+.0} %)",
                    u * capacity,
                    ratio(Some(lat), Some(model)).map_or(0.0, |x| (x - 1.0) * 100.0)
                ),
                [cells, cap_cells.clone(), r1_cells.clone()].concat(),
                "the same queueing form with today's service time S (about 1 ms, not 300 ms); \
                 the measured curve also carries the client's and the loopback's time",
            ));
        }
    }
    (curves, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_excludes_tls12_with_the_hybrid_group_and_counts_the_rest() {
        let p = plan(true);
        assert_eq!(p.bytes.len(), 8);
        assert_eq!(p.bytes.iter().filter(|c| c.excluded().is_some()).count(), 2);
        let (_, units) = super::super::Study::plan(&Handshake, true);
        assert_eq!(units, 6 + 2 + 2 + p.pq.len());
        assert_eq!(p.bytes[0].point, "tls1.2-rsa2048-x25519-reuse0.5");
        // `--path-kind both` adds the round-trip cells over the packet path (TCP
        // and QUIC, 3 RTTs x 7 chains each) to the progress bar's total.
        let both = plan_over(true, &[PathKind::Relay, PathKind::Packet]);
        assert_eq!(super::units(&both), units + 2 * 3 * 7);
    }
}
