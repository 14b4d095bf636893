//! Seed 003 (Goldberg, Buff, Schmitt: "Secure Web Server Performance
//! Dramatically Improved by Caching SSL Session Keys"): Table 2, the median
//! TCP connect, full and cached handshake and GET times and the savings of
//! caching, redone by the probe against an embedded server behind
//! `tlslab relay` at several round-trip times.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_probe::{ProbeConfig, Sample, probe_target};
use tlslab_report::study::{Cell, CellMetrics, Comparison, StudyResults};
use tlslab_server::{Content, Server};

use super::session::{Builtin, Session, StudyError, compare, now_ms};
use crate::rig::Rig;

/// `seed003-table2`.
pub const TABLE2: Builtin = Builtin {
    name: "seed003-table2",
    title: "Table 2: median TCP connect, full and cached handshake, GET, and the savings of caching, against RTT",
    seed: "seed 003, Table 2",
    engine: "probe+relay",
    landed: true,
    duration: "quick ~15 s, full ~2 min",
    not_landed: "",
    insecure_ablation: false,
    run,
    plan: |quick| {
        let p = plan(quick);
        (
            serde_json::json!({
                "probe": {
                    "rtt_ms": p.rtts_ms,
                    "versions": p.versions.iter().map(|v| v.short()).collect::<Vec<_>>(),
                    "samples_per_cell": p.samples,
                    "key": "rsa2048",
                    "path": crate::lab::PATH,
                }
            }),
            p.rtts_ms.len() * p.versions.len(),
        )
    },
};

struct Plan {
    rtts_ms: Vec<u64>,
    versions: Vec<Version>,
    samples: usize,
}

fn plan(quick: bool) -> Plan {
    Plan {
        // The full version's RTTs are Table 2's median TCP connect times.
        rtts_ms: if quick {
            vec![10, 50]
        } else {
            vec![10, 30, 80, 100]
        },
        versions: vec![Version::Tls12, Version::Tls13],
        samples: if quick { 8 } else { 40 },
    }
}

/// One row of Table 2, quoted: host, and T, Snc, Sc, H, W, C (ms) and the
/// savings (%).
#[derive(Clone, Copy, Debug)]
pub struct PaperRow {
    /// The site.
    pub host: &'static str,
    /// Median TCP connect.
    pub t: f64,
    /// Median SSL connect, no caching.
    pub snc: f64,
    /// Median SSL connect, cached.
    pub sc: f64,
    /// Median HTTP GET.
    pub h: f64,
    /// W = T + Snc + H.
    pub w: f64,
    /// C = T + Sc + H.
    pub c: f64,
    /// 100 (W − C) / W.
    pub savings: f64,
}

const fn row(host: &'static str, v: [f64; 7]) -> PaperRow {
    PaperRow {
        host,
        t: v[0],
        snc: v[1],
        sc: v[2],
        h: v[3],
        w: v[4],
        c: v[5],
        savings: v[6],
    }
}

/// Seed 003's Table 2, all times in milliseconds.
pub const TABLE2_PAPER: [PaperRow; 5] = [
    row(
        "intranet.nyu.edu",
        [10.0, 40.0, 10.0, 150.0, 200.0, 170.0, 15.0],
    ),
    row(
        "secure.webmaster.com",
        [80.0, 190.0, 80.0, 360.0, 630.0, 520.0, 17.0],
    ),
    row(
        "www.coned.com",
        [30.0, 110.0, 40.0, 210.0, 350.0, 280.0, 20.0],
    ),
    row(
        "www.farsight.com",
        [100.0, 930.0, 360.0, 520.0, 1550.0, 980.0, 36.0],
    ),
    row(
        "wwwus.netscape.com",
        [80.0, 940.0, 320.0, 410.0, 1430.0, 810.0, 43.0],
    ),
];

fn run(s: &mut Session) -> Result<(), StudyError> {
    let p = plan(s.quick);
    s.say(&format!(
        "seed003-table2: {} probes per cell through tlslab relay at RTT {:?} ms; times are \
         client-observed by the probe",
        p.samples, p.rtts_ms
    ));
    let rig = Rig::generate(KeyType::Rsa2048, &[], s.placement.clone())?;
    let server = Server::start(rig.server(Content::Specweb96)).map_err(crate::Error::from)?;
    let note = "TCP connect (T) is to tlslab relay on loopback: the relay accepts locally and \
                delays data, not the SYN, so T does not include the emulated RTT and W and C \
                are smaller than on a real path by one RTT each"
        .to_string();
    if !s.doc.notes.contains(&note) {
        s.doc.notes.push(note);
    }
    let r = run_cells(s, &p, &server, &rig.roots);
    server.shutdown();
    r?;
    let c = comparisons(&s.doc);
    s.finish(c)
}

fn run_cells(
    s: &mut Session,
    p: &Plan,
    server: &tlslab_server::Server,
    roots: &rustls::RootCertStore,
) -> Result<(), StudyError> {
    let Some(upstream) = server.https_addr() else {
        return Err(StudyError::Run(crate::Error::EmptyCell {
            cell: "seed003-table2".into(),
            errors: "the embedded server has no HTTPS listener".into(),
        }));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StudyError::Io {
            path: "tokio runtime".into(),
            source: e,
        })?;
    for &rtt in &p.rtts_ms {
        for &v in &p.versions {
            let point = format!("rtt{rtt}ms-tls{}", v.short());
            let id = format!("{point}-r1");
            if s.has(&id) {
                continue;
            }
            let relay = super::pq::RttPath::start(Duration::from_millis(rtt), upstream, &id)?;
            let url = format!(
                "https://127.0.0.1:{}{}",
                relay.addr().port(),
                crate::lab::PATH
            );
            let mut load = tlslab_load::LoadConfig::new(vec![
                tlslab_load::Target::parse(&url).map_err(crate::Error::from)?,
            ]);
            load.versions = vec![v];
            load.trust = tlslab_load::Trust::Roots(roots.clone());
            load.sni = Some("localhost".into());
            let tls = tlslab_load::client::tls_config(&load).map_err(crate::Error::from)?;
            let cfg = ProbeConfig {
                tls: Arc::new(tls),
                sni: Some("localhost".into()),
                timeout: Duration::from_secs(10),
            };
            let started = now_ms();
            let samples: Vec<Sample> = rt.block_on(async {
                let mut out = Vec::new();
                for _ in 0..p.samples {
                    out.push(probe_target(&cfg, &url).await);
                }
                out
            });
            let stats = relay.stop();
            let report = tlslab_probe::report::build(&samples, None, None);
            let Some(t) = report.targets.first() else {
                continue;
            };
            let errors = samples.iter().filter(|x| x.error.is_some()).count() as u64;
            if t.table2.ssl_new_ms.is_none() {
                return Err(StudyError::Run(crate::Error::EmptyCell {
                    cell: id,
                    errors: format!("{errors} of {} probes failed: {:?}", p.samples, t.errors),
                }));
            }
            let mean = |f: fn(&Sample) -> Option<i64>| {
                let v: Vec<f64> = samples.iter().filter_map(f).map(|x| x as f64).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            let us = |ms: Option<f64>| ms.map(|m| (m * 1000.0).round() as u64);
            let p50 = |ms: Option<f64>| us(ms).map(|v| vec![(50.0, v)]).unwrap_or_default();
            let cell = Cell {
                id: id.clone(),
                point,
                factors: BTreeMap::from([
                    ("rtt_ms".to_string(), rtt.to_string()),
                    ("version".to_string(), v.short().to_string()),
                ]),
                repeat: 1,
                order: 0,
                command_line: format!(
                    "tlslab certs --key rsa2048 --out certs && tlslab serve --cert certs/{} \
                     --key certs/{} --listen 127.0.0.1:8443 --threads 1 --tls {} & tlslab relay \
                     --listen 127.0.0.1:9443 --upstream 127.0.0.1:8443 --delay {}ms & tlslab \
                     probe run https://127.0.0.1:9443{} --tls {} --sni localhost --cacert certs/{} \
                     --interval 1s --rounds {} --db table2.sqlite && tlslab probe report --db \
                     table2.sqlite",
                    pki::CHAIN_FILE,
                    pki::KEY_FILE,
                    v.short(),
                    rtt / 2,
                    crate::lab::PATH,
                    v.short(),
                    pki::CA_CERT_FILE,
                    p.samples
                ),
                started_unix_ms: started,
                metrics: CellMetrics {
                    window_s: samples.len() as f64,
                    requests: samples.iter().filter(|x| x.get_us.is_some()).count() as u64,
                    errors,
                    latency_us: p50(t.table2.get_ms),
                    handshake_full_us: p50(t.table2.ssl_new_ms),
                    handshake_resumed_us: p50(t.table2.ssl_cached_ms),
                    connect_p50_us: us(t.table2.tcp_ms),
                    full_round_trips: mean(|x| x.full_handshake_round_trips),
                    resumed_round_trips: mean(|x| x.resumed_handshake_round_trips),
                    reuse_achieved: t.resumption_accepted as f64
                        / t.resumption_offered.max(1) as f64,
                    version: Some(v.short().to_string()),
                    ..CellMetrics::default()
                },
                load: None,
            };
            let mut engine = s
                .doc
                .engine_report
                .take()
                .unwrap_or_else(|| serde_json::json!({ "probe": {} }));
            if let Some(map) = engine.get_mut("probe").and_then(|m| m.as_object_mut()) {
                map.insert(
                    id.clone(),
                    serde_json::json!({
                        "target": t,
                        "relay": {
                            "connections": stats.connections,
                            "bytes_up": stats.bytes_up,
                            "bytes_down": stats.bytes_down,
                        },
                    }),
                );
            }
            s.doc.engine_report = Some(engine);
            s.push(cell)?;
        }
    }
    Ok(())
}

/// Table 2's figures for one cell: T, Snc, Sc, H (ms) and the savings.
fn today(c: &Cell) -> Option<(f64, f64, f64, f64)> {
    let m = &c.metrics;
    let ms = |v: Option<u64>| v.map(|x| x as f64 / 1000.0);
    Some((
        ms(m.connect_p50_us)?,
        ms(CellMetrics::at(&m.handshake_full_us, 50.0))?,
        ms(CellMetrics::at(&m.handshake_resumed_us, 50.0))?,
        ms(CellMetrics::at(&m.latency_us, 50.0))?,
    ))
}

fn comparisons(doc: &StudyResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for c in &doc.cells {
        let Some((t, snc, sc, h)) = today(c) else {
            continue;
        };
        let rtt: f64 = c
            .factors
            .get("rtt_ms")
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0);
        let v = c.factors.get("version").cloned().unwrap_or_default();
        // The paper's site whose median TCP connect is nearest this RTT.
        let Some(site) = TABLE2_PAPER
            .iter()
            .min_by(|a, b| (a.t - rtt).abs().total_cmp(&(b.t - rtt).abs()))
        else {
            continue;
        };
        let PaperRow {
            host,
            t: pt,
            snc: psnc,
            sc: psc,
            h: ph,
            w: pw,
            c: pc,
            savings: psav,
        } = *site;
        let label = format!("RTT {rtt} ms, TLS {v} (paper: {host}, TCP {pt} ms)");
        let measured = "client-observed by the probe through tlslab relay, median over the \
                        cell's probes";
        let hs_reason = if v == "1.2" {
            "TLS 1.2's full handshake takes two round trips, as SSL 3.0's did; the rest of the \
             paper's time was 1998 server queueing and a 100 MHz client (at least 40 ms locally)"
        } else {
            "TLS 1.3's full handshake takes one round trip, not two; crypto adds about a \
             millisecond on today's CPUs"
        };
        out.push(compare(
            &format!("SSL new (full handshake), {label}"),
            &format!("{psnc} ms"),
            "seed 003, Table 2 (Snc)",
            Some(snc),
            "ms",
            measured,
            vec![c.id.clone()],
            hs_reason,
        ));
        out.push(compare(
            &format!("SSL cached (resumed handshake), {label}"),
            &format!("{psc} ms"),
            "seed 003, Table 2 (Sc)",
            Some(sc),
            "ms",
            measured,
            vec![c.id.clone()],
            "a resumption takes one round trip then and now; today's key schedule costs \
             microseconds where SSLeay on a 100 MHz Pentium took about 10 ms",
        ));
        out.push(compare(
            &format!("GET (request to last byte), {label}"),
            &format!("{ph} ms"),
            "seed 003, Table 2 (H)",
            Some(h),
            "ms",
            measured,
            vec![c.id.clone()],
            "a 4 KiB file in one round trip over an emulated path with no bandwidth limit or \
             loss; the 1998 GETs (< 5000 bytes) crossed congested links to loaded servers",
        ));
        let w = t + snc + h;
        let cc = t + sc + h;
        out.push(compare(
            &format!("savings from caching, 100 (W-C)/W, {label}"),
            &format!("{psav} % (W = {pw} ms, C = {pc} ms)"),
            "seed 003, Table 2 (last column)",
            Some(100.0 * (w - cc) / w),
            "%",
            "from the medians above: W = T + Snc + H, C = T + Sc + H",
            vec![c.id.clone()],
            if v == "1.2" {
                "caching still saves one of TLS 1.2's two handshake round trips"
            } else {
                "with TLS 1.3 both handshakes take one round trip, so caching saves only the \
                 certificate and key-exchange computation"
            },
        ));
    }
    out
}
