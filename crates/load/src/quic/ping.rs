//! PING-only QUIC clients: each completes a handshake and then sends only
//! PINGs and never a request (not even HTTP/3's control streams), the
//! quiet clients of issue 29 finding 2. [`ping_only`] holds a fixed number
//! for a while (tests); the flood kind `ping-only` starts them at a rate
//! beside a load (`load --h3 --flood ping-only`, through `super::flood`,
//! which this module does not import).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tlslab_schema::transport::{Flood as FloodReport, PingOnly};

use crate::error::Error;

/// How often a PING-only client of a flood sends a PING.
pub const PING_INTERVAL: Duration = Duration::from_secs(1);
/// The longest a PING-only client's handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The most UDP sockets (quinn endpoints) a PING-only flood uses.
const MAX_ENDPOINTS: usize = 16;

/// A QUIC client configuration on `tls` that sends a PING every `interval`
/// and gives up after `4 × interval` (at least 1 s) without an answer.
fn client_config(
    tls: Arc<rustls::ClientConfig>,
    interval: Duration,
) -> Result<quinn::ClientConfig, Error> {
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| Error::Invalid(format!("PING-only client: {e}; QUIC needs TLS 1.3")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(interval));
    t.max_idle_timeout(
        quinn::IdleTimeout::try_from((interval * 4).max(Duration::from_secs(1))).ok(),
    );
    config.transport_config(Arc::new(t));
    Ok(config)
}

fn local_for(target: SocketAddr) -> SocketAddr {
    if target.is_ipv6() {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    }
}

/// A PING-only flood's bounds, checked by the caller.
pub(super) struct Plan {
    /// The server's UDP address.
    pub target: SocketAddr,
    /// The clients' SNI.
    pub server_name: String,
    /// New clients per second.
    pub rate: u32,
    /// The most clients started.
    pub max: u64,
    /// How long the flood runs (and holds its clients).
    pub duration: Duration,
    /// UDP sockets (quinn endpoints) asked for, at most [`MAX_ENDPOINTS`].
    pub sockets: usize,
}

/// What a PING-only flood needs before its thread starts (so that a bad
/// configuration or a socket that cannot be bound is an error of the
/// flood's start): the client configuration and the sockets.
pub(super) struct Prepared {
    config: quinn::ClientConfig,
    sockets: Vec<std::net::UdpSocket>,
}

/// Checks the TLS configuration and binds the flood's sockets.
pub(super) fn prepare(plan: &Plan, tls: Arc<rustls::ClientConfig>) -> Result<Prepared, Error> {
    let config = client_config(tls, PING_INTERVAL)?;
    let local = local_for(plan.target);
    let sockets = (0..plan.sockets.clamp(1, MAX_ENDPOINTS))
        .map(|_| {
            std::net::UdpSocket::bind(local)
                .map_err(|e| Error::Invalid(format!("--flood: UDP bind {local}: {e}")))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Prepared { config, sockets })
}

/// One PING-only client of a flood.
#[derive(Default)]
struct Client {
    connected: bool,
    failed: bool,
    held: Option<Duration>,
    pings: u64,
}

/// Runs a PING-only flood on this thread (its own tokio runtime): new
/// clients at `plan.rate` per second, at most `plan.max`, each held until
/// the flood ends (its duration, or `stop`) or the server closes it. The
/// report's `kind` is left for the caller to name.
pub(super) fn flood(plan: &Plan, prepared: Prepared, stop: &AtomicBool) -> FloodReport {
    let mut out = FloodReport {
        rate: plan.rate,
        ..FloodReport::default()
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("--flood ping-only: no runtime: {e}");
            return out;
        }
    };
    let t0 = Instant::now();
    let (sockets, clients) = rt.block_on(run(plan, prepared, stop));
    out.elapsed_s = t0.elapsed().as_secs_f64();
    out.sockets = sockets as u32;
    let mut held: Vec<f64> = clients
        .iter()
        .filter_map(|c| c.held.map(|d| d.as_secs_f64()))
        .collect();
    held.sort_by(f64::total_cmp);
    out.ping_only = Some(PingOnly {
        clients: clients.len() as u64,
        connected: clients.iter().filter(|c| c.connected).count() as u64,
        failed: clients.iter().filter(|c| c.failed).count() as u64,
        closed_by_server: held.len() as u64,
        held_p50_s: held.get(held.len() / 2).copied(),
        pings: clients.iter().map(|c| c.pings).sum(),
    });
    out
}

async fn run(plan: &Plan, prepared: Prepared, stop: &AtomicBool) -> (usize, Vec<Client>) {
    let Some(runtime) = quinn::default_runtime() else {
        return (0, Vec::new());
    };
    let endpoints: Vec<quinn::Endpoint> = prepared
        .sockets
        .into_iter()
        .filter_map(|s| {
            quinn::Endpoint::new(quinn::EndpointConfig::default(), None, s, runtime.clone())
                .inspect_err(|e| tracing::warn!("--flood ping-only: an endpoint: {e}"))
                .ok()
        })
        .collect();
    if endpoints.is_empty() {
        return (0, Vec::new());
    }
    let name: Arc<str> = plan.server_name.as_str().into();
    let (quit, quitting) = tokio::sync::watch::channel(false);
    let mut set = tokio::task::JoinSet::new();
    let mut done = Vec::new();
    let start = Instant::now();
    let end = start + plan.duration;
    let mut started = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        // Due by now, at most the count; a backlog of more than 50 ms (a
        // slow host) is dropped, not started in a burst.
        let due = ((start.elapsed().as_secs_f64() * plan.rate as f64) as u64).min(plan.max);
        let backlog = (plan.rate as u64 / 20).max(1);
        if due.saturating_sub(started) > backlog {
            started = due - backlog;
        }
        while started < due {
            let ep = endpoints[(started % endpoints.len() as u64) as usize].clone();
            let (config, name) = (prepared.config.clone(), name.clone());
            set.spawn(client(ep, config, plan.target, name, quitting.clone()));
            started += 1;
        }
        while let Some(r) = set.try_join_next() {
            done.extend(r.ok());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = quit.send(true);
    while let Some(r) = set.join_next().await {
        done.extend(r.ok());
    }
    for e in &endpoints {
        let _ = tokio::time::timeout(Duration::from_secs(1), e.wait_idle()).await;
    }
    (endpoints.len(), done)
}

/// One PING-only client: a handshake (at most [`HANDSHAKE`]), then PINGs
/// until the server closes the connection or the flood ends.
async fn client(
    ep: quinn::Endpoint,
    config: quinn::ClientConfig,
    target: SocketAddr,
    name: Arc<str>,
    mut quit: tokio::sync::watch::Receiver<bool>,
) -> Client {
    let mut c = Client::default();
    let Ok(connecting) = ep.connect_with(config, target, &name) else {
        c.failed = true;
        return c;
    };
    let conn = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE, connecting) => match r {
            Ok(Ok(conn)) => conn,
            _ => {
                c.failed = true;
                return c;
            }
        },
        _ = quit.wait_for(|q| *q) => return c,
    };
    c.connected = true;
    let t0 = Instant::now();
    tokio::select! {
        _ = conn.closed() => c.held = Some(t0.elapsed()),
        _ = quit.wait_for(|q| *q) => {}
    }
    c.pings = conn.stats().frame_tx.ping;
    conn.close(0u32.into(), b"flood over");
    c
}

/// What [`ping_only`] clients did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PingReport {
    /// Handshakes completed.
    pub connected: u64,
    /// Connections that could not be made.
    pub failed: u64,
    /// Connections the server closed (or that timed out) before `hold`.
    pub closed_early: u64,
    /// PING frames the clients sent.
    pub pings: u64,
}

/// `clients` QUIC clients that complete a handshake with `target` (ALPN
/// and trust from `tls`) and then send only PINGs, every `interval`, and
/// never a request (not even HTTP/3's control streams), holding their
/// connections for `hold`. Each connection has an idle timeout of
/// `4 × interval` (at least 1 s) and each handshake one of 10 s. Ends by
/// itself after `hold` (plus the handshakes). Loopback targets only.
pub async fn ping_only(
    target: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
    clients: usize,
    interval: Duration,
    hold: Duration,
) -> Result<PingReport, Error> {
    if !target.ip().is_loopback() {
        return Err(Error::Invalid(format!(
            "PING-only clients connect only to loopback, and {} is not",
            target.ip()
        )));
    }
    let interval = interval.max(Duration::from_millis(10));
    let config = client_config(tls, interval)?;
    let local = local_for(target);
    let endpoint = quinn::Endpoint::client(local)
        .map_err(|e| Error::Invalid(format!("PING-only client: UDP bind {local}: {e}")))?;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (endpoint, config, name) = (endpoint.clone(), config.clone(), server_name.to_string());
        set.spawn(async move {
            let mut r = PingReport::default();
            let Ok(connecting) = endpoint.connect_with(config, target, &name) else {
                r.failed = 1;
                return r;
            };
            let conn = match tokio::time::timeout(Duration::from_secs(10), connecting).await {
                Ok(Ok(c)) => c,
                _ => {
                    r.failed = 1;
                    return r;
                }
            };
            r.connected = 1;
            if tokio::time::timeout(hold, conn.closed()).await.is_ok() {
                r.closed_early = 1;
            }
            r.pings = conn.stats().frame_tx.ping;
            conn.close(0u32.into(), b"done");
            r
        });
    }
    let mut total = PingReport::default();
    while let Some(r) = set.join_next().await {
        let r = r.unwrap_or_default();
        total.connected += r.connected;
        total.failed += r.failed;
        total.closed_early += r.closed_early;
        total.pings += r.pings;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    Ok(total)
}
