//! One request's measurements, as the load engine produces them.

use serde::{Deserialize, Serialize};

/// Which sort of TLS handshake a connection made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandshakeKind {
    /// A full handshake (with or without a HelloRetryRequest).
    Full,
    /// A resumed handshake: the server accepted the offered session.
    Resumed,
}

impl HandshakeKind {
    /// The name used in the CSV log and the report (`full`, `resumed`).
    pub fn name(self) -> &'static str {
        match self {
            HandshakeKind::Full => "full",
            HandshakeKind::Resumed => "resumed",
        }
    }
}

/// What happened to TLS 1.3 early data (0-RTT) on a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EarlyData {
    /// No early data was sent.
    #[default]
    NotSent,
    /// The request went out as early data and the server accepted it.
    Accepted,
    /// The request went out as early data, the server refused it, and the
    /// client sent it again after the handshake.
    Rejected,
}

impl EarlyData {
    /// The CSV spelling: empty, `accepted` or `rejected`.
    pub fn name(self) -> &'static str {
        match self {
            EarlyData::NotSent => "",
            EarlyData::Accepted => "accepted",
            EarlyData::Rejected => "rejected",
        }
    }
}

/// The TLS handshake of a connection, as measured by the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeRecord {
    /// Microseconds from the end of the TCP connect until the client saw the
    /// handshake complete.
    pub duration_us: u64,
    /// Full or resumed, as the server decided.
    pub kind: HandshakeKind,
    /// Returns true if and only if the server answered with a
    /// HelloRetryRequest (one extra round trip).
    pub hrr: bool,
    /// Returns true if and only if the client offered a stored session.
    pub offered: bool,
    /// Negotiated protocol version (`TLSv1.3`).
    pub version: String,
    /// Negotiated cipher suite (`TLS13_AES_128_GCM_SHA256`).
    pub suite: String,
    /// Negotiated key-exchange group, empty when none was used (a TLS 1.2
    /// resumption).
    pub group: String,
    /// Bytes the client wrote to the socket during the handshake.
    pub bytes_out: u64,
    /// Bytes the client read from the socket during the handshake.
    pub bytes_in: u64,
    /// Read-after-write turnarounds during the handshake: 1 for a TLS 1.3
    /// full handshake, 2 for a TLS 1.2 full one, 1 for resumptions.
    pub round_trips: u32,
    /// What happened to early data.
    pub early_data: EarlyData,
    /// TLS records, certificate sizes and TCP segments of the handshake
    /// (absent from records written before tlslab measured them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<HandshakeWire>,
}

/// What a handshake put on the wire beyond its bytes, client-observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeWire {
    /// TLS records the client wrote during the handshake.
    pub records_out: u32,
    /// TLS records the client read during the handshake.
    pub records_in: u32,
    /// The server's Certificate message body, uncompressed: what the
    /// decompressor produced, or for an uncompressed certificate its length
    /// from the chain received (1 + 3 + Σ (3 + certificate + 2) in TLS 1.3).
    /// Absent on resumption (no certificate).
    pub cert_bytes: Option<u32>,
    /// The compressed certificate data the server sent (RFC 8879), when it
    /// compressed.
    pub cert_compressed_bytes: Option<u32>,
    /// The compression algorithm (`brotli`, `zlib`), when it compressed.
    pub cert_compression: Option<String>,
    /// The socket's TCP_INFO when the handshake completed.
    pub tcp: Option<HandshakeTcp>,
}

/// TCP counts of a handshake from the client socket's TCP_INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeTcp {
    /// Data segments the client received until the handshake completed:
    /// for a full TLS 1.3 handshake, the server's first flight.
    pub data_segs_in: u32,
    /// Data segments the client sent until then.
    pub data_segs_out: u32,
    /// The client's estimate of the server's MSS (`tcpi_rcv_mss`).
    pub rcv_mss: u32,
    /// Retransmissions by the client until then.
    pub total_retrans: u32,
}

impl HandshakeTcp {
    /// Linux's initial congestion window, in segments (RFC 6928).
    pub const INITIAL_WINDOW: u32 = 10;

    /// Round trips slow start needs to deliver `segments` from an initial
    /// window of `iw` segments that doubles each round trip (no loss, no
    /// receive-window limit): 1 up to `iw`, 2 up to 3 × `iw`, 3 up to 7 × `iw`.
    pub fn slow_start_rounds(segments: u32, iw: u32) -> u32 {
        let iw = iw.max(1);
        let mut sent = 0u64;
        let mut cwnd = u64::from(iw);
        let mut rounds = 0;
        while sent < u64::from(segments.max(1)) {
            sent += cwnd;
            cwnd *= 2;
            rounds += 1;
        }
        rounds
    }
}

/// Everything measured for one request. A connection's first request also
/// carries the connection's connect time and handshake.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Microseconds from the start of the measurement window to the start of
    /// this request (for a connection's first request: to the start of the
    /// connection).
    pub t_start_us: u64,
    /// The client (0-based) that made the request.
    pub client: u32,
    /// The connection of that client (0-based, counting every attempt).
    pub conn: u64,
    /// The request's place on its connection (0-based).
    pub req_on_conn: u32,
    /// Index of the target URL in the run's target list.
    pub target: u32,
    /// HTTP status, when a response head arrived.
    pub status: Option<u16>,
    /// Error kind (`refused`, `timeout`, `reset`, `closed`, `io`, `dns`,
    /// `tls_alert_<name>`, `tls_<error>`, `http_<status>`, `http_protocol`),
    /// or `None` for a successful request.
    pub error: Option<String>,
    /// TCP connect time, on a connection's first request.
    pub connect_us: Option<u64>,
    /// The TLS handshake, on the first request of a TLS connection whose
    /// handshake completed.
    pub handshake: Option<HandshakeRecord>,
    /// Time to first byte: request write start → response head received.
    pub ttfb_us: Option<u64>,
    /// Response head → last body byte.
    pub transfer_us: Option<u64>,
    /// Request start → last body byte (or → failure). For a connection's
    /// first request it starts at the connection start, so it includes
    /// connect and handshake.
    pub total_us: u64,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Returns true if and only if this request repeats one that failed
    /// (`--retry-on-failure`).
    #[serde(default)]
    pub retry: bool,
}

impl RequestRecord {
    /// Returns true if and only if a complete response arrived (any status).
    pub fn completed(&self) -> bool {
        self.status.is_some() && self.transfer_us.is_some()
    }
}
