//! The door of the QUIC listener: what happens to each connection attempt
//! (quinn's `Incoming`, announced on the client's first Initial) before a
//! handshake starts. In order:
//!
//! 1. Address validation: a Retry as `--quic-retry` says, or, under the
//!    `retry-threshold` policy, while at least N handshakes from
//!    unvalidated addresses are half-open (HAProxy's
//!    `tune.quic.fe.sec.retry-threshold`).
//! 2. `session` policy: the attempt's ClientHello, read off its Initials
//!    ([`super::sniff`]), is classified by the PSK it offers as a
//!    resumption this node can serve or a new full handshake, and the TCP
//!    listener's admission control decides ([`crate::admission`]: one
//!    controller and one full-handshake budget for both transports, the
//!    decisions counted per transport). A shed attempt is refused
//!    (CONNECTION_CLOSE with CONNECTION_REFUSED), sent a Retry or ignored,
//!    as `--quic-shed-with` says; no handshake state is made for it.
//! 3. The connection limit (`--quic-max-connections`, the `static`
//!    policy's, and also in force under the others): a free slot, or a wait
//!    (at most [`ROOM_WAIT`]) while the longest-idle QUIC connection is
//!    closed to make room, or a refusal.
//!
//! The controller's signals are the TCP listener's, with QUIC's own queue
//! delay: the time from the kernel's receipt of an attempt's ClientHello
//! (its last datagram's receive stamp, [`super::sniff::SniffSocket`]) to
//! the admission decision. It grows when the runtime's workers (which run
//! quinn's endpoint, the accept loop and every handshake) fall behind, and
//! first in the socket's receive queue, where an overloaded server's
//! Initials wait before quinn reads them, as a TCP server's ClientHellos
//! wait in its accept queue. The CPU-busy signal is the workers', which
//! QUIC shares with TCP. A QUIC full handshake counts in flight from its
//! admission until the server's flight is made (rustls has read the whole
//! ClientHello and signed), and counts as completed then
//! ([`InFlight::done`]): what the controller takes as served over QUIC.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::sniff::{Found, HELLO_WAIT};
use super::{Conn, QuicRetry, connection};
use crate::admission::{Admission, Door, HelloKind, InFlight, Verdict, classify_psk};
use crate::config::QuicShedWith;
use crate::idle::{ConnInfo, Transport};
use crate::stats::{OpenGuard, Stats};

/// The admission policy of the QUIC listener (`--quic-admission`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuicAdmission {
    /// Nothing but the listener's limits and `--quic-retry`.
    #[default]
    Off,
    /// The connection limit (`--quic-max-connections`, required by the
    /// CLI) is the policy: quinn's connection count, whatever the
    /// handshakes cost.
    Static,
    /// A Retry to every attempt from an unvalidated address while at least
    /// this many handshakes from unvalidated addresses are half-open
    /// (HAProxy's rule); replaces `--quic-retry`.
    RetryThreshold(u64),
    /// Session-aware: attempts with a resumable PSK admitted, new full
    /// handshakes within the admission controller's budget
    /// (`--admission session`).
    Session,
}

impl QuicAdmission {
    /// The name used by `--quic-admission` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            QuicAdmission::Off => "off",
            QuicAdmission::Static => "static",
            QuicAdmission::RetryThreshold(_) => "retry-threshold",
            QuicAdmission::Session => "session",
        }
    }
}

/// How long an attempt that finds the QUIC listener full waits for an
/// evicted connection's slot before it is refused.
pub(crate) const ROOM_WAIT: Duration = Duration::from_secs(1);

/// How long a waiting attempt waits for the slot of the connection it
/// asked to close before it looks again: it is woken as soon as any QUIC
/// connection ends ([`QuicCounters::freed`](crate::stats::QuicCounters::freed)).
/// (A fixed 20 ms sleep here capped admissions at the limit near 50/s, so
/// a flood of clients that connect and stay, arriving faster than that,
/// queued real clients behind it.)
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// Attempts that may wait for room at once; more are refused at once
/// (quinn's `max_incoming` bounds the attempts it holds in any case).
const ROOM_QUEUE: usize = 64;

/// An attempt on its way to a connection.
pub(super) struct Attempt {
    pub(super) incoming: quinn::Incoming,
    /// Admission control's in-flight guard (`session`), held until the
    /// handshake ends.
    pub(super) guard: Option<InFlight>,
    /// Its ClientHello was read (and its PSK claimed in a remote cache)
    /// before the decision: the connection need not read it again.
    pub(super) hello_read: bool,
}

type Room = mpsc::Sender<(Attempt, tokio::time::Instant)>;

/// Starts the accept loop and the room loop.
pub(super) fn spawn(
    ep: quinn::Endpoint,
    c: Arc<Conn>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (room, waiting) = mpsc::channel(ROOM_QUEUE);
    tokio::spawn(room_loop(waiting, c.clone(), shutdown.clone()));
    tokio::spawn(accept_loop(ep, c, room, shutdown))
}

async fn accept_loop(
    ep: quinn::Endpoint,
    c: Arc<Conn>,
    room: Room,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let incoming = tokio::select! {
            i = ep.accept() => match i {
                Some(i) => i,
                None => return,
            },
            _ = shutdown.wait_for(|s| *s) => {
                ep.close(0u32.into(), b"server shutting down");
                return;
            }
        };
        let retry = match c.policy {
            QuicAdmission::RetryThreshold(n) => c.stats.quic.half_open.load(Ordering::Relaxed) >= n,
            _ => match c.retry {
                QuicRetry::Off => false,
                QuicRetry::Always => true,
                QuicRetry::UnderLoad => c.stats.open_now(Transport::Quic) * 2 >= c.max,
            },
        };
        // First, so that an address that cannot answer a Retry (a flood of
        // Initials) never waits for room or takes a slot.
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            if incoming.retry().is_ok() {
                c.stats.quic.retries.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        match (&c.admission, &c.hellos) {
            (Some(adm), Some(hellos)) if c.policy == QuicAdmission::Session => {
                let (addr, dcid) = (incoming.remote_address(), incoming.orig_dst_cid());
                // Read whole already (one datagram): decided here, at once.
                // Else (a ClientHello in two datagrams) or with a remote
                // cache to claim the PSK in: decided in a task of its own.
                match hellos.take(addr, &dcid) {
                    Some(found) if c.store.is_none() => {
                        judge(incoming, Some(found), adm, &c, &room);
                    }
                    found => {
                        let (adm, hellos, c, room) =
                            (adm.clone(), hellos.clone(), c.clone(), room.clone());
                        tokio::spawn(async move {
                            let found = match found {
                                Some(f) => Some(f),
                                None => hellos.offered(addr, &dcid, HELLO_WAIT).await,
                            };
                            if let (Some(store), Some(f)) = (&c.store, &found)
                                && !f.psk.is_empty()
                            {
                                store.prefetch(&f.psk, true).await;
                            }
                            judge(incoming, found, &adm, &c, &room);
                        });
                    }
                }
            }
            _ => place(
                Attempt {
                    incoming,
                    guard: None,
                    hello_read: false,
                },
                &c,
                &room,
            ),
        }
    }
}

/// `session`: classifies the attempt by the PSK its ClientHello offers
/// (`None`: not read within [`HELLO_WAIT`], a full handshake) and admits
/// or sheds it.
fn judge(
    incoming: quinn::Incoming,
    found: Option<Found>,
    adm: &Arc<Admission>,
    c: &Arc<Conn>,
    room: &Room,
) {
    let kind = match &found {
        Some(f) => {
            // After a Retry the ClientHello is the copy read before it, a
            // round trip ago: not a queue.
            if incoming.may_retry() {
                adm.queue_delay(f.at.elapsed());
            }
            classify_psk(&f.psk, &adm.resumable)
        }
        None => {
            adm.unparsed();
            HelloKind::Full
        }
    };
    // A NEW_TOKEN token this server issued, checked by quinn (address,
    // age, used once): a client that has been served before, whose full
    // handshake goes ahead of new clients'. (A Retry token validates the
    // address too, but a retried client is not a returning one.)
    let door = match incoming.remote_address_validated() && incoming.may_retry() {
        true => Door::QuicReturning,
        false => Door::Quic,
    };
    match adm.decide_on(kind, door) {
        Verdict::Admit(guard) => place(
            Attempt {
                incoming,
                guard: Some(guard),
                hello_read: true,
            },
            c,
            room,
        ),
        // `--shed-with 503` is TCP's; over QUIC a shed attempt is shed
        // as --quic-shed-with says.
        Verdict::Shed(_) => {
            let (addr, dcid) = (incoming.remote_address(), incoming.orig_dst_cid());
            if shed(incoming, c) == QuicShedWith::Retry
                && let (Some(hellos), Some(f)) = (&c.hellos, found)
            {
                // Its answer to the Retry is decided on the same ClientHello.
                hellos.put_back(addr, &dcid, f);
            }
        }
    }
}

/// Sheds an attempt as `--quic-shed-with` says, counted by action;
/// returns what it got.
fn shed(incoming: quinn::Incoming, c: &Conn) -> QuicShedWith {
    let how = match c.shed_with {
        QuicShedWith::Retry if !incoming.remote_address_validated() && incoming.may_retry() => {
            match incoming.retry() {
                Ok(()) => {
                    c.stats.quic.retries.fetch_add(1, Ordering::Relaxed);
                    QuicShedWith::Retry
                }
                Err(e) => {
                    e.into_incoming().refuse();
                    QuicShedWith::Refuse
                }
            }
        }
        QuicShedWith::Ignore => {
            incoming.ignore();
            QuicShedWith::Ignore
        }
        // A Retry token already spent: it cannot be retried again.
        QuicShedWith::Retry | QuicShedWith::Refuse => {
            incoming.refuse();
            QuicShedWith::Refuse
        }
    };
    c.stats.quic.shed[how as usize].fetch_add(1, Ordering::Relaxed);
    how
}

/// The connection limit: a free slot, or the room queue, or a refusal.
fn place(a: Attempt, c: &Arc<Conn>, room: &Room) {
    // Attempts already waiting for room go first.
    if c.waiting.load(Ordering::Relaxed) == 0
        && let Some(open) = c.stats.reserve(c.max)
    {
        admit(a, open, c);
        return;
    }
    c.waiting.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = room.try_send((a, tokio::time::Instant::now())) {
        c.waiting.fetch_sub(1, Ordering::Relaxed);
        let (mpsc::error::TrySendError::Full((a, _)) | mpsc::error::TrySendError::Closed((a, _))) =
            e;
        c.stats.quic.refused.fetch_add(1, Ordering::Relaxed);
        a.incoming.refuse();
    }
}

/// At `--quic-max-connections`: for each waiting attempt in turn, asks the
/// longest-idle QUIC connection to close and takes its slot; refuses the
/// attempt when no slot frees within [`ROOM_WAIT`] of its arrival.
async fn room_loop(
    mut queue: mpsc::Receiver<(Attempt, tokio::time::Instant)>,
    c: Arc<Conn>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (a, arrived) = tokio::select! {
            x = queue.recv() => match x {
                Some(x) => x,
                None => return,
            },
            _ = shutdown.wait_for(|s| *s) => return,
        };
        loop {
            if let Some(open) = c.stats.reserve(c.max) {
                admit(a, open, &c);
                break;
            }
            if arrived.elapsed() >= ROOM_WAIT {
                c.stats.quic.refused.fetch_add(1, Ordering::Relaxed);
                a.incoming.refuse();
                break;
            }
            c.shared.idle.evict(Transport::Quic);
            let _ = tokio::time::timeout(ROOM_RETRY, c.stats.quic.freed.notified()).await;
        }
        c.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts a connection in a slot already reserved: it joins the registry
/// in its handshake phase, so the next eviction sees it.
fn admit(a: Attempt, open: OpenGuard, c: &Arc<Conn>) {
    let id = c.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    let info = Arc::new(ConnInfo::quic(a.incoming.remote_address(), id));
    let member = c.shared.idle.join_handshake(&info);
    let half_open = (!a.incoming.remote_address_validated()).then(|| HalfOpen::new(c));
    tokio::spawn(connection(a, open, half_open, c.clone(), info, member));
}

/// One handshake from an unvalidated address in progress (the
/// `retry-threshold` policy's count); the count drops with it.
pub(super) struct HalfOpen(Arc<Stats>);

impl HalfOpen {
    fn new(c: &Conn) -> Self {
        c.stats.quic.half_open.fetch_add(1, Ordering::Relaxed);
        HalfOpen(c.stats.clone())
    }
}

impl Drop for HalfOpen {
    fn drop(&mut self) {
        self.0.quic.half_open.fetch_sub(1, Ordering::Relaxed);
    }
}
