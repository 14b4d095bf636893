//! `tlslab lab`: what TLS costs on this machine.
//!
//! One embedded server per certificate type (ECDSA P-256 and RSA-2048) runs
//! on loopback with one worker pinned to one CPU; the load engine runs with
//! one thread pinned to another CPU. Each cell is a short closed-loop run:
//! plain HTTP (new connection per request, and keep-alive), then for each
//! TLS version and key type: every request a full handshake, every request
//! a resumed handshake, and keep-alive. Requests/s are client-observed over
//! each cell's window; CPU per request is server-observed (the server
//! worker's CPU time over the whole run divided by the requests it served).
//!
//! With `--explain`, `explain` splits each cell's CPU per request, for
//! the server and the client, into crypto, kernel time and the remainder,
//! with syscalls, writes and allocations per request.
//!
//! `quic` adds HTTP/3 cells beside TCP: full, resumed, 0-RTT and
//! keep-alive over QUIC on the same servers, each against the matching
//! TCP+TLS 1.3 cell (same key, group and provider).

mod explain;
mod quic;

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_path::PathHandle;
use tlslab_report::study::most_common;
use tlslab_report::{columns, header};
use tlslab_server::{Content, Server};

use crate::Error;
use crate::pin::Placement;
use crate::rig::{self, Handshakes, Rig, Transport};

pub use quic::QuicRatio;

/// The path every cell requests: a 4 KiB file of the SPECweb96 set.
pub const PATH: &str = "/specweb96/class1_3";

/// What the lab runs.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// Measurement time per cell.
    pub cell: Duration,
    /// Concurrent clients per cell.
    pub clients: usize,
    /// Whether this is the short run (recorded in the output).
    pub quick: bool,
    /// Run every cell across a packet-level WAN path (`tlslab path`):
    /// the server in its namespace, the load in the other. Needs root.
    pub path: Option<tlslab_path::PathConfig>,
    /// Split each cell's CPU per request into crypto, kernel time and the
    /// remainder, with syscalls, writes and allocations per request, for
    /// the server and the client (`--explain`).
    pub explain: bool,
}

pub use tlslab_schema::lab::{CellResult, Mode, Ratios};

/// The lab's results, with the packet-level path's own report.
pub type LabReport = tlslab_schema::lab::LabReport<tlslab_path::PathReport>;

/// How a cell's mode runs.
trait Pattern {
    /// Requests per connection (0: kept alive), the share resumed, and
    /// whether the first request goes in 0-RTT.
    fn pattern(self) -> (u32, f64, bool);
    /// The transport the mode runs over.
    fn transport(self) -> Transport;
}

impl Pattern for Mode {
    fn pattern(self) -> (u32, f64, bool) {
        match self {
            Mode::PlainNewConn | Mode::TlsFull | Mode::QuicFull => (1, 0.0, false),
            Mode::TlsResumed | Mode::QuicResumed => (1, 1.0, false),
            Mode::TlsZeroRtt | Mode::QuicZeroRtt => (1, 1.0, true),
            Mode::PlainKeepAlive | Mode::TlsKeepAlive | Mode::QuicKeepAlive => (0, 0.0, false),
        }
    }

    fn transport(self) -> Transport {
        match self {
            Mode::QuicFull | Mode::QuicResumed | Mode::QuicZeroRtt | Mode::QuicKeepAlive => {
                Transport::Quic
            }
            _ => Transport::Tcp,
        }
    }
}

struct Embedded {
    key: KeyType,
    server: Server,
    rig: Rig,
}

/// The listeners and resumption of an embedded server.
#[derive(Clone, Copy)]
struct Listeners {
    /// A plain-HTTP listener beside the TLS one.
    http: bool,
    /// [`Transport::Quic`]: an HTTP/3 listener on the TLS one's port too.
    transport: Transport,
    /// Stateful tickets and 0-RTT (up to 16 KiB) instead of stateless
    /// tickets.
    early: bool,
}

fn start_server(
    key: KeyType,
    placement: &Placement,
    l: Listeners,
    path: Option<&PathHandle>,
) -> Result<Embedded, Error> {
    // The server's runtime threads are spawned on the server's end, so
    // they live in the path's server namespace too.
    rig::on_server(path, move || {
        let rig = Rig::generate(key, &rig::server_sans(path), placement.clone())?;
        let mut c = rig.server(Content::Specweb96);
        // On the path, the listeners are on the server namespace's address.
        let addr = rig::server_bind(path);
        c.https = Some(addr);
        c.http = l.http.then_some(addr);
        if l.early {
            rig::zero_rtt(&mut c);
        }
        let server = l.transport.start(c)?;
        Ok(Embedded { key, server, rig })
    })
}

/// Runs the lab. `progress` receives one line per cell as it finishes.
pub fn run(cfg: &LabConfig, mut progress: impl FnMut(&str)) -> Result<LabReport, Error> {
    // Before any runtime starts: threads are probed as they register.
    let explain = cfg.explain.then(explain::enable);
    let placement = Placement::split();
    let path = cfg
        .path
        .as_ref()
        .map(tlslab_path::Path::start)
        .transpose()?;
    let handle = path.as_ref().map(|p| p.handle());
    if let (Some(c), Some(h)) = (&cfg.path, &handle) {
        rig::announce_path("tlslab lab", "server", c, h, &mut progress);
    }
    let quic_cell = quic::cell(cfg.cell);
    progress(&format!(
        "tlslab lab: {} cells of {:.1} s each, then {} of {:.1} s (0-RTT over TCP, and \
         HTTP/3 over QUIC), {} clients; {}",
        2 + 12,
        cfg.cell.as_secs_f64(),
        quic::MODES.len() + 1,
        quic_cell.as_secs_f64(),
        cfg.clients,
        placement.describe()
    ));
    let listeners = Listeners {
        http: true,
        transport: Transport::Quic,
        early: false,
    };
    let start = |key, l| start_server(key, &placement, l, handle.as_ref());
    let ecdsa = start(KeyType::EcdsaP256, listeners)?;
    let rsa = start(
        KeyType::Rsa2048,
        Listeners {
            http: false,
            transport: Transport::Tcp,
            ..listeners
        },
    )?;
    let early = start(
        KeyType::EcdsaP256,
        Listeners {
            http: false,
            early: true,
            ..listeners
        },
    )?;

    let mut cells = Vec::new();
    let http = ecdsa
        .server
        .http_addr()
        .map(|a| format!("http://{a}{PATH}"));
    if let Some(url) = &http {
        for mode in [Mode::PlainNewConn, Mode::PlainKeepAlive] {
            let cell = Cell::new(url, mode, None, cfg.cell);
            let c = run_cell(cfg, &ecdsa, &cell, handle.as_ref())?;
            progress(&progress_line(&c));
            cells.push(c);
        }
    }
    for version in [Version::Tls12, Version::Tls13] {
        for emb in [&ecdsa, &rsa] {
            let Some(addr) = emb.server.https_addr() else {
                continue;
            };
            let host = rig::server_host(handle.as_ref());
            let url = format!("https://{host}:{}{PATH}", addr.port());
            for mode in [Mode::TlsFull, Mode::TlsResumed, Mode::TlsKeepAlive] {
                let cell = Cell::new(&url, mode, Some(version), cfg.cell);
                let c = run_cell(cfg, emb, &cell, handle.as_ref())?;
                progress(&progress_line(&c));
                cells.push(c);
            }
        }
    }
    let quic_cells = quic::run_cells(
        cfg,
        [&ecdsa, &early],
        &cells,
        handle.as_ref(),
        &mut progress,
    );
    ecdsa.server.shutdown();
    rsa.server.shutdown();
    early.server.shutdown();
    cells.extend(quic_cells?);
    let wan_path = path.map(tlslab_path::Path::stop).transpose()?;

    let ratios = ratios(&cells);
    let quic_ratios = quic::ratios(&cells);
    Ok(LabReport {
        schema_version: 2,
        quick: cfg.quick,
        placement: placement.to_schema(),
        clients: cfg.clients,
        cell_s: cfg.cell.as_secs_f64(),
        path: PATH.into(),
        cells,
        ratios,
        quic_cell_s: quic_cell.as_secs_f64(),
        quic_ratios,
        wan_path,
        explain,
    })
}

fn progress_line(c: &CellResult) -> String {
    format!(
        "  {:<24} {:<8} {:<11} {:>9.0} req/s",
        c.mode.label(),
        c.version.as_deref().unwrap_or("-"),
        c.key.as_deref().unwrap_or("-"),
        c.requests_per_s
    )
}

/// What one cell runs.
struct Cell<'a> {
    url: &'a str,
    mode: Mode,
    version: Option<Version>,
    window: Duration,
    /// The one key-exchange group the load offers (default: rustls's).
    group: Option<String>,
}

impl<'a> Cell<'a> {
    fn new(url: &'a str, mode: Mode, version: Option<Version>, window: Duration) -> Self {
        Cell {
            url,
            mode,
            version,
            window,
            group: None,
        }
    }
}

fn run_cell(
    cfg: &LabConfig,
    emb: &Embedded,
    cell: &Cell<'_>,
    path: Option<&PathHandle>,
) -> Result<CellResult, Error> {
    let (mode, version) = (cell.mode, cell.version);
    let (k, reuse, early_data) = mode.pattern();
    let versions = version.map_or_else(|| vec![Version::Tls12, Version::Tls13], |v| vec![v]);
    let mut load = emb
        .rig
        .cell_load(cell.url, cell.window, cfg.clients, versions, k, reuse)?;
    load.early_data = early_data;
    if let Some(g) = &cell.group {
        load.algorithms.groups = Some(vec![g.clone()]);
    }
    let transport = mode.transport();
    let label = format!(
        "{} {} {}",
        mode.label(),
        version.map_or("", |v| v.name()),
        if version.is_some() {
            emb.key.name()
        } else {
            ""
        }
    );
    // The load engine's runtime is built on the client's end, so its
    // threads and sockets live in the path's client namespace.
    let m = rig::on_client(path, || {
        rig::measure_over(&emb.server, &load, transport, label.trim())
    })?;
    let costs = if cfg.explain {
        explain::cell_costs(&m)
    } else {
        None
    };
    let report = m.report;
    let hs = match mode {
        Mode::TlsFull | Mode::QuicFull => report.latency.handshake_full.p50_us,
        Mode::TlsResumed | Mode::TlsZeroRtt | Mode::QuicResumed | Mode::QuicZeroRtt => {
            report.latency.handshake_resumed.p50_us
        }
        _ => None,
    };
    let (group, server_hs) = match transport {
        Transport::Quic => (cell.group.clone(), m.window.quic),
        Transport::Tcp => (most_common(&report.handshake.groups), m.window.tcp),
    };
    let tls = version.is_some();
    Ok(CellResult {
        mode,
        transport: transport.name().into(),
        version: version.map(|v| v.name().into()),
        key: version.map(|_| emb.key.name().to_string()),
        requests_per_s: report.throughput.requests_per_s,
        window_s: report.window.measured_s,
        requests: report.requests.completed,
        server_cpu_us_per_request: m.server_cpu_us_per_request,
        handshake_p50_us: hs.map(|v| v as f64),
        reuse_achieved: report.reuse.achieved,
        client_busy: report.client_cpu.busy_fraction,
        client_saturated: report.client_cpu.saturated,
        errors: report.requests.errors,
        // `load --h3` does not record the suite.
        suite: match transport {
            Transport::Quic => None,
            Transport::Tcp => most_common(&report.handshake.suites),
        },
        group,
        server_handshakes: tls.then_some(server_hs),
        client_handshakes: tls.then(|| Handshakes::of_report(&report)),
        costs,
    })
}

fn find<'a>(
    cells: &'a [CellResult],
    mode: Mode,
    version: Option<Version>,
    key: Option<&str>,
) -> Option<&'a CellResult> {
    cells.iter().find(|c| {
        c.mode == mode
            && c.version.as_deref() == version.map(Version::name)
            && c.key.as_deref() == key
    })
}

fn ratios(cells: &[CellResult]) -> Vec<Ratios> {
    let Some(plain) = find(cells, Mode::PlainNewConn, None, None) else {
        return vec![];
    };
    let mut out = Vec::new();
    for version in [Version::Tls12, Version::Tls13] {
        for key in [KeyType::EcdsaP256.name(), KeyType::Rsa2048.name()] {
            let (Some(full), Some(res), Some(ka)) = (
                find(cells, Mode::TlsFull, Some(version), Some(key)),
                find(cells, Mode::TlsResumed, Some(version), Some(key)),
                find(cells, Mode::TlsKeepAlive, Some(version), Some(key)),
            ) else {
                continue;
            };
            out.push(Ratios {
                version: version.name().into(),
                key: key.to_string(),
                full_over_plain: full.requests_per_s / plain.requests_per_s,
                resumed_over_full: res.requests_per_s / full.requests_per_s,
                keepalive_over_full: ka.requests_per_s / full.requests_per_s,
                cpu_full_over_plain: full.server_cpu_us_per_request
                    / plain.server_cpu_us_per_request,
                cpu_resumed_over_full: res.server_cpu_us_per_request
                    / full.server_cpu_us_per_request,
            });
        }
    }
    out
}

/// The text of a lab report.
pub trait LabText {
    /// The human table.
    fn render(&self) -> String;
}

impl LabText for LabReport {
    fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nWhat TLS costs on this machine{}",
            if self.quick { " (quick run)" } else { "" }
        );
        let _ = writeln!(
            s,
            "GET {} (4096 B), {} closed-loop clients, {:.1} s per cell; {}.",
            self.path,
            self.clients,
            self.cell_s,
            self.placement.describe()
        );
        let _ = writeln!(
            s,
            "req/s and handshake p50 are client-observed over each cell's window; \
             server CPU/req is server-observed (worker CPU time / requests served)."
        );
        let _ = writeln!(s);
        let mut rows = vec![header(
            "cell|version|key|req/s|server CPU/req|hs p50|reused|client busy",
        )];
        rows.extend(self.cells.iter().map(|c| {
            vec![
                c.mode.label().into(),
                c.version.as_deref().unwrap_or("-").into(),
                c.key.as_deref().unwrap_or("-").into(),
                format!("{:.0}", c.requests_per_s),
                format!("{:.1} µs", c.server_cpu_us_per_request),
                c.handshake_p50_us
                    .map_or("-".to_string(), |v| format!("{v:.0} µs")),
                format!("{:.0}%", c.reuse_achieved * 100.0),
                format!("{:.0}%", c.client_busy * 100.0),
                if c.client_saturated { " !" } else { "" }.into(),
            ]
        }));
        s.push_str(&columns("", &[-24, -8, -11, 10, 15, 10, 8, 12, 0], &rows));
        let mut negotiated: Vec<String> = Vec::new();
        for c in &self.cells {
            if let (Some(v), Some(suite), Some(group)) = (&c.version, &c.suite, &c.group) {
                let line = format!("{v}: {suite} with {group}");
                if !negotiated.contains(&line) {
                    negotiated.push(line);
                }
            }
        }
        if !negotiated.is_empty() {
            let _ = writeln!(s, "negotiated (rustls defaults): {}", negotiated.join("; "));
        }
        if self.cells.iter().any(|c| c.client_saturated) {
            let _ = writeln!(
                s,
                "! the client was ≥90 % busy in this cell: its req/s measures the client; \
                 the server CPU/req column still measures the server."
            );
        }
        let _ = writeln!(s);
        let mut rows = vec![header(
            "version|key|full/plain|resumed/full|keep-alive/full|CPU full/plain|CPU resumed/full",
        )];
        rows.extend(self.ratios.iter().map(|r| {
            let mut row = vec![r.version.clone(), r.key.clone()];
            row.extend(
                [
                    r.full_over_plain,
                    r.resumed_over_full,
                    r.keepalive_over_full,
                    r.cpu_full_over_plain,
                    r.cpu_resumed_over_full,
                ]
                .map(|x| format!("{x:.2}")),
            );
            row
        }));
        s.push_str(&columns("", &[-8, -11, 12, 14, 16, 15, 17], &rows));
        let _ = writeln!(
            s,
            "ratios of req/s: below 1 means the first mode is slower. CPU ratios: how many times \
             the server CPU per request of the first mode is the second's."
        );
        quic::render(self, &mut s);
        explain::render(self, &mut s);
        if let Some(p) = &self.wan_path {
            let _ = writeln!(
                s,
                "\nAcross a packet-level WAN path (tlslab path): req/s are bounded by the round \
                 trips; server CPU/req still measures the server.\n{p}"
            );
        }
        s
    }
}
