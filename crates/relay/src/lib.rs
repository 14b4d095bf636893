//! tlslab-relay: a user-space WAN emulator for TCP, for machines whose
//! kernel has no netem (and for tests that must not need root).
//!
//! A [`Relay`] accepts clients, connects each to one upstream, and moves
//! the bytes of each direction through a [`Link`] that delays them as a
//! path would:
//! - **delay** per segment of at most [`MSS`] bytes, not per connection,
//!   so every flight of a handshake pays the round trip;
//! - **jitter**, uniform within ±jitter, never reordering (TCP delivers in
//!   order);
//! - **bandwidth**, a bottleneck that serialises segments at its rate (a
//!   token bucket with a one-segment burst);
//! - **loss**, emulated as the delay a retransmission adds, because TCP
//!   over loopback cannot lose: a lost segment and every one behind it
//!   arrive one RTO late.
//!
//! What it cannot emulate: the relay accepts the client's TCP connection
//! locally, so the **TCP handshake is not delayed** (a client measures a
//! loopback connect; add one RTT when comparing with a real path). The
//! delay starts with the first bytes, so a TLS handshake through it takes
//! its true number of round trips: one for TLS 1.3, two for TLS 1.2.
//! Congestion control, slow start and receive windows are the endpoints'
//! own over loopback; the relay's buffer ([`RelayStats`] counts what it
//! holds) bounds what is in flight at 4 MiB per direction, less with a
//! bandwidth ([`window`]: the bottleneck's delays plus one second), and at
//! [`RelayConfig::max_queued`] over all connections.
//!
//! A connection ends, and what it holds is dropped, as soon as either side
//! is gone (a reset, a failed write), or when nothing has moved either way
//! for [`RelayConfig::idle_timeout`].
//!
//! It is used by `tlslab relay`, by `tlslab load`/`probe` through it, and
//! by the experiments and tests that need a round-trip time. It does no
//! TLS and no HTTP, and measures nothing itself beyond its counters.

mod conditions;
mod error;
mod link;
mod relay;

pub use conditions::{Bandwidth, Conditions, RTO_MIN, parse_loss};
pub use error::Error;
pub use link::{Link, MSS, Span};
pub use relay::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_QUEUED, Relay, RelayConfig, RelayStats, RelayThread,
    parse_size, window,
};
