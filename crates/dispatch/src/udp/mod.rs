//! `dispatch --udp`: the dispatcher over QUIC. Datagrams are forwarded,
//! never decrypted beyond a client's Initials and a node's first Initial
//! (whose keys anyone derives from the client's first Destination
//! Connection ID). Each client datagram goes, in this order:
//!
//! 1. `cid` and `session`: by the QUIC-LB server ID in its DCID
//!    (draft-ietf-quic-load-balancers-21), to the backend given that
//!    server ID (`--backend ADDR=sid:HEX`);
//! 2. a client Initial of a connection not yet routed (it decrypts under
//!    its own DCID and starts a ClientHello): `session` reassembles the
//!    ClientHello across datagrams (held meanwhile, [`MAX_HOLD`]) and
//!    routes its PSK identity as over TCP (learned table, node tags), else
//!    by load; `cid` and `blind` use the 4-tuple hash;
//! 3. a later Initial or 0-RTT packet of that connection (same
//!    client-chosen DCID): to the same node;
//! 4. anything else with no routable CID (a short header of quinn's
//!    random CIDs, an ACK-only Initial to the server's CID): to the node the
//!    4-tuple last went to; with no state for the 4-tuple, the 4-tuple hash
//!    (a fallback as the draft's "Fallback Algorithms" asks: deterministic,
//!    reading no first-byte bit but the header form).
//!
//! `blind` sends every datagram by the 4-tuple hash. Every policy reads
//! each new connection's ClientHello and its node's ServerHello
//! (`learn`), for the same routing-efficiency figures as over TCP.
//!
//! State is a bounded LRU table of flows (client address and port), each
//! with at most one connected socket per node, opened on first use and
//! read by a task of its own that returns the node's datagrams to the
//! client; a flow with no datagram either way for `--idle-timeout` is
//! closed. In steady state a datagram costs a table lookup, a header parse
//! (an AES decryption with encrypted QUIC-LB CIDs) and one `send`, no
//! allocation: buffers are per flow and per dispatcher.

pub(crate) mod learn;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use lru::LruCache;
use tlslab_crypto::quic::{HelloReader, LbRouter, Read, Route};
use tlslab_wire::quic::{AssemblerLimits, PacketType, parse_long_header};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Policy;
use crate::hello::RawKeys;
use crate::inspect::Offer;
use crate::metrics::{Decision, Dropped, RoutedBy};
use crate::route::Shared;
use learn::{Awaited, Upstream};

/// The largest datagram forwarded; larger ones are dropped (counted).
/// QUIC's own limit is 65,527 bytes; quinn sends at most 1,452 unless told.
pub const MAX_DATAGRAM: usize = 65_527;
/// A node→client task's buffer: what QUIC stacks send on an Ethernet path
/// (quinn's PMTU discovery stops at 1,452). Larger ones are dropped.
const NODE_BUF: usize = 4096;
/// Client datagrams held at most while a ClientHello is reassembled.
pub const MAX_HOLD: usize = 8;
/// Bytes held at most over all flows; past it a new connection whose
/// ClientHello is incomplete is routed by the fallback (counted as
/// `hold_full`).
pub const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;
/// How often holds and idle flows are checked.
const SWEEP: Duration = Duration::from_millis(100);
/// The longest a datagram is held for the rest of its ClientHello (a lost
/// second Initial is resent after the client's probe timeout, about 1 s).
const HOLD_FOR: Duration = Duration::from_secs(1);

/// A connection ID, inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dcid {
    len: u8,
    bytes: [u8; 20],
}

impl Dcid {
    fn new(b: &[u8]) -> Dcid {
        let n = b.len().min(20);
        let mut bytes = [0u8; 20];
        bytes[..n].copy_from_slice(&b[..n]);
        Dcid {
            len: n as u8,
            bytes,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A connection routed by its first Initial: its client-chosen DCID.
#[derive(Clone, Copy)]
struct Conn {
    dcid: Dcid,
    node: usize,
    /// Its ClientHello is still being read (blind and cid forward at once).
    reading: bool,
}

/// Datagrams held while a connection's ClientHello is incomplete.
struct Hold {
    dcid: Dcid,
    since: Instant,
    datagrams: Vec<Vec<u8>>,
}

/// One node socket of a flow and its task.
struct Up {
    shared: Arc<Upstream>,
    task: JoinHandle<()>,
}

/// One client address and port.
struct Flow {
    ups: Vec<Option<Up>>,
    /// Client activity, ms since the epoch.
    last: u64,
    /// The node the 4-tuple's datagrams last went to.
    pinned: Option<usize>,
    conn: Option<Conn>,
    hold: Option<Hold>,
}

impl Flow {
    fn new(n: usize, now: u64) -> Flow {
        Flow {
            ups: (0..n).map(|_| None).collect(),
            last: now,
            pinned: None,
            conn: None,
            hold: None,
        }
    }

    /// Bytes its hold keeps.
    fn held_bytes(&self) -> usize {
        self.hold
            .as_ref()
            .map_or(0, |h| h.datagrams.iter().map(Vec::len).sum())
    }

    /// The latest activity either way.
    fn active(&self) -> u64 {
        self.ups
            .iter()
            .flatten()
            .map(|u| u.shared.last_rx.load(Relaxed))
            .fold(self.last, u64::max)
    }
}

/// A flow's sockets go with it: their tasks stop, the nodes' counts drop.
struct Closing<'a>(&'a Shared);

impl Closing<'_> {
    fn close(&self, f: Flow) {
        for (i, u) in f.ups.into_iter().enumerate() {
            if let Some(u) = u {
                u.task.abort();
                self.0.nodes[i].active.fetch_sub(1, Relaxed);
            }
        }
        self.0.metrics.udp.flows.fetch_sub(1, Relaxed);
    }
}

/// Where a client datagram goes.
enum Step {
    Send(usize, RoutedBy),
    /// Held for the rest of its ClientHello.
    Held,
    /// Its ClientHello is whole: send the held datagrams, then it.
    Flush(usize),
}

/// The loop's state (owned by the one task that reads client datagrams).
pub(crate) struct UdpLoop {
    shared: Arc<Shared>,
    listen: Arc<UdpSocket>,
    /// The same socket, for sends (never pending: a full buffer drops).
    reply: Arc<std::net::UdpSocket>,
    router: LbRouter,
    flows: LruCache<SocketAddr, Flow>,
    hellos: HelloReader,
    /// Flows with a hold, to time them out (each once).
    holding: Vec<SocketAddr>,
    /// Bytes held over all flows ([`MAX_HELD_BYTES`]).
    held_bytes: usize,
    epoch: Instant,
}

impl UdpLoop {
    pub(crate) fn new(shared: Arc<Shared>, listen: Arc<UdpSocket>) -> Result<Self, String> {
        let router = LbRouter::new(&shared.cfg.quic_lb).map_err(|e| e.0)?;
        let flows = LruCache::new(shared.cfg.max_flows);
        let reply = listen
            .as_fd()
            .try_clone_to_owned()
            .map(|fd| Arc::new(std::net::UdpSocket::from(fd)))
            .map_err(|e| format!("cannot share the UDP socket: {e}"))?;
        Ok(UdpLoop {
            shared,
            listen,
            reply,
            router,
            flows,
            hellos: HelloReader::new(AssemblerLimits::default()),
            holding: Vec::new(),
            held_bytes: 0,
            epoch: Instant::now(),
        })
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Runs until `shutdown` turns true.
    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        let mut tick = tokio::time::interval(SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = self.listen.recv_from(&mut buf) => match r {
                    Ok((n, peer)) => {
                        if n > MAX_DATAGRAM {
                            self.shared.metrics.udp.dropped(Dropped::Oversize);
                        } else {
                            self.datagram(&buf[..n], peer);
                        }
                    }
                    Err(e) => {
                        tracing::debug!("UDP receive failed: {e}");
                    }
                },
                _ = tick.tick() => self.sweep(Instant::now()),
                _ = shutdown.changed() => if *shutdown.borrow() { break },
            }
        }
        let closing = Closing(&self.shared);
        while let Some((_, f)) = self.flows.pop_lru() {
            closing.close(f);
        }
    }

    /// One client datagram.
    fn datagram(&mut self, d: &[u8], peer: SocketAddr) {
        let now = Instant::now();
        let now_ms = self.ms(now);
        if !self.flows.contains(&peer) {
            let n = self.shared.nodes.len();
            if let Some((_, old)) = self.flows.push(peer, Flow::new(n, now_ms)) {
                self.shared.metrics.udp.flows_evicted.fetch_add(1, Relaxed);
                self.held_bytes -= old.held_bytes();
                Closing(&self.shared).close(old);
            }
            self.shared.metrics.udp.flows.fetch_add(1, Relaxed);
        }
        match self.route(d, peer, now) {
            Step::Send(node, by) => {
                self.shared.metrics.udp.routed(by);
                self.send(peer, node, d, now_ms);
            }
            Step::Held => {}
            Step::Flush(node) => {
                let held = self
                    .flows
                    .get_mut(&peer)
                    .and_then(|f| f.hold.take())
                    .map(|h| h.datagrams)
                    .unwrap_or_default();
                self.held_bytes -= held.iter().map(Vec::len).sum::<usize>();
                for h in &held {
                    self.shared.metrics.udp.routed(RoutedBy::Dcid);
                    self.send(peer, node, h, now_ms);
                }
                self.shared.metrics.udp.routed(RoutedBy::Connection);
                self.send(peer, node, d, now_ms);
            }
        }
    }

    /// The node of a backend's QUIC-LB server ID in `dcid`, if routable:
    /// a known config ID, the length its first octet describes (and, in a
    /// long header, the exact length), and a backend's server ID. The
    /// checks keep a client's random first DCID from passing for a node's
    /// CID but 1 time in 256 per configuration, and then it must name a
    /// server ID too.
    fn by_cid(&self, dcid: &[u8], exact: bool) -> Option<usize> {
        let first = *dcid.first()?;
        let params = self
            .shared
            .cfg
            .quic_lb
            .iter()
            .find(|p| p.config_id == first >> 5)?;
        let len = params.cid_len();
        if usize::from(first & 0x1f) != len - 1 || (exact && dcid.len() != len) {
            return None;
        }
        let Route::Server { server_id, .. } = self.router.route(dcid) else {
            return None;
        };
        let i = self
            .shared
            .cfg
            .backends
            .iter()
            .position(|b| b.server_id.as_deref() == Some(server_id.as_bytes()));
        if i.is_none() {
            self.shared
                .metrics
                .udp
                .unknown_server_id
                .fetch_add(1, Relaxed);
        }
        i
    }

    fn route(&mut self, d: &[u8], peer: SocketAddr, now: Instant) -> Step {
        let policy = self.shared.cfg.policy;
        let hashed = match policy {
            Policy::SourceIp => self.shared.choose(None, None, peer).0.unwrap_or(0),
            _ => self.shared.by_hash(peer),
        };
        let long = d.first().is_some_and(|b| b & 0x80 != 0);
        let header = if long {
            parse_long_header(d).ok()
        } else {
            None
        };
        let dcid: &[u8] = match (&header, long) {
            (Some(h), _) => h.dcid,
            (None, false) => d.get(1..).unwrap_or_default(),
            (None, true) => &[],
        };
        let lb = matches!(policy, Policy::Cid | Policy::Session);
        if lb && let Some(node) = self.by_cid(dcid, header.is_some()) {
            return self.pin(peer, node, RoutedBy::Cid);
        }
        let Some(flow) = self.flows.get_mut(&peer) else {
            return Step::Send(hashed, RoutedBy::Hash);
        };
        let initial = header
            .as_ref()
            .is_some_and(|h| h.known_version() && h.packet_type == PacketType::Initial);
        let this = Dcid::new(dcid);
        // A later packet of the connection being set up.
        if let Some(c) = flow.conn
            && header.is_some()
            && c.dcid == this
        {
            if c.reading && initial {
                self.read_more(d, peer, c, now);
            }
            return if policy == Policy::Blind {
                Step::Send(hashed, RoutedBy::Hash)
            } else {
                Step::Send(c.node, RoutedBy::Dcid)
            };
        }
        if let Some(h) = &mut flow.hold
            && h.dcid == this
        {
            return self.held(d, peer, now);
        }
        if initial {
            match self.hellos.push(d, now) {
                Ok(Read::Hello(h)) => {
                    let parsed = h
                        .client_hello()
                        .ok()
                        .map(|ch| (Offer::of(&ch), RawKeys::of(&ch)));
                    let Some((offer, raw)) = parsed else {
                        self.shared
                            .metrics
                            .udp
                            .unreadable_initials
                            .fetch_add(1, Relaxed);
                        return self.fallback(peer, hashed);
                    };
                    let node = self.decide(peer, &offer, &raw, hashed);
                    self.open_conn(peer, this, node, Some(offer), false);
                    return self.pin(peer, node, RoutedBy::Connection);
                }
                Ok(Read::Partial) => {
                    // One hold per flow (a second connection started from
                    // the same port meanwhile goes by the fallback), and
                    // [`MAX_HELD_BYTES`] in all.
                    let free = self.flows.peek(&peer).is_some_and(|f| f.hold.is_none());
                    let room = self.held_bytes + d.len() <= MAX_HELD_BYTES;
                    if policy == Policy::Session && free && !room {
                        self.shared.metrics.udp.hold_full.fetch_add(1, Relaxed);
                    }
                    if policy == Policy::Session
                        && free
                        && room
                        && let Some(f) = self.flows.get_mut(&peer)
                    {
                        self.shared.metrics.udp.held.fetch_add(1, Relaxed);
                        f.hold = Some(Hold {
                            dcid: this,
                            since: now,
                            datagrams: vec![d.to_vec()],
                        });
                        self.held_bytes += d.len();
                        self.holding.push(peer);
                        return Step::Held;
                    }
                    let node = hashed;
                    self.open_conn(peer, this, node, None, true);
                    return self.pin(peer, node, RoutedBy::Connection);
                }
                Ok(Read::NotInitial) | Err(_) => {
                    // Not a connection's start: an Initial to the server's
                    // CID (it decrypts under another DCID's keys).
                }
            }
        }
        if policy != Policy::Blind
            && let Some(node) = self.flows.get(&peer).and_then(|f| f.pinned)
        {
            return Step::Send(node, RoutedBy::Flow);
        }
        if initial {
            self.shared
                .metrics
                .udp
                .unreadable_initials
                .fetch_add(1, Relaxed);
        }
        self.fallback(peer, hashed)
    }

    /// Routes by the fallback and remembers the 4-tuple's node.
    fn fallback(&mut self, peer: SocketAddr, node: usize) -> Step {
        if let Some(f) = self.flows.get_mut(&peer) {
            f.pinned = Some(node);
        }
        Step::Send(node, RoutedBy::Hash)
    }

    fn pin(&mut self, peer: SocketAddr, node: usize, by: RoutedBy) -> Step {
        if let Some(f) = self.flows.get_mut(&peer) {
            f.pinned = Some(node);
        }
        Step::Send(node, by)
    }

    /// The policy's node for a new connection's ClientHello.
    fn decide(&self, peer: SocketAddr, offer: &Offer, raw: &RawKeys, hashed: usize) -> usize {
        match self.shared.cfg.policy {
            Policy::Session => {
                let (node, d) = self.shared.choose(Some(offer), Some(raw), peer);
                self.shared.metrics.decision(d);
                node.unwrap_or(0)
            }
            _ => {
                self.shared.metrics.decision(Decision::NoSession);
                hashed
            }
        }
    }

    /// Records a new connection on `node` (and awaits its ServerHello).
    fn open_conn(
        &mut self,
        peer: SocketAddr,
        dcid: Dcid,
        node: usize,
        offer: Option<Offer>,
        reading: bool,
    ) {
        self.shared.nodes[node].connections.fetch_add(1, Relaxed);
        if let Some(f) = self.flows.get_mut(&peer) {
            f.conn = Some(Conn {
                dcid,
                node,
                reading,
            });
        }
        if let Some(offer) = offer {
            self.awaits(peer, node, dcid, offer);
        }
    }

    fn awaits(&mut self, peer: SocketAddr, node: usize, dcid: Dcid, offer: Offer) {
        let now_ms = self.ms(Instant::now());
        if let Some(up) = self.upstream(peer, node, now_ms) {
            up.await_hello(Awaited::new(dcid, offer));
        }
    }

    /// Another Initial of a connection routed before its ClientHello was
    /// whole (blind, cid): read on, for the offer its node's answer settles.
    fn read_more(&mut self, d: &[u8], peer: SocketAddr, c: Conn, now: Instant) {
        let offer = match self.hellos.push(d, now) {
            Ok(Read::Hello(h)) => h.client_hello().ok().map(|ch| Offer::of(&ch)),
            Ok(Read::Partial) => return,
            _ => None,
        };
        if let Some(f) = self.flows.get_mut(&peer)
            && let Some(conn) = &mut f.conn
        {
            conn.reading = false;
        }
        if let Some(offer) = offer {
            self.shared.metrics.decision(Decision::NoSession);
            self.awaits(peer, c.node, c.dcid, offer);
        }
    }

    /// Another Initial of a held connection (`session`).
    fn held(&mut self, d: &[u8], peer: SocketAddr, now: Instant) -> Step {
        let read = self.hellos.push(d, now);
        let Some(f) = self.flows.get_mut(&peer) else {
            return Step::Held;
        };
        let Some(h) = &mut f.hold else {
            return Step::Held;
        };
        let dcid = h.dcid;
        match read {
            Ok(Read::Hello(hello)) => {
                let parsed = hello
                    .client_hello()
                    .ok()
                    .map(|ch| (Offer::of(&ch), RawKeys::of(&ch)));
                let hashed = self.shared.by_hash(peer);
                let node = match &parsed {
                    Some((offer, raw)) => self.decide(peer, offer, raw, hashed),
                    None => {
                        self.shared
                            .metrics
                            .udp
                            .unreadable_initials
                            .fetch_add(1, Relaxed);
                        self.shared.by_hash(peer)
                    }
                };
                self.open_conn(peer, dcid, node, parsed.map(|p| p.0), false);
                if let Some(f) = self.flows.get_mut(&peer) {
                    f.pinned = Some(node);
                }
                Step::Flush(node)
            }
            // More of the ClientHello, or a 0-RTT packet sent behind it.
            Ok(Read::Partial | Read::NotInitial)
                if h.datagrams.len() < MAX_HOLD && self.held_bytes + d.len() <= MAX_HELD_BYTES =>
            {
                h.datagrams.push(d.to_vec());
                self.held_bytes += d.len();
                self.shared.metrics.udp.held.fetch_add(1, Relaxed);
                Step::Held
            }
            other => {
                // Too many datagrams, or unreadable: route what is held by
                // the fallback.
                if other.is_ok() {
                    self.shared.metrics.udp.hold_full.fetch_add(1, Relaxed);
                } else {
                    self.shared
                        .metrics
                        .udp
                        .unreadable_initials
                        .fetch_add(1, Relaxed);
                }
                let node = self.shared.by_hash(peer);
                self.open_conn(peer, dcid, node, None, false);
                if let Some(f) = self.flows.get_mut(&peer) {
                    f.pinned = Some(node);
                }
                Step::Flush(node)
            }
        }
    }

    /// Sends a client datagram to `node` on the flow's socket to it.
    fn send(&mut self, peer: SocketAddr, node: usize, d: &[u8], now_ms: u64) {
        let Some(up) = self.upstream(peer, node, now_ms) else {
            self.shared.metrics.udp.dropped(Dropped::SendFailed);
            return;
        };
        // The std socket: a fresh tokio socket reports "would block" until
        // its first readiness event, which would drop a connection's first
        // Initial.
        match up.send.send(d) {
            Ok(_) => {
                self.shared.metrics.udp.datagrams[0].fetch_add(1, Relaxed);
                self.shared.nodes[node]
                    .bytes_up
                    .fetch_add(d.len() as u64, Relaxed);
            }
            Err(_) => self.shared.metrics.udp.dropped(Dropped::SendFailed),
        }
        if let Some(f) = self.flows.get_mut(&peer) {
            f.last = now_ms;
        }
    }

    /// The flow's socket to `node`, opened (with its task) on first use.
    fn upstream(&mut self, peer: SocketAddr, node: usize, now_ms: u64) -> Option<Arc<Upstream>> {
        let shared = self.shared.clone();
        let reply = self.reply.clone();
        let epoch = self.epoch;
        let f = self.flows.get_mut(&peer)?;
        if let Some(Some(u)) = f.ups.get(node) {
            return Some(u.shared.clone());
        }
        let addr = shared.cfg.backends.get(node)?.addr;
        let sock = match connect(addr) {
            Ok(s) => s,
            Err(e) => {
                shared.nodes[node].connect_errors.fetch_add(1, Relaxed);
                tracing::warn!(node = %addr, "cannot open a UDP socket to the node: {e}");
                return None;
            }
        };
        let up = match Upstream::new(sock, now_ms) {
            Ok(u) => Arc::new(u),
            Err(e) => {
                tracing::warn!(node = %addr, "cannot share a UDP socket: {e}");
                return None;
            }
        };
        let task = tokio::spawn(node_to_client(
            shared.clone(),
            reply,
            up.clone(),
            peer,
            node,
            epoch,
        ));
        shared.nodes[node].active.fetch_add(1, Relaxed);
        f.ups[node] = Some(Up {
            shared: up.clone(),
            task,
        });
        Some(up)
    }

    /// Times out holds and idle flows.
    fn sweep(&mut self, now: Instant) {
        self.hellos.purge(now);
        let now_ms = self.ms(now);
        let mut holding = std::mem::take(&mut self.holding);
        // A flow whose hold ended and another began since the last sweep
        // is listed twice.
        holding.sort_unstable();
        holding.dedup();
        for peer in holding {
            let expired = self
                .flows
                .peek(&peer)
                .and_then(|f| f.hold.as_ref())
                .map(|h| now.saturating_duration_since(h.since) >= HOLD_FOR);
            match expired {
                Some(true) => {
                    let dcid = self
                        .flows
                        .peek(&peer)
                        .and_then(|f| f.hold.as_ref())
                        .map(|h| h.dcid);
                    let node = self.shared.by_hash(peer);
                    self.shared
                        .metrics
                        .udp
                        .unreadable_initials
                        .fetch_add(1, Relaxed);
                    if let Some(dcid) = dcid {
                        self.open_conn(peer, dcid, node, None, false);
                    }
                    let held = self
                        .flows
                        .peek_mut(&peer)
                        .and_then(|f| {
                            f.pinned = Some(node);
                            f.hold.take()
                        })
                        .map(|h| h.datagrams)
                        .unwrap_or_default();
                    self.held_bytes -= held.iter().map(Vec::len).sum::<usize>();
                    for d in &held {
                        self.shared.metrics.udp.routed(RoutedBy::Hash);
                        self.send(peer, node, d, now_ms);
                    }
                }
                Some(false) => self.holding.push(peer),
                None => {}
            }
        }
        let idle = u64::try_from(self.shared.cfg.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let closing = Closing(&self.shared);
        // From the least recently used: close the idle, promote flows that
        // only the node kept alive; a bounded number per sweep.
        for _ in 0..1024 {
            let Some((peer, f)) = self.flows.peek_lru() else {
                break;
            };
            let active = f.active();
            if now_ms.saturating_sub(active) >= idle {
                let peer = *peer;
                if let Some(f) = self.flows.pop(&peer) {
                    self.shared.metrics.udp.flows_expired.fetch_add(1, Relaxed);
                    self.held_bytes -= f.held_bytes();
                    closing.close(f);
                }
            } else if now_ms.saturating_sub(f.last) >= idle {
                let peer = *peer;
                self.flows.promote(&peer);
            } else {
                break;
            }
        }
    }
}

/// A UDP socket connected to a node, from an ephemeral port.
fn connect(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let local: SocketAddr = if addr.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(local)?;
    s.connect(addr)?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s)
}

/// Returns one node's datagrams for one flow to its client.
async fn node_to_client(
    shared: Arc<Shared>,
    reply: Arc<std::net::UdpSocket>,
    up: Arc<Upstream>,
    client: SocketAddr,
    node: usize,
    epoch: Instant,
) {
    let mut buf = vec![0u8; NODE_BUF];
    loop {
        let n = match up.sock.recv(&mut buf).await {
            Ok(n) => n,
            // An ICMP error from a node that is down: the next datagram
            // may succeed.
            Err(_) => continue,
        };
        if n >= NODE_BUF {
            shared.metrics.udp.dropped(Dropped::Oversize);
            continue;
        }
        let d = &buf[..n];
        up.last_rx
            .store(epoch.elapsed().as_millis() as u64, Relaxed);
        up.node_datagram(&shared, node, d);
        match reply.send_to(d, client) {
            Ok(_) => {
                shared.metrics.udp.datagrams[1].fetch_add(1, Relaxed);
                shared.nodes[node].bytes_down.fetch_add(n as u64, Relaxed);
            }
            Err(_) => shared.metrics.udp.dropped(Dropped::SendFailed),
        }
    }
}
