//! I/O wrappers that observe a connection: bytes, TLS records and round
//! trips on the socket (a [`tlslab_runtime::CountingIo`] observer), and the
//! moment the TLS handshake completes, with its certificate sizes and the
//! socket's TCP_INFO then.

use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use parking_lot::Mutex;
use rustls::HandshakeKind as RustlsKind;
use tlslab_crypto::compress::{self, Decompression};
use tlslab_crypto::provider;
use tlslab_crypto::store::ClientSessions;
use tlslab_runtime::{ByteCount, IoObserver};
use tlslab_stats::{EarlyData, HandshakeKind, HandshakeRecord, HandshakeTcp, HandshakeWire};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::client::TlsStream;

/// Counts the bytes read and written on a stream, the TLS records in each
/// direction, and read-after-write turnarounds: a read that returns data
/// after the client wrote since its last read is one round trip. A write of
/// nothing but ChangeCipherSpec records does not count: a TLS 1.3 client
/// sends its middlebox-compatibility CCS as soon as it has read the
/// ServerHello, in the middle of the server's flight, and waits for
/// nothing in return.
#[derive(Debug, Default)]
pub struct RoundTrips {
    bytes: ByteCount,
    turnarounds: u32,
    wrote_since_read: bool,
    /// The write being reported carried more than ChangeCipherSpec.
    write_counts: bool,
    records_in: RecordCounter,
    records_out: RecordCounter,
    /// The socket, for its TCP_INFO.
    fd: Option<RawFd>,
    /// The run's totals, added to on every read and write.
    totals: Option<Arc<SocketTotals>>,
}

/// The bytes read and written on every TCP socket of a run, warm-up and
/// cut-off connections included: what crossed the wire as TCP payload, for
/// a check against a packet count on the path (`LoadReport::socket`).
#[derive(Debug, Default)]
pub struct SocketTotals {
    connections: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
}

impl SocketTotals {
    /// The totals so far.
    pub fn snapshot(&self) -> tlslab_stats::SocketBytes {
        tlslab_stats::SocketBytes {
            connections: self.connections.load(Ordering::Relaxed),
            bytes_out: self.written.load(Ordering::Relaxed),
            bytes_in: self.read.load(Ordering::Relaxed),
        }
    }
}

impl RoundTrips {
    /// Counts for the socket `fd` (whose TCP_INFO the handshake reads).
    pub fn for_socket(fd: RawFd) -> Self {
        RoundTrips {
            fd: Some(fd),
            ..RoundTrips::default()
        }
    }

    /// Also adds every byte to `totals` (and one connection).
    pub fn totalled(mut self, totals: &Arc<SocketTotals>) -> Self {
        totals.connections.fetch_add(1, Ordering::Relaxed);
        self.totals = Some(totals.clone());
        self
    }

    /// (bytes written, bytes read, round trips) so far.
    pub fn counts(&self) -> (u64, u64, u32) {
        (self.bytes.written, self.bytes.read, self.turnarounds)
    }

    /// (TLS records written, TLS records read) so far: records whose header
    /// has crossed, complete or not.
    pub fn records(&self) -> (u32, u32) {
        (self.records_out.records, self.records_in.records)
    }
}

impl IoObserver for RoundTrips {
    fn on_read(&mut self, n: usize) {
        self.bytes.on_read(n);
        if let Some(t) = &self.totals {
            t.read.fetch_add(n as u64, Ordering::Relaxed);
        }
        if self.wrote_since_read {
            self.turnarounds += 1;
            self.wrote_since_read = false;
        }
    }

    fn on_write(&mut self, n: usize) {
        self.bytes.on_write(n);
        if let Some(t) = &self.totals {
            t.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        if std::mem::take(&mut self.write_counts) {
            self.wrote_since_read = true;
        }
    }

    fn on_read_data(&mut self, data: &[u8]) {
        self.records_in.feed(data);
    }

    fn on_write_data(&mut self, data: &[u8]) {
        if self.records_out.feed(data) {
            self.write_counts = true;
        }
    }
}

/// Counts TLS records in one direction of a byte stream by their 5-byte
/// headers (type, version, 16-bit length), skipping the bodies.
#[derive(Debug, Default)]
struct RecordCounter {
    records: u32,
    header: [u8; 5],
    header_len: usize,
    body_left: usize,
}

/// The TLS record type of ChangeCipherSpec.
const CHANGE_CIPHER_SPEC: u8 = 20;

impl RecordCounter {
    /// Counts the records `data` starts; returns true if and only if it
    /// carried a byte of a record other than ChangeCipherSpec (or of a
    /// header not yet complete). For a stream that is not TLS (plain
    /// HTTP), the counts mean nothing and the answer is nearly always true.
    fn feed(&mut self, mut data: &[u8]) -> bool {
        let mut other = false;
        while !data.is_empty() {
            if self.body_left > 0 {
                let skip = self.body_left.min(data.len());
                self.body_left -= skip;
                data = &data[skip..];
                other |= self.header[0] != CHANGE_CIPHER_SPEC;
                continue;
            }
            let take = (5 - self.header_len).min(data.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
            self.header_len += take;
            data = &data[take..];
            if self.header_len == 5 {
                self.records = self.records.saturating_add(1);
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                self.header_len = 0;
                other |= self.header[0] != CHANGE_CIPHER_SPEC;
            } else {
                other |= self.header[0] != CHANGE_CIPHER_SPEC;
            }
        }
        other
    }
}

/// Wraps the TLS connect future and keeps the certificate decompression
/// (RFC 8879) that happened while it was polled: rustls decompresses on
/// the polling thread inside the poll, so what is noted between the start
/// and the end of one poll is this connection's.
pub(crate) struct NoteDecompression<F> {
    inner: F,
    seen: Option<Decompression>,
}

impl<F> NoteDecompression<F> {
    pub(crate) fn new(inner: F) -> Self {
        NoteDecompression { inner, seen: None }
    }
}

impl<F: Future + Unpin> Future for NoteDecompression<F> {
    type Output = (F::Output, Option<Decompression>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let _ = compress::take_last_decompression();
        let r = Pin::new(&mut self.inner).poll(cx);
        if let Some(d) = compress::take_last_decompression() {
            self.seen = Some(d);
        }
        match r {
            Poll::Ready(out) => Poll::Ready((out, self.seen.take())),
            Poll::Pending => Poll::Pending,
        }
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
    decompression: Option<Decompression>,
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
        decompression: Option<Decompression>,
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
                decompression,
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
        let (records_out, records_in) = io.observer().records();
        let tcp = io
            .observer()
            .fd
            .and_then(|fd| tlslab_runtime::tcp_info::tcp_info_fd(fd).ok())
            .map(|t| HandshakeTcp {
                data_segs_in: t.data_segs_in,
                data_segs_out: t.data_segs_out,
                rcv_mss: t.rcv_mss,
                total_retrans: t.total_retrans,
            });
        let cert_bytes = match &p.decompression {
            Some(d) => Some(d.uncompressed),
            None => conn
                .peer_certificates()
                .map(|c| compress::certificate_message_len(c.iter().map(|c| c.as_ref()))),
        };
        let wire = HandshakeWire {
            records_out,
            records_in,
            cert_bytes: cert_bytes.map(|n| n as u32),
            cert_compressed_bytes: p.decompression.map(|d| d.compressed as u32),
            cert_compression: p
                .decompression
                .map(|d| compress::CertCompression::algorithm_name(d.algorithm)),
            tcp,
        };
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
            wire: Some(wire),
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

    #[test]
    fn records_are_counted_across_split_headers() {
        let mut c = RecordCounter::default();
        // Two records (5 + 3 and 5 + 0 bytes), then a third header cut in two.
        let bytes = [22u8, 3, 3, 0, 3, 1, 2, 3, 23, 3, 3, 0, 0, 23, 3];
        for b in bytes.chunks(2) {
            c.feed(b);
        }
        assert_eq!(c.records, 2);
        c.feed(&[3, 0, 1]);
        assert_eq!(c.records, 3);
        c.feed(&[9, 22]);
        assert_eq!((c.records, c.header_len), (3, 1));
    }

    // A TLS 1.3 client's CCS, written between two reads of the server's
    // flight, made a one-round-trip handshake count two.
    #[tokio::test]
    async fn a_ccs_alone_is_no_turnaround() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut c = CountingIo::new(a, RoundTrips::default());
        let mut buf = [0u8; 64];
        c.write_all(&[22, 3, 1, 0, 1, 0]).await.unwrap(); // ClientHello
        b.write_all(&[22, 3, 3, 0, 1, 0]).await.unwrap(); // ServerHello
        c.read_exact(&mut buf[..6]).await.unwrap();
        c.write_all(&[20, 3, 3, 0, 1, 1]).await.unwrap(); // CCS
        b.write_all(&[23, 3, 3, 0, 1, 0]).await.unwrap(); // the rest
        c.read_exact(&mut buf[..6]).await.unwrap();
        assert_eq!(c.observer().counts().2, 1);
        assert_eq!(c.observer().records(), (2, 2));
        c.write_all(&[23, 3, 3, 0, 1, 0]).await.unwrap(); // Finished
        b.write_all(&[23, 3, 3, 0, 1, 0]).await.unwrap();
        c.read_exact(&mut buf[..6]).await.unwrap();
        assert_eq!(c.observer().counts().2, 2);
    }
}
