//! The `transport` section of a load report over QUIC (`load --h3`): absent over TCP.

use serde::{Deserialize, Serialize};

/// What a run over QUIC measured beyond the common report: absent
/// (`null`) for TCP runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    /// `quic` (HTTP/3 over QUIC, quinn + h3).
    pub name: String,
    /// Streams in flight per connection (`-m`).
    pub max_concurrent_streams: u32,
    /// Handshakes by kind as the client saw them.
    pub full: TransportPhase,
    /// Resumed handshakes without 0-RTT.
    pub resumed: TransportPhase,
    /// Resumed handshakes whose first request went in 0-RTT and was accepted.
    pub zero_rtt: TransportPhase,
    /// Connections whose 0-RTT data the server rejected (the request was
    /// sent again after the handshake).
    pub zero_rtt_rejected: u64,
    /// UDP sockets a client moved to (`--quic-new-socket`,
    /// `--quic-rebind-after`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rebinds: u64,
    /// `load --h3 --flood`: the Initial flood sent beside the load; absent
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flood: Option<Flood>,
    /// `load --h3 --qlog DIR`: the qlog files written; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qlog: Option<Qlog>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The qlog files of `load --h3 --qlog DIR`: one per connection (warm-up
/// ones too) until a cap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qlog {
    /// The directory (`--qlog`).
    pub dir: String,
    /// Files written, one per connection.
    pub files: u64,
    /// Connections with no file: beyond `max_files`, after the byte cap
    /// was reached, or whose file could not be created.
    pub skipped: u64,
    /// Bytes written across the files.
    pub bytes: u64,
    /// Files that stopped early, at a whole record, at the byte cap.
    pub truncated: u64,
    /// `--qlog-max-files`.
    pub max_files: u64,
    /// `--qlog-max-bytes`.
    pub max_bytes: u64,
}

impl Qlog {
    /// One line for a summary: where the files are, and what the caps left
    /// out.
    pub fn summary(&self) -> String {
        format!(
            "qlog: {} files ({} bytes) in {}; {} connections not logged (caps: {} files, {} bytes; {} files cut at the byte cap)",
            self.files,
            self.bytes,
            self.dir,
            self.skipped,
            self.max_files,
            self.max_bytes,
            self.truncated
        )
    }
}

/// A bounded QUIC flood sent beside the load (`load --h3 --flood KIND
/// --flood-rate N`): Initials that never continue, junk datagrams, or
/// PING-only clients, from loopback source ports; counted as sent, and
/// what came back, as received.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Flood {
    /// `valid`, `junk`, `mixed` or `ping-only` (`--flood`).
    pub kind: String,
    /// Initials (or, for `ping-only`, new clients) per second asked for
    /// (`--flood-rate`).
    pub rate: u32,
    /// UDP sockets (source ports) the flood sent from.
    pub sockets: u32,
    /// Seconds from the flood's first send to its last.
    pub elapsed_s: f64,
    /// Real ClientHellos (quinn's first flight, same TLS config as the
    /// load) that were never continued.
    pub valid: u64,
    /// Datagrams the valid Initials took (two per ClientHello that does
    /// not fit one, as with an X25519MLKEM768 key share).
    pub valid_datagrams: u64,
    /// Datagrams of random bytes, Initial-sized.
    pub junk_random: u64,
    /// Datagrams with an Initial's long header and a garbage payload.
    pub junk_header: u64,
    /// Datagrams the kernel would not send.
    pub send_errors: u64,
    /// What came back to the flood's sockets (not for `ping-only`).
    #[serde(default)]
    pub received: FloodReceived,
    /// `ping-only`: what the PING-only clients did; absent for the other
    /// kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_only: Option<PingOnly>,
}

/// The datagrams the server sent back to a flood's sockets, by the QUIC
/// packet type of their first packet (long header type, or a short
/// header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodReceived {
    /// Datagrams received.
    pub datagrams: u64,
    /// Their bytes (UDP payload).
    pub bytes: u64,
    /// Retry packets (the server asked the address to prove itself and
    /// kept no state).
    pub retry: u64,
    /// Initial packets (the server began a handshake: its ServerHello, or
    /// a CONNECTION_CLOSE refusing one).
    pub initial: u64,
    /// Handshake packets (the rest of the server's first flight).
    pub handshake: u64,
    /// Version Negotiation packets.
    pub version_negotiation: u64,
    /// Anything else: short headers (the server's 1-RTT packets, such as
    /// its HTTP/3 control stream sent before the handshake completes, or
    /// a stateless reset).
    pub other: u64,
}

/// What PING-only clients did (`--flood ping-only`): each completes a
/// handshake, then sends only PINGs and never a request, until the flood
/// ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PingOnly {
    /// Clients started.
    pub clients: u64,
    /// Handshakes completed.
    pub connected: u64,
    /// Handshakes that failed (refused, timed out).
    pub failed: u64,
    /// Connections the server closed (or that timed out) before the flood
    /// ended: evicted at the limit, or closed at its request or
    /// keep-alive timeout.
    pub closed_by_server: u64,
    /// Median seconds a connected client was held before the server closed
    /// it (of those it closed).
    pub held_p50_s: Option<f64>,
    /// PING frames the clients sent.
    pub pings: u64,
}

/// One handshake kind over QUIC: how many, how long, and what it put on
/// the wire (client-observed, quinn's connection statistics when the
/// handshake completed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportPhase {
    /// Handshakes of this kind in the window.
    pub count: u64,
    /// Median µs from the connection's start to handshake completion.
    pub handshake_p50_us: Option<u64>,
    /// Median µs from the connection's start to the first response byte.
    pub first_byte_p50_us: Option<u64>,
    /// Mean UDP payload bytes the client sent until the handshake completed.
    pub bytes_out: Option<f64>,
    /// Mean UDP payload bytes the client received until then.
    pub bytes_in: Option<f64>,
    /// Mean datagrams the client sent until then.
    pub datagrams_out: Option<f64>,
    /// Mean QUIC packets the client sent until then (one datagram can
    /// carry several: an Initial, a Handshake and a 1-RTT packet). Absent
    /// in reports written before it was added.
    #[serde(default)]
    pub packets_out: Option<f64>,
    /// Mean datagrams the client received until then.
    pub datagrams_in: Option<f64>,
}
