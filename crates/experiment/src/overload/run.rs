//! How `tlslab overload` runs: the shed cost, the capacity sweep, the
//! robustness runs and the points of every arm.

use std::time::Duration;

use tlslab_load::Users;
use tlslab_server::AdmissionMode;

use super::plan::{Arm, OverloadPlan, Peer, Transport};
use super::point::{load, max_users, point, point_nginx, rss_kib, start_server};
use super::report::{OverloadReport, Point, Robustness, ShedCost};
use super::sweep::find_capacity;
use crate::Error;
use crate::rig::Rig;

/// Runs `plan`, reporting progress lines through `progress`.
pub fn run(plan: &OverloadPlan, mut progress: impl FnMut(&str)) -> Result<OverloadReport, Error> {
    if plan.transport == Transport::Quic && plan.arms.iter().any(|a| a.server == Peer::Nginx) {
        return Err(Error::Nginx(
            "overload --h3 runs the embedded server only (nginx here has no HTTP/3); drop nginx from --servers".into(),
        ));
    }
    let rig = Rig::generate(plan.key, &[], plan.placement.clone())?;
    let mut not_run = Vec::new();
    // The shed-cost runs are TCP's (a ClientHello, then a close); a QUIC
    // attempt's is bench/quic_admission_cpu.sh's (BENCHMARKS.md).
    let shed_cost = if plan.transport == Transport::Quic {
        not_run.push("the shed cost over QUIC (bench/quic_admission_cpu.sh measures it)".into());
        ShedCost {
            full_handshake_us: f64::NAN,
            shed_us: f64::NAN,
            ratio: f64::NAN,
            ..ShedCost::default()
        }
    } else {
        let c = shed_cost(&rig, plan, 300)?;
        progress(&format!(
            "overload: a shed costs {:.1} µs of server CPU, a full handshake {:.1} µs ({:.1} %)",
            c.shed_us,
            c.full_handshake_us,
            c.ratio * 100.0
        ));
        c
    };
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
                (Peer::Tlslab, _) => point(&rig, plan, arm, rate, plan.window, seed)?,
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
                    let r = point_nginx(&rig, plan, np, &dir, arm, rate, plan.window, seed);
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
                arm: arm.to_schema(),
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
        not_run: {
            if plan.transport == Transport::Tcp
                && !plan.arms.iter().any(|a| a.server == Peer::Nginx)
            {
                not_run.push(
                    "nginx with limit_conn as the unprotected reference (pass --servers tlslab,nginx)"
                        .into(),
                );
            }
            not_run
        },
        transport: match plan.transport {
            Transport::Tcp => "tcp",
            Transport::Quic => "h3",
        }
        .into(),
        quic: None,
        capacity_from: if plan.capacity.is_some() {
            "given".into()
        } else {
            "sweep".into()
        },
    })
}

/// Runs `plan` over TCP, then [over QUIC](OverloadPlan::over_quic), each
/// with its own capacity sweep (unless the capacity is given), and sets
/// the QUIC report beside the TCP one (`quic`): `overload --transport
/// both` and the seed002 study. The QUIC run's progress lines say so.
pub fn run_both(
    plan: &OverloadPlan,
    mut progress: impl FnMut(&str),
) -> Result<OverloadReport, Error> {
    let tcp_plan = OverloadPlan {
        transport: Transport::Tcp,
        ..plan.clone()
    };
    let mut tcp = run(&tcp_plan, &mut progress)?;
    let quic = run(&plan.over_quic(), |l| progress(&format!("over QUIC: {l}")))?;
    tcp.quic = Some(Box::new(quic));
    Ok(tcp)
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
    let server = start_server(rig, plan, admission)?;
    let cfg = load(rig, plan, &server, &arm, high + low, 7)?;
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
    let survived = health(server.https_addr().expect("an HTTPS listener"), &rig.roots);
    server.shutdown();
    let t = &client.timeline;
    let drop_at = high.as_secs() as usize;
    let served = |i: usize| {
        t.get(i).is_some_and(|s| {
            s.users_arrived > 0 && s.arrivals_completed as f64 >= 0.9 * s.users_arrived as f64
        })
    };
    let end = drop_at + low.as_secs() as usize;
    // Seconds after the drop until `ok` holds for two seconds in a row.
    let recovered = |ok: &dyn Fn(usize) -> bool| {
        (drop_at..end.saturating_sub(1))
            .find(|&i| ok(i) && ok(i + 1))
            .map(|i| (i - drop_at) as u64)
    };
    let recovery_secs = recovered(&served);
    let low_rate = 0.5 * capacity;
    let goodput_recovery_secs = recovered(&|i| {
        t.get(i)
            .is_some_and(|s| s.sessions_completed as f64 >= 0.9 * low_rate)
    });
    let within =
        |s: Option<u64>| s.map_or_else(|| "not within the low phase".into(), |s| format!("{s} s"));
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
        within(goodput_recovery_secs),
        within(recovery_secs)
    ));
    Ok(Robustness {
        admission: admission.name().into(),
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
fn health(addr: std::net::SocketAddr, roots: &rustls::RootCertStore) -> bool {
    use std::io::{Read, Write};
    let Some(cfg) = client_config(roots) else {
        return false;
    };
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

/// A rustls client (aws-lc-rs, its default versions) trusting `roots`.
fn client_config(roots: &rustls::RootCertStore) -> Option<rustls::ClientConfig> {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider);
    let b = b.with_safe_default_protocol_versions().ok()?;
    Some(
        b.with_root_certificates(roots.clone())
            .with_no_client_auth(),
    )
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
                h.join()
                    .unwrap_or_else(|_| Err(Error::empty("shed cost", "a client thread panicked")))
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
    let mut c = client_config(&rig.roots).expect("aws-lc-rs has default versions");
    c.resumption = rustls::client::Resumption::disabled();
    let cfg = std::sync::Arc::new(c);
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let io_err = |e: std::io::Error| Error::empty("shed cost", e.to_string());
    // Full handshakes.
    let server = start_server(rig, plan, AdmissionMode::Off)?;
    let addr = server.https_addr().expect("an HTTPS listener");
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
    let server = start_server(rig, &p, AdmissionMode::Static)?;
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
        return Err(Error::empty(
            "shed cost",
            format!(
                "{shed_n} of {n} connections were shed, {full_n} of {n} full handshakes completed"
            ),
        ));
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
