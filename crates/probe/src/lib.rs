//! `tlslab probe`: seed 003's WebPerf for today's TLS.
//!
//! This crate is for watching a few HTTPS sites over days, one round at a
//! time: for each target it times DNS, TCP connect, a *full* handshake from
//! a fresh client, a GET on it, and then a second connection that offers
//! the session of the first, a *resumed* handshake (accepted or not), and a
//! GET on that ([`probe_target`]). Each round's [`Sample`]s are committed to
//! a [`Store`] in one transaction (SQLite with WAL, or PostgreSQL), so a killed
//! probe loses no committed round; with PostgreSQL, rounds that arrive while
//! the server is down wait in a bounded queue. [`report`] turns stored samples into seed 003's
//! figures: per-phase statistics, 10 ms histograms, Table 2 (savings of the
//! cached handshake) and a daily time series; [`svg`] draws one chart per
//! target.
//!
//! Over HTTP/3 ([`Transports`]) there is no connect: a probe times a fresh
//! client's full QUIC handshake and a GET after it (1-RTT), then a second
//! connection that offers the ticket (a resumed handshake) and sends its
//! GET in 0-RTT, timed from the first packet to the response's first byte
//! ([`quic`]). `both` probes TCP, then HTTP/3 at the endpoint the TCP
//! response's `Alt-Svc` names. Each sample carries its [`Transport`], and
//! the report and the exporter keep them apart.
//!
//! It is not a load generator (that is `tlslab-load`, whose TLS client
//! configuration, round-trip counter and error classes it reuses) and not a
//! WAN emulator (that is `tlslab relay`).

mod body;
mod config;
mod error;
mod failed;
pub mod quic;
mod round;
mod sample;
mod schedule;
mod store;
mod timed;
mod transport;

pub mod exporter;
pub mod report;
pub mod svg;

pub use config::{ProbeConfig, QuicTls, Transports, parse_target};
pub use error::Error;
pub use round::probe_target;
pub use sample::{Phase, Sample, Transport};
pub use schedule::{Schedule, run};
pub use store::{SqliteStore, Store, StoreError, open as open_store, postgres};
pub use transport::{discover, h3_endpoint, probe_each};
