//! The engine: a runtime of its own and the orchestration of a run.
//!
//! [`run`] (this file) validates the configuration, builds the shared state
//! and the runtime, starts the clients and turns what they measured into a
//! report. The rest is split along the engine's seams:
//! - [`shared`]: the state every client reads (origins, run bounds, sinks);
//! - [`open_loop`]: open-loop arrivals at a rate;
//! - [`replay`]: access-log replay scheduling;
//! - [`identity`]: client identities, their session stores and reuse
//!   counters;
//! - [`client`]: the per-connection client (connect, handshake, requests);
//! - [`h2`]: the same over HTTP/2, with concurrent streams (`--h2`), kept
//!   in flight by [`streams`], which HTTP/3's connections use too;
//! - [`h3`]: the same over HTTP/3 on QUIC (`--h3`), and [`quic`] the QUIC
//!   state of the run and of each identity;
//! - [`browser`]: the e-commerce browser driving a client;
//! - [`backoff`]: the wait after connections that could not be made;
//! - [`users`]: the user sessions of `overload`, a workload with a runtime
//!   and report of its own whose every request is one connection through
//!   the same seam ([`client::Client::one_request`]).

mod backoff;
mod browser;
mod client;
mod h2;
mod h3;
mod identity;
mod open_loop;
mod quic;
mod replay;
mod shared;
mod streams;
pub(crate) mod users;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tlslab_crypto::meter::{Ablation, Meter, Op, Snapshot};
use tlslab_crypto::store::ClientSessions;
use tlslab_runtime::{CpuPin, CpuTime, RuntimeSpec, ThreadCosts, Threads, allowed_cpus};
use tlslab_stats::{Collector, CpuUsage, CsvLog, LoadReport, Window};
use tlslab_workload::ecommerce::Generator;
use tlslab_workload::replay::Scheduler;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use self::browser::BrowserRun;
use self::client::Client;
use self::identity::Identity;
use self::open_loop::{OpenLoopRun, open_arrivals};
use self::quic::QuicRun;
use self::replay::{ReplayRun, replay_worker};
use self::shared::{CLOSE_GRACE, Shared, group_origins, until_deadline};
use crate::config::{LoadConfig, OpenLoop, Workload};
use crate::conn::with_timeout;
use crate::error::Error;
use crate::target::Target;
use crate::tls;

/// Runs the load described by `cfg` on a runtime of its own and returns the
/// report. Blocks the calling thread until the run is over: when the
/// duration has passed (requests still in flight are cut off and counted as
/// `unfinished`) or `requests` requests were made, whichever comes first.
///
/// Call it from synchronous code (or `spawn_blocking`): it starts and
/// blocks on a runtime of its own, which tokio forbids inside another.
///
/// Network failures never make this fail: they are counted by kind in the
/// report. It fails only on a configuration that cannot work (bad options,
/// unreadable CA file, unwritable log, CPUs that cannot be pinned).
pub fn run(cfg: &LoadConfig) -> Result<LoadReport, Error> {
    crate::validate::validate(cfg)?;
    let expanded;
    let mut generator = None;
    let cfg = match cfg.workload {
        Workload::Specweb96 => {
            let mut c = cfg.clone();
            let paths = tlslab_workload::specweb96::files()
                .into_iter()
                .map(|f| f.path);
            c.targets = expand_base(&cfg.targets, "specweb96", paths)?;
            expanded = c;
            &expanded
        }
        Workload::Ecommerce => {
            let model = cfg.ecommerce.clone().unwrap_or_default();
            let g = Generator::new(model).map_err(Error::Workload)?;
            let mut c = cfg.clone();
            let paths = g.files().into_iter().map(|(p, _)| p);
            c.targets = expand_base(&cfg.targets, "ecommerce", paths)?;
            generator = Some(g);
            expanded = c;
            &expanded
        }
        Workload::Replay => {
            let Some(r) = &cfg.replay else {
                return Err(Error::Invalid(
                    "--workload replay needs a log; give --access-log FILE".into(),
                ));
            };
            let mut paths: Vec<String> = r.plan.requests().iter().map(|q| q.path.clone()).collect();
            paths.sort();
            paths.dedup();
            let mut c = cfg.clone();
            c.targets = expand_base(&cfg.targets, "replay", paths.into_iter())?;
            expanded = c;
            &expanded
        }
        _ => cfg,
    };
    // The client always meters its provider (tens of ns per operation).
    let meter = Meter::new();
    let tls_base = if cfg.targets.iter().any(Target::is_tls) {
        Some(tls::base_config(cfg, &meter)?)
    } else {
        None
    };
    let origins = group_origins(cfg, tls_base.as_ref())?;
    let quic = match (&cfg.http3, &tls_base) {
        (Some(h3), Some(base)) => {
            let mut q = QuicRun::new(cfg, h3, base)?;
            // A browser per arrival: they share a few sockets, not one each.
            if cfg.workload == Workload::Ecommerce && cfg.open_loop.is_some() {
                q.shared_sockets = Some(quic::SHARED_SOCKETS);
            }
            Some(Arc::new(q))
        }
        _ => None,
    };
    // CpuPin checks the CPUs and that pinning works here.
    let pin = cfg.pin_cpus.as_deref().map(CpuPin::new).transpose()?;
    let capacity = cfg.threads.min(
        pin.as_ref()
            .map_or_else(|| allowed_cpus().len(), |p| p.cpus().len())
            .max(1),
    );
    let urls: Vec<String> = cfg.targets.iter().map(Target::to_string).collect();
    let (log, csv) = match &cfg.log {
        Some(path) => {
            let (log, sink) = CsvLog::create(path, urls.clone())?;
            (Some(log), Some(sink))
        }
        None => (None, None),
    };

    let (rt, threads) = RuntimeSpec::new("tlslab-load", cfg.threads)
        .pinned(pin)
        .build()?;
    // `block_on` runs `orchestrate` on this thread: bill it to the client too.
    threads.register();

    // Resolve names before the clock starts; a failure is retried (and
    // counted as `dns`) by each connection.
    rt.block_on(async {
        for o in &origins {
            let _ = o.resolve(cfg.timeout).await;
        }
    });
    // Distributed load: every setup step is done; agents wait here so
    // their windows start together.
    if let Some(at) = cfg.start_at {
        crate::shard::sleep_until(at.checked_sub(cfg.warmup).unwrap_or(at))?;
    }
    let window_start = Instant::now() + cfg.warmup;
    let path_index = origins.first().map_or_else(Default::default, |o| {
        o.paths
            .iter()
            .enumerate()
            .filter_map(|(k, (_, u))| u.path_and_query().map(|p| (p.as_str().to_string(), k)))
            .collect()
    });
    if let Some(r) = &cfg.replay {
        // Fail before the run on a bad window or speed.
        Scheduler::new(r.plan.clone(), r.window, r.pacing).map_err(Error::Workload)?;
    }
    let hdr_log = crate::hdr::open(cfg, window_start)?;
    let collector = Collector::new(cfg.clients.min(cfg.threads.saturating_mul(4)))
        .with_hdr_log(hdr_log.clone());
    let mut shared = Shared::new(cfg, origins, meter, window_start, collector);
    shared.quic = quic.clone();
    shared.csv = csv;
    shared.path_index = path_index;
    shared.offer_held = generator.is_some() || cfg.replay.is_some();
    let socket = shared.socket.clone();
    let shared = Arc::new(shared);
    if cfg.ablation.contains(Ablation::Cache) {
        rt.block_on(prime_universal_session(&shared));
    }
    // `orchestrate` owns the last handle to `shared`, so the log's sender
    // is gone when it returns and `finish` below cannot wait forever.
    let mode = Mode {
        clients: cfg.clients,
        open_loop: cfg.open_loop.map(|ol| (ol, Arc::default())),
        browser: generator.map(|g| Arc::new(BrowserRun::new(g))),
        replay: cfg.replay.clone().map(|r| Arc::new(ReplayRun::new(r))),
    };
    // `--flood`: it starts with the run (its warm-up too) and ends with it.
    let flooding = match cfg.http3.as_ref().and_then(|h| h.flood) {
        Some(plan) => Some(start_flood(cfg, plan, addr_of(&shared)?)?),
        None => None,
    };
    let addr = addr_of(&shared);
    let out = rt.block_on(orchestrate(shared, &mode, threads));
    let flood = flooding.map(crate::quic::flood::Flooding::stop);
    if let Some(q) = &quic {
        rt.block_on(q.close_endpoints(cfg.timeout));
    }
    rt.shutdown_timeout(CLOSE_GRACE);
    if let Some(log) = log {
        log.finish()?;
    }
    crate::hdr::finish(hdr_log.as_ref())?;
    if let (Some(q), Ok(addr)) = (&quic, addr)
        && let Some(e) = q.nobody_answered(cfg, addr)
    {
        return Err(e);
    }

    let mut config = cfg.echo(urls);
    if quic.is_some() {
        // QUIC is TLS 1.3 only, and resumes with tickets.
        config.resume_with = "ticket".into();
        config.versions = vec!["TLSv1.3".into()];
    }
    let window = Window {
        start_unix_ms: out.start_unix_ms,
        measured_s: out.measured.as_secs_f64(),
        observed: "client-observed".into(),
    };
    let cpu = CpuUsage {
        user_s: out.cpu.user.as_secs_f64(),
        sys_s: out.cpu.sys.as_secs_f64(),
        capacity,
    };
    let mut report = tlslab_stats::build_report(config, window, &out.stats, out.unfinished, cpu);
    report.client_cpu.costs = out.costs.map(|c| c.to_schema(out.crypto.crypto_time()));
    report.crypto = tlslab_stats::CryptoPerHandshake::from_totals(
        report.reuse.handshakes,
        Op::ALL.into_iter().map(|op| {
            let t = out.crypto.total(op);
            (op.name(), t.calls, t.nanos)
        }),
    );
    report.http = Some(http_summary(cfg, &report, &out));
    report.ablation = cfg.ablation.iter().map(|a| a.name().to_string()).collect();
    report.ablation_hint = out.ablation_hint;
    report.replay = mode
        .replay
        .as_ref()
        .map(|r| r.report(report.reuse.achieved));
    report.ecommerce = mode.browser.as_ref().map(|b| b.report());
    report.backoff = (out.backoff_waits > 0).then(|| tlslab_stats::Backoff {
        base_ms: cfg.retry_backoff.as_secs_f64() * 1e3,
        waits: out.backoff_waits,
        waited_s: out.backoff_ns as f64 / 1e9,
    });
    report.open_loop = mode.open_loop.as_ref().map(|(o, run)| run.report(o));
    let socket = socket.snapshot();
    report.socket = (socket.connections > 0).then_some(socket);
    if let Some(q) = &quic {
        // Round trips are not counted over QUIC (see h3.rs): no mean.
        report.handshake.full.round_trips_mean = None;
        report.handshake.resumed.round_trips_mean = None;
        report.transport = Some(q.report(flood));
    }
    Ok(report)
}

/// The protocol and the handshake cost amortised over the requests of a
/// connection (`http` in the JSON report).
fn http_summary(cfg: &LoadConfig, report: &LoadReport, out: &Outcome) -> tlslab_stats::Http {
    let completed = report.requests.completed;
    let per_request = |x: f64| (completed > 0).then(|| x / completed as f64);
    let (mut handshake_ns, mut record_ns) = (0u64, 0u64);
    for op in Op::ALL {
        let t = out.crypto.total(op);
        if matches!(op, Op::SealApplication | Op::OpenApplication) {
            record_ns += t.nanos;
        } else {
            handshake_ns += t.nanos;
        }
    }
    // Over QUIC the provider's packet protection is metered as `quic_*`
    // operations, neither handshake nor record: no split per request.
    let quic = cfg.http3.is_some();
    tlslab_stats::Http {
        protocol: match (&cfg.http2, &cfg.http3) {
            (_, Some(_)) => "h3",
            (Some(_), None) => "h2",
            (None, None) => "http/1.1",
        }
        .into(),
        // The e-commerce browser's pages use its own parallelism, not -m.
        max_concurrent_streams: cfg
            .http2
            .map(|h| h.max_concurrent_streams)
            .or(cfg.http3.as_ref().map(|h| h.max_concurrent_streams))
            .map(|m| match (&cfg.workload, &cfg.ecommerce) {
                (Workload::Ecommerce, Some(e)) => e.max_connections.max(1) as u32,
                (Workload::Ecommerce, None) => {
                    tlslab_workload::ecommerce::Config::default().max_connections as u32
                }
                _ => m,
            }),
        connections: out.connections,
        requests_per_connection: (out.connections > 0)
            .then(|| report.requests.attempted as f64 / out.connections as f64),
        handshakes_per_request: per_request(report.reuse.handshakes as f64),
        handshake_crypto_us_per_request: per_request(handshake_ns as f64 / 1e3).filter(|_| !quic),
        record_crypto_us_per_request: per_request(record_ns as f64 / 1e3).filter(|_| !quic),
    }
}

/// The address of the run's first origin, resolved before the run: where
/// a flood goes, and the QUIC server that may not answer.
fn addr_of(sh: &Shared) -> Result<std::net::SocketAddr, Error> {
    let o = &sh.origins[0];
    o.addr.get().copied().ok_or_else(|| Error::Resolve {
        host: o.host.clone(),
        port: o.port,
        source: None,
    })
}

/// Starts `--flood` beside the load against `addr`, for the run's
/// duration and warm-up.
fn start_flood(
    cfg: &LoadConfig,
    plan: crate::protocol::FloodPlan,
    addr: std::net::SocketAddr,
) -> Result<crate::quic::flood::Flooding, Error> {
    use crate::quic::flood;
    let span = cfg.duration.map_or(flood::MAX_DURATION, |d| d + cfg.warmup);
    let mut f = flood::Flood::new(addr, plan.kind, plan.rate, span);
    if let Some(m) = plan.max {
        f.max_initials = m;
    }
    f.allow_remote = plan.allow_remote;
    f.server_name = cfg
        .sni
        .clone()
        .unwrap_or_else(|| cfg.targets[0].host.clone());
    f.seed = cfg.seed;
    // Its own TLS configuration and meter: the flood's key shares and
    // handshakes are not the load's.
    flood::start(f, flood::tls_for(cfg)?)
}

/// `--ablate cache`: one handshake before the clients start and outside
/// the statistics, so that the client side's universal TLS 1.2 session (the
/// first any client stores) is the server's (the first it stores) when the
/// server is fresh. Without it, clients whose first handshakes overlap may
/// adopt different sessions than the server. Failures are left to the run,
/// which meets them again and counts them.
async fn prime_universal_session(sh: &Shared) {
    use tokio::io::AsyncWriteExt;
    let Some((o, (name, base))) = sh
        .origins
        .iter()
        .find_map(|o| o.tls.as_ref().map(|t| (o, t)))
    else {
        return;
    };
    let Ok(addr) = o.resolve(sh.timeout).await else {
        return;
    };
    let config = tls::client_config(base, ClientSessions::new(), &sh.wrap_store, sh.resume_with);
    let connector = TlsConnector::from(config);
    let _ = with_timeout(sh.timeout, async {
        let src = sh.source.as_ref().map(|s| s.for_client(0));
        let tcp = crate::source::connect(src, addr).await?;
        let mut stream = connector.connect(name.clone(), tcp).await?;
        stream.shutdown().await
    })
    .await;
}

struct Outcome {
    /// The client meter over the window.
    crypto: Snapshot,
    ablation_hint: Option<String>,
    stats: tlslab_stats::Stats,
    unfinished: u64,
    start_unix_ms: u64,
    measured: Duration,
    cpu: CpuTime,
    /// With the probes on (`lab --explain`): the threads' costs over the
    /// window.
    costs: Option<ThreadCosts>,
    /// Connections whose first request was measured.
    connections: u64,
    /// Backoff waits after connections that could not be made, and their
    /// total in ns.
    backoff_waits: u64,
    backoff_ns: u64,
}

/// How the clients run, and each mode's own state.
struct Mode {
    clients: usize,
    open_loop: Option<(OpenLoop, Arc<OpenLoopRun>)>,
    browser: Option<Arc<BrowserRun>>,
    replay: Option<Arc<ReplayRun>>,
}

async fn orchestrate(shared: Arc<Shared>, mode: &Mode, threads: Arc<Threads>) -> Outcome {
    let clients = mode.clients;
    let window_start = shared.window_start;
    let progress = shared.progress.is_some().then(|| {
        let sh = shared.clone();
        tokio::spawn(async move {
            if let Some(p) = &sh.progress {
                p.draw(sh.window_start).await;
            }
        })
    });
    let identities: Vec<Arc<Identity>> = (0..clients)
        .map(|id| Arc::new(Identity::new(&shared, id as u32)))
        .collect();
    // Without a warm-up the clients start at the window's start: take the
    // meter's baseline before they can begin their first handshake.
    let early_crypto0 = (Instant::now() >= window_start).then(|| shared.meter.snapshot());
    let mut set = JoinSet::new();
    match (&mode.open_loop, &mode.replay) {
        (None, Some(run)) => {
            let n = run.browsers().min(u32::MAX as usize);
            let browsers: Vec<Arc<Identity>> = (0..n)
                .map(|id| Arc::new(Identity::new(&shared, id as u32)))
                .collect();
            let browsers = Arc::new(browsers);
            for _ in 0..clients {
                set.spawn(replay_worker(shared.clone(), run.clone(), browsers.clone()));
            }
            drop(identities);
        }
        (None, None) => {
            for ident in identities {
                let browser = mode.browser.clone();
                set.spawn(client_task(shared.clone(), ident, browser));
            }
        }
        (Some((ol, run)), _) => {
            let browser = mode.browser.clone();
            set.spawn(open_arrivals(
                shared.clone(),
                run.clone(),
                identities,
                *ol,
                browser,
            ));
        }
    }

    tokio::time::sleep_until(window_start.into()).await;
    let cpu0 = threads.cpu_time();
    let costs0 = tlslab_runtime::costs::probes().map(|_| threads.costs());
    let crypto0 = early_crypto0.unwrap_or_else(|| shared.meter.snapshot());
    // The wall-clock time of `window_start` itself, not of this line (which
    // a busy CPU may delay): agents' start skew is compared on it.
    let start_unix_ms = SystemTime::now()
        .checked_sub(Instant::now().saturating_duration_since(window_start))
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            tracing::error!("a load client stopped abnormally: {e}");
        }
    }
    let end = Instant::now();
    let cpu = threads.cpu_time().since(cpu0);
    let costs = costs0.map(|c0| threads.costs().since(c0));
    let crypto = shared.meter.snapshot().diff(&crypto0);
    if let Some(p) = progress {
        p.abort();
        let _ = p.await;
    }
    Outcome {
        crypto,
        ablation_hint: shared.ablation_hint.lock().take(),
        stats: shared.collector.merged(),
        unfinished: shared.unfinished.load(Ordering::Relaxed),
        start_unix_ms,
        measured: end.saturating_duration_since(window_start),
        cpu,
        costs,
        connections: shared.connections.load(Ordering::Relaxed),
        backoff_waits: shared.backoff_waits.load(Ordering::Relaxed),
        backoff_ns: shared.backoff_ns.load(Ordering::Relaxed),
    }
}

async fn client_task(shared: Arc<Shared>, ident: Arc<Identity>, browser: Option<Arc<BrowserRun>>) {
    let deadline = shared.deadline;
    let mut client = Client::new(shared, ident);
    // Each arm boxed: inline, every client's task would be as large as the
    // larger of the two futures, whichever it runs, and an idle connection
    // keeps its task.
    let _ = match browser {
        Some(b) => until_deadline(deadline, Box::pin(client.browse(&b))).await,
        None => until_deadline(deadline, Box::pin(client.run())).await,
    };
}

/// The workload's `paths` under the one base URL of `targets`.
pub(super) fn expand_base(
    targets: &[Target],
    workload: &str,
    paths: impl Iterator<Item = String>,
) -> Result<Vec<Target>, Error> {
    let [base] = targets else {
        return Err(Error::Invalid(format!(
            "--workload {workload} takes exactly one URL, the server's base (https://host:port)"
        )));
    };
    if base.path != "/" {
        return Err(Error::Invalid(format!(
            "--workload {workload} draws the paths itself; give the base URL without a path \
             ({}://{}) instead of {base}",
            base.scheme.name(),
            base.host_header()
        )));
    }
    Ok(paths
        .map(|path| Target {
            path,
            ..base.clone()
        })
        .collect())
}
