//! The pieces of one HTTP exchange that every client of this crate shares:
//! timeouts that keep futures small, the request it sends and how it reads
//! a response. The engine's clients ([`crate::engine`]) and the user
//! sessions of [`crate::users`] both use them, so both measure the same
//! way.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use tlslab_stats::RequestRecord;

/// `tokio::time::timeout`, `None` on expiry; `Duration::MAX` never expires.
pub(crate) fn with_timeout<F: Future>(d: Duration, f: F) -> WithTimeout<F> {
    WithTimeout {
        inner: tokio::time::timeout(d, f),
    }
}

/// `tokio::time::timeout_at`, `None` on expiry.
pub(crate) fn with_deadline<F: Future>(deadline: Instant, f: F) -> WithTimeout<F> {
    WithTimeout {
        inner: tokio::time::timeout_at(deadline.into(), f),
    }
}

pin_project_lite::pin_project! {
    /// The future of [`with_timeout`] and [`with_deadline`]. A named adapter
    /// rather than an `async fn`: an `async fn` keeps its argument `f` in its
    /// state and again inside the `Timeout` it awaits, so every wrapped
    /// future would take its size twice in each client's task (what an idle
    /// connection holds; see tests/idle_memory.rs).
    pub(crate) struct WithTimeout<F> {
        #[pin]
        inner: tokio::time::Timeout<F>,
    }
}

impl<F: Future> Future for WithTimeout<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map(Result::ok)
    }
}

/// What one request saw, kept outside its timeout so a cut-off request
/// still reports how far it got.
#[derive(Default)]
pub(crate) struct Partial {
    pub(crate) sent: Option<Instant>,
    pub(crate) head: Option<Instant>,
    pub(crate) end: Option<Instant>,
    pub(crate) status: Option<u16>,
    pub(crate) body: u64,
}

impl Partial {
    /// Notes `resp`'s head, then reads its body to the end.
    pub(crate) async fn read(&mut self, resp: Response<Incoming>) -> Result<(), hyper::Error> {
        self.head = Some(Instant::now());
        self.status = Some(resp.status().as_u16());
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            if let Some(d) = frame?.data_ref() {
                self.body += d.len() as u64;
            }
        }
        self.end = Some(Instant::now());
        Ok(())
    }

    /// Writes what was seen into `rec`: status, body bytes, time to first
    /// byte, transfer time, and the total from `start` to the body's end
    /// (to now when it did not end).
    pub(crate) fn fill(&self, rec: &mut RequestRecord, start: Instant) {
        let end = self.end.unwrap_or_else(Instant::now);
        rec.status = self.status;
        rec.body_bytes = self.body;
        if let (Some(sent), Some(head)) = (self.sent, self.head) {
            rec.ttfb_us = Some((head - sent).as_micros() as u64);
            if let Some(e) = self.end {
                rec.transfer_us = Some((e - head).as_micros() as u64);
            }
        }
        rec.total_us = (end - start).as_micros() as u64;
    }
}

/// An HTTP/1.1 GET of `uri` with `Host`, `Connection` (`close` when `last`)
/// and tlslab's `User-Agent`.
pub(crate) fn request(uri: &Uri, host: &HeaderValue, last: bool) -> Request<Empty<Bytes>> {
    let mut req = Request::new(Empty::new());
    *req.uri_mut() = uri.clone();
    let h = req.headers_mut();
    h.insert(HOST, host.clone());
    h.insert(
        CONNECTION,
        HeaderValue::from_static(if last { "close" } else { "keep-alive" }),
    );
    h.insert(USER_AGENT, user_agent());
    req
}

/// tlslab's `User-Agent`.
pub(crate) fn user_agent() -> HeaderValue {
    HeaderValue::from_static(concat!("tlslab/", env!("CARGO_PKG_VERSION")))
}

/// Sends one request and reads its body to the end, noting times in `p`.
pub(crate) async fn send(
    sender: &mut SendRequest<Empty<Bytes>>,
    req: Request<Empty<Bytes>>,
    p: &mut Partial,
) -> Result<(), hyper::Error> {
    p.sent = Some(Instant::now());
    let resp = sender.send_request(req).await?;
    p.read(resp).await
}
