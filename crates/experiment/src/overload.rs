//! `tlslab overload`: seed 002's collapse and its prevention.
//!
//! An embedded server (one worker thread pinned to the server's CPU,
//! RSA-4096 by default, stateless tickets) is driven by open-loop
//! arrivals of users, each a session of K requests on new connections
//! reusing its TLS session (`tlslab_load::run_users`), pinned to the
//! client's CPU. First the capacity is found: a doubling sweep of the
//! arrival rate (admission off, no client timeout, retry on, 80 % reuse)
//! until a step does not keep up (its sessions completed per second in the
//! second half of the window, the steady state, fall below 85 % of the
//! offered rate), then two bisection steps; capacity is the highest steady
//! completion rate of any step (see `find_capacity`). Then
//! each arm runs at multiples of that capacity, each point on a fresh
//! server: admission `off`, `static` or `session`; a finite client timeout
//! or none; retry on failure or a new client; 80 % or 0 % reuse. For each
//! point it reports client-observed goodput (requests of completed
//! sessions per second), throughput (all responses per second), p99
//! latency, and server-observed handshakes, shed counts and worker CPU,
//! all over the point's window. The shapes are those of seed 002's
//! Figs. 3 (throughput against load), 5 (reuse), 6 (retry) and 7
//! (timeout), with the admission arms added.
//!
//! nginx with `limit_conn` is the unprotected reference (`Peer::Nginx`
//! arms, `--servers tlslab,nginx`): the same certificate and key, one
//! process pinned to the server CPU, started fresh per point with `-p` in a
//! temporary prefix on a loopback port, driven by the same user sessions at
//! the same multiples of the embedded server's capacity. Its
//! server-observed figures come from its access log (200s, 503s,
//! `$ssl_session_reused`, `$connection_requests`) and its CPU from
//! `/proc/PID/schedstat`; figures nginx cannot give are `null` and named in
//! the point's `server.unavailable`.

use std::time::{Duration, Instant};

use serde::Serialize;
use tlslab_crypto::pki::{self, KeyType};
use tlslab_load::{LoadConfig, Target, Trust, Users, UsersReport};
use tlslab_server::{
    AdmissionMode, AdmissionSettings, CertSource, Content, ServeConfig, Server, TlsSettings,
};

use crate::Error;
use crate::pin::Placement;

/// Which server a point runs against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// The embedded `tlslab serve` engine.
    #[default]
    Tlslab,
    /// nginx with `limit_conn` (the unprotected reference).
    Nginx,
}

/// One client behaviour and server protection.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Arm {
    /// The server: the embedded one or nginx.
    pub server: Peer,
    /// Server admission control.
    pub admission: AdmissionMode,
    /// Client timeout per request; `None`: infinite.
    #[serde(serialize_with = "opt_secs")]
    pub timeout: Option<Duration>,
    /// Retry a failed request in the same session (else a new client).
    pub retry: bool,
    /// Share of connections offering the stored session (0 to 1).
    pub reuse: f64,
}

fn opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

impl Arm {
    /// A short name: `admission/timeout/retry/reuse` (`nginx-limit_conn`
    /// in place of the admission for nginx).
    pub fn name(&self) -> String {
        format!(
            "{}/{}/{}/reuse{:.0}",
            match self.server {
                Peer::Tlslab => self.admission.name(),
                Peer::Nginx => "nginx-limit_conn",
            },
            self.timeout.map_or_else(
                || "no-timeout".into(),
                |t| format!("timeout{}s", t.as_secs_f64())
            ),
            if self.retry { "retry" } else { "new-client" },
            self.reuse * 100.0
        )
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct OverloadPlan {
    /// Measurement window of each point.
    pub window: Duration,
    /// Window of each capacity-sweep step.
    pub sweep_window: Duration,
    /// Multiples of the capacity to offer.
    pub multipliers: Vec<f64>,
    /// The arms.
    pub arms: Vec<Arm>,
    /// Requests per user session (K).
    pub requests: u32,
    /// Think time between a user's requests.
    pub think: Duration,
    /// `static` arms: the most handshakes in flight.
    pub static_limit: usize,
    /// Server and client CPUs.
    pub placement: Placement,
    /// Also run the robustness runs (admission off and session).
    pub robustness: bool,
    /// Their overload phase (60 s by default).
    pub robust_high: Duration,
    /// How to run nginx for `Peer::Nginx` arms (required if there are any).
    pub nginx: Option<NginxPlan>,
    /// Skip the capacity sweep and use this many user sessions/s.
    pub capacity: Option<f64>,
    /// The server certificate's key (seed 002: RSA). A dearer key makes the
    /// server's share of each session's TLS work larger than the client's.
    pub key: KeyType,
    /// The base of the clients' exponential backoff (full jitter) before
    /// an attempt that follows a failure ([`Users::retry_backoff`]); zero:
    /// at once, as httperf.
    pub retry_backoff: Duration,
}

/// The default backoff base: the AWS SDKs' (100 ms, full jitter).
pub const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// The nginx reference.
#[derive(Clone, Debug)]
pub struct NginxPlan {
    /// The nginx binary.
    pub bin: std::path::PathBuf,
    /// `limit_conn` of its server block.
    pub limit_conn: usize,
    /// Keep each point's prefix (config, access and error log) under this
    /// directory, in `point-<n>`; `None`: a temporary directory, removed.
    pub keep_dir: Option<std::path::PathBuf>,
}

/// The default `limit_conn`: the same number as the `static` arm's
/// handshakes in flight, so both generic limits get the same budget.
pub const NGINX_LIMIT_CONN: usize = 16;

impl OverloadPlan {
    /// The standard plan: 20 s windows, 0.5x to 4x, K = 5 with 100 ms
    /// think time, and the arms of seed 002's figures (off with 10 s
    /// timeout, retry and 80 % reuse; the same with 0 % reuse, with a new
    /// client on failure, with no timeout) plus `static` and `session`.
    pub fn standard(placement: Placement) -> Self {
        let base = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: Some(Duration::from_secs(10)),
            retry: true,
            reuse: 0.8,
        };
        OverloadPlan {
            window: Duration::from_secs(20),
            sweep_window: Duration::from_secs(6),
            multipliers: vec![0.5, 1.0, 2.0, 3.0, 4.0],
            arms: vec![
                base,
                Arm { reuse: 0.0, ..base },
                Arm {
                    retry: false,
                    ..base
                },
                Arm {
                    timeout: None,
                    ..base
                },
                Arm {
                    admission: AdmissionMode::Static,
                    ..base
                },
                Arm {
                    admission: AdmissionMode::Session,
                    ..base
                },
            ],
            requests: 5,
            think: Duration::from_millis(100),
            static_limit: 16,
            placement,
            robustness: false,
            robust_high: Duration::from_secs(60),
            nginx: None,
            capacity: None,
            // RSA, as seed 002's server, and dear enough that the server,
            // not the one client thread, does most of each session's TLS
            // work: with RSA-2048 the client saturates first at 3x (issue
            // 13's runs), and the points would measure it.
            key: KeyType::Rsa4096,
            retry_backoff: RETRY_BACKOFF,
        }
    }

    /// `--quick`: 4 s windows at 1x and 3x, admission off and session with
    /// a 1 s client timeout (a 10 s timeout would not fire in the window),
    /// retry and 80 % reuse.
    pub fn quick(placement: Placement) -> Self {
        let base = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: Some(Duration::from_secs(1)),
            retry: true,
            reuse: 0.8,
        };
        OverloadPlan {
            window: Duration::from_secs(4),
            sweep_window: Duration::from_secs(4),
            multipliers: vec![1.0, 3.0],
            arms: vec![
                base,
                Arm {
                    admission: AdmissionMode::Session,
                    ..base
                },
            ],
            requests: 5,
            think: Duration::from_millis(20),
            ..OverloadPlan::standard(placement)
        }
    }
}

/// One point: an arm at one offered load.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The arm.
    pub arm: Arm,
    /// The arm's name.
    pub arm_name: String,
    /// Offered load as a multiple of the capacity.
    pub multiplier: f64,
    /// Offered new users per second.
    pub offered_users_per_sec: f64,
    /// What the client measured.
    pub client: UsersReport,
    /// What the server measured over the same run.
    pub server: ServerSide,
}

/// Server-observed figures of one point (the server's whole life, which
/// is the point: a fresh server per point). For nginx: from its access log
/// and `/proc`; what it cannot give is `null` and named in `unavailable`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerSide {
    /// Where the figures come from.
    pub source: String,
    /// Requests the server answered with 200 (tlslab: every request it
    /// served; nginx: status-200 lines of its access log).
    pub requests_served: u64,
    /// Full handshakes completed (nginx: connections whose first request
    /// it logged on a new session; a handshake with no request is not
    /// logged).
    pub handshakes_full: u64,
    /// Resumed handshakes completed (nginx: as above, `$ssl_session_reused`).
    pub handshakes_resumed: u64,
    /// Failed or abandoned handshakes (sheds included as `admission_shed`);
    /// `null` for nginx (its access log has no line for them).
    pub handshake_failures: Option<u64>,
    /// Full handshakes shed (tlslab: closed after the ClientHello; nginx:
    /// requests `limit_conn` answered 503 on a full handshake, which nginx
    /// completed first).
    pub full_shed: u64,
    /// Resumptions shed (nginx: `limit_conn` 503s on a resumed session).
    pub resume_shed: u64,
    /// The controller's last limit (full handshakes/s; static: in-flight
    /// cap; nginx: its `limit_conn`), if any.
    pub limit: Option<f64>,
    /// Server CPU seconds (tlslab: its worker thread; nginx: its one
    /// process, `/proc/PID/schedstat`, over the load run).
    pub worker_cpu_secs: f64,
    /// Resident set size at the end of the point, KiB (tlslab: this
    /// process, server and client; nginx: the nginx process alone).
    pub rss_kib: u64,
    /// Figures this server cannot give, and why.
    pub unavailable: Vec<String>,
}

/// What shedding costs the server against a full handshake.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ShedCost {
    /// Connections in each of the two runs.
    pub connections: u64,
    /// Concurrent blocking clients in each run (the server stays busy).
    pub clients: usize,
    /// Server worker CPU per full handshake (admission off), µs.
    pub full_handshake_us: f64,
    /// Server worker CPU per shed connection (accept, read and parse the
    /// ClientHello, close), µs.
    pub shed_us: f64,
    /// `shed_us / full_handshake_us`.
    pub ratio: f64,
}

/// The whole study.
#[derive(Clone, Debug, Serialize)]
pub struct OverloadReport {
    /// Where the server and client ran.
    pub placement: String,
    /// The server certificate's key.
    pub key: String,
    /// The clients' backoff base after a failure, ms (0: at once).
    pub retry_backoff_ms: f64,
    /// The most users the client holds at once (a quarter of the
    /// file-descriptor limit, which the server in this process shares);
    /// arrivals beyond it are dropped and counted (`users_dropped`).
    pub max_users: usize,
    /// The cost of a shed against a full handshake (server-observed).
    pub shed_cost: ShedCost,
    /// Requests per session.
    pub requests_per_session: u32,
    /// Capacity found by the sweep: completed user sessions per second.
    pub capacity_users_per_sec: f64,
    /// `sweep` (found by the sweep) or `given` (`--capacity`).
    pub capacity_from: String,
    /// The sweep: (offered users/s, completed sessions/s); empty if given.
    pub sweep: Vec<(f64, f64)>,
    /// Every point.
    pub points: Vec<Point>,
    /// The robustness runs (`--robustness`; empty otherwise).
    pub robustness: Vec<Robustness>,
    /// What was not run, said plainly.
    pub not_run: Vec<String>,
}

/// Client busy fraction (CPU over wall time, client-observed) from which a
/// point's figures may describe the load generator rather than the server.
pub const CLIENT_SATURATED: f64 = 0.9;

/// The capacity sweep: (capacity in completed user sessions/s, the steps).
///
/// Each step measures its steady completion rate: the sessions completed
/// per second in the second half of its window (the first half is the
/// ramp, as a session takes K requests and think times to complete, and
/// the drain does not count, so a rate served only by queueing past the
/// window's end is not taken for capacity). A step keeps up when that rate
/// reaches 85 % of the offered rate. The rate doubles from 25 users/s
/// until a step does not keep up, then two bisection steps between the
/// last rate that kept up and that one. Capacity is the highest steady
/// completion rate of any step; in practice that of the last step that
/// kept up, since past the knee a step's queue is still growing over a
/// few seconds and it completes fewer. The earlier rule (75 % of the
/// offered rate completed anywhere in a 2 s window) counted the ramp
/// against each step and found 245 users/s where this one finds 231–284
/// on the same machine (issue 13's RSA-4096 runs).
fn find_capacity(
    rig: &Rig,
    plan: &OverloadPlan,
    progress: &mut impl FnMut(&str),
) -> Result<(f64, Vec<(f64, f64)>), Error> {
    let sweep_arm = Arm {
        server: Peer::Tlslab,
        admission: AdmissionMode::Off,
        timeout: None,
        retry: true,
        reuse: 0.8,
    };
    let mut sweep = Vec::new();
    let mut capacity: f64 = 0.0;
    let started = Instant::now();
    let mut step_no = 0;
    let mut step = |rate: f64, sweep: &mut Vec<(f64, f64)>| -> Result<Option<f64>, Error> {
        let (c, _) = rig.point(plan, &sweep_arm, rate, plan.sweep_window, 1000 + step_no)?;
        step_no += 1;
        let steady = steady_completion_rate(&c);
        let share = c.sessions_completed as f64 / c.users_arrived.max(1) as f64;
        let kept_up = steady >= 0.85 * rate;
        progress(&format!(
            "overload: capacity sweep: {rate:.0} users/s offered, {steady:.1} sessions/s completed \
             in the window's second half ({:.0} % of arrivals completed by the drain's end), \
             p99 {:.0} ms, client {:.0} % busy{}",
            share * 100.0,
            c.latency_p99_ms,
            c.client_busy * 100.0,
            if kept_up { "" } else { " (past the knee)" }
        ));
        sweep.push((rate, steady));
        capacity = capacity.max(steady);
        Ok(kept_up.then_some(steady))
    };
    let mut good = 0.0;
    let mut knee = None;
    let mut rate = 25.0;
    for _ in 0..12 {
        match step(rate, &mut sweep)? {
            Some(_) => {
                good = rate;
                rate *= 2.0;
            }
            None => {
                knee = Some(rate);
                break;
            }
        }
    }
    if let Some(mut bad) = knee {
        let mut lo = if good > 0.0 { good } else { bad / 8.0 };
        for _ in 0..2 {
            let mid = (lo + bad) / 2.0;
            match step(mid, &mut sweep)? {
                Some(_) => lo = mid,
                None => bad = mid,
            }
        }
    }
    if capacity <= 0.0 {
        return Err(Error::EmptyCell {
            cell: "capacity sweep".into(),
            errors: "no step completed a session in the second half of its window".into(),
        });
    }
    progress(&format!(
        "overload: capacity {capacity:.1} user sessions/s (K = {}), found in {:.0} s",
        plan.requests,
        started.elapsed().as_secs_f64()
    ));
    Ok((capacity, sweep))
}

/// Sessions completed per second in the second half of a run's window
/// (whole seconds of its timeline, by completion time): the steady state,
/// after the ramp of sessions that started in the window.
fn steady_completion_rate(c: &UsersReport) -> f64 {
    let w = c.window_secs.floor() as usize;
    let from = w / 2;
    if w == 0 || from >= w {
        return 0.0;
    }
    let done: u64 = c
        .timeline
        .iter()
        .take(w)
        .skip(from)
        .map(|s| s.sessions_completed)
        .sum();
    done as f64 / (w - from) as f64
}

/// The robustness run of one admission mode.
#[derive(Clone, Debug, Serialize)]
pub struct Robustness {
    /// The server's admission control.
    pub admission: AdmissionMode,
    /// Offered users/s during the overload phase (3x capacity).
    pub high_users_per_sec: f64,
    /// Length of the overload phase (s).
    pub high_secs: u64,
    /// Offered users/s after the drop (0.5x capacity).
    pub low_users_per_sec: f64,
    /// Length of the low phase (s).
    pub low_secs: u64,
    /// The server kept answering: it was alive (`/health`) after the run.
    pub survived: bool,
    /// The most RSS of the process (server and client) seen, sampled
    /// every 500 ms (KiB).
    pub rss_max_kib: u64,
    /// Seconds from the drop until the first second whose arriving users
    /// all but 10 % completed their sessions, two seconds in a row; null:
    /// not within the low phase.
    pub recovery_secs: Option<u64>,
    /// Seconds from the drop until the first second whose completed
    /// sessions reach 90 % of the low phase's arrival rate, two seconds in
    /// a row: goodput back to the offered load (whoever's sessions they
    /// are; a backlog of users from the overload counts). Null: not within
    /// the low phase.
    pub goodput_recovery_secs: Option<u64>,
    /// Goodput during the overload phase: requests of completed sessions
    /// per second of the phase (by completion time).
    pub high_goodput_rps: f64,
    /// The client's per-second timeline.
    pub timeline: Vec<tlslab_load::Second>,
}

/// 60 s (or the plan's `robust_high`) at 3x capacity, then 0.5x; 10 s
/// timeout, retry, 80 % reuse.
fn robust(
    rig: &Rig,
    plan: &OverloadPlan,
    capacity: f64,
    admission: AdmissionMode,
    progress: &mut impl FnMut(&str),
) -> Result<Robustness, Error> {
    let arm = Arm {
        server: Peer::Tlslab,
        admission,
        timeout: Some(Duration::from_secs(10)),
        retry: true,
        reuse: 0.8,
    };
    let (high, low) = (plan.robust_high, Duration::from_secs(15));
    let server = rig.server(plan, admission)?;
    let cfg = rig.load(plan, &server, &arm, high + low, 7)?;
    let users = Users {
        rate: 3.0 * capacity,
        requests: plan.requests,
        max_users: max_users(),
        drain: Duration::from_secs(2),
        then: Some((high, 0.5 * capacity)),
        retry_backoff: plan.retry_backoff,
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(rss_kib());
                std::thread::sleep(Duration::from_millis(500));
            }
            max
        })
    };
    let client = tlslab_load::run_users(&cfg, users)?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rss_max_kib = sampler.join().unwrap_or(0);
    let survived = health(
        server.https_addr().expect("an HTTPS listener"),
        &rig.generated,
    );
    server.shutdown();
    let t = &client.timeline;
    let drop_at = high.as_secs() as usize;
    let served = |i: usize| {
        t.get(i).is_some_and(|s| {
            s.users_arrived > 0 && s.arrivals_completed as f64 >= 0.9 * s.users_arrived as f64
        })
    };
    let end = drop_at + low.as_secs() as usize;
    let recovery_secs = (drop_at..end.saturating_sub(1))
        .find(|&i| served(i) && served(i + 1))
        .map(|i| (i - drop_at) as u64);
    let low_rate = 0.5 * capacity;
    let full = |i: usize| {
        t.get(i)
            .is_some_and(|s| s.sessions_completed as f64 >= 0.9 * low_rate)
    };
    let goodput_recovery_secs = (drop_at..end.saturating_sub(1))
        .find(|&i| full(i) && full(i + 1))
        .map(|i| (i - drop_at) as u64);
    let high_goodput_rps = t
        .iter()
        .take(drop_at)
        .map(|s| s.sessions_completed)
        .sum::<u64>() as f64
        * f64::from(plan.requests)
        / high.as_secs_f64();
    progress(&format!(
        "overload: robustness, admission {}: {:.0} s at {:.0} users/s then {:.0}: goodput {high_goodput_rps:.0} req/s in overload, max RSS {rss_max_kib} KiB, {}, goodput recovery {}, new arrivals served {}",
        admission.name(),
        high.as_secs_f64(),
        3.0 * capacity,
        0.5 * capacity,
        if survived { "alive" } else { "NOT answering" },
        goodput_recovery_secs.map_or_else(
            || "not within the low phase".to_string(),
            |s| format!("{s} s")
        ),
        recovery_secs.map_or_else(
            || "not within the low phase".to_string(),
            |s| format!("{s} s")
        )
    ));
    Ok(Robustness {
        admission,
        high_users_per_sec: 3.0 * capacity,
        high_secs: high.as_secs(),
        low_users_per_sec: 0.5 * capacity,
        low_secs: low.as_secs(),
        survived,
        rss_max_kib,
        recovery_secs,
        goodput_recovery_secs,
        high_goodput_rps,
        timeline: client.timeline,
    })
}

/// One full TLS request to `/health`, within 5 s.
fn health(addr: std::net::SocketAddr, g: &pki::Generated) -> bool {
    use std::io::{Read, Write};
    let Ok(roots) = g.roots() else { return false };
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map(|b| b.with_root_certificates(roots).with_no_client_auth());
    let Ok(cfg) = cfg else { return false };
    let Ok(name) = rustls::pki_types::ServerName::try_from("localhost") else {
        return false;
    };
    let Ok(conn) = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name) else {
        return false;
    };
    let Ok(tcp) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if tls
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    out.starts_with(b"HTTP/1.1 200")
}

/// Client threads of the shed-cost measurement: enough that the server
/// always has the next connection waiting, as it does under overload.
const SHED_COST_CLIENTS: usize = 4;

/// Runs `per_thread` on [`SHED_COST_CLIENTS`] threads pinned to the
/// client CPU, each `n / SHED_COST_CLIENTS` times; the first error wins.
fn hammer(
    plan: &OverloadPlan,
    n: u64,
    per_thread: impl Fn() -> Result<(), Error> + Sync,
) -> Result<(), Error> {
    let pin = (!plan.placement.client.is_empty())
        .then(|| tlslab_runtime::CpuPin::new(&plan.placement.client).ok())
        .flatten();
    let each = n / SHED_COST_CLIENTS as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..SHED_COST_CLIENTS)
            .map(|_| {
                s.spawn(|| {
                    if let Some(p) = &pin {
                        let _ = p.pin_current();
                    }
                    for _ in 0..each {
                        per_thread()?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::EmptyCell {
                        cell: "shed cost".into(),
                        errors: "a client thread panicked".into(),
                    })
                })
            })
            .collect::<Result<Vec<()>, Error>>()
            .map(|_| ())
    })
}

/// Measures the server CPU of `n` full handshakes (admission off) and of
/// `n` shed connections (static limit 1, one handshake held in flight),
/// each on a fresh server, from [`SHED_COST_CLIENTS`] concurrent blocking
/// clients so that the server is busy, as it is when it sheds, rather than
/// going idle and waking up once per connection as it does for a single
/// sequential client.
fn shed_cost(rig: &Rig, plan: &OverloadPlan, n: u64) -> Result<ShedCost, Error> {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let n = n - n % SHED_COST_CLIENTS as u64;
    let roots = rig.generated.roots()?;
    let client = |resume: bool| {
        let mut c = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("default versions")
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        if !resume {
            c.resumption = rustls::client::Resumption::disabled();
        }
        std::sync::Arc::new(c)
    };
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let io_err = |e: std::io::Error| Error::EmptyCell {
        cell: "shed cost".into(),
        errors: e.to_string(),
    };
    // Full handshakes.
    let server = rig.server(plan, AdmissionMode::Off)?;
    let addr = server.https_addr().expect("an HTTPS listener");
    let cfg = client(false);
    let cpu0 = server.cpu_time();
    hammer(plan, n, || {
        let mut conn = rustls::ClientConnection::new(cfg.clone(), name.clone())
            .map_err(|e| io_err(std::io::Error::other(e)))?;
        let mut tcp = TcpStream::connect(addr).map_err(io_err)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).map_err(io_err)?;
        }
        Ok(())
    })?;
    // The server finishes the last handshake after the client's Finished.
    std::thread::sleep(Duration::from_millis(100));
    let full = server.cpu_time().saturating_sub(cpu0);
    let hs = server.snapshot().handshakes;
    let full_n = hs.tls12.full + hs.tls13.full + hs.tls13.full_hrr;
    server.shutdown();
    // Sheds: one handshake held in flight, so a static limit of 1 sheds
    // every other connection right after its ClientHello.
    let mut p = plan.clone();
    p.static_limit = 1;
    let server = rig.server(&p, AdmissionMode::Static)?;
    let addr = server.https_addr().expect("an HTTPS listener");
    let hello = |cfg| -> Result<Vec<u8>, Error> {
        let mut c = rustls::ClientConnection::new(cfg, name.clone())
            .map_err(|e| io_err(std::io::Error::other(e)))?;
        let mut out = Vec::new();
        c.write_tls(&mut out).map_err(io_err)?;
        Ok(out)
    };
    let mut held = TcpStream::connect(addr).map_err(io_err)?;
    held.write_all(&hello(cfg.clone())?).map_err(io_err)?;
    let mut first = [0u8; 5];
    held.read_exact(&mut first).map_err(io_err)?;
    let ch = hello(cfg)?;
    let cpu0 = server.cpu_time();
    hammer(plan, n, || {
        let mut tcp = TcpStream::connect(addr).map_err(io_err)?;
        tcp.write_all(&ch).map_err(io_err)?;
        let mut sink = Vec::new();
        let _ = tcp.read_to_end(&mut sink);
        Ok(())
    })?;
    std::thread::sleep(Duration::from_millis(100));
    let shed = server.cpu_time().saturating_sub(cpu0);
    drop(held);
    let s = server.shutdown();
    let shed_n = s.admission.map_or(0, |a| a.full_shed);
    if shed_n != n || full_n != n {
        return Err(Error::EmptyCell {
            cell: "shed cost".into(),
            errors: format!(
                "{shed_n} of {n} connections were shed, {full_n} of {n} full handshakes completed"
            ),
        });
    }
    let (f, sh) = (
        full.as_secs_f64() * 1e6 / n as f64,
        shed.as_secs_f64() * 1e6 / n as f64,
    );
    Ok(ShedCost {
        connections: n,
        clients: SHED_COST_CLIENTS,
        full_handshake_us: f,
        shed_us: sh,
        ratio: sh / f,
    })
}

/// The soft limit on open files of this process (server and client share
/// it), or 1024 if it cannot be read.
fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(1024)
}

/// The server's connection limit: half the file descriptors (the other
/// half is the client's), less a margin.
fn server_connections() -> usize {
    (open_files_limit().saturating_sub(256) / 2).max(64) as usize
}

/// The most concurrent users: each holds a client socket while the
/// server may still hold its side (and sockets of users that gave up),
/// so a quarter of the descriptors. Arrivals beyond it are dropped and
/// counted (`users_dropped`): the client cannot emulate more.
fn max_users() -> usize {
    (open_files_limit().saturating_sub(256) / 4).clamp(16, 20_000) as usize
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Response body of every request (`/bytes/1024`; nginx serves a file
/// of that size at that path).
const BODY_BYTES: usize = 1024;

struct Rig {
    generated: pki::Generated,
}

/// The users of one point: `rate` arrivals/s of K-request sessions, with
/// a drain of the client timeout (at most 10 s).
fn users(plan: &OverloadPlan, arm: &Arm, rate: f64) -> Users {
    Users {
        rate,
        requests: plan.requests,
        max_users: max_users(),
        drain: arm
            .timeout
            .unwrap_or(Duration::from_secs(10))
            .min(Duration::from_secs(10)),
        then: None,
        retry_backoff: plan.retry_backoff,
    }
}

impl Rig {
    fn server(&self, plan: &OverloadPlan, admission: AdmissionMode) -> Result<Server, Error> {
        let mut tls = TlsSettings::new(CertSource::Generated(self.generated.clone()));
        tls.tickets = true;
        tls.alpn = vec![b"http/1.1".to_vec()];
        let mut c = ServeConfig::new(([127, 0, 0, 1], 0).into(), Content::Empty, tls);
        c.threads = 1;
        c.pin_cpus = (!plan.placement.server.is_empty()).then(|| plan.placement.server.clone());
        c.handshake_timeout = Duration::from_secs(30);
        c.max_connections = server_connections();
        c.admission = AdmissionSettings {
            mode: admission,
            max_handshakes_in_flight: (admission == AdmissionMode::Static)
                .then_some(plan.static_limit),
            ..AdmissionSettings::default()
        };
        Ok(Server::start(c)?)
    }

    fn load(
        &self,
        plan: &OverloadPlan,
        server: &Server,
        arm: &Arm,
        window: Duration,
        seed: u64,
    ) -> Result<LoadConfig, Error> {
        let addr = server.https_addr().expect("an HTTPS listener");
        self.load_to(plan, addr.port(), arm, window, seed)
    }

    /// The user-session load against `https://127.0.0.1:PORT/bytes/1024`.
    fn load_to(
        &self,
        plan: &OverloadPlan,
        port: u16,
        arm: &Arm,
        window: Duration,
        seed: u64,
    ) -> Result<LoadConfig, Error> {
        let target = Target::parse(&format!("https://127.0.0.1:{port}/bytes/{BODY_BYTES}"))?;
        let mut cfg = LoadConfig::new(vec![target]);
        cfg.sni = Some("localhost".into());
        cfg.trust = Trust::Roots(self.generated.roots()?);
        cfg.duration = Some(window);
        cfg.timeout = arm.timeout.unwrap_or(Duration::MAX);
        cfg.retry_on_failure = arm.retry;
        cfg.reuse = arm.reuse;
        cfg.think_time = tlslab_load::ThinkTime::Const(plan.think);
        cfg.seed = seed;
        cfg.threads = 1;
        cfg.pin_cpus = (!plan.placement.client.is_empty()).then(|| plan.placement.client.clone());
        Ok(cfg)
    }

    fn point(
        &self,
        plan: &OverloadPlan,
        arm: &Arm,
        rate: f64,
        window: Duration,
        seed: u64,
    ) -> Result<(UsersReport, ServerSide), Error> {
        let server = self.server(plan, arm.admission)?;
        let cfg = self.load(plan, &server, arm, window, seed)?;
        let client = tlslab_load::run_users(&cfg, users(plan, arm, rate))?;
        let rss = rss_kib();
        let s = server.shutdown();
        let hs = s.handshakes;
        let a = s.admission.unwrap_or_default();
        Ok((
            client,
            ServerSide {
                source: "the embedded server's own counters".into(),
                requests_served: s.requests.total(),
                handshakes_full: hs.tls12.full + hs.tls13.full + hs.tls13.full_hrr,
                handshakes_resumed: hs.resumed(),
                handshake_failures: Some(s.failures_total()),
                full_shed: a.full_shed,
                resume_shed: a.resume_shed,
                limit: a.limit,
                worker_cpu_secs: s.worker_cpu.as_secs_f64(),
                rss_kib: rss,
                unavailable: Vec::new(),
            },
        ))
    }

    /// One point against a fresh nginx in `prefix`.
    #[allow(clippy::too_many_arguments)]
    fn point_nginx(
        &self,
        plan: &OverloadPlan,
        np: &NginxPlan,
        prefix: &std::path::Path,
        arm: &Arm,
        rate: f64,
        window: Duration,
        seed: u64,
    ) -> Result<(UsersReport, ServerSide), Error> {
        let settings = crate::nginx::NginxSettings {
            bin: np.bin.clone(),
            limit_conn: np.limit_conn,
            worker_connections: server_connections(),
            cpu: plan.placement.server.first().copied(),
            body_bytes: BODY_BYTES,
        };
        let nginx = crate::nginx::Nginx::start(prefix, &self.generated, &settings)?;
        let cfg = self.load_to(plan, nginx.port(), arm, window, seed)?;
        let cpu0 = nginx.cpu_time();
        let client = tlslab_load::run_users(&cfg, users(plan, arm, rate));
        let cpu = nginx.cpu_time().saturating_sub(cpu0);
        let rss = nginx.rss_kib();
        let log = nginx.stop()?;
        let client = client?;
        Ok((
            client,
            ServerSide {
                source: "nginx's access log ($status, $ssl_session_reused, $connection_requests) and /proc/PID/schedstat".into(),
                requests_served: log.ok,
                handshakes_full: log.conns_full,
                handshakes_resumed: log.conns_resumed,
                handshake_failures: None,
                full_shed: log.rejected_full,
                resume_shed: log.rejected_resumed,
                limit: Some(np.limit_conn as f64),
                worker_cpu_secs: cpu.as_secs_f64(),
                rss_kib: rss,
                unavailable: vec![
                    "handshake_failures: nginx logs requests, not failed or abandoned handshakes".into(),
                    "handshakes_full/handshakes_resumed count only connections that carried a request".into(),
                    "full_shed/resume_shed are limit_conn's 503s, sent after a completed handshake (nginx cannot shed before it)".into(),
                ],
            },
        ))
    }
}

/// Runs `plan`, reporting progress lines through `progress`.
pub fn run(plan: &OverloadPlan, mut progress: impl FnMut(&str)) -> Result<OverloadReport, Error> {
    let rig = Rig {
        generated: pki::generate(plan.key, &[])?,
    };
    let shed_cost = shed_cost(&rig, plan, 300)?;
    progress(&format!(
        "overload: a shed costs {:.1} µs of server CPU, a full handshake {:.1} µs ({:.1} %)",
        shed_cost.shed_us,
        shed_cost.full_handshake_us,
        shed_cost.ratio * 100.0
    ));
    let (capacity, sweep) = match plan.capacity {
        Some(c) => {
            progress(&format!(
                "overload: capacity {c:.1} user sessions/s as given (--capacity): no sweep"
            ));
            (c, Vec::new())
        }
        None => find_capacity(&rig, plan, &mut progress)?,
    };
    let robustness = if plan.robustness {
        [AdmissionMode::Off, AdmissionMode::Session]
            .into_iter()
            .map(|m| robust(&rig, plan, capacity, m, &mut progress))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let mut points = Vec::new();
    for (ai, arm) in plan.arms.iter().enumerate() {
        for (mi, &m) in plan.multipliers.iter().enumerate() {
            let rate = capacity * m;
            let seed = (ai * 100 + mi) as u64;
            let (client, server) = match (arm.server, &plan.nginx) {
                (Peer::Tlslab, _) => rig.point(plan, arm, rate, plan.window, seed)?,
                (Peer::Nginx, None) => {
                    return Err(Error::Nginx(
                        "an nginx arm needs the nginx settings (NginxPlan)".into(),
                    ));
                }
                (Peer::Nginx, Some(np)) => {
                    let name = format!("point-{ai}-{mi}");
                    let (dir, temp) = match &np.keep_dir {
                        Some(d) => (d.join(&name), false),
                        None => (
                            std::env::temp_dir().join(format!(
                                "tlslab-overload-nginx-{}-{name}",
                                std::process::id()
                            )),
                            true,
                        ),
                    };
                    let r = rig.point_nginx(plan, np, &dir, arm, rate, plan.window, seed);
                    if temp {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    r?
                }
            };
            progress(&format!(
                "overload: {} at {m}x ({rate:.0} users/s): goodput {:.0} req/s, throughput {:.0} req/s, p99 {:.0} ms, shed {} full / {} resumed",
                arm.name(),
                client.goodput_rps,
                client.throughput_rps,
                client.latency_p99_ms,
                server.full_shed,
                server.resume_shed
            ));
            points.push(Point {
                arm: *arm,
                arm_name: arm.name(),
                multiplier: m,
                offered_users_per_sec: rate,
                client,
                server,
            });
        }
    }
    Ok(OverloadReport {
        placement: plan.placement.describe(),
        key: plan.key.name().into(),
        retry_backoff_ms: plan.retry_backoff.as_secs_f64() * 1e3,
        max_users: max_users(),
        shed_cost,
        requests_per_session: plan.requests,
        capacity_users_per_sec: capacity,
        sweep,
        points,
        robustness,
        not_run: if plan.arms.iter().any(|a| a.server == Peer::Nginx) {
            Vec::new()
        } else {
            vec![
                "nginx with limit_conn as the unprotected reference (pass --servers tlslab,nginx)"
                    .into(),
            ]
        },
        capacity_from: if plan.capacity.is_some() {
            "given".into()
        } else {
            "sweep".into()
        },
    })
}

impl OverloadReport {
    /// The table a person reads: one block per arm, one row per load.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tlslab overload: capacity {:.1} user sessions/s (K = {} requests, each on a new connection); server key {}; {}",
            self.capacity_users_per_sec, self.requests_per_session, self.key, self.placement
        );
        let _ = writeln!(
            out,
            "clients: after a failure, the next attempt {}",
            if self.retry_backoff_ms > 0.0 {
                format!(
                    "waits a uniform random time below min({:.0} ms x 2^(n-1), {:.0} ms) after the n-th failure in a row (exponential backoff, full jitter)",
                    self.retry_backoff_ms,
                    self.retry_backoff_ms * f64::from(tlslab_load::RETRY_BACKOFF_CAP)
                )
            } else {
                "starts at once (no backoff, as httperf)".to_string()
            }
        );
        let c = &self.shed_cost;
        let _ = writeln!(
            out,
            "shedding: {:.1} µs of server worker CPU per shed connection against {:.1} µs per full handshake ({:.1} %), {} of each from {} concurrent clients (a busy server), server-observed",
            c.shed_us,
            c.full_handshake_us,
            c.ratio * 100.0,
            c.connections,
            c.clients
        );
        let _ = writeln!(
            out,
            "goodput = requests of completed sessions/s, throughput = all responses/s, p99 of completed requests (client-observed, per point window); shed, full hs and srv CPU server-observed (a fresh server per point, over the point)"
        );
        let mut arm = String::new();
        for p in &self.points {
            if p.arm_name != arm {
                arm.clone_from(&p.arm_name);
                let _ = writeln!(out, "\n{arm}");
                if p.arm.server == Peer::Nginx {
                    let _ = writeln!(
                        out,
                        "  (nginx, limit_conn {}: full hs from its access log, one per connection that carried a request; \
                         full/res shed = limit_conn's 503s, each after a completed handshake; server CPU = the nginx process; \
                         handshake failures not logged)",
                        p.server.limit.unwrap_or(f64::NAN)
                    );
                }
                let _ = writeln!(
                    out,
                    "  {:>5} {:>8} {:>9} {:>10} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8}",
                    "load",
                    "users/s",
                    "goodput",
                    "throughput",
                    "p99 ms",
                    "sessions",
                    "full hs",
                    "full shed",
                    "res shed",
                    "srv CPU s",
                    "cli busy"
                );
            }
            let _ = writeln!(
                out,
                "  {:>4}x {:>8.0} {:>9.0} {:>10.0} {:>8.0} {:>9} {:>9} {:>9} {:>8} {:>9.2} {:>7.0}%",
                p.multiplier,
                p.offered_users_per_sec,
                p.client.goodput_rps,
                p.client.throughput_rps,
                p.client.latency_p99_ms,
                p.client.sessions_completed,
                p.server.handshakes_full,
                p.server.full_shed,
                p.server.resume_shed,
                p.server.worker_cpu_secs,
                p.client.client_busy * 100.0
            );
        }
        let saturated: Vec<String> = self
            .points
            .iter()
            .filter(|p| p.client.client_busy >= CLIENT_SATURATED)
            .map(|p| {
                format!(
                    "{} at {}x ({:.0} %)",
                    p.arm_name,
                    p.multiplier,
                    p.client.client_busy * 100.0
                )
            })
            .collect();
        if !saturated.is_empty() {
            let _ = writeln!(
                out,
                "\nWARNING: the load generator (one thread on its own CPU) was at least {:.0} % \
                 busy in {}: there the client may have set the pace, not the server, and the \
                 point measures both",
                CLIENT_SATURATED * 100.0,
                saturated.join(", ")
            );
        }
        let capped: Vec<String> = self
            .points
            .iter()
            .filter(|p| p.client.users_dropped > 0)
            .map(|p| {
                format!(
                    "{} at {}x ({} of {} arrivals)",
                    p.arm_name, p.multiplier, p.client.users_dropped, p.client.users_arrived
                )
            })
            .collect();
        if !capped.is_empty() {
            let _ = writeln!(
                out,
                "\nNOTE: the client holds at most {} users at once (a quarter of the process's \
                 file-descriptor limit, which the server shares); arrivals beyond that were \
                 dropped, not offered, in {}. There the server saw fewer users than the nominal \
                 load, and its queue was at most that many connections: when that is less work \
                 than the client timeout, requests do not time out and seed 002's collapse is \
                 bounded by the cap (raise `ulimit -n`, or shorten --timeout).",
                self.max_users,
                capped.join(", ")
            );
        }
        for r in &self.robustness {
            let _ = writeln!(
                out,
                "\nrobustness, admission {}: {} s at {:.0} users/s (3x), then {} s at {:.0}: goodput {:.0} req/s during overload, max RSS {} KiB, server {}; after the drop, goodput back to the offered load {}, new arrivals served {}",
                r.admission.name(),
                r.high_secs,
                r.high_users_per_sec,
                r.low_secs,
                r.low_users_per_sec,
                r.high_goodput_rps,
                r.rss_max_kib,
                if r.survived { "alive" } else { "NOT answering" },
                r.goodput_recovery_secs.map_or_else(
                    || "not within the low phase".to_string(),
                    |s| format!("{s} s after the drop")
                ),
                r.recovery_secs.map_or_else(
                    || "not within the low phase".to_string(),
                    |s| format!("{s} s after the drop")
                )
            );
        }
        for n in &self.not_run {
            let _ = writeln!(out, "\nnot run: {n}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            // `failures` is a map by reason: one documented field.
            serde_json::Value::Object(m) if !prefix.ends_with("failures") => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&p, v, out);
                }
            }
            serde_json::Value::Array(a) if a.first().is_some_and(|x| x.is_object()) => {
                leaves(&format!("{prefix}[]"), &a[0], out);
            }
            _ => out.push(prefix.to_string()),
        }
    }

    #[test]
    fn every_json_field_is_documented_in_the_schema_doc() {
        let readme = include_str!("../../../docs/schema.md");
        let start = readme
            .find("### `tlslab overload --json FILE`")
            .expect("docs/schema.md documents tlslab overload --json");
        let rest = &readme[start + 4..];
        let section = &rest[..rest.find("\n### ").or(rest.find("\n## ")).unwrap()];
        let mut failures = std::collections::BTreeMap::new();
        failures.insert("timeout".to_string(), 1);
        let report = OverloadReport {
            placement: "p".into(),
            key: "rsa2048".into(),
            retry_backoff_ms: 100.0,
            max_users: 5000,
            shed_cost: ShedCost::default(),
            requests_per_session: 5,
            capacity_users_per_sec: 1.0,
            capacity_from: "sweep".into(),
            sweep: vec![(1.0, 1.0)],
            points: vec![Point {
                arm: Arm {
                    server: Peer::Tlslab,
                    admission: AdmissionMode::Session,
                    timeout: Some(Duration::from_secs(1)),
                    retry: true,
                    reuse: 0.8,
                },
                arm_name: "a".into(),
                multiplier: 1.0,
                offered_users_per_sec: 1.0,
                client: UsersReport {
                    failures,
                    ..UsersReport::default()
                },
                server: ServerSide::default(),
            }],
            robustness: vec![Robustness {
                admission: AdmissionMode::Off,
                high_users_per_sec: 1.0,
                high_secs: 60,
                low_users_per_sec: 1.0,
                low_secs: 15,
                survived: true,
                rss_max_kib: 1,
                recovery_secs: Some(1),
                goodput_recovery_secs: Some(0),
                high_goodput_rps: 1.0,
                timeline: vec![tlslab_load::Second::default()],
            }],
            not_run: vec![],
        };
        let v = serde_json::to_value(&report).unwrap();
        let mut paths = Vec::new();
        leaves("", &v, &mut paths);
        assert!(paths.len() > 30, "{paths:?}");
        let missing: Vec<_> = paths
            .iter()
            .filter(|p| !section.contains(&format!("`{p}`")))
            .collect();
        assert!(missing.is_empty(), "undocumented fields: {missing:?}");
    }

    #[test]
    fn arm_names_say_what_they_are() {
        let a = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: None,
            retry: false,
            reuse: 0.0,
        };
        assert_eq!(a.name(), "off/no-timeout/new-client/reuse0");
        let b = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Session,
            timeout: Some(Duration::from_secs(10)),
            retry: true,
            reuse: 0.8,
        };
        assert_eq!(b.name(), "session/timeout10s/retry/reuse80");
        let n = Arm {
            server: Peer::Nginx,
            ..b
        };
        assert_eq!(n.name(), "nginx-limit_conn/timeout10s/retry/reuse80");
    }
}
