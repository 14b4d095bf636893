//! The HTTP side of a connection (after the TLS handshake, or at accept
//! on the plain listener): hyper's connection, the request handler, and
//! the graceful and idle endings.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, watch};

use crate::access_log::{LoggedBody, Pending};
use crate::content::{self, Body};
use crate::early::EarlyRequests;
use crate::idle::{Busy, CLOSE_GRACE, CloseReason, ConnInfo, Member, Transport};
use crate::shared::{Shared, stopping};
use crate::stats::Listener;

/// A connection's HTTP, ready to run: the hyper connection, boxed at its
/// own size, driven until it ends or the server shuts down.
pub(crate) type HttpTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Builds the HTTP side of a connection over `io`. Not an `async fn`: the
/// stream and the service move straight into hyper's connection, so no
/// future keeps a second, dead copy of them while the connection lives.
pub(crate) fn serve_http<I>(
    io: I,
    kind: Listener,
    alpn: Option<Vec<u8>>,
    early: Option<Arc<EarlyRequests>>,
    info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> HttpTask
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc_shared = shared.clone();
    let info = Arc::new(info);
    let member = shared.idle.join(&info);
    let conn_info = info.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let s = svc_shared.clone();
        // In progress until its response body is done or dropped.
        let busy = Busy::new(&info);
        let info = info.clone();
        // Claimed when the request is parsed, in request order.
        let early = early.as_ref().is_some_and(|e| e.claim());
        async move {
            let start = Instant::now();
            let on_conn = info.next_request();
            s.stats.request(Transport::Tcp, kind, early);
            if early {
                // RFC 8470 §5.1, for the handler (and any origin behind it).
                req.headers_mut()
                    .insert("early-data", http::HeaderValue::from_static("1"));
            }
            let resp = if info.shed_503 {
                shed_503(&req)
            } else {
                match content::handle(&req, &s.files) {
                    content::Handled::Ready(r) => r,
                    // Boxed: only /dyn pays for the larger future.
                    content::Handled::Burn { work, bytes } => {
                        Box::pin(burn(&s.burners, work, bytes)).await
                    }
                }
            };
            let pending = s.access_log.as_ref().map(|log| {
                Pending::new(
                    log,
                    info.clone(),
                    on_conn,
                    start,
                    &req,
                    resp.status(),
                    early,
                )
            });
            let mut resp = resp;
            if let (Listener::Https, Some(v)) = (kind, s.alt_svc.get()) {
                resp.headers_mut().insert(http::header::ALT_SVC, v.clone());
            }
            Ok::<_, Infallible>(resp.map(|b| LoggedBody::new(b, pending, busy)))
        }
    });
    // An HTTP/1.1 connection (the common case over TLS) runs on hyper's
    // HTTP/1 connection alone: the version-detecting connection is an enum
    // as large as its HTTP/2 variant, and it would stay that size for the
    // whole life of every HTTP/1 connection, idle ones included.
    let io = TokioIo::new(io);
    let on = Driven {
        kind,
        info: conn_info,
        _member: member,
        shutdown,
    };
    match alpn.as_deref() {
        Some(b"h2") => Box::pin(drive(
            Box::pin(shared.h2.serve_connection(io, svc).into_owned()),
            |c| c.graceful_shutdown(),
            on,
        )),
        Some(_) => Box::pin(drive(
            Box::pin(shared.h1.serve_connection(io, svc)),
            |c| c.graceful_shutdown(),
            on,
        )),
        None => Box::pin(drive(
            Box::pin(shared.auto.serve_connection(io, svc).into_owned()),
            |c| c.graceful_shutdown(),
            on,
        )),
    }
}

/// Runs `/dyn`'s CPU work on the blocking pool, at most `--threads` at
/// once, so that it never holds a worker thread that other connections
/// need. The blocking threads are the server runtime's own, so their CPU
/// time counts as the server's.
pub(crate) async fn burn(burners: &Arc<Semaphore>, work: Duration, bytes: u64) -> Response<Body> {
    let Ok(_permit) = burners.clone().acquire_owned().await else {
        return content::dyn_response(work, bytes);
    };
    match tokio::task::spawn_blocking(move || content::dyn_response(work, bytes)).await {
        Ok(r) => r,
        Err(e) => content::plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("/dyn work failed: {e}\n"),
        ),
    }
}

/// What [`drive`] needs besides the connection.
struct Driven {
    kind: Listener,
    info: Arc<ConnInfo>,
    /// Leaves the registry when the connection ends.
    _member: Member,
    shutdown: watch::Receiver<bool>,
}

/// Runs a hyper connection until it ends. At shutdown, asks it to finish
/// its in-flight requests (`graceful`) and waits for that. When it has sat
/// idle too long, asks the same and waits at most [`CLOSE_GRACE`]; when it
/// is evicted at the connection limit, polls it once more and drops it.
async fn drive<C, E>(mut conn: Pin<Box<C>>, graceful: fn(Pin<&mut C>), mut on: Driven)
where
    C: Future<Output = std::result::Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::select! {
        r = conn.as_mut() => ended(on.kind, r),
        _ = stopping(&mut on.shutdown) => {
            graceful(conn.as_mut());
            let _ = conn.await;
        }
        why = on.info.idle.closing() => {
            tracing::debug!(listener = on.kind.name(), conn = on.info.id, "closing: {}", why.name());
            graceful(conn.as_mut());
            // Timed out: a moment to say goodbye (HTTP/2's GOAWAY waits for
            // a PING's answer). Evicted: a new client waits for this slot,
            // so one poll writes what can be written at once, and it goes.
            let grace = match why {
                CloseReason::Evicted => Duration::ZERO,
                _ => CLOSE_GRACE,
            };
            let _ = tokio::time::timeout(grace, conn).await;
        }
    }
}

fn ended<E: std::fmt::Display>(kind: Listener, r: std::result::Result<(), E>) {
    if let Err(e) = r {
        tracing::debug!(listener = kind.name(), "connection ended: {e}");
    }
}

/// The answer on a connection shed with `--shed-with 503`.
fn shed_503<B>(req: &Request<B>) -> Response<Body> {
    let mut r = content::plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        "overloaded: admission control shed this connection; retry later\n".into(),
    );
    let h = r.headers_mut();
    h.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    if req.version() < http::Version::HTTP_2 {
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    r
}
