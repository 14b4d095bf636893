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
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::Reason;
use h2::client::{ResponseFuture, SendRequest};
use http::header::USER_AGENT;
use http::uri::{Authority, Scheme as UriScheme};
use http::{Request, Uri};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::client::{Client, Open};
use super::identity::Identity;
use super::shared::{CLOSE_GRACE, Shared};
use crate::conn::{Partial, absolute, user_agent, with_timeout};
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
    Http(h2::Error),
    Timeout,
}

/// hyper's HTTP/2 client settings (its defaults), which the engine used
/// before it drove `h2` itself: a 2 MiB stream and 5 MiB connection
/// receive window, 16 KiB frames and header lists, a 1 MiB send buffer and
/// no server push.
const STREAM_WINDOW: u32 = 2 << 20;
const CONN_WINDOW: u32 = 5 << 20;
const MAX_FRAME: u32 = 16 << 10;
const MAX_HEADER_LIST: u32 = 16 << 10;
const MAX_SEND_BUFFER: usize = 1 << 20;

/// How many streams are open before the server's SETTINGS say how many it
/// takes: the least RFC 9113 recommends a server allow, and what h2load
/// (nghttp2) assumes. Streams beyond it wait in `h2`'s queue; sent at once,
/// a server that takes fewer than `-m` refuses the rest (REFUSED_STREAM).
const PEER_STREAMS: u32 = 100;

/// The error kind of a failed HTTP/2 stream or connection: the socket's
/// or TLS's kind for an I/O error; `closed` when the server ended the
/// stream or the connection without error (RST_STREAM or GOAWAY with
/// NO_ERROR) before the response was complete, `reset` when it did so with
/// an error; `http_protocol` when the server broke the protocol; else `io`.
fn h2_kind(sh: &Shared, e: &h2::Error) -> String {
    if let Some(io) = e.get_io() {
        return sh.classify(io);
    }
    let kind = if e.is_remote() {
        if e.reason() == Some(Reason::NO_ERROR) {
            "closed"
        } else {
            "reset"
        }
    } else if e.is_library() || (e.reason().is_some() && !e.is_go_away() && !e.is_reset()) {
        "http_protocol"
    } else {
        "io"
    };
    kind.to_string()
}

/// Where a connection's requests go: the scheme and authority that make a
/// path an HTTP/2 request target.
struct Target {
    scheme: UriScheme,
    authority: Authority,
}

impl Target {
    fn request(&self, path: &Uri) -> Request<()> {
        let mut req = Request::new(());
        *req.uri_mut() = absolute(self.scheme.clone(), &self.authority, path);
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
                // With early data the stream comes back before the
                // ServerHello, ALPN not yet known: rustls sends early data
                // only on a session that had negotiated h2, and a server
                // that then chose otherwise fails as an HTTP/2 error.
                let tls_conn = stream.get_ref().1;
                if !tls_conn.is_handshaking() && tls_conn.alpn_protocol() != Some(b"h2") {
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
        IO: AsyncRead + AsyncWrite + Unpin,
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
        let mut builder = h2::client::Builder::new();
        builder
            .initial_max_send_streams(h2.max_concurrent_streams.min(PEER_STREAMS) as usize)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .max_frame_size(MAX_FRAME)
            .max_header_list_size(MAX_HEADER_LIST)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .enable_push(false);
        let (mut sender, conn) =
            match with_timeout(sh.timeout, builder.handshake::<_, Bytes>(io)).await {
                Some(Ok(x)) => x,
                Some(Err(e)) => {
                    let kind = h2_kind(sh, &e);
                    return self.fail(sh, first, &kind);
                }
                None => {
                    return self.fail(sh, first, "timeout");
                }
            };
        // `conn` reads and writes the connection's frames; it is polled
        // here, in this task, alongside the streams (no task of its own, no
        // channel between a stream and the connection). It ends when the
        // connection does, or once `sender` and every stream are dropped
        // (then with a GOAWAY and the transport's close).
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
            Some(Failure::Http(err)) => Some(h2_kind(sh, err)),
            Some(Failure::Timeout) => Some("timeout".to_string()),
        };
        let first = st.rec.req_on_conn == 0;
        self.finish_request(sh, st, transport_error, first, hs)
    }
}

/// Sends `stream`'s request on `sender`; the future reads its response
/// (within `timeout`) and hands the stream back with how it ended.
fn launch<'a>(
    sender: &mut SendRequest<Bytes>,
    to: &Target,
    stream: Open<'a>,
    timeout: Duration,
) -> impl Future<Output = (Open<'a>, StreamEnd)> + use<'a> {
    let sent = Instant::now();
    let response = send(sender, to.request(&stream.uri));
    async move {
        let mut end = StreamEnd {
            p: Partial {
                sent: Some(sent),
                ..Partial::default()
            },
            failure: None,
        };
        end.failure = match response {
            Err(e) => Some(Failure::Http(e)),
            Ok(response) => match with_timeout(timeout, receive(response, &mut end.p)).await {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(Failure::Http(e)),
                None => Some(Failure::Timeout),
            },
        };
        (stream, end)
    }
}

/// Sends a request (HEADERS with END_STREAM) now. `h2` queues a stream
/// beyond the server's concurrency limit until one ends, but a handle whose
/// queued stream is not yet open refuses another: such a stream goes out on
/// a fresh handle (whose own queue is empty), so the `-m` streams are all
/// sent and wait in `h2`'s queue as they waited in hyper's.
fn send(sender: &mut SendRequest<Bytes>, req: Request<()>) -> Result<ResponseFuture, h2::Error> {
    let mut cx = Context::from_waker(Waker::noop());
    let sent = match sender.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => sender.send_request(req, true),
        Poll::Ready(Err(e)) => return Err(e),
        Poll::Pending => sender.clone().send_request(req, true),
    };
    sent.map(|(response, _)| response)
}

/// Waits for a response and reads its body to the end, noting times and
/// giving the received bytes back to the flow-control windows.
async fn receive(response: ResponseFuture, p: &mut Partial) -> Result<(), h2::Error> {
    let resp = response.await?;
    p.head = Some(Instant::now());
    p.status = Some(resp.status().as_u16());
    let mut body = resp.into_body();
    while let Some(data) = body.data().await {
        let data = data?;
        p.body += data.len() as u64;
        let _ = body.flow_control().release_capacity(data.len());
    }
    p.end = Some(Instant::now());
    Ok(())
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
