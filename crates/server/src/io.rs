//! I/O adapters: per-listener counting of raw socket bytes (on
//! [`tlslab_runtime::CountingIo`]), and a reader that replays bytes already
//! consumed (sniffed bytes, TLS early data).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tlslab_runtime::IoObserver;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Byte counters of one listener, shared by all its connections.
#[derive(Debug, Default)]
pub(crate) struct ByteCounters {
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
}

/// Adds the bytes of one connection to its listener's [`ByteCounters`].
#[derive(Debug)]
pub(crate) struct SocketBytes(pub(crate) Arc<ByteCounters>);

impl IoObserver for SocketBytes {
    fn on_read(&mut self, n: usize) {
        self.0.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn on_write(&mut self, n: usize) {
        self.0.sent.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A socket whose raw bytes count toward its listener's [`ByteCounters`].
pub(crate) type CountingIo<T> = tlslab_runtime::CountingIo<T, SocketBytes>;

/// Reads `prefix` first, then the wrapped stream; writes go straight through.
pub(crate) struct Rewind<T> {
    prefix: Vec<u8>,
    pos: usize,
    inner: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(prefix: Vec<u8>, inner: T) -> Self {
        Rewind {
            prefix,
            pos: 0,
            inner,
        }
    }

    /// The wrapped stream.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counting_counts_both_directions_and_rewind_replays() {
        let counters = Arc::new(ByteCounters::default());
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = Rewind::new(
            b"pre".to_vec(),
            CountingIo::new(a, SocketBytes(counters.clone())),
        );
        io.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        b.write_all(b"world").await.unwrap();
        drop(b);
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"preworld");
        assert_eq!(counters.sent.load(Ordering::Relaxed), 5);
        // The replayed prefix was not read from the socket again.
        assert_eq!(counters.received.load(Ordering::Relaxed), 5);
    }
}
