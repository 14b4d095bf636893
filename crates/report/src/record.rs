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
}

/// Everything measured for one request. A connection's first request also
/// carries the connection's connect time and handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
