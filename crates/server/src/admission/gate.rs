//! The live admission state: the counters, the token bucket and the
//! verdict on each ClientHello, all lock-free but the bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::classify::{HelloKind, Resumable};
use super::controller::Signals;
use crate::config::{AdmissionMode, AdmissionSettings, ShedWith};

/// A token bucket refilled at the controller's limit. Tokens may go
/// negative (a misclassified resumption is charged after the fact).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The transport a ClientHello came over: TCP (read off the stream) or
/// QUIC (read off the Initials).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Door {
    Tcp,
    Quic,
    /// QUIC, from a returning client: its Initial carries an
    /// address-validation token from this server's NEW_TOKEN frame, which
    /// quinn has checked (address, age) and logged as used. Its full
    /// handshake may borrow from the budget ahead of new clients' (seed
    /// 002's rule, admit the users already in a session first, which a TCP
    /// server can apply only to resumptions).
    QuicReturning,
}

/// How a full handshake may take from the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Draw {
    /// A whole token, or shed.
    Whole,
    /// Down to the bucket's floor (a returning client over QUIC).
    Borrow,
    /// Charged whatever the bucket holds (a resumption that ended full).
    Charge,
}

/// What the bucket gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Took {
    /// Nothing: shed.
    No,
    /// A whole token.
    Whole,
    /// A borrowed one (a new client would have been shed).
    Borrowed,
}

/// The decisions on one transport's ClientHellos.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Decisions {
    /// Full handshakes admitted.
    pub full_admitted: u64,
    /// Full handshakes shed.
    pub full_shed: u64,
    /// Resumptions admitted.
    pub resume_admitted: u64,
    /// Resumptions shed.
    pub resume_shed: u64,
    /// Of the full handshakes admitted, those of returning clients (QUIC:
    /// a NEW_TOKEN token) admitted on a borrowed token: a new client's
    /// would have been shed at that instant.
    pub full_returning_ahead: u64,
}

/// The admission counters and signals at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AdmissionStats {
    /// The mode.
    pub mode: AdmissionMode,
    /// How shed connections are refused.
    pub shed_with: ShedWith,
    /// Full handshakes admitted.
    pub full_admitted: u64,
    /// Full handshakes shed.
    pub full_shed: u64,
    /// Resumptions admitted.
    pub resume_admitted: u64,
    /// Resumptions shed (only `static` sheds them).
    pub resume_shed: u64,
    /// Of the four counts above (which are every transport's), those of
    /// the QUIC listener's Initials (`serve --h3 --admission session`);
    /// TCP's are the rest.
    pub quic: Decisions,
    /// ClientHellos taken for resumptions that ended as full handshakes.
    pub misclassified: u64,
    /// ClientHellos that could not be parsed (left for rustls to refuse,
    /// counted as full).
    pub unparsed: u64,
    /// `session`: full handshakes per second admitted now (`None`:
    /// unlimited); `static`: the in-flight limit.
    pub limit: Option<f64>,
    /// Handshakes in flight now.
    pub in_flight: u64,
    /// Of those, full handshakes (`session`: the controller's in-flight
    /// signal).
    pub full_in_flight: u64,
    /// Mean queueing delay of new connections' first bytes in the last
    /// 100 ms tick, seconds (see [`Signals::queue_delay`]).
    pub queue_delay_seconds: f64,
    /// CPU saturation of the workers in the last tick: (CPU time +
    /// run-queue wait) over the CPU budget, capped at 1.
    pub cpu_busy: f64,
    /// `session`: full handshakes per second the server completed while
    /// its CPU was saturated, smoothed: the controller's estimate of what
    /// it serves (0 until a saturated tick).
    pub served_full_per_sec: f64,
    /// The last tick showed overload.
    pub overloaded: bool,
    /// Ticks that showed overload.
    pub overload_ticks: u64,
}

/// The live admission state of a server.
#[derive(Debug)]
pub(crate) struct Admission {
    pub(crate) settings: AdmissionSettings,
    pub(crate) resumable: Resumable,
    pub(super) in_flight_cap: u64,
    bucket: Mutex<Bucket>,
    /// `f64` bits of the limit; `u64::MAX`: unlimited.
    pub(super) limit: AtomicU64,
    in_flight: AtomicU64,
    /// Of those, full handshakes (the controller's in-flight signal).
    pub(super) full_in_flight: AtomicU64,
    /// `[full, resume]`.
    pub(super) admitted: [AtomicU64; 2],
    pub(super) shed: [AtomicU64; 2],
    /// Of those, QUIC's: `[admitted, shed]` × `[full, resume]`.
    quic: [[AtomicU64; 2]; 2],
    /// QUIC full handshakes of returning clients admitted ahead of new
    /// ones ([`Decisions::full_returning_ahead`]).
    returning_ahead: AtomicU64,
    misclassified: AtomicU64,
    unparsed: AtomicU64,
    /// QUIC's admitted full handshakes whose server flight is made
    /// ([`InFlight::done`]): the controller's completions over QUIC, which
    /// the server's TCP handshake counts do not see.
    pub(super) quic_full_done: AtomicU64,
    /// The QUIC listener's UDP socket (a duplicate), whose kernel drop
    /// count is the controller's overflow signal ([`Signals::queue_drops`]).
    quic_socket: std::sync::OnceLock<std::net::UdpSocket>,
    pub(super) delay_ns: AtomicU64,
    pub(super) delay_n: AtomicU64,
    /// The last tick's signals, verdict and the controller's estimate of
    /// the full handshakes per second served.
    pub(super) last: Mutex<(Signals, bool, f64)>,
    pub(super) overload_ticks: AtomicU64,
}

const UNLIMITED: u64 = u64::MAX;

/// One admitted handshake in flight; the count drops with it.
#[derive(Debug)]
pub(crate) struct InFlight {
    adm: Arc<Admission>,
    pub(crate) kind: HelloKind,
}

impl InFlight {
    /// The server's work on this QUIC handshake is done (its flight, key
    /// share and signature made): a full one counts as served for the
    /// controller's estimate of what the server serves. The count in
    /// flight drops with the guard.
    pub(crate) fn done(self) {
        if self.kind == HelloKind::Full {
            self.adm.quic_full_done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.adm.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.kind == HelloKind::Full {
            self.adm.full_in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The verdict on one ClientHello.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Go on with the handshake.
    Admit(InFlight),
    /// Refuse, as `ShedWith` says. With `Http503` the handshake goes on
    /// (still counted in flight) and every request gets a 503.
    Shed(Option<InFlight>),
}

impl Admission {
    pub(crate) fn new(settings: AdmissionSettings, resumable: Resumable, threads: usize) -> Self {
        let in_flight_cap = settings
            .max_handshakes_in_flight
            .map_or(128 * threads.max(1) as u64, |n| n as u64);
        let limit = settings.fixed_limit.map_or(UNLIMITED, f64::to_bits);
        // A fixed limit starts with its burst in the bucket: its first full
        // handshakes are admitted at once, then one per 1/N s.
        let tokens = settings
            .fixed_limit
            .filter(|l| *l > 0.0)
            .map_or(0.0, |l| (l * 0.1).max(1.0));
        Admission {
            settings,
            resumable,
            in_flight_cap,
            bucket: Mutex::new(Bucket {
                tokens,
                at: Instant::now(),
            }),
            limit: AtomicU64::new(limit),
            in_flight: AtomicU64::new(0),
            full_in_flight: AtomicU64::new(0),
            admitted: Default::default(),
            shed: Default::default(),
            quic: Default::default(),
            returning_ahead: AtomicU64::new(0),
            misclassified: AtomicU64::new(0),
            unparsed: AtomicU64::new(0),
            quic_full_done: AtomicU64::new(0),
            quic_socket: std::sync::OnceLock::new(),
            delay_ns: AtomicU64::new(0),
            delay_n: AtomicU64::new(0),
            last: Mutex::new((Signals::default(), false, 0.0)),
            overload_ticks: AtomicU64::new(0),
        }
    }

    /// Records how long one new connection's first bytes waited.
    pub(crate) fn queue_delay(&self, d: Duration) {
        self.delay_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        self.delay_n.fetch_add(1, Ordering::Relaxed);
    }

    /// Watches the QUIC listener's UDP socket for drops (the first one
    /// given).
    pub(crate) fn watch_quic_socket(&self, socket: std::net::UdpSocket) {
        let _ = self.quic_socket.set(socket);
    }

    /// The datagrams the kernel has dropped on the QUIC socket for a full
    /// receive buffer (0 without one, or where `/proc/net/udp` cannot be
    /// read).
    pub(super) fn quic_drops(&self) -> u64 {
        self.quic_socket
            .get()
            .and_then(|s| tlslab_runtime::udp_queue::receive_drops(s).ok())
            .unwrap_or(0)
    }

    /// A ClientHello that did not parse: counted, and treated as full.
    pub(crate) fn unparsed(&self) {
        self.unparsed.fetch_add(1, Ordering::Relaxed);
    }

    fn limit_now(&self) -> Option<f64> {
        match self.limit.load(Ordering::Relaxed) {
            UNLIMITED => None,
            bits => Some(f64::from_bits(bits)),
        }
    }

    /// Takes a token for a full handshake as `draw` allows. The bucket
    /// holds at most a burst (a tenth of a second at the limit) and goes
    /// down to minus a burst: a returning client may borrow that far ahead of
    /// new clients, so the limit still bounds every full handshake. A limit
    /// of 0 (`--admission-fixed-limit 0`) lends nothing.
    fn take_token(&self, now: Instant, draw: Draw) -> Took {
        let Some(rate) = self.limit_now() else {
            return Took::Whole;
        };
        let burst = (rate * 0.1).max(1.0);
        let mut b = self.bucket.lock();
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.at = now;
        b.tokens = (b.tokens + dt * rate).min(burst);
        let took = if b.tokens >= 1.0 {
            Took::Whole
        } else if draw == Draw::Charge
            || (draw == Draw::Borrow && rate > 0.0 && b.tokens >= 1.0 - burst)
        {
            Took::Borrowed
        } else {
            return Took::No;
        };
        b.tokens = (b.tokens - 1.0).max(-burst);
        took
    }

    /// Decides on a ClientHello of `kind` that came over TCP.
    pub(crate) fn decide(self: &Arc<Self>, kind: HelloKind) -> Verdict {
        self.decide_on(kind, Door::Tcp)
    }

    /// Decides on a ClientHello of `kind` that came over `door`: one
    /// budget for both transports (they share the CPU), counted apart.
    pub(crate) fn decide_on(self: &Arc<Self>, kind: HelloKind, door: Door) -> Verdict {
        let admit = match self.settings.mode {
            AdmissionMode::Off => true,
            AdmissionMode::Static => self.in_flight.load(Ordering::Relaxed) < self.in_flight_cap,
            AdmissionMode::Session => match kind {
                HelloKind::Resume => true,
                HelloKind::Full => {
                    let draw = match door {
                        Door::QuicReturning => Draw::Borrow,
                        Door::Tcp | Door::Quic => Draw::Whole,
                    };
                    match self.take_token(Instant::now(), draw) {
                        Took::No => false,
                        Took::Whole => true,
                        Took::Borrowed => {
                            self.returning_ahead.fetch_add(1, Ordering::Relaxed);
                            true
                        }
                    }
                }
            },
        };
        let counters = if admit { &self.admitted } else { &self.shed };
        counters[kind.idx()].fetch_add(1, Ordering::Relaxed);
        if door != Door::Tcp {
            self.quic[usize::from(!admit)][kind.idx()].fetch_add(1, Ordering::Relaxed);
        }
        let guard = || {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            if kind == HelloKind::Full {
                self.full_in_flight.fetch_add(1, Ordering::Relaxed);
            }
            InFlight {
                adm: self.clone(),
                kind,
            }
        };
        if admit {
            Verdict::Admit(guard())
        } else if self.settings.shed_with == ShedWith::Http503 {
            Verdict::Shed(Some(guard()))
        } else {
            Verdict::Shed(None)
        }
    }

    /// A handshake admitted as a resumption ended full: counted, and
    /// charged to the full-handshake budget.
    pub(crate) fn misclassified(&self) {
        self.misclassified.fetch_add(1, Ordering::Relaxed);
        if self.settings.mode == AdmissionMode::Session {
            self.take_token(Instant::now(), Draw::Charge);
        }
    }

    pub(crate) fn stats(&self) -> AdmissionStats {
        let (sig, overloaded, served) = *self.last.lock();
        AdmissionStats {
            mode: self.settings.mode,
            shed_with: self.settings.shed_with,
            full_admitted: self.admitted[0].load(Ordering::Relaxed),
            full_shed: self.shed[0].load(Ordering::Relaxed),
            resume_admitted: self.admitted[1].load(Ordering::Relaxed),
            resume_shed: self.shed[1].load(Ordering::Relaxed),
            quic: {
                let q = |d: usize, k: usize| self.quic[d][k].load(Ordering::Relaxed);
                Decisions {
                    full_admitted: q(0, 0),
                    full_shed: q(1, 0),
                    resume_admitted: q(0, 1),
                    resume_shed: q(1, 1),
                    full_returning_ahead: self.returning_ahead.load(Ordering::Relaxed),
                }
            },
            misclassified: self.misclassified.load(Ordering::Relaxed),
            unparsed: self.unparsed.load(Ordering::Relaxed),
            limit: match self.settings.mode {
                AdmissionMode::Static => Some(self.in_flight_cap as f64),
                _ => self.limit_now(),
            },
            in_flight: self.in_flight.load(Ordering::Relaxed),
            full_in_flight: self.full_in_flight.load(Ordering::Relaxed),
            queue_delay_seconds: sig.queue_delay.as_secs_f64(),
            cpu_busy: sig.cpu_busy,
            served_full_per_sec: served,
            overloaded,
            overload_ticks: self.overload_ticks.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Controller;

    fn session(threads: usize) -> Arc<Admission> {
        Arc::new(Admission::new(
            AdmissionSettings {
                mode: AdmissionMode::Session,
                ..Default::default()
            },
            Resumable::default(),
            threads,
        ))
    }

    #[test]
    fn session_mode_never_sheds_a_resumption_and_sheds_full_beyond_the_limit() {
        let adm = session(1);
        adm.limit.store(10f64.to_bits(), Ordering::Relaxed);
        let mut admitted_full = 0;
        for _ in 0..100 {
            match adm.decide(HelloKind::Resume) {
                Verdict::Admit(_) => {}
                Verdict::Shed(_) => panic!("a resumption was shed"),
            }
            if let Verdict::Admit(_) = adm.decide(HelloKind::Full) {
                admitted_full += 1;
            }
        }
        // The bucket starts empty and holds at most one token at 10/s.
        assert!(admitted_full <= 2, "{admitted_full}");
        let s = adm.stats();
        assert_eq!((s.resume_admitted, s.resume_shed), (100, 0));
        assert_eq!(s.full_admitted + s.full_shed, 100);
        assert_eq!(s.in_flight, 0, "guards dropped");
    }

    #[test]
    fn only_full_handshakes_count_toward_the_in_flight_signal() {
        let adm = session(1);
        let held: Vec<InFlight> = (0..5)
            .map(|i| {
                let kind = if i < 2 {
                    HelloKind::Full
                } else {
                    HelloKind::Resume
                };
                match adm.decide(kind) {
                    Verdict::Admit(g) => g,
                    Verdict::Shed(_) => panic!("unlimited before the first overload"),
                }
            })
            .collect();
        let s = adm.stats();
        assert_eq!((s.in_flight, s.full_in_flight), (5, 2));
        // Resumptions in flight never make the server overloaded.
        let ctl = Controller::new(Duration::from_millis(10), 0.8, 2);
        let sig = |in_flight| Signals {
            in_flight,
            ..Signals::default()
        };
        assert!(!ctl.overloaded(&sig(s.full_in_flight)));
        assert!(ctl.overloaded(&sig(s.in_flight)));
        drop(held);
        assert_eq!(adm.stats().full_in_flight, 0);
    }

    #[test]
    fn static_mode_sheds_any_kind_beyond_the_cap() {
        let adm = Arc::new(Admission::new(
            AdmissionSettings {
                mode: AdmissionMode::Static,
                max_handshakes_in_flight: Some(2),
                ..Default::default()
            },
            Resumable::default(),
            1,
        ));
        let a = adm.decide(HelloKind::Full);
        let b = adm.decide(HelloKind::Resume);
        assert!(matches!((&a, &b), (Verdict::Admit(_), Verdict::Admit(_))));
        assert!(matches!(adm.decide(HelloKind::Resume), Verdict::Shed(None)));
        drop(a);
        assert!(matches!(adm.decide(HelloKind::Full), Verdict::Admit(_)));
        let s = adm.stats();
        assert_eq!(s.resume_shed, 1);
        assert_eq!(s.limit, Some(2.0));
    }

    #[test]
    fn quic_decisions_share_the_budget_and_are_counted_apart() {
        let adm = Arc::new(Admission::new(
            AdmissionSettings {
                mode: AdmissionMode::Session,
                fixed_limit: Some(0.0),
                ..Default::default()
            },
            Resumable::default(),
            1,
        ));
        assert!(matches!(
            adm.decide_on(HelloKind::Resume, Door::Quic),
            Verdict::Admit(_)
        ));
        assert!(matches!(
            adm.decide_on(HelloKind::Full, Door::Quic),
            Verdict::Shed(None)
        ));
        // A limit of 0 lends nothing, not even to a returning client.
        assert!(matches!(
            adm.decide_on(HelloKind::Full, Door::QuicReturning),
            Verdict::Shed(None)
        ));
        assert!(matches!(adm.decide(HelloKind::Full), Verdict::Shed(None)));
        let s = adm.stats();
        assert_eq!((s.full_shed, s.resume_admitted), (3, 1));
        let q = Decisions {
            full_shed: 2,
            resume_admitted: 1,
            ..Decisions::default()
        };
        assert_eq!(s.quic, q);
        assert_eq!(s.limit, Some(0.0));
    }

    #[test]
    fn a_returning_quic_client_borrows_ahead_of_new_ones_down_to_the_floor() {
        // 100 full handshakes/s: the bucket starts with its burst, 10.
        let adm = Arc::new(Admission::new(
            AdmissionSettings {
                mode: AdmissionMode::Session,
                fixed_limit: Some(100.0),
                ..Default::default()
            },
            Resumable::default(),
            1,
        ));
        let mut held = Vec::new();
        while let Verdict::Admit(g) = adm.decide_on(HelloKind::Full, Door::Quic) {
            held.push(g);
            assert!(held.len() <= 11, "new clients beyond the burst");
        }
        // New clients are shed now, over either transport; a returning
        // client borrows up to a burst ahead, then is shed too.
        assert!(matches!(adm.decide(HelloKind::Full), Verdict::Shed(None)));
        let mut ahead = 0;
        while let Verdict::Admit(g) = adm.decide_on(HelloKind::Full, Door::QuicReturning) {
            held.push(g);
            ahead += 1;
            assert!(ahead <= 11, "returning clients beyond the floor");
        }
        assert!((10..=11).contains(&ahead), "{ahead}");
        // The debt is repaid before a new client is admitted again.
        assert!(matches!(
            adm.decide_on(HelloKind::Full, Door::Quic),
            Verdict::Shed(None)
        ));
        let s = adm.stats();
        assert_eq!(s.quic.full_returning_ahead, ahead);
        assert_eq!(s.quic.full_admitted, held.len() as u64);
        assert_eq!(s.quic.full_shed, 3);
        assert_eq!(s.full_shed, 4);
    }

    #[test]
    fn a_quic_full_handshake_done_counts_as_completed_and_leaves_the_flight() {
        let adm = session(1);
        let (Verdict::Admit(full), Verdict::Admit(resume)) = (
            adm.decide_on(HelloKind::Full, Door::Quic),
            adm.decide_on(HelloKind::Resume, Door::Quic),
        ) else {
            panic!("unlimited before the first overload")
        };
        assert_eq!(adm.stats().full_in_flight, 1);
        full.done();
        resume.done();
        // Only the full one feeds the controller's completions over QUIC.
        assert_eq!(adm.quic_full_done.load(Ordering::Relaxed), 1);
        assert_eq!((adm.stats().in_flight, adm.stats().full_in_flight), (0, 0));
    }

    #[test]
    fn a_misclassified_resumption_is_charged_to_the_budget() {
        let adm = session(1);
        adm.limit.store(100f64.to_bits(), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(120));
        // The bucket holds its burst (10 tokens); charge 10 by hand.
        for _ in 0..10 {
            adm.misclassified();
        }
        assert!(matches!(adm.decide(HelloKind::Full), Verdict::Shed(None)));
        assert_eq!(adm.stats().misclassified, 10);
    }
}
