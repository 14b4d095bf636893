//! Admission control for new TLS handshakes (`serve --admission`).
//!
//! Seed 002 shows a TLS server collapsing once more clients ask for full
//! handshakes than its CPU can serve: queues grow, clients time out and
//! reconnect, and every reconnection is one more full handshake. A
//! resumed handshake costs a small fraction of a full one, so the cheapest
//! way to keep the server near its knee is to refuse *new full* handshakes
//! early and keep serving the clients that resume.
//!
//! The decision is made on the ClientHello alone, read with `tlslab-wire`
//! before rustls sees it, so a shed costs no public-key work:
//!
//! - **resume**: the ClientHello carries a session this node can resume,
//!   checked cheaply: a TLS 1.3 PSK identity or TLS 1.2 session ID present
//!   in the local session cache (with a Redis cache, after the prefetch put
//!   it there); a TLS 1.2 ticket or a stateless TLS 1.3 ticket whose key
//!   name is one of the ring's (`--ticket-keys`), or, with the process's
//!   own ticketer, whose keys rustls does not expose, any ticket of at
//!   least 44 bytes (name + nonce + tag). A TLS 1.3 ClientHello's legacy
//!   session ID is never a session when the server speaks TLS 1.3.
//! - **full**: anything else, including offers this node cannot resume.
//!
//! A ClientHello taken for a resumption that nonetheless ends as a full
//! handshake (a forged or stale ticket) is counted as `misclassified` and
//! charged to the full-handshake budget afterwards, so such offers cannot
//! bypass the limit for long.
//!
//! Modes:
//! - `static` (`--max-handshakes-in-flight N` alone): any handshake, full
//!   or resumed, is shed while N are in flight (like a `maxconn` that knows
//!   nothing of sessions); the comparison arm.
//! - `session`: resumptions are always admitted; full handshakes take a
//!   token from a bucket refilled at the controller's limit (full
//!   handshakes per second; unlimited until the first overload).
//!
//! The controller ([`Controller`]) ticks every 100 ms on three
//! signals (four over QUIC): the mean queueing delay of the new connections read in the
//! tick (how long their ClientHello waited in the kernel, accept queue
//! included, before a worker read it: the server's queue, timed from the
//! kernel's receive timestamp so that a slow client does not count; see
//! `queue.rs`; over QUIC, the time since the kernel received the datagram
//! that completed the ClientHello, the UDP socket's receive queue
//! included; see `quic::sniff`), the CPU saturation of the workers (the
//! CPU time they used plus the time they waited runnable for a CPU, from
//! schedstat, over a budget of `min(threads, CPUs)`: on a shared machine a
//! starved worker is saturated though it used less CPU), and the full
//! handshakes in flight (admitted resumptions, never shed, do not count);
//! over QUIC also the datagrams the kernel dropped at the socket's full
//! receive buffer. The server is overloaded when the queue delay exceeds
//! the target (or the QUIC socket dropped) while the CPU is busy (at least
//! `cpu_high`), or when more full handshakes are in flight than the cap.
//! It keeps *served*: the full handshakes completed (over
//! QUIC: whose server flight is made) per
//! second in the ticks that found the CPU saturated, smoothed over about
//! half a second (what the server has shown it serves beside its other
//! work; an idle tick measures only the demand). Overloaded: the limit is
//! lowered to served times `1 − (delay − target) / 1 s` clamped to
//! [0.5, 0.95], so that the queue beyond the target drains within a second
//! (Little's law); at most once per 500 ms (the queue needs time to
//! drain), and never below a quarter of served's peak (decaying 2 % a
//! second), so that shed clients retrying at once cannot spiral the limit
//! down to nothing. Not overloaded: the limit returns at once to served
//! (shedding below it loses work the server can do, and the shed clients
//! come back as retries), and while it still sheds it grows by 10 % a tick
//! (at least 5 % of the limit set at the last decrease).
//! Every figure it uses is exported on `/metrics`.

mod admit;
mod classify;
mod controller;
mod gate;
mod tick;

pub use classify::HelloKind;
pub use controller::{Controller, Signals};
pub use gate::{AdmissionStats, Decisions};

pub(crate) use admit::admit;
pub(crate) use classify::{Resumable, classify_psk};
pub(crate) use gate::{Admission, Door, InFlight, Verdict};
pub(crate) use tick::control;
