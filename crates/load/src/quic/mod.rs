//! HTTP/3 over QUIC load (`load --h3`): closed-loop clients, or the TCP
//! engine's open loop of arrivals (`--rate`), on quinn, h3 and h3-quinn, with the TCP engine's rustls configuration (the metering
//! provider, trust, versions, algorithms; ALPN `h3`), its session stores,
//! its reuse planner (N R N R … at 50 %), its request records, collector
//! and report. Each client has a UDP socket (a quinn endpoint) of its own
//! (bound to its `--source-ip` address if given) and makes one connection
//! at a time with up to `-m` streams in flight; an open loop's arrivals
//! take the `-c` clients in turn, each arrival one request on a new
//! connection, concurrently.
//!
//! Whether the server resumed is read from the certificate verifier: a
//! resumed TLS 1.3 handshake sends no certificate, so the client's
//! verifier is not called. With `--early-data`, a connection that holds a
//! ticket allowing 0-RTT sends its first request in 0-RTT; quinn says
//! whether the server accepted it, and a rejected request is sent again
//! after the handshake on a new HTTP/3 connection over the same QUIC one.

mod client;
pub mod flood;
pub mod http3;
mod ping;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rustls::client::danger::ServerCertVerifier;
use tlslab_crypto::meter::{Meter, Op};
use tlslab_runtime::qlog::QlogDir;
use tlslab_runtime::{CpuPin, RuntimeSpec, allowed_cpus};
use tlslab_schema::transport::{Transport, TransportPhase};
use tlslab_stats::{Collector, CpuUsage, LoadReport, Window};

use crate::config::{LoadConfig, Trust, Workload};
use crate::engine::{BackoffRun, Clock, OpenLoopRun, Slot, arrivals, slot_at};
use crate::error::Error;
pub use crate::protocol::{FloodPlan, Http3};
use crate::tls;

/// What one client connection measured of its handshake.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hs {
    kind: Kind,
    handshake_us: u64,
    first_byte_us: Option<u64>,
    bytes_out: u64,
    bytes_in: u64,
    datagrams_out: u64,
    datagrams_in: u64,
    packets_out: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Full,
    Resumed,
    ZeroRtt,
}

/// The run's state that every client reads.
pub(crate) struct Run {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) server_name: String,
    pub(crate) paths: Vec<(u32, http::Uri)>,
    pub(crate) window_start: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) budget: Option<AtomicU64>,
    pub(crate) timeout: Duration,
    pub(crate) source: Option<crate::source::SourceAddrs>,
    pub(crate) requests_per_conn: u32,
    pub(crate) streams: u32,
    pub(crate) reuse: f64,
    pub(crate) early_data: bool,
    pub(crate) collector: Collector,
    pub(crate) unfinished: AtomicU64,
    pub(crate) connections: AtomicU64,
    pub(crate) handshakes: Mutex<Vec<Hs>>,
    pub(crate) zero_rtt_rejected: AtomicU64,
    /// `--retry-backoff` and `--seed`, for a closed-loop client's backoff
    /// after handshakes that could not be made (as over TCP).
    pub(crate) retry_backoff: Duration,
    pub(crate) seed: u64,
    pub(crate) backoff_waits: AtomicU64,
    pub(crate) backoff_ns: AtomicU64,
    /// Handshakes started, and whether the server ever answered one (it
    /// completed, or the server closed, refused or reset it).
    pub(crate) attempts: AtomicU64,
    pub(crate) answered: std::sync::atomic::AtomicBool,
    pub(crate) base: rustls::ClientConfig,
    pub(crate) verifier: Arc<dyn ServerCertVerifier>,
    /// Every client identity's UDP endpoint, to let their CONNECTION_CLOSE
    /// frames out before the runtime stops.
    pub(crate) endpoints: Mutex<Vec<quinn::Endpoint>>,
    /// `--qlog DIR`.
    pub(crate) qlog: Option<QlogDir>,
    pub(crate) new_socket: bool,
    pub(crate) rebind_after: Option<u64>,
    /// Rebinds made (`--quic-new-socket`, `--quic-rebind-after`).
    pub(crate) rebinds: AtomicU64,
}

impl Run {
    /// The slot of a request starting now, as over TCP: a warm-up request
    /// before the window (not taken from the `-n` budget), else a measured
    /// one taken from it; `None` when the budget is spent or the duration
    /// is over.
    pub(crate) fn next_slot(&self) -> Option<Slot> {
        slot_at(
            Instant::now(),
            self.window_start,
            self.deadline,
            self.budget.as_ref(),
        )
    }

    /// The backoff's settings and counters.
    pub(crate) fn backoff(&self) -> BackoffRun<'_> {
        BackoffRun {
            base: self.retry_backoff,
            seed: self.seed,
            waits: &self.backoff_waits,
            ns: &self.backoff_ns,
        }
    }

    /// Microseconds from the window's start to `t` (0 before it).
    pub(crate) fn since_window(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.window_start).as_micros() as u64
    }
}

/// Checks the options `--h3` cannot take (what [`run`] checks first).
pub fn validate(cfg: &LoadConfig, h3: &Http3) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::Invalid(m.to_string()));
    if h3.max_concurrent_streams == 0 {
        return bad("-m 0 sends nothing; give at least 1 stream per connection");
    }
    if h3.rebind_after == Some(0) {
        return bad(
            "--quic-rebind-after 0: give the number of requests (at least 1) after which each client rebinds",
        );
    }
    if cfg.http2.is_some() {
        return bad("--h3 and --h2 exclude each other; choose one");
    }
    if cfg.workload != Workload::Urls {
        return bad(
            "--workload is TCP-only: --h3 requests the URLs given; drop --workload or --h3",
        );
    }
    if cfg.ablation.contains(tlslab_crypto::meter::Ablation::Cache) {
        return bad(
            "--ablate cache is TLS 1.2 session-ID resumption, which QUIC does not have; drop cache from --ablate",
        );
    }
    if !cfg
        .versions
        .contains(&tlslab_crypto::provider::Version::Tls13)
    {
        return bad("QUIC needs TLS 1.3; use --tls 1.3 or 1.2,1.3");
    }
    if cfg.requests_per_conn > 0 && h3.max_concurrent_streams > cfg.requests_per_conn {
        let (m, k) = (h3.max_concurrent_streams, cfg.requests_per_conn);
        return Err(Error::Invalid(format!(
            "-m {m} keeps {m} streams in flight, but --requests-per-conn {k} closes each HTTP/3 \
             connection after {k} request(s); give --requests-per-conn 0 (keep-alive) or at \
             least {m}, or -m {k}"
        )));
    }
    if cfg.mss.is_some() {
        return bad(
            "--mss is TCP-only (a TCP socket option; QUIC has no segments); drop --mss or --h3",
        );
    }
    if cfg.start_at.is_some() {
        return bad(
            "--start-at is TCP-only (distributed load runs over TCP); drop --start-at or --h3",
        );
    }
    let first = &cfg.targets[0];
    if let Some(f) = h3.flood {
        let host = first.host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback && !f.allow_remote {
            return Err(Error::Invalid(format!(
                "--flood sends only to loopback, and {host} is not; give a 127.0.0.1 (or [::1]) \
                 URL, or add --flood-allow-remote for a server you run"
            )));
        }
        let (max_rate, max_count) = (f.kind.max_rate(), f.kind.max_count());
        if f.rate == 0 || f.rate > max_rate {
            return Err(Error::Invalid(format!(
                "--flood-rate {}: give 1 to {max_rate} per second for --flood {}",
                f.rate,
                f.kind.name()
            )));
        }
        if let Some(m) = f.max
            && (m == 0 || m > max_count)
        {
            return Err(Error::Invalid(format!(
                "--flood-max {m}: give 1 to {max_count} for --flood {}",
                f.kind.name()
            )));
        }
    }
    if cfg.targets.iter().any(|t| !t.is_tls()) {
        return bad("--h3 needs https:// URLs (QUIC is always encrypted)");
    }
    if cfg
        .targets
        .iter()
        .any(|t| t.host != first.host || t.port != first.port)
    {
        return bad("--h3 loads one origin; give URLs with the same host and port");
    }
    Ok(())
}

/// The verifier the run's trust asks for, on the metering provider; with
/// `--ablate`, the ablation's (see [`tls::base_config`], which has already
/// refused a run without the lab server's CA).
fn verifier(
    cfg: &LoadConfig,
    base: &rustls::ClientConfig,
) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let prov = base.crypto_provider().clone();
    if !cfg.ablation.is_empty() {
        let roots = match &cfg.trust {
            Trust::CaFile(path) => tlslab_crypto::pki::load_roots(path)?,
            Trust::Roots(r) => r.clone(),
            Trust::WebPki | Trust::Insecure => {
                return Err(Error::Invalid(
                    "--ablate runs only against a lab server whose CA you give: use --cacert FILE"
                        .into(),
                ));
            }
        };
        return Ok(cfg.ablation.server_cert_verifier(&prov, roots)?);
    }
    let roots = match &cfg.trust {
        Trust::Insecure => return Ok(tlslab_crypto::pki::any_certificate(prov)),
        Trust::CaFile(path) => tlslab_crypto::pki::load_roots(path)?,
        Trust::Roots(r) => r.clone(),
        Trust::WebPki => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), prov)
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| Error::Invalid(format!("--cacert: {e}; give a PEM file of CA certificates")))
}

/// Runs HTTP/3 load as [`crate::run`] runs TCP load, and returns the same
/// report with [`LoadReport::transport`] set. Blocks; call it from
/// synchronous code.
pub fn run(cfg: &LoadConfig, h3: &Http3) -> Result<LoadReport, Error> {
    crate::validate(cfg)?;
    validate(cfg, h3)?;
    let meter = Meter::new();
    let mut base = tls::base_config(cfg, &meter)?;
    base.alpn_protocols = vec![b"h3".to_vec()];
    base.enable_early_data = cfg.early_data;
    let verifier = verifier(cfg, &base)?;
    let pin = cfg.pin_cpus.as_deref().map(CpuPin::new).transpose()?;
    let capacity = cfg.threads.min(
        pin.as_ref()
            .map_or_else(|| allowed_cpus().len(), |p| p.cpus().len())
            .max(1),
    );
    let (rt, threads) = RuntimeSpec::new("tlslab-load", cfg.threads)
        .pinned(pin)
        .build()?;
    threads.register();
    let first = &cfg.targets[0];
    let host = first.host.clone();
    let port = first.port;
    let addr = rt
        .block_on(async {
            let lookup = tokio::net::lookup_host((host.clone(), port));
            tokio::time::timeout(cfg.timeout.min(Duration::from_secs(30)), lookup).await
        })
        .ok()
        .and_then(|r| r.ok())
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Resolve {
            host: host.clone(),
            port,
            source: None,
        })?;
    let server_name = cfg.sni.clone().unwrap_or_else(|| host.clone());
    crate::target::server_name(Some(&server_name), &host)?;
    let paths = cfg
        .targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let uri: http::Uri = format!("https://{}{}", t.host_header(), t.path)
                .parse()
                .map_err(|e| Error::Invalid(format!("bad URL {t}: {e}")))?;
            Ok((i as u32, uri))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let qlog = h3
        .qlog
        .as_ref()
        .map(|q| {
            QlogDir::open(q, "client").map_err(|e| {
                Error::Invalid(format!(
                    "--qlog {}: {e}; give a directory this user can create or write",
                    q.dir.display()
                ))
            })
        })
        .transpose()?;
    let window_start = Instant::now() + cfg.warmup;
    let hdr_log = crate::hdr::open(cfg, window_start)?;
    let run = Arc::new(Run {
        addr,
        server_name,
        paths,
        window_start,
        deadline: cfg.duration.map(|d| window_start + d),
        budget: cfg.requests.map(AtomicU64::new),
        timeout: cfg.timeout.min(Duration::from_secs(3600)),
        source: cfg.source_ip.clone(),
        requests_per_conn: cfg.requests_per_conn,
        streams: h3.max_concurrent_streams,
        reuse: cfg.reuse,
        early_data: cfg.early_data,
        collector: Collector::new(cfg.clients.min(cfg.threads.saturating_mul(4)))
            .with_hdr_log(hdr_log.clone()),
        unfinished: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        handshakes: Mutex::new(Vec::new()),
        zero_rtt_rejected: AtomicU64::new(0),
        retry_backoff: cfg.retry_backoff,
        seed: cfg.seed,
        backoff_waits: AtomicU64::new(0),
        backoff_ns: AtomicU64::new(0),
        attempts: AtomicU64::new(0),
        answered: Default::default(),
        base,
        verifier,
        endpoints: Mutex::default(),
        qlog,
        new_socket: h3.new_socket,
        rebind_after: h3.rebind_after,
        rebinds: AtomicU64::new(0),
    });
    // The flood starts with the run (its warm-up too) and ends with it.
    let flooding = match h3.flood {
        None => None,
        Some(plan) => {
            let span = cfg.duration.map_or(flood::MAX_DURATION, |d| d + cfg.warmup);
            let mut f = flood::Flood::new(addr, plan.kind, plan.rate, span);
            if let Some(m) = plan.max {
                f.max_initials = m;
            }
            f.allow_remote = plan.allow_remote;
            f.server_name = run.server_name.clone();
            f.seed = cfg.seed;
            // Its own TLS configuration and meter: the flood's key shares
            // and handshakes are not the load's.
            Some(flood::start(f, flood::tls_for(cfg)?)?)
        }
    };
    let open_loop = cfg
        .open_loop
        .map(|ol| (ol, Arc::new(OpenLoopRun::default())));
    let (cpu, crypto, costs, measured, start_unix_ms, flood) = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        match &open_loop {
            None => {
                for id in 0..cfg.clients {
                    set.spawn(client::client(run.clone(), id as u32));
                }
            }
            Some((ol, state)) => {
                let clock = Clock {
                    seed: cfg.seed,
                    run_start: window_start.checked_sub(cfg.warmup).unwrap_or(window_start),
                    deadline: run.deadline,
                };
                set.spawn(open_arrivals(
                    run.clone(),
                    clock,
                    *ol,
                    state.clone(),
                    cfg.clients,
                )?);
            }
        }
        tokio::time::sleep_until(window_start.into()).await;
        let cpu0 = threads.cpu_time();
        let costs0 = tlslab_runtime::costs::probes().map(|_| threads.costs());
        let crypto0 = meter.snapshot();
        let start_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        while let Some(r) = set.join_next().await {
            if let Err(e) = r {
                tracing::error!("a load client stopped abnormally: {e}");
            }
        }
        let end = Instant::now();
        let flood = flooding.map(flood::Flooding::stop);
        let (cpu, crypto) = (
            threads.cpu_time().since(cpu0),
            meter.snapshot().diff(&crypto0),
        );
        let costs = costs0.map(|c0| threads.costs().since(c0));
        // After the window (and its CPU reading): the endpoints send their connections'
        // CONNECTION_CLOSE frames from their driver tasks, which stop with
        // the runtime. Without this wait the last connection's close could
        // be lost and the server would hold it until its idle timeout.
        let endpoints = std::mem::take(&mut *run.endpoints.lock());
        let idle = async {
            // They drain at once; waiting on each in turn takes the longest.
            for e in &endpoints {
                e.wait_idle().await;
            }
        };
        let _ = tokio::time::timeout(run.timeout.min(Duration::from_secs(1)), idle).await;
        Ok::<_, Error>((
            cpu,
            crypto,
            costs,
            end.saturating_duration_since(window_start),
            start_unix_ms,
            flood,
        ))
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    crate::hdr::finish(hdr_log.as_ref())?;
    let attempts = run.attempts.load(Ordering::Relaxed);
    if attempts > 0 && !run.answered.load(Ordering::Relaxed) {
        return Err(Error::NoQuicServer {
            addr,
            attempts,
            timeout: run.timeout,
            hint: if cfg.ablation.is_empty() {
                ""
            } else {
                "; or the server runs a different --ablate set (QUIC drops packets that do not \
                 decrypt, unanswered): start client and server with the same --ablate"
            },
        });
    }
    let mut config = cfg.echo(cfg.targets.iter().map(|t| t.to_string()).collect());
    // QUIC is TLS 1.3 only, and resumes with tickets.
    config.resume_with = "ticket".into();
    config.versions = vec!["TLSv1.3".into()];
    let window = Window {
        start_unix_ms,
        measured_s: measured.as_secs_f64(),
        observed: "client-observed".into(),
    };
    let cpu = CpuUsage {
        user_s: cpu.user.as_secs_f64(),
        sys_s: cpu.sys.as_secs_f64(),
        capacity,
    };
    let stats = run.collector.merged();
    let mut report = tlslab_stats::build_report(
        config,
        window,
        &stats,
        run.unfinished.load(Ordering::Relaxed),
        cpu,
    );
    // Round trips are not counted over QUIC (see client.rs): no mean.
    report.handshake.full.round_trips_mean = None;
    report.handshake.resumed.round_trips_mean = None;
    // Crypto includes QUIC's packet and header protection (the suite's
    // `quic` algorithm, metered like the rest of the provider).
    report.client_cpu.costs = costs.map(|c| c.to_schema(crypto.crypto_time()));
    report.crypto = tlslab_stats::CryptoPerHandshake::from_totals(
        report.reuse.handshakes,
        Op::ALL.into_iter().map(|op| {
            let t = crypto.total(op);
            (op.name(), t.calls, t.nanos)
        }),
    );
    let connections = run.connections.load(Ordering::Relaxed);
    let completed = report.requests.completed;
    report.http = Some(tlslab_stats::Http {
        protocol: "h3".into(),
        max_concurrent_streams: Some(h3.max_concurrent_streams),
        connections,
        requests_per_connection: (connections > 0)
            .then(|| report.requests.attempted as f64 / connections as f64),
        handshakes_per_request: (completed > 0)
            .then(|| report.reuse.handshakes as f64 / completed as f64),
        handshake_crypto_us_per_request: None,
        record_crypto_us_per_request: None,
    });
    let waits = run.backoff_waits.load(Ordering::Relaxed);
    report.backoff = (waits > 0).then(|| tlslab_stats::Backoff {
        base_ms: cfg.retry_backoff.as_secs_f64() * 1e3,
        waits,
        waited_s: run.backoff_ns.load(Ordering::Relaxed) as f64 / 1e9,
    });
    report.open_loop = open_loop.as_ref().map(|(ol, state)| state.report(ol));
    let hs = run.handshakes.lock();
    report.transport = Some(Transport {
        name: "quic".into(),
        max_concurrent_streams: h3.max_concurrent_streams,
        full: phase(&hs, Kind::Full),
        resumed: phase(&hs, Kind::Resumed),
        zero_rtt: phase(&hs, Kind::ZeroRtt),
        zero_rtt_rejected: run.zero_rtt_rejected.load(Ordering::Relaxed),
        rebinds: run.rebinds.load(Ordering::Relaxed),
        flood,
        qlog: run.qlog.as_ref().map(QlogDir::report),
    });
    Ok(report)
}

/// The open loop over HTTP/3: the TCP engine's arrivals, each one request
/// on a new connection of the `clients` identities in turn.
fn open_arrivals(
    run: Arc<Run>,
    clock: Clock,
    ol: crate::config::OpenLoop,
    state: Arc<OpenLoopRun>,
    clients: usize,
) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    let ids = (0..clients.max(1))
        .map(|id| {
            client::Me::new(run.clone(), id as u32, Arc::default())
                .map(Arc::new)
                .map_err(|e| Error::Invalid(format!("--h3 client {id}: {e}")))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let slots = run.clone();
    let slot = move |t| slot_at(t, slots.window_start, slots.deadline, slots.budget.as_ref());
    let pool = ids.clone();
    let arrive = move |n: usize, slot: Slot, intended: Instant| {
        let me = pool[n % pool.len()].clone();
        async move { me.arrival(intended, slot == Slot::Measured).await }
    };
    Ok(async move {
        arrivals(clock, state, ol, slot, arrive).await;
        for me in &ids {
            me.close();
        }
    })
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

fn phase(all: &[Hs], kind: Kind) -> TransportPhase {
    let hs: Vec<&Hs> = all.iter().filter(|h| h.kind == kind).collect();
    let n = hs.len() as u64;
    let mean =
        |f: fn(&Hs) -> u64| (n > 0).then(|| hs.iter().map(|h| f(h)).sum::<u64>() as f64 / n as f64);
    TransportPhase {
        count: n,
        handshake_p50_us: median(hs.iter().map(|h| h.handshake_us).collect()),
        first_byte_p50_us: median(hs.iter().filter_map(|h| h.first_byte_us).collect()),
        bytes_out: mean(|h| h.bytes_out),
        bytes_in: mean(|h| h.bytes_in),
        datagrams_out: mean(|h| h.datagrams_out),
        datagrams_in: mean(|h| h.datagrams_in),
        packets_out: mean(|h| h.packets_out),
    }
}
