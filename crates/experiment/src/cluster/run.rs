//! How `tlslab cluster` runs: the environment (certificate, ticket keys,
//! peers), the nodes and the dispatcher of each cell, and the sweep.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tlslab_crypto::provider::Algorithms;
use tlslab_path::PathHandle;
use tlslab_report::LoadReport;
use tlslab_server::{Content, RemoteCache, Server, TicketKeys};

use super::dispatch::{Dispatch, DispatchSpec};
use super::nodes::{self, Redis};
use super::plan::{
    Arm, ClusterConfig, ClusterPlacement, DispatcherKind, Mechanism, NodeKind, NodeSetup, Sharing,
    arms, not_applicable,
};
use super::quic;
use super::report::{
    ClusterCell, ClusterReport, METHOD, RedisGets, SCHEMA_VERSION, Skipped, targets,
};
use crate::Error;
use crate::pin::Placement;
use crate::rig::{self, Reading, Rig};

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
    Nginx(nodes::Nginx),
}

impl Node {
    /// Where the dispatcher sends its clients: the HTTP/3 listener with
    /// `--h3`, else the TLS one.
    fn addr(&self) -> SocketAddr {
        match self {
            Node::Embedded(s) => s
                .h3_addr()
                .or_else(|| s.https_addr())
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            Node::Nginx(n) => n.addr,
        }
    }

    fn counters(&self) -> NodeCounters {
        match self {
            Node::Embedded(s) => {
                let r = Reading::of(s);
                // With `--h3` the clients come over QUIC only.
                let (handshakes, resumed) = match s.h3_addr() {
                    Some(_) => (r.quic.full + r.quic.resumed, r.quic.resumed),
                    None => (r.handshakes, r.resumed),
                };
                NodeCounters {
                    redis: r.redis,
                    cpu_ns: r.cpu.as_nanos() as u64,
                    requests: r.served,
                    handshakes,
                    resumed,
                }
            }
            Node::Nginx(n) => {
                let (requests, resumed) = n.requests();
                NodeCounters {
                    redis: [0; 4],
                    cpu_ns: nodes::cpu_ns(&n.proc),
                    requests,
                    handshakes: requests,
                    resumed,
                }
            }
        }
    }

    fn stop(self) {
        match self {
            Node::Embedded(s) => {
                s.shutdown();
            }
            Node::Nginx(n) => drop(n),
        }
    }
}

/// Everything a run shares: the certificate, the key files, the peers.
struct Env {
    dir: tempfile::TempDir,
    /// The certificate, and the nodes' and the load's CPUs.
    rig: Rig,
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
    /// The path's ends (`--path`): every part here runs on its server
    /// end, the load on its client end.
    path: Option<PathHandle>,
    /// `--h3`: the QUIC-LB configuration of the nodes and the dispatcher.
    lb: Option<tlslab_crypto::quic::LbParams>,
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

fn start_nodes(env: &Env, kind: NodeKind, n: usize, setup: NodeSetup) -> Result<Vec<Node>, Error> {
    let mut nodes = Vec::with_capacity(n);
    // One Redis key prefix for the cell's nodes, new in every cell: no
    // cell resumes another's sessions.
    let prefix = format!("tlslab-cluster:{}:", nodes::unique());
    for i in 0..n {
        let keys = if setup.sharing == Sharing::SharedTicketKeys {
            env.shared_keys.clone()
        } else {
            env.node_keys[i].0.clone()
        };
        let node = match kind {
            NodeKind::Tlslab => start_embedded(env, setup, keys, &prefix, i)?,
            NodeKind::Nginx => {
                let bin = env
                    .nginx
                    .as_ref()
                    .ok_or_else(|| Error::Cluster("--nodes nginx needs nginx".into()))?;
                let n = nodes::NginxNode {
                    bin,
                    dir: env.dir.path(),
                    chain: &env.chain_pem,
                    key: &env.key_pem,
                    version: super::plan::version_of(setup.mechanism),
                    ticket_key: setup.tickets().then_some(keys.as_path()),
                    groups: env.groups.as_deref(),
                    body_bytes: env.body_bytes,
                    cpus: &env.placement.nodes,
                };
                Node::Nginx(nodes::start_nginx(&n, i)?)
            }
        };
        nodes.push(node);
    }
    if env.lb.is_some() && setup.sharing == Sharing::SharedTicketKeys && setup.tickets() {
        let servers: Vec<&Server> = nodes
            .iter()
            .filter_map(|n| match n {
                Node::Embedded(s) => Some(s),
                Node::Nginx(_) => None,
            })
            .collect();
        if let Err(e) = quic::wait_for_shared_keys(&servers) {
            for n in nodes {
                n.stop();
            }
            return Err(e);
        }
    }
    Ok(nodes)
}

fn start_embedded(
    env: &Env,
    setup: NodeSetup,
    keys: PathBuf,
    prefix: &str,
    i: usize,
) -> Result<Node, Error> {
    let ttl = Duration::from_secs(300);
    let tickets = setup.tickets();
    let remote_cache = match (setup.sharing, &env.redis) {
        (Sharing::RedisCache, Some(r)) => Some(RemoteCache {
            url: r.url(),
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
    let mut cfg = env.rig.server(Content::Empty);
    let tls = &mut cfg.tls;
    tls.versions = vec![super::plan::version_of(setup.mechanism)];
    tls.algorithms = Algorithms {
        groups: env.groups.clone(),
        ..Algorithms::default()
    };
    tls.tickets = tickets;
    tls.remote_cache = remote_cache;
    tls.ticket_keys = match (tickets, &env.lb, setup.sharing, &env.redis) {
        (false, ..) => TicketKeys::Local,
        // Over QUIC the shared keys come from Redis, as `serve
        // --ticket-keys redis://…` shares them in a deployment.
        (true, Some(_), Sharing::SharedTicketKeys, Some(r)) => {
            quic::redis_ticket_keys(r.url(), prefix)
        }
        (true, Some(_), Sharing::SharedTicketKeys, None) => {
            return Err(Error::Cluster(
                "the shared-ticket-keys arm of --h3 has no redis-server".into(),
            ));
        }
        (true, ..) => TicketKeys::File(keys),
    };
    let server = match &env.lb {
        Some(lb) => {
            let h3 = quic::h3_settings(cfg.https.unwrap_or(rig::server_bind(None)), lb, i);
            Server::start_with_h3(cfg, Some(h3))?
        }
        None => Server::start(cfg)?,
    };
    Ok(Node::Embedded(server))
}

impl Env {
    fn setup(
        cfg: &ClusterConfig,
        needs_redis: bool,
        path: Option<&PathHandle>,
    ) -> Result<Env, Error> {
        let placement = super::plan::placement_plan();
        let nginx = match cfg.node_kind {
            NodeKind::Nginx => Some(nodes::need_tool("nginx", "--nodes nginx")?),
            NodeKind::Tlslab => None,
        };
        let haproxy = match cfg.dispatcher {
            DispatcherKind::Haproxy => Some(nodes::need_tool("haproxy", "--dispatcher haproxy")?),
            DispatcherKind::Tlslab => None,
        };
        let redis_bin = if needs_redis {
            let what = if cfg.h3 {
                "--h3 --sharing shared-ticket-keys (keys shared through Redis)"
            } else {
                "--sharing redis-cache"
            };
            Some(nodes::need_tool("redis-server", what)?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("tlslab-cluster-")
            .tempdir()
            .map_err(|e| Error::Cluster(format!("cannot create a temporary directory: {e}")))?;
        // On a path the load reaches the nodes (through the dispatcher)
        // by the server namespace's address, which the certificate names.
        let rig = Rig::generate(
            cfg.key,
            &rig::server_sans(path),
            Placement {
                server: placement.nodes.clone(),
                client: placement.load.clone(),
            },
        )?;
        let certs = dir.path().join("certs");
        rig.generated.write_to(&certs)?;
        let mut node_keys = Vec::new();
        for i in 0..cfg.nodes {
            let k = random_key()?;
            let path = dir.path().join(format!("ticket-{i}.key"));
            write_secret(&path, &k)?;
            node_keys.push((path, k[..16].to_vec()));
        }
        let shared_keys = dir.path().join("ticket-shared.key");
        write_secret(&shared_keys, &random_key()?)?;
        let lb = if cfg.h3 {
            let k = random_key()?;
            let mut key = [0u8; 16];
            key.copy_from_slice(&k[..16]);
            Some(quic::lb_params(key)?)
        } else {
            None
        };
        let redis = match redis_bin {
            Some(_) => Some(nodes::start_redis(dir.path(), &placement.redis)?),
            None => None,
        };
        Ok(Env {
            chain_pem: certs.join("server.pem"),
            key_pem: certs.join("server.key"),
            dir,
            rig,
            node_keys,
            shared_keys,
            nginx,
            haproxy,
            redis,
            placement,
            body_bytes: cfg.body_bytes,
            redis_timeout: cfg.redis_timeout,
            groups: cfg.groups.clone(),
            path: path.cloned(),
            lb,
        })
    }
}

/// Runs the experiment. `progress` receives one line per cell as it ends.
///
/// With `cfg.path`, the whole run but the load happens on a thread in the
/// path's server namespace (the nodes, the dispatcher and redis-server,
/// embedded or started as processes from there, live in it and talk over
/// its loopback), each cell's load on a thread in its client namespace;
/// the report carries the path's counters (`wan_path`).
pub fn run(cfg: &ClusterConfig, mut progress: impl FnMut(&str)) -> Result<ClusterReport, Error> {
    cfg.validate()?;
    let Some(spec) = &cfg.path else {
        return run_on(cfg, None, &mut progress);
    };
    let path = tlslab_path::Path::start(spec)?;
    let h = path.handle();
    let server = "dispatcher, nodes and redis-server";
    rig::announce_path("tlslab cluster", server, spec, &h, &mut progress);
    // Progress lines come back over a channel, so `progress` stays here.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let report = std::thread::scope(|s| {
        let h = &h;
        let worker = s.spawn(move || {
            rig::on_server(Some(h), move || {
                run_on(cfg, Some(h), &mut |l: &str| {
                    let _ = tx.send(l.to_string());
                })
            })
        });
        for line in rx {
            progress(&line);
        }
        worker
            .join()
            .unwrap_or_else(|_| Err(Error::Cluster("the cluster's run thread panicked".into())))
    });
    let wan_path = path.stop()?;
    let mut report = report?;
    report.wan_path = Some(wan_path);
    Ok(report)
}

/// [`run`] here (its thread's namespace), with `path`'s ends for the
/// dispatcher's address and the load.
fn run_on(
    cfg: &ClusterConfig,
    path: Option<&PathHandle>,
    progress: &mut dyn FnMut(&str),
) -> Result<ClusterReport, Error> {
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
    // Over QUIC the shared ticket keys are Redis's too.
    let needs_redis = plan.iter().any(|(_, a)| {
        a.iter().any(|a| {
            a.sharing == Sharing::RedisCache || (cfg.h3 && a.sharing == Sharing::SharedTicketKeys)
        })
    });
    let env = Env::setup(cfg, needs_redis, path)?;
    let mut peers = BTreeMap::new();
    if let Some(b) = &env.nginx {
        peers.insert("nginx".into(), nodes::tool_version(b, &["-v"]));
    }
    if let Some(b) = &env.haproxy {
        peers.insert("haproxy".into(), nodes::tool_version(b, &["-v"]));
    }
    if env.redis.is_some()
        && let Some(b) = nodes::find_tool("redis-server")
    {
        peers.insert(
            "redis-server".into(),
            nodes::tool_version(&b, &["--version"]),
        );
    }
    let total: usize = plan.iter().map(|(_, a)| a.len()).sum::<usize>() * cfg.reuse.len();
    progress(&format!(
        "tlslab cluster: {} {} nodes behind {}, {total} cells of {:.1} s, {} clients, {} certificate; {}",
        cfg.nodes,
        match (cfg.node_kind, cfg.h3) {
            (NodeKind::Tlslab, false) => "tlslab serve",
            (NodeKind::Tlslab, true) => "tlslab serve --h3 (QUIC-LB connection IDs)",
            (NodeKind::Nginx, _) => "nginx",
        },
        match (cfg.dispatcher, cfg.h3) {
            (DispatcherKind::Tlslab, false) => "tlslab dispatch",
            (DispatcherKind::Tlslab, true) => "tlslab dispatch --udp",
            (DispatcherKind::Haproxy, _) => "haproxy (TCP mode)",
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
    drop(env.redis);
    Ok(ClusterReport {
        schema_version: SCHEMA_VERSION,
        quick: cfg.quick,
        nodes: cfg.nodes,
        node_kind: cfg.node_kind,
        dispatcher: cfg.dispatcher,
        h3: cfg.h3,
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
        wan_path: None,
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
    let backends = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| tlslab_dispatch::Backend {
            addr: n.addr(),
            tags: tags.get(i).map(|t| vec![t.clone()]).unwrap_or_default(),
            server_id: env.lb.as_ref().map(|_| quic::server_id(i)),
        })
        .collect();
    let haproxy = match (cfg.dispatcher, &env.haproxy) {
        (DispatcherKind::Tlslab, _) => Ok(None),
        (DispatcherKind::Haproxy, Some(bin)) => Ok(Some((bin.as_path(), env.dir.path()))),
        (DispatcherKind::Haproxy, None) => {
            Err(Error::Cluster("--dispatcher haproxy needs haproxy".into()))
        }
    };
    let result = haproxy
        .and_then(|haproxy| {
            Dispatch::start(DispatchSpec {
                listen: rig::server_bind(env.path.as_ref()),
                policy: arm.policy,
                backends,
                quic_lb: env.lb.clone(),
                cpus: &env.placement.dispatcher,
                haproxy,
            })
        })
        .and_then(|dispatch| {
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
        "https://{}:{}/bytes/{}",
        rig::server_host(env.path.as_ref()),
        dispatch.addr().port(),
        cfg.body_bytes
    );
    // No warm-up, one request per connection, seed 1: the rig's defaults.
    let mut load = env.rig.load(&url, cfg.cell)?;
    load.clients = cfg.clients;
    load.reuse = f64::from(reuse) / 100.0;
    load.resume_with = setup.resume_with();
    load.versions = vec![super::plan::version_of(setup.mechanism)];
    load.algorithms.groups = cfg.groups.clone();
    if cfg.h3 {
        // One stream per connection, each connection from a new source
        // port (as browsers open one): the 4-tuple hash then spreads a
        // client's connections over the nodes.
        load.http3 = Some(tlslab_load::Http3 {
            new_socket: true,
            ..tlslab_load::Http3::new(1)
        });
    }

    let redis_cpu = || env.redis.as_ref().and_then(Redis::proc).map(nodes::cpu_ns);
    let before: Vec<NodeCounters> = nodes.iter().map(Node::counters).collect();
    let d_before = dispatch.counters();
    let r_before = redis_cpu();
    // On a path the load runs on its client end: only the client ↔
    // dispatcher traffic crosses it.
    let report: LoadReport = rig::on_client(env.path.as_ref(), || Ok(tlslab_load::run(&load)?))?;
    if cfg.node_kind == NodeKind::Nginx {
        // nginx writes a request's log line as it completes it: let the
        // last ones land.
        std::thread::sleep(Duration::from_millis(200));
    }
    let after: Vec<NodeCounters> = nodes.iter().map(Node::counters).collect();
    let d_after = dispatch.counters();
    let r_after = redis_cpu();

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
        return Err(Error::empty(label, report.error_summary()));
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
        connect_p50_us: report.latency.connect.p50_us,
        latency_p50_us: report.latency.total.p50_us,
        cluster_cpu_us_per_request: cpu_ns as f64 / 1e3 / served as f64,
        nodes_busy: cpu_ns as f64 / 1e9 / window,
        node_cpu_s: diff.iter().map(|d| d.cpu_ns as f64 / 1e9).collect(),
        node_requests: diff.iter().map(|d| d.requests).collect(),
        handshakes,
        resumed,
        resumption_achieved: achieved,
        achieved_over_requested: (reuse > 0).then(|| achieved / requested),
        client_offers: offers,
        resumption_offered: Some(report.reuse.offered),
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
