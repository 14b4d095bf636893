//! The accept loops of the client listeners and of the metrics
//! listener, and what a new connection goes through before its TLS
//! handshake: a slot under the connection limit and, with admission
//! control, the timing of its first bytes.

use std::convert::Infallible;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use nix::sys::socket::{MsgFlags, recv};
use prometheus_client::registry::Registry;
use tlslab_runtime::{cork, uncorked};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError, watch};

use crate::accept::Backoff;
use crate::admission::Admission;
use crate::config::{METRICS_MAX_CONNECTIONS, METRICS_TIMEOUT};
use crate::content::{self, Body};
use crate::handshake::serve_tls;
use crate::http_conn::serve_http;
use crate::idle::{ConnInfo, Transport};
use crate::io::{CountingIo, SocketBytes};
use crate::metrics;
use crate::queue::FirstBytes;
use crate::shared::{Shared, stopping};
use crate::stats::Listener;

pub(crate) async fn accept_loop(
    listener: TcpListener,
    kind: Listener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    loop {
        // Accept first and then take a slot: a loop waiting for a slot
        // before accepting would hold one it does not use (with --http, one
        // listener's idle loop kept a slot from the other).
        let (stream, peer) = tokio::select! {
            x = crate::accept::accept(&listener, &mut backoff, kind.name()) => x,
            _ = stopping(&mut shutdown) => return,
        };
        // Only admission control reads the clock here (the fallback when
        // the kernel gives no receive timestamp).
        let accepted = shared.admission.as_ref().map(|_| Instant::now());
        let permit = match shared.conns.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return,
            Err(TryAcquireError::NoPermits) => match make_room(&shared, &mut shutdown).await {
                Some(p) => p,
                None => return,
            },
        };
        let _ = stream.set_nodelay(true);
        let guard = shared.stats.open(Transport::Tcp, kind);
        let conn = ConnInfo::new(peer, shared.next_conn.fetch_add(1, Ordering::Relaxed) + 1);
        let shared = shared.clone();
        let mut rx = shutdown.clone();
        // The TLS and HTTP state (several KiB) is boxed where each branch
        // starts, so the spawned future is small: spawning a large future
        // copies it more than once per connection, and a future holding
        // both branches inline is the size of their sum, not of the larger
        // (twice the memory per idle connection).
        let fut = async move {
            let _permit = permit;
            let _guard = guard;
            match kind {
                // The response and close_notify, flushed one after the
                // other, leave in one write.
                Listener::Https => {
                    let deadline = tokio::time::Instant::now() + shared.handshake_timeout;
                    // Boxed, as below, and only for a client that has sent
                    // nothing yet.
                    if !first_bytes_here(&stream)
                        && !Box::pin(first_bytes(&stream, &conn, &shared, deadline, &mut rx)).await
                    {
                        return;
                    }
                    // Boxed: its state would otherwise size every
                    // connection's task, admission control or not.
                    if let (Some(adm), Some(t)) = (&shared.admission, accepted)
                        && !Box::pin(time_queue(adm, t, &stream, &shared, &mut rx)).await
                    {
                        return;
                    }
                    let (corked, uncork) = cork(stream);
                    let tls = serve_tls(corked, conn, shared, deadline, rx);
                    uncorked(uncork, Box::pin(tls)).await;
                }
                Listener::Http => {
                    let io = CountingIo::new(
                        stream,
                        SocketBytes(shared.stats.bytes_of(Transport::Tcp, Listener::Http)),
                    );
                    serve_http(io, Listener::Http, None, None, conn, shared, rx).await;
                }
            }
        };
        tokio::spawn(fut);
    }
}

/// How often a new connection at the limit looks again for an idle
/// connection to close while it waits for a slot.
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// At the connection limit: asks the longest-idle connection to close and
/// takes its slot. With none idle (every connection in a handshake or a
/// request), waits for a slot, looking again for an idle one every
/// [`ROOM_RETRY`]. `None` at shutdown.
async fn make_room(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        shared.idle.evict(Transport::Tcp);
        tokio::select! {
            p = tokio::time::timeout(ROOM_RETRY, shared.conns.clone().acquire_owned()) => match p {
                Ok(Ok(p)) => return Some(p),
                Ok(Err(_)) => return None,
                Err(_) => {}
            },
            _ = stopping(shutdown) => return None,
        }
    }
}

/// Whether a new connection has sent something already (bytes, its end,
/// or an error, which the handshake reads and counts): one non-blocking
/// peek, since the reactor may not have seen a fresh socket's bytes yet.
fn first_bytes_here(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
    recv(stream.as_raw_fd(), &mut byte, flags) != Err(nix::errno::Errno::EAGAIN)
}

/// Waits until a new connection on the TLS listener that has sent nothing
/// yet sends its first bytes. Until then it is an idle entry of the
/// registry, in its handshake phase since accept, so that at the
/// connection limit the oldest of the silent ones is evicted like any
/// idle connection (issue 29: 60 silent sockets held curl for 9.9 s at
/// `--max-connections`). False when the connection ends here: evicted, no
/// byte before the handshake deadline (both counted as handshake
/// failures), or shutdown.
async fn first_bytes(
    stream: &TcpStream,
    conn: &ConnInfo,
    shared: &Shared,
    deadline: tokio::time::Instant,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let entry = Arc::new(ConnInfo::new(conn.peer, conn.id));
    let _member = shared.idle.join_handshake(&entry);
    // `peek`, not `readable`: readiness may be reported before a byte is
    // there (a freshly registered socket is), and peek waits for the byte.
    let mut byte = [0u8; 1];
    tokio::select! {
        r = tokio::time::timeout_at(deadline, stream.peek(&mut byte)) => match r {
            // A read error is the handshake's to read and count.
            Ok(_) => true,
            Err(_) => {
                shared.stats.failure(Transport::Tcp, "timeout");
                false
            }
        },
        why = entry.idle.closing() => {
            tracing::debug!(conn = conn.id, "closing before the first byte: {}", why.name());
            shared.stats.failure(Transport::Tcp, why.name());
            false
        }
        _ = stopping(shutdown) => false,
    }
}

/// Waits for a new TLS connection's first bytes and records how long they
/// waited in the kernel (admission control's queue signal; without a
/// kernel timestamp, since `accepted`). False when the connection ends
/// here: no bytes within the handshake timeout (counted), or shutdown.
async fn time_queue(
    adm: &Admission,
    accepted: Instant,
    stream: &TcpStream,
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let first = tokio::select! {
        r = tokio::time::timeout(shared.handshake_timeout, crate::queue::first_bytes(stream)) => r,
        _ = stopping(shutdown) => return false,
    };
    match first {
        Ok(Ok(FirstBytes::Arrived(at))) => {
            adm.queue_delay(at.map_or_else(|| accepted.elapsed(), crate::queue::waited));
            true
        }
        // The handshake reads the end or the error and counts it.
        Ok(Ok(FirstBytes::Closed) | Err(_)) => true,
        Err(_) => {
            shared.stats.failure(Transport::Tcp, "timeout");
            false
        }
    }
}

pub(crate) async fn metrics_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    loop {
        let (stream, _) = tokio::select! {
            x = crate::accept::accept(&listener, &mut backoff, "metrics") => x,
            _ = stopping(&mut shutdown) => return,
        };
        // Its own limit: scrapers must never take the file descriptors the
        // main listeners need. Over it, the connection is closed at once.
        let Ok(permit) = shared.metrics_conns.clone().try_acquire_owned() else {
            tracing::debug!(
                "metrics connection closed: {METRICS_MAX_CONNECTIONS} metrics connections are open already"
            );
            continue;
        };
        let shared = shared.clone();
        let mut rx = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc_shared = shared.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let s = svc_shared.clone();
                async move { Ok::<_, Infallible>(metrics_response(&req, &s.registry)) }
            });
            // hyper's header read timeout runs from the end of a response
            // to the next complete header: it bounds idle and slow clients.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(METRICS_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stopping(&mut rx) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
}

fn metrics_response<B>(req: &Request<B>, registry: &Registry) -> Response<Body> {
    match req.uri().path() {
        "/metrics" => content::plain(
            StatusCode::OK,
            metrics::CONTENT_TYPE,
            metrics::render(registry),
        ),
        "/health" => content::plain(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        other => content::plain(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!("{other} not found; this address serves /metrics and /health\n"),
        ),
    }
}
