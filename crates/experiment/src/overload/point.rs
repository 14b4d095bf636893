//! One point of `tlslab overload`: a fresh server (the embedded one from
//! the rig, or nginx) driven by user sessions, and what each side saw.

use std::time::Duration;

use tlslab_load::{LoadConfig, Users, UsersReport};
use tlslab_server::{
    AdmissionMode, AdmissionSettings, Content, H3Settings, QuicAdmission, Server, SessionCache,
};

use super::plan::{Arm, NginxPlan, OverloadPlan, Transport};
use super::report::ServerSide;
use crate::Error;
use crate::rig::Rig;

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
pub(super) fn server_connections() -> usize {
    (open_files_limit().saturating_sub(256) / 2).max(64) as usize
}

/// The most concurrent users: each holds a client socket while the
/// server may still hold its side (and sockets of users that gave up),
/// so a quarter of the descriptors. Arrivals beyond it are dropped and
/// counted (`users_dropped`): the client cannot emulate more.
pub(super) fn max_users() -> usize {
    (open_files_limit().saturating_sub(256) / 4).clamp(16, 20_000) as usize
}

/// This process's resident set size, KiB.
pub(super) fn rss_kib() -> u64 {
    tlslab_peers::rss_kib(std::process::id())
}

/// Response body of every request (`/bytes/1024`; nginx serves a file
/// of that size at that path).
const BODY_BYTES: usize = 1024;

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

/// A fresh embedded server for a point with `admission`: the rig's, with
/// `tlslab serve`'s default session cache (20,480 sessions), a 30 s
/// handshake timeout and half the file descriptors.
pub(super) fn start_server(
    rig: &Rig,
    plan: &OverloadPlan,
    admission: AdmissionMode,
) -> Result<Server, Error> {
    let mut c = rig.server(Content::Empty);
    c.tls.session_cache = SessionCache::Memory {
        capacity: 20_480,
        ttl: Duration::from_secs(300),
    };
    c.handshake_timeout = Duration::from_secs(30);
    c.max_connections = server_connections();
    c.admission = AdmissionSettings {
        mode: admission,
        max_handshakes_in_flight: (admission == AdmissionMode::Static).then_some(plan.static_limit),
        ..AdmissionSettings::default()
    };
    plan.transport
        .start_with(c, |_| h3_settings(plan, admission))
}

/// The HTTP/3 listener of a point with `admission`: `tlslab serve --h3`'s
/// defaults (Retry under load, 30 s idle timeout), on a free loopback
/// port, with the admission policy of the same name over QUIC: `static`
/// is quinn's connection limit at the TCP arm's handshakes in flight,
/// `session` the TCP controller's rule on the Initial (shed attempts
/// refused).
fn h3_settings(plan: &OverloadPlan, admission: AdmissionMode) -> H3Settings {
    let mut h = H3Settings::new((std::net::Ipv4Addr::LOCALHOST, 0).into());
    h.max_connections = server_connections();
    h.admission = match admission {
        AdmissionMode::Off => QuicAdmission::Off,
        AdmissionMode::Static => {
            h.max_connections = plan.static_limit;
            QuicAdmission::Static
        }
        AdmissionMode::Session => QuicAdmission::Session,
    };
    h
}

pub(super) fn load(
    rig: &Rig,
    plan: &OverloadPlan,
    server: &Server,
    arm: &Arm,
    window: Duration,
    seed: u64,
) -> Result<LoadConfig, Error> {
    let addr = plan
        .transport
        .listener(server)
        .expect("the transport's listener");
    let mut cfg = load_to(rig, plan, addr.port(), arm, window, seed)?;
    plan.transport.speak(&mut cfg);
    Ok(cfg)
}

/// The user-session load against `https://127.0.0.1:PORT/bytes/1024`.
fn load_to(
    rig: &Rig,
    plan: &OverloadPlan,
    port: u16,
    arm: &Arm,
    window: Duration,
    seed: u64,
) -> Result<LoadConfig, Error> {
    let url = format!("https://127.0.0.1:{port}/bytes/{BODY_BYTES}");
    let mut cfg = rig.load(&url, window)?;
    cfg.sni = Some("localhost".into());
    cfg.timeout = arm.timeout.unwrap_or(Duration::MAX);
    cfg.retry_on_failure = arm.retry;
    cfg.reuse = arm.reuse;
    cfg.think_time = tlslab_load::ThinkTime::Const(plan.think);
    cfg.seed = seed;
    Ok(cfg)
}

pub(super) fn point(
    rig: &Rig,
    plan: &OverloadPlan,
    arm: &Arm,
    rate: f64,
    window: Duration,
    seed: u64,
) -> Result<(UsersReport, ServerSide), Error> {
    let server = start_server(rig, plan, arm.admission)?;
    let cfg = load(rig, plan, &server, arm, window, seed)?;
    let client = tlslab_load::run_users(&cfg, users(plan, arm, rate))?;
    let rss = rss_kib();
    let s = server.shutdown();
    let a = s.admission.unwrap_or_default();
    // The counts of the listener the load met (over QUIC a refused or
    // ignored attempt is a failure, as a shed TCP connection is).
    let t = s
        .transport(plan.transport.server_transport())
        .unwrap_or_default();
    let (full_shed, resume_shed) = match plan.transport {
        Transport::Quic => (a.quic.full_shed, a.quic.resume_shed),
        Transport::Tcp => (a.full_shed, a.resume_shed),
    };
    Ok((
        client,
        ServerSide {
            source: match plan.transport {
                Transport::Quic => {
                    "the embedded server's own counters (its HTTP/3 listener)".into()
                }
                Transport::Tcp => "the embedded server's own counters".into(),
            },
            requests_served: t.requests,
            handshakes_full: t.full_handshakes,
            handshakes_resumed: t.resumed_handshakes,
            handshake_failures: Some(t.handshake_failures),
            full_shed,
            resume_shed,
            returning_ahead: (plan.transport == Transport::Quic)
                .then_some(a.quic.full_returning_ahead),
            limit: a.limit,
            worker_cpu_secs: s.worker_cpu.as_secs_f64(),
            rss_kib: rss,
            unavailable: Vec::new(),
        },
    ))
}

/// One point against a fresh nginx in `prefix`.
#[allow(clippy::too_many_arguments)]
pub(super) fn point_nginx(
    rig: &Rig,
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
    let nginx = crate::nginx::Nginx::start(prefix, &rig.generated, &settings)?;
    let cfg = load_to(rig, plan, nginx.port(), arm, window, seed)?;
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
                returning_ahead: None,
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
