//! The dispatcher of a cell: `tlslab dispatch` embedded (over TCP, or
//! over UDP with `--h3`) or an `haproxy` process, and what the cluster
//! reads of it (CPU time, resumption attempts and acceptances from its
//! `/metrics`).
//!
//! It imports nothing else of the cluster experiment but the peers
//! ([`super::nodes`]): the backends are passed in.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use tlslab_crypto::quic::LbParams;
use tlslab_dispatch::{Backend, Policy, Transport};

use super::nodes::{self, Proc};
use crate::Error;

/// How long a UDP flow (one client port) lives with no datagram.
const UDP_FLOW_IDLE: Duration = Duration::from_secs(5);

/// What a cell's dispatcher is started with.
pub(super) struct DispatchSpec<'a> {
    /// Where it listens (port 0).
    pub listen: SocketAddr,
    /// The policy.
    pub policy: Policy,
    /// The nodes, with their tags and QUIC-LB server IDs.
    pub backends: Vec<Backend>,
    /// `Some`: `tlslab dispatch --udp` with this QUIC-LB configuration;
    /// `None`: over TCP.
    pub quic_lb: Option<LbParams>,
    /// Its CPUs (empty: not pinned).
    pub cpus: &'a [usize],
    /// `Some`: an `haproxy` process (this binary, its files in the
    /// directory) instead of the embedded dispatcher.
    pub haproxy: Option<(&'a Path, &'a Path)>,
}

pub(super) enum Dispatch {
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
pub(super) struct DispatchCounters {
    pub(super) cpu_ns: u64,
    pub(super) attempts: Option<u64>,
    pub(super) accepted: Option<u64>,
}

impl Dispatch {
    pub(super) fn start(spec: DispatchSpec) -> Result<Dispatch, Error> {
        if let Some((bin, dir)) = spec.haproxy {
            let backends: Vec<SocketAddr> = spec.backends.iter().map(|b| b.addr).collect();
            let (proc, addr) = nodes::start_haproxy(
                bin,
                dir,
                spec.listen.ip(),
                spec.policy,
                &backends,
                spec.cpus,
            )?;
            return Ok(Dispatch::Haproxy { proc, addr });
        }
        let pin = if spec.cpus.is_empty() {
            None
        } else {
            Some(
                tlslab_runtime::CpuPin::new(spec.cpus)
                    .map_err(|e| Error::Cluster(format!("dispatcher CPUs: {e}")))?,
            )
        };
        let (rt, threads) = tlslab_runtime::RuntimeSpec::new("cluster-dispatch", 1)
            .pinned(pin)
            .build()
            .map_err(|e| Error::Cluster(format!("dispatcher runtime: {e}")))?;
        let cfg = tlslab_dispatch::Config {
            listen: spec.listen,
            backends: spec.backends,
            policy: spec.policy,
            session_timeout: Duration::from_secs(300),
            max_sessions: std::num::NonZeroUsize::new(1_000_000)
                .unwrap_or(std::num::NonZeroUsize::MIN),
            hello_timeout: Duration::from_secs(5),
            // Over UDP a flow is one connection of one request (the load
            // opens a socket per connection): a short idle expiry keeps the
            // dispatcher's sockets to a node few.
            idle_timeout: if spec.quic_lb.is_some() {
                UDP_FLOW_IDLE
            } else {
                tlslab_dispatch::DEFAULT_IDLE_TIMEOUT
            },
            bad_input: tlslab_dispatch::BadInputAction::Forward,
            send_proxy_v2: false,
            health_check: tlslab_dispatch::HealthCheck::Off,
            health_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            metrics: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            transport: if spec.quic_lb.is_some() {
                Transport::Udp
            } else {
                Transport::Tcp
            },
            quic_lb: spec.quic_lb.into_iter().collect(),
            // `dispatch --max-flows`'s default.
            max_flows: std::num::NonZeroUsize::new(100_000).unwrap_or(std::num::NonZeroUsize::MIN),
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

    pub(super) fn addr(&self) -> SocketAddr {
        match self {
            Dispatch::Embedded { addr, .. } | Dispatch::Haproxy { addr, .. } => *addr,
        }
    }

    pub(super) fn counters(&self) -> DispatchCounters {
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
                cpu_ns: nodes::cpu_ns(proc),
                attempts: None,
                accepted: None,
            },
        }
    }

    pub(super) fn stop(self) {
        match self {
            Dispatch::Embedded { rt, stop, .. } => {
                let _ = stop.send(true);
                rt.shutdown_timeout(Duration::from_secs(1));
            }
            Dispatch::Haproxy { proc, .. } => drop(proc),
        }
    }
}

/// GET /metrics over HTTP/1.0 from a loopback address.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    // Bounded: a metrics page is small.
    s.take(4 << 20).read_to_string(&mut body).ok()?;
    Some(body)
}

/// The value of an unlabelled Prometheus sample.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
