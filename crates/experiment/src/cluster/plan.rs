//! What `tlslab cluster` runs: mechanisms, sharing arms, node and
//! dispatcher kinds, the configuration and its checks, and the arms each
//! mechanism can run.

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_dispatch::Policy;
use tlslab_load::ResumeWith;

use super::nodes::openssl_groups;
use crate::Error;
use crate::pin::Placement;

pub use tlslab_schema::cluster::{DispatcherKind, Mechanism, NodeKind, Sharing};

/// The TLS version a mechanism runs.
pub(super) fn version_of(m: Mechanism) -> Version {
    match m {
        Mechanism::Tls13Ticket => Version::Tls13,
        _ => Version::Tls12,
    }
}

/// What `tlslab cluster` runs.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Number of nodes (at least 2).
    pub nodes: usize,
    /// What the nodes are.
    pub node_kind: NodeKind,
    /// What the dispatcher is.
    pub dispatcher: DispatcherKind,
    /// Requested reuse, percent, in sweep order.
    pub reuse: Vec<u32>,
    /// Dispatch policies, each with per-node state.
    pub policies: Vec<Policy>,
    /// Resumption mechanisms.
    pub mechanisms: Vec<Mechanism>,
    /// Sharing arms (each with round-robin dispatch); `None` is the
    /// per-node arm, which is the round-robin policy cell.
    pub sharing: Vec<Sharing>,
    /// Length of each cell's load run.
    pub cell: Duration,
    /// Closed-loop clients.
    pub clients: usize,
    /// The certificate's key type (seed 000's servers used RSA).
    pub key: KeyType,
    /// Key-exchange groups of the nodes and the load, in preference order
    /// (tlslab names: `x25519`, `secp256r1`, `secp384r1`,
    /// `X25519MLKEM768`); `None`: each side's defaults (rustls:
    /// X25519MLKEM768 first; nginx: OpenSSL's, X25519 first). TLS 1.3
    /// resumption repeats the key exchange, so the group sets how much a
    /// resumed handshake costs against a full one.
    pub groups: Option<Vec<String>>,
    /// Response body size: the path is `/bytes/N`.
    pub body_bytes: usize,
    /// Bound on each node's pre-handshake Redis GET (serve's
    /// `--redis-timeout`) in the redis-cache arm.
    pub redis_timeout: Duration,
    /// Whether this is the short run (recorded in the report).
    pub quick: bool,
    /// Run every cell across a packet-level WAN path (`tlslab path`):
    /// dispatcher, nodes and redis-server in its server namespace, the
    /// load in its client namespace, so only the client ↔ dispatcher
    /// traffic crosses it. Needs root.
    pub path: Option<tlslab_path::PathConfig>,
    /// `--h3`: the cluster over QUIC. Every node also serves HTTP/3 with
    /// QUIC-LB connection IDs carrying its server ID, the dispatcher is
    /// `tlslab dispatch --udp` (policies `blind`, `source-ip`, `cid`,
    /// `session`) and the load `load --h3 --quic-new-socket` (a new source
    /// port per connection, as browsers open one); TLS 1.3 tickets only.
    /// The shared-ticket-keys arm distributes the keys through Redis
    /// (`serve --ticket-keys redis://…`).
    pub h3: bool,
}

impl ClusterConfig {
    /// The full study: 3 tlslab nodes behind tlslab dispatch, reuse
    /// 0–100 % in steps of 20, round-robin and session, all three
    /// mechanisms, per-node state only, 10 s cells, 16 clients, RSA-2048.
    pub fn standard() -> ClusterConfig {
        ClusterConfig {
            nodes: 3,
            node_kind: NodeKind::Tlslab,
            dispatcher: DispatcherKind::Tlslab,
            reuse: vec![0, 20, 40, 60, 80, 100],
            policies: vec![Policy::RoundRobin, Policy::Session],
            mechanisms: Mechanism::ALL.to_vec(),
            sharing: vec![Sharing::None],
            cell: Duration::from_secs(10),
            clients: 16,
            key: KeyType::Rsa2048,
            groups: None,
            body_bytes: 1024,
            redis_timeout: Duration::from_millis(5),
            quick: false,
            path: None,
            h3: false,
        }
    }

    /// `self` over QUIC (`--h3`) with its own arms: `blind`, `cid` and
    /// `session` with per-node ticket keys, and `blind` with ticket keys
    /// shared through Redis; TLS 1.3 tickets.
    pub fn over_quic(self) -> ClusterConfig {
        ClusterConfig {
            h3: true,
            policies: vec![Policy::Blind, Policy::Cid, Policy::Session],
            mechanisms: vec![Mechanism::Tls13Ticket],
            sharing: vec![Sharing::None, Sharing::SharedTicketKeys],
            ..self
        }
    }

    /// The policy of the sharing arms: round-robin over TCP, the 4-tuple
    /// hash (`blind`) over QUIC, where `tlslab dispatch --udp` has no
    /// round-robin.
    pub fn blind_policy(&self) -> Policy {
        if self.h3 {
            Policy::Blind
        } else {
            Policy::RoundRobin
        }
    }

    /// The smoke run: reuse 0 and 80, 3 s cells.
    pub fn quick() -> ClusterConfig {
        ClusterConfig {
            reuse: vec![0, 80],
            cell: Duration::from_secs(3),
            quick: true,
            ..ClusterConfig::standard()
        }
    }

    /// Checks the settings; the message names the flag to change.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Cluster(m));
        if self.nodes < 2 {
            return bad("a cluster needs at least 2 nodes (--node-count)".into());
        }
        if self.nodes > 16 {
            return bad("at most 16 nodes on one machine (--node-count)".into());
        }
        if self.reuse.is_empty() || self.reuse.iter().any(|&r| r > 100) {
            return bad("--reuse takes percentages 0 to 100, e.g. 0,20,40,60,80,100".into());
        }
        if self.policies.is_empty() && !self.sharing.iter().any(|s| *s != Sharing::None) {
            return bad("nothing to run: give at least one --policy or --sharing arm".into());
        }
        if self.mechanisms.is_empty() {
            return bad("give at least one --mechanism".into());
        }
        if self.cell < Duration::from_millis(500) {
            return bad("--cell must be at least 500ms".into());
        }
        if self.clients == 0 {
            return bad("--clients must be at least 1".into());
        }
        if self.h3 {
            self.validate_h3()?;
        }
        if let Some(groups) = &self.groups {
            let known = tlslab_crypto::provider::all_group_names();
            if groups.is_empty() {
                return bad("--groups needs at least one group, e.g. x25519".into());
            }
            for g in groups {
                if !known.iter().any(|k| k.eq_ignore_ascii_case(g)) {
                    return bad(format!(
                        "--groups {g}: not a key-exchange group; use one of {}",
                        known.join(", ")
                    ));
                }
            }
            if self.node_kind == NodeKind::Nginx {
                openssl_groups(groups)?;
            }
        }
        Ok(())
    }
}

impl ClusterConfig {
    /// What `--h3` cannot be combined with; the message names the flag.
    fn validate_h3(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Cluster(m));
        if self.node_kind != NodeKind::Tlslab {
            return bad(
                "--h3 needs --nodes tlslab (the nodes serve HTTP/3 with QUIC-LB connection IDs)"
                    .into(),
            );
        }
        if self.dispatcher != DispatcherKind::Tlslab {
            return bad("--h3 needs --dispatcher tlslab (tlslab dispatch --udp; HAProxy does not balance QUIC)".into());
        }
        if self.path.is_some() {
            return bad("--h3 does not run across --path yet; drop --path".into());
        }
        if let Some(p) = self.policies.iter().find(|p| {
            !matches!(
                p,
                Policy::Blind | Policy::SourceIp | Policy::Cid | Policy::Session
            )
        }) {
            return bad(format!(
                "--policy {} is not one of dispatch --udp's; with --h3 use blind, source-ip, cid, session",
                p.name()
            ));
        }
        if self.mechanisms != [Mechanism::Tls13Ticket] {
            return bad("QUIC runs TLS 1.3 only: with --h3 give --mechanism tls13-ticket".into());
        }
        Ok(())
    }
}

pub use tlslab_schema::cluster::ClusterPlacement;

/// Where each part runs: the nodes on the server's CPU, the rest on the
/// client's.
pub(super) fn placement_plan() -> ClusterPlacement {
    {
        let p = Placement::split();
        let description = if p.server.is_empty() {
            "nodes, dispatcher and load share the only CPU (not pinned)".to_string()
        } else {
            format!(
                "every node pinned to CPU {:?}; load, dispatcher and redis-server pinned to CPU {:?} \
                 (the nodes together have one CPU: cluster throughput is what they sustain on it)",
                p.server, p.client
            )
        };
        ClusterPlacement {
            nodes: p.server.clone(),
            load: p.client.clone(),
            dispatcher: p.client.clone(),
            redis: p.client,
            description,
        }
    }
}

/// How one cell's nodes are set up.
#[derive(Clone, Copy, Debug)]
pub(super) struct NodeSetup {
    pub(super) mechanism: Mechanism,
    pub(super) sharing: Sharing,
}

impl NodeSetup {
    /// Stateless tickets on (else IDs / stateful TLS 1.3 tickets).
    pub(super) fn tickets(self) -> bool {
        match self.mechanism {
            Mechanism::Tls12Id => false,
            Mechanism::Tls12Ticket => true,
            Mechanism::Tls13Ticket => self.sharing != Sharing::RedisCache,
        }
    }

    pub(super) fn resume_with(self) -> ResumeWith {
        match self.mechanism {
            Mechanism::Tls12Id => ResumeWith::Id,
            Mechanism::Tls12Ticket => ResumeWith::Ticket,
            Mechanism::Tls13Ticket => ResumeWith::Auto,
        }
    }

    pub(super) fn note(self) -> Option<String> {
        (self.mechanism == Mechanism::Tls13Ticket && self.sharing == Sharing::RedisCache).then(
            || {
                "stateful TLS 1.3 tickets (serve --tickets off), the kind a shared cache holds"
                    .into()
            },
        )
    }
}

/// Why an arm cannot run for a mechanism and node kind, if it cannot.
pub(super) fn not_applicable(
    kind: NodeKind,
    mechanism: Mechanism,
    sharing: Sharing,
) -> Option<String> {
    match (sharing, mechanism) {
        (Sharing::None, _) => None,
        (Sharing::RedisCache, _) if kind == NodeKind::Nginx => Some(
            "stock nginx has no Redis session cache (its ssl_session_cache is shared between \
             the workers of one node only)"
                .into(),
        ),
        (Sharing::RedisCache, Mechanism::Tls12Ticket) => Some(
            "TLS 1.2 tickets are stateless: a shared session cache does not hold them (see \
             shared-ticket-keys)"
                .into(),
        ),
        (Sharing::SharedTicketKeys, Mechanism::Tls12Id) => Some(
            "session IDs are not tickets: ticket keys do not resume them (see redis-cache)".into(),
        ),
        _ => None,
    }
}

/// One arm of the sweep: a policy with per-node state, or round-robin
/// with shared state.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arm {
    pub(super) policy: Policy,
    pub(super) sharing: Sharing,
}

impl Arm {
    pub(super) fn label(self) -> String {
        match self.sharing {
            Sharing::None => self.policy.name().to_string(),
            s => format!("{}+{}", self.policy.name(), s.name()),
        }
    }
}

pub(super) fn arms(cfg: &ClusterConfig) -> Vec<Arm> {
    let mut out: Vec<Arm> = cfg
        .policies
        .iter()
        .map(|&policy| Arm {
            policy,
            sharing: Sharing::None,
        })
        .collect();
    let blind = cfg.blind_policy();
    if cfg.sharing.contains(&Sharing::None) && !cfg.policies.contains(&blind) {
        out.insert(
            0,
            Arm {
                policy: blind,
                sharing: Sharing::None,
            },
        );
    }
    for &s in &cfg.sharing {
        if s != Sharing::None {
            out.push(Arm {
                policy: blind,
                sharing: s,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>().unwrap(), m);
        }
        for s in Sharing::ALL {
            assert_eq!(s.name().parse::<Sharing>().unwrap(), s);
        }
        assert!("tls14".parse::<Mechanism>().is_err());
    }

    #[test]
    fn groups_are_checked_and_spelled_for_openssl() {
        let mut cfg = ClusterConfig::quick();
        cfg.groups = Some(vec!["X25519".into(), "secp256r1".into()]);
        cfg.validate().unwrap();
        assert_eq!(
            openssl_groups(cfg.groups.as_ref().unwrap()).unwrap(),
            ["X25519", "prime256v1"]
        );
        cfg.node_kind = NodeKind::Nginx;
        cfg.validate().unwrap();
        cfg.groups = Some(vec!["ffdhe2048".into()]);
        let e = cfg.validate().unwrap_err().to_string();
        crate::assert_has(&e, &["--groups ffdhe2048", "x25519"]);
        cfg.groups = Some(Vec::new());
        assert!(cfg.validate().unwrap_err().to_string().contains("--groups"));
    }

    #[test]
    fn arms_add_round_robin_for_shared_state() {
        let mut cfg = ClusterConfig::quick();
        cfg.policies = vec![Policy::Session];
        cfg.sharing = vec![Sharing::None, Sharing::RedisCache];
        let labels: Vec<String> = arms(&cfg).into_iter().map(Arm::label).collect();
        assert_eq!(
            labels,
            ["round-robin", "session", "round-robin+redis-cache"]
        );
    }

    #[test]
    fn quic_arms_are_blind_cid_session_and_blind_with_shared_keys() {
        let cfg = ClusterConfig::quick().over_quic();
        cfg.validate().unwrap();
        let labels: Vec<String> = arms(&cfg).into_iter().map(Arm::label).collect();
        assert_eq!(
            labels,
            ["blind", "cid", "session", "blind+shared-ticket-keys"]
        );
        for (change, says) in [
            (
                (|c: &mut ClusterConfig| c.policies = vec![Policy::RoundRobin])
                    as fn(&mut ClusterConfig),
                "--policy round-robin",
            ),
            (|c| c.mechanisms = vec![Mechanism::Tls12Id], "tls13-ticket"),
            (|c| c.node_kind = NodeKind::Nginx, "--nodes tlslab"),
            (
                |c| c.dispatcher = DispatcherKind::Haproxy,
                "--dispatcher tlslab",
            ),
        ] {
            let mut c = ClusterConfig::quick().over_quic();
            change(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn inapplicable_arms_say_why() {
        assert!(
            not_applicable(
                NodeKind::Tlslab,
                Mechanism::Tls12Id,
                Sharing::SharedTicketKeys
            )
            .is_some()
        );
        assert!(
            not_applicable(
                NodeKind::Tlslab,
                Mechanism::Tls12Ticket,
                Sharing::RedisCache
            )
            .is_some()
        );
        assert!(not_applicable(NodeKind::Nginx, Mechanism::Tls12Id, Sharing::RedisCache).is_some());
        assert!(
            not_applicable(
                NodeKind::Tlslab,
                Mechanism::Tls13Ticket,
                Sharing::RedisCache
            )
            .is_none()
        );
        assert!(
            not_applicable(
                NodeKind::Nginx,
                Mechanism::Tls13Ticket,
                Sharing::SharedTicketKeys
            )
            .is_none()
        );
    }
}
