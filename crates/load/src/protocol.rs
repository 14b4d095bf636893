//! The protocols a run can speak beyond HTTP/1.1, and their options:
//! HTTP/2 ([`Http2`], `--h2`) and HTTP/3 ([`Http3`], `--h3`, with the
//! bounded flood it may send beside the load). A [`LoadConfig`] names at
//! most one; [`crate::run`] picks the engine from it, so callers never
//! switch on the transport themselves.
//!
//! [`LoadConfig`]: crate::LoadConfig

use tlslab_runtime::qlog::QlogOptions;

/// The highest flood rate, Initials per second.
pub const MAX_RATE: u32 = 100_000;
/// The most Initials one flood sends, whatever its rate and duration.
pub const MAX_INITIALS: u64 = 10_000_000;
/// The highest rate of new PING-only clients, per second.
pub const MAX_PING_RATE: u32 = 1000;
/// The most PING-only clients one flood starts.
pub const MAX_PING_CLIENTS: u64 = 10_000;

/// HTTP/2 load (`--h2`): each closed-loop client keeps one connection at a
/// time, offering ALPN `h2` only over TLS (a server that selects anything
/// else fails the connection as `alpn_not_h2`) and speaking HTTP/2 with
/// prior knowledge (h2c) over `http://`. Up to `max_concurrent_streams`
/// streams are in flight on the connection, as h2load's `-m`;
/// [`LoadConfig::requests_per_conn`](crate::LoadConfig::requests_per_conn) then counts streams per connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http2 {
    /// Streams in flight per connection (`-m`), at least 1.
    pub max_concurrent_streams: u32,
}

/// HTTP/3 load (`--h3`, [`LoadConfig::http3`](crate::LoadConfig::http3)): its options
/// beyond the rest of [`LoadConfig`](crate::LoadConfig).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Http3 {
    /// Streams in flight per connection (`-m`), at least 1.
    pub max_concurrent_streams: u32,
    /// `--flood KIND --flood-rate N`: a bounded flood from other source
    /// ports beside the load, for as long as the load runs.
    pub flood: Option<FloodPlan>,
    /// `--qlog DIR`: one qlog file per connection (warm-up ones too),
    /// `DIR/client-<client>-<connection>.sqlog`, up to the caps.
    pub qlog: Option<QlogOptions>,
    /// `--quic-new-socket`: each connection after a client's first from a
    /// new UDP socket (a new source port), as browsers open one per
    /// connection; else one socket per client for all its connections.
    pub new_socket: bool,
    /// `--quic-rebind-after N`: each client moves to a new UDP socket once,
    /// after N of its requests succeeded, with its connection open (a NAT
    /// rebinding, as quinn's `Endpoint::rebind` makes it).
    pub rebind_after: Option<u64>,
}

/// The flood `load --h3 --flood` sends beside the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloodPlan {
    /// What it sends (`--flood`).
    pub kind: FloodKind,
    /// Initials, or new PING-only clients, per second (`--flood-rate`).
    pub rate: u32,
    /// At most this many (`--flood-max`); default: the rate times the
    /// run's duration and warm-up, within [`FloodKind::max_count`].
    pub max: Option<u64>,
    /// Whether the target may be an address that is not loopback
    /// (`--flood-allow-remote`).
    pub allow_remote: bool,
}

impl Http3 {
    /// HTTP/3 with `max_concurrent_streams` streams per connection and
    /// nothing else: no flood, no qlog, one socket per client.
    pub fn new(max_concurrent_streams: u32) -> Self {
        Http3 {
            max_concurrent_streams,
            flood: None,
            qlog: None,
            new_socket: false,
            rebind_after: None,
        }
    }
}

/// What the flood sends (`load --h3 --flood KIND`).
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FloodKind {
    /// Real ClientHellos, never continued.
    Valid,
    /// Random bytes and Initial headers with garbage payloads.
    Junk,
    /// Valid and junk in turn.
    #[default]
    Mixed,
    /// Clients that complete a handshake, then send only PINGs.
    #[cfg_attr(feature = "clap", value(name = "ping-only"))]
    PingOnly,
}

impl FloodKind {
    /// The kind's name in reports and on the command line: `valid`,
    /// `junk`, `mixed` or `ping-only`.
    pub fn name(self) -> &'static str {
        match self {
            FloodKind::Valid => "valid",
            FloodKind::Junk => "junk",
            FloodKind::Mixed => "mixed",
            FloodKind::PingOnly => "ping-only",
        }
    }

    /// The highest rate of this kind: Initials, or new PING-only clients,
    /// per second.
    pub fn max_rate(self) -> u32 {
        match self {
            FloodKind::PingOnly => MAX_PING_RATE,
            _ => MAX_RATE,
        }
    }

    /// The most Initials (or PING-only clients) a flood of this kind sends.
    pub fn max_count(self) -> u64 {
        match self {
            FloodKind::PingOnly => MAX_PING_CLIENTS,
            _ => MAX_INITIALS,
        }
    }
}
