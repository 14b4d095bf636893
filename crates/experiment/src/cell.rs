//! One experiment cell: an embedded server on loopback pinned to the server
//! CPU, a closed-loop load pinned to the client CPU, and the server-observed
//! CPU per request over the run. Shared by `lab` and `breakdown`.

use std::time::Duration;

use tlslab_crypto::meter::AblationSet;
use tlslab_crypto::pki::Generated;
use tlslab_crypto::provider::{Algorithms, Version};
use tlslab_load::{LoadConfig, ResumeWith, Target, Trust};
use tlslab_report::LoadReport;
use tlslab_server::{CertSource, Content, ServeConfig, Server, SessionCache, TlsSettings};

use crate::Error;
use crate::pin::Placement;

/// Which listeners an embedded server opens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Listeners {
    pub https: bool,
    pub http: bool,
}

/// Starts an embedded server: loopback, ephemeral ports, one worker pinned
/// to the placement's server CPU, a 100,000-session cache and tickets on.
pub(crate) fn start_server(
    generated: Generated,
    versions: Vec<Version>,
    content: Content,
    listeners: Listeners,
    ablation: AblationSet,
    placement: &Placement,
) -> Result<Server, Error> {
    start_server_with(
        generated,
        versions,
        content,
        listeners,
        ablation,
        placement,
        Vec::new(),
    )
}

/// [`start_server`] with RFC 8879 certificate compression.
pub(crate) fn start_server_with(
    generated: Generated,
    versions: Vec<Version>,
    content: Content,
    listeners: Listeners,
    ablation: AblationSet,
    placement: &Placement,
    cert_compression: Vec<tlslab_crypto::compress::CertCompression>,
) -> Result<Server, Error> {
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    start_server_on(
        loopback,
        generated,
        versions,
        content,
        listeners,
        ablation,
        placement,
        cert_compression,
    )
}

/// [`start_server_with`] with its listeners on `ip` (port 0) instead of
/// loopback: the server end of a `tlslab path` (called from a thread inside
/// the path's server namespace).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_server_on(
    ip: std::net::IpAddr,
    generated: Generated,
    versions: Vec<Version>,
    content: Content,
    listeners: Listeners,
    ablation: AblationSet,
    placement: &Placement,
    cert_compression: Vec<tlslab_crypto::compress::CertCompression>,
) -> Result<Server, Error> {
    let loopback = std::net::SocketAddr::new(ip, 0);
    Ok(Server::start(ServeConfig {
        https: listeners.https.then_some(loopback),
        http: listeners.http.then_some(loopback),
        metrics: None,
        content,
        tls: TlsSettings {
            versions,
            algorithms: Algorithms::default(),
            cert: CertSource::Generated(generated),
            session_cache: SessionCache::Memory {
                capacity: 100_000,
                ttl: Duration::from_secs(300),
            },
            tickets: true,
            max_early_data: 0,
            alpn: vec![b"http/1.1".to_vec()],
            ablation,
            remote_cache: None,
            ticket_keys: tlslab_server::TicketKeys::Local,
            cert_compression,
        },
        threads: 1,
        pin_cpus: (!placement.server.is_empty()).then(|| placement.server.clone()),
        handshake_timeout: Duration::from_secs(10),
        timeouts: Default::default(),
        max_connections: 10_000,
        allow_remote: false,
        access_log: None,
        admission: Default::default(),
    })?)
}

/// The load of one cell: `clients` closed-loop clients on one thread pinned
/// to the placement's client CPU for `cell` (after a warm-up of a fifth of
/// it, at most 0.5 s), `k` requests per connection and `reuse` resumed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cell_load(
    url: &str,
    cell: Duration,
    clients: usize,
    placement: &Placement,
    versions: Vec<Version>,
    roots: &rustls::RootCertStore,
    k: u32,
    reuse: f64,
) -> Result<LoadConfig, Error> {
    let mut load = LoadConfig::new(vec![Target::parse(url)?]);
    load.clients = clients;
    load.threads = 1;
    load.pin_cpus = (!placement.client.is_empty()).then(|| placement.client.clone());
    load.duration = Some(cell);
    load.requests = None;
    load.warmup = (cell / 5).min(Duration::from_millis(500));
    load.requests_per_conn = k;
    load.reuse = reuse;
    load.resume_with = ResumeWith::Auto;
    load.versions = versions;
    load.trust = Trust::Roots(roots.clone());
    load.timeout = Duration::from_secs(10);
    Ok(load)
}

/// What one cell measured.
pub(crate) struct Measured {
    /// The load engine's report (client-observed).
    pub report: LoadReport,
    /// The server's CPU time per request it served, µs (server-observed,
    /// over the whole run including warm-up).
    pub server_cpu_us_per_request: f64,
    /// The server's CPU time over the wall-clock time of the run, 0–1 per
    /// server thread (server-observed, same window).
    pub server_busy: f64,
    /// The server's crypto meter: mean time of one signature, µs, and the
    /// signatures made (one per full handshake), over the same run.
    pub server_sign: Option<(f64, u64)>,
}

/// Runs `load` against `server` and measures the server's CPU per request.
/// A cell in which nothing was served is an error naming `label`.
pub(crate) fn measure(server: &Server, load: &LoadConfig, label: &str) -> Result<Measured, Error> {
    let before = server.snapshot();
    let crypto_before = server.crypto_snapshot();
    let cpu_before = server.cpu_time();
    let wall = std::time::Instant::now();
    let report = tlslab_load::run(load)?;
    let wall = wall.elapsed();
    let cpu = server.cpu_time().saturating_sub(cpu_before);
    let sign = server
        .crypto_snapshot()
        .diff(&crypto_before)
        .total(tlslab_crypto::meter::Op::Sign);
    let after = server.snapshot();
    let served = after
        .requests
        .total()
        .saturating_sub(before.requests.total());
    if report.requests.completed == 0 || served == 0 {
        return Err(Error::EmptyCell {
            cell: label.to_string(),
            errors: report.error_summary(),
        });
    }
    Ok(Measured {
        report,
        server_cpu_us_per_request: cpu.as_secs_f64() * 1e6 / served as f64,
        server_busy: cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        server_sign: (sign.calls > 0)
            .then(|| (sign.nanos as f64 / 1e3 / sign.calls as f64, sign.calls)),
    })
}
