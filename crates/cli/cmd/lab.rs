//! The experiments run from flags: `tlslab lab`, `breakdown`, `overload`
//! and `cluster`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tlslab_crypto::provider;
use tlslab_experiment::breakdown::BreakdownText;
use tlslab_experiment::cluster::{self, ClusterConfig, ClusterText};
use tlslab_experiment::lab::LabText;
use tlslab_experiment::overload::OverloadText;

use crate::args::lab::{
    BreakdownArgs, BreakdownWorkload, ClusterArgs, LabArgs, OverloadArgs, Transport,
};
use crate::output::print_and_save;
use crate::usage::{bail, usage};

/// `--cell`, by default `quick_ms` ms under --quick and `full_ms` ms
/// without; it must be above 0.
fn cell_length(
    cell: Option<Duration>,
    quick: bool,
    [quick_ms, full_ms]: [u64; 2],
) -> anyhow::Result<Duration> {
    let default = Duration::from_millis(if quick { quick_ms } else { full_ms });
    let cell = cell.unwrap_or(default);
    if cell.is_zero() {
        return bail("--cell must be above 0");
    }
    Ok(cell)
}

/// Turns `tlslab lab` flags into its configuration.
pub fn lab_config(a: &LabArgs) -> anyhow::Result<tlslab_experiment::lab::LabConfig> {
    if a.clients == 0 {
        return bail("-c/--clients must be at least 1");
    }
    let cell = cell_length(a.cell, a.quick, [700, 4500])?;
    Ok(tlslab_experiment::lab::LabConfig {
        cell,
        clients: a.clients,
        quick: a.quick,
        path: a.path.clone(),
        explain: a.explain,
    })
}

/// Runs `tlslab lab`.
pub fn lab(a: &LabArgs) -> anyhow::Result<ExitCode> {
    let cfg = lab_config(a)?;
    let report =
        tlslab_experiment::lab::run(&cfg, |line| eprintln!("{line}")).context("running the lab")?;
    print_and_save(&report.render(), &report, a.json.as_deref())
}

/// Turns `tlslab breakdown` flags into its configuration.
pub fn breakdown_config(
    a: &BreakdownArgs,
) -> anyhow::Result<tlslab_experiment::breakdown::BreakdownConfig> {
    use tlslab_experiment::breakdown::{BreakdownConfig, Workload};
    if !a.insecure_ablation {
        return bail(
            "breakdown replaces TLS stages with no-ops on an embedded loopback server and client; \
             add --insecure-ablation to confirm",
        );
    }
    if a.clients == 0 {
        return bail("-c/--clients must be at least 1");
    }
    if a.repeats == Some(0) {
        return bail("--repeats must be at least 1");
    }
    let versions = provider::parse_versions(&a.tls).map_err(usage)?;
    let [version] = versions[..] else {
        return bail("--tls takes one version for breakdown: 1.2 or 1.3");
    };
    let transport = if a.h3 { Transport::H3 } else { a.transport };
    if transport != Transport::Tcp && version != provider::Version::Tls13 {
        return bail("QUIC runs TLS 1.3 only: use --tls 1.3 with --h3 or --transport h3|both");
    }
    let workload = match a.workload {
        BreakdownWorkload::NewConn => Workload::NewConn,
        BreakdownWorkload::KeepAlive => Workload::KeepAlive,
        BreakdownWorkload::Reuse => {
            if !(0.0..=100.0).contains(&a.reuse) {
                return bail(format!(
                    "--reuse {}: give a percentage from 0 to 100",
                    a.reuse
                ));
            }
            Workload::Reuse(a.reuse / 100.0)
        }
    };
    let cell = cell_length(a.cell, a.quick, [500, 1000])?;
    let max_time = a.max_time.unwrap_or(if a.quick {
        Duration::from_secs(40)
    } else {
        Duration::from_secs(300)
    });
    if !(a.target_ci.is_finite() && a.target_ci > 0.0 && a.target_ci < 100.0) {
        return bail(format!(
            "--target-ci {}: give a half-width in points above 0, e.g. 2",
            a.target_ci
        ));
    }
    Ok(BreakdownConfig {
        workload,
        file_size: a.file_size,
        version,
        key: a.key_type,
        cell,
        clients: a.clients,
        repeats: a.repeats.unwrap_or(if a.quick { 2 } else { 3 }),
        max_time,
        target_ci95: a.target_ci / 100.0,
        transport: engine_transport(transport),
    })
}

/// The engine's transport of `--transport` (`both` starts over TCP).
fn engine_transport(t: Transport) -> tlslab_experiment::study::Transport {
    match t {
        Transport::H3 => tlslab_experiment::study::Transport::Quic,
        Transport::Tcp | Transport::Both => tlslab_experiment::study::Transport::Tcp,
    }
}

/// Runs `tlslab breakdown`.
pub fn breakdown(a: &BreakdownArgs) -> anyhow::Result<ExitCode> {
    let cfg = breakdown_config(a)?;
    eprintln!(
        "tlslab: WARNING: breakdown runs an embedded loopback server and client with TLS stages \
         replaced by no-ops (insecure; for measurement only)"
    );
    if a.transport != Transport::Both || a.h3 {
        let report = tlslab_experiment::breakdown::run(&cfg, |line| eprintln!("{line}"))
            .context("running the breakdown")?;
        return print_and_save(&report.render(), &report, a.json.as_deref());
    }
    let pair = tlslab_experiment::breakdown::run_both(&cfg, |line| eprintln!("{line}"))
        .context("running the breakdown over TCP, then over QUIC")?;
    print_and_save(
        &tlslab_experiment::breakdown::render_pair(&pair),
        &pair,
        a.json.as_deref(),
    )
}

/// Runs `tlslab overload`.
pub fn overload(a: &OverloadArgs) -> anyhow::Result<ExitCode> {
    use tlslab_experiment::overload::{self, OverloadPlan};
    let placement = tlslab_experiment::pin::Placement::split();
    let mut plan = if a.quick {
        OverloadPlan::quick(placement)
    } else {
        OverloadPlan::standard(placement)
    };
    if let Some(w) = a.window {
        if w.is_zero() {
            return Err(usage("--window must be positive"));
        }
        plan.window = w;
    }
    if let Some(l) = &a.loads {
        if l.is_empty() || l.iter().any(|m| !(m.is_finite() && *m > 0.0)) {
            return Err(usage(
                "--loads takes positive multiples of the capacity, e.g. 0.5,1,3",
            ));
        }
        plan.multipliers.clone_from(l);
    }
    if let Some(t) = a.timeout {
        if t.is_zero() {
            return Err(usage("--timeout must be positive"));
        }
        for arm in &mut plan.arms {
            if arm.timeout.is_some() {
                arm.timeout = Some(t);
            }
        }
    }
    if let Some(r) = a.reuse {
        if !(0.0..=100.0).contains(&r) {
            return Err(usage("--reuse takes a percentage from 0 to 100, e.g. 80"));
        }
        for arm in plan.arms.iter_mut().filter(|arm| arm.reuse > 0.0) {
            arm.reuse = r / 100.0;
        }
    }
    plan.retry_backoff = a.retry_backoff;
    plan.key = a.key_type;
    if a.requests == 0 {
        return Err(usage("--requests must be at least 1"));
    }
    plan.requests = a.requests;
    if a.robust_for.as_secs() == 0 {
        return Err(usage("--robust-for must be at least 1s"));
    }
    plan.robustness = a.robustness;
    plan.robust_high = a.robust_for;
    if let Some(c) = a.capacity {
        if !(c.is_finite() && c > 0.0) {
            return Err(usage(
                "--capacity takes a positive rate of user sessions/s, e.g. 300",
            ));
        }
        plan.capacity = Some(c);
    }
    let (mut tlslab, mut nginx) = (false, false);
    for s in &a.servers {
        match s.trim() {
            "tlslab" => tlslab = true,
            "nginx" => nginx = true,
            other => {
                return Err(usage(format!(
                    "--servers: unknown server {other:?}; use tlslab, nginx or tlslab,nginx"
                )));
            }
        }
    }
    let transport = if a.h3 { Transport::H3 } else { a.transport };
    if nginx && transport == Transport::H3 {
        return Err(usage(
            "--h3 runs the embedded server only (nginx here has no HTTP/3); use --servers tlslab",
        ));
    }
    if !tlslab && transport == Transport::Both {
        return Err(usage(
            "--transport both runs the embedded server over QUIC (nginx here has no HTTP/3); \
             use --servers tlslab or tlslab,nginx",
        ));
    }
    plan.transport = engine_transport(transport);
    if nginx {
        if a.nginx_limit_conn == 0 {
            return Err(usage("--nginx-limit-conn must be at least 1"));
        }
        let bin = match &a.nginx_bin {
            Some(b) => b.clone(),
            None => tlslab_experiment::nginx::find_nginx().ok_or_else(|| {
                usage(
                    "--servers nginx: nginx is not on PATH nor in /usr/sbin; install it \
                     (apt-get install nginx) or pass --nginx-bin PATH",
                )
            })?,
        };
        let base = plan.arms[0];
        plan.arms.push(overload::Arm {
            server: overload::Peer::Nginx,
            ..base
        });
        plan.nginx = Some(overload::NginxPlan {
            bin,
            limit_conn: a.nginx_limit_conn,
            keep_dir: a.nginx_dir.clone(),
        });
    }
    if !tlslab {
        plan.arms.retain(|x| x.server != overload::Peer::Tlslab);
    }
    if plan.arms.is_empty() {
        return Err(usage("--servers: name at least one of tlslab, nginx"));
    }
    let report = match transport {
        Transport::Both => overload::run_both(&plan, |line| eprintln!("{line}")),
        Transport::Tcp | Transport::H3 => overload::run(&plan, |line| eprintln!("{line}")),
    }
    .context("running overload")?;
    print_and_save(&report.render(), &report, a.json.as_deref())
}

/// Turns `tlslab cluster` flags into its configuration; the experiment
/// crate checks the ranges (nodes, reuse, cell, clients, groups).
fn cluster_config(a: &ClusterArgs) -> anyhow::Result<ClusterConfig> {
    let mut cfg = if a.quick {
        ClusterConfig::quick()
    } else {
        ClusterConfig::standard()
    };
    if a.h3 {
        cfg = cfg.over_quic();
    }
    cfg.nodes = a.node_count;
    cfg.node_kind = a.nodes;
    cfg.dispatcher = a.dispatcher;
    if let Some(r) = &a.reuse {
        cfg.reuse.clone_from(r);
    }
    if let Some(p) = &a.policy {
        cfg.policies = dedup(p);
    }
    if let Some(m) = &a.mechanism {
        cfg.mechanisms = dedup(m);
    }
    if let Some(s) = &a.sharing {
        cfg.sharing = dedup(s);
    }
    cfg.cell = a.cell.unwrap_or(cfg.cell);
    cfg.clients = a.clients;
    cfg.key = a.key_type;
    cfg.groups.clone_from(&a.groups);
    if a.body > 10 * 1024 * 1024 {
        return Err(usage("--body must be at most 10485760 bytes"));
    }
    cfg.body_bytes = a.body;
    if a.redis_timeout.is_zero() {
        return Err(usage("--redis-timeout must be positive, e.g. 5ms"));
    }
    cfg.redis_timeout = a.redis_timeout;
    cfg.path.clone_from(&a.path);
    cfg.validate().map_err(usage)?;
    Ok(cfg)
}

/// Runs `tlslab cluster`.
pub fn cluster(a: &ClusterArgs) -> anyhow::Result<ExitCode> {
    let cfg = cluster_config(a)?;
    let report =
        cluster::run(&cfg, |line| eprintln!("{line}")).context("running tlslab cluster")?;
    print_and_save(&report.render(), &report, a.json.as_deref())
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
