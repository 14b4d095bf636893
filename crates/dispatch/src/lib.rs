//! `tlslab dispatch`: a TLS-session-aware L4 load balancer, for TLS over
//! TCP and (`--udp`, [`udp`]) for QUIC.
//!
//! It reads the cleartext parts of each TLS handshake with `tlslab-wire`,
//! never terminates TLS, and routes a ClientHello that tries to resume a
//! session to the node that holds it (seed 000's cluster result, Fig. 9):
//! - a TLS 1.2 session ID, learned from the ServerHello that issued it;
//! - a TLS 1.2 ticket, by its 16-byte key name (RFC 5077), learned from
//!   the cleartext NewSessionTicket;
//! - a TLS 1.3 PSK identity, by the same key name, learned from the
//!   ServerHello that accepts a PSK (its `selected_identity` is cleartext)
//!   or given per backend (`--backend ADDR=HEXPREFIX`: the node's ticket
//!   key names, such as those of its `tlslab serve --ticket-keys` file);
//! - any of these by a configured node prefix (`--backend ADDR=HEX` or
//!   `ADDR=tag:TAG`): `tlslab serve --node-tag TAG` starts its TLS 1.2
//!   session IDs and stateful TLS 1.3 tickets with
//!   [`node_tag_prefix`]`(TAG)`, so even a session the dispatcher never saw
//!   issued (single-use stateful tickets, a restarted dispatcher) routes on
//!   first use.
//!
//! Blind baselines (`round-robin`, `least-conn`, `random`, `source-ip`)
//! are there to be measured against. Learned mappings live in a bounded,
//! expiring O(1) [`table::SessionTable`]. Health checks, PROXY protocol v2,
//! bad-input handling and a Prometheus `/metrics` endpoint complete it.
//!
//! Over UDP the same policies and table route QUIC: by the QUIC-LB server
//! ID in a connection ID (`cid`), and by the PSK identity of a ClientHello
//! read from the client's decrypted Initials (`session`), against the
//! 4-tuple hash (`blind`).

mod config;
mod dispatcher;
pub mod health;
mod hello;
pub mod inspect;
pub mod metrics;
pub mod proxy_v2;
mod route;
mod splice;
pub mod table;
pub mod udp;

pub use config::{
    Backend, BadInputAction, Config, DEFAULT_IDLE_TIMEOUT, DEFAULT_UDP_IDLE_TIMEOUT, Error,
    HealthCheck, MAX_HELLO, Policy, Transport, decode_hex,
};
pub use dispatcher::Dispatcher;
#[cfg(any(test, feature = "fuzzing"))]
pub use hello::fuzz_entry;
pub use tlslab_crypto::provider::node_tag_prefix;
