//! The overload workload: open-loop arrivals of users, each a session of
//! K requests, as seed 002 drove its server with httperf.
//!
//! A user arrives (Poisson, `rate` users per second), then makes its K
//! requests one after another, each on a new HTTPS connection, pausing for
//! the think time between them. It keeps one TLS session store for the
//! whole session: each request offers the stored session with probability
//! `reuse` (its first one has nothing to offer), drawn once per request, so
//! a retry repeats its request's choice (a retry that offered the session
//! where the first attempt did not would turn a shed full handshake into a
//! resumption, and make shedding look better than it is). Every request
//! must complete (connect, handshake and response) within `timeout`; when
//! it does not, the user either retries it (`retry_on_failure`: same user,
//! same TLS session) or gives up and a new user with a new TLS session
//! takes its place, starting the K requests again, as httperf's
//! `--retry-on-failure` does and does not. Retries and new users go on
//! until the run's end.
//!
//! Before the next attempt after a failure (a retry, or the new user that
//! replaces a failed one) the user backs off, as client libraries do:
//! exponential backoff with full jitter, a uniform random wait in
//! `[0, min(b·2ⁿ⁻¹, 32·b)]` after the n-th failure in a row, `b` being
//! [`Users::retry_backoff`]. With `b` zero it tries again at once, as
//! httperf does. A failure after a timeout has already waited; a shed or
//! refused connection fails in well under a millisecond, and a client that
//! tries again at once turns every shed into a storm of reconnections
//! (issue 13 measured 7,800 a second from one client thread).
//!
//! Two rates are reported apart: **throughput**, every response completed
//! per second; and **goodput**, the requests of sessions that completed
//! all K requests per second, with the completed sessions per second. A
//! collapsing server keeps some throughput while its goodput falls to
//! nothing. Every figure is client-observed over the measurement window
//! (arrivals during `duration`; sessions still running at its end are
//! counted as unfinished, and a session finishing after it counts if it
//! arrived within it, up to the drain bound).
//!
//! The users' connections are the load engine's: each request is one
//! [`Client::one_request`], a connection through the engine's protocol
//! seam ([`Client::connection`]) with the run's `requests_per_conn` of 1,
//! over HTTP/1.1 or HTTP/2 over TLS ([`LoadConfig::http2`]) or HTTP/3 over
//! QUIC ([`LoadConfig::http3`]): the same TLS configuration, connect,
//! handshake, certificate-verification count, response reading and error
//! classes as `load`. A session is one engine [`Identity`] (its own
//! session store); the seam hands each request's record back instead of
//! counting it, and this module counts it as a user session does. Only
//! the offer (drawn here, not by the reuse planner) and the timeout (one
//! for the whole request, around the engine's per-step ones) are the
//! workload's own. Over QUIC, the sessions share a few UDP sockets
//! ([`SHARED_SOCKETS`]) rather than one each.
//!
//! Why this shape: a user session is counted by session (goodput, the
//! per-second timeline), not by request records, and draws its offer and
//! bounds its request itself, so it does not run the engine's loops,
//! reuse planner or sinks; but its connections are the engine's, behind
//! the same seam as every loop's, rather than a client of its own beside
//! it. The seam's one addition is the entry that hands the record back.
//! What the workload inherits with it: failures carry the engine's kinds
//! (`closed`, `refused`, `http_503`, …), and a TLS failure (a `tls_…`
//! kind, not a shed connection's `closed` or `reset`) empties the
//! session's store before its retry, as it does for `load`'s clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tlslab_crypto::meter::Meter;
use tlslab_runtime::{CpuPin, RuntimeSpec};
use tlslab_stats::{Collector, HandshakeKind, RequestRecord};
use tlslab_workload::think::ThinkTime;

use super::client::Client;
use super::identity::Identity;
use super::quic::QuicRun;
use super::quic::SHARED_SOCKETS;
use super::shared::{Shared, group_origins};
use crate::config::{LoadConfig, Workload, retry_backoff_bound};
use crate::error::Error;

/// The user-session knobs beside a [`LoadConfig`] (which gives the target,
/// TLS settings and trust, `duration`, `timeout`, `think_time`,
/// `retry_on_failure`, `reuse`, `seed`, `threads` and `pin_cpus`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Users {
    /// New users per second (Poisson arrivals).
    pub rate: f64,
    /// Requests per user session (K, at least 1).
    pub requests: u32,
    /// At most this many users at once; an arrival beyond it is dropped
    /// and counted (bounds the client's memory at overload).
    pub max_users: usize,
    /// After the window, users still running get at most this long to
    /// finish before they are counted unfinished.
    pub drain: Duration,
    /// From this time into the window on, users arrive at this rate
    /// instead (a load step, for recovery measurements).
    pub then: Option<(Duration, f64)>,
    /// The base of the exponential backoff before an attempt that follows
    /// a failure (see the module documentation); zero: at once.
    pub retry_backoff: Duration,
}

pub use tlslab_schema::overload::{Second, UsersReport};

#[derive(Default)]
struct Counters {
    arrived: AtomicU64,
    dropped: AtomicU64,
    started: AtomicU64,
    completed: AtomicU64,
    abandoned: AtomicU64,
    unfinished: AtomicU64,
    responses: AtomicU64,
    /// Responses completed before the window's end.
    responses_in_window: AtomicU64,
    /// Sessions completed before the window's end.
    completed_in_window: AtomicU64,
    /// Their requests (K each).
    goodput_requests: AtomicU64,
    full: AtomicU64,
    resumed: AtomicU64,
    running: AtomicU64,
    failures: Mutex<std::collections::BTreeMap<String, u64>>,
    latency: Mutex<Option<hdrhistogram::Histogram<u64>>>,
    timeline: Mutex<Vec<Second>>,
}

struct Ctx {
    start: Instant,
    /// The engine's state for the sessions' connections.
    sh: Arc<Shared>,
    timeout: Duration,
    think: ThinkTime,
    retry: bool,
    backoff: Duration,
    reuse: f64,
    k: u32,
    end: Instant,
    c: Counters,
}

/// Runs the user-session workload of `cfg` and `users` and returns what it
/// measured. Network failures are counted, never errors.
pub fn run_users(cfg: &LoadConfig, users: Users) -> Result<UsersReport, Error> {
    if !(users.rate.is_finite() && users.rate > 0.0) {
        return Err(Error::Invalid(
            "--rate must be a positive number of users per second".into(),
        ));
    }
    if users.requests == 0 {
        return Err(Error::Invalid(
            "a user session needs at least 1 request".into(),
        ));
    }
    let Some(duration) = cfg.duration else {
        return Err(Error::Invalid(
            "user sessions run for a duration; give -d".into(),
        ));
    };
    let target = cfg
        .targets
        .first()
        .ok_or_else(|| Error::Invalid("no target URL".into()))?;
    if !target.is_tls() {
        return Err(Error::Invalid(
            "user sessions measure TLS sessions: give an https:// URL".into(),
        ));
    }
    let multiplexed = cfg.http2.is_some_and(|h| h.max_concurrent_streams > 1)
        || (cfg.http3.as_ref()).is_some_and(|h| h.max_concurrent_streams > 1 || h.flood.is_some());
    if multiplexed {
        return Err(Error::Invalid(
            "user sessions make one request per connection: no -m or --flood with them".into(),
        ));
    }
    if (cfg.http3.as_ref()).is_some_and(|h| h.new_socket || h.rebind_after.is_some()) {
        return Err(Error::Invalid(
            "user sessions share a few UDP sockets: no --quic-new-socket or --quic-rebind-after \
             with them"
                .into(),
        ));
    }
    // The engine's run of one request per connection to the first target:
    // the workload thinks, retries, offers and times out itself, and its
    // requests are 1-RTT.
    let mut one = cfg.clone();
    one.targets = vec![target.clone()];
    one.workload = Workload::Urls;
    one.requests_per_conn = 1;
    one.think_time = ThinkTime::Zero;
    one.early_data = false;
    one.duration = None;
    one.requests = None;
    one.warmup = Duration::ZERO;
    one.progress = false;
    let meter = Meter::new();
    let base = crate::tls::base_config(&one, &meter)?;
    let origins = group_origins(&one, Some(&base))?;
    let quic = match &one.http3 {
        Some(h3) => {
            let mut q = QuicRun::new(&one, h3, &base)?;
            q.shared_sockets = Some(SHARED_SOCKETS);
            Some(Arc::new(q))
        }
        None => None,
    };
    let pin = cfg.pin_cpus.as_deref().map(CpuPin::new).transpose()?;
    let cpus = pin
        .as_ref()
        .map_or_else(|| tlslab_runtime::allowed_cpus().len(), |p| p.cpus().len())
        .clamp(1, cfg.threads.max(1));
    let (rt, threads) = RuntimeSpec::new("tlslab-users", cfg.threads.max(1))
        .pinned(pin)
        .build()?;
    threads.register();
    let cpu0 = threads.cpu_time().total();
    let wall0 = Instant::now();
    let report = rt.block_on(async {
        let _ = origins[0].resolve(cfg.timeout).await;
        let start = Instant::now();
        let mut sh = Shared::new(&one, origins, meter, start, Collector::new(1));
        sh.quic = quic.clone();
        super::addr_of(&sh)?;
        let ctx = Arc::new(Ctx {
            start,
            sh: Arc::new(sh),
            timeout: cfg.timeout,
            think: cfg.think_time,
            retry: cfg.retry_on_failure,
            backoff: users.retry_backoff,
            reuse: cfg.reuse,
            k: users.requests,
            end: start + duration,
            c: Counters {
                latency: Mutex::new(hdrhistogram::Histogram::new(3).ok()),
                ..Default::default()
            },
        });
        let mut rng = tlslab_workload::rng(cfg.seed, u64::MAX);
        let gap = |rate: f64| ThinkTime::Exp {
            mean: Duration::from_secs_f64(1.0 / rate),
        };
        let mut tasks = tokio::task::JoinSet::new();
        let mut at = start;
        let mut n: u64 = 0;
        loop {
            let rate = match users.then {
                Some((after, r)) if at >= start + after => r,
                _ => users.rate,
            };
            at += gap(rate).sample(&mut rng);
            if at >= ctx.end {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
            ctx.c.arrived.fetch_add(1, Ordering::Relaxed);
            ctx.second(|s| s.users_arrived += 1);
            if ctx.c.running.load(Ordering::Relaxed) >= users.max_users as u64 {
                ctx.c.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            ctx.c.running.fetch_add(1, Ordering::Relaxed);
            n += 1;
            let second = at.saturating_duration_since(start).as_secs() as usize;
            tasks.spawn(user(ctx.clone(), tlslab_workload::rng(cfg.seed, n), second));
            while tasks.try_join_next().is_some() {}
        }
        let drained = tokio::time::timeout(
            (ctx.end + users.drain).saturating_duration_since(Instant::now()),
            async { while tasks.join_next().await.is_some() {} },
        )
        .await;
        if drained.is_err() {
            ctx.c
                .unfinished
                .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            tasks.abort_all();
        }
        if let Some(q) = &quic {
            q.close_endpoints(cfg.timeout).await;
        }
        Ok::<_, Error>(report(&ctx, duration))
    })?;
    let cpu = threads.cpu_time().total().saturating_sub(cpu0);
    let wall = wall0.elapsed().as_secs_f64();
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(UsersReport {
        client_cpu_secs: cpu.as_secs_f64(),
        client_busy: if wall > 0.0 {
            (cpu.as_secs_f64() / (wall * cpus as f64)).min(1.0)
        } else {
            0.0
        },
        ..report
    })
}

fn report(ctx: &Ctx, window: Duration) -> UsersReport {
    let c = &ctx.c;
    let w = window.as_secs_f64();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (p50, p99) = c.latency.lock().as_ref().map_or((0.0, 0.0), |h| {
        (
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
        )
    });
    UsersReport {
        window_secs: w,
        users_arrived: get(&c.arrived),
        users_dropped: get(&c.dropped),
        sessions_started: get(&c.started),
        sessions_completed: get(&c.completed),
        sessions_abandoned: get(&c.abandoned),
        sessions_unfinished: get(&c.unfinished),
        responses: get(&c.responses),
        failures: c.failures.lock().clone(),
        handshakes_full: get(&c.full),
        handshakes_resumed: get(&c.resumed),
        throughput_rps: get(&c.responses_in_window) as f64 / w,
        goodput_rps: get(&c.goodput_requests) as f64 / w,
        goodput_sessions_per_sec: get(&c.completed_in_window) as f64 / w,
        latency_p50_ms: p50,
        latency_p99_ms: p99,
        client_cpu_secs: 0.0,
        client_busy: 0.0,
        timeline: c.timeline.lock().clone(),
    }
}

impl Ctx {
    /// Updates the current second of the timeline.
    fn second(&self, f: impl FnOnce(&mut Second)) {
        self.at_second(self.start.elapsed().as_secs() as usize, f);
    }

    /// Updates second `i` of the timeline.
    fn at_second(&self, i: usize, f: impl FnOnce(&mut Second)) {
        let mut t = self.c.timeline.lock();
        if t.len() <= i {
            t.resize(i + 1, Second::default());
        }
        f(&mut t[i]);
    }
}

/// Decrements the running users on drop (a finished or aborted task).
struct Running<'a>(&'a AtomicU64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One arriving user: sessions until one completes, or (retrying) one
/// session whatever it takes, bounded by the run's end plus the drain.
async fn user(ctx: Arc<Ctx>, mut rng: tlslab_workload::Rng, arrived: usize) {
    use rand::RngExt as _;
    let _running = Running(&ctx.c.running);
    // Failures in a row, for the backoff.
    let mut failures = 0u32;
    'session: loop {
        // The session's client: an engine identity of its own (its own
        // TLS session store), numbered by the sessions started.
        let id = ctx.c.started.fetch_add(1, Ordering::Relaxed) as u32;
        let mut client = Client::new(ctx.sh.clone(), Arc::new(Identity::new(&ctx.sh, id)));
        let mut i = 0;
        // Whether request i offers the session: drawn once per request.
        let mut offer = None;
        while i < ctx.k {
            // Think time comes between requests, not before a retry.
            if i > 0 && offer.is_none() {
                let t = ctx.think.sample(&mut rng);
                if !t.is_zero() {
                    tokio::time::sleep(t).await;
                }
            }
            let o = *offer.get_or_insert_with(|| rng.random_bool(ctx.reuse.clamp(0.0, 1.0)));
            let rec = client.one_request(&ctx.sh, o, ctx.timeout).await;
            match outcome(rec) {
                Ok(rec) => {
                    counted(&ctx, &rec);
                    i += 1;
                    offer = None;
                    failures = 0;
                }
                Err(reason) => {
                    *ctx.c.failures.lock().entry(reason).or_insert(0) += 1;
                    if Instant::now() >= ctx.end {
                        ctx.c.abandoned.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    failures = failures.saturating_add(1);
                    let bound = retry_backoff_bound(ctx.backoff, failures);
                    if !bound.is_zero() {
                        let wait = bound.mul_f64(rng.random::<f64>());
                        tokio::time::sleep(wait).await;
                    }
                    if !ctx.retry {
                        ctx.c.abandoned.fetch_add(1, Ordering::Relaxed);
                        continue 'session;
                    }
                }
            }
        }
        ctx.c.completed.fetch_add(1, Ordering::Relaxed);
        ctx.second(|s| s.sessions_completed += 1);
        ctx.at_second(arrived, |s| s.arrivals_completed += 1);
        // Rates count what completed inside the window: a session the
        // drain lets finish counts as completed, not as goodput per second
        // of window (a server that falls behind would otherwise have its
        // backlog, served after the arrivals stop, credited to the window).
        if Instant::now() < ctx.end {
            ctx.c.completed_in_window.fetch_add(1, Ordering::Relaxed);
            ctx.c
                .goodput_requests
                .fetch_add(u64::from(ctx.k), Ordering::Relaxed);
        }
        return;
    }
}

/// A request's record as a success, or its failure's kind (`timeout` for
/// one that did not end in time).
fn outcome(rec: Option<RequestRecord>) -> Result<RequestRecord, String> {
    match rec {
        None => Err("timeout".into()),
        Some(RequestRecord { error: Some(e), .. }) => Err(e),
        Some(rec) => Ok(rec),
    }
}

/// Counts a response.
fn counted(ctx: &Ctx, rec: &RequestRecord) {
    let c = &ctx.c;
    c.responses.fetch_add(1, Ordering::Relaxed);
    if Instant::now() < ctx.end {
        c.responses_in_window.fetch_add(1, Ordering::Relaxed);
    }
    ctx.second(|s| s.responses += 1);
    let resumed = rec
        .handshake
        .as_ref()
        .is_some_and(|h| h.kind == HandshakeKind::Resumed);
    if resumed {
        c.resumed.fetch_add(1, Ordering::Relaxed);
    } else {
        c.full.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(h) = c.latency.lock().as_mut() {
        let _ = h.record(rec.total_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_its_base_up_to_32_times_it() {
        let b = Duration::from_millis(100);
        let bounds: Vec<u64> = (1..=8)
            .map(|n| retry_backoff_bound(b, n).as_millis() as u64)
            .collect();
        assert_eq!(bounds, [100, 200, 400, 800, 1600, 3200, 3200, 3200]);
        assert_eq!(
            retry_backoff_bound(b, u32::MAX),
            Duration::from_millis(3200)
        );
        assert_eq!(retry_backoff_bound(Duration::ZERO, 5), Duration::ZERO);
    }
}
