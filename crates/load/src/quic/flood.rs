//! A bounded QUIC Initial flood on loopback (`load --h3 --flood RATE`,
//! issue 33 item 4), and PING-only clients ([`ping_only`]).
//!
//! The flood sends Initials that never continue, from a pool of UDP
//! sockets (many source ports), at a fixed rate beside the legitimate
//! load:
//!
//! - [`FloodKind::Valid`]: real ClientHellos, quinn-proto's first flight
//!   ([`quinn_proto::Endpoint::connect`] then `poll_transmit`) with the
//!   TLS configuration the load uses, so they look like the load's own
//!   (two datagrams when the ClientHello does not fit one, as with an
//!   X25519MLKEM768 key share). The connection is then forgotten: the
//!   server holds a half-open handshake until it gives up on it.
//! - [`FloodKind::Junk`]: in turn, Initial-sized random bytes, and an
//!   Initial's long header (QUIC v1, random connection IDs) with a garbage
//!   payload, which the server must derive Initial keys for before its
//!   AEAD says no.
//! - [`FloodKind::Mixed`]: valid, random and header junk in turn.
//!
//! It is bounded three ways and stops on its own: at [`Flood::duration`],
//! after [`Flood::max_initials`], or when [`Flooding::stop`] is called.
//! The target must be a loopback address ([`Flood::check`]). It runs on a
//! thread of its own, so its CPU is not the load runtime's.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng as _, RngExt as _};
use tlslab_report::quic::Flood as FloodReport;

use crate::Error;

/// The highest [`Flood::rate`], Initials per second.
pub const MAX_RATE: u32 = 100_000;
/// The most Initials one flood sends, whatever its rate and duration.
pub const MAX_INITIALS: u64 = 10_000_000;
/// The longest a flood runs.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The most source sockets.
pub const MAX_SOCKETS: usize = 1024;
/// The source sockets of `load --flood`.
pub const DEFAULT_SOCKETS: usize = 64;
/// The size of a junk datagram: an Initial's minimum (RFC 9000 §14.1).
const INITIAL_SIZE: usize = 1200;

/// What the flood sends (`--flood-kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FloodKind {
    /// Real ClientHellos, never continued.
    Valid,
    /// Random bytes and Initial headers with garbage payloads.
    Junk,
    /// Valid and junk in turn.
    #[default]
    Mixed,
}

impl FloodKind {
    /// The kind's name in reports: `valid`, `junk` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            FloodKind::Valid => "valid",
            FloodKind::Junk => "junk",
            FloodKind::Mixed => "mixed",
        }
    }
}

/// One flood's settings.
#[derive(Clone, Debug)]
pub struct Flood {
    /// The server's UDP address: loopback only.
    pub target: SocketAddr,
    /// The SNI of the valid ClientHellos.
    pub server_name: String,
    /// What to send.
    pub kind: FloodKind,
    /// Initials per second (a valid one may be two datagrams), 1 to
    /// [`MAX_RATE`].
    pub rate: u32,
    /// Stop after this many Initials (at most [`MAX_INITIALS`]).
    pub max_initials: u64,
    /// Stop after this long (at most [`MAX_DURATION`]).
    pub duration: Duration,
    /// Source sockets, each its own port, used in turn (1 to
    /// [`MAX_SOCKETS`]).
    pub sockets: usize,
    /// Seeds the junk bytes.
    pub seed: u64,
}

impl Flood {
    /// A flood of `kind` at `rate` per second against `target`, for at
    /// most `duration`, from [`DEFAULT_SOCKETS`] ports, at most
    /// `rate × duration` Initials (within [`MAX_INITIALS`]).
    pub fn new(target: SocketAddr, kind: FloodKind, rate: u32, duration: Duration) -> Flood {
        let duration = duration.min(MAX_DURATION);
        Flood {
            target,
            server_name: "localhost".into(),
            kind,
            rate,
            max_initials: ((rate as f64 * duration.as_secs_f64()).ceil() as u64)
                .clamp(1, MAX_INITIALS),
            duration,
            sockets: DEFAULT_SOCKETS,
            seed: 0,
        }
    }

    /// Refuses a target that is not loopback, and any bound out of range.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Invalid(m));
        if !self.target.ip().is_loopback() {
            return bad(format!(
                "--flood sends only to loopback, and {} is not; give a 127.0.0.1 (or [::1]) URL",
                self.target.ip()
            ));
        }
        if self.rate == 0 || self.rate > MAX_RATE {
            return bad(format!(
                "--flood {}: give 1 to {MAX_RATE} Initials per second",
                self.rate
            ));
        }
        if self.max_initials == 0 || self.max_initials > MAX_INITIALS {
            return bad(format!(
                "a flood sends 1 to {MAX_INITIALS} Initials, not {}",
                self.max_initials
            ));
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad(format!(
                "a flood runs for more than 0 s and at most {} s",
                MAX_DURATION.as_secs()
            ));
        }
        if self.sockets == 0 || self.sockets > MAX_SOCKETS {
            return bad(format!(
                "a flood sends from 1 to {MAX_SOCKETS} sockets, not {}",
                self.sockets
            ));
        }
        Ok(())
    }
}

/// A flood running on its own thread; dropping it stops the flood.
pub struct Flooding {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<FloodReport>>,
}

impl Flooding {
    /// Stops the flood now and returns what it sent.
    pub fn stop(self) -> FloodReport {
        self.stop.store(true, Ordering::Relaxed);
        self.wait()
    }

    /// Waits until the flood stops on its own (its duration or count) and
    /// returns what it sent.
    pub fn wait(mut self) -> FloodReport {
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Flooding {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The TLS configuration `load --h3` would use for `cfg` (its versions,
/// algorithms and ALPN h3), for the valid Initials of a flood or for
/// [`ping_only`] clients. It verifies nothing (a flood never gets that
/// far; a PING-only client talks to a test's own server).
pub fn tls_for(cfg: &crate::LoadConfig) -> Result<Arc<rustls::ClientConfig>, Error> {
    let meter = tlslab_crypto::meter::Meter::new();
    let mut c = crate::tls::base_config(cfg, &meter)?;
    c.alpn_protocols = vec![b"h3".to_vec()];
    let prov = c.crypto_provider().clone();
    c.dangerous()
        .set_certificate_verifier(tlslab_crypto::pki::any_certificate(prov));
    Ok(Arc::new(c))
}

/// Starts `flood` on a thread of its own; valid Initials are ClientHellos
/// of `tls` (TLS 1.3, ALPN as given).
pub fn start(flood: Flood, tls: Arc<rustls::ClientConfig>) -> Result<Flooding, Error> {
    flood.check()?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| Error::Invalid(format!("--flood: {e}; QUIC needs TLS 1.3")))?;
    let config = quinn_proto::ClientConfig::new(Arc::new(quic));
    let local: SocketAddr = if flood.target.is_ipv6() {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    };
    let sockets = (0..flood.sockets)
        .map(|_| {
            let s = UdpSocket::bind(local)
                .map_err(|e| Error::Invalid(format!("--flood: UDP bind {local}: {e}")))?;
            // A send never waits long: a full buffer drops the datagram.
            let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
            Ok(s)
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("tlslab-flood".into())
        .spawn(move || send_all(&flood, config, &sockets, &stopping))
        .map_err(|e| Error::Invalid(format!("--flood: no thread: {e}")))?;
    Ok(Flooding {
        stop,
        thread: Some(thread),
    })
}

/// The flood's loop: sends what is due every millisecond until a bound.
fn send_all(
    flood: &Flood,
    config: quinn_proto::ClientConfig,
    sockets: &[UdpSocket],
    stop: &AtomicBool,
) -> FloodReport {
    let mut out = FloodReport {
        kind: flood.kind.name().into(),
        rate: flood.rate,
        sockets: sockets.len() as u32,
        ..FloodReport::default()
    };
    let mut rng = tlslab_workload::rng(flood.seed, 0xf100d);
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        false,
        None,
    );
    let start = Instant::now();
    let end = start + flood.duration;
    let mut sent = 0u64;
    let mut buf = Vec::with_capacity(2 * INITIAL_SIZE);
    while !stop.load(Ordering::Relaxed) && sent < flood.max_initials {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // Due by now; a backlog of more than 50 ms (a slow host) is dropped,
        // not sent in a burst.
        let due = ((now - start).as_secs_f64() * flood.rate as f64) as u64;
        let due = due.min(flood.max_initials);
        let backlog = (flood.rate as u64 / 20).max(1);
        let mut n = due.saturating_sub(sent);
        if n > backlog {
            sent += n - backlog;
            n = backlog;
        }
        for _ in 0..n {
            let socket = &sockets[(sent % sockets.len() as u64) as usize];
            let pick = match flood.kind {
                FloodKind::Valid => 0,
                FloodKind::Junk => 1 + sent % 2,
                FloodKind::Mixed => sent % 3,
            };
            match pick {
                0 => {
                    let datagrams = client_hello(&mut endpoint, &config, flood, &mut buf);
                    if datagrams.is_empty() {
                        out.send_errors += 1;
                    }
                    out.valid += 1;
                    for d in datagrams {
                        out.valid_datagrams += 1;
                        count(socket.send_to(&d, flood.target), &mut out.send_errors);
                    }
                }
                1 => {
                    buf.clear();
                    buf.resize(INITIAL_SIZE, 0);
                    rng.fill_bytes(&mut buf);
                    out.junk_random += 1;
                    count(socket.send_to(&buf, flood.target), &mut out.send_errors);
                }
                _ => {
                    initial_header(&mut rng, &mut buf);
                    out.junk_header += 1;
                    count(socket.send_to(&buf, flood.target), &mut out.send_errors);
                }
            }
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    out.elapsed_s = start.elapsed().as_secs_f64();
    out
}

fn count(r: std::io::Result<usize>, errors: &mut u64) {
    if r.is_err() {
        *errors += 1;
    }
}

/// A new connection's first flight (its Initial datagrams), after which
/// the connection is forgotten.
fn client_hello(
    endpoint: &mut quinn_proto::Endpoint,
    config: &quinn_proto::ClientConfig,
    flood: &Flood,
    buf: &mut Vec<u8>,
) -> Vec<Vec<u8>> {
    let now = Instant::now();
    let Ok((handle, mut conn)) =
        endpoint.connect(now, config.clone(), flood.target, &flood.server_name)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // The first flight is one Initial datagram, or a few for a large
    // ClientHello; bounded in case of a surprise.
    while out.len() < 4 {
        buf.clear();
        let Some(t) = conn.poll_transmit(now, 1, buf) else {
            break;
        };
        out.push(buf[..t.size].to_vec());
    }
    // Forgotten: the endpoint frees its state for the connection.
    endpoint.handle_event(handle, quinn_proto::EndpointEvent::drained());
    out
}

/// An Initial's long header (QUIC v1, random 8-byte connection IDs, no
/// token) with a garbage payload, padded to [`INITIAL_SIZE`].
fn initial_header(rng: &mut tlslab_workload::Rng, buf: &mut Vec<u8>) {
    buf.clear();
    // Long header, fixed bit, type Initial (0), random reserved and
    // packet-number-length bits (protected anyway).
    buf.push(0xc0 | (rng.random::<u8>() & 0x0f));
    buf.extend_from_slice(&1u32.to_be_bytes());
    for _ in 0..2 {
        buf.push(8);
        let cid: [u8; 8] = rng.random();
        buf.extend_from_slice(&cid);
    }
    buf.push(0); // token length
    let rest = INITIAL_SIZE - buf.len() - 2;
    // The length as a 2-byte varint (0b01 prefix).
    buf.extend_from_slice(&(0x4000u16 | rest as u16).to_be_bytes());
    let at = buf.len();
    buf.resize(at + rest, 0);
    rng.fill_bytes(&mut buf[at..]);
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
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| Error::Invalid(format!("PING-only client: {e}; QUIC needs TLS 1.3")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(interval));
    t.max_idle_timeout(
        quinn::IdleTimeout::try_from((interval * 4).max(Duration::from_secs(1))).ok(),
    );
    config.transport_config(Arc::new(t));
    let local: SocketAddr = if target.is_ipv6() {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initial_header_is_a_v1_initial_of_initial_size() {
        let mut rng = tlslab_workload::rng(1, 2);
        let mut buf = Vec::new();
        initial_header(&mut rng, &mut buf);
        assert_eq!(buf.len(), INITIAL_SIZE);
        assert_eq!(buf[0] & 0xf0, 0xc0, "long header, type Initial");
        assert_eq!(&buf[1..5], &[0, 0, 0, 1]);
        let len = u16::from_be_bytes([buf[24], buf[25]]) & 0x3fff;
        assert_eq!(len as usize, INITIAL_SIZE - 26);
    }

    #[test]
    fn a_flood_refuses_a_target_that_is_not_loopback() {
        let f = Flood::new(
            "192.0.2.1:443".parse().unwrap(),
            FloodKind::Junk,
            10,
            Duration::from_secs(1),
        );
        assert!(f.check().unwrap_err().to_string().contains("loopback"));
        let f = Flood::new(
            "127.0.0.1:443".parse().unwrap(),
            FloodKind::Junk,
            MAX_RATE + 1,
            Duration::from_secs(1),
        );
        assert!(f.check().is_err());
    }
}
