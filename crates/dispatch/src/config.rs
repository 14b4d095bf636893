//! The dispatcher's configuration: the routing [`Policy`], the backends
//! and their tags, bad-input and health-check choices, and the errors of
//! starting with them.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use tlslab_crypto::provider::node_tag_prefix;

use crate::{health, table};

/// How connections are spread over the backends.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Each node in turn (blind).
    RoundRobin,
    /// The node with the fewest open connections (blind).
    LeastConn,
    /// A uniformly random node (blind).
    Random,
    /// A hash of the client's IP address (breaks behind NAT and proxies).
    SourceIp,
    /// By the session the ClientHello tries to resume; else least-conn.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "By the session the ClientHello resumes (TLS 1.2 ID, TLS 1.2 ticket key name, TLS 1.3 PSK key name); else least-conn"
        )
    )]
    Session,
}

impl Policy {
    /// The policy's command-line and metric name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LeastConn => "least-conn",
            Policy::Random => "random",
            Policy::SourceIp => "source-ip",
            Policy::Session => "session",
        }
    }
}

/// What to do with a connection whose first bytes are not a valid
/// ClientHello. (One that stalls before finishing its ClientHello is
/// closed either way: see [`Config::hello_timeout`].)
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadInputAction {
    /// Forward it to the least-loaded node, bytes untouched.
    Forward,
    /// Close it.
    Close,
}

/// How a node's health is checked.
#[derive(Clone, Debug, PartialEq)]
pub enum HealthCheck {
    /// A TCP connect succeeds.
    Tcp,
    /// A full TLS handshake succeeds (a liveness check; the certificate is
    /// verified only if the check was built with a CA).
    Tls(health::TlsCheck),
    /// No checks: nodes are always up (a failed connect fails over to
    /// another node for that connection only).
    Off,
}

/// One backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Its address.
    pub addr: SocketAddr,
    /// Prefixes of tickets / PSK identities / session IDs it issues (its
    /// ticket key names).
    pub tags: Vec<Vec<u8>>,
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// `ADDR` or `ADDR=PREFIX[,PREFIX…]`, each PREFIX hex or `tag:TAG`
    /// (the prefix of `serve --node-tag TAG`, [`node_tag_prefix`]).
    fn from_str(s: &str) -> Result<Backend, String> {
        let (addr, tags) = match s.split_once('=') {
            Some((a, t)) => (a, Some(t)),
            None => (s, None),
        };
        let addr: SocketAddr = addr.parse().map_err(|e| {
            format!("backend {addr:?}: {e}; give IP:PORT, for example 127.0.0.1:8443")
        })?;
        let mut out = Vec::new();
        for t in tags.into_iter().flat_map(|t| t.split(',')) {
            if let Some(name) = t.strip_prefix("tag:") {
                if name.is_empty() {
                    return Err("backend tag:TAG needs a name, as given to serve --node-tag".into());
                }
                out.push(node_tag_prefix(name).to_vec());
                continue;
            }
            let b = decode_hex(t).ok_or_else(|| {
                format!("backend tag {t:?} is not hex; give an even number of hex digits (1 to 32 bytes), for example 127.0.0.1:8443=6e31")
            })?;
            if b.is_empty() || b.len() > table::MAX_KEY_LEN {
                return Err(format!(
                    "backend tag {t:?} must be 1 to 32 bytes (2 to 64 hex digits)"
                ));
            }
            out.push(b);
        }
        Ok(Backend { addr, tags: out })
    }
}

/// Decodes a hex string.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The dispatcher's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The nodes.
    pub backends: Vec<Backend>,
    /// The policy.
    pub policy: Policy,
    /// How long a learned mapping lives (match the nodes' cache timeout).
    pub session_timeout: Duration,
    /// How many mappings are kept at most.
    pub max_sessions: NonZeroUsize,
    /// How long a client may take to send its whole ClientHello; a client
    /// that has not finished by then is closed, whatever [`Config::bad_input`]
    /// says (a slowloris is not a protocol to forward).
    pub hello_timeout: Duration,
    /// A proxied connection on which no byte moved, in either direction,
    /// for this long is closed ([`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// What to do with bad input.
    pub bad_input: BadInputAction,
    /// Send a PROXY protocol v2 header to backends.
    pub send_proxy_v2: bool,
    /// Health-check method.
    pub health_check: HealthCheck,
    /// Health-check interval.
    pub health_interval: Duration,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics: Option<SocketAddr>,
}

/// Errors starting the dispatcher.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}; pick a free address or port")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// No backend was given.
    #[error("no backends; give at least one --backend ADDR")]
    NoBackends,
    /// More backends than a node index holds.
    #[error("at most 65535 backends (got {count})")]
    TooManyBackends {
        /// How many were given.
        count: usize,
    },
}

impl Error {
    /// True if the configuration is unusable (a usage error, exit 2),
    /// false if starting failed at run time (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::NoBackends | Error::TooManyBackends { .. })
    }
}

/// The default [`Config::idle_timeout`]: nginx stream's `proxy_timeout`
/// (10 minutes). HAProxy's `timeout client`/`timeout server` have no
/// default and are usually set to 30 s to a few minutes; the nodes'
/// own timeouts (`serve --keepalive-timeout`) normally end an idle HTTPS
/// connection long before this one does.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest ClientHello buffered before routing (bytes, records
/// included); longer ones count as malformed.
pub const MAX_HELLO: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_flags_parse() {
        let b: Backend = "127.0.0.1:9=6e31,00ff".parse().unwrap();
        assert_eq!(b.tags, vec![b"n1".to_vec(), vec![0, 0xff]]);
        assert!("127.0.0.1:9=6".parse::<Backend>().is_err());
        assert!("localhost:9".parse::<Backend>().is_err());
        assert!("127.0.0.1:9".parse::<Backend>().unwrap().tags.is_empty());
        let b: Backend = "127.0.0.1:9=tag:n1,00".parse().unwrap();
        assert_eq!(b.tags, vec![vec![0x67, 0x6b, 0x8b, 0xb8], vec![0]]);
        assert!("127.0.0.1:9=tag:".parse::<Backend>().is_err());
    }
}
