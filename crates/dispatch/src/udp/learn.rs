//! What a node's answer teaches over QUIC: the server's first Initial,
//! opened with the keys of the client's first Destination Connection ID
//! (RFC 9001 §5.2, as the client opens it), carries the ServerHello, whose
//! `pre_shared_key` extension says whether the node resumed the offered
//! session and which identity it took. That is the TCP dispatcher's
//! lesson from a cleartext ServerHello ([`crate::inspect`]), read one
//! layer down.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use tlslab_crypto::quic::open_server_initial;
use tlslab_wire::quic::{CryptoStream, PacketType, coalesced, crypto_frames};
use tlslab_wire::{HandshakeType, ServerHello};

use super::Dcid;
use crate::config::Policy;
use crate::inspect::Offer;
use crate::route::{Shared, learn};

/// Server datagrams looked at for a ServerHello before giving up (a Retry,
/// a version negotiation, a lost Initial).
const LOOK: u8 = 8;

/// A connection whose ServerHello is awaited from one node.
pub(crate) struct Awaited {
    /// The client's first DCID: the Initial keys' input.
    pub(crate) dcid: Dcid,
    /// What its ClientHello offered.
    pub(crate) offer: Offer,
    /// Server datagrams left to look at.
    left: u8,
    /// The node's Initial CRYPTO stream so far.
    stream: CryptoStream,
}

impl Awaited {
    pub(crate) fn new(dcid: Dcid, offer: Offer) -> Self {
        Awaited {
            dcid,
            offer,
            left: LOOK,
            stream: CryptoStream::new(MAX_SERVER_HELLO),
        }
    }
}

/// One flow's socket to one node, shared by the client→node path (the
/// dispatcher's loop) and the node→client task.
pub(crate) struct Upstream {
    /// Connected to the node (read by the node→client task).
    pub(crate) sock: tokio::net::UdpSocket,
    /// The same socket, for the dispatcher's loop to send on.
    pub(crate) send: std::net::UdpSocket,
    /// When the node last sent (ms since the dispatcher's epoch).
    pub(crate) last_rx: AtomicU64,
    /// True while `awaited` holds a connection (read before locking).
    awaiting: AtomicBool,
    awaited: Mutex<Option<Awaited>>,
}

impl Upstream {
    pub(crate) fn new(sock: tokio::net::UdpSocket, now_ms: u64) -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let send = std::net::UdpSocket::from(sock.as_fd().try_clone_to_owned()?);
        Ok(Upstream {
            sock,
            send,
            last_rx: AtomicU64::new(now_ms),
            awaiting: AtomicBool::new(false),
            awaited: Mutex::new(None),
        })
    }

    /// Awaits this connection's ServerHello (replacing an older one: a
    /// client makes one handshake at a time per address).
    pub(crate) fn await_hello(&self, a: Awaited) {
        *self.awaited.lock() = Some(a);
        self.awaiting.store(true, Relaxed);
    }

    /// Reads a node datagram for the awaited ServerHello, and books what
    /// it says (attempts, accepted, the key learned).
    pub(crate) fn node_datagram(&self, shared: &Shared, node: usize, d: &[u8]) {
        if !self.awaiting.load(Relaxed) {
            return;
        }
        let mut slot = self.awaited.lock();
        let Some(a) = slot.as_mut() else {
            self.awaiting.store(false, Relaxed);
            return;
        };
        let found = server_hello(d, a.dcid.as_bytes(), &mut a.stream);
        if found.is_none() {
            a.left = a.left.saturating_sub(1);
            if a.left == 0 {
                *slot = None;
                self.awaiting.store(false, Relaxed);
            }
            return;
        }
        let a = slot.take();
        self.awaiting.store(false, Relaxed);
        drop(slot);
        let (Some(a), Some(selected)) = (a, found) else {
            return;
        };
        shared.metrics.udp.server_hellos.fetch_add(1, Relaxed);
        if a.offer.attempt {
            shared.metrics.attempts.fetch_add(1, Relaxed);
            if selected.is_some() {
                shared.metrics.accepted.fetch_add(1, Relaxed);
            }
        }
        if shared.cfg.policy == Policy::Session
            && let Some(i) = selected
            && let Some(Some(k)) = a.offer.psks.get(usize::from(i))
        {
            learn(shared, *k, node);
        }
    }
}

/// The longest ServerHello read (X25519MLKEM768's key share makes rustls's
/// about 1,180 bytes, over two Initials).
const MAX_SERVER_HELLO: usize = 4096;

/// Adds the CRYPTO frames of a node's Initials in `d` (opened with the keys
/// of the client's first DCID) to `stream`; once the ServerHello is whole,
/// `Some(selected PSK identity)` (`Some(None)`: a full handshake). `None`
/// while it is incomplete or if the datagram holds none.
pub(crate) fn server_hello(
    d: &[u8],
    client_dcid: &[u8],
    stream: &mut CryptoStream,
) -> Option<Option<u16>> {
    for p in coalesced(d) {
        let Ok((header, packet)) = p else { break };
        if header.packet_type != PacketType::Initial {
            continue;
        }
        let Ok(opened) = open_server_initial(&header, packet, client_dcid) else {
            continue;
        };
        for f in crypto_frames(&opened.payload) {
            let Ok(f) = f else { break };
            if stream.push(f.offset, f.data).is_err() {
                return None;
            }
        }
    }
    let data = stream.contiguous();
    if data.len() < 4 || data[0] != HandshakeType::SERVER_HELLO.0 {
        return None;
    }
    let len = usize::from(data[1]) << 16 | usize::from(data[2]) << 8 | usize::from(data[3]);
    let body = data.get(4..4 + len)?;
    let sh = ServerHello::parse_body(body).ok()?;
    if sh.is_hello_retry_request {
        return None;
    }
    Some(sh.pre_shared_key)
}
