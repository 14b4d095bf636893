//! Seed 003 (Goldberg, Buff, Schmitt: "Secure Web Server Performance
//! Dramatically Improved by Caching SSL Session Keys"): Table 2, the median
//! TCP connect, full and cached handshake and GET times and the savings of
//! caching, redone by the probe against an embedded server behind
//! `tlslab relay` at several round-trip times. Across the packet-level
//! path each round-trip time also gets an HTTP/3 cell: the QUIC handshakes,
//! the 1-RTT GET and the 0-RTT GET's first byte (QUIC cannot cross the
//! relay, which carries TCP).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_probe::quic::{Endpoint, probe_h3};
use tlslab_probe::{ProbeConfig, Sample, Transports, probe_target};
use tlslab_report::study::{
    Cell, CellMetrics, Comparison, EngineReport, ProbeCell, ProbeCells, RelayCounts, StudyResults,
};
use tlslab_server::{Content, Server};

use super::About;
use super::rtt_path::{PathKind, RttPath, Stopped};
use super::session::{Session, StudyError, compare, now_ms};
use crate::rig::{self, Rig};
use tlslab_report::study::ChartKind;

/// `seed003-table2`.
pub(super) struct Table2;

impl super::Study for Table2 {
    fn about(&self) -> About {
        About {
            name: "seed003-table2",
            title: "Table 2: median TCP connect, full and cached handshake, GET, and the savings of caching, against RTT",
            seed: "seed 003, Table 2",
            engine: "probe+relay",
            duration: "quick ~15 s, full ~2 min",
        }
    }
    fn takes_path(&self) -> bool {
        true
    }
    fn plan(&self, quick: bool) -> (serde_json::Value, usize) {
        let p = plan(quick);
        (
            serde_json::json!({
                "probe": {
                    "rtt_ms": p.rtts_ms,
                    "versions": p.versions.iter().map(|v| v.short()).collect::<Vec<_>>(),
                    "samples_per_cell": p.samples,
                    "h3_on_packet_path": true,
                    "key": "rsa2048",
                    "path": crate::lab::PATH,
                }
            }),
            p.rtts_ms.len() * p.versions.len(),
        )
    }
    fn run(&self, s: &mut Session) -> Result<(), StudyError> {
        let p = plan(s.quick);
        let kinds = s.wan.kinds();
        s.set_planned(
            kinds
                .iter()
                .map(|&k| p.rtts_ms.len() * Arm::all(&p, k).len())
                .sum(),
        );
        s.say(&format!(
            "seed003-table2: {} probes per cell over {} at RTT {:?} ms; times are client-observed by \
             the probe",
            p.samples,
            crate::join(
                kinds.iter().map(|k| match k {
                    PathKind::Relay => "tlslab relay",
                    PathKind::Packet => "the packet-level tlslab path",
                }),
                " and "
            ),
            p.rtts_ms
        ));
        for &kind in kinds {
            let note = match kind {
                PathKind::Relay => {
                    "TCP connect (T) through tlslab relay (path = relay) is to the relay on loopback: \
                     the relay accepts locally and delays data, not the SYN, so T does not include \
                     the emulated RTT and W and C are smaller than on a real path by one RTT each; \
                     trust its Snc, Sc and H, not its T"
                }
                PathKind::Packet => {
                    "through the packet-level path (path = packet, tlslab path: delay RTT/2 each \
                     way, the kernel's own TCP between two network namespaces) T is a real TCP \
                     connect of one RTT, so W and C are as on a WAN; trust every column there"
                }
            };
            s.note(note);
        }
        for &kind in kinds {
            match kind {
                PathKind::Relay => {
                    let rig = Rig::generate(KeyType::Rsa2048, &[], s.placement.clone())?;
                    let server = Server::start(rig.server(Content::Specweb96))
                        .map_err(crate::Error::from)?;
                    let r = run_cells(s, &p, kind, Some((&server, &rig)));
                    server.shutdown();
                    r?;
                }
                PathKind::Packet => run_cells(s, &p, kind, None)?,
            }
        }
        Ok(())
    }
    fn compare(&self, s: &mut Session) -> Vec<Comparison> {
        comparisons(&s.doc)
    }
    fn charts(&self) -> &'static [ChartKind] {
        &[ChartKind::Table2]
    }
}

struct Plan {
    rtts_ms: Vec<u64>,
    versions: Vec<Version>,
    samples: usize,
}

/// What one cell probes over: TCP with one TLS version, or HTTP/3 (TLS 1.3
/// inside QUIC; across the packet path only, for tlslab relay carries TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    Tcp(Version),
    H3,
}

impl Arm {
    /// The arms of one round-trip time over `kind`.
    fn all(p: &Plan, kind: PathKind) -> Vec<Arm> {
        let mut v: Vec<Arm> = p.versions.iter().map(|&v| Arm::Tcp(v)).collect();
        if kind == PathKind::Packet {
            v.push(Arm::H3);
        }
        v
    }

    /// The TLS version negotiated.
    fn version(self) -> Version {
        match self {
            Arm::Tcp(v) => v,
            Arm::H3 => Version::Tls13,
        }
    }

    /// What a point's name says of the arm: `tls1.3`, `h3`.
    fn point(self) -> String {
        match self {
            Arm::Tcp(v) => format!("tls{}", v.short()),
            Arm::H3 => "h3".into(),
        }
    }
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

/// One quoted row: the paper's figures are whole milliseconds and percent.
const fn row(host: &'static str, v: [u16; 7]) -> PaperRow {
    PaperRow {
        host,
        t: v[0] as f64,
        snc: v[1] as f64,
        sc: v[2] as f64,
        h: v[3] as f64,
        w: v[4] as f64,
        c: v[5] as f64,
        savings: v[6] as f64,
    }
}

/// Seed 003's Table 2, all times in milliseconds.
pub const TABLE2_PAPER: [PaperRow; 5] = [
    row("intranet.nyu.edu", [10, 40, 10, 150, 200, 170, 15]),
    row("secure.webmaster.com", [80, 190, 80, 360, 630, 520, 17]),
    row("www.coned.com", [30, 110, 40, 210, 350, 280, 20]),
    row("www.farsight.com", [100, 930, 360, 520, 1550, 980, 36]),
    row("wwwus.netscape.com", [80, 940, 320, 410, 1430, 810, 43]),
];

/// The probes of one cell, on a runtime of the calling thread (so their
/// sockets are in its network namespace): over TCP, or over HTTP/3 at
/// `h3` (the server's UDP port).
fn probes(
    cfg: &ProbeConfig,
    url: &str,
    h3: Option<&Endpoint>,
    n: usize,
    id: &str,
) -> Result<Vec<Sample>, crate::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::empty(id, format!("tokio runtime: {e}")))?;
    Ok(rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(match h3 {
                Some(at) => probe_h3(cfg, url, Some(at)).await,
                None => probe_target(cfg, url).await,
            });
        }
        out
    }))
}

/// The cells of one path kind. Over the relay, `loopback` is the server
/// every cell shares; over the packet path each cell gets a path of its
/// RTT and a server inside it.
fn run_cells(
    s: &mut Session,
    p: &Plan,
    kind: PathKind,
    loopback: Option<(&Server, &Rig)>,
) -> Result<(), StudyError> {
    for &rtt in &p.rtts_ms {
        for arm in Arm::all(p, kind) {
            let point = format!("rtt{rtt}ms-{}{}", arm.point(), kind.suffix());
            let id = format!("{point}-r1");
            if s.has(&id) {
                continue;
            }
            let rtt_d = Duration::from_millis(rtt);
            let started = now_ms();
            let (samples, stopped) = match loopback {
                Some((server, rig)) => {
                    let Some(upstream) = server.https_addr() else {
                        return Err(StudyError::Run(crate::Error::empty(
                            id,
                            "the embedded server has no HTTPS listener",
                        )));
                    };
                    let path = RttPath::relay(rtt_d, upstream, &id)?;
                    let url = path.url(upstream.port(), crate::lab::PATH);
                    let cfg = probe_config(&rig.roots, arm, "localhost")?;
                    let samples = probes(&cfg, &url, None, p.samples, &id);
                    (samples?, path.stop()?)
                }
                None => {
                    let path = RttPath::packet(rtt_d, s.capture(&id))?;
                    let h = path.handle();
                    let h = h.as_ref();
                    let placement = s.placement.clone();
                    let server = rig::on_server(h, move || {
                        let sans = rig::server_sans(h);
                        let rig = Rig::generate(KeyType::Rsa2048, &sans, placement)?;
                        let mut c = rig.server(Content::Specweb96);
                        c.https = Some(rig::server_bind(h));
                        let transport = rig::h3_with_zero_rtt(arm == Arm::H3, &mut c);
                        let server = transport.start(c)?;
                        Ok((server, rig))
                    })?;
                    let port = server.0.https_addr().map_or(0, |a| a.port());
                    let url = path.url(port, crate::lab::PATH);
                    let host = rig::server_host(h);
                    let h3 = server.0.h3_addr().map(|a| Endpoint {
                        host: None,
                        port: a.port(),
                    });
                    let samples = probe_config(&server.1.roots, arm, &host).and_then(|cfg| {
                        rig::on_client(h, || probes(&cfg, &url, h3.as_ref(), p.samples, &id))
                            .map_err(StudyError::from)
                    });
                    server.0.shutdown();
                    (samples?, path.stop()?)
                }
            };
            if let Stopped::Packet(r) = &stopped {
                s.say_capture(&id, r);
            }
            let cell = cell(s, p, &id, point, rtt, arm, kind, started, &samples, stopped)?;
            s.push(cell)?;
        }
    }
    Ok(())
}

fn probe_config(
    roots: &rustls::RootCertStore,
    arm: Arm,
    host: &str,
) -> Result<ProbeConfig, StudyError> {
    let mut load = tlslab_load::LoadConfig::new(vec![
        tlslab_load::Target::parse(&format!("https://{host}:443/")).map_err(crate::Error::from)?,
    ]);
    load.versions = vec![arm.version()];
    load.trust = tlslab_load::Trust::Roots(roots.clone());
    load.sni = Some(host.into());
    let tls = tlslab_load::client::tls_config(&load).map_err(crate::Error::from)?;
    let cfg = ProbeConfig {
        tls: Arc::new(tls),
        sni: Some(host.into()),
        timeout: Duration::from_secs(10),
        transports: Transports::Tcp,
        quic: None,
    };
    Ok(match arm {
        Arm::Tcp(_) => cfg,
        Arm::H3 => cfg
            .over(Transports::H3, &load)
            .map_err(|e| crate::Error::empty("seed003-table2", e.to_string()))?,
    })
}

/// An equivalent command line of a cell.
fn command_line(p: &Plan, rtt: u64, arm: Arm, kind: PathKind) -> String {
    let v = arm.version();
    let (serve_h3, probe_h3) = match arm {
        Arm::Tcp(_) => ("", ""),
        Arm::H3 => (" --tickets off --max-early-data 16384 --h3", " --h3"),
    };
    let certs = format!(
        "tlslab certs --key rsa2048{} --out certs",
        match kind {
            PathKind::Relay => "",
            PathKind::Packet => " --san 10.201.0.1",
        }
    );
    let probe = |target: &str, sni: &str| {
        format!(
            "tlslab probe {target}{}{probe_h3} --tls {} --sni {sni} --cacert certs/{} \
             --interval 1s --rounds {} --db table2.sqlite",
            crate::lab::PATH,
            v.short(),
            pki::CA_CERT_FILE,
            p.samples
        )
    };
    let serve = |listen: &str| {
        format!(
            "tlslab serve --cert certs/{} --key-file certs/{} --listen {listen} --threads 1 --tls \
             {}{serve_h3}",
            pki::CHAIN_FILE,
            pki::KEY_FILE,
            v.short()
        )
    };
    match kind {
        PathKind::Relay => format!(
            "{certs} && {} & tlslab relay --listen 127.0.0.1:9443 --upstream 127.0.0.1:8443 \
             --delay {}ms & {} && tlslab probe report --db table2.sqlite",
            serve("127.0.0.1:8443"),
            rtt / 2,
            probe("https://127.0.0.1:9443", "localhost")
        ),
        PathKind::Packet => format!(
            "{certs} && sudo tlslab path --delay {}ms --cc reno -- {} ::: {} && tlslab probe \
             report --db table2.sqlite",
            rtt / 2,
            serve("10.201.0.1:8443"),
            probe("https://10.201.0.1:8443", "10.201.0.1")
        ),
    }
}

/// The document's cell of one probe run, and its engine report.
#[allow(clippy::too_many_arguments)]
fn cell(
    s: &mut Session,
    p: &Plan,
    id: &str,
    point: String,
    rtt: u64,
    arm: Arm,
    kind: PathKind,
    started: u64,
    samples: &[Sample],
    stopped: Stopped,
) -> Result<Cell, StudyError> {
    let report = tlslab_probe::report::build(samples, None, None);
    let errors = samples.iter().filter(|x| x.error.is_some()).count() as u64;
    let Some(t) = report
        .targets
        .first()
        .filter(|t| t.table2.ssl_new_ms.is_some())
    else {
        return Err(StudyError::Run(crate::Error::empty(
            id,
            format!(
                "{errors} of {} probes failed: {:?}",
                p.samples,
                report.targets.first().map(|t| &t.errors)
            ),
        )));
    };
    let mean = |f: fn(&Sample) -> Option<i64>| {
        let v: Vec<f64> = samples.iter().filter_map(f).map(|x| x as f64).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let us = |ms: Option<f64>| ms.map(|m| (m * 1000.0).round() as u64);
    let p50 = |ms: Option<f64>| us(ms).map(|v| vec![(50.0, v)]).unwrap_or_default();
    let v = arm.version();
    let mut factors = BTreeMap::from([
        ("rtt_ms".to_string(), rtt.to_string()),
        ("version".to_string(), v.short().to_string()),
        ("path".to_string(), kind.name().to_string()),
    ]);
    if arm == Arm::H3 {
        factors.insert("transport".into(), "h3".into());
    }
    let cell = Cell {
        id: id.to_string(),
        point,
        factors,
        repeat: 1,
        order: 0,
        command_line: command_line(p, rtt, arm, kind),
        started_unix_ms: started,
        metrics: CellMetrics {
            window_s: samples.len() as f64,
            requests: samples.iter().filter(|x| x.get_us.is_some()).count() as u64,
            errors,
            latency_us: p50(t.table2.get_ms),
            handshake_full_us: p50(t.table2.ssl_new_ms),
            handshake_resumed_us: p50(t.table2.ssl_cached_ms),
            connect_p50_us: us(t.table2.tcp_ms),
            // Over HTTP/3: the resumed connection's first packet to its
            // 0-RTT GET's first byte.
            ttfb_p50_us: us(t.table2.zero_rtt_first_byte_ms),
            full_round_trips: mean(|x| x.full_handshake_round_trips),
            resumed_round_trips: mean(|x| x.resumed_handshake_round_trips),
            reuse_achieved: t.resumption_accepted as f64 / t.resumption_offered.max(1) as f64,
            version: Some(v.short().to_string()),
            ..CellMetrics::default()
        },
        load: None,
    };
    let (relay, packet_path) = match stopped {
        Stopped::Relay(stats) => (
            Some(RelayCounts {
                bytes_down: stats.bytes_down,
                bytes_up: stats.bytes_up,
                connections: stats.connections,
            }),
            None,
        ),
        Stopped::Packet(r) => (None, Some(json(&r))),
    };
    let engine = s
        .doc
        .engine_report
        .get_or_insert_with(|| EngineReport::Probe(ProbeCells::default()));
    if let EngineReport::Probe(map) = engine {
        let entry = ProbeCell {
            packet_path,
            relay,
            target: json(t),
        };
        map.probe.insert(id.to_string(), entry);
    }
    Ok(cell)
}

/// Whether a cell probed HTTP/3 over QUIC.
fn is_h3(c: &Cell) -> bool {
    c.factors.get("transport").is_some_and(|t| t == "h3")
}

/// Table 2's figures for one cell: T, Snc, Sc, H (ms) and the savings.
/// Over HTTP/3 T is 0: there is no connect, the handshake's first flight
/// opens the connection.
fn today(c: &Cell) -> Option<(f64, f64, f64, f64)> {
    let m = &c.metrics;
    let ms = |v: Option<u64>| v.map(|x| x as f64 / 1000.0);
    Some((
        ms(m.connect_p50_us).or(is_h3(c).then_some(0.0))?,
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
        let kind = c.factors.get("path").map_or("relay", String::as_str);
        let h3 = is_h3(c);
        let over = if h3 {
            "HTTP/3 over QUIC (TLS 1.3)".to_string()
        } else {
            format!("TLS {v}")
        };
        let label = format!("RTT {rtt} ms, {over}, path {kind} (paper: {host}, TCP {pt} ms)");
        let measured = if h3 {
            "client-observed by the probe over HTTP/3 across the packet-level path (tlslab \
             path, QUIC's datagrams between two namespaces), median over the cell's probes"
        } else if kind == "packet" {
            "client-observed by the probe across the packet-level path (tlslab path, the \
             kernel's TCP between two namespaces), median over the cell's probes"
        } else {
            "client-observed by the probe through tlslab relay, median over the cell's probes"
        };
        if !h3 {
            out.push(compare(
                &format!("TCP connect (T), {label}"),
                &format!("{pt} ms"),
                "seed 003, Table 2 (T)",
                Some(t),
                "ms",
                measured,
                vec![c.id.clone()],
                if kind == "packet" {
                    "a real TCP connect takes one round trip (SYN, SYN-ACK): trust this column \
                 from the packet path"
                } else {
                    "the relay accepts the TCP connection on loopback and delays only data, so T \
                 is local (about 0.2 ms), not a round trip: do not trust this column from the \
                 relay; its Snc, Sc and H are right"
                },
            ));
        }
        let hs_reason = if h3 {
            "QUIC's full handshake takes one round trip with no connect before it: its first \
             flight carries the ClientHello, so the paper's T and Snc (three round trips in \
             1998) shrink to one"
        } else if v == "1.2" {
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
            if h3 {
                "a QUIC resumption takes one round trip, as TLS 1.3's does, with no connect \
                 before it; its GET can leave in 0-RTT beside it (the row below)"
            } else {
                "a resumption takes one round trip then and now; today's key schedule costs \
                 microseconds where SSLeay on a 100 MHz Pentium took about 10 ms"
            },
        ));
        if let Some(zero) = c.metrics.ttfb_p50_us.filter(|_| h3) {
            out.push(compare(
                &format!(
                    "cached connection to the response's first byte (0-RTT GET, from the \
                     first packet), {label}"
                ),
                &format!("{pc} ms (C = T + Sc + H, to the last byte)"),
                "seed 003, Table 2 (C)",
                Some(zero as f64 / 1000.0),
                "ms",
                measured,
                vec![c.id.clone()],
                "with 0-RTT the GET rides the resumed connection's first flight: the whole \
                 cached connection, connect, handshake and request, costs one round trip, \
                 where the paper's C paid a connect, a cached handshake and a GET in turn",
            ));
        }
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
            if h3 {
                "from the medians above: W = Snc + H, C = Sc + H (no connect over QUIC; the \
                 GET the 1-RTT one)"
            } else if kind == "packet" {
                "from the medians above: W = T + Snc + H, C = T + Sc + H (T a real connect)"
            } else {
                "from the medians above: W = T + Snc + H, C = T + Sc + H (T local: W and C \
                 lack one RTT each, so the savings read high; trust the packet path's)"
            },
            vec![c.id.clone()],
            if h3 {
                "over QUIC both handshakes take one round trip, so caching saves the \
                 certificate and key-exchange computation; 0-RTT, not the cached handshake, \
                 is QUIC's saving (the row above)"
            } else if v == "1.2" {
                "caching still saves one of TLS 1.2's two handshake round trips"
            } else {
                "with TLS 1.3 both handshakes take one round trip, so caching saves only the \
                 certificate and key-exchange computation"
            },
        ));
    }
    out
}

/// A report of another crate as the document's JSON (plain counters and
/// floats: serializing cannot fail).
fn json(r: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(r).unwrap_or_default()
}
