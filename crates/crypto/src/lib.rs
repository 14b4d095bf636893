//! Cryptography for tlslab: which rustls `CryptoProvider` a run uses, the
//! certificates it presents, and where TLS sessions are stored.
//!
//! This crate is for:
//! - [`provider`]: the one module that touches rustls's `CryptoProvider` API
//!   (rustls 0.24 changes it). It turns `--tls`, `--suites` and `--groups`
//!   into a provider and a list of protocol versions, and names suites and
//!   groups the way the CLI spells them.
//! - [`meter`]: a provider wrapper that counts calls, nanoseconds and bytes
//!   per operation, the ablations that replace one TLS stage at a time with
//!   a same-size no-op, and an in-memory client/server pump for tests and
//!   benches. Like `provider`, it touches rustls's provider API directly.
//! - [`pki`]: generating a CA and server chain with rcgen (`tlslab certs`),
//!   and loading PEM chains, keys and trust roots with errors that say the fix.
//! - [`store`]: a bounded, TTL'd, sharded server session cache with hit/miss/
//!   eviction counters, a client session store whose resumption offers the
//!   load engine switches per connection, and a ticketer that counts tickets.
//! - [`keylog`]: NSS key logs (`--keylog`, `SSLKEYLOGFILE`) for decrypting
//!   captures with Wireshark/tshark.
//! - [`compress`]: RFC 8879 certificate compression (`--cert-compression`)
//!   and the sizes of each decompressed certificate message.
//! - [`ticket_keys`]: ticket keys a cluster shares (nginx's 80-byte key
//!   layout), a ring whose first key encrypts and all decrypt, sealed with
//!   AES-256-GCM; its `ProducesTickets` impl lives in [`provider`].
//! - [`quic`]: QUIC-LB connection IDs (AES-128-ECB from aws-lc-rs) and a
//!   client's Initial packets opened with the keys of their DCID (rustls).
//!
//! It is not for I/O beyond reading and writing PEM files, and it does not
//! parse TLS on the wire (that is `tlslab-wire`; `meter::mem` only splits
//! in-memory bytes into records for its tests and benches).

pub mod compress;
pub mod keylog;
pub mod meter;
pub mod pki;
pub mod provider;
pub mod quic;
pub mod store;
pub mod ticket_keys;

/// Errors from building providers, generating or loading key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name given for a version, suite, group or key type is unknown.
    #[error("{what} '{name}' is not supported; choose one of: {choices}")]
    UnknownName {
        /// What kind of name ("TLS version", "cipher suite", ...).
        what: &'static str,
        /// The name the user gave.
        name: String,
        /// The accepted names, comma separated.
        choices: String,
    },
    /// The options leave nothing that can be negotiated.
    #[error("{0}")]
    Incompatible(String),
    /// A PEM file is missing, unreadable or holds the wrong thing.
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it and how to fix it.
        problem: String,
    },
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(String),
    /// rustls rejected a configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
