//! `quic-vs-tcp` (issue 23): what TLS costs over HTTP/3 on QUIC against
//! TCP+TLS 1.3, with the same certificate (ECDSA P-256), key-exchange
//! group (x25519), provider (rustls on aws-lc-rs, metered) and server.
//!
//! - Server CPU per request (server-observed) with a new connection per
//!   request at 0, 50 and 100 % reuse, and per keep-alive request, over
//!   TCP and over QUIC, on loopback.
//! - Time to first byte of full, resumed and 0-RTT requests against RTT,
//!   across the packet-level path (`tlslab path`, delay RTT/2 each way;
//!   the server in one network namespace, the load in another), beside
//!   the protocol arithmetic. It needs root; without it the study says so
//!   in its output and its notes, and runs the CPU part only.
//!
//! One server for the whole study: stateful tickets in its session cache
//! and 0-RTT on (rustls accepts early data only with stateful tickets), an
//! HTTP/3 listener on its TLS port; so resumption works the same way over
//! both transports.

use std::collections::BTreeMap;
use std::time::Duration;

use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_path::PathHandle;
use tlslab_report::study::{Cell, CellMetrics, Comparison, Verbatim, fmt_level};
use tlslab_server::{Content, Server};

use super::About;
use super::session::{Session, StudyError, factor_map, flag_duration, now_ms};
use crate::pin::Placement;
use crate::rig::{self, Rig, Transport};
use tlslab_report::study::ChartKind;

mod analyse;

pub(crate) use analyse::{Kind, analyse, arithmetic_curves};

/// `quic-vs-tcp`.
pub(super) struct QuicVsTcp;

impl super::Study for QuicVsTcp {
    fn about(&self) -> About {
        About {
            name: "quic-vs-tcp",
            title: "HTTP/3 over QUIC against TCP+TLS 1.3: server CPU per full, resumed and keep-alive request from 0 to 100 % reuse; time to first byte of full, resumed and 0-RTT requests against RTT (root)",
            seed: "issue 23 (protocol arithmetic, no paper)",
            engine: "load --h3",
            duration: "quick ~45 s, full ~4 min",
        }
    }
    fn crosses_packet_path(&self) -> bool {
        true
    }
    fn plan(&self, quick: bool) -> (serde_json::Value, usize) {
        let p = plan(quick);
        (p.to_json(), p.units())
    }
    fn run(&self, s: &mut Session) -> Result<(), StudyError> {
        let p = plan(s.quick);
        s.say(&format!(
            "quic-vs-tcp: server CPU per request, TCP+TLS 1.3 and HTTP/3 over QUIC ({}, {GROUP}), \
             {} cells x {} repeat(s) on loopback; {}",
            KEY.name(),
            p.cpu.len(),
            p.repeats,
            s.placement.describe()
        ));
        run_points(s, &p.cpu, p.repeats, None)?;
        match ttfb_blocked() {
            Some(why) => {
                s.say(&format!("quic-vs-tcp: {why}"));
                s.note(why);
            }
            None => {
                for &rtt in &p.rtts_ms {
                    let points: Vec<Point> = p
                        .ttfb
                        .iter()
                        .filter(|x| x.rtt_ms == Some(rtt))
                        .cloned()
                        .collect();
                    if points.iter().all(|x| s.has(&format!("{}-r1", x.point))) {
                        continue;
                    }
                    s.say(&format!(
                        "quic-vs-tcp: time to first byte across the packet-level path at {rtt} ms \
                         RTT (delay {} ms each way), {} cells",
                        rtt / 2,
                        points.len()
                    ));
                    let mut cfg: tlslab_path::PathConfig = format!("delay={}ms", rtt / 2)
                        .parse()
                        .map_err(crate::Error::Path)?;
                    // One path carries this RTT's cells: one capture, named by it.
                    let name = format!("ttfb-rtt{rtt}ms");
                    cfg.pcap.file = s.capture(&name);
                    let path = tlslab_path::Path::start(&cfg).map_err(crate::Error::from)?;
                    let handle = path.handle();
                    let r = run_points(s, &points, 1, Some(&handle));
                    let stopped = path.stop().map_err(crate::Error::from);
                    r?;
                    s.say_capture(&name, &stopped?);
                }
            }
        }
        Ok(())
    }
    fn compare(&self, s: &mut Session) -> Vec<Comparison> {
        let p = plan(s.quick);
        let (comparisons, notes) = analyse(&s.doc, &p);
        s.doc.curves = arithmetic_curves(&s.doc, &p);
        for n in notes {
            s.note(n);
        }
        comparisons
    }
    fn charts(&self) -> &'static [ChartKind] {
        &[
            ChartKind::LatencyThroughput,
            ChartKind::Reuse,
            ChartKind::HandshakePercentiles,
            ChartKind::QuicVsTcp,
        ]
    }
}

/// The certificate of every cell.
const KEY: KeyType = KeyType::EcdsaP256;
/// The one key-exchange group both transports offer.
pub(crate) const GROUP: &str = "x25519";
/// What every cell requests: 100 bytes, so the first byte and the last
/// arrive in one packet.
const TARGET: &str = "/bytes/100";

/// One matrix point.
#[derive(Clone, Debug)]
pub(crate) struct Point {
    pub point: String,
    pub transport: Transport,
    pub reuse: f64,
    /// Requests per connection; 0 keeps connections alive.
    pub k: u32,
    pub early: bool,
    /// Through the path at this RTT, or on loopback.
    pub rtt_ms: Option<u64>,
    pub clients: usize,
    pub cell: Duration,
    pub factors: BTreeMap<String, String>,
}

impl Point {
    fn new(transport: Transport, reuse: f64, k: u32, early: bool, cell: Duration) -> Point {
        let t = transport.name();
        let mut factors = factor_map([
            ("transport", t.to_string()),
            ("version", "1.3".to_string()),
            ("key", KEY.name().to_string()),
            ("group", GROUP.to_string()),
            ("requests_per_conn", k.to_string()),
        ]);
        let point = if k == 0 {
            format!("{t}-keepalive")
        } else {
            factors.insert("reuse".into(), fmt_level(reuse));
            format!("{t}-reuse{}", fmt_level(reuse))
        };
        Point {
            point,
            transport,
            reuse,
            k,
            early,
            rtt_ms: None,
            clients: 8,
            cell,
            factors,
        }
    }

    fn ttfb(transport: Transport, kind: Kind, rtt_ms: u64, cell: Duration) -> Point {
        let (reuse, early) = kind.pattern();
        let mut p = Point::new(transport, reuse, 1, early, cell);
        // No `reuse` factor: these cells are not points of the reuse sweep.
        p.factors.remove("reuse");
        p.factors.insert("kind".into(), kind.name().into());
        p.factors.insert("rtt_ms".into(), rtt_ms.to_string());
        p.point = format!("{}-{}-rtt{rtt_ms}", transport.name(), kind.name());
        p.rtt_ms = Some(rtt_ms);
        p.clients = 1;
        p
    }

    /// The warm-up: a fifth of the cell (at most 0.5 s), and at least four
    /// round trips at the cell's RTT, so every client holds a ticket when
    /// the window opens.
    fn warmup(&self) -> Duration {
        let base = (self.cell / 5).min(Duration::from_millis(500));
        match self.rtt_ms {
            Some(rtt) => base.max(Duration::from_millis(4 * rtt + 50)),
            None => base,
        }
    }
}

/// The study's plan.
pub(crate) struct Plan {
    pub cpu: Vec<Point>,
    pub ttfb: Vec<Point>,
    pub rtts_ms: Vec<u64>,
    pub repeats: u32,
}

pub(crate) fn plan(quick: bool) -> Plan {
    let cell = Duration::from_millis(if quick { 1000 } else { 3000 });
    let rtt_cell = Duration::from_millis(if quick { 1500 } else { 3000 });
    let rtts_ms: Vec<u64> = if quick {
        vec![50, 100]
    } else {
        vec![10, 25, 50, 100, 200]
    };
    let mut cpu = Vec::new();
    for t in [Transport::Tcp, Transport::Quic] {
        for r in [0.0, 0.5, 1.0] {
            cpu.push(Point::new(t, r, 1, false, cell));
        }
        cpu.push(Point::new(t, 0.0, 0, false, cell));
    }
    let mut ttfb = Vec::new();
    for &rtt in &rtts_ms {
        for t in [Transport::Tcp, Transport::Quic] {
            for kind in Kind::ALL {
                ttfb.push(Point::ttfb(t, kind, rtt, rtt_cell));
            }
        }
    }
    Plan {
        cpu,
        ttfb,
        rtts_ms,
        repeats: if quick { 1 } else { 3 },
    }
}

impl Plan {
    fn to_json(&self) -> serde_json::Value {
        let names = |v: &[Point]| v.iter().map(|p| p.point.clone()).collect::<Vec<_>>();
        serde_json::json!({
            "cpu_points": names(&self.cpu),
            "cpu_repeats": self.repeats,
            "cpu_cell_s": self.cpu.first().map_or(0.0, |p| p.cell.as_secs_f64()),
            "ttfb_points": names(&self.ttfb),
            "rtts_ms": self.rtts_ms,
            "ttfb_cell_s": self.ttfb.first().map_or(0.0, |p| p.cell.as_secs_f64()),
            "key": KEY.name(),
            "group": GROUP,
            "target": TARGET,
        })
    }

    fn units(&self) -> usize {
        self.cpu.len() * self.repeats as usize + self.ttfb.len()
    }
}

/// The study's server, and where it runs.
struct Embedded {
    server: Server,
    rig: Rig,
}

fn start(placement: &Placement, path: Option<&PathHandle>) -> Result<Embedded, StudyError> {
    Ok(rig::on_server(path, || {
        let rig = Rig::generate(KEY, &rig::server_sans(path), placement.clone())?;
        let mut c = rig.server(Content::Empty);
        c.https = Some(rig::server_bind(path));
        c.tls.versions = vec![Version::Tls13];
        rig::zero_rtt(&mut c);
        let server = Transport::Quic.start(c)?;
        Ok(Embedded { server, rig })
    })?)
}

/// Runs one cell of `p` against `emb`.
fn run_point(
    s: &Session,
    emb: &Embedded,
    p: &Point,
    repeat: u32,
    path: Option<&PathHandle>,
) -> Result<Cell, StudyError> {
    let id = format!("{}-r{repeat}", p.point);
    let addr = match p.transport {
        Transport::Tcp => emb.server.https_addr(),
        Transport::Quic => emb.server.h3_addr(),
    }
    .ok_or_else(|| StudyError::Usage("the study's server has no listener".into()))?;
    let url = format!("https://{}:{}{TARGET}", rig::server_host(path), addr.port());
    let mut load =
        emb.rig
            .cell_load(&url, p.cell, p.clients, vec![Version::Tls13], p.k, p.reuse)?;
    load.warmup = p.warmup();
    load.early_data = p.early;
    load.algorithms.groups = Some(vec![GROUP.to_string()]);
    let started = now_ms();
    let m = rig::on_client(path, || {
        rig::measure_over(&emb.server, &load, p.transport, &id)
    })?;
    let mut metrics = CellMetrics::from_load(&m.report);
    metrics.server_cpu_us_per_request = m.server_cpu_us_per_request;
    metrics.server_busy = m.server_busy;
    metrics.server_sign_us = m.server_sign.map(|(us, _)| us);
    if p.transport == Transport::Quic {
        // `load --h3` offers only GROUP, so every handshake used it.
        metrics.group = Some(GROUP.to_string());
    }
    Ok(Cell {
        id,
        point: p.point.clone(),
        factors: p.factors.clone(),
        repeat,
        order: 0,
        command_line: command_line(p, &load, &s.placement),
        started_unix_ms: started,
        metrics,
        load: Verbatim::new(m.report.clone()).ok(),
    })
}

/// Equivalent command lines: certificates, the server, the load (and the
/// path for the RTT cells).
fn command_line(p: &Point, load: &tlslab_load::LoadConfig, placement: &Placement) -> String {
    let taskset = Placement::taskset;
    let key = KEY.name();
    let path = p.rtt_ms.map_or(String::new(), |rtt| {
        format!(
            "(as root, across `tlslab path` with delay={}ms each way: the server in its server \
             namespace on its address, the load in its client namespace) ",
            rtt / 2
        )
    });
    format!(
        "{path}tlslab certs --key {key} --out certs-{key} && {}tlslab serve --cert \
         certs-{key}/{} --key-file certs-{key}/{} --listen 127.0.0.1:8443 --threads 1 --tls 1.3 \
         --tickets off --max-early-data 16384 --h3 & {}tlslab load \
         https://localhost:8443{TARGET} --cacert certs-{key}/{} --tls 1.3 --group {GROUP} -c {} \
         --threads 1 -d {} --warmup {} --requests-per-conn {} --reuse {}{}{}",
        taskset(&placement.server),
        pki::CHAIN_FILE,
        pki::KEY_FILE,
        taskset(&placement.client),
        pki::CA_CERT_FILE,
        p.clients,
        flag_duration(p.cell),
        flag_duration(load.warmup),
        p.k,
        fmt_level(p.reuse * 100.0),
        if p.early { " --early-data" } else { "" },
        if p.transport == Transport::Quic {
            " --h3 -m 1"
        } else {
            ""
        },
    )
}

/// Runs `points` (`repeats` rounds, interleaved) against one server,
/// skipping the cells a resumed document has.
fn run_points(
    s: &mut Session,
    points: &[Point],
    repeats: u32,
    path: Option<&PathHandle>,
) -> Result<(), StudyError> {
    let todo = |s: &Session| {
        (1..=repeats).any(|r| points.iter().any(|p| !s.has(&format!("{}-r{r}", p.point))))
    };
    if !todo(s) {
        return Ok(());
    }
    let emb = start(&s.placement, path)?;
    let mut run = || -> Result<(), StudyError> {
        for repeat in 1..=repeats {
            for p in points {
                if s.has(&format!("{}-r{repeat}", p.point)) {
                    continue;
                }
                let c = run_point(s, &emb, p, repeat, path)?;
                s.push(c)?;
            }
        }
        Ok(())
    };
    let r = run();
    emb.server.shutdown();
    r
}

/// Why the RTT part cannot run here, if it cannot.
fn ttfb_blocked() -> Option<String> {
    (!tlslab_path::privileged()).then(|| {
        "time to first byte against RTT: NOT MEASURED: the packet-level path (tlslab path) \
         builds network namespaces and needs root; run the study as root (sudo tlslab \
         experiment run quic-vs-tcp …) to measure it. The server-CPU part ran."
            .to_string()
    })
}
