//! The pieces of one HTTP exchange that the engine's clients
//! ([`crate::engine`]) share over every protocol: timeouts that keep
//! futures small, the request HTTP/1.1 sends and how a response is read.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::uri::{Authority, Scheme};
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

/// One timer for the successive requests of a connection, each of which
/// must end within `timeout`, armed lazily as nginx arms its timers:
/// starting a request ([`Deadline::restart`]) only notes its deadline, and
/// the timer, armed once, is moved to that deadline only when it fires
/// before it. A request therefore inserts and removes nothing in the
/// runtime's timer wheel (a `tokio::time::timeout` per request did both).
pub(crate) struct Deadline {
    /// Boxed: the connection's task keeps it between requests, and pinned
    /// in place it would be part of every state of that future.
    sleep: Pin<Box<tokio::time::Sleep>>,
    deadline: tokio::time::Instant,
    timeout: Duration,
}

/// `now + d`, or about 30 years from now for a `d` too long to add
/// (`Duration::MAX`: never), as `tokio::time::timeout` does.
fn after(now: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub(crate) fn new(timeout: Duration) -> Self {
        let deadline = after(tokio::time::Instant::now(), timeout);
        Deadline {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            deadline,
            timeout,
        }
    }

    /// The next request starts now: it must end within the timeout.
    pub(crate) fn restart(&mut self) {
        self.deadline = after(tokio::time::Instant::now(), self.timeout);
    }

    /// `f`'s output, or `None` if the deadline passed first.
    pub(crate) async fn run<F: Future>(&mut self, f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            while self.sleep.as_mut().poll(cx).is_ready() {
                if tokio::time::Instant::now() >= self.deadline {
                    return Poll::Ready(None);
                }
                // Fired for an earlier request's deadline: move on to this
                // one's (the only re-arming, once per `timeout` at most).
                let d = self.deadline;
                self.sleep.as_mut().reset(d);
            }
            Poll::Pending
        })
        .await
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

/// `path` (origin-form, as the engine keeps its paths) as the absolute URI
/// an HTTP/2 or HTTP/3 request carries: `scheme` and `authority` added.
pub(crate) fn absolute(scheme: Scheme, authority: &Authority, path: &Uri) -> Uri {
    let mut parts = path.clone().into_parts();
    parts.scheme = Some(scheme);
    parts.authority = Some(authority.clone());
    // The parts come from a valid origin-form URI and a valid authority.
    Uri::from_parts(parts).unwrap_or_else(|_| path.clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_deadline_times_out_each_request_from_its_own_start() {
        rt().block_on(async {
            let ms = Duration::from_millis;
            let mut d = Deadline::new(ms(100));
            // The timer is armed for 100 ms from here; the request below
            // starts 80 ms later and takes 60 ms: within its own 100 ms,
            // so the timer that fires at 100 ms is moved, not obeyed.
            tokio::time::sleep(ms(80)).await;
            d.restart();
            let got = d.run(tokio::time::sleep(ms(60))).await;
            assert_eq!(got, Some(()));
            // A request that never ends is cut off at its own deadline.
            d.restart();
            let t = std::time::Instant::now();
            let got = d.run(std::future::pending::<()>()).await;
            assert_eq!(got, None);
            assert!(t.elapsed() >= ms(100), "{:?}", t.elapsed());
            // A ready future is never timed.
            assert_eq!(d.run(async { 7 }).await, Some(7));
            // Duration::MAX never expires (and does not overflow).
            let mut never = Deadline::new(Duration::MAX);
            never.restart();
            assert_eq!(never.run(tokio::time::sleep(ms(5))).await, Some(()));
        });
    }
}
