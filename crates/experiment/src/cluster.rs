//! `tlslab cluster`: seed 000's cluster experiment (Fig. 9).
//!
//! N nodes (default 3, each with its own session cache and its own ticket
//! keys) sit behind a dispatcher; a closed-loop load opens one connection
//! per request and resumes a requested share of them. For each resumption
//! mechanism (TLS 1.2 session IDs, TLS 1.2 tickets, TLS 1.3 tickets), each
//! requested reuse and each arm (a dispatch policy with per-node state, or
//! round-robin with shared state: a Redis-shared session cache or shared
//! ticket keys), one cell measures:
//! - cluster CPU per request, server-observed: the nodes' CPU time summed
//!   over the nodes, divided by the requests they served;
//! - achieved resumption, server-observed: resumed ÷ all handshakes the
//!   nodes completed;
//! - routing efficiency: the share of resumption attempts sent to a node
//!   that accepted them, dispatcher-observed (`tlslab dispatch`'s
//!   `/metrics`); for HAProxy, which cannot tell, the nodes' resumed
//!   handshakes ÷ the client's resumption offers;
//! - throughput, client-observed.
//!
//! Every figure of a cell is taken over the same window: the cell's load
//! run (no warm-up), from just before its first connection to just after
//! its last. Nodes, dispatcher and load are fresh in every cell.
//!
//! Nodes are `tlslab serve` engines embedded in this process (each its own
//! runtime with one worker thread; CPU from its threads' schedstat), or
//! nginx processes (`-p DIR`, `master_process off`, one per node; CPU from
//! `/proc/PID/task/*/schedstat`, resumption from an access log of
//! `$ssl_session_reused`). The dispatcher is `tlslab dispatch` embedded
//! (its own one-thread runtime) or an `haproxy` process in TCP mode with
//! the stick-table recipe for TLS 1.2 session IDs.
//!
//! CPUs: with two or more CPUs, every node runs on the first; the load,
//! the dispatcher and `redis-server` share the second. The nodes together
//! are one CPU of capacity: the cluster's throughput is what three nodes
//! sharing it sustain.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlslab_crypto::pki::{self, Generated, KeyType};
use tlslab_crypto::provider::{Algorithms, Version};
use tlslab_dispatch::Policy;
use tlslab_load::{LoadConfig, ResumeWith, Target, Trust};
use tlslab_report::LoadReport;
use tlslab_server::{
    CertSource, Content, RemoteCache, ServeConfig, Server, SessionCache, TicketKeys, TlsSettings,
};

use crate::Error;
use crate::pin::Placement;

/// Schema version of [`ClusterReport`]'s JSON.
pub const SCHEMA_VERSION: u32 = 1;

/// The resumption mechanism of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// TLS 1.2, session IDs (nodes issue no tickets; the client sends none).
    Tls12Id,
    /// TLS 1.2, session tickets sealed with the node's ticket keys.
    Tls12Ticket,
    /// TLS 1.3, tickets sealed with the node's ticket keys (stateless); in
    /// the `redis-cache` arm, stateful tickets held in the shared cache.
    Tls13Ticket,
}

impl Mechanism {
    /// All three, in table order.
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Tls12Id,
        Mechanism::Tls12Ticket,
        Mechanism::Tls13Ticket,
    ];

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Tls12Id => "tls12-id",
            Mechanism::Tls12Ticket => "tls12-ticket",
            Mechanism::Tls13Ticket => "tls13-ticket",
        }
    }

    fn version(self) -> Version {
        match self {
            Mechanism::Tls13Ticket => Version::Tls13,
            _ => Version::Tls12,
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!("mechanism {s:?} is unknown; choose tls12-id, tls12-ticket or tls13-ticket")
            })
    }
}

/// How the nodes share session state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// Each node its own cache and its own ticket keys.
    None,
    /// One Redis-shared session cache (`memory:N+redis://…` on every node).
    RedisCache,
    /// One ticket-key file for every node.
    SharedTicketKeys,
}

impl Sharing {
    /// All three.
    pub const ALL: [Sharing; 3] = [
        Sharing::None,
        Sharing::RedisCache,
        Sharing::SharedTicketKeys,
    ];

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Sharing::None => "none",
            Sharing::RedisCache => "redis-cache",
            Sharing::SharedTicketKeys => "shared-ticket-keys",
        }
    }
}

impl std::str::FromStr for Sharing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Sharing::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!("sharing {s:?} is unknown; choose none, redis-cache or shared-ticket-keys")
            })
    }
}

/// What the nodes are.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// `tlslab serve` engines embedded in this process.
    Tlslab,
    /// nginx processes.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "nginx processes (`nginx -p DIR`, one config, session cache zone and ticket key file each)"
        )
    )]
    Nginx,
}

/// What the dispatcher is.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatcherKind {
    /// `tlslab dispatch`, embedded.
    Tlslab,
    /// An `haproxy` process in TCP mode.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "`haproxy` in TCP mode; `--policy session` is the stick-table recipe on the TLS 1.2 session ID"
        )
    )]
    Haproxy,
}

/// Parses a `--policy` name.
pub fn parse_policy(s: &str) -> Result<Policy, String> {
    [
        Policy::RoundRobin,
        Policy::LeastConn,
        Policy::Random,
        Policy::SourceIp,
        Policy::Session,
    ]
    .into_iter()
    .find(|p| p.name() == s.trim())
    .ok_or_else(|| {
        format!(
            "policy {s:?} is unknown; choose round-robin, least-conn, random, source-ip or session"
        )
    })
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

/// Where each part ran.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterPlacement {
    /// CPUs of every node (empty: not pinned).
    pub nodes: Vec<usize>,
    /// CPUs of the load engine (empty: not pinned).
    pub load: Vec<usize>,
    /// CPUs of the dispatcher (empty: not pinned).
    pub dispatcher: Vec<usize>,
    /// CPUs of `redis-server`, when one runs (empty: not pinned).
    pub redis: Vec<usize>,
    /// A sentence saying so.
    pub description: String,
}

impl ClusterPlacement {
    fn plan() -> ClusterPlacement {
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

/// One measured cell.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterCell {
    /// The resumption mechanism.
    pub mechanism: Mechanism,
    /// The dispatch policy (`session` for HAProxy is its stick-table recipe).
    pub policy: String,
    /// How the nodes share session state.
    pub sharing: Sharing,
    /// `policy` or, for a sharing arm, `round-robin+<sharing>`.
    pub arm: String,
    /// Requested reuse, 0–1 (the load steers its resumed share to it).
    pub reuse_requested: f64,
    /// The window of every figure, seconds: the cell's load run.
    pub window_s: f64,
    /// Requests completed in the window (client-observed).
    pub requests: u64,
    /// Failed requests (client-observed).
    pub errors: u64,
    /// Requests per second (client-observed).
    pub throughput_rps: f64,
    /// The nodes' CPU time summed over the nodes ÷ the requests they
    /// served, µs (server-observed).
    pub cluster_cpu_us_per_request: f64,
    /// The nodes' CPU time ÷ the window (1.0 = one CPU busy).
    pub nodes_busy: f64,
    /// Each node's CPU seconds in the window (server-observed).
    pub node_cpu_s: Vec<f64>,
    /// Each node's requests served in the window (server-observed).
    pub node_requests: Vec<u64>,
    /// Handshakes the nodes completed (server-observed).
    pub handshakes: u64,
    /// Of them, resumed (server-observed).
    pub resumed: u64,
    /// `resumed / handshakes` (server-observed).
    pub resumption_achieved: f64,
    /// `resumption_achieved / reuse_requested` (null at reuse 0).
    pub achieved_over_requested: Option<f64>,
    /// Connections on which the client offered a session (client-observed).
    pub client_offers: u64,
    /// Share of resumption attempts the chosen node accepted: for `tlslab
    /// dispatch` dispatcher-observed (its `/metrics`), for HAProxy the
    /// nodes' resumed handshakes ÷ the client's offers. Null without attempts.
    pub routing_efficiency: Option<f64>,
    /// `dispatcher` or `nodes/client-offers`: where `routing_efficiency` came from.
    pub routing_efficiency_source: String,
    /// The dispatcher's CPU per proxied connection, µs.
    pub dispatcher_cpu_us_per_conn: Option<f64>,
    /// `redis-server`'s CPU per request, µs (redis-cache arm only).
    pub redis_cpu_us_per_request: Option<f64>,
    /// The nodes' pre-handshake Redis GETs in the window, summed over the
    /// nodes (redis-cache arm only; server-observed): hits, misses,
    /// timeouts (over `redis_timeout_ms`, each a full handshake), errors.
    pub redis_gets: Option<RedisGets>,
    /// The load engine's CPU busy fraction (client-observed).
    pub client_busy: f64,
    /// True when the load engine was ≥ 90 % busy: throughput then measures
    /// the client side, not the cluster.
    pub client_saturated: bool,
    /// What the cell changed from the mechanism's usual setup, if anything.
    pub note: Option<String>,
}

/// The nodes' Redis GETs in a cell.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct RedisGets {
    /// GETs that found the session.
    pub hits: u64,
    /// GETs that found nothing.
    pub misses: u64,
    /// GETs not answered within the bound.
    pub timeouts: u64,
    /// GETs that failed.
    pub errors: u64,
}

/// An arm that was not run, and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skipped {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The arm.
    pub arm: String,
    /// Why.
    pub reason: String,
}

/// A target checked against the cells.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TargetCheck {
    /// What is checked.
    pub target: String,
    /// The measured figure.
    pub measured: Option<f64>,
    /// The bound.
    pub bound: f64,
    /// `met`, `missed` or `not run`.
    pub verdict: String,
}

/// What `tlslab cluster` measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterReport {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// Whether this was `--quick`.
    pub quick: bool,
    /// Number of nodes.
    pub nodes: usize,
    /// What the nodes were.
    pub node_kind: NodeKind,
    /// What the dispatcher was.
    pub dispatcher: DispatcherKind,
    /// Where each part ran.
    pub placement: ClusterPlacement,
    /// Closed-loop clients.
    pub clients: usize,
    /// Length of each cell's load run, seconds.
    pub cell_s: f64,
    /// The certificate's key type.
    pub key: String,
    /// The key-exchange groups given (`--groups`); `None`: each side's
    /// defaults.
    pub groups: Option<Vec<String>>,
    /// The nodes' Redis GET bound in the redis-cache arm, ms.
    pub redis_timeout_ms: f64,
    /// The path requested (one request per connection).
    pub path: String,
    /// How the figures were taken.
    pub method: String,
    /// Versions of the peers used (nginx, HAProxy, redis-server).
    pub peers: BTreeMap<String, String>,
    /// Every cell, in run order.
    pub cells: Vec<ClusterCell>,
    /// Arms not run, with the reason.
    pub skipped: Vec<Skipped>,
    /// The issue 10 and 11 targets, checked.
    pub targets: Vec<TargetCheck>,
}

const METHOD: &str = "one connection per request, closed loop; every figure over the cell's load \
run (no warm-up): throughput client-observed; CPU per request and achieved resumption \
server-observed (node CPU summed over the nodes: thread schedstat of each embedded node, or \
/proc/PID/task/*/schedstat of each nginx; resumed and total handshakes from each node's counters \
or nginx access log of $ssl_session_reused); routing efficiency dispatcher-observed for tlslab \
dispatch (its /metrics: accepted ÷ attempts, read from ServerHellos), and nodes' resumed ÷ the \
client's offers for HAProxy; nodes, dispatcher and load fresh in every cell";

// ---------------------------------------------------------------------------
// Peers: binaries, processes, CPU from /proc.

/// Finds an executable on PATH or in the sbin directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

fn need_tool(name: &str, what: &str) -> Result<PathBuf, Error> {
    find_tool(name).ok_or_else(|| {
        Error::Cluster(format!(
            "{what} needs `{name}`, which is not on PATH or in /usr/sbin; install it \
             (apt-get install -y {pkg}) or leave that arm out",
            pkg = if name == "redis-server" {
                "redis-server"
            } else {
                name
            }
        ))
    })
}

fn tool_version(path: &Path, args: &[&str]) -> String {
    Command::new(path)
        .args(args)
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::Cluster(format!("no free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| Error::Cluster(e.to_string()))?
        .port())
}

/// CPU time of every thread of process `pid` (sum of the first field of
/// `/proc/PID/task/*/schedstat`), nanoseconds.
fn proc_cpu_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Pins every thread of `pid` to `cpus` (a no-op for an empty list).
fn pin_pid(pid: u32, cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        let _ = set.set(c);
    }
    let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for tid in tids {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set) {
            tracing::warn!(pid, tid, "cannot pin to {cpus:?}: {e}");
        }
    }
}

/// A child process, killed and reaped on drop.
struct Proc {
    child: Child,
    name: String,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, name: &str, log: PathBuf, cpus: &[usize]) -> Result<Proc, Error> {
        let out = std::fs::File::create(&log)
            .map_err(|e| Error::Cluster(format!("{name}: cannot create {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::Cluster(format!("{name}: {e}")))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Cluster(format!("cannot start {name}: {e}")))?;
        pin_pid(child.id(), cpus);
        Ok(Proc {
            child,
            name: name.to_string(),
            log,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `addr` accepts TCP connections; an error carries the log.
    fn wait_port(&mut self, addr: SocketAddr, cpus: &[usize]) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Error::Cluster(format!(
                    "{} exited at start ({status}): {}",
                    self.name,
                    std::fs::read_to_string(&self.log)
                        .unwrap_or_default()
                        .trim()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                // Threads started since the spawn are pinned too.
                pin_pid(self.pid(), cpus);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(Error::Cluster(format!(
            "{} did not listen on {addr} within 10 s: {}",
            self.name,
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .trim()
        )))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `redis-server` on a free loopback port with persistence off, in a
/// temporary directory.
struct Redis {
    proc: Proc,
    url: String,
}

impl Redis {
    fn start(bin: &Path, dir: &Path, cpus: &[usize]) -> Result<Redis, Error> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new(bin);
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(dir);
            let mut proc = Proc::spawn(cmd, "redis-server", dir.join("redis.log"), cpus)?;
            match proc.wait_port(SocketAddr::from(([127, 0, 0, 1], port)), cpus) {
                Ok(()) => {
                    return Ok(Redis {
                        proc,
                        url: format!("redis://127.0.0.1:{port}"),
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::Cluster(last))
    }
}

// ---------------------------------------------------------------------------
// Nodes.

#[derive(Clone, Copy, Debug, Default)]
struct NodeCounters {
    /// Redis GETs: hits, misses, timeouts, errors (embedded nodes with a shared cache).
    redis: [u64; 4],
    cpu_ns: u64,
    requests: u64,
    handshakes: u64,
    resumed: u64,
}

enum Node {
    Embedded(Server),
    Nginx {
        proc: Proc,
        addr: SocketAddr,
        access_log: PathBuf,
    },
}

impl Node {
    fn addr(&self) -> SocketAddr {
        match self {
            Node::Embedded(s) => s
                .https_addr()
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            Node::Nginx { addr, .. } => *addr,
        }
    }

    fn counters(&self) -> NodeCounters {
        match self {
            Node::Embedded(s) => {
                let snap = s.snapshot();
                let redis = snap
                    .redis
                    .map_or([0; 4], |r| [r.hits, r.misses, r.timeouts, r.errors]);
                NodeCounters {
                    redis,
                    cpu_ns: s.cpu_time().as_nanos() as u64,
                    requests: snap.requests.total(),
                    handshakes: snap.handshakes.total(),
                    resumed: snap.handshakes.resumed(),
                }
            }
            Node::Nginx {
                proc, access_log, ..
            } => {
                // One line per request, `$ssl_session_reused` first ("r" or
                // "."); one request per connection, so one per handshake.
                let text = std::fs::read_to_string(access_log).unwrap_or_default();
                let lines = text.lines().filter(|l| !l.trim().is_empty());
                let (mut n, mut r) = (0u64, 0u64);
                for l in lines {
                    n += 1;
                    r += u64::from(l.starts_with('r'));
                }
                NodeCounters {
                    redis: [0; 4],
                    cpu_ns: proc_cpu_ns(proc.pid()),
                    requests: n,
                    handshakes: n,
                    resumed: r,
                }
            }
        }
    }

    fn stop(self) {
        match self {
            Node::Embedded(s) => {
                s.shutdown();
            }
            Node::Nginx { proc, .. } => drop(proc),
        }
    }
}

/// Everything a run shares: the certificate, the key files, the peers.
struct Env {
    dir: tempfile::TempDir,
    generated: Generated,
    roots: rustls::RootCertStore,
    chain_pem: PathBuf,
    key_pem: PathBuf,
    /// One ticket-key file per node, and the key name (16 bytes) of each.
    node_keys: Vec<(PathBuf, Vec<u8>)>,
    /// The file every node uses in the shared-ticket-keys arm.
    shared_keys: PathBuf,
    nginx: Option<PathBuf>,
    haproxy: Option<PathBuf>,
    redis: Option<Redis>,
    placement: ClusterPlacement,
    body_bytes: usize,
    redis_timeout: Duration,
    groups: Option<Vec<String>>,
}

fn random_key() -> Result<Vec<u8>, Error> {
    let mut k = vec![0u8; 80];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .map_err(|e| Error::Cluster(format!("cannot read /dev/urandom for ticket keys: {e}")))?;
    Ok(k)
}

fn write_secret(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, bytes)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)))
        .map_err(|e| Error::Cluster(format!("cannot write {}: {e}", path.display())))
}

/// How one cell's nodes are set up.
#[derive(Clone, Copy, Debug)]
struct NodeSetup {
    mechanism: Mechanism,
    sharing: Sharing,
}

impl NodeSetup {
    /// Stateless tickets on (else IDs / stateful TLS 1.3 tickets).
    fn tickets(self) -> bool {
        match self.mechanism {
            Mechanism::Tls12Id => false,
            Mechanism::Tls12Ticket => true,
            Mechanism::Tls13Ticket => self.sharing != Sharing::RedisCache,
        }
    }

    fn resume_with(self) -> ResumeWith {
        match self.mechanism {
            Mechanism::Tls12Id => ResumeWith::Id,
            Mechanism::Tls12Ticket => ResumeWith::Ticket,
            Mechanism::Tls13Ticket => ResumeWith::Auto,
        }
    }

    fn note(self) -> Option<String> {
        (self.mechanism == Mechanism::Tls13Ticket && self.sharing == Sharing::RedisCache).then(
            || {
                "stateful TLS 1.3 tickets (serve --tickets off), the kind a shared cache holds"
                    .into()
            },
        )
    }
}

/// Why an arm cannot run for a mechanism and node kind, if it cannot.
fn not_applicable(kind: NodeKind, mechanism: Mechanism, sharing: Sharing) -> Option<String> {
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

fn start_nodes(env: &Env, kind: NodeKind, n: usize, setup: NodeSetup) -> Result<Vec<Node>, Error> {
    let mut nodes = Vec::with_capacity(n);
    // One Redis key prefix for the cell's nodes, new in every cell: no
    // cell resumes another's sessions.
    let prefix = format!("tlslab-cluster:{}:", unique());
    for i in 0..n {
        let keys = if setup.sharing == Sharing::SharedTicketKeys {
            env.shared_keys.clone()
        } else {
            env.node_keys[i].0.clone()
        };
        let node = match kind {
            NodeKind::Tlslab => start_embedded(env, setup, keys, &prefix)?,
            NodeKind::Nginx => start_nginx(env, i, setup, &keys)?,
        };
        nodes.push(node);
    }
    Ok(nodes)
}

fn start_embedded(env: &Env, setup: NodeSetup, keys: PathBuf, prefix: &str) -> Result<Node, Error> {
    let ttl = Duration::from_secs(300);
    let tickets = setup.tickets();
    let remote_cache = match (setup.sharing, &env.redis) {
        (Sharing::RedisCache, Some(r)) => Some(RemoteCache {
            url: r.url.clone(),
            memory: Some(100_000),
            ttl,
            prefix: prefix.to_string(),
            timeout: env.redis_timeout,
        }),
        (Sharing::RedisCache, None) => {
            return Err(Error::Cluster(
                "the redis-cache arm has no redis-server".into(),
            ));
        }
        _ => None,
    };
    let mut tls = TlsSettings::new(CertSource::Generated(env.generated.clone()));
    tls.versions = vec![setup.mechanism.version()];
    tls.algorithms = Algorithms {
        groups: env.groups.clone(),
        ..Algorithms::default()
    };
    tls.session_cache = SessionCache::Memory {
        capacity: 100_000,
        ttl,
    };
    tls.tickets = tickets;
    tls.alpn = vec![b"http/1.1".to_vec()];
    tls.remote_cache = remote_cache;
    tls.ticket_keys = if tickets {
        TicketKeys::File(keys)
    } else {
        TicketKeys::Local
    };
    let mut cfg = ServeConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), Content::Empty, tls);
    cfg.threads = 1;
    cfg.pin_cpus = (!env.placement.nodes.is_empty()).then(|| env.placement.nodes.clone());
    cfg.max_connections = 10_000;
    Ok(Node::Embedded(Server::start(cfg)?))
}

fn unique() -> String {
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
        .map(|g| match g.to_ascii_lowercase().as_str() {
            "x25519" => Ok("X25519"),
            "secp256r1" => Ok("prime256v1"),
            "secp384r1" => Ok("secp384r1"),
            "secp521r1" => Ok("secp521r1"),
            "x25519mlkem768" => Ok("X25519MLKEM768"),
            other => Err(Error::Cluster(format!(
                "--groups {other}: not a group nginx nodes can be given; use x25519, secp256r1, secp384r1, secp521r1 or X25519MLKEM768"
            ))),
        })
        .collect()
}

fn nginx_conf(
    prefix: &Path,
    port: u16,
    env: &Env,
    node: usize,
    setup: NodeSetup,
    keys: &Path,
) -> String {
    let p = prefix.display();
    let protocol = match setup.mechanism.version() {
        Version::Tls12 => "TLSv1.2",
        Version::Tls13 => "TLSv1.3",
    };
    let tickets = if setup.tickets() {
        format!(
            "ssl_session_tickets on;\n        ssl_session_ticket_key {};",
            keys.display()
        )
    } else {
        "ssl_session_tickets off;".to_string()
    };
    // OpenSSL's spelling of tlslab's group names (checked by
    // `openssl_groups` before any node starts).
    let curves = env.groups.as_ref().map_or(String::new(), |g| {
        format!(
            "ssl_ecdh_curve {};",
            openssl_groups(g).unwrap_or_default().join(":")
        )
    });
    format!(
        "# Written by tlslab cluster: node {node}.\n\
         pid {p}/nginx.pid;\n\
         error_log {p}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
         \x20   client_body_temp_path {p}/tmp/client_body;\n\
         \x20   proxy_temp_path {p}/tmp/proxy;\n\
         \x20   fastcgi_temp_path {p}/tmp/fastcgi;\n\
         \x20   uwsgi_temp_path {p}/tmp/uwsgi;\n\
         \x20   scgi_temp_path {p}/tmp/scgi;\n\
         \x20   default_type application/octet-stream;\n\
         \x20   log_format cluster '$ssl_session_reused $ssl_protocol $status';\n\
         \x20   access_log {p}/access.log cluster;\n\
         \x20   keepalive_timeout 5s;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{port} ssl;\n\
         \x20       ssl_certificate {chain};\n\
         \x20       ssl_certificate_key {key};\n\
         \x20       ssl_protocols {protocol};\n\
         \x20       ssl_session_cache shared:node{node}:10m;\n\
         \x20       ssl_session_timeout 5m;\n\
         \x20       {tickets}\n\
         \x20       {curves}\n\
         \x20       root {p}/www;\n\
         \x20   }}\n\
         }}\n",
        chain = env.chain_pem.display(),
        key = env.key_pem.display(),
    )
}

fn start_nginx(env: &Env, i: usize, setup: NodeSetup, keys: &Path) -> Result<Node, Error> {
    let bin = env
        .nginx
        .as_ref()
        .ok_or_else(|| Error::Cluster("--nodes nginx needs nginx".into()))?;
    let mut last = String::new();
    for _ in 0..3 {
        let prefix = env.dir.path().join(format!("nginx-{}", unique()));
        for d in [
            "tmp/client_body",
            "tmp/proxy",
            "tmp/fastcgi",
            "tmp/uwsgi",
            "tmp/scgi",
            "www/bytes",
        ] {
            std::fs::create_dir_all(prefix.join(d))
                .map_err(|e| Error::Cluster(format!("cannot create {}: {e}", prefix.display())))?;
        }
        let body = env.body_bytes;
        std::fs::write(prefix.join(format!("www/bytes/{body}")), vec![b'x'; body])
            .map_err(|e| Error::Cluster(format!("cannot write the docroot: {e}")))?;
        let port = free_port()?;
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&prefix, port, env, i, setup, keys))
            .map_err(|e| Error::Cluster(format!("cannot write {}: {e}", conf.display())))?;
        let mut cmd = Command::new(bin);
        cmd.arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off; master_process off;"]);
        let mut proc = Proc::spawn(
            cmd,
            "nginx",
            prefix.join("stdout.log"),
            &env.placement.nodes,
        )?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match proc.wait_port(addr, &env.placement.nodes) {
            Ok(()) => {
                // The readiness probe connected without TLS; nginx logs no
                // request for it, but wait until it has let go of it.
                return Ok(Node::Nginx {
                    proc,
                    addr,
                    access_log: prefix.join("access.log"),
                });
            }
            Err(e) => {
                last = format!(
                    "{e}\n{}",
                    std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
                );
                if !last.contains("Address already in use") {
                    break;
                }
            }
        }
    }
    Err(Error::Cluster(format!(
        "nginx node {i} did not start: {last}"
    )))
}

impl Env {
    fn setup(cfg: &ClusterConfig, needs_redis: bool) -> Result<Env, Error> {
        let placement = ClusterPlacement::plan();
        let nginx = match cfg.node_kind {
            NodeKind::Nginx => Some(need_tool("nginx", "--nodes nginx")?),
            NodeKind::Tlslab => None,
        };
        let haproxy = match cfg.dispatcher {
            DispatcherKind::Haproxy => Some(need_tool("haproxy", "--dispatcher haproxy")?),
            DispatcherKind::Tlslab => None,
        };
        let redis_bin = if needs_redis {
            Some(need_tool("redis-server", "--sharing redis-cache")?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("tlslab-cluster-")
            .tempdir()
            .map_err(|e| Error::Cluster(format!("cannot create a temporary directory: {e}")))?;
        let generated = pki::generate(cfg.key, &[])?;
        let roots = generated.roots()?;
        let certs = dir.path().join("certs");
        generated.write_to(&certs)?;
        let mut node_keys = Vec::new();
        for i in 0..cfg.nodes {
            let k = random_key()?;
            let path = dir.path().join(format!("ticket-{i}.key"));
            write_secret(&path, &k)?;
            node_keys.push((path, k[..16].to_vec()));
        }
        let shared_keys = dir.path().join("ticket-shared.key");
        write_secret(&shared_keys, &random_key()?)?;
        let redis = match redis_bin {
            Some(b) => Some(Redis::start(&b, dir.path(), &placement.redis)?),
            None => None,
        };
        Ok(Env {
            chain_pem: certs.join("server.pem"),
            key_pem: certs.join("server.key"),
            dir,
            generated,
            roots,
            node_keys,
            shared_keys,
            nginx,
            haproxy,
            redis,
            placement,
            body_bytes: cfg.body_bytes,
            redis_timeout: cfg.redis_timeout,
            groups: cfg.groups.clone(),
        })
    }
}

// ---------------------------------------------------------------------------
// Dispatchers.

enum Dispatch {
    Embedded {
        rt: tokio::runtime::Runtime,
        threads: std::sync::Arc<tlslab_runtime::Threads>,
        addr: SocketAddr,
        metrics: SocketAddr,
        stop: tokio::sync::watch::Sender<bool>,
    },
    Haproxy {
        proc: Proc,
        addr: SocketAddr,
    },
}

#[derive(Clone, Copy, Debug, Default)]
struct DispatchCounters {
    cpu_ns: u64,
    attempts: Option<u64>,
    accepted: Option<u64>,
}

impl Dispatch {
    fn start(
        env: &Env,
        kind: DispatcherKind,
        policy: Policy,
        nodes: &[Node],
        tags: &[Vec<u8>],
    ) -> Result<Dispatch, Error> {
        match kind {
            DispatcherKind::Tlslab => {
                let pin = if env.placement.dispatcher.is_empty() {
                    None
                } else {
                    Some(
                        tlslab_runtime::CpuPin::new(&env.placement.dispatcher)
                            .map_err(|e| Error::Cluster(format!("dispatcher CPUs: {e}")))?,
                    )
                };
                let (rt, threads) = tlslab_runtime::RuntimeSpec::new("cluster-dispatch", 1)
                    .pinned(pin)
                    .build()
                    .map_err(|e| Error::Cluster(format!("dispatcher runtime: {e}")))?;
                let backends = nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| tlslab_dispatch::Backend {
                        addr: n.addr(),
                        tags: tags.get(i).map(|t| vec![t.clone()]).unwrap_or_default(),
                    })
                    .collect();
                let cfg = tlslab_dispatch::Config {
                    listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                    backends,
                    policy,
                    session_timeout: Duration::from_secs(300),
                    max_sessions: std::num::NonZeroUsize::new(1_000_000)
                        .unwrap_or(std::num::NonZeroUsize::MIN),
                    hello_timeout: Duration::from_secs(5),
                    idle_timeout: tlslab_dispatch::DEFAULT_IDLE_TIMEOUT,
                    bad_input: tlslab_dispatch::BadInputAction::Forward,
                    send_proxy_v2: false,
                    health_check: tlslab_dispatch::HealthCheck::Off,
                    health_interval: Duration::from_secs(1),
                    connect_timeout: Duration::from_secs(2),
                    metrics: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
                };
                let d = rt.block_on(tlslab_dispatch::Dispatcher::bind(cfg))?;
                let addr = d
                    .local_addr()
                    .map_err(|e| Error::Cluster(format!("dispatcher: {e}")))?;
                let metrics = d
                    .metrics_addr()
                    .ok_or_else(|| Error::Cluster("dispatcher metrics listener missing".into()))?;
                let (stop, rx) = tokio::sync::watch::channel(false);
                rt.spawn(d.run(rx));
                Ok(Dispatch::Embedded {
                    rt,
                    threads,
                    addr,
                    metrics,
                    stop,
                })
            }
            DispatcherKind::Haproxy => {
                let bin = env
                    .haproxy
                    .as_ref()
                    .ok_or_else(|| Error::Cluster("--dispatcher haproxy needs haproxy".into()))?;
                let mut last = String::new();
                for _ in 0..3 {
                    let port = free_port()?;
                    let cfg = env.dir.path().join(format!("haproxy-{}.cfg", unique()));
                    std::fs::write(&cfg, haproxy_conf(port, policy, nodes)).map_err(|e| {
                        Error::Cluster(format!("cannot write {}: {e}", cfg.display()))
                    })?;
                    let mut cmd = Command::new(bin);
                    cmd.arg("-f").arg(&cfg).arg("-db");
                    let mut proc = Proc::spawn(
                        cmd,
                        "haproxy",
                        cfg.with_extension("log"),
                        &env.placement.dispatcher,
                    )?;
                    let addr = SocketAddr::from(([127, 0, 0, 1], port));
                    match proc.wait_port(addr, &env.placement.dispatcher) {
                        Ok(()) => return Ok(Dispatch::Haproxy { proc, addr }),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(Error::Cluster(format!("haproxy did not start: {last}")))
            }
        }
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Dispatch::Embedded { addr, .. } | Dispatch::Haproxy { addr, .. } => *addr,
        }
    }

    fn counters(&self) -> DispatchCounters {
        match self {
            Dispatch::Embedded {
                threads, metrics, ..
            } => {
                let text = scrape(*metrics).unwrap_or_default();
                DispatchCounters {
                    cpu_ns: threads.cpu_time().total().as_nanos() as u64,
                    attempts: metric(&text, "tlslab_dispatch_resumption_attempts_total")
                        .map(|v| v as u64),
                    accepted: metric(&text, "tlslab_dispatch_resumptions_accepted_total")
                        .map(|v| v as u64),
                }
            }
            Dispatch::Haproxy { proc, .. } => DispatchCounters {
                cpu_ns: proc_cpu_ns(proc.pid()),
                attempts: None,
                accepted: None,
            },
        }
    }

    fn stop(self) {
        match self {
            Dispatch::Embedded { rt, stop, .. } => {
                let _ = stop.send(true);
                rt.shutdown_timeout(Duration::from_secs(1));
            }
            Dispatch::Haproxy { proc, .. } => drop(proc),
        }
    }
}

/// The HAProxy configuration of a policy: TCP mode; for `session`, the
/// stick-table recipe on the TLS 1.2 session ID (issue 10).
fn haproxy_conf(port: u16, policy: Policy, nodes: &[Node]) -> String {
    let balance = match policy {
        Policy::RoundRobin | Policy::Session => "roundrobin",
        Policy::LeastConn => "leastconn",
        Policy::Random => "random",
        Policy::SourceIp => "source",
    };
    let stick = if policy == Policy::Session {
        "    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content accept if { req.ssl_hello_type 1 }\n\
         \x20   tcp-response inspect-delay 5s\n\
         \x20   tcp-response content accept if { res.ssl_hello_type 2 }\n\
         \x20   acl clienthello req.ssl_hello_type 1\n\
         \x20   acl serverhello res.ssl_hello_type 2\n\
         \x20   stick-table type binary len 32 size 1m expire 5m\n\
         \x20   stick on req.payload_lv(43,1) if clienthello\n\
         \x20   stick store-response res.payload_lv(43,1) if serverhello\n"
    } else {
        ""
    };
    let mut servers = String::new();
    for (i, n) in nodes.iter().enumerate() {
        servers.push_str(&format!("    server n{i} {}\n", n.addr()));
    }
    format!(
        "# Written by tlslab cluster.\n\
         global\n\
         \x20   nbthread 1\n\
         \x20   maxconn 4096\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   timeout connect 5s\n\
         \x20   timeout client 30s\n\
         \x20   timeout server 30s\n\
         listen tls\n\
         \x20   bind 127.0.0.1:{port}\n\
         {stick}\
         \x20   balance {balance}\n\
         {servers}"
    )
}

/// GET /metrics over HTTP/1.0 from a loopback address.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The value of an unlabelled Prometheus sample.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}

// ---------------------------------------------------------------------------
// The sweep.

/// One arm of the sweep: a policy with per-node state, or round-robin
/// with shared state.
#[derive(Clone, Copy, Debug)]
struct Arm {
    policy: Policy,
    sharing: Sharing,
}

impl Arm {
    fn label(self) -> String {
        match self.sharing {
            Sharing::None => self.policy.name().to_string(),
            s => format!("{}+{}", self.policy.name(), s.name()),
        }
    }
}

fn arms(cfg: &ClusterConfig) -> Vec<Arm> {
    let mut out: Vec<Arm> = cfg
        .policies
        .iter()
        .map(|&policy| Arm {
            policy,
            sharing: Sharing::None,
        })
        .collect();
    if cfg.sharing.contains(&Sharing::None) && !cfg.policies.contains(&Policy::RoundRobin) {
        out.insert(
            0,
            Arm {
                policy: Policy::RoundRobin,
                sharing: Sharing::None,
            },
        );
    }
    for &s in &cfg.sharing {
        if s != Sharing::None {
            out.push(Arm {
                policy: Policy::RoundRobin,
                sharing: s,
            });
        }
    }
    out
}

/// Runs the experiment. `progress` receives one line per cell as it ends.
pub fn run(cfg: &ClusterConfig, mut progress: impl FnMut(&str)) -> Result<ClusterReport, Error> {
    cfg.validate()?;
    let arms = arms(cfg);
    // The arms each mechanism really runs, and the ones it cannot.
    let mut skipped = Vec::new();
    let mut plan: Vec<(Mechanism, Vec<Arm>)> = Vec::new();
    for &m in &cfg.mechanisms {
        let mut run_arms = Vec::new();
        for &a in &arms {
            match not_applicable(cfg.node_kind, m, a.sharing) {
                Some(reason) => skipped.push(Skipped {
                    mechanism: m,
                    arm: a.label(),
                    reason,
                }),
                None => run_arms.push(a),
            }
        }
        plan.push((m, run_arms));
    }
    let needs_redis = plan
        .iter()
        .any(|(_, a)| a.iter().any(|a| a.sharing == Sharing::RedisCache));
    let env = Env::setup(cfg, needs_redis)?;
    let mut peers = BTreeMap::new();
    if let Some(b) = &env.nginx {
        peers.insert("nginx".into(), tool_version(b, &["-v"]));
    }
    if let Some(b) = &env.haproxy {
        peers.insert("haproxy".into(), tool_version(b, &["-v"]));
    }
    if env.redis.is_some()
        && let Some(b) = find_tool("redis-server")
    {
        peers.insert("redis-server".into(), tool_version(&b, &["--version"]));
    }
    let total: usize = plan.iter().map(|(_, a)| a.len()).sum::<usize>() * cfg.reuse.len();
    progress(&format!(
        "tlslab cluster: {} {} nodes behind {}, {total} cells of {:.1} s, {} clients, {} certificate; {}",
        cfg.nodes,
        match cfg.node_kind {
            NodeKind::Tlslab => "tlslab serve",
            NodeKind::Nginx => "nginx",
        },
        match cfg.dispatcher {
            DispatcherKind::Tlslab => "tlslab dispatch",
            DispatcherKind::Haproxy => "haproxy (TCP mode)",
        },
        cfg.cell.as_secs_f64(),
        cfg.clients,
        cfg.key.name(),
        env.placement.description
    ));
    for s in &skipped {
        progress(&format!(
            "  SKIPPED {} {}: {}",
            s.mechanism.name(),
            s.arm,
            s.reason
        ));
    }
    let mut cells = Vec::new();
    for (m, run_arms) in &plan {
        for &reuse in &cfg.reuse {
            // Every arm of one reuse runs side by side.
            for &arm in run_arms {
                let c = run_cell(cfg, &env, *m, arm, reuse)?;
                progress(&progress_line(&c));
                cells.push(c);
            }
        }
    }
    let targets = targets(cfg, &cells);
    if let Some(r) = env.redis {
        drop(r.proc);
    }
    Ok(ClusterReport {
        schema_version: SCHEMA_VERSION,
        quick: cfg.quick,
        nodes: cfg.nodes,
        node_kind: cfg.node_kind,
        dispatcher: cfg.dispatcher,
        placement: env.placement,
        clients: cfg.clients,
        cell_s: cfg.cell.as_secs_f64(),
        key: cfg.key.name().to_string(),
        groups: cfg.groups.clone(),
        redis_timeout_ms: cfg.redis_timeout.as_secs_f64() * 1e3,
        path: format!("/bytes/{}", cfg.body_bytes),
        method: METHOD.to_string(),
        peers,
        cells,
        skipped,
        targets,
    })
}

fn run_cell(
    cfg: &ClusterConfig,
    env: &Env,
    mechanism: Mechanism,
    arm: Arm,
    reuse: u32,
) -> Result<ClusterCell, Error> {
    let setup = NodeSetup {
        mechanism,
        sharing: arm.sharing,
    };
    let label = format!("{} {} reuse {reuse} %", mechanism.name(), arm.label());
    let nodes = start_nodes(env, cfg.node_kind, cfg.nodes, setup)?;
    // Session-aware tlslab dispatch knows each node's ticket key name, as
    // `--backend ADDR=HEX` gives it; per-node keys only.
    let tags: Vec<Vec<u8>> = if setup.tickets() && arm.sharing == Sharing::None {
        env.node_keys.iter().map(|(_, n)| n.clone()).collect()
    } else {
        Vec::new()
    };
    let result =
        Dispatch::start(env, cfg.dispatcher, arm.policy, &nodes, &tags).and_then(|dispatch| {
            let r = measure(cfg, env, &nodes, &dispatch, setup, arm, reuse, &label);
            dispatch.stop();
            r
        });
    for n in nodes {
        n.stop();
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn measure(
    cfg: &ClusterConfig,
    env: &Env,
    nodes: &[Node],
    dispatch: &Dispatch,
    setup: NodeSetup,
    arm: Arm,
    reuse: u32,
    label: &str,
) -> Result<ClusterCell, Error> {
    let url = format!(
        "https://localhost:{}/bytes/{}",
        dispatch.addr().port(),
        cfg.body_bytes
    );
    let mut load = LoadConfig::new(vec![Target::parse(&url)?]);
    load.clients = cfg.clients;
    load.threads = 1;
    load.pin_cpus = (!env.placement.load.is_empty()).then(|| env.placement.load.clone());
    load.duration = Some(cfg.cell);
    load.requests = None;
    load.warmup = Duration::ZERO;
    load.requests_per_conn = 1;
    load.reuse = f64::from(reuse) / 100.0;
    load.resume_with = setup.resume_with();
    load.versions = vec![setup.mechanism.version()];
    load.algorithms.groups = cfg.groups.clone();
    load.trust = Trust::Roots(env.roots.clone());
    load.timeout = Duration::from_secs(10);
    load.seed = 1;

    let redis_pid = env.redis.as_ref().map(|r| r.proc.pid());
    let before: Vec<NodeCounters> = nodes.iter().map(Node::counters).collect();
    let d_before = dispatch.counters();
    let r_before = redis_pid.map(proc_cpu_ns);
    let report: LoadReport = tlslab_load::run(&load)?;
    if cfg.node_kind == NodeKind::Nginx {
        // nginx writes a request's log line as it completes it: let the
        // last ones land.
        std::thread::sleep(Duration::from_millis(200));
    }
    let after: Vec<NodeCounters> = nodes.iter().map(Node::counters).collect();
    let d_after = dispatch.counters();
    let r_after = redis_pid.map(proc_cpu_ns);

    let diff: Vec<NodeCounters> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| NodeCounters {
            redis: std::array::from_fn(|i| a.redis[i].saturating_sub(b.redis[i])),
            cpu_ns: a.cpu_ns.saturating_sub(b.cpu_ns),
            requests: a.requests.saturating_sub(b.requests),
            handshakes: a.handshakes.saturating_sub(b.handshakes),
            resumed: a.resumed.saturating_sub(b.resumed),
        })
        .collect();
    let served: u64 = diff.iter().map(|d| d.requests).sum();
    let cpu_ns: u64 = diff.iter().map(|d| d.cpu_ns).sum();
    let handshakes: u64 = diff.iter().map(|d| d.handshakes).sum();
    let resumed: u64 = diff.iter().map(|d| d.resumed).sum();
    if report.requests.completed == 0 || served == 0 {
        return Err(Error::EmptyCell {
            cell: label.to_string(),
            errors: report.error_summary(),
        });
    }
    let window = report.window.measured_s.max(1e-9);
    let achieved = if handshakes == 0 {
        0.0
    } else {
        resumed as f64 / handshakes as f64
    };
    let requested = f64::from(reuse) / 100.0;
    let offers = report.reuse.offered_count;
    let (eff, source) = match (
        d_before.attempts,
        d_after.attempts,
        d_before.accepted,
        d_after.accepted,
    ) {
        (Some(a0), Some(a1), Some(c0), Some(c1)) => {
            let a = a1.saturating_sub(a0);
            (
                (a > 0).then(|| c1.saturating_sub(c0) as f64 / a as f64),
                "dispatcher",
            )
        }
        _ => (
            (offers > 0).then(|| (resumed as f64 / offers as f64).min(1.0)),
            "nodes/client-offers",
        ),
    };
    let proxied = report.requests.attempted.max(1);
    let d_cpu = d_after.cpu_ns.saturating_sub(d_before.cpu_ns);
    Ok(ClusterCell {
        mechanism: setup.mechanism,
        policy: arm.policy.name().to_string(),
        sharing: arm.sharing,
        arm: arm.label(),
        reuse_requested: requested,
        window_s: window,
        requests: report.requests.completed,
        errors: report.requests.errors,
        throughput_rps: report.throughput.requests_per_s,
        cluster_cpu_us_per_request: cpu_ns as f64 / 1e3 / served as f64,
        nodes_busy: cpu_ns as f64 / 1e9 / window,
        node_cpu_s: diff.iter().map(|d| d.cpu_ns as f64 / 1e9).collect(),
        node_requests: diff.iter().map(|d| d.requests).collect(),
        handshakes,
        resumed,
        resumption_achieved: achieved,
        achieved_over_requested: (reuse > 0).then(|| achieved / requested),
        client_offers: offers,
        routing_efficiency: eff,
        routing_efficiency_source: source.to_string(),
        dispatcher_cpu_us_per_conn: Some(d_cpu as f64 / 1e3 / proxied as f64),
        redis_gets: (arm.sharing == Sharing::RedisCache).then(|| {
            let sum = |i: usize| diff.iter().map(|d| d.redis[i]).sum::<u64>();
            RedisGets {
                hits: sum(0),
                misses: sum(1),
                timeouts: sum(2),
                errors: sum(3),
            }
        }),
        redis_cpu_us_per_request: match (arm.sharing, r_before, r_after) {
            (Sharing::RedisCache, Some(a), Some(b)) => {
                Some(b.saturating_sub(a) as f64 / 1e3 / served as f64)
            }
            _ => None,
        },
        client_busy: report.client_cpu.busy_fraction,
        client_saturated: report.client_cpu.saturated,
        note: setup.note(),
    })
}

fn progress_line(c: &ClusterCell) -> String {
    format!(
        "  {:<13} {:<34} reuse {:>3} %  {:>7.0} req/s  {:>7.1} µs/req  resumed {:>5.1} %  routing {}",
        c.mechanism.name(),
        c.arm,
        (c.reuse_requested * 100.0).round(),
        c.throughput_rps,
        c.cluster_cpu_us_per_request,
        c.resumption_achieved * 100.0,
        c.routing_efficiency
            .map_or("-".to_string(), |e| format!("{e:.3}"))
    )
}

fn cell_at<'a>(
    cells: &'a [ClusterCell],
    m: Mechanism,
    arm: &str,
    reuse: f64,
) -> Option<&'a ClusterCell> {
    cells
        .iter()
        .find(|c| c.mechanism == m && c.arm == arm && (c.reuse_requested - reuse).abs() < 1e-9)
}

fn targets(cfg: &ClusterConfig, cells: &[ClusterCell]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let nodes = match cfg.node_kind {
        NodeKind::Tlslab => "tlslab",
        NodeKind::Nginx => "nginx",
    };
    for m in [Mechanism::Tls12Id, Mechanism::Tls13Ticket] {
        let rr = cell_at(cells, m, "round-robin", 0.8);
        let se = cell_at(cells, m, "session", 0.8);
        let measured = match (rr, se) {
            (Some(r), Some(s)) => Some(s.cluster_cpu_us_per_request / r.cluster_cpu_us_per_request),
            _ => None,
        };
        out.push(check(
            format!(
                "issue 10: {} at 80 % reuse, {nodes} nodes: cluster CPU/request, session ÷ round-robin ≤ 0.6",
                m.name()
            ),
            measured,
            0.6,
            true,
        ));
    }
    for (arm, mechs) in [
        (
            "round-robin+redis-cache",
            [Mechanism::Tls12Id, Mechanism::Tls13Ticket],
        ),
        (
            "round-robin+shared-ticket-keys",
            [Mechanism::Tls12Ticket, Mechanism::Tls13Ticket],
        ),
    ] {
        for m in mechs {
            if !cells.iter().any(|c| c.arm == arm) {
                continue;
            }
            let measured = cell_at(cells, m, arm, 0.8).and_then(|c| c.achieved_over_requested);
            out.push(check(
                format!(
                    "issue 11: {} {arm} at 80 % reuse, {} nodes: achieved ÷ requested resumption ≥ 0.98",
                    m.name(),
                    cfg.nodes
                ),
                measured,
                0.98,
                false,
            ));
        }
    }
    out
}

fn check(target: String, measured: Option<f64>, bound: f64, at_most: bool) -> TargetCheck {
    let verdict = match measured {
        None => "not run",
        Some(v) if (at_most && v <= bound) || (!at_most && v >= bound) => "met",
        Some(_) => "missed",
    };
    TargetCheck {
        target,
        measured,
        bound,
        verdict: verdict.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Rendering.

impl ClusterReport {
    /// The human report: every cell, then Fig. 9's shape per mechanism
    /// (throughput and CPU per request against reuse, blind against
    /// session-aware and shared state), then the targets.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "tlslab cluster{}: {} {} nodes behind {}, {} clients, {:.1} s per cell, {} certificate, GET {}",
            if self.quick { " (quick)" } else { "" },
            self.nodes,
            match self.node_kind {
                NodeKind::Tlslab => "tlslab serve",
                NodeKind::Nginx => "nginx",
            },
            match self.dispatcher {
                DispatcherKind::Tlslab => "tlslab dispatch",
                DispatcherKind::Haproxy =>
                    "HAProxy (TCP mode; session = stick-table recipe on the TLS 1.2 session ID)",
            },
            self.clients,
            self.cell_s,
            self.key,
            self.path
        );
        let _ = writeln!(
            o,
            "key exchange: {}",
            match &self.groups {
                Some(g) => format!("{} (--groups), nodes and load", g.join(",")),
                None => "each side's default groups (tlslab: X25519MLKEM768 first; nginx: OpenSSL's, X25519 first)".into(),
            }
        );
        let _ = writeln!(o, "placement: {}", self.placement.description);
        for (k, v) in &self.peers {
            let _ = writeln!(o, "peer {k}: {v}");
        }
        let _ = writeln!(o, "method: {}", self.method);
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<13} {:<31} {:>5} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6}",
            "mechanism",
            "arm",
            "reuse",
            "req/s",
            "cpu µs/req",
            "resumed",
            "routing",
            "nodes",
            "client",
            "disp µs",
            "errors"
        );
        let _ = writeln!(
            o,
            "{:<13} {:<31} {:>5} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6}",
            "", "", "%", "(client)", "(server)", "(server)", "eff.", "busy", "busy", "/conn", ""
        );
        for c in &self.cells {
            let _ = writeln!(
                o,
                "{:<13} {:<31} {:>5.0} {:>8.0} {:>9.1} {:>7.1}% {:>8} {:>7.2} {:>6.2}{} {:>7.1} {:>6}",
                c.mechanism.name(),
                c.arm,
                c.reuse_requested * 100.0,
                c.throughput_rps,
                c.cluster_cpu_us_per_request,
                c.resumption_achieved * 100.0,
                c.routing_efficiency.map_or("-".into(), |e| format!(
                    "{e:.3}{}",
                    if c.routing_efficiency_source == "dispatcher" {
                        ""
                    } else {
                        "*"
                    }
                )),
                c.nodes_busy,
                c.client_busy,
                if c.client_saturated { "!" } else { " " },
                c.dispatcher_cpu_us_per_conn.unwrap_or(f64::NAN),
                c.errors
            );
        }
        let _ = writeln!(
            o,
            "routing eff.: dispatcher-observed; * = nodes' resumed ÷ client's offers (HAProxy cannot tell). \
             nodes busy: node CPU ÷ window (1.00 = one CPU). client busy ! = load engine ≥ 90 % busy \
             (throughput then measures the client side)."
        );
        if let Some(c) = self.cells.iter().find(|c| c.note.is_some()) {
            let _ = writeln!(
                o,
                "note: {} {}: {}",
                c.mechanism.name(),
                c.arm,
                c.note.as_deref().unwrap_or("")
            );
        }
        for c in &self.cells {
            if let Some(g) = c.redis_gets {
                let _ = writeln!(
                    o,
                    "redis: {} {} reuse {:.0} %: node GETs {} hits, {} misses, {} timeouts (> {:.0} ms), {} errors; redis-server CPU {:.1} µs/request (server-observed, not in cluster CPU)",
                    c.mechanism.name(),
                    c.arm,
                    c.reuse_requested * 100.0,
                    g.hits,
                    g.misses,
                    g.timeouts,
                    self.redis_timeout_ms,
                    g.errors,
                    c.redis_cpu_us_per_request.unwrap_or(f64::NAN)
                );
            }
        }
        for s in &self.skipped {
            let _ = writeln!(o, "skipped: {} {}: {}", s.mechanism.name(), s.arm, s.reason);
        }
        o.push_str(&self.render_fig9());
        let _ = writeln!(o);
        let _ = writeln!(o, "Targets:");
        for t in &self.targets {
            let _ = writeln!(
                o,
                "  [{}] {}: {}",
                t.verdict,
                t.target,
                t.measured
                    .map_or("not measured".into(), |v| format!("{v:.3}"))
            );
        }
        o
    }

    /// Fig. 9's shape: per mechanism, throughput and CPU per request
    /// against reuse for each arm, and a bar chart of throughput.
    pub fn render_fig9(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let mut mechs: Vec<Mechanism> = self.cells.iter().map(|c| c.mechanism).collect();
        mechs.dedup();
        let max_rps = self
            .cells
            .iter()
            .map(|c| c.throughput_rps)
            .fold(0.0f64, f64::max)
            .max(1.0);
        for m in mechs {
            let cells: Vec<&ClusterCell> = self.cells.iter().filter(|c| c.mechanism == m).collect();
            let mut arms: Vec<String> = Vec::new();
            for c in &cells {
                if !arms.contains(&c.arm) {
                    arms.push(c.arm.clone());
                }
            }
            let mut reuses: Vec<f64> = Vec::new();
            for c in &cells {
                if !reuses.iter().any(|r| (r - c.reuse_requested).abs() < 1e-9) {
                    reuses.push(c.reuse_requested);
                }
            }
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "Fig. 9 shape, {}: throughput (req/s, client-observed) | cluster CPU per request (µs, server-observed)",
                m.name()
            );
            let mut head = format!("{:>6}", "reuse");
            for a in &arms {
                let _ = write!(head, " {:>14}", short(a));
            }
            head.push_str(" |");
            for a in &arms {
                let _ = write!(head, " {:>14}", short(a));
            }
            let has_ratio =
                arms.iter().any(|a| a == "round-robin") && arms.iter().any(|a| a == "session");
            if has_ratio {
                head.push_str(" | session÷rr rps  cpu");
            }
            let _ = writeln!(o, "{head}");
            for &r in &reuses {
                let mut line = format!("{:>5.0}%", r * 100.0);
                let get = |a: &str| {
                    cells
                        .iter()
                        .find(|c| c.arm == a && (c.reuse_requested - r).abs() < 1e-9)
                };
                for a in &arms {
                    let _ = write!(
                        line,
                        " {:>14}",
                        get(a).map_or("-".into(), |c| format!("{:.0}", c.throughput_rps))
                    );
                }
                line.push_str(" |");
                for a in &arms {
                    let _ = write!(
                        line,
                        " {:>14}",
                        get(a).map_or("-".into(), |c| format!(
                            "{:.1}",
                            c.cluster_cpu_us_per_request
                        ))
                    );
                }
                if has_ratio && let (Some(rr), Some(se)) = (get("round-robin"), get("session")) {
                    let _ = write!(
                        line,
                        " | {:>14.2}x {:>5.2}x",
                        se.throughput_rps / rr.throughput_rps.max(1e-9),
                        se.cluster_cpu_us_per_request / rr.cluster_cpu_us_per_request.max(1e-9)
                    );
                }
                let _ = writeln!(o, "{line}");
            }
            let _ = writeln!(
                o,
                "  throughput against reuse (each # = {:.0} req/s):",
                max_rps / 50.0
            );
            for &r in &reuses {
                for a in &arms {
                    if let Some(c) = cells
                        .iter()
                        .find(|c| c.arm == *a && (c.reuse_requested - r).abs() < 1e-9)
                    {
                        let n = ((c.throughput_rps / max_rps) * 50.0).round() as usize;
                        let _ = writeln!(
                            o,
                            "  {:>4.0}% {:<14} {:<50} {:.0}",
                            r * 100.0,
                            short(a),
                            "#".repeat(n),
                            c.throughput_rps
                        );
                    }
                }
            }
        }
        o
    }
}

/// A column label of at most 14 characters.
fn short(arm: &str) -> String {
    match arm {
        "round-robin" => "rr (blind)".into(),
        "session" => "session-aware".into(),
        "round-robin+redis-cache" => "rr+redis-cache".into(),
        "round-robin+shared-ticket-keys" => "rr+shared-keys".into(),
        a => a.chars().take(14).collect(),
    }
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
        assert_eq!(parse_policy("session").unwrap(), Policy::Session);
        assert!(parse_policy("sticky").is_err());
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
        assert!(
            e.contains("--groups ffdhe2048") && e.contains("x25519"),
            "{e}"
        );
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

    #[test]
    fn haproxy_session_policy_uses_the_stick_recipe() {
        let c = haproxy_conf(1234, Policy::Session, &[]);
        assert!(c.contains("stick on req.payload_lv(43,1) if clienthello"));
        assert!(c.contains("stick store-response res.payload_lv(43,1) if serverhello"));
        assert!(c.contains("bind 127.0.0.1:1234"));
        let c = haproxy_conf(1234, Policy::RoundRobin, &[]);
        assert!(!c.contains("stick"));
    }

    #[test]
    fn targets_compare_session_with_round_robin() {
        let cell = |arm: &str, cpu: f64| ClusterCell {
            mechanism: Mechanism::Tls12Id,
            policy: arm.into(),
            sharing: Sharing::None,
            arm: arm.into(),
            reuse_requested: 0.8,
            window_s: 1.0,
            requests: 1,
            errors: 0,
            throughput_rps: 1.0,
            cluster_cpu_us_per_request: cpu,
            nodes_busy: 1.0,
            node_cpu_s: vec![],
            node_requests: vec![],
            handshakes: 1,
            resumed: 1,
            resumption_achieved: 0.8,
            achieved_over_requested: Some(1.0),
            client_offers: 1,
            routing_efficiency: Some(1.0),
            routing_efficiency_source: "dispatcher".into(),
            dispatcher_cpu_us_per_conn: None,
            redis_cpu_us_per_request: None,
            redis_gets: None,
            client_busy: 0.5,
            client_saturated: false,
            note: None,
        };
        let t = targets(
            &ClusterConfig::quick(),
            &[cell("round-robin", 100.0), cell("session", 50.0)],
        );
        assert_eq!(t[0].verdict, "met");
        assert_eq!(t[0].measured, Some(0.5));
        assert_eq!(t[1].verdict, "not run");
        let t = targets(
            &ClusterConfig::quick(),
            &[cell("round-robin", 100.0), cell("session", 70.0)],
        );
        assert_eq!(t[0].verdict, "missed");
    }

    #[test]
    fn metric_reads_unlabelled_samples() {
        let text = "# HELP x\ntlslab_dispatch_resumption_attempts_total 42\ntlslab_dispatch_routing_efficiency NaN\n";
        assert_eq!(
            metric(text, "tlslab_dispatch_resumption_attempts_total"),
            Some(42.0)
        );
        assert_eq!(metric(text, "missing"), None);
    }
}
