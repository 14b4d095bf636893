//! The cluster's outside peers, started by tlslab-peers: nginx nodes, the
//! HAProxy dispatcher and redis-server, and what the cluster reads of
//! them (CPU time, an nginx node's access log).
//!
//! It imports nothing else of the cluster experiment: what a peer needs
//! is passed in.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use tlslab_crypto::provider::Version;
use tlslab_dispatch::Policy;
use tlslab_peers::haproxy::{self, HaproxyConf};
use tlslab_peers::nginx::{self, Tickets};
pub use tlslab_peers::redis::Redis;
pub use tlslab_peers::{Proc, find_tool, tool_version};

use crate::Error;

fn peer(e: tlslab_peers::Error) -> Error {
    Error::Cluster(e.to_string())
}

/// The binary `name` that `what` (a flag) needs; the error names the
/// package to install, or to leave that arm out.
pub(super) fn need_tool(name: &str, what: &str) -> Result<PathBuf, Error> {
    tlslab_peers::need_tool(name)
        .map_err(|e| Error::Cluster(format!("{what}: {e}, or leave that arm out")))
}

/// Starts redis-server pinned to `cpus`, its files in `dir`.
pub(super) fn start_redis(dir: &Path, cpus: &[usize]) -> Result<Redis, Error> {
    Redis::start(dir, cpus).map_err(peer)
}

/// CPU time of every thread of `proc` (schedstat), nanoseconds.
pub(super) fn cpu_ns(proc: &Proc) -> u64 {
    proc.cpu_time().total().as_nanos() as u64
}

/// A name no other part of this process has used.
pub(super) fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// OpenSSL's names (`ssl_ecdh_curve`) for tlslab's group names; an error
/// names a group the nginx nodes cannot take.
pub fn openssl_groups(groups: &[String]) -> Result<Vec<&'static str>, Error> {
    groups
        .iter()
        .map(|g| nginx::openssl_group(g).map_err(peer))
        .collect()
}

/// How an nginx node serves.
pub(super) struct NginxNode<'a> {
    /// The nginx binary.
    pub bin: &'a Path,
    /// The directory its prefixes go in.
    pub dir: &'a Path,
    /// The certificate chain and key files.
    pub chain: &'a Path,
    /// The key file.
    pub key: &'a Path,
    /// The one TLS version.
    pub version: Version,
    /// With tickets on, the ticket-key file; `None`: tickets off.
    pub ticket_key: Option<&'a Path>,
    /// Key-exchange groups (tlslab's names), or OpenSSL's defaults.
    pub groups: Option<&'a [String]>,
    /// The size of `/bytes/N`.
    pub body_bytes: usize,
    /// The CPUs of the node.
    pub cpus: &'a [usize],
}

/// A running nginx node.
pub(super) struct Nginx {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub access_log: PathBuf,
}

/// Starts nginx node `i` in a new prefix under `n.dir`, on a free port.
pub(super) fn start_nginx(n: &NginxNode, i: usize) -> Result<Nginx, Error> {
    let protocol = match n.version {
        Version::Tls12 => "TLSv1.2",
        Version::Tls13 => "TLSv1.3",
    };
    let tickets = n
        .ticket_key
        .map_or(Tickets::Off, |k| Tickets::Keys(k.to_path_buf()));
    // OpenSSL's spelling of the groups, once (an unknown one is an error).
    let curves = n
        .groups
        .map(openssl_groups)
        .transpose()?
        .map(|g| g.join(":"));
    let (proc, conf) = nginx::start(n.bin, n.cpus, |port| {
        let prefix = n.dir.join(format!("nginx-{}", unique()));
        let mut c = nginx::cluster_node(
            i,
            &prefix,
            port,
            (n.chain, n.key),
            protocol,
            tickets.clone(),
            None,
        )
        .expect("a node without groups has no group to refuse");
        c.curves = curves.clone();
        let body = c.root.join("bytes");
        let _ = std::fs::create_dir_all(&body);
        let _ = std::fs::write(
            body.join(n.body_bytes.to_string()),
            vec![b'x'; n.body_bytes],
        );
        c
    })
    .map_err(|e| Error::Cluster(format!("nginx node {i} did not start: {e}")))?;
    Ok(Nginx {
        proc,
        addr: conf.addr(),
        access_log: conf.prefix.join("access.log"),
    })
}

impl Nginx {
    /// Requests served and, of them, on a resumed session: one line per
    /// request in the access log, `$ssl_session_reused` first ("r" or
    /// "."); one request per connection, so one per handshake.
    pub(super) fn requests(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(&self.access_log).unwrap_or_default();
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        let (mut n, mut r) = (0u64, 0u64);
        for l in lines {
            n += 1;
            r += u64::from(l.starts_with('r'));
        }
        (n, r)
    }
}

/// The HAProxy configuration of a policy, listening on `bind`: TCP mode;
/// for `session`, the stick-table recipe on the TLS 1.2 session ID (issue
/// 10).
fn haproxy_conf(bind: IpAddr, port: u16, policy: Policy, nodes: &[SocketAddr]) -> HaproxyConf {
    let balance = match policy {
        Policy::RoundRobin | Policy::Session => "roundrobin",
        Policy::LeastConn => "leastconn",
        // The 4-tuple hash spreads connections as random choice does.
        Policy::Random | Policy::Blind => "random",
        // QUIC only (the dispatcher refuses it over TCP).
        Policy::Cid => "roundrobin",
        Policy::SourceIp => "source",
    };
    HaproxyConf {
        bind,
        port,
        balance: balance.into(),
        stick_session_ids: policy == Policy::Session,
        servers: nodes.to_vec(),
    }
}

/// Starts `haproxy` (TCP mode, `policy`, the `backends`) with its
/// configuration in `dir`, on a free port of `bind`.
pub(super) fn start_haproxy(
    bin: &Path,
    dir: &Path,
    bind: IpAddr,
    policy: Policy,
    backends: &[SocketAddr],
    cpus: &[usize],
) -> Result<(Proc, SocketAddr), Error> {
    haproxy::start(bin, dir, cpus, |port| {
        haproxy_conf(bind, port, policy, backends)
    })
    .map_err(|e| Error::Cluster(format!("haproxy did not start: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_session_policy_uses_the_stick_recipe() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let c = haproxy_conf(lo, 1234, Policy::Session, &[]).render();
        assert!(c.contains("stick on req.payload_lv(43,1) if clienthello"));
        assert!(c.contains("stick store-response res.payload_lv(43,1) if serverhello"));
        assert!(c.contains("bind 127.0.0.1:1234"));
        let c = haproxy_conf(lo, 1234, Policy::RoundRobin, &[]).render();
        assert!(!c.contains("stick"));
        let c = haproxy_conf(IpAddr::from([10, 201, 0, 1]), 1234, Policy::RoundRobin, &[]).render();
        assert!(c.contains("bind 10.201.0.1:1234"), "{c}");
        assert!(!c.contains("stick"));
    }
}
