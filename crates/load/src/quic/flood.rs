//! A bounded QUIC flood on loopback beside a load (`load --h3 --flood
//! KIND --flood-rate N`, issue 29): Initials that never continue, junk
//! datagrams, or PING-only clients.
//!
//! The datagram kinds send from a pool of UDP sockets (many source
//! ports), at a fixed rate, and count what comes back to those sockets
//! (Retry, Initial, Handshake packets, ...), which they never answer:
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
//! - [`FloodKind::PingOnly`]: new clients at the rate, each of which
//!   completes a handshake and then sends only PINGs, never a request,
//!   until the flood ends or the server closes it (the `ping` module).
//!
//! It is bounded three ways and stops on its own: at [`Flood::duration`],
//! after [`Flood::max_initials`] (Initials, or PING-only clients), or when
//! [`Flooding::stop`] is called. The target must be a loopback address
//! unless [`Flood::allow_remote`] says otherwise ([`Flood::check`]). It
//! runs on a thread of its own, so its CPU is not the load runtime's.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng as _, RngExt as _};
use tlslab_schema::transport::{Flood as FloodReport, FloodReceived};

use crate::error::Error;

pub use super::ping::{PingReport, ping_only};
pub use crate::protocol::{FloodKind, MAX_INITIALS, MAX_PING_CLIENTS, MAX_PING_RATE, MAX_RATE};

/// The longest a flood runs.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The most source sockets.
pub const MAX_SOCKETS: usize = 1024;
/// The source sockets of `load --flood`.
pub const DEFAULT_SOCKETS: usize = 64;
/// The size of a junk datagram: an Initial's minimum (RFC 9000 §14.1).
const INITIAL_SIZE: usize = 1200;

/// One flood's settings.
#[derive(Clone, Debug)]
pub struct Flood {
    /// The server's UDP address: loopback only, unless [`Flood::allow_remote`].
    pub target: SocketAddr,
    /// The SNI of the valid ClientHellos.
    pub server_name: String,
    /// What to send.
    pub kind: FloodKind,
    /// Initials per second (a valid one may be two datagrams), 1 to
    /// [`MAX_RATE`]; for [`FloodKind::PingOnly`], new clients per second,
    /// 1 to [`MAX_PING_RATE`].
    pub rate: u32,
    /// Stop after this many Initials (at most [`MAX_INITIALS`]), or
    /// PING-only clients (at most [`MAX_PING_CLIENTS`]).
    pub max_initials: u64,
    /// Stop after this long (at most [`MAX_DURATION`]).
    pub duration: Duration,
    /// Source sockets, each its own port, used in turn (1 to
    /// [`MAX_SOCKETS`]).
    pub sockets: usize,
    /// Seeds the junk bytes.
    pub seed: u64,
    /// Whether the target may be an address that is not loopback
    /// (`--flood-allow-remote`): only for a server one runs and may flood.
    pub allow_remote: bool,
}

impl Flood {
    /// A flood of `kind` at `rate` per second against `target`, for at
    /// most `duration`, from [`DEFAULT_SOCKETS`] ports, at most
    /// `rate × duration` Initials or clients (within the kind's
    /// [`FloodKind::max_count`]); loopback only.
    pub fn new(target: SocketAddr, kind: FloodKind, rate: u32, duration: Duration) -> Flood {
        let duration = duration.min(MAX_DURATION);
        Flood {
            target,
            server_name: "localhost".into(),
            kind,
            rate,
            max_initials: ((rate as f64 * duration.as_secs_f64()).ceil() as u64)
                .clamp(1, kind.max_count()),
            duration,
            sockets: DEFAULT_SOCKETS,
            seed: 0,
            allow_remote: false,
        }
    }

    /// Refuses a target that is not loopback (unless
    /// [`Flood::allow_remote`]), and any bound out of range.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Invalid(m));
        if !self.target.ip().is_loopback() && !self.allow_remote {
            return bad(format!(
                "--flood sends only to loopback, and {} is not; give a 127.0.0.1 (or [::1]) URL, \
                 or add --flood-allow-remote for a server you run",
                self.target.ip()
            ));
        }
        let (max_rate, max_count) = (self.kind.max_rate(), self.kind.max_count());
        let what = match self.kind {
            FloodKind::PingOnly => "new PING-only clients",
            _ => "Initials",
        };
        if self.rate == 0 || self.rate > max_rate {
            return bad(format!(
                "--flood-rate {}: give 1 to {max_rate} {what} per second",
                self.rate
            ));
        }
        if self.max_initials == 0 || self.max_initials > max_count {
            return bad(format!(
                "--flood-max {}: a {} flood sends 1 to {max_count} {what}",
                self.max_initials,
                self.kind.name()
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
/// algorithms and ALPN h3; a meter of its own, no key log, no 0-RTT), for
/// the valid Initials of a flood or for PING-only clients. It verifies
/// nothing: a flood never gets that far, and a PING-only client sends
/// nothing worth protecting.
pub fn tls_for(cfg: &crate::config::LoadConfig) -> Result<Arc<rustls::ClientConfig>, Error> {
    let meter = tlslab_crypto::meter::Meter::new();
    let mut c = crate::tls::base_config(cfg, &meter)?;
    c.alpn_protocols = vec![b"h3".to_vec()];
    c.enable_early_data = false;
    c.key_log = Arc::new(rustls::NoKeyLog);
    let prov = c.crypto_provider().clone();
    c.dangerous()
        .set_certificate_verifier(tlslab_crypto::pki::any_certificate(prov));
    Ok(Arc::new(c))
}

/// Starts `flood` on a thread of its own; valid Initials are ClientHellos
/// of `tls` (TLS 1.3, ALPN as given), and PING-only clients use it too.
pub fn start(flood: Flood, tls: Arc<rustls::ClientConfig>) -> Result<Flooding, Error> {
    flood.check()?;
    let stop = Arc::new(AtomicBool::new(false));
    if flood.kind == FloodKind::PingOnly {
        let plan = super::ping::Plan {
            target: flood.target,
            server_name: flood.server_name.clone(),
            rate: flood.rate,
            max: flood.max_initials,
            duration: flood.duration,
            sockets: flood.sockets,
        };
        let prepared = super::ping::prepare(&plan, tls)?;
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tlslab-flood".into())
            .spawn(move || {
                let mut r = super::ping::flood(&plan, prepared, &stopping);
                r.kind = FloodKind::PingOnly.name().into();
                r
            })
            .map_err(|e| Error::Invalid(format!("--flood: no thread: {e}")))?;
        return Ok(Flooding {
            stop,
            thread: Some(thread),
        });
    }
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
            // A send never waits (a full buffer drops the datagram, counted
            // as a send error), and the answers are read without waiting.
            s.set_nonblocking(true)
                .map_err(|e| Error::Invalid(format!("--flood: UDP socket: {e}")))?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, Error>>()?;
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
    let mut answers = vec![0u8; 64 * 1024];
    let mut tick = 0u64;
    while !stop.load(Ordering::Relaxed) && sent < flood.max_initials {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // What came back, every 10 ms (the sockets never answer it).
        if tick.is_multiple_of(10) {
            for s in sockets {
                receive(s, &mut answers, &mut out.received);
            }
        }
        tick += 1;
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
                FloodKind::Valid | FloodKind::PingOnly => 0,
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
    for s in sockets {
        receive(s, &mut answers, &mut out.received);
    }
    out
}

/// Reads what is waiting on `socket` without blocking (at most 1,024
/// datagrams) and counts it by the type of its first packet.
fn receive(socket: &UdpSocket, buf: &mut [u8], into: &mut FloodReceived) {
    for _ in 0..1024 {
        let Ok((n, _)) = socket.recv_from(buf) else {
            return;
        };
        into.datagrams += 1;
        into.bytes += n as u64;
        match packet_type(&buf[..n]) {
            Some(Packet::Retry) => into.retry += 1,
            Some(Packet::Initial) => into.initial += 1,
            Some(Packet::Handshake) => into.handshake += 1,
            Some(Packet::VersionNegotiation) => into.version_negotiation += 1,
            None => into.other += 1,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Packet {
    Initial,
    Handshake,
    Retry,
    VersionNegotiation,
}

/// The type of a datagram's first QUIC packet, when it has a long header
/// (RFC 9000 §17.2) of a type a server sends before a handshake completes.
fn packet_type(d: &[u8]) -> Option<Packet> {
    let (&first, version) = (d.first()?, d.get(1..5)?);
    if first & 0x80 == 0 {
        return None;
    }
    if version == [0, 0, 0, 0] {
        return Some(Packet::VersionNegotiation);
    }
    match (first >> 4) & 0x03 {
        0 => Some(Packet::Initial),
        2 => Some(Packet::Handshake),
        3 => Some(Packet::Retry),
        _ => None,
    }
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
        let mut f = Flood::new(
            "192.0.2.1:443".parse().unwrap(),
            FloodKind::PingOnly,
            10,
            Duration::from_secs(1),
        );
        f.allow_remote = true;
        assert!(f.check().is_ok());
        f.rate = MAX_PING_RATE + 1;
        assert!(f.check().unwrap_err().to_string().contains("--flood-rate"));
    }

    #[test]
    fn answers_are_counted_by_their_first_packets_type() {
        let long = |ty: u8, v: [u8; 4]| {
            let mut d = vec![0xc0 | (ty << 4)];
            d.extend_from_slice(&v);
            d
        };
        let v1 = [0, 0, 0, 1];
        assert_eq!(packet_type(&long(0, v1)), Some(Packet::Initial));
        assert_eq!(packet_type(&long(2, v1)), Some(Packet::Handshake));
        assert_eq!(packet_type(&long(3, v1)), Some(Packet::Retry));
        assert_eq!(
            packet_type(&long(0, [0; 4])),
            Some(Packet::VersionNegotiation)
        );
        assert_eq!(packet_type(&long(1, v1)), None, "0-RTT: not a server's");
        assert_eq!(packet_type(&[0x40, 1, 2, 3, 4, 5]), None, "short header");
        assert_eq!(packet_type(&[0xc0, 0]), None, "too short");
        assert_eq!(packet_type(&[]), None);
    }
}
