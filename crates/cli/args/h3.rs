//! The HTTP/3 (QUIC) flags of `serve` and `load`, flattened into their
//! arguments (their checks are `flags::h3`'s).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// `--quic-retry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Retry {
    /// No Retry packets.
    Off,
    /// A Retry before every handshake from an address not yet validated.
    Always,
    /// A Retry while half of --quic-max-connections are open.
    UnderLoad,
}

/// `--quic-admission`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuicPolicy {
    /// The listener's limits and --quic-retry only.
    Off,
    /// The connection limit is the policy (needs --quic-max-connections).
    Static,
    /// A Retry while --quic-retry-threshold handshakes from unvalidated addresses are half-open.
    RetryThreshold,
    /// Session-aware: needs --admission session.
    Session,
}

/// `--quic-shed-with`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuicShed {
    /// CONNECTION_CLOSE with CONNECTION_REFUSED.
    Refuse,
    /// A Retry packet (refused if the attempt already carries a Retry token).
    Retry,
    /// Drop the Initial silently.
    Ignore,
}

/// `serve --h3 [ADDR]` and its QUIC options.
#[derive(Clone, Debug, Args)]
pub struct ServeH3Args {
    /// Serve HTTP/3 over QUIC on this UDP address too (default with no
    /// value: the --https address and port, over UDP), with the TLS
    /// listener's certificate, session cache, tickets and metering provider
    /// (ALPN h3, TLS 1.3 only), the same content, and `Alt-Svc: h3=":PORT"`
    /// on every TCP response.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    pub h3: Option<String>,

    /// With --h3: close a QUIC connection that received nothing for this long.
    #[arg(long, value_name = "DURATION", value_parser = crate::parse::parse_duration)]
    pub quic_idle_timeout: Option<Duration>,

    /// With --h3: at most this many QUIC connections at once (default 10000). At the limit
    /// the longest-idle QUIC connection (no request stream open for at least 500 ms; a
    /// half-open handshake counts as idle since it began) is closed to make room, as over
    /// TCP; with none idle within 1 s, a new one is refused. --request-timeout and
    /// --keepalive-timeout apply to QUIC connections too (PINGs do not count).
    #[arg(long, value_name = "N")]
    pub quic_max_connections: Option<usize>,

    /// With --h3: the UDP socket's receive buffer, bytes [default: the system's,
    /// net.core.rmem_default]. An overloaded server's new attempts wait there; beyond it the
    /// kernel drops them unseen and each client waits its probe timeout (reported as receive
    /// drops in the summary, JSON and /metrics). A larger one turns drops into queueing delay,
    /// which --admission session sees, but lets a flood queue ahead of real clients. Past
    /// net.core.rmem_max it needs root (SO_RCVBUFFORCE); else the kernel's maximum is used,
    /// and the figure it granted is reported.
    #[arg(long, value_name = "BYTES")]
    pub quic_recv_buffer: Option<usize>,

    /// With --h3: address validation by Retry packets (default under-load: a Retry while half
    /// of --quic-max-connections are open, so Initials that never continue cannot fill the
    /// slots; always; off).
    #[arg(long, value_enum, value_name = "WHEN")]
    pub quic_retry: Option<Retry>,

    /// With --h3: NEW_TOKEN address-validation tokens sent to each client
    /// (0 to 16; default 2, quinn's). A token lets a returning client skip
    /// the Retry, and lifts the 3x anti-amplification limit from its first
    /// flight; 0 saves the server an HKDF and an AEAD seal per token.
    #[arg(long, value_name = "N")]
    pub quic_new_tokens: Option<u32>,

    /// With --h3: admission control of QUIC connection attempts, decided on the first Initial
    /// [default: --admission's: off, static or session]. `off`: the listener's limits and
    /// --quic-retry only; `static`: --quic-max-connections (required) is the policy; `retry-
    /// threshold`: a Retry to every unvalidated address while --quic-retry-threshold handshakes
    /// from unvalidated addresses are half-open (HAProxy's rule; replaces --quic-retry);
    /// `session`: --admission session over QUIC (one controller and budget for both
    /// transports): the ClientHello is read off the Initials, an attempt offering a PSK this
    /// node can resume is admitted, a new full handshake beyond the budget is shed as
    /// --quic-shed-with says.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub quic_admission: Option<QuicPolicy>,

    /// With --quic-admission session: what a shed attempt gets: `refuse` (default: a
    /// CONNECTION_CLOSE with CONNECTION_REFUSED), `retry` (a Retry packet; an attempt that
    /// already carries a Retry token is refused), `ignore` (the Initial is dropped; the client
    /// retransmits after its probe timeout).
    #[arg(long, value_enum, value_name = "refuse|retry|ignore")]
    pub quic_shed_with: Option<QuicShed>,

    /// With --h3: the retry-threshold policy's threshold, handshakes from unvalidated addresses
    /// half-open (at least 1); given alone it selects --quic-admission retry-threshold.
    #[arg(long, value_name = "N")]
    pub quic_retry_threshold: Option<u64>,

    /// With --h3: choose QUIC-LB connection IDs (draft-ietf-quic-load-balancers-21) that carry
    /// this node's server ID, so a balancer sharing the configuration (`tlslab dispatch --udp
    /// --quic-lb`) routes every packet of a connection here, across client address changes.
    /// CONFIG is `server-id=HEX,nonce-len=N,config-id=N[,key=HEX]`: the server ID (1 to 15
    /// bytes, its length that of the hex), the nonce length (4 to 18 bytes, server ID + nonce
    /// at most 19), the config rotation bits (0 to 6; 7 means unroutable) and an AES-128 key
    /// (32 hex digits). Without a key the server ID is in clear; with one, server ID + nonce of
    /// exactly 16 bytes are one AES block, any other length the 4-pass Feistel network. A
    /// packet whose connection ID does not carry this server ID is dropped without a
    /// stateless reset. Default: quinn's random 8-byte connection IDs.
    #[arg(long, value_name = "CONFIG")]
    pub quic_lb: Option<String>,

    #[command(flatten)]
    pub qlog: QlogArgs,
}

/// `load --h3`.
#[derive(Clone, Debug, Args)]
pub struct LoadH3Args {
    /// Speak HTTP/3 over QUIC (ALPN h3, TLS 1.3): closed loop (or open
    /// loop with --rate) over the https:// URLs of one origin, -m streams
    /// in flight per connection,
    /// --reuse and --early-data (0-RTT) as over TCP. The report adds a
    /// `transport` section (handshakes full / resumed / 0-RTT with times,
    /// bytes and datagrams each way).
    #[arg(long)]
    pub h3: bool,

    /// With --h3 and --confirm-flood: beside the load, flood the server's UDP port from other
    /// source ports, for the run's --warmup and --duration (a denial-of-service test of your own
    /// server). KIND: valid (real ClientHellos that never continue: half-open handshakes), junk
    /// (Initial-sized random bytes and Initial headers with garbage payloads), mixed (both in
    /// turn), ping-only (clients that complete a handshake, then send only a PING every second,
    /// never a request, until the run ends or the server closes them). Loopback targets only
    /// unless --flood-allow-remote. The report's `flood` lines (JSON `transport.flood`) say what
    /// was sent and what came back.
    #[arg(long, value_enum, value_name = "KIND")]
    pub flood: Option<tlslab_load::quic::flood::FloodKind>,

    /// With --flood: Initials per second (ping-only: new clients per second), e.g. 150 or
    /// 150/s; 1 to 100000 (ping-only: 1 to 1000) [default: 100].
    #[arg(long, value_name = "N/s", value_parser = crate::parse::parse_per_second)]
    pub flood_rate: Option<u32>,

    /// With --flood: send at most this many Initials (ping-only: start at most this many
    /// clients); 1 to 10000000 (ping-only: 1 to 10000) [default: the rate times --warmup plus
    /// --duration, within those bounds].
    #[arg(long, value_name = "N")]
    pub flood_max: Option<u64>,

    /// Confirm that --flood sends hostile traffic to the target: needed with --flood.
    #[arg(long)]
    pub confirm_flood: bool,

    /// Let --flood target an address that is not loopback (only a server you run and may flood).
    #[arg(long)]
    pub flood_allow_remote: bool,

    /// With --h3: open each connection after a client's first from a new UDP socket (a new
    /// source port), as browsers open one per QUIC connection. Default: one socket per client
    /// for all its connections (which a 4-tuple hash balancer keeps on one node).
    #[arg(long)]
    pub quic_new_socket: bool,

    /// With --h3: each client moves to a new UDP socket (a new source port) once, after N of
    /// its requests succeeded, keeping its connection open (a NAT rebinding: quinn's
    /// Endpoint::rebind); the connection survives only if the path to its server does. JSON
    /// `transport.rebinds` counts the moves.
    #[arg(long, value_name = "N")]
    pub quic_rebind_after: Option<u64>,

    #[command(flatten)]
    pub qlog: QlogArgs,
}

/// `--qlog DIR` and its caps (`serve --h3`, `load --h3`).
#[derive(Clone, Debug, Args)]
pub struct QlogArgs {
    /// With --h3: write one qlog file per QUIC connection into DIR (created if missing):
    /// `client-<client>-<connection>.sqlog` from `load`, `server-<connection id>.sqlog` from
    /// `serve` (the access log's connection id); a file of the same name is replaced. The
    /// format is JSON-SEQ (qlog 0.3, RFC 7464 records), as quinn writes it: every packet
    /// sent, received and lost, with its type (initial, handshake, 0RTT, 1RTT), number and
    /// size, and the congestion controller's metrics. Open the files in qvis
    /// (https://qvis.quictools.info; docs/debugging.md). Logging costs a write per event:
    /// leave it off when measuring. Connections beyond the caps are not logged; the report
    /// (`serve`: the shutdown summary) says how many files went where and how many were
    /// skipped.
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,

    /// With --qlog: at most N files (connections); later connections are not logged
    /// (counted). Default 100.
    #[arg(long, value_name = "N", requires = "qlog")]
    pub qlog_max_files: Option<u64>,

    /// With --qlog: at most SIZE bytes across all files (e.g. 64MiB, 1GB). A file that
    /// reaches it stops at a whole record, and no new file is started. Default 256MiB.
    #[arg(long, value_name = "SIZE", requires = "qlog")]
    pub qlog_max_bytes: Option<String>,
}
