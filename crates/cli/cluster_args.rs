//! `tlslab cluster`: its flags and the wiring to
//! `tlslab_experiment::cluster` (seed 000's cluster experiment, Fig. 9).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use tlslab_experiment::cluster::{
    self, ClusterConfig, DispatcherKind, Mechanism, NodeKind, Sharing,
};

use crate::args::parse_duration;
use crate::config::usage;

/// `--nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NodesArg {
    /// `tlslab serve` engines embedded in this process.
    Tlslab,
    /// nginx processes (`nginx -p DIR`, one config, session cache zone and ticket key file each).
    Nginx,
}

/// `--dispatcher`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DispatcherArg {
    /// `tlslab dispatch`, embedded.
    Tlslab,
    /// `haproxy` in TCP mode; `--policy session` is the stick-table recipe on the TLS 1.2 session ID.
    Haproxy,
}

/// Flags of `tlslab cluster`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab cluster --quick\n  \
    tlslab cluster --json cluster.json\n  \
    tlslab cluster --reuse 80 --mechanism tls12-id,tls12-ticket,tls13-ticket \
    --sharing none,redis-cache,shared-ticket-keys\n  \
    tlslab cluster --nodes nginx --dispatcher haproxy --reuse 0,80\n\n\
    N nodes (each its own session cache and ticket keys) behind a dispatcher, and a closed-loop \
    load with one request per connection, all on 127.0.0.1. Every node is pinned to the first CPU \
    this process may use; the load, the dispatcher and redis-server share the second. Every figure \
    of a cell is over the cell's load run: throughput client-observed; cluster CPU per request \
    (summed over the nodes) and achieved resumption server-observed; routing efficiency \
    dispatcher-observed (tlslab dispatch), or the nodes' resumed handshakes over the client's \
    offers (HAProxy). Exit 1 if a peer (nginx, haproxy, redis-server) an arm needs is missing.")]
pub struct ClusterArgs {
    /// A short smoke run: reuse 0,80 and 3 s cells (unless --reuse / --cell say otherwise).
    #[arg(long)]
    pub quick: bool,

    /// What the nodes are.
    #[arg(long, value_enum, default_value = "tlslab")]
    pub nodes: NodesArg,

    /// How many nodes.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub node_count: usize,

    /// What the dispatcher is.
    #[arg(long, value_enum, default_value = "tlslab")]
    pub dispatcher: DispatcherArg,

    /// Requested reuse in percent, comma separated: the share of connections the load resumes
    /// (it re-offers after a refusal, steering toward it) [default: 0,20,40,60,80,100; --quick: 0,80].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub reuse: Option<Vec<u32>>,

    /// Dispatch policies, each with per-node state: round-robin, least-conn, random, source-ip,
    /// session.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "round-robin,session",
          value_parser = |s: &str| cluster::parse_policy(s))]
    pub policy: Vec<tlslab_dispatch::Policy>,

    /// Resumption mechanisms: tls12-id (session IDs, tickets off), tls12-ticket, tls13-ticket
    /// (stateless tickets sealed with the node's ticket keys).
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          default_value = "tls12-id,tls12-ticket,tls13-ticket",
          value_parser = |s: &str| s.parse::<Mechanism>())]
    pub mechanism: Vec<Mechanism>,

    /// Sharing arms, each with round-robin dispatch: none (per-node state: the round-robin
    /// cell), redis-cache (a redis-server this command starts; nodes use
    /// `memory:N+redis://…`), shared-ticket-keys (one ticket key file for every node).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "none",
          value_parser = |s: &str| s.parse::<Sharing>())]
    pub sharing: Vec<Sharing>,

    /// Length of each cell's load run [default: 10s; --quick: 3s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cell: Option<Duration>,

    /// Concurrent closed-loop clients.
    #[arg(long, short = 'c', default_value_t = 16, value_name = "N")]
    pub clients: usize,

    /// The certificate's key type (seed 000's servers used RSA): rsa2048, rsa3072, rsa4096,
    /// ecdsa-p256, ecdsa-p384, ed25519.
    #[arg(long, default_value = "rsa2048", value_name = "TYPE")]
    pub key: String,

    /// Key-exchange groups of the nodes and the load, comma separated, in preference order
    /// (x25519, secp256r1, secp384r1, X25519MLKEM768) [default: each side's own: tlslab
    /// X25519MLKEM768 first, nginx OpenSSL's X25519 first]. TLS 1.3 resumption repeats the key
    /// exchange, so the group sets what a resumed handshake costs against a full one.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub groups: Option<Vec<String>>,

    /// Response body size in bytes (the load requests /bytes/N).
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub body: usize,

    /// redis-cache arm: bound on each node's pre-handshake Redis GET (serve's `--redis-timeout`);
    /// a GET over it is a full handshake, counted.
    #[arg(long, default_value = "5ms", value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Duration,

    /// Write the report as JSON to FILE (schema: docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs `tlslab cluster`.
pub fn run(a: &ClusterArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = if a.quick {
        ClusterConfig::quick()
    } else {
        ClusterConfig::standard()
    };
    cfg.nodes = a.node_count;
    if !(2..=16).contains(&cfg.nodes) {
        return Err(usage("--node-count must be 2 to 16"));
    }
    cfg.node_kind = match a.nodes {
        NodesArg::Tlslab => NodeKind::Tlslab,
        NodesArg::Nginx => NodeKind::Nginx,
    };
    cfg.dispatcher = match a.dispatcher {
        DispatcherArg::Tlslab => DispatcherKind::Tlslab,
        DispatcherArg::Haproxy => DispatcherKind::Haproxy,
    };
    if let Some(r) = &a.reuse {
        if r.is_empty() || r.iter().any(|&p| p > 100) {
            return Err(usage(
                "--reuse takes percentages 0 to 100, e.g. 0,20,40,60,80,100",
            ));
        }
        cfg.reuse.clone_from(r);
    }
    cfg.policies = dedup(&a.policy);
    cfg.mechanisms = dedup(&a.mechanism);
    cfg.sharing = dedup(&a.sharing);
    if let Some(c) = a.cell {
        if c < Duration::from_millis(500) {
            return Err(usage("--cell must be at least 500ms"));
        }
        cfg.cell = c;
    }
    if a.clients == 0 {
        return Err(usage("--clients must be at least 1"));
    }
    cfg.clients = a.clients;
    cfg.key = a.key.parse().map_err(|e| usage(format!("--key: {e}")))?;
    cfg.groups.clone_from(&a.groups);
    if a.body > 10 * 1024 * 1024 {
        return Err(usage("--body must be at most 10485760 bytes"));
    }
    cfg.body_bytes = a.body;
    if a.redis_timeout.is_zero() {
        return Err(usage("--redis-timeout must be positive, e.g. 5ms"));
    }
    cfg.redis_timeout = a.redis_timeout;
    cfg.validate().map_err(|e| usage(e.to_string()))?;
    let report =
        cluster::run(&cfg, |line| eprintln!("{line}")).context("running tlslab cluster")?;
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let body = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn dedup<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}
