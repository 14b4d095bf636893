//! One client connection: read its ClientHello, pick and connect a node
//! (failing over), then move bytes both ways until both ends close, one
//! side fails (passed on as a reset) or the connection idles out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::{BadInputAction, HealthCheck};
use crate::hello::{Hello, read_hello};
use crate::inspect::ServerLearner;
use crate::metrics::BadInput;
use crate::proxy_v2;
use crate::route::{Shared, settle};

/// Counts a client connection as open while it lives.
struct OpenGuard<'a>(&'a AtomicU64);

impl<'a> OpenGuard<'a> {
    fn new(c: &'a AtomicU64) -> Self {
        c.fetch_add(1, Relaxed);
        OpenGuard(c)
    }
}

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

pub(crate) async fn handle(shared: Arc<Shared>, mut client: TcpStream, peer: SocketAddr) {
    let _open = OpenGuard::new(&shared.metrics.open);
    let (first, offer, raw) = match read_hello(&mut client, shared.cfg.hello_timeout).await {
        Hello::Parsed(b, o, r) => (b, Some(o), Some(r)),
        Hello::Bad(b, kind) => {
            shared.metrics.bad(kind);
            // A client that stalls mid-hello is closed whatever
            // --bad-input says: forwarding it would hand a slowloris to
            // the nodes and hold two sockets here.
            if shared.cfg.bad_input == BadInputAction::Close
                || kind == BadInput::Timeout
                || kind == BadInput::Truncated && b.is_empty()
            {
                shared.metrics.bad_input_closed.fetch_add(1, Relaxed);
                return;
            }
            (b, None, None)
        }
    };
    let (choice, decision) = shared.choose(offer.as_ref(), raw.as_ref(), peer);
    shared.metrics.decision(decision);
    // Connect, failing over to the least-loaded other nodes.
    let mut tried = Vec::new();
    let mut next = choice;
    let (node, backend) = loop {
        let Some(i) = next else {
            shared.metrics.no_backend.fetch_add(1, Relaxed);
            return;
        };
        tried.push(i);
        let addr = shared.cfg.backends[i].addr;
        match tokio::time::timeout(shared.cfg.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => break (i, s),
            _ => {
                shared.nodes[i].connect_errors.fetch_add(1, Relaxed);
                // With health checks, the next passing check brings the
                // node back; without, nothing would, so it stays up.
                if !matches!(shared.cfg.health_check, HealthCheck::Off) {
                    shared.nodes[i].healthy.store(false, Relaxed);
                    tracing::warn!(node = %addr, "connect failed; marked down until a health check passes");
                } else {
                    tracing::warn!(node = %addr, "connect failed; trying another node");
                }
                next = shared.least_loaded(&tried);
            }
        }
    };
    let _ = backend.set_nodelay(true);
    let stats = &shared.nodes[node];
    stats.connections.fetch_add(1, Relaxed);
    stats.active.fetch_add(1, Relaxed);
    let learner = offer.map(ServerLearner::new);
    proxy(&shared, node, client, backend, peer, first, learner).await;
    shared.nodes[node].active.fetch_sub(1, Relaxed);
}

const BUF: usize = 16 * 1024;

/// Why one direction of a proxied connection failed.
enum Broken {
    /// The client's socket failed (a reset, or gone).
    Client(std::io::Error),
    /// The node's socket failed.
    Node(std::io::Error),
}

/// How a proxied connection ended.
enum Ended {
    /// Both directions finished (EOF each way).
    Closed,
    /// One side failed; the other is reset in turn.
    Broken(Broken),
    /// Nothing moved for `--idle-timeout`.
    Idle,
}

/// Moves bytes both ways until both directions end, one side fails, or
/// the connection is idle for `--idle-timeout`. A clean EOF in one
/// direction is passed on as a half-close and leaves the other running.
/// A failure (a reset, a write to a closed socket) ends both at once and
/// is passed on as a reset (`SO_LINGER` 0), so the client of a node that
/// resets sees the reset as it would without the dispatcher.
async fn proxy(
    shared: &Shared,
    node: usize,
    client: TcpStream,
    backend: TcpStream,
    peer: SocketAddr,
    first: Vec<u8>,
    mut learner: Option<ServerLearner>,
) {
    let stats = &shared.nodes[node];
    let activity = tlslab_runtime::idle::Activity::new();
    let (mut cr, mut cw) = client.into_split();
    let (mut br, mut bw) = backend.into_split();
    let ended = {
        let up = async {
            if shared.cfg.send_proxy_v2 {
                let dst = cr.local_addr().unwrap_or(shared.cfg.listen);
                bw.write_all(&proxy_v2::header(peer, dst))
                    .await
                    .map_err(Broken::Node)?;
            }
            bw.write_all(&first).await.map_err(Broken::Node)?;
            stats.bytes_up.fetch_add(first.len() as u64, Relaxed);
            activity.touch();
            let mut buf = vec![0u8; BUF];
            loop {
                let k = cr.read(&mut buf).await.map_err(Broken::Client)?;
                if k == 0 {
                    break;
                }
                activity.touch();
                bw.write_all(&buf[..k]).await.map_err(Broken::Node)?;
                stats.bytes_up.fetch_add(k as u64, Relaxed);
                activity.touch();
            }
            bw.shutdown().await.map_err(Broken::Node)
        };
        let down = async {
            let mut buf = vec![0u8; BUF];
            let r: Result<(), Broken> = async {
                loop {
                    let k = br.read(&mut buf).await.map_err(Broken::Node)?;
                    if k == 0 {
                        break;
                    }
                    activity.touch();
                    if let Some(l) = learner.as_mut()
                        && !l.done()
                    {
                        l.feed(&buf[..k]);
                        if l.done() {
                            settle(shared, node, l);
                        }
                    }
                    cw.write_all(&buf[..k]).await.map_err(Broken::Client)?;
                    stats.bytes_down.fetch_add(k as u64, Relaxed);
                    activity.touch();
                }
                cw.shutdown().await.map_err(Broken::Client)
            }
            .await;
            if let Some(l) = learner.as_mut()
                && !l.done()
            {
                settle(shared, node, l);
            }
            r
        };
        let idle = activity.idle_for(shared.cfg.idle_timeout);
        tokio::pin!(up, down, idle);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) if down_done => break Ended::Closed,
                    Ok(()) => up_done = true,
                    Err(b) => break Ended::Broken(b),
                },
                r = &mut down, if !down_done => match r {
                    Ok(()) if up_done => break Ended::Closed,
                    Ok(()) => down_done = true,
                    Err(b) => break Ended::Broken(b),
                },
                () = &mut idle => break Ended::Idle,
            }
        }
    };
    match ended {
        Ended::Closed => {}
        Ended::Idle => {
            shared.metrics.idle_closed.fetch_add(1, Relaxed);
            tracing::debug!(%peer, "idle for --idle-timeout; closed");
        }
        Ended::Broken(Broken::Node(e)) => {
            shared.metrics.resets[0].fetch_add(1, Relaxed);
            tracing::debug!(%peer, "node connection failed ({e}); resetting the client");
            reset(cr, cw);
        }
        Ended::Broken(Broken::Client(e)) => {
            shared.metrics.resets[1].fetch_add(1, Relaxed);
            tracing::debug!(%peer, "client connection failed ({e}); resetting the node's");
            reset(br, bw);
        }
    }
}

/// Closes a connection with a reset (`SO_LINGER` 0). The halves are
/// joined first: dropping a write half on its own sends a FIN.
fn reset(r: tokio::net::tcp::OwnedReadHalf, w: tokio::net::tcp::OwnedWriteHalf) {
    if let Ok(s) = r.reunite(w) {
        let _ = s.set_zero_linger();
    }
}
