//! What one probe of one target over one [`Transport`] measured
//! ([`Sample`]), by [`Phase`]: the record the store keeps, the report reads
//! and the exporter shows.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What a sample's connections ran over.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// TCP and TLS, HTTP/1.1: DNS, connect, handshake, GET.
    #[default]
    Tcp,
    /// QUIC and HTTP/3: no connect; the handshake is QUIC's (TLS 1.3
    /// inside it), and the resumed connection sends its GET in 0-RTT.
    H3,
}

impl Transport {
    /// The name stored in the database and used in output and labels.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::H3 => "h3",
        }
    }

    /// The transport a stored name says (`None`: unknown).
    pub fn from_name(name: &str) -> Option<Transport> {
        match name {
            "tcp" => Some(Transport::Tcp),
            "h3" => Some(Transport::H3),
            _ => None,
        }
    }
}

/// The timed phases of a sample, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Name resolution.
    Dns,
    /// TCP connect of the first connection (none over QUIC).
    Connect,
    /// The full handshake (fresh client, no session); over QUIC, from the
    /// first Initial to the handshake's completion.
    TlsFull,
    /// The handshake of the second connection, offering the first's session.
    TlsResumed,
    /// Request written to the first response byte (first connection;
    /// over QUIC, a 1-RTT request after the handshake).
    Ttfb,
    /// Request written to the last response byte (first connection): seed
    /// 003's "HTTP GET".
    Get,
    /// Over QUIC only: from the resumed connection's first packet to the
    /// first byte of the response to the GET it sent in 0-RTT.
    ZeroRttTtfb,
    /// DNS start to the last byte of the first connection's response.
    Total,
}

impl Phase {
    /// Every phase.
    pub const ALL: [Phase; 8] = [
        Phase::Dns,
        Phase::Connect,
        Phase::TlsFull,
        Phase::TlsResumed,
        Phase::Ttfb,
        Phase::Get,
        Phase::ZeroRttTtfb,
        Phase::Total,
    ];

    /// The name used in output and metrics labels over TCP.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Dns => "dns",
            Phase::Connect => "connect",
            Phase::TlsFull => "tls_full",
            Phase::TlsResumed => "tls_resumed",
            Phase::Ttfb => "ttfb",
            Phase::Get => "get",
            Phase::ZeroRttTtfb => "get_0rtt_first_byte",
            Phase::Total => "total",
        }
    }

    /// The name over `transport`: over HTTP/3 the handshakes are QUIC's
    /// and the GETs say which flight their request left in.
    pub fn label(self, transport: Transport) -> &'static str {
        match (transport, self) {
            (Transport::H3, Phase::TlsFull) => "quic_full",
            (Transport::H3, Phase::TlsResumed) => "quic_resumed",
            (Transport::H3, Phase::Ttfb) => "ttfb_1rtt",
            (Transport::H3, Phase::Get) => "get_1rtt",
            _ => self.name(),
        }
    }
}

/// One probe of one target. Durations are microseconds; a phase that did
/// not run (an earlier one failed) is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The target URL as given.
    pub target: String,
    /// What the connections ran over (stored; `tcp` in databases written
    /// before HTTP/3).
    #[serde(default)]
    pub transport: Transport,
    /// When the probe started, in milliseconds since the Unix epoch.
    pub started_at_ms: i64,
    /// Name resolution.
    pub dns_us: Option<i64>,
    /// TCP connect (first connection; none over QUIC).
    pub connect_us: Option<i64>,
    /// Full handshake.
    pub tls_full_us: Option<i64>,
    /// Request to first response byte (first connection).
    pub ttfb_us: Option<i64>,
    /// Request to last response byte (first connection).
    pub get_us: Option<i64>,
    /// DNS start to last byte (first connection).
    pub total_us: Option<i64>,
    /// HTTP status of the first connection's GET.
    pub status: Option<u16>,
    /// Body bytes of the first connection's GET response, counted as they
    /// stream (never held whole). Shown and exported, not stored in the
    /// database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<i64>,
    /// TCP connect of the second connection.
    pub resumed_connect_us: Option<i64>,
    /// The second connection's handshake.
    pub tls_resumed_us: Option<i64>,
    /// Request to last response byte on the second connection.
    pub resumed_get_us: Option<i64>,
    /// Whether the second handshake offered a session (false: the server
    /// issued none on the first connection).
    pub resumption_offered: Option<bool>,
    /// Whether the server accepted the offered session.
    pub resumption_accepted: Option<bool>,
    /// Over QUIC: from the resumed connection's first packet to the first
    /// byte of the response to its 0-RTT GET (accepted early data only).
    #[serde(default)]
    pub zero_rtt_ttfb_us: Option<i64>,
    /// Over QUIC: whether the server accepted the resumed connection's
    /// early data (`None`: none was sent, the ticket allowing none).
    #[serde(default)]
    pub early_data_accepted: Option<bool>,
    /// Negotiated TLS version (`1.2`, `1.3`), of the full handshake.
    pub version: Option<String>,
    /// Negotiated cipher suite.
    pub suite: Option<String>,
    /// Negotiated key-exchange group (none for a TLS 1.2 resumption).
    pub group: Option<String>,
    /// Negotiated ALPN protocol.
    pub alpn: Option<String>,
    /// The leaf certificate's not-after, in seconds since the Unix epoch.
    pub cert_not_after: Option<i64>,
    /// Certificates the server sent.
    pub chain_len: Option<i64>,
    /// Socket bytes (both ways) of the full handshake.
    pub full_handshake_bytes: Option<i64>,
    /// Round trips of the full handshake.
    pub full_handshake_round_trips: Option<i64>,
    /// Socket bytes (both ways) of the second handshake.
    pub resumed_handshake_bytes: Option<i64>,
    /// Round trips of the second handshake.
    pub resumed_handshake_round_trips: Option<i64>,
    /// The `Alt-Svc` header of the first connection's response (TCP), as
    /// sent. Used to find the HTTP/3 endpoint, not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt_svc: Option<String>,
    /// The phase that failed, if any.
    pub error_phase: Option<String>,
    /// The error's class (`dns`, `timeout`, `connection_refused`, a TLS
    /// alert or rustls error name, `http_status`, ...).
    pub error_kind: Option<String>,
    /// The error's message.
    pub error: Option<String>,
}

impl Sample {
    /// The duration of `phase`, in microseconds.
    pub fn phase_us(&self, phase: Phase) -> Option<i64> {
        match phase {
            Phase::Dns => self.dns_us,
            Phase::Connect => self.connect_us,
            Phase::TlsFull => self.tls_full_us,
            Phase::TlsResumed => self.tls_resumed_us,
            Phase::Ttfb => self.ttfb_us,
            Phase::Get => self.get_us,
            Phase::ZeroRttTtfb => self.zero_rtt_ttfb_us,
            Phase::Total => self.total_us,
        }
    }

    pub(crate) fn fail(&mut self, phase: Phase, kind: impl Into<String>, msg: impl Into<String>) {
        self.error_phase = Some(phase.label(self.transport).to_string());
        self.error_kind = Some(kind.into());
        self.error = Some(msg.into());
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
