//! HTTP/2 connections (`--h2`): the protocol half of
//! [`Client::connection`] when the run speaks HTTP/2. Every loop and
//! workload reaches it the same way as HTTP/1.1's: a closed-loop client
//! keeps one connection at a time and up to `-m` streams in flight on it,
//! an open-loop arrival or a replayed connection is one connection, and each
//! stream is one request and one record.
//!
//! The connection's first stream (`req_on_conn` 0) carries the TCP connect
//! and TLS handshake timings and its total time counts from the connection's
//! start, as the first request of an HTTP/1.1 connection does; every other
//! stream's total counts from the moment it was sent. Time to first byte is
//! per stream: its HEADERS sent → its response HEADERS received.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::USER_AGENT;
use http::uri::{Authority, Scheme as UriScheme};
use http::{Request, Uri};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::client::{Client, Open};
use super::identity::Identity;
use super::shared::{CLOSE_GRACE, Shared};
use crate::conn::{Partial, user_agent, with_timeout};
use crate::io::{CountingIo, HandshakeSlot, HandshakeWatch, NoteDecompression};
use crate::protocol::Http2;

/// The error kind of a TLS connection on which the server did not select
/// `h2` by ALPN.
pub(super) const ALPN_NOT_H2: &str = "alpn_not_h2";

/// What one stream saw (kept outside its timeout, so a cut-off stream
/// still reports how far it got).
struct StreamEnd {
    p: Partial,
    /// `None`: the response arrived completely.
    failure: Option<Failure>,
}

enum Failure {
    Http(hyper::Error),
    Timeout,
}

/// Where a connection's requests go: the scheme and authority that make a
/// path an HTTP/2 request target.
struct Target {
    scheme: UriScheme,
    authority: Authority,
}

impl Target {
    fn request(&self, path: &Uri) -> Request<Empty<Bytes>> {
        let mut parts = path.clone().into_parts();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        let mut req = Request::new(Empty::new());
        // The parts come from a valid origin-form URI and a valid authority.
        *req.uri_mut() = Uri::from_parts(parts).unwrap_or_else(|_| path.clone());
        req.headers_mut().insert(USER_AGENT, user_agent());
        req
    }
}

impl Client {
    /// The HTTP/2 part of [`connection`](Client::connection) once TCP is
    /// up: the TLS handshake (ALPN `h2` checked; none for `http://`, which
    /// speaks h2c with prior knowledge), then the streams.
    pub(super) async fn h2_over(
        &mut self,
        sh: &Shared,
        io: CountingIo<TcpStream>,
        ident: Arc<Identity>,
        first: Open<'_>,
        h2: Http2,
    ) {
        let Some(tls) = &ident.tls else {
            return Box::pin(self.h2_streams(sh, io, None, first, h2)).await;
        };
        tls.sessions.set_offer(self.offer(sh, tls));
        let hs_start = Instant::now();
        let connect = NoteDecompression::new(tls.connector.connect(tls.name.clone(), io));
        match with_timeout(sh.timeout, connect).await {
            Some((Ok(stream), decompression)) => {
                if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                    // The handshake itself worked: keep the session.
                    return self.fail(sh, first, ALPN_NOT_H2);
                }
                let slot_hs = HandshakeSlot::default();
                let io = HandshakeWatch::new(
                    stream,
                    hs_start,
                    tls.sessions.clone(),
                    slot_hs.clone(),
                    decompression,
                );
                Box::pin(self.h2_streams(sh, io, Some(slot_hs), first, h2)).await;
            }
            Some((Err(e), _)) => {
                let kind = sh.classify(&e);
                if kind.starts_with("tls_") {
                    tls.sessions.clear();
                }
                self.fail(sh, first, &kind)
            }
            None => self.fail(sh, first, "timeout"),
        }
    }

    /// The HTTP/2 part of a connection: keeps up to `-m` streams in flight
    /// until `K` streams were sent, the run is over, a stream failed or the
    /// server closed the connection, then closes it.
    async fn h2_streams<IO>(
        &mut self,
        sh: &Shared,
        io: IO,
        hs: Option<HandshakeSlot>,
        first: Open<'_>,
        h2: Http2,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let o = &sh.origins[self.ident.origin];
        let Ok(authority) = Authority::try_from(o.host_header.as_bytes()) else {
            return self.fail(sh, first, "bad_url");
        };
        let to = Target {
            scheme: if o.tls.is_some() {
                UriScheme::HTTPS
            } else {
                UriScheme::HTTP
            },
            authority,
        };
        let mut builder = http2::Builder::new(TokioExecutor::new());
        builder.initial_max_send_streams(h2.max_concurrent_streams as usize);
        let (mut sender, conn) = match with_timeout(
            sh.timeout,
            builder.handshake::<_, Empty<Bytes>>(TokioIo::new(io)),
        )
        .await
        {
            Some(Ok(x)) => x,
            Some(Err(e)) => {
                let kind = sh.classify(&e);
                return self.fail(sh, first, &kind);
            }
            None => {
                return self.fail(sh, first, "timeout");
            }
        };
        // `conn` hands requests to the HTTP/2 connection task (which hyper
        // spawns); it ends when the connection does, or once `sender` is
        // dropped and the connection closed.
        let mut conn = std::pin::pin!(conn);
        let conn_no = first.rec.conn;
        let m = h2.max_concurrent_streams as usize;
        let ended = {
            let conn = conn.as_mut();
            async move {
                let _ = conn.await;
            }
        };
        let conn_ended = self
            .multiplex(
                sh,
                m,
                conn_no,
                0,
                Some(first),
                |stream| launch(&mut sender, &to, stream, sh.timeout),
                ended,
                |c: &mut Client, st, end| c.h2_stream_done(sh, hs.as_ref(), st, end),
            )
            .await;
        drop(sender);
        if !conn_ended {
            // Let the connection close cleanly (GOAWAY, close_notify, FIN).
            let _ = with_timeout(CLOSE_GRACE.min(sh.timeout), conn).await;
        }
    }

    /// Records a finished stream; returns whether the connection may carry
    /// more streams (false after a transport failure).
    fn h2_stream_done(
        &mut self,
        sh: &Shared,
        hs: Option<&HandshakeSlot>,
        mut st: Open<'_>,
        end: StreamEnd,
    ) -> bool {
        end.p.fill(&mut st.rec, st.start);
        let transport_error = match &end.failure {
            None => None,
            Some(Failure::Http(err)) => Some(sh.classify(err)),
            Some(Failure::Timeout) => Some("timeout".to_string()),
        };
        let first = st.rec.req_on_conn == 0;
        self.finish_request(sh, st, transport_error, first, hs)
    }
}

/// Sends `stream`'s request on `sender`; the future reads its response
/// (within `timeout`) and hands the stream back with how it ended.
fn launch<'a>(
    sender: &mut SendRequest<Empty<Bytes>>,
    to: &Target,
    stream: Open<'a>,
    timeout: Duration,
) -> impl Future<Output = (Open<'a>, StreamEnd)> + use<'a> {
    let sent = Instant::now();
    let response = sender.send_request(to.request(&stream.uri));
    async move {
        let mut end = StreamEnd {
            p: Partial {
                sent: Some(sent),
                ..Partial::default()
            },
            failure: None,
        };
        end.failure = match with_timeout(timeout, receive(response, &mut end.p)).await {
            Some(Ok(())) => None,
            Some(Err(e)) => Some(Failure::Http(e)),
            None => Some(Failure::Timeout),
        };
        (stream, end)
    }
}

/// Waits for a response and reads its body to the end, noting times.
async fn receive(
    response: impl Future<Output = Result<hyper::Response<Incoming>, hyper::Error>>,
    p: &mut Partial,
) -> Result<(), hyper::Error> {
    p.read(response.await?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_scheme_and_authority() {
        let t = Target {
            scheme: UriScheme::HTTPS,
            authority: Authority::from_static("127.0.0.1:8443"),
        };
        let req = t.request(&"/specweb96/class1_0?x=1".parse().unwrap());
        assert_eq!(
            req.uri().to_string(),
            "https://127.0.0.1:8443/specweb96/class1_0?x=1"
        );
        assert!(req.headers().get(http::header::HOST).is_none());
        assert!(req.headers().get(http::header::CONNECTION).is_none());
    }
}
