//! The path a study's round-trip cells cross (`experiment run … --path`):
//!
//! - `relay` (the default): `tlslab relay` (crates/relay) on loopback. No
//!   privilege, TCP only. It delays each segment by half the RTT each way,
//!   so every TLS flight pays the RTT; but the client's TCP connect is
//!   accepted locally (seed 003's T reads about 0.2 ms) and the relay ACKs
//!   at once, so slow start never costs a round trip.
//! - `packet`: `tlslab path` (crates/path), a packet-level path between two
//!   network namespaces with `delay = RTT/2` each way. Root (or
//!   CAP_NET_ADMIN). The kernel's own TCP crosses it: the connect costs a
//!   round trip, the server's first flight starts from the kernel's initial
//!   window of 10 segments (Reno, the textbook slow start), and loss would
//!   be recovered by the kernel.
//!
//! With `both`, each round-trip cell runs once over each, with the factor
//! `path = relay | packet`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tlslab_path::{PathConfig, PathHandle, PathReport};
use tlslab_relay::{Conditions, RelayConfig, RelayThread};

pub use super::path_kind::PathKind;
use super::session::StudyError;

/// What `--path` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathChoice {
    /// The relay only.
    #[default]
    Relay,
    /// The packet path only.
    Packet,
    /// Every round-trip cell over each.
    Both,
}

impl PathChoice {
    /// The kinds to run, relay first.
    pub fn kinds(self) -> &'static [PathKind] {
        match self {
            PathChoice::Relay => &[PathKind::Relay],
            PathChoice::Packet => &[PathKind::Packet],
            PathChoice::Both => &[PathKind::Relay, PathKind::Packet],
        }
    }

    /// `relay`, `packet` or `both`.
    pub fn name(self) -> &'static str {
        match self {
            PathChoice::Relay => "relay",
            PathChoice::Packet => "packet",
            PathChoice::Both => "both",
        }
    }

    /// A usage error when the packet path is asked for without the
    /// privilege it needs (before any work).
    pub fn check(self) -> Result<(), StudyError> {
        if self.kinds().contains(&PathKind::Packet) && !tlslab_path::privileged() {
            return Err(StudyError::Usage(format!(
                "--path-kind {}: the packet-level path needs root (or CAP_NET_ADMIN and \
                 CAP_SYS_ADMIN) to create network namespaces and TUN devices; run as root \
                 (sudo), or use --path-kind relay, which needs no privilege (TCP only, delays whole \
                 flights; no real TCP connect or slow start)",
                self.name()
            )));
        }
        Ok(())
    }
}

impl FromStr for PathChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<PathChoice, String> {
        match s.trim() {
            "relay" => Ok(PathChoice::Relay),
            "packet" | "path" => Ok(PathChoice::Packet),
            "both" => Ok(PathChoice::Both),
            other => Err(format!(
                "'{other}' is not a path kind; write relay (tlslab relay, no root), packet \
                 (tlslab path, root) or both"
            )),
        }
    }
}

/// The packet path of round-trip time `rtt`: half of it each way, Reno in
/// both namespaces (a namespace may default only to an allowed algorithm;
/// Reno's slow start is the textbook one, where BBR would pace the second
/// round), the kernel's initial window of 10 segments, MTU 1500.
pub fn packet_config(rtt: Duration) -> PathConfig {
    let mut c = PathConfig::default();
    c.up.delay = rtt / 2;
    c.down.delay = rtt - rtt / 2;
    c.congestion_control = Some("reno".into());
    c.seed = 1;
    c
}

/// A running path of one round-trip time.
pub(super) enum RttPath {
    /// `tlslab relay` to an upstream on loopback.
    Relay(RelayThread),
    /// `tlslab path`: the server goes in its server namespace.
    Packet(tlslab_path::Path),
}

/// What a path did.
pub(super) enum Stopped {
    /// The relay's counters.
    Relay(tlslab_relay::RelayStats),
    /// The forwarder's report.
    Packet(Box<PathReport>),
}

fn failed(cell: &str, what: String) -> StudyError {
    StudyError::Run(crate::Error::empty(cell, what))
}

impl RttPath {
    /// A relay of round-trip time `rtt` to `upstream`; `cell` names the
    /// cell in errors.
    pub(super) fn relay(
        rtt: Duration,
        upstream: SocketAddr,
        cell: &str,
    ) -> Result<RttPath, StudyError> {
        let relay = RelayThread::spawn(RelayConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            upstream,
            conditions: Conditions {
                delay: rtt / 2,
                ..Conditions::default()
            },
            seed: 1,
            idle_timeout: tlslab_relay::DEFAULT_IDLE_TIMEOUT,
            max_queued: tlslab_relay::DEFAULT_MAX_QUEUED,
        })
        .map_err(|e| failed(cell, format!("relay: {e}")))?;
        Ok(RttPath::Relay(relay))
    }

    /// A packet path of round-trip time `rtt` ([`packet_config`]),
    /// capturing its packets to `capture` if given ([`Session::capture`](super::Session::capture)).
    pub(super) fn packet(rtt: Duration, capture: Option<PathBuf>) -> Result<RttPath, StudyError> {
        let mut cfg = packet_config(rtt);
        cfg.pcap.file = capture;
        let p = tlslab_path::Path::start(&cfg).map_err(crate::Error::from)?;
        Ok(RttPath::Packet(p))
    }

    /// The packet path's ends (`None` for the relay).
    pub(super) fn handle(&self) -> Option<PathHandle> {
        match self {
            RttPath::Relay(_) => None,
            RttPath::Packet(p) => Some(p.handle()),
        }
    }

    /// The URL a client uses for `path` on a server listening on
    /// `server_port`: the relay's port on 127.0.0.1, or the server's
    /// address inside the path.
    pub(super) fn url(&self, server_port: u16, path: &str) -> String {
        match self {
            RttPath::Relay(r) => format!("https://127.0.0.1:{}{path}", r.local_addr().port()),
            RttPath::Packet(p) => format!(
                "https://{}:{server_port}{path}",
                crate::rig::server_host(Some(&p.handle()))
            ),
        }
    }

    /// Stops the path.
    pub(super) fn stop(self) -> Result<Stopped, StudyError> {
        match self {
            RttPath::Relay(r) => Ok(Stopped::Relay(r.stop())),
            RttPath::Packet(p) => Ok(Stopped::Packet(Box::new(
                p.stop().map_err(crate::Error::from)?,
            ))),
        }
    }
}

/// IPv4 header bytes of every packet.
pub const IP_HEADER: u64 = 20;
/// TCP header bytes of a segment without options.
pub const TCP_HEADER: u64 = 20;
/// The timestamp option as Linux sends it on every segment after the
/// SYN (NOP, NOP, 10 bytes), when `net.ipv4.tcp_timestamps` is on.
pub const TIMESTAMPS: u64 = 12;
/// What a SYN (and its SYN-ACK) carries beyond a data segment's options:
/// MSS, SACK-permitted, timestamps, NOP and window scale are 20 bytes, the
/// data segment's 12.
pub const SYN_EXTRA: u64 = 8;

pub use tlslab_report::study::ByteCheck;

/// The check's figures for one cell from the forwarder's counts and the
/// load's.
pub fn byte_check(
    path: &PathReport,
    socket: &tlslab_report::SocketBytes,
    timestamps: bool,
    handshake_bytes: f64,
) -> ByteCheck {
    let per_packet = IP_HEADER + TCP_HEADER + if timestamps { TIMESTAMPS } else { 0 };
    let syn = if timestamps { SYN_EXTRA } else { 12 };
    // Each connection has one SYN up and one SYN-ACK down.
    let payload = |bytes: u64, packets: u64| {
        bytes.saturating_sub(per_packet * packets + syn * socket.connections)
    };
    let payload_up = payload(path.up.bytes_forwarded, path.up.packets_forwarded);
    let payload_down = payload(path.down.bytes_forwarded, path.down.packets_forwarded);
    let pct = |a: u64, b: u64| {
        if b == 0 {
            f64::INFINITY
        } else {
            (a as f64 - b as f64) / b as f64 * 100.0
        }
    };
    ByteCheck {
        connections: socket.connections,
        timestamps,
        packets_up: path.up.packets_forwarded,
        bytes_up: path.up.bytes_forwarded,
        packets_down: path.down.packets_forwarded,
        bytes_down: path.down.bytes_forwarded,
        payload_up,
        payload_down,
        socket_out: socket.bytes_out,
        socket_in: socket.bytes_in,
        handshake_bytes,
        diff_up_pct: pct(payload_up, socket.bytes_out),
        diff_down_pct: pct(payload_down, socket.bytes_in),
    }
}

/// Whether TCP timestamps are on in the calling thread's namespace.
pub(super) fn timestamps_on() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").map_or(true, |s| s.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_choices_parse_and_name_the_fix_when_wrong() {
        assert_eq!("relay".parse::<PathChoice>().unwrap(), PathChoice::Relay);
        assert_eq!("packet".parse::<PathChoice>().unwrap(), PathChoice::Packet);
        assert_eq!(" both ".parse::<PathChoice>().unwrap(), PathChoice::Both);
        assert_eq!(PathChoice::default(), PathChoice::Relay);
        assert_eq!(
            PathChoice::Both.kinds(),
            [PathKind::Relay, PathKind::Packet]
        );
        let e = "netem".parse::<PathChoice>().unwrap_err();
        crate::assert_has(&e, &["relay", "packet", "both"]);
        assert!(PathChoice::Relay.check().is_ok());
        if !tlslab_path::privileged() {
            let e = PathChoice::Both.check().unwrap_err();
            assert!(e.is_usage() && e.to_string().contains("root"), "{e}");
            assert!(e.to_string().contains("--path-kind relay"), "{e}");
        }
        let c = packet_config(Duration::from_millis(25));
        assert_eq!(c.rtt(), Duration::from_millis(25));
        assert_eq!(c.congestion_control.as_deref(), Some("reno"));
    }

    fn report(up: (u64, u64), down: (u64, u64)) -> PathReport {
        let d = |(packets, bytes): (u64, u64)| tlslab_path::DirectionReport {
            direction: String::new(),
            conditions: String::new(),
            packets_in: packets,
            bytes_in: bytes,
            packets_forwarded: packets,
            bytes_forwarded: bytes,
            dropped_queue: 0,
            dropped_loss: 0,
            dropped_write: 0,
            max_queue_packets: 0,
            queue_delay_us: tlslab_path::Micros::default(),
            lateness_us: tlslab_path::Micros::default(),
            cpu_ms: 0.0,
            wall_ms: 0.0,
            cpu_per_packet_ns: 0.0,
            realtime: false,
            saturated: false,
        };
        PathReport {
            up: d(up),
            down: d(down),
            pcap: None,
        }
    }

    #[test]
    fn the_byte_check_takes_the_headers_off_each_packet() {
        // One connection: SYN (60 B), ACK, ClientHello of 1,500 B in one
        // segment, Finished of 80 B, FIN: 5 packets up; SYN-ACK, a flight
        // of 3,000 B in 3 segments, FIN-ACK: 5 packets down.
        let up = (5, 60 + 52 + (1500 + 52) + (80 + 52) + 52);
        let down = (5, 60 + 3 * 52 + 3000 + 52);
        let socket = tlslab_report::SocketBytes {
            connections: 1,
            bytes_out: 1580,
            bytes_in: 3000,
        };
        let c = byte_check(&report(up, down), &socket, true, 4000.0);
        assert_eq!((c.payload_up, c.payload_down), (1580, 3000));
        assert_eq!(c.worst_pct(), 0.0);
        assert!(c.within_1pct());
        // Twenty bytes the client never counted: 1.27 % up.
        let c = byte_check(&report((5, up.1 + 20), down), &socket, true, 4000.0);
        assert!((c.diff_up_pct - 20.0 / 1580.0 * 100.0).abs() < 1e-9);
        assert!(!c.within_1pct());
        // Without timestamps: 40-byte headers, SYNs 12 bytes more.
        let c = byte_check(
            &report((2, 52 + 40 + 100), (1, 52)),
            &tlslab_report::SocketBytes {
                connections: 1,
                bytes_out: 100,
                bytes_in: 0,
            },
            false,
            0.0,
        );
        assert_eq!((c.payload_up, c.payload_down), (100, 0));
        assert!(c.diff_down_pct.is_infinite() && !c.within_1pct());
    }
}
