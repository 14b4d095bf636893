//! TLS 1.3 0-RTT that saves the round trip (RFC 8446 §2.3, RFC 8470).
//!
//! tokio-rustls finishes a server handshake before it hands the stream over,
//! so early data reaches HTTP one round trip late, after the client's
//! Finished. For a connection whose ClientHello offers early data,
//! [`EarlyStream`] drives the rustls [`ServerConnection`] itself while the
//! handshake runs:
//!
//! - the server's flight (ServerHello … Finished) leaves as soon as the
//!   ClientHello is processed, and early data is read as rustls decrypts it;
//! - complete **safe** requests at the start of the early data (`GET` or
//!   `HEAD` with no body, HTTP/1.x) are handed to HTTP at once, and their
//!   responses are sent as 0.5-RTT data (`ServerConfig::send_half_rtt_data`,
//!   set whenever early data is enabled), before the client's Finished;
//! - anything else in early data (another method, a body, an incomplete
//!   head, HTTP/2) is held until the handshake completes, so an unsafe
//!   request is never run on bytes an attacker could replay (RFC 8470 §3,
//!   "wait for the handshake");
//! - once the handshake completes, the connection is handed to tokio-rustls
//!   (`accept_with` with the connection swapped in), so everything after it
//!   costs what any other connection costs.
//!
//! Connections whose ClientHello does not offer early data never come here.

use std::io::{self, Read as _, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rustls::ServerConnection;
use tlslab_crypto::meter::AblationSet;
use tlslab_crypto::provider::Version;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::{Accept, TlsStream};

use crate::idle::Transport;
use crate::io::Rewind;
use crate::stats::Stats;
use crate::tls;

/// The `early_data` extension (RFC 8446 §4.2.10).
const EARLY_DATA_EXT: u16 = 42;

/// Whether `first` starts with a TLS 1.3 ClientHello that offers early data
/// (the `early_data` extension next to a PSK). `false` when the hello is
/// not all in `first`: such a connection takes the ordinary path, where
/// early data is still accepted, one round trip later.
pub(crate) fn offers_early_data(first: &[u8]) -> bool {
    let Ok((record, _)) = tlslab_wire::parse_record(first) else {
        return false;
    };
    let Ok(hello) = tlslab_wire::ClientHello::parse(record.payload) else {
        return false;
    };
    hello.offers_tls13()
        && hello.pre_shared_key.is_some()
        && hello.extensions.get(EARLY_DATA_EXT).is_some()
}

/// What the HTTP service learns from the stream: how many requests were
/// handed over as early data and not yet claimed.
#[derive(Debug, Default)]
pub(crate) struct EarlyRequests(AtomicU32);

impl EarlyRequests {
    /// Claims one request: `true` if the next request HTTP parses arrived in
    /// early data (and is answered before the handshake completes).
    /// HTTP/1 runs requests in order and the early ones come first.
    pub(crate) fn claim(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    fn release(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A connection after its ClientHello: rustls has read `first`, and the
/// result says what it decided.
pub(crate) enum Started<IO> {
    /// Early data was accepted: serve HTTP over this stream.
    Early(EarlyStream<IO>),
    /// Early data was refused (a replayed or unknown ticket, a full
    /// handshake): the handshake goes on in tokio-rustls as usual.
    Refused(Accept<IO>),
}

/// Feeds the first bytes to a new rustls connection. Errors are handshake
/// failures, already mapped to a failure reason.
pub(crate) fn start<IO: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    first: &[u8],
    io: IO,
    stats: Arc<Stats>,
    ablation: AblationSet,
    timeout: Duration,
) -> Result<Started<IO>, io::Error> {
    let mut conn = ServerConnection::new(acceptor.config().clone()).map_err(io::Error::other)?;
    let mut rest = first;
    while !rest.is_empty() {
        if conn.read_tls(&mut rest)? == 0 {
            break;
        }
        if conn.process_new_packets().is_err() {
            // rustls keeps the error and its alert: tokio-rustls sends the
            // alert and reports the error, as on the ordinary path.
            return Ok(Started::Refused(
                acceptor.accept_with(io, move |c| *c = conn),
            ));
        }
    }
    if conn.early_data().is_none() {
        stats.early_data_refused();
        return Ok(Started::Refused(
            acceptor.accept_with(io, move |c| *c = conn),
        ));
    }
    let mut hs = Box::new(Handshaking {
        h2: conn.alpn_protocol() == Some(b"h2"),
        conn,
        io,
        acceptor: acceptor.clone(),
        early: Vec::new(),
        delivered: 0,
        release_to: 0,
        blocked: false,
        deadline: Box::pin(tokio::time::sleep(timeout)),
    });
    let requests = Arc::new(EarlyRequests::default());
    hs.drain(&requests);
    Ok(Started::Early(EarlyStream {
        state: State::Handshaking(hs),
        requests,
        stats,
        ablation,
    }))
}

struct Handshaking<IO> {
    conn: ServerConnection,
    io: IO,
    acceptor: TlsAcceptor,
    /// Early data received so far.
    early: Vec<u8>,
    /// How much of `early` HTTP has read.
    delivered: usize,
    /// The end of the safe requests at the start of `early`.
    release_to: usize,
    /// A request that must wait for the handshake was seen: release no more.
    blocked: bool,
    h2: bool,
    deadline: Pin<Box<Sleep>>,
}

impl<IO> Handshaking<IO> {
    /// Moves decrypted early data into `early` and releases the safe
    /// requests it completes.
    fn drain(&mut self, requests: &EarlyRequests) {
        if let Some(mut ed) = self.conn.early_data() {
            let _ = ed.read_to_end(&mut self.early);
        }
        while !self.blocked && !self.h2 {
            match safe_request(&self.early[self.release_to..]) {
                Some(Some(len)) => {
                    self.release_to += len;
                    requests.release();
                }
                Some(None) => break,
                None => self.blocked = true,
            }
        }
    }
}

/// A complete safe request at the start of `buf`: `Some(Some(len))`;
/// `Some(None)` when more bytes are needed; `None` when the request must
/// wait for the handshake (not `GET`/`HEAD`, a body, or not HTTP/1).
fn safe_request(buf: &[u8]) -> Option<Option<usize>> {
    if buf.is_empty() {
        return Some(None);
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if !matches!(req.method, Some("GET" | "HEAD")) {
                return None;
            }
            let has_body = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("transfer-encoding")
                    || (h.name.eq_ignore_ascii_case("content-length")
                        && h.value.trim_ascii() != b"0")
            });
            if has_body { None } else { Some(Some(len)) }
        }
        Ok(httparse::Status::Partial) => {
            // A method that is known already and unsafe need not wait for
            // the rest of the head to be held.
            match req.method {
                Some(m) if !matches!(m, "GET" | "HEAD") => None,
                _ => Some(None),
            }
        }
        Err(_) => None,
    }
}

enum State<IO> {
    Handshaking(Box<Handshaking<IO>>),
    /// The handshake is complete; tokio-rustls flushes and takes over.
    /// The early data HTTP has not read yet goes first.
    Finishing(Accept<IO>, Vec<u8>),
    Done(Rewind<TlsStream<IO>>),
    Failed,
}

/// A server TLS stream that serves safe early-data requests before the
/// handshake completes (see the module documentation).
pub(crate) struct EarlyStream<IO> {
    state: State<IO>,
    requests: Arc<EarlyRequests>,
    stats: Arc<Stats>,
    ablation: AblationSet,
}

impl<IO> EarlyStream<IO> {
    /// What the HTTP service claims early requests from.
    pub(crate) fn requests(&self) -> Arc<EarlyRequests> {
        self.requests.clone()
    }

    /// The connection while its handshake runs (ALPN, version and
    /// resumption are known once the ClientHello is processed); `None`
    /// once it was handed to tokio-rustls.
    pub(crate) fn connection(&self) -> Option<&ServerConnection> {
        match &self.state {
            State::Handshaking(hs) => Some(&hs.conn),
            _ => None,
        }
    }
}

/// `std::io` over a polled tokio stream: `Pending` becomes `WouldBlock`.
struct SyncIo<'a, 'b, T> {
    io: &'a mut T,
    cx: &'a mut Context<'b>,
}

impl<T: AsyncRead + Unpin> io::Read for SyncIo<'_, '_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut rb = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<T: AsyncWrite + Unpin> io::Write for SyncIo<'_, '_, T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn would_block<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Handshaking<IO> {
    /// Writes out what rustls has queued (the server's flight, 0.5-RTT
    /// data, alerts).
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let n = ready!(would_block(self.conn.write_tls(&mut SyncIo {
                io: &mut self.io,
                cx
            })))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads and processes TLS records until early data or the end of the
    /// handshake; `Ok` when there is something new.
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        requests: &EarlyRequests,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_flush_tls(cx))?;
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )));
        }
        let n = ready!(would_block(self.conn.read_tls(&mut SyncIo {
            io: &mut self.io,
            cx
        })))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
        }
        if let Err(e) = self.conn.process_new_packets() {
            // Send the alert rustls queued, best effort.
            let _ = self.poll_flush_tls(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        self.drain(requests);
        Poll::Ready(Ok(()))
    }
}

use std::future::Future as _;

impl<IO: AsyncRead + AsyncWrite + Unpin> EarlyStream<IO> {
    fn fail(&mut self, e: io::Error) -> io::Error {
        let reason = if e.kind() == io::ErrorKind::TimedOut {
            "timeout".to_string()
        } else {
            tls::handshake_failure(&e, self.ablation).0
        };
        self.stats.failure(Transport::Tcp, &reason);
        self.state = State::Failed;
        e
    }

    /// Drives the handshake until HTTP can read (released early data) or
    /// the stream is [`State::Done`].
    fn poll_ready_to_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.state {
                State::Handshaking(hs) => {
                    if hs.delivered < hs.release_to {
                        return Poll::Ready(Ok(()));
                    }
                    if !hs.conn.is_handshaking() {
                        self.finish();
                        continue;
                    }
                    if let Err(e) = ready!(hs.poll_progress(cx, &self.requests)) {
                        return Poll::Ready(Err(self.fail(e)));
                    }
                }
                State::Finishing(..) => ready!(self.poll_finishing(cx))?,
                State::Done(_) => return Poll::Ready(Ok(())),
                State::Failed => return Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
            }
        }
    }

    /// The handshake is complete: hand the connection to tokio-rustls.
    fn finish(&mut self) {
        let State::Handshaking(hs) = std::mem::replace(&mut self.state, State::Failed) else {
            return;
        };
        let mut hs = *hs;
        if let Some(mut ed) = hs.conn.early_data() {
            let _ = ed.read_to_end(&mut hs.early);
        }
        self.stats.early_data(hs.early.len());
        let version = hs.conn.protocol_version().and_then(Version::from_rustls);
        self.stats.handshake(version, hs.conn.handshake_kind());
        let rest = hs.early.split_off(hs.delivered);
        let conn = hs.conn;
        let accept = hs.acceptor.accept_with(hs.io, move |c| *c = conn);
        self.state = State::Finishing(accept, rest);
    }

    fn poll_finishing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let State::Finishing(accept, _) = &mut self.state else {
            return Poll::Ready(Ok(()));
        };
        match ready!(Pin::new(accept).poll(cx)) {
            Ok(tls) => {
                let State::Finishing(_, rest) = std::mem::replace(&mut self.state, State::Failed)
                else {
                    unreachable!("checked above")
                };
                self.state = State::Done(Rewind::new(rest, tls));
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(self.fail(e))),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for EarlyStream<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_ready_to_read(cx))?;
        match &mut this.state {
            State::Handshaking(hs) => {
                let n = (hs.release_to - hs.delivered).min(buf.remaining());
                buf.put_slice(&hs.early[hs.delivered..hs.delivered + n]);
                hs.delivered += n;
                Poll::Ready(Ok(()))
            }
            State::Done(tls) => Pin::new(tls).poll_read(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for EarlyStream<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let State::Finishing(..) = this.state {
            ready!(this.poll_finishing(cx))?;
        }
        match &mut this.state {
            State::Handshaking(hs) => {
                // 0.5-RTT data: rustls encrypts it under the server's
                // traffic keys now that its Finished is sent.
                let mut n = hs.conn.writer().write(buf)?;
                if n == 0 && !buf.is_empty() {
                    ready!(hs.poll_flush_tls(cx))?;
                    n = hs.conn.writer().write(buf)?;
                }
                // What the socket cannot take now stays queued in rustls.
                if let Poll::Ready(Err(e)) = hs.poll_flush_tls(cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(n))
            }
            State::Done(tls) => Pin::new(tls).poll_write(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let State::Finishing(..) = this.state {
            ready!(this.poll_finishing(cx))?;
        }
        match &mut this.state {
            State::Handshaking(hs) => {
                ready!(hs.poll_flush_tls(cx))?;
                Pin::new(&mut hs.io).poll_flush(cx)
            }
            State::Done(tls) => Pin::new(tls).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing after an early answer (`Connection: close`) first lets
        // the client's Finished arrive: the handshake completes and is
        // counted, and the session tickets rustls sends then go out.
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Handshaking(hs) => {
                    if !hs.conn.is_handshaking() {
                        this.finish();
                        continue;
                    }
                    if let Err(e) = ready!(hs.poll_progress(cx, &this.requests)) {
                        return Poll::Ready(Err(this.fail(e)));
                    }
                }
                State::Finishing(..) => ready!(this.poll_finishing(cx))?,
                State::Done(tls) => return Pin::new(tls).poll_shutdown(cx),
                State::Failed => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_complete_bodiless_get_and_head_are_released_early() {
        let get = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";
        assert_eq!(safe_request(get), Some(Some(get.len())));
        let head = b"HEAD /x HTTP/1.1\r\ncontent-length: 0\r\n\r\nGET";
        assert_eq!(safe_request(head), Some(Some(head.len() - 3)));
        // Incomplete: wait for more.
        assert_eq!(safe_request(b"GET / HTTP/1.1\r\nho"), Some(None));
        assert_eq!(safe_request(b""), Some(None));
        // Unsafe methods, bodies, HTTP/2: held until the handshake.
        assert_eq!(safe_request(b"POST / HTTP/1.1\r\n\r\n"), None);
        assert_eq!(safe_request(b"POST / HT"), None);
        assert_eq!(
            safe_request(b"GET / HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello"),
            None
        );
        assert_eq!(
            safe_request(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            None
        );
        assert_eq!(safe_request(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), None);
        assert_eq!(safe_request(b"\x00\x01garbage\r\n\r\n"), None);
    }

    #[test]
    fn claims_count_down_released_requests() {
        let r = EarlyRequests::default();
        assert!(!r.claim());
        r.release();
        r.release();
        assert!(r.claim());
        assert!(r.claim());
        assert!(!r.claim());
    }
}
