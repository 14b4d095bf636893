//! I/O wrappers that observe a connection: bytes and round trips on the
//! socket (a [`tlslab_runtime::CountingIo`] observer), and the moment the
//! TLS handshake completes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use parking_lot::Mutex;
use rustls::HandshakeKind as RustlsKind;
use tlslab_crypto::provider;
use tlslab_crypto::store::ClientSessions;
use tlslab_report::{EarlyData, HandshakeKind, HandshakeRecord};
use tlslab_runtime::{ByteCount, IoObserver};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::client::TlsStream;

/// Counts the bytes read and written on a stream, and read-after-write
/// turnarounds: a read that returns data after the client wrote since its
/// last read is one round trip.
#[derive(Debug, Default)]
pub struct RoundTrips {
    bytes: ByteCount,
    turnarounds: u32,
    wrote_since_read: bool,
}

impl RoundTrips {
    /// (bytes written, bytes read, round trips) so far.
    pub fn counts(&self) -> (u64, u64, u32) {
        (self.bytes.written, self.bytes.read, self.turnarounds)
    }
}

impl IoObserver for RoundTrips {
    fn on_read(&mut self, n: usize) {
        self.bytes.on_read(n);
        if self.wrote_since_read {
            self.turnarounds += 1;
            self.wrote_since_read = false;
        }
    }

    fn on_write(&mut self, n: usize) {
        self.bytes.on_write(n);
        self.wrote_since_read = true;
    }
}

/// A socket counted by [`RoundTrips`].
pub(crate) type CountingIo<T> = tlslab_runtime::CountingIo<T, RoundTrips>;

/// Where a [`HandshakeWatch`] leaves the handshake once it completed.
pub(crate) type HandshakeSlot = Arc<Mutex<Option<HandshakeRecord>>>;

struct Pending {
    start: Instant,
    early: bool,
    sessions: Arc<ClientSessions>,
    slot: HandshakeSlot,
}

/// A TLS client stream that notices when its handshake completes and then
/// records it. Usually that is before the stream is handed over (tokio-rustls
/// finishes the handshake in `connect`); with early data, `connect` returns
/// at once and the handshake completes while the first request is written,
/// so every I/O call checks.
pub(crate) struct HandshakeWatch<T> {
    tls: TlsStream<CountingIo<T>>,
    pending: Option<Pending>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> HandshakeWatch<T> {
    /// Watches `tls`, whose handshake started at `start`.
    pub(crate) fn new(
        tls: TlsStream<CountingIo<T>>,
        start: Instant,
        sessions: Arc<ClientSessions>,
        slot: HandshakeSlot,
    ) -> Self {
        // `connect` only returns mid-handshake when it goes on in early data.
        let early = tls.get_ref().1.is_handshaking();
        let mut w = HandshakeWatch {
            tls,
            pending: Some(Pending {
                start,
                early,
                sessions,
                slot,
            }),
        };
        w.check();
        w
    }

    fn check(&mut self) {
        let Some(p) = &self.pending else { return };
        let (io, conn) = self.tls.get_ref();
        if conn.is_handshaking() {
            return;
        }
        let duration_us = p.start.elapsed().as_micros() as u64;
        let (bytes_out, bytes_in, round_trips) = io.observer().counts();
        let rk = conn.handshake_kind();
        let record = HandshakeRecord {
            duration_us,
            kind: if rk == Some(RustlsKind::Resumed) {
                HandshakeKind::Resumed
            } else {
                HandshakeKind::Full
            },
            hrr: rk == Some(RustlsKind::FullWithHelloRetryRequest),
            offered: p.sessions.take_offered(),
            version: conn
                .protocol_version()
                .and_then(provider::Version::from_rustls)
                .map_or_else(
                    || format!("{:?}", conn.protocol_version()),
                    |v| v.name().to_string(),
                ),
            suite: conn
                .negotiated_cipher_suite()
                .map(provider::suite_name)
                .unwrap_or_default(),
            group: conn
                .negotiated_key_exchange_group()
                .map(|g| provider::group_name(g.name()))
                .unwrap_or_default(),
            bytes_out,
            bytes_in,
            round_trips,
            early_data: match (p.early, conn.is_early_data_accepted()) {
                (false, _) => EarlyData::NotSent,
                (true, true) => EarlyData::Accepted,
                (true, false) => EarlyData::Rejected,
            },
        };
        *p.slot.lock() = Some(record);
        self.pending = None;
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HandshakeWatch<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.tls).poll_read(cx, buf);
        if self.pending.is_some() {
            self.check();
        }
        r
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HandshakeWatch<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.tls).poll_write(cx, buf);
        if self.pending.is_some() {
            self.check();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.tls).poll_write_vectored(cx, bufs);
        if self.pending.is_some() {
            self.check();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.tls).poll_flush(cx);
        if self.pending.is_some() {
            self.check();
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counts_bytes_and_turnarounds() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut c = CountingIo::new(a, RoundTrips::default());
        let mut buf = [0u8; 64];
        // write, read, read (no turnaround), write, write, read
        c.write_all(b"hello").await.unwrap();
        b.write_all(b"12").await.unwrap();
        let n = c.read(&mut buf).await.unwrap();
        assert_eq!(n, 2);
        b.write_all(b"345").await.unwrap();
        c.read_exact(&mut buf[..3]).await.unwrap();
        c.write_all(b"ab").await.unwrap();
        c.write_all(b"cd").await.unwrap();
        b.write_all(b"x").await.unwrap();
        c.read_exact(&mut buf[..1]).await.unwrap();
        assert_eq!(c.observer().counts(), (9, 6, 2));
        let mut got = [0u8; 9];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"helloabcd");
    }
}
