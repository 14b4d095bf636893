//! Idle connections: `--request-timeout`, `--keepalive-timeout` and, at the
//! connection limits (`--max-connections`, `--quic-max-connections`),
//! closing the longest-idle connection first.
//!
//! One registry ([`Conns`]) holds the connections of both transports, each
//! entry marked with its [`Transport`]: TCP (HTTPS and plain HTTP) and
//! QUIC. A connection joins when its HTTP side starts (after the TLS
//! handshake, or at accept on the plain listener) and leaves when it
//! ends. Two kinds of connection join earlier, in their handshake phase:
//! a TCP connection on the HTTPS port that has sent no byte yet (it waits
//! in the registry until its first byte, then leaves it for its
//! handshake), and a QUIC connection whose handshake is in progress (a
//! half-open handshake). Both count as idle since they began, so they are
//! evicted at the limit oldest first; the idle timeouts do not apply to
//! them (`--handshake-timeout` bounds them).
//!
//! Each connection keeps its state in [`Idle`]: how many requests (HTTP/1)
//! or streams (HTTP/2, HTTP/3) are in progress, and since when none is.
//! Requests stamp it with one atomic add when they start and one atomic
//! store when their response ends ([`Busy`]); nothing is allocated. A
//! connection is idle while nothing is in progress, which includes the
//! time a client takes to send a request header (a slowloris client is
//! idle), and QUIC PINGs do not count:
//! - before its first request it may stay idle for the request timeout
//!   (nginx's `client_header_timeout`, 60 s);
//! - after a response, for the keep-alive timeout (nginx's
//!   `keepalive_timeout`, 75 s; on HTTP/2 and HTTP/3 the time with no
//!   stream open, as nginx does since 1.19.7).
//!
//! One task ([`reap`]) scans the registry a few times per timeout and asks
//! the connections past their deadline to close; no connection carries a
//! timer of its own. When a new connection finds no free slot, the accept
//! loop asks the longest-idle connection of its transport to close
//! ([`Conns::evict`]), as nginx's connection draining does, and takes its
//! slot. A connection asked to close shuts down gracefully (HTTP/2 GOAWAY,
//! an HTTP/3 close with H3_NO_ERROR) within [`CLOSE_GRACE`], or at once
//! when evicted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// How long a connection asked to close may take to say goodbye (finish a
/// response, send HTTP/2's GOAWAY) before it is dropped.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_millis(200);

/// The least time a connection must have been idle to be evicted at the
/// `--max-connections` limit. A connection idle for less is almost always
/// a client between its handshake and its request, or between two
/// keep-alive requests: closing it would fail a real request (the soak saw
/// one such `closed` in 85,000). A new client that finds nothing idle this
/// long waits for a slot, as when nothing is idle at all.
pub(crate) const EVICT_MIN_IDLE: Duration = Duration::from_millis(500);

/// Set in [`Idle::since`] once a request has completed: the keep-alive
/// timeout applies from then on, the request timeout before.
const SERVED: u64 = 1 << 63;

/// Set in [`Idle::since`] while the connection is in its handshake phase:
/// evictable, but bounded by the handshake timeout, not the idle ones.
const HANDSHAKE: u64 = 1 << 62;

/// A transport the server listens on. Each connection limit evicts only its
/// own transport's connections, and a [`Snapshot`](crate::Snapshot) reads
/// the figures both keep per transport ([`Snapshot::transport`](crate::Snapshot::transport)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TCP: the HTTPS and plain HTTP listeners (`--max-connections`).
    Tcp = 0,
    /// QUIC: the HTTP/3 listener (`--quic-max-connections`).
    Quic = 1,
}

impl Transport {
    /// Its name in the access log (`$transport`) and metric labels (`tcp`,
    /// `quic`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }
}

/// The process's clock origin for the idle stamps.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// Why a connection was asked to close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseReason {
    /// No first request within the request timeout.
    RequestTimeout = 1,
    /// No next request within the keep-alive timeout.
    KeepaliveTimeout = 2,
    /// Closed to make room at the connection limit.
    Evicted = 3,
}

impl CloseReason {
    /// The metric label and summary name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CloseReason::RequestTimeout => "request_timeout",
            CloseReason::KeepaliveTimeout => "keepalive_timeout",
            CloseReason::Evicted => "evicted",
        }
    }

    pub(crate) fn idx(self) -> usize {
        self as usize - 1
    }
}

/// What every request on one connection shares.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) id: u64,
    /// `$ssl_protocol` and `$ssl_session_reused`, `-` for plain HTTP.
    pub(crate) tls: (&'static str, &'static str),
    requests: AtomicU64,
    /// Admission control shed this connection with `--shed-with 503`:
    /// every request on it gets a 503.
    pub(crate) shed_503: bool,
    /// Whether a request is in progress, and since when none is.
    pub(crate) idle: Idle,
    /// Which connection limit it counts against.
    pub(crate) transport: Transport,
}

impl ConnInfo {
    pub(crate) fn new(peer: SocketAddr, id: u64) -> ConnInfo {
        ConnInfo {
            peer,
            id,
            tls: ("-", "-"),
            requests: AtomicU64::new(0),
            shed_503: false,
            idle: Idle::new(),
            transport: Transport::Tcp,
        }
    }

    /// A QUIC connection (always TLS 1.3; whether it resumed, quinn does
    /// not say per connection).
    pub(crate) fn quic(peer: SocketAddr, id: u64) -> ConnInfo {
        ConnInfo {
            tls: ("TLSv1.3", "-"),
            transport: Transport::Quic,
            ..ConnInfo::new(peer, id)
        }
    }

    /// The next request's number on this connection (from 1).
    pub(crate) fn next_request(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The idle state of one connection.
#[derive(Debug)]
pub(crate) struct Idle {
    /// Requests or streams in progress.
    active: AtomicU32,
    /// Milliseconds since [`EPOCH`] when the connection last became idle,
    /// with [`SERVED`] set once a request has completed.
    since: AtomicU64,
    /// The [`CloseReason`] it was asked to close for (0: not asked).
    close: AtomicU8,
    notify: Notify,
}

impl Idle {
    pub(crate) fn new() -> Idle {
        Idle {
            active: AtomicU32::new(0),
            since: AtomicU64::new(now_ms()),
            close: AtomicU8::new(0),
            notify: Notify::new(),
        }
    }

    /// Restarts the request timeout: the HTTP side starts now.
    pub(crate) fn start(&self) {
        self.since.store(now_ms(), Ordering::Relaxed);
    }

    /// Marks the handshake phase, idle since now.
    fn handshake(&self) {
        self.since.store(now_ms() | HANDSHAKE, Ordering::Relaxed);
    }

    /// Resolves once the connection has been asked to close.
    pub(crate) async fn closing(&self) -> CloseReason {
        self.notify.notified().await;
        match self.close.load(Ordering::Relaxed) {
            1 => CloseReason::RequestTimeout,
            2 => CloseReason::KeepaliveTimeout,
            _ => CloseReason::Evicted,
        }
    }

    /// Asks the connection to close; false if it already was.
    fn ask_close(&self, why: CloseReason) -> bool {
        let asked = self
            .close
            .compare_exchange(0, why as u8, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if asked {
            self.notify.notify_one();
        }
        asked
    }

    /// Since when (ms), whether after a request and whether in the
    /// handshake phase, if idle and not asked to close yet.
    fn idle_since(&self) -> Option<(u64, bool, bool)> {
        if self.active.load(Ordering::Relaxed) > 0 || self.close.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let s = self.since.load(Ordering::Relaxed);
        Some((
            s & !(SERVED | HANDSHAKE),
            s & SERVED != 0,
            s & HANDSHAKE != 0,
        ))
    }
}

/// A request or stream in progress: the connection is not idle until
/// every one is dropped (its response complete or abandoned).
#[derive(Debug)]
pub(crate) struct Busy(Arc<ConnInfo>);

impl Busy {
    pub(crate) fn new(conn: &Arc<ConnInfo>) -> Busy {
        Busy::owned(conn.clone())
    }

    /// [`Busy::new`] on a reference the caller gives up.
    pub(crate) fn owned(conn: Arc<ConnInfo>) -> Busy {
        conn.idle.active.fetch_add(1, Ordering::Relaxed);
        Busy(conn)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let idle = &self.0.idle;
        if idle.active.fetch_sub(1, Ordering::Relaxed) == 1 {
            idle.since.store(now_ms() | SERVED, Ordering::Relaxed);
        }
    }
}

/// The idle timeouts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) request: Duration,
    pub(crate) keepalive: Duration,
}

impl Timeouts {
    /// How often [`reap`] scans: a tenth of the shorter timeout, between
    /// 10 ms and 1 s, so a connection closes at most that late.
    fn scan_every(&self) -> Duration {
        (self.request.min(self.keepalive) / 10)
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// The reason to close a connection idle since `since` (ms), if it
    /// is past its deadline at `now` (ms).
    fn expired(&self, since: u64, served: bool, now: u64) -> Option<CloseReason> {
        let (limit, why) = if served {
            (self.keepalive, CloseReason::KeepaliveTimeout)
        } else {
            (self.request, CloseReason::RequestTimeout)
        };
        (now.saturating_sub(since) >= limit.as_millis() as u64).then_some(why)
    }
}

#[derive(Default)]
struct Slots {
    live: Vec<Option<Arc<ConnInfo>>>,
    free: Vec<usize>,
}

/// The registry of every connection past its handshake, and of those in
/// their handshake phase that may be evicted (see the module docs).
pub(crate) struct Conns {
    slots: Mutex<Slots>,
    timeouts: Timeouts,
    /// Connections asked to close by [`Conns::evict`] and not gone yet, by
    /// [`Transport`].
    evicting: [AtomicU32; 2],
    /// Connections asked to close, by [`Transport`] and [`CloseReason`].
    closed: [[AtomicU64; 3]; 2],
}

/// A connection's place in the [`Conns`] registry; leaves it on drop.
pub(crate) struct Member {
    registry: Arc<Conns>,
    conn: Arc<ConnInfo>,
    slot: usize,
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.conn.idle.close.load(Ordering::Relaxed) == CloseReason::Evicted as u8 {
            self.registry.evicting[self.conn.transport as usize].fetch_sub(1, Ordering::Relaxed);
        }
        let mut s = self.registry.slots.lock();
        s.live[self.slot] = None;
        s.free.push(self.slot);
    }
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl Conns {
    pub(crate) fn new(timeouts: Timeouts) -> Conns {
        Conns {
            slots: Mutex::default(),
            timeouts,
            evicting: Default::default(),
            closed: Default::default(),
        }
    }

    /// Adds a connection whose HTTP side starts now.
    pub(crate) fn join(self: &Arc<Self>, conn: &Arc<ConnInfo>) -> Member {
        conn.idle.start();
        self.enter(conn)
    }

    /// Adds a connection in its handshake phase, idle since now: evictable
    /// at the limit, not subject to the idle timeouts. [`Idle::start`]
    /// ends the phase.
    pub(crate) fn join_handshake(self: &Arc<Self>, conn: &Arc<ConnInfo>) -> Member {
        conn.idle.handshake();
        self.enter(conn)
    }

    fn enter(self: &Arc<Self>, conn: &Arc<ConnInfo>) -> Member {
        let mut s = self.slots.lock();
        let slot = match s.free.pop() {
            Some(i) => {
                s.live[i] = Some(conn.clone());
                i
            }
            None => {
                s.live.push(Some(conn.clone()));
                s.live.len() - 1
            }
        };
        drop(s);
        Member {
            registry: self.clone(),
            conn: conn.clone(),
            slot,
        }
    }

    /// Connections of `transport` asked to close so far, by reason.
    pub(crate) fn closed(&self, transport: Transport, why: CloseReason) -> u64 {
        self.closed[transport as usize][why.idx()].load(Ordering::Relaxed)
    }

    /// Asks the longest-idle connection of `transport` to close, unless an
    /// eviction of that transport is still under way. True if one was
    /// asked (or one is on its way out).
    pub(crate) fn evict(&self, transport: Transport) -> bool {
        self.evict_at(transport, now_ms())
    }

    /// [`evict`](Self::evict) at `now` (ms since the stamps' origin).
    fn evict_at(&self, transport: Transport, now: u64) -> bool {
        let t = transport as usize;
        if self.evicting[t].load(Ordering::Relaxed) > 0 {
            return true;
        }
        let s = self.slots.lock();
        let oldest = s
            .live
            .iter()
            .flatten()
            .filter(|c| c.transport == transport)
            .filter_map(|c| c.idle.idle_since().map(|(t, _, _)| (t, c)))
            .filter(|(t, _)| now.saturating_sub(*t) >= EVICT_MIN_IDLE.as_millis() as u64)
            .min_by_key(|(t, _)| *t);
        let Some((_, victim)) = oldest else {
            return false;
        };
        self.evicting[t].fetch_add(1, Ordering::Relaxed);
        if victim.idle.ask_close(CloseReason::Evicted) {
            self.closed[t][CloseReason::Evicted.idx()].fetch_add(1, Ordering::Relaxed);
        } else {
            self.evicting[t].fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Asks every connection past its idle deadline to close.
    fn reap_now(&self, now: u64) {
        let s = self.slots.lock();
        for c in s.live.iter().flatten() {
            // The handshake timeout bounds the handshake phase.
            let Some((since, served, false)) = c.idle.idle_since() else {
                continue;
            };
            if let Some(why) = self.timeouts.expired(since, served, now)
                && c.idle.ask_close(why)
            {
                self.closed[c.transport as usize][why.idx()].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Closes idle connections past their timeout until shutdown.
pub(crate) async fn reap(registry: Arc<Conns>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(registry.timeouts.scan_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => registry.reap_now(now_ms()),
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Arc<ConnInfo> {
        Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), 1))
    }

    fn timeouts() -> Timeouts {
        Timeouts {
            request: Duration::from_millis(100),
            keepalive: Duration::from_millis(300),
        }
    }

    #[test]
    fn the_request_timeout_applies_before_the_first_request_and_keepalive_after() {
        let t = timeouts();
        assert_eq!(t.expired(1000, false, 1099), None);
        assert_eq!(
            t.expired(1000, false, 1100),
            Some(CloseReason::RequestTimeout)
        );
        assert_eq!(t.expired(1000, true, 1100), None);
        assert_eq!(
            t.expired(1000, true, 1300),
            Some(CloseReason::KeepaliveTimeout)
        );
        assert_eq!(t.scan_every(), Duration::from_millis(10));
    }

    #[test]
    fn a_request_in_progress_is_not_idle_and_its_end_stamps_served() {
        let c = conn();
        assert_eq!(c.idle.idle_since().map(|(_, s, _)| s), Some(false));
        let a = Busy::new(&c);
        let b = Busy::new(&c);
        assert_eq!(c.idle.idle_since(), None);
        drop(a);
        assert_eq!(c.idle.idle_since(), None, "one stream is still open");
        drop(b);
        assert_eq!(c.idle.idle_since().map(|(_, s, _)| s), Some(true));
    }

    #[test]
    fn eviction_takes_the_longest_idle_and_skips_busy_ones() {
        let r = Arc::new(Conns::new(timeouts()));
        let (old, busy, young) = (conn(), conn(), conn());
        let _m1 = r.join(&old);
        let _m2 = r.join(&busy);
        let _m3 = r.join(&young);
        old.idle.since.store(5, Ordering::Relaxed);
        busy.idle.since.store(1, Ordering::Relaxed);
        young.idle.since.store(50 | SERVED, Ordering::Relaxed);
        let _req = Busy::new(&busy);
        let now = 10_000;
        // Idle for less than EVICT_MIN_IDLE: a client about to send its
        // request is not evicted.
        assert!(!r.evict_at(Transport::Tcp, 5 + EVICT_MIN_IDLE.as_millis() as u64 - 1));
        assert!(r.evict_at(Transport::Tcp, now));
        assert_eq!(
            old.idle.close.load(Ordering::Relaxed),
            CloseReason::Evicted as u8
        );
        assert_eq!(young.idle.close.load(Ordering::Relaxed), 0);
        assert_eq!(busy.idle.close.load(Ordering::Relaxed), 0);
        // While the first victim is on its way out, nobody else is asked.
        assert!(r.evict_at(Transport::Tcp, now));
        assert_eq!(young.idle.close.load(Ordering::Relaxed), 0);
        drop(_m1);
        assert!(r.evict_at(Transport::Tcp, now));
        assert_eq!(
            young.idle.close.load(Ordering::Relaxed),
            CloseReason::Evicted as u8
        );
        assert_eq!(r.closed(Transport::Tcp, CloseReason::Evicted), 2);
        // Nothing idle is left: no eviction.
        drop(_m3);
        assert!(!r.evict_at(Transport::Tcp, now));
    }

    #[test]
    fn reaping_closes_only_connections_past_their_deadline() {
        let r = Arc::new(Conns::new(timeouts()));
        let (fresh, stale, kept) = (conn(), conn(), conn());
        let _m = [r.join(&fresh), r.join(&stale), r.join(&kept)];
        let now = now_ms() + 10_000;
        fresh.idle.since.store(now - 50, Ordering::Relaxed);
        stale.idle.since.store(now - 150, Ordering::Relaxed);
        kept.idle
            .since
            .store((now - 150) | SERVED, Ordering::Relaxed);
        r.reap_now(now);
        assert_eq!(fresh.idle.close.load(Ordering::Relaxed), 0);
        assert_eq!(
            stale.idle.close.load(Ordering::Relaxed),
            CloseReason::RequestTimeout as u8
        );
        assert_eq!(kept.idle.close.load(Ordering::Relaxed), 0);
        r.reap_now(now + 200);
        assert_eq!(
            kept.idle.close.load(Ordering::Relaxed),
            CloseReason::KeepaliveTimeout as u8
        );
        // The fresh one's request timeout has passed by then too.
        assert_eq!(
            fresh.idle.close.load(Ordering::Relaxed),
            CloseReason::RequestTimeout as u8
        );
        assert_eq!(r.closed(Transport::Tcp, CloseReason::RequestTimeout), 2);
        assert_eq!(r.closed(Transport::Tcp, CloseReason::KeepaliveTimeout), 1);
    }

    // Regression, issue 29 (7 and 1): a TCP connection that had sent no
    // byte and a half-open QUIC handshake were not in the registry, so
    // the limit could not evict them and new clients were locked out.
    #[test]
    fn handshake_phase_entries_are_evicted_oldest_first_but_never_reaped() {
        let r = Arc::new(Conns::new(timeouts()));
        let silent = conn();
        let half_open = Arc::new(ConnInfo::quic("127.0.0.1:2".parse().unwrap(), 2));
        let served = Arc::new(ConnInfo::quic("127.0.0.1:3".parse().unwrap(), 3));
        let _m = [
            r.join_handshake(&silent),
            r.join_handshake(&half_open),
            r.join(&served),
        ];
        silent.idle.since.store(10 | HANDSHAKE, Ordering::Relaxed);
        half_open
            .idle
            .since
            .store(20 | HANDSHAKE, Ordering::Relaxed);
        served.idle.since.store(30 | SERVED, Ordering::Relaxed);
        // Far past every idle timeout: only the served one is reaped.
        r.reap_now(100_000);
        assert_eq!(silent.idle.close.load(Ordering::Relaxed), 0);
        assert_eq!(half_open.idle.close.load(Ordering::Relaxed), 0);
        assert_eq!(
            served.idle.close.load(Ordering::Relaxed),
            CloseReason::KeepaliveTimeout as u8
        );
        assert_eq!(r.closed(Transport::Quic, CloseReason::KeepaliveTimeout), 1);
        assert_eq!(r.closed(Transport::Tcp, CloseReason::KeepaliveTimeout), 0);
        // Each limit evicts its own transport's oldest.
        assert!(r.evict_at(Transport::Quic, 100_000));
        assert_eq!(
            half_open.idle.close.load(Ordering::Relaxed),
            CloseReason::Evicted as u8
        );
        assert_eq!(silent.idle.close.load(Ordering::Relaxed), 0);
        assert!(r.evict_at(Transport::Tcp, 100_000));
        assert_eq!(
            silent.idle.close.load(Ordering::Relaxed),
            CloseReason::Evicted as u8
        );
        assert_eq!(r.closed(Transport::Quic, CloseReason::Evicted), 1);
        assert_eq!(r.closed(Transport::Tcp, CloseReason::Evicted), 1);
        // Its handshake done, a connection is idle from then on.
        let next = Arc::new(ConnInfo::quic("127.0.0.1:4".parse().unwrap(), 4));
        let _n = r.join_handshake(&next);
        assert_eq!(next.idle.idle_since().map(|(_, _, h)| h), Some(true));
        next.idle.start();
        assert_eq!(
            next.idle.idle_since().map(|(_, s, h)| (s, h)),
            Some((false, false))
        );
    }
}
