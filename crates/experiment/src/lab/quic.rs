//! The lab's HTTP/3 cells: full, resumed, 0-RTT and keep-alive over QUIC,
//! each against the matching TCP+TLS 1.3 cell with the same certificate
//! (ECDSA P-256), the same key-exchange group (the one the TCP TLS 1.3
//! cells negotiated, the only one the QUIC load offers) and the same
//! provider and server.
//!
//! Full, resumed and keep-alive run on the ECDSA server that served the
//! TCP cells (stateless tickets), with its HTTP/3 listener. 0-RTT needs
//! stateful tickets, so it runs on a third server (ECDSA, tickets in the
//! session cache, `--max-early-data 16384`, HTTP/3 on), over TCP and
//! over QUIC. These cells are two thirds of the TCP cells' length, so
//! they add about a quarter to the lab's time.

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_path::PathHandle;
use tlslab_report::{columns, header};

use super::{Cell, CellResult, Embedded, LabConfig, LabReport, Mode, PATH, find, progress_line};
use crate::Error;
use crate::rig;

/// The QUIC modes, in run order, with the TCP mode each is compared with.
pub(super) const MODES: [(Mode, Mode); 4] = [
    (Mode::QuicFull, Mode::TlsFull),
    (Mode::QuicResumed, Mode::TlsResumed),
    (Mode::QuicKeepAlive, Mode::TlsKeepAlive),
    (Mode::QuicZeroRtt, Mode::TlsZeroRtt),
];

pub use tlslab_schema::lab::QuicRatio;

/// The window of the QUIC cells and of the TCP 0-RTT cell: two thirds of
/// the TCP cells'.
pub(super) fn cell(tcp: Duration) -> Duration {
    tcp * 2 / 3
}

/// Runs the TCP 0-RTT cell and the QUIC cells on `ecdsa` (the TCP cells'
/// server) and `early` (0-RTT on), with the group `tcp` cells negotiated.
pub(super) fn run_cells(
    cfg: &LabConfig,
    [ecdsa, early]: [&Embedded; 2],
    tcp: &[CellResult],
    path: Option<&PathHandle>,
    progress: &mut impl FnMut(&str),
) -> Result<Vec<CellResult>, Error> {
    let key = KeyType::EcdsaP256.name();
    let group = find(tcp, Mode::TlsFull, Some(Version::Tls13), Some(key))
        .and_then(|c| c.group.clone())
        .filter(|g| !g.is_empty());
    let window = cell(cfg.cell);
    let host = rig::server_host(path);
    let url = |addr: Option<std::net::SocketAddr>| {
        addr.map(|a| format!("https://{host}:{}{PATH}", a.port()))
            .ok_or_else(|| {
                Error::Cluster("the lab's server has no HTTPS or HTTP/3 listener".into())
            })
    };
    let mut out = Vec::new();
    let mut one = |emb: &Embedded, url: &str, mode: Mode| -> Result<(), Error> {
        let mut c = Cell::new(url, mode, Some(Version::Tls13), window);
        c.group.clone_from(&group);
        let r = super::run_cell(cfg, emb, &c, path)?;
        progress(&progress_line(&r));
        out.push(r);
        Ok(())
    };
    one(early, &url(early.server.https_addr())?, Mode::TlsZeroRtt)?;
    let h3 = url(ecdsa.server.h3_addr())?;
    for (mode, _) in &MODES[..3] {
        one(ecdsa, &h3, *mode)?;
    }
    one(early, &url(early.server.h3_addr())?, Mode::QuicZeroRtt)?;
    Ok(out)
}

/// The QUIC/TCP ratios of every QUIC cell whose TCP match ran.
pub(super) fn ratios(cells: &[CellResult]) -> Vec<QuicRatio> {
    let key = KeyType::EcdsaP256.name();
    MODES
        .iter()
        .filter_map(|&(q, t)| {
            let quic = find(cells, q, Some(Version::Tls13), Some(key))?;
            let tcp = find(cells, t, Some(Version::Tls13), Some(key))?;
            Some(QuicRatio {
                mode: q,
                tcp_mode: t,
                key: key.to_string(),
                group: quic.group.clone(),
                quic_cpu_us_per_request: quic.server_cpu_us_per_request,
                tcp_cpu_us_per_request: tcp.server_cpu_us_per_request,
                cpu_quic_over_tcp: quic.server_cpu_us_per_request / tcp.server_cpu_us_per_request,
                requests_per_s_quic_over_tcp: quic.requests_per_s / tcp.requests_per_s,
            })
        })
        .collect()
}

/// The QUIC section of the lab's table.
pub(super) fn render(r: &LabReport, s: &mut String) {
    use std::fmt::Write;
    let Some(first) = r.quic_ratios.first() else {
        return;
    };
    let _ = writeln!(
        s,
        "\nHTTP/3 over QUIC against TCP+TLS 1.3: {} certificate, group {}, the same server, \
         provider and rustls configuration; {:.1} s per cell.",
        first.key,
        first.group.as_deref().unwrap_or("rustls's default"),
        r.quic_cell_s
    );
    let mut rows = vec![header(
        "pattern|QUIC CPU/req|TCP CPU/req|CPU QUIC/TCP|req/s QUIC/TCP|handshakes server/client",
    )];
    rows.extend(r.quic_ratios.iter().map(|q| {
        let quic = find(&r.cells, q.mode, Some(Version::Tls13), Some(&q.key));
        let counts = quic
            .and_then(|c| Some((c.server_handshakes?, c.client_handshakes?)))
            .map_or("-".to_string(), |(s, c)| {
                format!(
                    "{}/{} full, {}/{} resumed, {}/{} 0-RTT",
                    s.full, c.full, s.resumed, c.resumed, s.zero_rtt, c.zero_rtt
                )
            });
        vec![
            q.mode.label().trim_start_matches("QUIC ").to_string(),
            format!("{:.1} µs", q.quic_cpu_us_per_request),
            format!("{:.1} µs", q.tcp_cpu_us_per_request),
            format!("{:.2}", q.cpu_quic_over_tcp),
            format!("{:.2}", q.requests_per_s_quic_over_tcp),
            counts,
        ]
    }));
    s.push_str(&columns("", &[-16, 13, 12, 13, 15, -1], &rows));
    let _ = writeln!(
        s,
        "CPU/req is server-observed (the server's one worker: TCP, TLS and HTTP/1.1 against \
         QUIC, TLS and HTTP/3 in user space); handshake counts are server-observed and \
         client-observed over the same window (they may differ by the connections in flight at \
         its edges). 0-RTT runs on a server with stateful tickets (rustls accepts early data \
         only then); both answer the 0-RTT request in 0.5-RTT data, before the client's Finished."
    );
}
