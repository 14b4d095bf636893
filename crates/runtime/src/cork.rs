//! Write coalescing: a stream whose writes are held in memory and handed
//! to the kernel in one write just before the task that owns it waits.
//!
//! A TLS connection writes in small flights that a protocol layer flushes
//! one by one: the server's session tickets at the end of the handshake,
//! then the HTTP response, then `close_notify`; the client's `Finished`,
//! then its first request. Each flush is a `writev` and one TCP segment
//! through the kernel's send and (on loopback) receive paths, about 9 µs of
//! CPU each on the lab machine. [`cork`] lets those flights leave together
//! without changing what is sent or in what order: only how many `write`
//! calls carry it.
//!
//! The contract that makes deferring a flush safe: every poll of the
//! [`Corked`] stream happens inside a future wrapped by [`uncorked`] with
//! the matching [`Uncork`] handle. That wrapper sends the held bytes every
//! time the inner future returns `Pending` (so nothing is held while the
//! task waits, for the peer or anything else) and once more when it
//! finishes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Past this many held bytes a write sends them first (memory bound).
const LIMIT: usize = 64 * 1024;

struct Inner<T> {
    io: T,
    /// Bytes written by the protocol layer, not yet handed to `io`.
    held: Vec<u8>,
    /// How much of `held` `io` has taken.
    sent: usize,
    /// A failure to send held bytes, reported by the next read or write.
    failed: Option<io::Error>,
}

impl<T: AsyncWrite + Unpin> Inner<T> {
    /// Hands the held bytes to `io`; `Pending` (with the task registered for
    /// writability) while `io` cannot take them all.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        while self.sent < self.held.len() {
            match ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.sent..])) {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the socket took none of the held bytes",
                    )));
                }
                Ok(n) => self.sent += n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        // Released, not cleared: a keep-alive connection waits idle far
        // longer than it writes, and a buffer kept for the next response
        // (the largest flight so far, often several KiB) would stay with
        // every idle connection. Allocating per flight costs less than a
        // microsecond; see BENCHMARKS.md, "Memory per idle connection".
        self.held = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Like [`poll_send`](Self::poll_send), for the [`uncorked`] wrapper: a
    /// failure is kept for the stream's next read or write.
    fn poll_send_for_owner(&mut self, cx: &mut Context<'_>) {
        if self.failed.is_some() {
            return;
        }
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            self.held = Vec::new();
            self.sent = 0;
            self.failed = Some(e);
        }
    }

    /// Makes room before holding `more` bytes: sends what is held when the
    /// total would pass [`LIMIT`].
    fn poll_room(&mut self, cx: &mut Context<'_>, more: usize) -> Poll<io::Result<()>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        if self.held.len() + more > LIMIT {
            ready!(self.poll_send(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The stream side of [`cork`]: reads go straight through; writes are held
/// until the [`uncorked`] wrapper (or a shutdown, or more than 64 KiB held)
/// sends them; `poll_flush` returns at once, leaving the send to the
/// wrapper, which runs before the task can wait.
pub struct Corked<T>(Arc<Mutex<Inner<T>>>);

/// The owner side of [`cork`]: give it to [`uncorked`] around the future
/// that polls the [`Corked`] stream.
pub struct Uncork<T>(Arc<Mutex<Inner<T>>>);

impl<T> std::fmt::Debug for Corked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corked").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Uncork<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uncork").finish_non_exhaustive()
    }
}

/// Splits `io` into the stream a protocol layer writes to and the handle
/// that sends what it wrote. See the module documentation for the contract.
pub fn cork<T>(io: T) -> (Corked<T>, Uncork<T>) {
    let inner = Arc::new(Mutex::new(Inner {
        io,
        held: Vec::new(),
        sent: 0,
        failed: None,
    }));
    (Corked(inner.clone()), Uncork(inner))
}

impl<T: AsyncWrite + Unpin> Uncork<T> {
    /// Hands the held bytes to the stream; `Pending` while it cannot take
    /// them all. A failure is also reported by the stream's next read or
    /// write.
    pub fn poll_send(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.0.lock();
        let r = inner.poll_send(cx);
        if let Poll::Ready(Err(e)) = &r {
            inner.failed = Some(io::Error::new(e.kind(), e.to_string()));
        }
        r
    }

    /// How many bytes are held now.
    pub fn held(&self) -> usize {
        let inner = self.0.lock();
        inner.held.len() - inner.sent
    }
}

/// Runs `fut`, sending what the [`Corked`] stream of `uncork` holds every
/// time `fut` returns `Pending` and once when it finishes (best effort: a
/// stream that cannot take the bytes then loses them, as a dropped socket
/// would).
pub async fn uncorked<T, F>(uncork: Uncork<T>, fut: F) -> F::Output
where
    T: AsyncWrite + Unpin,
    F: Future,
{
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        let r = fut.as_mut().poll(cx);
        uncork.0.lock().poll_send_for_owner(cx);
        r
    })
    .await
}

impl<T: AsyncWrite + Unpin> Corked<T> {
    /// Hands the held bytes to the stream now, not at the next wait (for
    /// bytes the peer should get before slow work, such as a server's
    /// session tickets before it runs the first request).
    pub fn poll_send_held(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.lock().poll_send(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Corked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut inner = self.0.lock();
        if let Some(e) = inner.failed.take() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut inner.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Corked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut inner = self.0.lock();
        ready!(inner.poll_room(cx, buf.len()))?;
        if inner.held.is_empty() && buf.len() >= LIMIT {
            return Pin::new(&mut inner.io).poll_write(cx, buf);
        }
        inner.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut inner = self.0.lock();
        ready!(inner.poll_room(cx, total))?;
        if inner.held.is_empty() && total >= LIMIT {
            return Pin::new(&mut inner.io).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            inner.held.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Deferred to `uncorked`, which sends before the task waits.
        match self.0.lock().failed.take() {
            Some(e) => Poll::Ready(Err(e)),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.0.lock();
        ready!(inner.poll_send(cx))?;
        Pin::new(&mut inner.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts the write calls that reach the wrapped stream.
    struct Writes<T> {
        io: T,
        calls: Arc<AtomicUsize>,
    }

    impl<T: AsyncRead + Unpin> AsyncRead for Writes<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for Writes<T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            Pin::new(&mut self.io).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn flushed_flights_leave_in_one_write_before_the_task_waits() {
        let (a, mut peer) = tokio::io::duplex(1 << 20);
        let calls = Arc::new(AtomicUsize::new(0));
        let (mut io, uncork) = cork(Writes {
            io: a,
            calls: calls.clone(),
        });
        let counted = calls.clone();
        let shared = uncork.0.clone();
        let echo = uncorked(uncork, async move {
            // Three flushed flights, then a wait for the peer's answer: the
            // peer can only answer if the flights left before the wait.
            for part in [&b"tickets "[..], b"response ", b"close"] {
                io.write_all(part).await.unwrap();
                io.flush().await.unwrap();
            }
            assert_eq!(counted.load(Ordering::Relaxed), 0, "held until the wait");
            let mut answer = [0u8; 2];
            io.read_exact(&mut answer).await.unwrap();
            io.write_all(b"!").await.unwrap();
            io.shutdown().await.unwrap();
            answer
        });
        let peer_side = async {
            let mut got = [0u8; 22];
            peer.read_exact(&mut got).await.unwrap();
            peer.write_all(b"ok").await.unwrap();
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).await.unwrap();
            (got, rest)
        };
        let (answer, (got, rest)) = tokio::join!(echo, peer_side);
        assert_eq!(&answer, b"ok");
        assert_eq!(&got, b"tickets response close");
        // Nothing is kept for the next flight while the connection waits.
        assert_eq!(shared.lock().held.capacity(), 0);
        assert_eq!(rest, b"!");
        // One write for the three flights, one for the last byte.
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn bytes_held_when_the_future_ends_are_sent() {
        let (a, mut peer) = tokio::io::duplex(1024);
        let (mut io, uncork) = cork(a);
        uncorked(uncork, async move {
            io.write_all(b"alert").await.unwrap();
            // Dropped without a flush or shutdown, as after a failed handshake.
        })
        .await;
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"alert");
    }

    #[tokio::test]
    async fn large_writes_are_sent_past_the_limit_and_arrive_whole() {
        let (a, mut peer) = tokio::io::duplex(4096);
        let (mut io, uncork) = cork(a);
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let expect = payload.clone();
        let writer = uncorked(uncork, async move {
            for chunk in payload.chunks(1000) {
                io.write_all(chunk).await.unwrap();
            }
            io.shutdown().await.unwrap();
        });
        let reader = async {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).await.unwrap();
            got
        };
        let ((), got) = tokio::join!(writer, reader);
        assert_eq!(got, expect);
    }

    #[tokio::test]
    async fn a_failed_send_is_reported_by_the_next_write() {
        let (a, peer) = tokio::io::duplex(64);
        drop(peer);
        let (mut io, uncork) = cork(a);
        let r = uncorked(uncork, async move {
            io.write_all(b"x").await.unwrap();
            // Let the wrapper try to send (it fails: the peer is gone).
            tokio::task::yield_now().await;
            io.write_all(b"y").await
        })
        .await;
        assert!(r.is_err(), "{r:?}");
    }
}
