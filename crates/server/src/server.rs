//! The running server: runtime, listeners, connections, shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tlslab_crypto::meter::{self, Meter};
use tlslab_crypto::provider::Version;
use tlslab_runtime::{CpuPin, RuntimeSpec};
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Runtime;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::access_log::AccessLog;
use crate::admission::{Admission, Resumable};
use crate::config::AdmissionMode;
use crate::config::{
    ConnTimeouts, H2_PING_TIMEOUT, METRICS_MAX_CONNECTIONS, ServeConfig, TicketKeys,
};
use crate::content::Files;
use crate::error::{Error, Result};
use crate::idle::{Conns, Timeouts, Transport};
use crate::listen::{accept_loop, metrics_loop};
use crate::metrics;
use crate::shared::Shared;
use crate::snapshot::{Snapshot, Sources};
use crate::stats::{Listener, Stats};
use crate::tls;

/// How long [`Server::shutdown`] lets in-flight requests finish.
const DRAIN: Duration = Duration::from_secs(5);
/// The listen backlog of every listener.
const BACKLOG: u32 = 4096;

/// A running server. Dropping it without [`shutdown`](Server::shutdown)
/// stops it abruptly.
pub struct Server {
    rt: Option<Runtime>,
    shared: Arc<Shared>,
    sources: Arc<Sources>,
    shutdown_tx: watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
    https: Option<SocketAddr>,
    http: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    warnings: Vec<String>,
    quic: Option<Box<crate::quic::Listener>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("https", &self.https)
            .field("http", &self.http)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

fn builder(version: Option<&[u8]>, t: &ConnTimeouts) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // The idle timeouts are the registry's (crate::idle): hyper's header
    // read timeout would also run while a kept-alive connection waits.
    b.http1().timer(TokioTimer::new()).header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(t.h2_ping)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    match version {
        Some(b"h2") => b.http2_only(),
        Some(_) => b.http1_only(),
        None => b,
    }
}

fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener> {
    let err = |source| Error::Bind { what, addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(BACKLOG).map_err(err)
}

/// How many TCP ports [`bind_with_udp`] tries.
const PORT_PAIR_TRIES: usize = 16;

/// The HTTPS listener on `addr` (port 0) and a UDP socket on the same
/// address and port number, for `--h3` on the HTTPS address. The kernel
/// picks the TCP port; the same number over UDP may be held by another
/// socket (a client's ephemeral port, say), and then another TCP port is
/// taken, up to [`PORT_PAIR_TRIES`] times.
fn bind_with_udp(addr: SocketAddr) -> Result<(TcpListener, std::net::UdpSocket)> {
    let mut tries = 0;
    loop {
        tries += 1;
        let l = bind("https", addr)?;
        let port = l
            .local_addr()
            .map_err(|source| Error::Bind {
                what: "https",
                addr,
                source,
            })?
            .port();
        let at = SocketAddr::new(addr.ip(), port);
        match std::net::UdpSocket::bind(at) {
            Ok(u) => return Ok((l, u)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < PORT_PAIR_TRIES => {}
            Err(source) => {
                return Err(Error::Bind {
                    what: "h3",
                    addr: at,
                    source,
                });
            }
        }
    }
}

/// With an ablation, refuses non-loopback addresses unless `allow_remote`;
/// returns the warnings to print at start.
fn ablation_guard(cfg: &ServeConfig, h3: Option<SocketAddr>) -> Result<Vec<String>> {
    let set = cfg.tls.ablation;
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let mut warnings = vec![format!(
        "INSECURE: --ablate {set} replaces TLS stages with no-ops (see crates/crypto/ABLATIONS.md): this server's connections are not confidential or authenticated. Use it only to measure, with a client started with the same --ablate set."
    )];
    let addrs = [
        ("https", cfg.https),
        ("http", cfg.http),
        ("metrics", cfg.metrics),
        ("HTTP/3", h3),
    ];
    for (what, addr) in addrs {
        let Some(addr) = addr else { continue };
        if addr.ip().to_canonical().is_loopback() {
            continue;
        }
        if !cfg.allow_remote {
            return Err(Error::Usage(format!(
                "--ablate {set} makes TLS insecure, and the {what} address {addr} is not loopback: bind to 127.0.0.1 or add --allow-remote"
            )));
        }
        warnings.push(format!(
            "INSECURE: --allow-remote: the {what} listener on {addr} is reachable from other hosts while --ablate {set} is set."
        ));
    }
    Ok(warnings)
}

impl Server {
    /// Builds the runtime, loads the content, binds the listeners and starts
    /// serving. Returns once every listener is accepting.
    ///
    /// Blocks briefly; call it outside async code (or in `spawn_blocking`).
    pub fn start(cfg: ServeConfig) -> Result<Server> {
        Self::start_with_h3(cfg, None)
    }

    /// [`Server::start`] with an HTTP/3 listener beside the TLS one when
    /// `h3` is set (see [`H3Settings`](crate::quic::H3Settings)).
    pub fn start_with_h3(cfg: ServeConfig, h3: Option<crate::quic::H3Settings>) -> Result<Server> {
        cfg.validate()?;
        let warnings = ablation_guard(&cfg, h3.as_ref().map(|h| h.addr))?;
        let access_log = cfg
            .access_log
            .as_deref()
            .map(AccessLog::open)
            .transpose()?
            .map(Arc::new);
        let meter = Meter::new();
        let built = match cfg.https {
            Some(_) => Some(tls::build(&cfg.tls, &meter)?),
            None => None,
        };
        let mut quic = match (&h3, &built) {
            (Some(h), Some(b)) => Some(crate::quic::prepare(
                h,
                &b.config,
                cfg.handshake_timeout,
                &meter,
            )?),
            (Some(_), None) => {
                return Err(Error::Usage(
                    "--h3 needs the TLS listener; give --https too".into(),
                ));
            }
            _ => None,
        };
        let files = Files::load(&cfg.content)?;
        // CpuPin checks the CPUs and that pinning works here before any
        // worker depends on it.
        let pin = cfg.pin_cpus.as_deref().map(CpuPin::new).transpose()?;
        let (rt, threads) = RuntimeSpec::new("tlslab-server", cfg.threads)
            .pinned(pin)
            .build()?;

        let early_data = built
            .as_ref()
            .is_some_and(|b| b.config.max_early_data_size > 0);
        let compression = built.as_ref().map(|b| b.compression.clone());
        let (cache, ticketer, redis, ring, acceptor) = match built {
            Some(b) => (
                b.cache,
                b.ticketer,
                b.redis,
                b.ring,
                Some(TlsAcceptor::from(b.config)),
            ),
            None => (None, None, None, None, None),
        };
        let stats = Arc::new(Stats::new(
            cache,
            ticketer,
            threads,
            meter,
            cfg.tls.ablation,
            quic.as_mut().map(|p| std::mem::take(&mut p.counters)),
        ));
        let admission =
            (cfg.admission.mode != AdmissionMode::Off && cfg.https.is_some()).then(|| {
                Arc::new(Admission::new(
                    cfg.admission.clone(),
                    Resumable {
                        cache: stats.cache.clone(),
                        tickets: cfg.tls.tickets,
                        ring: ring.clone(),
                        tls13: cfg.tls.versions.contains(&Version::Tls13),
                    },
                    cfg.threads,
                ))
            });
        let conns = Arc::new(Conns::new(Timeouts {
            request: cfg.timeouts.request,
            keepalive: cfg.timeouts.keepalive,
        }));
        let sources = Arc::new(Sources {
            stats: stats.clone(),
            idle: conns.clone(),
            redis: redis.clone(),
            ticket_keys: ring.clone(),
            admission: admission.clone(),
        });
        let mut registry = metrics::registry(sources.clone());
        if let Some(c) = compression {
            registry.register_collector(Box::new(crate::metrics::CompressionCollector(c)));
        }
        let prefetch = redis.clone().map(|store| crate::prefetch::Prefetcher {
            store,
            stateless_tickets: cfg.tls.tickets,
            tls13: cfg.tls.versions.contains(&Version::Tls13),
        });
        let shared = Arc::new(Shared {
            stats,
            files,
            acceptor,
            early_data,
            ablation: cfg.tls.ablation,
            mismatch_warned: AtomicBool::new(false),
            handshake_timeout: cfg.handshake_timeout,
            conns: Arc::new(Semaphore::new(cfg.max_connections)),
            idle: conns.clone(),
            metrics_conns: Arc::new(Semaphore::new(METRICS_MAX_CONNECTIONS)),
            burners: Arc::new(Semaphore::new(cfg.threads)),
            auto: builder(None, &cfg.timeouts),
            h1: {
                let mut b = http1::Builder::new();
                b.timer(TokioTimer::new()).header_read_timeout(None);
                b
            },
            h2: builder(Some(b"h2"), &cfg.timeouts),
            registry,
            access_log,
            next_conn: AtomicU64::new(0),
            prefetch,
            admission: admission.clone(),
            alt_svc: std::sync::OnceLock::new(),
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        {
            let _enter = rt.enter();
            if let Some(r) = &redis {
                r.start()?;
            }
            rt.spawn(crate::idle::reap(conns, shutdown_rx.clone()));
            match (&ring, &cfg.tls.ticket_keys) {
                (Some(ring), TicketKeys::File(path)) => crate::ticket_keys::spawn_watch(
                    path.clone(),
                    ring.clone(),
                    shutdown_rx.clone(),
                )?,
                (Some(ring), TicketKeys::Redis { url, key, rotation }) => {
                    let client =
                        redis::Client::open(url.as_str()).map_err(|source| Error::RedisUrl {
                            option: "--ticket-keys",
                            url: url.clone(),
                            source,
                        })?;
                    crate::ticket_keys::spawn_redis(
                        crate::ticket_keys::RedisKeys {
                            client,
                            key: key.clone(),
                            rotation: *rotation,
                        },
                        ring.clone(),
                        shutdown_rx.clone(),
                    );
                }
                _ => {}
            }
            if let Some(adm) = &admission {
                // The CPU the workers can use: their number, or fewer CPUs.
                let cpus = cfg.pin_cpus.as_ref().map_or_else(
                    || std::thread::available_parallelism().map_or(1, |n| n.get()),
                    Vec::len,
                );
                rt.spawn(crate::admission::control(
                    adm.clone(),
                    shared.stats.clone(),
                    cfg.threads.min(cpus),
                    shutdown_rx.clone(),
                ));
            }
        }

        let mut loops = Vec::new();
        let mut addrs = [None, None, None];
        // `--h3` on the HTTPS address with port 0 takes the port number the
        // kernel gives TCP, over UDP: its socket is bound here, beside the
        // TCP one, on a number free for both.
        let mut udp = None;
        let follows = quic.as_ref().is_some_and(|p| p.follows(cfg.https));
        {
            let _enter = rt.enter();
            let listeners = [
                ("https", cfg.https, Some(Listener::Https)),
                ("http", cfg.http, Some(Listener::Http)),
                ("metrics", cfg.metrics, None),
            ];
            let mut bound = Vec::new();
            for (i, (what, addr, kind)) in listeners.into_iter().enumerate() {
                if let Some(addr) = addr {
                    let l = if kind == Some(Listener::Https) && follows {
                        let (l, u) = bind_with_udp(addr)?;
                        udp = Some(u);
                        l
                    } else {
                        bind(what, addr)?
                    };
                    if kind == Some(Listener::Https) && admission.is_some() {
                        // Admission control's queue signal: the kernel
                        // stamps each connection's first bytes.
                        if let Err(e) = crate::queue::stamp_arrivals(&l) {
                            tracing::warn!(
                                "SO_TIMESTAMPNS on the HTTPS listener failed ({e}); admission control times its queue from accept() instead, which counts a slow client's delay as the server's"
                            );
                        }
                    }
                    addrs[i] = Some(l.local_addr().map_err(|source| Error::Bind {
                        what,
                        addr,
                        source,
                    })?);
                    bound.push((l, kind));
                }
            }
            for (l, kind) in bound {
                let shared = shared.clone();
                let rx = shutdown_rx.clone();
                loops.push(match kind {
                    Some(kind) => rt.spawn(accept_loop(l, kind, shared, rx)),
                    None => rt.spawn(metrics_loop(l, shared, rx)),
                });
            }
        }
        let quic = match quic {
            Some(mut p) => {
                p.follow(cfg.https, addrs[0]);
                let _enter = rt.enter();
                let l = crate::quic::start(p, shared.clone(), shutdown_rx.clone(), udp)?;
                let _ = shared.alt_svc.set(crate::quic::alt_svc(l.addr.port()));
                Some(Box::new(l))
            }
            None => None,
        };
        tracing::info!(
            https = ?addrs[0],
            http = ?addrs[1],
            metrics = ?addrs[2],
            files = shared.files.len(),
            ablation = %cfg.tls.ablation,
            "tlslab server listening"
        );
        for w in &warnings {
            // The caller shows these to the user (the CLI on stderr); the
            // log keeps a copy at info so it is not printed twice.
            tracing::info!("{w}");
        }
        Ok(Server {
            rt: Some(rt),
            shared,
            sources,
            shutdown_tx,
            loops,
            https: addrs[0],
            http: addrs[1],
            metrics: addrs[2],
            warnings,
            quic,
        })
    }

    /// Warnings the caller must show the user at every start (the CLI
    /// prints them to stderr): non-empty exactly when an ablation is set.
    /// [`Server::start`] has also logged each with `tracing::info!`.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The server's cryptographic operations so far (also in
    /// [`Snapshot::crypto`]).
    pub fn crypto_snapshot(&self) -> meter::Snapshot {
        self.shared.stats.meter.snapshot()
    }

    /// The bound address of the TLS listener.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https
    }

    /// The bound UDP address of the HTTP/3 listener.
    pub fn h3_addr(&self) -> Option<SocketAddr> {
        self.quic.as_ref().map(|q| q.addr)
    }

    /// The bound address of the plain-HTTP listener.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// The bound address of the metrics listener.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The counters now, of every listener (the HTTP/3 one's in
    /// [`Snapshot::quic`]).
    pub fn snapshot(&self) -> Snapshot {
        self.sources.snapshot()
    }

    /// The `/metrics` exposition text now (what a scrape would return).
    pub fn metrics_text(&self) -> String {
        metrics::render(&self.shared.registry)
    }

    /// CPU time used so far by the server runtime's threads (all of them,
    /// including ones that already exited): the sum of the first field of
    /// `/proc/self/task/<tid>/schedstat` (see [`tlslab_runtime::Threads`]). This is the server's own CPU,
    /// without the load generator's, when both run in one process.
    pub fn cpu_time(&self) -> Duration {
        self.shared.stats.threads.cpu_time().total()
    }

    /// What the server runtime's threads did so far: their CPU time (as
    /// [`cpu_time`](Self::cpu_time)) with the syscalls, writes, task clock
    /// and allocations the probes counted, each `None` unless
    /// [`tlslab_runtime::costs::enable`] was called before the server
    /// started (see [`tlslab_runtime::Threads::costs`]).
    pub fn thread_costs(&self) -> tlslab_runtime::ThreadCosts {
        self.shared.stats.threads.costs()
    }

    /// Stops gracefully: stops accepting, asks every connection to finish
    /// its in-flight requests and close (HTTP/2 GOAWAY, HTTP/1 after the
    /// current response), waits up to 5 s for them, then stops the runtime
    /// and returns the final counters. Blocks; call it outside async code.
    pub fn shutdown(mut self) -> Snapshot {
        let _ = self.shutdown_tx.send(true);
        if let Some(q) = &self.quic {
            q.close();
        }
        let deadline = Instant::now() + DRAIN;
        while Instant::now() < deadline
            && (self.shared.stats.open_now(Transport::Tcp) > 0
                || self.loops.iter().any(|l| !l.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let open = self.shared.stats.open_now(Transport::Tcp);
        if open > 0 {
            tracing::warn!(open, "connections still open after 5 s; closing them");
        }
        if let Some(rt) = self.rt.take() {
            // A fresh thread is outside any runtime, so the runtime may block
            // there while its threads stop (and record their CPU time).
            let _ = std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(1))).join();
        }
        if let Some(log) = &self.shared.access_log {
            log.finish();
        }
        self.sources.snapshot()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let _ = self.shutdown_tx.send(true);
            rt.shutdown_background();
        }
        if let Some(log) = &self.shared.access_log {
            log.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CertSource, Content, TlsSettings};

    fn cfg(https: &str, ablation: &str, allow_remote: bool) -> ServeConfig {
        let g = tlslab_crypto::pki::generate(tlslab_crypto::pki::KeyType::EcdsaP256, &[]).unwrap();
        let mut c = ServeConfig::new(
            https.parse().unwrap(),
            Content::Empty,
            TlsSettings::new(CertSource::Generated(g)),
        );
        c.tls.ablation = ablation.parse().unwrap();
        c.allow_remote = allow_remote;
        c
    }

    #[test]
    fn an_https_port_for_h3_is_free_over_udp_too() {
        // UDP ports held as a client's ephemeral ones would be: the kernel
        // may give TCP one of their numbers, which must then be skipped.
        let held: Vec<_> = (0..500)
            .filter_map(|_| std::net::UdpSocket::bind("127.0.0.1:0").ok())
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _enter = rt.enter();
        for _ in 0..40 {
            let (l, u) = bind_with_udp("127.0.0.1:0".parse().unwrap()).unwrap();
            assert_eq!(
                l.local_addr().unwrap().port(),
                u.local_addr().unwrap().port()
            );
        }
        drop(held);
    }

    #[test]
    fn the_guard_refuses_remote_addresses_unless_allowed() {
        // No ablation: any address, no warning.
        assert!(
            ablation_guard(&cfg("0.0.0.0:443", "none", false), None)
                .unwrap()
                .is_empty()
        );
        // Loopback, IPv4-mapped loopback included: one warning.
        for a in [
            "127.0.0.1:0",
            "127.5.6.7:0",
            "[::1]:0",
            "[::ffff:127.0.0.1]:0",
        ] {
            let w = ablation_guard(&cfg(a, "cipher", false), None).unwrap();
            assert_eq!(w.len(), 1, "{a}: {w:?}");
            assert!(w[0].contains("INSECURE: --ablate cipher"), "{w:?}");
        }
        let e = ablation_guard(&cfg("192.0.2.1:443", "cipher", false), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("https address 192.0.2.1:443 is not loopback"),
            "{e}"
        );
        assert!(e.contains("bind to 127.0.0.1 or add --allow-remote"), "{e}");
        let mut c = cfg("127.0.0.1:0", "minimal", false);
        c.http = Some("[::ffff:192.0.2.1]:80".parse().unwrap());
        let e = ablation_guard(&c, None).unwrap_err().to_string();
        assert!(e.contains("http address"), "{e}");
        // Allowed: a second warning names the exposed listener.
        let mut c = cfg("0.0.0.0:443", "sig", true);
        c.metrics = Some("0.0.0.0:9090".parse().unwrap());
        let w = ablation_guard(&c, None).unwrap();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[1].contains("https listener on 0.0.0.0:443"), "{w:?}");
        assert!(w[2].contains("metrics listener on 0.0.0.0:9090"), "{w:?}");
        // The HTTP/3 listener of an ablated server: loopback only, too.
        let c = cfg("127.0.0.1:0", "quic-packet", false);
        let e = ablation_guard(&c, Some("192.0.2.1:443".parse().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTP/3 address 192.0.2.1:443"), "{e}");
        assert!(ablation_guard(&c, Some("127.0.0.1:0".parse().unwrap())).is_ok());
    }
}
