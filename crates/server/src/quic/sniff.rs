//! The pre-handshake stage of a remote session cache, over QUIC: the
//! ClientHello of each handshake is read off its Initials as the datagrams
//! arrive (the UDP socket quinn reads from is wrapped), so that a
//! connection can claim the PSK it offers in Redis (`GETDEL`) before quinn
//! hands the ClientHello to rustls, as [`crate::prefetch`] does over TCP.
//! Without it, a TLS 1.3 ticket issued by another node (or by this one,
//! since rustls takes only claimed tickets, see [`crate::redis_cache`])
//! could never resume over QUIC.
//!
//! quinn announces a connection (`Incoming`) on its first datagram, and a
//! ClientHello with a post-quantum key share and a PSK needs two (the PSK
//! extension comes last), so the connection task waits, at most
//! [`HELLO_WAIT`], for the reader to finish the ClientHello of its address.
//! The reader is `tlslab_crypto::quic::HelloReader` (Initial keys from the
//! DCID, CRYPTO frames reassembled, bounded in entries, bytes and age);
//! what it has read waits here, bounded in number ([`MAX_READ`]) and age
//! ([`READ_EXPIRY`]). Only datagrams with a long header are looked at: the
//! short-header packets of established connections cost one comparison.
//! The socket is wrapped when a remote cache stores TLS 1.3 tickets, and
//! for `--admission session`, which classifies each attempt by the PSK its
//! ClientHello offers (`quic::door`). The time spent reading long-header
//! datagrams is measured (the server's `Stats`, `/metrics`).

use std::collections::HashMap;
use std::fmt;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tlslab_crypto::quic::initial::{HelloReader, Read};
use tlslab_runtime::udp_queue;
use tlslab_wire::quic::AssemblerLimits;
use tokio::sync::Notify;

use crate::stats::Stats;

/// How long a connection waits for its ClientHello to be read whole (the
/// rest of a two-datagram first flight follows the first at once; a lost
/// datagram means a full handshake, not a stall).
pub(crate) const HELLO_WAIT: Duration = Duration::from_millis(50);

/// ClientHellos read and not yet taken by their connection.
const MAX_READ: usize = 4096;

/// How long a read ClientHello waits for its connection.
const READ_EXPIRY: Duration = Duration::from_secs(2);

/// What the reader found for one handshake.
#[derive(Debug)]
pub(crate) struct Found {
    /// When the ClientHello's last datagram arrived: the kernel's receive
    /// stamp where the socket keeps them ([`SniffSocket::stamps`]), else
    /// when it was read off the socket.
    pub(crate) at: Instant,
    /// The PSK identities the ClientHello offers (at most two).
    pub(crate) psk: Vec<Vec<u8>>,
}

/// The ClientHellos read off the listener's Initials, by client address
/// and the Destination Connection ID of the client's first Initial (which
/// quinn gives as `Incoming::orig_dst_cid`, also after a Retry): several
/// handshakes from one address are told apart.
pub(crate) struct Hellos {
    reader: Mutex<HelloReader>,
    found: Mutex<HashMap<(SocketAddr, Vec<u8>), Found>>,
    notify: Notify,
    /// Where the long-header datagrams read, and the nanoseconds spent
    /// reading them, are counted.
    stats: Arc<Stats>,
}

impl fmt::Debug for Hellos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hellos")
            .field("pending", &self.reader.lock().pending())
            .field("read", &self.found.lock().len())
            .finish()
    }
}

impl Hellos {
    pub(crate) fn new(stats: Arc<Stats>) -> Arc<Self> {
        stats.quic.hello_reader.store(true, Ordering::Relaxed);
        Arc::new(Hellos {
            reader: Mutex::new(HelloReader::new(AssemblerLimits::default())),
            found: Mutex::new(HashMap::new()),
            notify: Notify::new(),
            stats,
        })
    }

    /// Reads one datagram, timed.
    fn observe_timed(
        &self,
        from: SocketAddr,
        datagram: &[u8],
        waited: &mut dyn FnMut() -> Duration,
    ) {
        let t = Instant::now();
        self.observe(from, datagram, waited);
        let q = &self.stats.quic;
        q.hello_datagrams.fetch_add(1, Ordering::Relaxed);
        q.hello_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Reads one datagram from `from` (a long header: an Initial, or a
    /// packet the reader skips); `waited` says how long it waited in the
    /// kernel (asked only of a datagram that completes a ClientHello).
    /// Never fails: what does not read is left for quinn to judge.
    fn observe(&self, from: SocketAddr, datagram: &[u8], waited: &mut dyn FnMut() -> Duration) {
        let now = Instant::now();
        let hello = match self.reader.lock().push(datagram, now) {
            Ok(Read::Hello(h)) => h,
            _ => return,
        };
        let psk = match hello.client_hello() {
            Ok(ch) => ch
                .pre_shared_key
                .map(|p| {
                    p.identities
                        .iter()
                        .take(2)
                        .map(|i| i.identity.to_vec())
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => return,
        };
        // Asked before the lock: it is a system call.
        let at = now.checked_sub(waited()).unwrap_or(now);
        let mut found = self.found.lock();
        if found.len() >= MAX_READ {
            found.retain(|_, f| now.saturating_duration_since(f.at) < READ_EXPIRY);
            // Still full (a flood of complete ClientHellos): make room.
            if found.len() >= MAX_READ
                && let Some(k) = found.keys().next().cloned()
            {
                found.remove(&k);
            }
        }
        found.insert((from, hello.dcid), Found { at, psk });
        drop(found);
        self.notify.notify_waiters();
    }

    /// The ClientHello from `addr` whose first Initial carried `dcid`, if
    /// it has been read whole already (taken: it is not kept).
    pub(crate) fn take(&self, addr: SocketAddr, dcid: &[u8]) -> Option<Found> {
        self.found.lock().remove(&(addr, dcid.to_vec()))
    }

    /// Puts back what [`Hellos::take`] took: an attempt sent a Retry comes
    /// back with the same ClientHello under the same first DCID
    /// (`Incoming::orig_dst_cid`), but in an Initial whose own DCID is the
    /// Retry's, which the reader files it under; this copy is found first.
    pub(crate) fn put_back(&self, addr: SocketAddr, dcid: &[u8], found: Found) {
        let mut f = self.found.lock();
        if f.len() < MAX_READ {
            f.insert((addr, dcid.to_vec()), found);
        }
    }

    /// The ClientHello from `addr` whose first Initial carried `dcid`,
    /// once read whole (at most `limit` from now); `None` if it was not
    /// read in time.
    pub(crate) async fn offered(
        &self,
        addr: SocketAddr,
        dcid: &[u8],
        limit: Duration,
    ) -> Option<Found> {
        let key = (addr, dcid.to_vec());
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let wake = self.notify.notified();
            tokio::pin!(wake);
            // Registered before the look, so a ClientHello read between the
            // look and the wait still wakes it.
            wake.as_mut().enable();
            if let Some(f) = self.found.lock().remove(&key) {
                return Some(f);
            }
            if tokio::time::timeout_at(deadline, wake).await.is_err() {
                return None;
            }
        }
    }
}

/// quinn's UDP socket, with every received long-header datagram shown to
/// [`Hellos`] first.
#[derive(Debug)]
pub(crate) struct SniffSocket {
    pub(crate) inner: Arc<dyn AsyncUdpSocket>,
    pub(crate) hellos: Arc<Hellos>,
    /// The same socket (a duplicate descriptor), to read the kernel's
    /// receive stamp of a batch's last datagram after quinn read it
    /// (`tlslab_runtime::udp_queue`): how long an Initial waited in the
    /// socket's queue, admission control's queue signal over QUIC. `None`:
    /// not wanted (no admission control), and a ClientHello's time is when
    /// it was read.
    pub(crate) stamps: Option<std::net::UdpSocket>,
}

impl SniffSocket {
    /// Wraps `inner`; with `stamps`, turns the kernel's receive stamps on
    /// for it.
    pub(crate) fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        hellos: Arc<Hellos>,
        stamps: Option<std::net::UdpSocket>,
    ) -> Self {
        // The first call turns stamping on (nothing is read yet).
        let stamps = stamps.filter(|s| udp_queue::last_receive_stamp(s).is_ok());
        SniffSocket {
            inner,
            hellos,
            stamps,
        }
    }

    /// How long the batch just read had waited in the kernel, at least
    /// (its last datagram's wait; zero without stamps).
    fn waited(&self) -> Duration {
        self.stamps
            .as_ref()
            .map_or(Duration::ZERO, udp_queue::last_datagram_waited)
    }
}

impl AsyncUdpSocket for SniffSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> std::io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        let r = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = &r {
            // Read once per batch, and only for a batch that completes a
            // ClientHello: the stamp is the batch's last datagram's.
            let mut waited = None;
            let mut waited = || *waited.get_or_insert_with(|| self.waited());
            for (buf, m) in bufs.iter().zip(meta.iter()).take(*n) {
                let data = &buf[..m.len.min(buf.len())];
                // GRO: several datagrams of `stride` bytes in one buffer.
                for d in data.chunks(m.stride.max(1)) {
                    if d.first().is_some_and(|b| b & 0x80 != 0) {
                        self.hellos.observe_timed(m.addr, d, &mut waited);
                    }
                }
            }
        }
        r
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::Runtime;
    use std::future::poll_fn;

    /// RFC 9001 Appendix A.2's client Initial: a 1,200-byte datagram whose
    /// ClientHello (no PSK) is whole in it; its DCID is 8394c8f03e515708.
    fn rfc9001_initial() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crypto/tests/data/rfc9001_client_initial.hex"
        );
        let hex: String = std::fs::read_to_string(path)
            .unwrap()
            .split_whitespace()
            .collect();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Sends the Initial, leaves it `wait` in the socket's queue, reads it
    /// through a [`SniffSocket`] and returns how old its ClientHello reads.
    async fn age_of_hello(stamped: bool, wait: Duration) -> Duration {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let stamps = stamped.then(|| rx.try_clone().unwrap());
        let inner = quinn::TokioRuntime.wrap_udp_socket(rx).unwrap();
        let to = inner.local_addr().unwrap();
        let hellos = Hellos::new(Stats::bare(None));
        let sock = SniffSocket::new(inner, hellos.clone(), stamps);
        // The kernel may turn stamping on from a work queue.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&rfc9001_initial(), to).unwrap();
        std::thread::sleep(wait);
        let mut buf = vec![0u8; 2048];
        let mut bufs = [IoSliceMut::new(&mut buf)];
        let mut meta = [RecvMeta::default()];
        let n = poll_fn(|cx| sock.poll_recv(cx, &mut bufs, &mut meta))
            .await
            .unwrap();
        assert_eq!((n, meta[0].len), (1, 1200));
        let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let found = hellos.take(tx.local_addr().unwrap(), &dcid);
        found.expect("the ClientHello was read").at.elapsed()
    }

    #[tokio::test]
    async fn a_hello_that_waited_in_the_socket_reads_as_old_with_stamps() {
        let wait = Duration::from_millis(80);
        // With the kernel's stamp: the time in the socket's queue counts.
        let stamped = age_of_hello(true, wait).await;
        assert!(stamped >= wait, "{stamped:?}");
        // Without: only the time since quinn read it.
        let unstamped = age_of_hello(false, wait).await;
        assert!(unstamped < wait, "{unstamped:?}");
    }
}
