//! A stream wrapper that reports every byte read and written.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Told how many bytes each successful read or write on a [`CountingIo`]
/// moved (never zero).
pub trait IoObserver {
    /// `n` bytes were read from the stream.
    fn on_read(&mut self, n: usize);
    /// `n` bytes were written to the stream.
    fn on_write(&mut self, n: usize);
    /// The bytes just read, after [`on_read`](Self::on_read) counted them,
    /// for observers that look inside (a TLS record counter). Does nothing
    /// by default.
    fn on_read_data(&mut self, _data: &[u8]) {}
    /// The bytes just written (the first `n` of what was offered; a
    /// vectored write reports each slice in turn), before
    /// [`on_write`](Self::on_write) counts them. Does nothing by default.
    fn on_write_data(&mut self, _data: &[u8]) {}
}

/// Bytes read and written so far: the plain [`IoObserver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteCount {
    /// Bytes read.
    pub read: u64,
    /// Bytes written.
    pub written: u64,
}

impl IoObserver for ByteCount {
    fn on_read(&mut self, n: usize) {
        self.read += n as u64;
    }

    fn on_write(&mut self, n: usize) {
        self.written += n as u64;
    }
}

/// Wraps a stream and tells an [`IoObserver`] every byte that crossed it,
/// as the inner stream reports them (so below TLS it counts raw socket
/// bytes, records and all). Reads, writes, flushes and shutdowns go
/// straight through.
#[derive(Debug)]
pub struct CountingIo<T, O = ByteCount> {
    inner: T,
    observer: O,
}

impl<T, O> CountingIo<T, O> {
    /// Wraps `inner`, reporting to `observer`.
    pub fn new(inner: T, observer: O) -> Self {
        CountingIo { inner, observer }
    }

    /// The observer, with what it has seen so far.
    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped stream, mutably (bytes moved through it directly are
    /// not counted).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The wrapped stream and the observer.
    pub fn into_parts(self) -> (T, O) {
        (self.inner, self.observer)
    }
}

impl<T, O: IoObserver> CountingIo<T, O> {
    /// Reports the outcome of a write, which it passes on.
    fn wrote(&mut self, r: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = r
            && n > 0
        {
            self.observer.on_write(n);
        }
        r
    }
}

impl<T: AsyncRead + Unpin, O: IoObserver + Unpin> AsyncRead for CountingIo<T, O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            this.observer.on_read(n);
            this.observer.on_read_data(&buf.filled()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin, O: IoObserver + Unpin> AsyncWrite for CountingIo<T, O> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = ready!(Pin::new(&mut this.inner).poll_write(cx, buf));
        if let Ok(n) = r
            && n > 0
        {
            this.observer.on_write_data(&buf[..n.min(buf.len())]);
        }
        Poll::Ready(this.wrote(r))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs));
        if let Ok(n) = r
            && n > 0
        {
            let mut left = n;
            for b in bufs {
                if left == 0 {
                    break;
                }
                let take = left.min(b.len());
                this.observer.on_write_data(&b[..take]);
                left -= take;
            }
        }
        Poll::Ready(this.wrote(r))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Records each call, to check calls are per operation and never zero.
    #[derive(Default, Debug)]
    struct Log(Vec<(char, usize)>);

    impl IoObserver for Log {
        fn on_read(&mut self, n: usize) {
            self.0.push(('r', n));
        }
        fn on_write(&mut self, n: usize) {
            self.0.push(('w', n));
        }
    }

    #[tokio::test]
    async fn counts_exact_bytes_both_ways() {
        let (a, mut b) = tokio::io::duplex(16);
        let mut io = CountingIo::new(a, ByteCount::default());
        let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let expect = payload.clone();
        // The small duplex buffer forces partial writes and reads.
        let peer = tokio::spawn(async move {
            let mut got = vec![0u8; 1000];
            b.read_exact(&mut got).await.unwrap();
            assert_eq!(got, expect);
            b.write_all(&[7u8; 333]).await.unwrap();
            // Dropping `b` ends the stream.
        });
        io.write_all(&payload).await.unwrap();
        io.flush().await.unwrap();
        let mut back = Vec::new();
        io.read_to_end(&mut back).await.unwrap();
        peer.await.unwrap();
        assert_eq!(back.len(), 333);
        assert_eq!(
            *io.observer(),
            ByteCount {
                read: 333,
                written: 1000
            }
        );
    }

    #[tokio::test]
    async fn vectored_writes_and_eof_are_counted_right() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut io = CountingIo::new(a, Log::default());
        let bufs = [io::IoSlice::new(b"abc"), io::IoSlice::new(b"defg")];
        let n = io.write_vectored(&bufs).await.unwrap();
        assert!(n > 0 && n <= 7);
        b.write_all(b"xy").await.unwrap();
        drop(b);
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.unwrap(), 2);
        // EOF: a read of zero bytes is not reported.
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        io.shutdown().await.unwrap();
        let (_, log) = io.into_parts();
        assert_eq!(log.0, vec![('w', n), ('r', 2)]);
    }
}
