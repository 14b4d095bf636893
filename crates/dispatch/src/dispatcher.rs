//! The running dispatcher: binding the listeners, the accept loop (TCP)
//! or the datagram loop (UDP, [`crate::udp`]), the health checks and the
//! `/metrics` endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

use crate::config::{Config, Error, HealthCheck, Transport};
use crate::health;
use crate::metrics::{Metrics, NodeStats};
use crate::route::Shared;
use crate::splice::handle;
use crate::table::SessionTable;

/// What clients reach: a TCP listener, or a UDP socket.
enum Listener {
    Tcp(TcpListener),
    Udp(Arc<UdpSocket>),
}

/// A bound, not yet running dispatcher.
pub struct Dispatcher {
    shared: Arc<Shared>,
    listener: Listener,
    metrics_listener: Option<TcpListener>,
}

impl Dispatcher {
    /// Checks the configuration and binds the listeners.
    pub async fn bind(cfg: Config) -> Result<Dispatcher, Error> {
        if cfg.backends.is_empty() {
            return Err(Error::NoBackends);
        }
        if cfg.backends.len() > usize::from(u16::MAX) {
            return Err(Error::TooManyBackends {
                count: cfg.backends.len(),
            });
        }
        cfg.check()?;
        let bind = |source| Error::Bind {
            addr: cfg.listen,
            source,
        };
        let listener = match cfg.transport {
            Transport::Tcp => Listener::Tcp(TcpListener::bind(cfg.listen).await.map_err(bind)?),
            Transport::Udp => {
                Listener::Udp(Arc::new(UdpSocket::bind(cfg.listen).await.map_err(bind)?))
            }
        };
        let metrics_listener = match cfg.metrics {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| Error::Bind { addr, source })?,
            ),
            None => None,
        };
        let nodes = cfg
            .backends
            .iter()
            .map(|_| {
                let s = NodeStats::default();
                s.healthy.store(true, Relaxed);
                s
            })
            .collect();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        let shared = Arc::new(Shared {
            table: SessionTable::new(cfg.max_sessions, cfg.session_timeout),
            cfg,
            nodes,
            metrics: Metrics::default(),
            rr: AtomicU64::new(0),
            rng: AtomicU64::new(seed),
        });
        Ok(Dispatcher {
            shared,
            listener,
            metrics_listener,
        })
    }

    /// The proxy's bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Udp(s) => s.local_addr(),
        }
    }

    /// The metrics listener's bound address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The current `/metrics` text.
    pub fn metrics_text(&self) -> String {
        self.shared.exposition()
    }

    /// Runs until `shutdown` turns true; then stops accepting (open
    /// connections are left to finish on the runtime).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let Dispatcher {
            shared,
            listener,
            metrics_listener,
        } = self;
        if !matches!(shared.cfg.health_check, HealthCheck::Off) {
            for i in 0..shared.nodes.len() {
                tokio::spawn(health_loop(shared.clone(), i, shutdown.clone()));
            }
        }
        if let Some(l) = metrics_listener {
            tokio::spawn(serve_metrics(shared.clone(), l, shutdown.clone()));
        }
        let listener = match listener {
            Listener::Tcp(l) => l,
            Listener::Udp(s) => {
                match crate::udp::UdpLoop::new(shared, s) {
                    Ok(l) => l.run(shutdown).await,
                    Err(e) => tracing::error!("dispatch --udp: {e}"),
                }
                return;
            }
        };
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((sock, peer)) => {
                        let _ = sock.set_nodelay(true);
                        tokio::spawn(handle(shared.clone(), sock, peer));
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return; }
                }
            }
        }
    }
}

async fn health_loop(shared: Arc<Shared>, i: usize, mut shutdown: watch::Receiver<bool>) {
    let addr = shared.cfg.backends[i].addr;
    let limit = shared.cfg.connect_timeout;
    loop {
        let r = match &shared.cfg.health_check {
            HealthCheck::Tcp => health::tcp_check(addr, limit).await,
            HealthCheck::Tls(t) => t.check(addr, limit).await,
            HealthCheck::Off => return,
        };
        let ok = r.is_ok();
        if !ok {
            shared.nodes[i].health_failures.fetch_add(1, Relaxed);
        }
        let was = shared.nodes[i].healthy.swap(ok, Relaxed);
        if was != ok {
            match r {
                Ok(()) => tracing::info!(node = %addr, "health check passed; node rejoins"),
                Err(e) => {
                    tracing::warn!(node = %addr, "health check failed ({e}); node marked down, its sessions go to other nodes by load")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.cfg.health_interval) => {}
            _ = shutdown.changed() => if *shutdown.borrow() { return; },
        }
    }
}

/// The time a `/metrics` client has to send each request head (the first,
/// and each next on a kept-alive connection).
const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_metrics(shared: Arc<Shared>, l: TcpListener, mut shutdown: watch::Receiver<bool>) {
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    loop {
        let sock = tokio::select! {
            r = l.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
            _ = shutdown.changed() => if *shutdown.borrow() { return } else { continue },
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        hyper::Response::builder()
                            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                            .body(Full::new(bytes::Bytes::from(shared.exposition())))
                    } else {
                        hyper::Response::builder().status(404).body(Full::new(
                            bytes::Bytes::from_static(b"not found; try /metrics\n"),
                        ))
                    };
                    Ok::<_, http::Error>(resp.unwrap_or_default())
                }
            });
            // An idle or trickling scraper is closed after 10 s.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(sock), svc)
                .await;
        });
    }
}
