//! Admission control for new TLS handshakes (`serve --admission`).
//!
//! Seed 002 shows a TLS server collapsing once more clients ask for full
//! handshakes than its CPU can serve: queues grow, clients time out and
//! reconnect, and every reconnection is one more full handshake. A
//! resumed handshake costs a small fraction of a full one, so the cheapest
//! way to keep the server near its knee is to refuse *new full* handshakes
//! early and keep serving the clients that resume.
//!
//! The decision is made on the ClientHello alone, read with `tlslab-wire`
//! before rustls sees it, so a shed costs no public-key work:
//!
//! - **resume**: the ClientHello carries a session this node can resume,
//!   checked cheaply: a TLS 1.3 PSK identity or TLS 1.2 session ID present
//!   in the local session cache (with a Redis cache, after the prefetch put
//!   it there); a TLS 1.2 ticket or a stateless TLS 1.3 ticket whose key
//!   name is one of the ring's (`--ticket-keys`), or, with the process's
//!   own ticketer, whose keys rustls does not expose, any ticket of at
//!   least 44 bytes (name + nonce + tag). A TLS 1.3 ClientHello's legacy
//!   session ID is never a session when the server speaks TLS 1.3.
//! - **full**: anything else, including offers this node cannot resume.
//!
//! A ClientHello taken for a resumption that nonetheless ends as a full
//! handshake (a forged or stale ticket) is counted as `misclassified` and
//! charged to the full-handshake budget afterwards, so such offers cannot
//! bypass the limit for long.
//!
//! Modes:
//! - `static` (`--max-handshakes-in-flight N` alone): any handshake, full
//!   or resumed, is shed while N are in flight (like a `maxconn` that knows
//!   nothing of sessions); the comparison arm.
//! - `session`: resumptions are always admitted; full handshakes take a
//!   token from a bucket refilled at the controller's limit (full
//!   handshakes per second; unlimited until the first overload).
//!
//! The controller ([`Controller`]) is AIMD, ticking every 100 ms on three
//! signals: the mean queueing delay of the new connections read in the
//! tick (how long their ClientHello waited in the kernel, accept queue
//! included, before a worker read it: the server's queue, timed from the
//! kernel's receive timestamp so that a slow client does not count; see
//! `queue.rs`), the CPU saturation of the workers (the CPU time they used
//! plus the time they waited runnable for a CPU, from schedstat, over a
//! budget of `min(threads, CPUs)`: on a shared machine a starved worker is
//! saturated though it used less CPU), and the full handshakes in flight
//! (admitted resumptions, never shed, do not count). The server is
//! overloaded when the queue delay exceeds the target while the CPU is
//! busy (at least `cpu_high`), or when more full handshakes are in flight
//! than the cap. Overloaded: the limit is lowered to the full
//! handshakes completed per second in the tick (at saturation, what the
//! server can do beside its other work) times `1 − (delay − target) / 1 s`
//! clamped to [0.5, 0.95], so that the queue beyond the target drains
//! within a second (Little's law); at most once per 500 ms (the queue
//! needs time to drain), and never below a quarter of the peak completion rate (decaying 2 % a second),
//! so that shed clients retrying at once cannot spiral the limit down to
//! nothing. Not overloaded, when the limit shed something in the tick, it
//! grows by a constant step (5 % of the limit set at the last decrease,
//! per tick, at least 1/s): additive increase, multiplicative decrease.
//! Every figure it uses is exported on `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use tlslab_crypto::store::ServerSessionCache;
use tlslab_crypto::ticket_keys::TicketKeyRing;
use tlslab_wire::ClientHello;

use crate::stats::Stats;

/// Which admission control runs (`--admission`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdmissionMode {
    /// Every handshake is admitted (the server's behaviour before
    /// admission control; no ClientHello is read ahead of rustls).
    #[default]
    Off,
    /// At most [`AdmissionSettings::max_handshakes_in_flight`] handshakes
    /// of any kind at once; the rest are shed.
    Static,
    /// Session-aware: resumptions always admitted, new full handshakes
    /// limited by the controller.
    Session,
}

impl AdmissionMode {
    /// The name used by `--admission` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            AdmissionMode::Off => "off",
            AdmissionMode::Static => "static",
            AdmissionMode::Session => "session",
        }
    }
}

impl std::str::FromStr for AdmissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(AdmissionMode::Off),
            "static" => Ok(AdmissionMode::Static),
            "session" => Ok(AdmissionMode::Session),
            other => Err(format!(
                "--admission '{other}' is not a mode; use off, static or session"
            )),
        }
    }
}

/// What a shed connection gets (`--shed-with`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShedWith {
    /// The connection is closed after the ClientHello is read (the
    /// default; the cheapest).
    #[default]
    Close,
    /// A plaintext fatal TLS alert `internal_error`, then close: as cheap,
    /// and the client can tell a shed from a network failure.
    Alert,
    /// The handshake is completed and every request answered `503` with
    /// `retry-after: 1` and `connection: close`. This pays for the full
    /// handshake (it is not cheap); it exists to compare with proxies that
    /// answer 503.
    #[serde(rename = "503")]
    Http503,
}

impl ShedWith {
    /// The name used by `--shed-with` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            ShedWith::Close => "close",
            ShedWith::Alert => "alert",
            ShedWith::Http503 => "503",
        }
    }
}

impl std::str::FromStr for ShedWith {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "close" => Ok(ShedWith::Close),
            "alert" => Ok(ShedWith::Alert),
            "503" => Ok(ShedWith::Http503),
            other => Err(format!(
                "--shed-with '{other}' is not a way to shed; use close, alert or 503"
            )),
        }
    }
}

/// Admission-control settings ([`crate::ServeConfig::admission`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionSettings {
    /// The mode.
    pub mode: AdmissionMode,
    /// How shed connections are refused.
    pub shed_with: ShedWith,
    /// `static`: the most handshakes in flight (required). `session`: the
    /// full handshakes in flight that count as overload (default 128 per
    /// worker thread).
    pub max_handshakes_in_flight: Option<usize>,
    /// `session`: the queueing delay of new connections' first bytes
    /// above which a busy server is overloaded.
    pub queue_delay_target: Duration,
    /// `session`: the busy share of the CPU budget (0 to 1) from which the
    /// queue delay counts as overload.
    pub cpu_high: f64,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            mode: AdmissionMode::Off,
            shed_with: ShedWith::Close,
            max_handshakes_in_flight: None,
            queue_delay_target: Duration::from_millis(10),
            cpu_high: 0.8,
        }
    }
}

impl AdmissionSettings {
    /// Checks the settings; the message names the option to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.mode == AdmissionMode::Static && self.max_handshakes_in_flight.is_none() {
            return Err(
                "--admission static needs --max-handshakes-in-flight N (the static limit)".into(),
            );
        }
        if self.max_handshakes_in_flight == Some(0) {
            return Err("--max-handshakes-in-flight 0 admits nothing; use at least 1".into());
        }
        if self.mode == AdmissionMode::Off && self.shed_with != ShedWith::Close {
            return Err(
                "--shed-with needs admission control: add --admission session or static".into(),
            );
        }
        if self.queue_delay_target.is_zero() {
            return Err("--admission-queue-target must be positive (e.g. 10ms)".into());
        }
        if !(self.cpu_high > 0.0 && self.cpu_high <= 1.0) {
            return Err("the CPU threshold must be in (0, 1]".into());
        }
        Ok(())
    }
}

/// What a ClientHello asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloKind {
    /// A new full handshake.
    Full,
    /// A resumption this node can serve.
    Resume,
}

impl HelloKind {
    fn idx(self) -> usize {
        match self {
            HelloKind::Full => 0,
            HelloKind::Resume => 1,
        }
    }
}

/// What this node can resume from: the state [`classify`] checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Resumable {
    /// The local session cache (with Redis, its memory layer).
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    /// `--tickets on`.
    pub(crate) tickets: bool,
    /// Shared ticket keys (their names are checked).
    pub(crate) ring: Option<Arc<TicketKeyRing>>,
    /// The server speaks TLS 1.3.
    pub(crate) tls13: bool,
}

/// The shortest ticket rustls's own ticketer produces: a 16-byte key
/// name, a 12-byte nonce and a 16-byte tag.
const MIN_TICKET: usize = 44;

impl Resumable {
    fn ticket(&self, t: &[u8]) -> bool {
        match &self.ring {
            Some(ring) => ring.knows_name(t),
            None => t.len() >= MIN_TICKET,
        }
    }

    fn cached(&self, key: &[u8]) -> bool {
        self.cache.as_ref().is_some_and(|c| c.contains(key))
    }
}

/// Whether `hello` carries a session `r` can resume.
pub(crate) fn classify(hello: &ClientHello<'_>, r: &Resumable) -> HelloKind {
    let resumable = if r.tls13 && hello.offers_tls13() {
        // The server picks TLS 1.3, which resumes by PSK only; the legacy
        // session ID is random and a TLS 1.2 ticket is ignored.
        hello.pre_shared_key.is_some_and(|psk| {
            psk.identities.iter().any(|p| {
                if r.tickets {
                    r.ticket(p.identity)
                } else {
                    r.cached(p.identity)
                }
            })
        })
    } else {
        tls12_offer(hello, r)
    };
    if resumable {
        HelloKind::Resume
    } else {
        HelloKind::Full
    }
}

/// A TLS 1.2 resumption offer: a ticket (with tickets on) or a cached
/// session ID.
fn tls12_offer(hello: &ClientHello<'_>, r: &Resumable) -> bool {
    match hello.session_ticket.filter(|t| !t.is_empty()) {
        Some(t) if r.tickets => r.ticket(t),
        _ => !hello.session_id.is_empty() && r.cached(hello.session_id),
    }
}

/// The AIMD controller of the full-handshake rate.
#[derive(Clone, Debug)]
pub struct Controller {
    /// Full handshakes per second admitted; `None`: unlimited (no
    /// overload seen yet).
    limit: Option<f64>,
    /// The additive step per tick.
    step: f64,
    /// Multiplicative decrease.
    beta: f64,
    /// The limit never goes below this.
    min: f64,
    /// The peak full-handshake completion rate, decaying 2 % a second: the
    /// capacity estimate that floors the limit.
    peak: f64,
    /// Ticks left before another decrease may happen.
    cooldown: u32,
    target: Duration,
    cpu_high: f64,
    in_flight_cap: u64,
}

/// What the controller sees in one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signals {
    /// Mean queueing delay of the new connections read in the tick (zero
    /// if none): how long their first bytes waited in the kernel before
    /// the server read them, from the kernel's receive timestamp (without
    /// one, from `accept()`). A slow client does not count.
    pub queue_delay: Duration,
    /// CPU saturation in the tick: (CPU time + run-queue wait) over the
    /// CPU budget (0 to 1).
    pub cpu_busy: f64,
    /// Full handshakes in flight at the end of the tick (admitted
    /// resumptions, cheap and never shed, do not count).
    pub in_flight: u64,
    /// Full handshakes admitted per second in the tick.
    pub full_admitted_rate: f64,
    /// Full handshakes completed per second in the tick: at saturation,
    /// what the server can do beside its other work.
    pub full_completed_rate: f64,
    /// Full handshakes shed in the tick.
    pub full_shed: u64,
}

impl Controller {
    /// A controller that calls the server overloaded beyond `target`
    /// queue delay at `cpu_high` CPU, or beyond `in_flight_cap` handshakes
    /// in flight.
    pub fn new(target: Duration, cpu_high: f64, in_flight_cap: u64) -> Self {
        Controller {
            limit: None,
            step: 1.0,
            beta: 0.5,
            min: 1.0,
            peak: 0.0,
            cooldown: 0,
            target,
            cpu_high,
            in_flight_cap,
        }
    }

    /// True if `s` shows overload.
    pub fn overloaded(&self, s: &Signals) -> bool {
        (s.queue_delay > self.target && s.cpu_busy >= self.cpu_high)
            || s.in_flight > self.in_flight_cap
    }

    /// The limit now (full handshakes per second; `None`: unlimited).
    pub fn limit(&self) -> Option<f64> {
        self.limit
    }

    /// One tick: updates and returns the limit.
    pub fn update(&mut self, s: &Signals) -> Option<f64> {
        self.peak = (self.peak * PEAK_DECAY).max(s.full_completed_rate);
        if !self.overloaded(s) {
            self.cooldown = 0;
            if s.full_shed > 0
                && let Some(l) = self.limit
            {
                self.limit = Some(l + self.step);
            }
            return self.limit;
        }
        if self.cooldown > 0 {
            // The last decrease has not had time to drain the queue.
            self.cooldown -= 1;
            return self.limit;
        }
        // The completion rate at saturation estimates capacity; admit less
        // than that so the queue beyond the target drains within DRAIN
        // (by Little's law the excess is (delay − target) × rate, so the
        // factor is 1 − (delay − target) / DRAIN, between β and 0.95);
        // never below a quarter of the peak completion rate, so that shed
        // clients retrying cannot drive the limit to nothing.
        let excess = s.queue_delay.saturating_sub(self.target).as_secs_f64();
        let gradient = (1.0 - excess / DRAIN.as_secs_f64()).clamp(self.beta, 0.95);
        let mut l = (s.full_completed_rate * gradient)
            .max(FLOOR * self.peak)
            .max(self.min);
        if let Some(old) = self.limit {
            l = l.min(old);
        }
        self.limit = Some(l);
        self.step = (l * 0.05).max(1.0);
        self.cooldown = COOLDOWN_TICKS;
        self.limit
    }
}

/// Per-tick decay of the peak completion rate (2 % a second at 10 ticks).
const PEAK_DECAY: f64 = 0.998;
/// The limit's floor as a share of the peak completion rate.
const FLOOR: f64 = 0.25;
/// The time a decrease gives the queue beyond the target to drain.
const DRAIN: Duration = Duration::from_secs(1);
/// Ticks between two decreases (500 ms).
const COOLDOWN_TICKS: u32 = 4;

/// A token bucket refilled at the controller's limit. Tokens may go
/// negative (a misclassified resumption is charged after the fact).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
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
    in_flight_cap: u64,
    bucket: Mutex<Bucket>,
    /// `f64` bits of the limit; `u64::MAX`: unlimited.
    limit: AtomicU64,
    in_flight: AtomicU64,
    /// Of those, full handshakes (the controller's in-flight signal).
    full_in_flight: AtomicU64,
    /// `[full, resume]`.
    admitted: [AtomicU64; 2],
    shed: [AtomicU64; 2],
    misclassified: AtomicU64,
    unparsed: AtomicU64,
    delay_ns: AtomicU64,
    delay_n: AtomicU64,
    /// The last tick's signals and verdict.
    last: Mutex<(Signals, bool)>,
    overload_ticks: AtomicU64,
}

const UNLIMITED: u64 = u64::MAX;

/// One admitted handshake in flight; the count drops with it.
#[derive(Debug)]
pub(crate) struct InFlight {
    adm: Arc<Admission>,
    pub(crate) kind: HelloKind,
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
        Admission {
            settings,
            resumable,
            in_flight_cap,
            bucket: Mutex::new(Bucket {
                tokens: 0.0,
                at: Instant::now(),
            }),
            limit: AtomicU64::new(UNLIMITED),
            in_flight: AtomicU64::new(0),
            full_in_flight: AtomicU64::new(0),
            admitted: Default::default(),
            shed: Default::default(),
            misclassified: AtomicU64::new(0),
            unparsed: AtomicU64::new(0),
            delay_ns: AtomicU64::new(0),
            delay_n: AtomicU64::new(0),
            last: Mutex::new((Signals::default(), false)),
            overload_ticks: AtomicU64::new(0),
        }
    }

    /// Records how long one new connection's first bytes waited.
    pub(crate) fn queue_delay(&self, d: Duration) {
        self.delay_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        self.delay_n.fetch_add(1, Ordering::Relaxed);
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

    /// Takes a token for a full handshake (or charges one, `force`).
    fn take_token(&self, now: Instant, force: bool) -> bool {
        let Some(rate) = self.limit_now() else {
            return true;
        };
        let burst = (rate * 0.1).max(1.0);
        let mut b = self.bucket.lock();
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.at = now;
        b.tokens = (b.tokens + dt * rate).min(burst);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else if force {
            b.tokens = (b.tokens - 1.0).max(-burst);
            true
        } else {
            false
        }
    }

    /// Decides on a ClientHello of `kind`.
    pub(crate) fn decide(self: &Arc<Self>, kind: HelloKind) -> Verdict {
        let admit = match self.settings.mode {
            AdmissionMode::Off => true,
            AdmissionMode::Static => self.in_flight.load(Ordering::Relaxed) < self.in_flight_cap,
            AdmissionMode::Session => match kind {
                HelloKind::Resume => true,
                HelloKind::Full => self.take_token(Instant::now(), false),
            },
        };
        let counters = if admit { &self.admitted } else { &self.shed };
        counters[kind.idx()].fetch_add(1, Ordering::Relaxed);
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
            self.take_token(Instant::now(), true);
        }
    }

    pub(crate) fn stats(&self) -> AdmissionStats {
        let (sig, overloaded) = *self.last.lock();
        AdmissionStats {
            mode: self.settings.mode,
            shed_with: self.settings.shed_with,
            full_admitted: self.admitted[0].load(Ordering::Relaxed),
            full_shed: self.shed[0].load(Ordering::Relaxed),
            resume_admitted: self.admitted[1].load(Ordering::Relaxed),
            resume_shed: self.shed[1].load(Ordering::Relaxed),
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
            overloaded,
            overload_ticks: self.overload_ticks.load(Ordering::Relaxed),
        }
    }
}

/// How often the controller looks at the signals.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Runs the controller until `shutdown`: every [`TICK`], reads the
/// signals, updates the limit (in `session` mode) and publishes both.
pub(crate) async fn control(
    adm: Arc<Admission>,
    stats: Arc<Stats>,
    cpu_budget: usize,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let s = &adm.settings;
    let mut ctl = Controller::new(s.queue_delay_target, s.cpu_high, adm.in_flight_cap);
    let mut at = Instant::now();
    let threads = &stats.threads;
    let mut cpu = threads.cpu_time().total();
    let mut wait = threads.run_queue_wait();
    let mut completed = stats.full_handshakes();
    let mut full_admitted = 0;
    let mut full_shed = 0;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let now = Instant::now();
        let dt = now.duration_since(at).as_secs_f64().max(1e-3);
        let cpu_now = threads.cpu_time().total();
        // CPU used plus time spent runnable waiting for a CPU: what the
        // workers wanted, which on a shared machine (other processes on
        // the same cores) shows saturation that CPU time alone does not.
        let wait_now = threads.run_queue_wait();
        let wanted = cpu_now.saturating_sub(cpu) + wait_now.saturating_sub(wait);
        let busy = (wanted.as_secs_f64() / dt / cpu_budget.max(1) as f64).clamp(0.0, 1.0);
        let n = adm.delay_n.swap(0, Ordering::Relaxed);
        let ns = adm.delay_ns.swap(0, Ordering::Relaxed);
        let fa = adm.admitted[0].load(Ordering::Relaxed);
        let fs = adm.shed[0].load(Ordering::Relaxed);
        let fc = stats.full_handshakes();
        let sig = Signals {
            queue_delay: Duration::from_nanos(ns.checked_div(n).unwrap_or(0)),
            cpu_busy: busy,
            in_flight: adm.full_in_flight.load(Ordering::Relaxed),
            full_admitted_rate: (fa - full_admitted) as f64 / dt,
            full_completed_rate: (fc - completed) as f64 / dt,
            full_shed: fs - full_shed,
        };
        (at, cpu, wait, full_admitted, full_shed, completed) = (now, cpu_now, wait_now, fa, fs, fc);
        let overloaded = ctl.overloaded(&sig);
        if overloaded {
            adm.overload_ticks.fetch_add(1, Ordering::Relaxed);
        }
        if adm.settings.mode == AdmissionMode::Session
            && let Some(l) = ctl.update(&sig)
        {
            adm.limit.store(l.to_bits(), Ordering::Relaxed);
        }
        // Every tick's inputs and decision (RUST_LOG=tlslab_server::admission=debug).
        tracing::debug!(
            queue_delay_us = sig.queue_delay.as_micros() as u64,
            cpu_busy = sig.cpu_busy,
            in_flight = sig.in_flight,
            full_admitted_per_s = sig.full_admitted_rate,
            full_completed_per_s = sig.full_completed_rate,
            full_shed = sig.full_shed,
            overloaded,
            limit = ctl.limit(),
            "admission tick"
        );
        *adm.last.lock() = (sig, overloaded);
    }
}

/// The plaintext fatal alert `internal_error` sent by `--shed-with alert`.
pub(crate) const ALERT_INTERNAL_ERROR: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use tlslab_wire::first_handshake_message;

    fn hello_bytes(tls13: bool) -> Vec<u8> {
        let versions: &[&rustls::SupportedProtocolVersion] = if tls13 {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS12]
        };
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let mut c =
            rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("x").unwrap())
                .unwrap();
        let mut out = Vec::new();
        c.write_tls(&mut out).unwrap();
        out
    }

    /// A handshake message: ClientHello with `session_id`, and the
    /// extensions given as (type, body).
    fn crafted(session_id: &[u8], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(session_id.len() as u8);
        body.extend_from_slice(session_id);
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[0x01, 0x00]); // null compression
        let mut e = Vec::new();
        for (t, b) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(b.len() as u16).to_be_bytes());
            e.extend_from_slice(b);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1u8];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn supported_versions_13() -> (u16, Vec<u8>) {
        (43, vec![4, 0x03, 0x04, 0x03, 0x03])
    }

    fn psk(identity: &[u8]) -> (u16, Vec<u8>) {
        let mut ids = Vec::new();
        ids.extend_from_slice(&(identity.len() as u16).to_be_bytes());
        ids.extend_from_slice(identity);
        ids.extend_from_slice(&0u32.to_be_bytes());
        let mut b = (ids.len() as u16).to_be_bytes().to_vec();
        b.extend_from_slice(&ids);
        let binder = [9u8; 32];
        b.extend_from_slice(&33u16.to_be_bytes());
        b.push(32);
        b.extend_from_slice(&binder);
        (41, b)
    }

    fn kind(msg: &[u8], r: &Resumable) -> HelloKind {
        classify(&ClientHello::parse(msg).unwrap(), r)
    }

    fn cache_with(key: &[u8]) -> Arc<ServerSessionCache> {
        use rustls::server::StoresServerSessions;
        let c = ServerSessionCache::new(16, Duration::from_secs(60));
        assert!(c.put(key.to_vec(), b"session".to_vec()));
        c
    }

    #[test]
    fn a_fresh_client_hello_is_full() {
        let r = Resumable {
            cache: Some(ServerSessionCache::new(16, Duration::from_secs(60))),
            tickets: true,
            ring: None,
            tls13: true,
        };
        for tls13 in [true, false] {
            let raw = hello_bytes(tls13);
            let msg = first_handshake_message(&raw, 65_535).unwrap();
            assert_eq!(kind(&msg, &r), HelloKind::Full, "tls13 {tls13}");
        }
    }

    #[test]
    fn a_cached_tls12_session_id_resumes_an_unknown_one_does_not() {
        let id = [5u8; 32];
        let r = Resumable {
            cache: Some(cache_with(&id)),
            tickets: false,
            ring: None,
            tls13: true,
        };
        assert_eq!(kind(&crafted(&id, &[]), &r), HelloKind::Resume);
        assert_eq!(kind(&crafted(&[6u8; 32], &[]), &r), HelloKind::Full);
        // The same ID as a TLS 1.3 legacy session ID is not a session.
        let m = crafted(&id, &[supported_versions_13()]);
        assert_eq!(kind(&m, &r), HelloKind::Full);
        // Without a cache nothing resumes by ID.
        let none = Resumable {
            tls13: true,
            ..Default::default()
        };
        assert_eq!(kind(&crafted(&id, &[]), &none), HelloKind::Full);
    }

    #[test]
    fn tls13_psk_resumes_when_cached_or_when_tickets_are_sealed_here() {
        let ticket = [8u8; 64];
        let stateful = Resumable {
            cache: Some(cache_with(&ticket)),
            tickets: false,
            ring: None,
            tls13: true,
        };
        let m = crafted(&[1u8; 32], &[supported_versions_13(), psk(&ticket)]);
        assert_eq!(kind(&m, &stateful), HelloKind::Resume);
        let other = crafted(&[1u8; 32], &[supported_versions_13(), psk(&[3u8; 64])]);
        assert_eq!(kind(&other, &stateful), HelloKind::Full);
        // Stateless tickets with the process's ticketer: length only.
        let stateless = Resumable {
            tickets: true,
            tls13: true,
            ..Default::default()
        };
        assert_eq!(kind(&other, &stateless), HelloKind::Resume);
        let short = crafted(&[1u8; 32], &[supported_versions_13(), psk(&[3u8; 20])]);
        assert_eq!(kind(&short, &stateless), HelloKind::Full);
    }

    #[test]
    fn shared_ticket_keys_are_checked_by_key_name() {
        use tlslab_crypto::ticket_keys::KeyMaterial;
        let key = KeyMaterial::generate().unwrap();
        let ring = TicketKeyRing::new(&[key], 0, 1, Duration::from_secs(60)).unwrap();
        let sealed = rustls::server::ProducesTickets::encrypt(&*ring, b"state").unwrap();
        let r = Resumable {
            tickets: true,
            ring: Some(ring),
            tls13: true,
            ..Default::default()
        };
        // TLS 1.2 SessionTicket extension (35).
        let ours = crafted(&[], &[(35, sealed.clone())]);
        assert_eq!(kind(&ours, &r), HelloKind::Resume);
        let mut foreign = sealed.clone();
        foreign[0] ^= 0xff;
        assert_eq!(kind(&crafted(&[], &[(35, foreign)]), &r), HelloKind::Full);
        let m = crafted(&[1u8; 32], &[supported_versions_13(), psk(&sealed)]);
        assert_eq!(kind(&m, &r), HelloKind::Resume);
    }

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

    #[test]
    fn settings_are_checked() {
        let mut s = AdmissionSettings {
            mode: AdmissionMode::Static,
            ..Default::default()
        };
        assert!(
            s.validate()
                .unwrap_err()
                .contains("--max-handshakes-in-flight")
        );
        s.max_handshakes_in_flight = Some(0);
        assert!(s.validate().is_err());
        s.max_handshakes_in_flight = Some(5);
        assert!(s.validate().is_ok());
        let off = AdmissionSettings {
            shed_with: ShedWith::Alert,
            ..Default::default()
        };
        assert!(off.validate().unwrap_err().contains("--admission"));
        assert_eq!("503".parse::<ShedWith>().unwrap(), ShedWith::Http503);
        assert!("drop".parse::<ShedWith>().is_err());
        assert!("on".parse::<AdmissionMode>().is_err());
    }

    /// A simulated server: it completes at most `capacity` full handshakes
    /// per second on one CPU; admitted work beyond that queues, and a new
    /// connection waits for the queue (its queueing delay).
    struct Sim {
        capacity: f64,
        queue: f64,
    }

    impl Sim {
        /// One 100 ms tick with `offered` full handshakes per second and
        /// the controller's limit; returns the signals and the completed
        /// handshakes per second.
        fn tick(&mut self, offered: f64, limit: Option<f64>) -> (Signals, f64) {
            let dt = 0.1;
            let admitted = limit.map_or(offered, |l| offered.min(l));
            let work = self.queue + admitted * dt;
            let done = work.min(self.capacity * dt);
            self.queue = work - done;
            let s = Signals {
                queue_delay: Duration::from_secs_f64(self.queue / self.capacity),
                cpu_busy: done / (self.capacity * dt),
                in_flight: self.queue as u64,
                full_admitted_rate: admitted,
                full_completed_rate: done / dt,
                full_shed: ((offered - admitted) * dt) as u64,
            };
            (s, done / dt)
        }
    }

    #[test]
    fn the_controller_converges_near_capacity_under_3x_load() {
        let capacity = 1000.0;
        let mut sim = Sim {
            capacity,
            queue: 0.0,
        };
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 10_000);
        let mut limit = None;
        let mut done = Vec::new();
        let mut delays = Vec::new();
        for _ in 0..600 {
            let (s, d) = sim.tick(3.0 * capacity, limit);
            limit = ctl.update(&s);
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!("{d:.0} {limit:?} {:?}", s.queue_delay);
            }
            done.push(d);
            delays.push(s.queue_delay);
        }
        // After the first 10 s: throughput near capacity, queue bounded.
        let tail = &done[100..];
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!(mean >= 0.85 * capacity, "mean {mean}");
        let worst = delays[100..].iter().max().unwrap();
        assert!(*worst < Duration::from_millis(100), "{worst:?}");
        let l = ctl.limit().unwrap();
        assert!(l > 0.7 * capacity && l < 1.3 * capacity, "limit {l}");
        // Without control the queue grows without bound.
        let mut open = Sim {
            capacity,
            queue: 0.0,
        };
        let mut last = Signals::default();
        for _ in 0..100 {
            last = open.tick(3.0 * capacity, None).0;
        }
        assert!(last.queue_delay > Duration::from_secs(10));
    }

    #[test]
    fn the_controller_recovers_when_load_drops_and_follows_it_up() {
        let capacity = 500.0;
        let mut sim = Sim {
            capacity,
            queue: 0.0,
        };
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 10_000);
        let mut limit = None;
        for _ in 0..200 {
            limit = ctl.update(&sim.tick(4.0 * capacity, limit).0);
        }
        // Half capacity offered: nothing shed, queue drains, limit kept.
        let mut last = (Signals::default(), 0.0);
        for _ in 0..50 {
            last = sim.tick(0.5 * capacity, limit);
            limit = ctl.update(&last.0);
        }
        assert_eq!(last.0.full_shed, 0);
        assert!((last.1 - 0.5 * capacity).abs() < 1.0, "{}", last.1);
        assert!(!ctl.overloaded(&last.0));
        // Idle CPU: queue delay alone is not overload.
        let quiet = Signals {
            queue_delay: Duration::from_secs(1),
            cpu_busy: 0.1,
            ..Default::default()
        };
        assert!(!ctl.overloaded(&quiet));
    }
}
