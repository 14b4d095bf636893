//! The dispatcher's configuration: the routing [`Policy`], the backends
//! and their tags, bad-input and health-check choices, and the errors of
//! starting with them.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use tlslab_crypto::provider::node_tag_prefix;
use tlslab_crypto::quic::LbParams;

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
    /// A hash of the client's address and port, the 4-tuple (blind; over
    /// UDP per datagram, so a client that changes port loses its node).
    Blind,
    /// QUIC only (`--udp`): by the QUIC-LB server ID in the Destination
    /// Connection ID; a client's first Initials by the 4-tuple hash.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "QUIC (--udp) only: by the QUIC-LB server ID in the connection ID; else the 4-tuple hash"
        )
    )]
    Cid,
    /// By the session the ClientHello tries to resume; else least-conn.
    /// Over QUIC, packets with a QUIC-LB connection ID go by its server
    /// ID first, as with `cid`.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "By the session the ClientHello resumes (TLS 1.2 ID, TLS 1.2 ticket key name, TLS 1.3 PSK key name; over QUIC read from the decrypted Initials), QUIC-LB connection IDs first; else least-conn"
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
            Policy::Blind => "blind",
            Policy::Cid => "cid",
            Policy::Session => "session",
        }
    }
}

/// What the dispatcher forwards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// TCP connections (TLS over TCP).
    #[default]
    Tcp,
    /// UDP datagrams (QUIC), `--udp`.
    Udp,
}

impl Transport {
    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
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
    /// Its QUIC-LB server ID (`sid:HEX`, `serve --quic-lb server-id=HEX`).
    pub server_id: Option<Vec<u8>>,
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// `ADDR` or `ADDR=PREFIX[,PREFIX…]`, each PREFIX hex or `tag:TAG`
    /// (the prefix of `serve --node-tag TAG`, [`node_tag_prefix`]), or
    /// `sid:HEX`, the node's QUIC-LB server ID.
    fn from_str(s: &str) -> Result<Backend, String> {
        let (addr, tags) = match s.split_once('=') {
            Some((a, t)) => (a, Some(t)),
            None => (s, None),
        };
        let addr: SocketAddr = addr.parse().map_err(|e| {
            format!("backend {addr:?}: {e}; give IP:PORT, for example 127.0.0.1:8443")
        })?;
        let mut out = Vec::new();
        let mut server_id = None;
        for t in tags.into_iter().flat_map(|t| t.split(',')) {
            if let Some(hex) = t.strip_prefix("sid:") {
                let b = decode_hex(hex).filter(|b| (1..=15).contains(&b.len())).ok_or_else(|| {
                    format!("backend sid:{hex:?}: a QUIC-LB server ID is 1 to 15 bytes of hex, as given to serve --quic-lb server-id=HEX")
                })?;
                if server_id.replace(b).is_some() {
                    return Err("a backend has one QUIC-LB server ID; give sid: once".into());
                }
                continue;
            }
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
        Ok(Backend {
            addr,
            tags: out,
            server_id,
        })
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
    /// TCP or UDP (QUIC).
    pub transport: Transport,
    /// UDP: the QUIC-LB configurations shared with the nodes (one per
    /// config ID), whose connection IDs route by server ID.
    pub quic_lb: Vec<LbParams>,
    /// UDP: most client flows (client address and port) kept at once; at
    /// the cap the least recently active one is dropped.
    pub max_flows: NonZeroUsize,
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
    /// Options that do not fit together.
    #[error("{0}")]
    Conflict(String),
}

impl Error {
    /// True if the configuration is unusable (a usage error, exit 2),
    /// false if starting failed at run time (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::NoBackends | Error::TooManyBackends { .. } | Error::Conflict(_)
        )
    }
}

impl Config {
    /// Checks what depends on the transport: the policies each supports,
    /// and QUIC-LB server IDs for the QUIC-LB configurations.
    pub fn check(&self) -> Result<(), Error> {
        let conflict = |s: String| Err(Error::Conflict(s));
        match self.transport {
            Transport::Tcp => {
                if self.policy == Policy::Cid {
                    return conflict(
                        "--policy cid routes QUIC connection IDs; add --udp, or pick a TCP policy"
                            .into(),
                    );
                }
                if !self.quic_lb.is_empty() || self.backends.iter().any(|b| b.server_id.is_some()) {
                    return conflict("--quic-lb and backend sid: are QUIC's; add --udp".into());
                }
            }
            Transport::Udp => {
                if !matches!(
                    self.policy,
                    Policy::Blind | Policy::SourceIp | Policy::Cid | Policy::Session
                ) {
                    return conflict(format!(
                        "--policy {} is not one of --udp's: blind, source-ip, cid and session",
                        self.policy.name()
                    ));
                }
                if self.policy == Policy::Cid && self.quic_lb.is_empty() {
                    return conflict("--policy cid needs --quic-lb server-id-len=N,nonce-len=N,config-id=N[,key=HEX], the nodes' configuration".into());
                }
                if self.send_proxy_v2 {
                    return conflict("--send-proxy-v2 is TCP's; drop it with --udp".into());
                }
                for b in &self.backends {
                    match (&b.server_id, self.quic_lb.is_empty()) {
                        (None, false) => {
                            return conflict(format!(
                                "backend {} has no QUIC-LB server ID; give --backend {}=sid:HEX (its serve --quic-lb server-id)",
                                b.addr, b.addr
                            ));
                        }
                        (Some(_), true) => {
                            return conflict(format!(
                                "backend {} names a QUIC-LB server ID but there is no --quic-lb configuration; add one",
                                b.addr
                            ));
                        }
                        (Some(sid), false) => {
                            if !self.quic_lb.iter().any(|p| p.server_id_len == sid.len()) {
                                return conflict(format!(
                                    "backend {}'s server ID is {} bytes, but no --quic-lb configuration has server-id-len={}",
                                    b.addr,
                                    sid.len(),
                                    sid.len()
                                ));
                            }
                        }
                        (None, true) => {}
                    }
                }
                let mut sids: Vec<&Vec<u8>> = self
                    .backends
                    .iter()
                    .filter_map(|b| b.server_id.as_ref())
                    .collect();
                sids.sort();
                if sids.windows(2).any(|w| w[0] == w[1]) {
                    return conflict(
                        "two backends share a QUIC-LB server ID; give each node its own".into(),
                    );
                }
            }
        }
        Ok(())
    }
}

/// The default UDP flow idle timeout (`--idle-timeout` with `--udp`):
/// quinn's and tlslab serve's QUIC idle timeout, 30 s.
pub const DEFAULT_UDP_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

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

    fn config(transport: Transport, policy: Policy, backends: &[&str], lb: &[&str]) -> Config {
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            backends: backends.iter().map(|b| b.parse().unwrap()).collect(),
            policy,
            session_timeout: Duration::from_secs(60),
            max_sessions: NonZeroUsize::MIN,
            hello_timeout: Duration::from_secs(1),
            idle_timeout: DEFAULT_UDP_IDLE_TIMEOUT,
            bad_input: BadInputAction::Forward,
            send_proxy_v2: false,
            health_check: HealthCheck::Off,
            health_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            metrics: None,
            transport,
            quic_lb: lb.iter().map(|c| LbParams::parse(c).unwrap()).collect(),
            max_flows: NonZeroUsize::MIN,
        }
    }

    #[test]
    fn each_transport_takes_its_own_policies_and_quic_lb_needs_server_ids() {
        use Policy::*;
        use Transport::*;
        let lb = ["server-id-len=1,nonce-len=6,config-id=0"];
        let ok = |c: Config| c.check().map_err(|e| e.to_string());
        assert!(ok(config(Tcp, Blind, &["127.0.0.1:9"], &[])).is_ok());
        let e = ok(config(Tcp, Cid, &["127.0.0.1:9"], &[])).unwrap_err();
        assert!(e.contains("add --udp"), "{e}");
        let e = ok(config(Udp, RoundRobin, &["127.0.0.1:9"], &[])).unwrap_err();
        assert!(e.contains("blind, source-ip, cid and session"), "{e}");
        let e = ok(config(Udp, Cid, &["127.0.0.1:9"], &[])).unwrap_err();
        assert!(e.contains("needs --quic-lb"), "{e}");
        let e = ok(config(Udp, Session, &["127.0.0.1:9"], &lb)).unwrap_err();
        assert!(e.contains("=sid:HEX"), "{e}");
        let e = ok(config(Udp, Cid, &["127.0.0.1:9=sid:0102"], &lb)).unwrap_err();
        assert!(e.contains("server-id-len=2"), "{e}");
        let e = ok(config(
            Udp,
            Cid,
            &["127.0.0.1:9=sid:01", "127.0.0.1:8=sid:01"],
            &lb,
        ))
        .unwrap_err();
        assert!(e.contains("share"), "{e}");
        assert!(
            ok(config(
                Udp,
                Cid,
                &["127.0.0.1:9=sid:01", "127.0.0.1:8=sid:02"],
                &lb
            ))
            .is_ok()
        );
        assert!(ok(config(Udp, Blind, &["127.0.0.1:9"], &[])).is_ok());
        // Without QUIC-LB, session routes by PSK and the 4-tuple only.
        assert!(ok(config(Udp, Session, &["127.0.0.1:9"], &[])).is_ok());
    }

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
        let b: Backend = "127.0.0.1:9=sid:0a0b,tag:n1".parse().unwrap();
        assert_eq!(b.server_id, Some(vec![10, 11]));
        assert_eq!(b.tags.len(), 1);
        assert!("127.0.0.1:9=sid:0a,sid:0b".parse::<Backend>().is_err());
        assert!("127.0.0.1:9=sid:".parse::<Backend>().is_err());
    }
}
