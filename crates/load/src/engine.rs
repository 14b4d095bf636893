//! The engine: a runtime of its own, closed-loop clients, and what each
//! connection and request measures.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tlslab_crypto::meter::{Ablation, Meter, Op, Snapshot};
use tlslab_crypto::store::ClientSessions;
use tlslab_report::{
    Collector, ConfigEcho, CpuUsage, CsvLog, CsvSink, HandshakeKind, LoadReport, RequestRecord,
    Window,
};
use tlslab_runtime::{Corked, CpuPin, CpuTime, RuntimeSpec, Threads, allowed_cpus, cork, uncorked};
use tlslab_workload::ecommerce::Generator;
use tlslab_workload::replay::{Pacing, Scheduler};
use tlslab_workload::specweb96::{FILES_PER_CLASS, Sampler};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use crate::errors::{ablation_hint, classify, find_tls, io_kind};
use crate::io::{CountingIo, HandshakeSlot, HandshakeWatch, RoundTrips};
use crate::progress::Progress;
use crate::reuse::ReusePlanner;
use crate::target::{Scheme, Target};
use crate::{Arrivals, Error, LoadConfig, OpenLoop, ResumeWith, ThinkTime, Workload, tls};

/// How long a finished connection may take to close (TLS close_notify and
/// FIN) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The most clients a run may have (client numbers are 32-bit).
const MAX_CLIENTS: usize = 1_000_000;

/// The longest warm-up or duration accepted (a year), so deadlines cannot
/// overflow the clock.
const MAX_SPAN: Duration = Duration::from_secs(365 * 24 * 3600);

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
    validate(cfg)?;
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
            let g = Generator::new(model).map_err(|e| Error::Config(e.to_string()))?;
            let mut c = cfg.clone();
            let paths = g.files().into_iter().map(|(p, _)| p);
            c.targets = expand_base(&cfg.targets, "ecommerce", paths)?;
            generator = Some(g);
            expanded = c;
            &expanded
        }
        Workload::Replay => {
            let Some(r) = &cfg.replay else {
                return Err(Error::Config(
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
        Scheduler::new(r.plan.clone(), r.window, r.pacing)
            .map_err(|e| Error::Config(e.to_string()))?;
    }
    let shared = Arc::new(Shared {
        origins,
        run_start: window_start.checked_sub(cfg.warmup).unwrap_or(window_start),
        window_start,
        deadline: cfg.duration.map(|d| window_start + d),
        budget: cfg.requests.map(AtomicU64::new),
        requests_per_conn: cfg.requests_per_conn,
        timeout: cfg.timeout,
        reuse: cfg.reuse,
        resume_with: cfg.resume_with,
        early_data: cfg.early_data,
        collector: Collector::new(cfg.clients.min(cfg.threads.saturating_mul(4))),
        csv,
        progress: cfg.progress.then(Progress::default),
        unfinished: AtomicU64::new(0),
        workload: cfg.workload,
        seed: cfg.seed,
        think_time: cfg.think_time,
        retry_on_failure: cfg.retry_on_failure,
        in_flight: AtomicUsize::new(0),
        scheduled: AtomicU64::new(0),
        late: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        ecommerce: generator,
        sessions: AtomicU64::new(0),
        new_customers: AtomicU64::new(0),
        pages: AtomicU64::new(0),
        path_index,
        replay: cfg.replay.as_ref().map(|r| ReplayRun {
            spec: r.clone(),
            sched: parking_lot::Mutex::new(None),
            notify: tokio::sync::Notify::new(),
            sessions: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }),
        meter,
        ablation: cfg.ablation,
        ablation_hint: parking_lot::Mutex::new(None),
        wrap_store: Box::new(cfg.ablation.client_store_factory()),
    });
    if cfg.ablation.contains(Ablation::Cache) {
        rt.block_on(prime_universal_session(&shared));
    }
    // `orchestrate` owns the last handle to `shared`, so the log's sender
    // is gone when it returns and `finish` below cannot wait forever.
    let out = rt.block_on(orchestrate(shared, cfg.clients, cfg.open_loop, threads));
    rt.shutdown_timeout(CLOSE_GRACE);
    if let Some(log) = log {
        log.finish()?;
    }

    let config = ConfigEcho {
        targets: urls,
        clients: cfg.clients,
        threads: cfg.threads,
        requests_per_conn: cfg.requests_per_conn,
        reuse: cfg.reuse,
        resume_with: cfg.resume_with.name().into(),
        versions: cfg.versions.iter().map(|v| v.name().to_string()).collect(),
        duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        requests: cfg.requests,
        warmup_s: cfg.warmup.as_secs_f64(),
        timeout_s: (cfg.timeout != Duration::MAX).then_some(cfg.timeout.as_secs_f64()),
        early_data: cfg.early_data,
        workload: cfg.workload.name().into(),
        seed: cfg.seed,
        think_time: cfg.think_time.to_string(),
        retry_on_failure: cfg.retry_on_failure,
    };
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
    let mut report = LoadReport::build(config, window, &out.stats, out.unfinished, cpu);
    report.crypto = tlslab_report::CryptoPerHandshake::from_totals(
        report.reuse.handshakes,
        Op::ALL.into_iter().map(|op| {
            let t = out.crypto.total(op);
            (op.name(), t.calls, t.nanos)
        }),
    );
    report.ablation = cfg.ablation.iter().map(|a| a.name().to_string()).collect();
    report.ablation_hint = out.ablation_hint;
    if let (Some(r), Some(run)) = (&cfg.replay, &out.replay) {
        let plan = r.plan.summary();
        report.replay = Some(tlslab_report::Replay {
            log_requests: plan.requests,
            log_sessions: plan.sessions,
            implied_resumption: plan.implied_resumption_ratio,
            sessions_replayed: run.0,
            requests_replayed: run.1,
            achieved_resumption: report.reuse.achieved,
            window: r.window as u64,
            speed: match r.pacing {
                Pacing::AsFastAsPossible => None,
                Pacing::Timed { speed } => Some(speed),
            },
            skipped_lines: r.skipped_lines,
            excluded_ips: r.filtered.excluded_ips,
            excluded_requests: r.filtered.excluded_requests,
            rate_ips: r.filtered.rate_ips,
            rate_requests: r.filtered.rate_requests,
        });
    }
    if cfg.workload == Workload::Ecommerce {
        report.ecommerce = Some(tlslab_report::Ecommerce {
            sessions: out.sessions,
            new_customers: out.new_customers,
            returning_customers: out.sessions - out.new_customers,
            pages: out.pages,
        });
    }
    report.open_loop = cfg.open_loop.map(|o| tlslab_report::OpenLoop {
        rate: o.rate,
        arrivals: o.arrivals.name().into(),
        max_in_flight: o.max_in_flight,
        scheduled: out.scheduled,
        late: out.late,
        dropped: out.dropped,
    });
    Ok(report)
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
        let tcp = TcpStream::connect(addr).await?;
        let mut stream = connector.connect(name.clone(), tcp).await?;
        stream.shutdown().await
    })
    .await;
}

/// The workload's `paths` under the one base URL of `targets`.
fn expand_base(
    targets: &[Target],
    workload: &str,
    paths: impl Iterator<Item = String>,
) -> Result<Vec<Target>, Error> {
    let [base] = targets else {
        return Err(Error::Config(format!(
            "--workload {workload} takes exactly one URL, the server's base (https://host:port)"
        )));
    };
    if base.path != "/" {
        return Err(Error::Config(format!(
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

fn validate(cfg: &LoadConfig) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::Config(m.into()));
    if cfg.targets.is_empty() {
        return bad("no target URL; give at least one, such as https://127.0.0.1:8443/");
    }
    if cfg.clients == 0 || cfg.clients > MAX_CLIENTS {
        return bad("--clients must be between 1 and 1,000,000");
    }
    if cfg.threads == 0 {
        return bad("--threads must be at least 1");
    }
    if cfg.duration.is_none() && cfg.requests.is_none() && cfg.replay.is_none() {
        return bad("nothing bounds the run; give a duration (-d) or a request count (-n)");
    }
    if cfg.warmup > MAX_SPAN || cfg.duration.is_some_and(|d| d > MAX_SPAN) {
        return bad("the duration and warm-up must each be at most a year");
    }
    if cfg.duration == Some(Duration::ZERO) {
        return bad("the duration is zero; give -d of at least 1ms");
    }
    if cfg.requests == Some(0) {
        return bad("the request count is zero; give -n of at least 1");
    }
    if !(0.0..=1.0).contains(&cfg.reuse) {
        return bad("--reuse must be between 0 and 100 (%)");
    }
    if cfg.timeout.is_zero() {
        return bad("the timeout is zero; give a positive timeout, or none for no limit");
    }
    if let Some(o) = &cfg.open_loop {
        if !(o.rate.is_finite() && o.rate > 0.0 && o.rate <= 1e7) {
            return bad("--rate must be above 0 and at most 10,000,000 arrivals per second");
        }
        if o.max_in_flight == 0 {
            return bad("--max-in-flight must be at least 1");
        }
        if cfg.requests_per_conn != 1 {
            return bad(
                "an open loop makes one request per arrival on a new connection; drop --requests-per-conn",
            );
        }
        if cfg.retry_on_failure || cfg.think_time != ThinkTime::Zero {
            return bad(
                "--retry-on-failure and --think-time describe closed-loop clients; drop them with --rate",
            );
        }
    }
    if cfg.workload == Workload::Replay
        && (cfg.open_loop.is_some()
            || cfg.retry_on_failure
            || cfg.think_time != ThinkTime::Zero
            || cfg.reuse != 0.0
            || cfg.requests_per_conn != 1)
    {
        return bad(
            "a replay takes its order, timing and resumption from the log; \
             drop --rate, --retry-on-failure, --think-time, --reuse and --requests-per-conn",
        );
    }
    if cfg.workload == Workload::Ecommerce
        && (cfg.open_loop.is_some()
            || cfg.retry_on_failure
            || cfg.think_time != ThinkTime::Zero
            || cfg.reuse != 0.0
            || cfg.requests_per_conn != 1)
    {
        return bad(
            "the e-commerce model decides connections, resumption and think times itself; \
             drop --rate, --retry-on-failure, --think-time, --reuse and --requests-per-conn",
        );
    }
    Ok(())
}

/// Targets that share a scheme, host and port: one server, one session
/// store per client.
struct Origin {
    scheme: Scheme,
    host: String,
    port: u16,
    host_header: HeaderValue,
    /// (index in the target list, request URI).
    paths: Vec<(u32, Uri)>,
    /// The server name and base config, for https.
    tls: Option<(ServerName<'static>, ClientConfig)>,
    addr: OnceLock<SocketAddr>,
}

impl Origin {
    /// The address to connect to, resolved once; on failure, the error kind.
    async fn resolve(&self, timeout: Duration) -> Result<SocketAddr, &'static str> {
        if let Some(a) = self.addr.get() {
            return Ok(*a);
        }
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(*self.addr.get_or_init(|| SocketAddr::new(ip, self.port)));
        }
        match with_timeout(
            timeout,
            tokio::net::lookup_host((self.host.as_str(), self.port)),
        )
        .await
        {
            Some(Ok(mut addrs)) => match addrs.next() {
                Some(a) => Ok(*self.addr.get_or_init(|| a)),
                None => Err("dns"),
            },
            Some(Err(_)) => Err("dns"),
            None => Err("timeout"),
        }
    }
}

fn group_origins(cfg: &LoadConfig, base: Option<&ClientConfig>) -> Result<Vec<Origin>, Error> {
    let mut origins: Vec<Origin> = Vec::new();
    for (i, t) in cfg.targets.iter().enumerate() {
        let bad = |reason: &str| Error::BadUrl {
            url: t.to_string(),
            reason: reason.into(),
        };
        let uri: Uri = t
            .path
            .parse()
            .map_err(|_| bad("the path is not valid in a request"))?;
        if let Some(o) = origins
            .iter_mut()
            .find(|o| o.scheme == t.scheme && o.host == t.host && o.port == t.port)
        {
            o.paths.push((i as u32, uri));
            continue;
        }
        let tls = match (t.scheme, base) {
            (Scheme::Https, Some(base)) => {
                Some((tls::server_name(cfg.sni.as_deref(), &t.host)?, base.clone()))
            }
            _ => None,
        };
        origins.push(Origin {
            scheme: t.scheme,
            host: t.host.clone(),
            port: t.port,
            host_header: HeaderValue::from_str(&t.host_header())
                .map_err(|_| bad("the host is not valid in a Host header"))?,
            paths: vec![(i as u32, uri)],
            tls,
            addr: OnceLock::new(),
        });
    }
    Ok(origins)
}

/// `tokio::time::timeout`, `None` on expiry; `Duration::MAX` never expires.
async fn with_timeout<F: Future>(d: Duration, f: F) -> Option<F::Output> {
    tokio::time::timeout(d, f).await.ok()
}

/// State every client reads; the sinks records go to.
struct Shared {
    origins: Vec<Origin>,
    /// The client provider's meter.
    meter: Arc<Meter>,
    /// The client's ablations (`--ablate`).
    ablation: tlslab_crypto::meter::AblationSet,
    /// The first ablation-mismatch explanation seen, for the report.
    ablation_hint: parking_lot::Mutex<Option<String>>,
    /// Wraps each client's session store for the ablations.
    wrap_store: tls::StoreWrapper,
    /// When the run (its warm-up) starts: the origin of open-loop arrivals.
    run_start: Instant,
    window_start: Instant,
    deadline: Option<Instant>,
    /// Measured requests still to start, when `-n` bounds the run.
    budget: Option<AtomicU64>,
    requests_per_conn: u32,
    timeout: Duration,
    reuse: f64,
    resume_with: ResumeWith,
    early_data: bool,
    collector: Collector,
    csv: Option<CsvSink>,
    progress: Option<Progress>,
    unfinished: AtomicU64,
    workload: Workload,
    seed: u64,
    think_time: ThinkTime,
    retry_on_failure: bool,
    /// Open loop: requests in flight now.
    in_flight: AtomicUsize,
    /// Open loop: measured arrivals, late ones, dropped ones.
    scheduled: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
    /// The e-commerce model, when that is the workload.
    ecommerce: Option<Generator>,
    /// E-commerce: measured purchase sessions, those of new customers, and
    /// pages completed.
    sessions: AtomicU64,
    new_customers: AtomicU64,
    pages: AtomicU64,
    /// The single origin's paths: path and query → index in its `paths`.
    path_index: std::collections::HashMap<String, usize>,
    /// The replay, when that is the workload.
    replay: Option<ReplayRun>,
}

/// A replay in progress.
struct ReplayRun {
    spec: crate::Replay,
    /// Created when the replay starts (its clock starts then).
    sched: parking_lot::Mutex<Option<(Scheduler, Instant)>>,
    /// Woken when a request completes.
    notify: tokio::sync::Notify,
    /// Browsers whose first request was measured; measured requests.
    sessions: AtomicU64,
    requests: AtomicU64,
}

/// Whether a request is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Warmup,
    Measured,
}

impl Shared {
    /// The error kind of `e`; a TLS error that a different `--ablate` set on
    /// the server explains is `tls_ablation_mismatch`, and its explanation
    /// is kept for the report.
    fn classify(&self, e: &(dyn std::error::Error + 'static)) -> String {
        if let Some(hint) = find_tls(e).and_then(|t| ablation_hint(t, self.ablation)) {
            let mut h = self.ablation_hint.lock();
            if h.is_none() {
                *h = Some(hint);
            }
            return "tls_ablation_mismatch".into();
        }
        classify(e)
    }

    /// The slot of the next request, or `None` when the run is over.
    fn next_slot(&self) -> Option<Slot> {
        self.slot_at(Instant::now())
    }

    /// The slot of a request that starts at `now`, or `None` when the run
    /// is over.
    fn slot_at(&self, now: Instant) -> Option<Slot> {
        if self.deadline.is_some_and(|d| now >= d) {
            return None;
        }
        if now < self.window_start {
            return Some(Slot::Warmup);
        }
        match &self.budget {
            None => Some(Slot::Measured),
            Some(b) => b
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .ok()
                .map(|_| Slot::Measured),
        }
    }

    /// Returns true if and only if another request may follow (a hint for
    /// `Connection: keep-alive`; the next request still takes a slot).
    fn more_to_come(&self) -> bool {
        self.budget
            .as_ref()
            .is_none_or(|b| b.load(Ordering::Relaxed) > 0)
            && self.deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Hands a finished request to the sinks if it is measured.
    fn emit(&self, slot: Slot, guard: InFlight<'_>, rec: RequestRecord) {
        guard.done();
        if slot == Slot::Warmup {
            return;
        }
        self.collector.record(&rec);
        if let Some(p) = &self.progress {
            p.record(&rec);
        }
        if let Some(csv) = &self.csv {
            // Blocks while the log's queue is full: back-pressure, not loss.
            csv.record(rec);
        }
    }

    /// The target index and URI of `path` on the (single) origin.
    fn target_of(&self, path: &str) -> Option<(u32, Uri)> {
        let k = *self.path_index.get(path)?;
        self.origins.first().and_then(|o| o.paths.get(k).cloned())
    }

    fn us_since_window(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.window_start).as_micros() as u64
    }
}

/// Counts a measured request as unfinished unless it reaches
/// [`Shared::emit`]: dropped at the deadline, it was cut off.
struct InFlight<'a>(Option<&'a AtomicU64>);

impl<'a> InFlight<'a> {
    fn new(shared: &'a Shared, slot: Slot) -> Self {
        InFlight((slot == Slot::Measured).then_some(&shared.unfinished))
    }

    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Outcome {
    /// The client meter over the window.
    crypto: Snapshot,
    ablation_hint: Option<String>,
    stats: tlslab_report::Stats,
    unfinished: u64,
    start_unix_ms: u64,
    measured: Duration,
    cpu: CpuTime,
    scheduled: u64,
    late: u64,
    dropped: u64,
    sessions: u64,
    new_customers: u64,
    pages: u64,
    /// Replay: (sessions, requests) replayed in the window.
    replay: Option<(u64, u64)>,
}

async fn orchestrate(
    shared: Arc<Shared>,
    clients: usize,
    open_loop: Option<OpenLoop>,
    threads: Arc<Threads>,
) -> Outcome {
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
    match open_loop {
        None if shared.replay.is_some() => {
            let n = shared
                .replay
                .as_ref()
                .map_or(0, |r| r.spec.plan.browsers())
                .min(u32::MAX as usize);
            let browsers: Vec<Arc<Identity>> = (0..n)
                .map(|id| Arc::new(Identity::new(&shared, id as u32)))
                .collect();
            let browsers = Arc::new(browsers);
            for _ in 0..clients {
                set.spawn(replay_worker(shared.clone(), browsers.clone()));
            }
            drop(identities);
        }
        None => {
            for ident in identities {
                set.spawn(client_task(shared.clone(), ident));
            }
        }
        Some(ol) => {
            set.spawn(arrivals(shared.clone(), identities, ol));
        }
    }

    tokio::time::sleep_until(window_start.into()).await;
    let cpu0 = threads.cpu_time();
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
        scheduled: shared.scheduled.load(Ordering::Relaxed),
        late: shared.late.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        sessions: shared.sessions.load(Ordering::Relaxed),
        new_customers: shared.new_customers.load(Ordering::Relaxed),
        pages: shared.pages.load(Ordering::Relaxed),
        replay: shared.replay.as_ref().map(|r| {
            (
                r.sessions.load(Ordering::Relaxed),
                r.requests.load(Ordering::Relaxed),
            )
        }),
    }
}

/// Runs `f` until it ends or the run's deadline passes.
async fn until_deadline(deadline: Option<Instant>, f: impl Future<Output = ()>) {
    match deadline {
        Some(d) => {
            tokio::select! {
                () = f => {}
                () = tokio::time::sleep_until(d.into()) => {}
            }
        }
        None => f.await,
    }
}

async fn client_task(shared: Arc<Shared>, ident: Arc<Identity>) {
    let deadline = shared.deadline;
    let mut client = Client::new(shared, ident);
    match client.sh.ecommerce.clone() {
        Some(g) => until_deadline(deadline, client.browse(g)).await,
        None => until_deadline(deadline, client.run()).await,
    }
}

/// Waits at most this long for a completion before looking again.
const REPLAY_POLL: Duration = Duration::from_millis(10);

/// One replay worker: takes the next request the scheduler allows (per-IP
/// order, window bound, pacing), makes it as its IP's browser on a new
/// connection, and reports it complete (failed ones too, so the window
/// moves on).
async fn replay_worker(sh: Arc<Shared>, browsers: Arc<Vec<Arc<Identity>>>) {
    let deadline = sh.deadline;
    until_deadline(deadline, async {
        let Some(run) = &sh.replay else { return };
        loop {
            let notified = run.notify.notified();
            let (req, wait) = {
                let mut guard = run.sched.lock();
                let (sched, start) = guard.get_or_insert_with(|| {
                    let s = Scheduler::new(run.spec.plan.clone(), run.spec.window, run.spec.pacing)
                        .unwrap_or_else(|_| {
                            // Checked before the run started.
                            Scheduler::new(run.spec.plan.clone(), 1, Pacing::AsFastAsPossible)
                                .expect("window 1, no pacing is valid")
                        });
                    (s, Instant::now())
                });
                if sched.finished() {
                    return;
                }
                let now = start.elapsed();
                match sched.issue_at(now) {
                    Some(r) => (Some(r), None),
                    None => (None, sched.next_due().map(|d| d.saturating_sub(now))),
                }
            };
            let Some(req) = req else {
                let wait = wait
                    .unwrap_or(REPLAY_POLL)
                    .clamp(Duration::from_micros(100), REPLAY_POLL);
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            };
            let Some(slot) = sh.next_slot() else { return };
            let Some(ident) = browsers.get(req.browser) else {
                return;
            };
            if slot == Slot::Measured {
                run.requests.fetch_add(1, Ordering::Relaxed);
                if req.full_handshake {
                    run.sessions.fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut c = Client::new(sh.clone(), ident.clone());
            c.fixed = sh.target_of(&req.path);
            c.connection(&sh, slot, None).await;
            let _ = run.sched.lock().as_mut().map(|(s, _)| s.complete(req.id));
            run.notify.notify_waiters();
        }
    })
    .await;
}

/// An open loop's arrivals are this much late before they count as late.
const LATE: Duration = Duration::from_millis(1);

/// The open loop: one arrival after another at the intended times, each a
/// task of its own making one request, so a slow server does not slow the
/// arrivals (no coordinated omission). The times are kept by a blocking
/// thread sleeping with the OS's precision (tokio's timer has a 1 ms tick,
/// which would make most arrivals late by the 1 ms threshold).
async fn arrivals(sh: Arc<Shared>, identities: Vec<Arc<Identity>>, ol: OpenLoop) {
    let handle = tokio::runtime::Handle::current();
    let pending = tokio::task::spawn_blocking(move || schedule(&sh, &identities, ol, &handle))
        .await
        .unwrap_or_default();
    for task in pending {
        let _ = task.await;
    }
}

/// Starts the arrivals at their intended times until the run's bounds;
/// returns the tasks still running.
fn schedule(
    sh: &Arc<Shared>,
    identities: &[Arc<Identity>],
    ol: OpenLoop,
    handle: &tokio::runtime::Handle,
) -> Vec<tokio::task::JoinHandle<()>> {
    // A stream no client uses: clients use `rng(seed, client)`.
    let mut rng = tlslab_workload::rng(sh.seed, u64::MAX);
    let mean = Duration::from_secs_f64(1.0 / ol.rate);
    let gap = match ol.arrivals {
        Arrivals::Poisson => ThinkTime::Exp { mean },
        Arrivals::Constant => ThinkTime::Const(mean),
    };
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut intended = sh.run_start;
    let mut n: usize = 0;
    loop {
        intended += gap.sample(&mut rng);
        if sh.deadline.is_some_and(|d| intended >= d) {
            break;
        }
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        if tasks.len() >= 1024 {
            tasks.retain(|t| !t.is_finished());
        }
        let Some(slot) = sh.slot_at(intended) else {
            break;
        };
        let measured = slot == Slot::Measured;
        if measured {
            sh.scheduled.fetch_add(1, Ordering::Relaxed);
        }
        let cap = ol.max_in_flight;
        if sh
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f < cap).then_some(f + 1)
            })
            .is_err()
        {
            if measured {
                sh.dropped.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let ident = identities[n % identities.len()].clone();
        n = n.wrapping_add(1);
        tasks.push(handle.spawn(arrival(sh.clone(), ident, slot, intended)));
    }
    tasks
}

/// Releases an open-loop in-flight place when dropped.
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open-loop arrival: one request on a new connection, its latency
/// counted from `intended`.
async fn arrival(sh: Arc<Shared>, ident: Arc<Identity>, slot: Slot, intended: Instant) {
    let _place = Place(&sh.in_flight);
    if slot == Slot::Measured && Instant::now().saturating_duration_since(intended) > LATE {
        sh.late.fetch_add(1, Ordering::Relaxed);
    }
    let deadline = sh.deadline;
    let mut client = Client::new(sh.clone(), ident);
    until_deadline(deadline, client.connection(&sh, slot, Some(intended))).await;
}

struct ClientTls {
    connector: TlsConnector,
    sessions: Arc<ClientSessions>,
    name: ServerName<'static>,
}

/// Where a client's next path comes from.
enum Picker {
    /// The origin's paths in turn, from this position.
    Turn(usize),
    /// The SPECweb96 mix (paths in `specweb96::files` order).
    Specweb96(Box<Sampler>),
}

/// What a client identity remembers between its requests.
struct IdState {
    planner: ReusePlanner,
    picker: Picker,
    conn_no: u64,
    think: tlslab_workload::Rng,
}

/// A client identity: its number, its origin, its session store and reuse
/// counters. A closed-loop client is one identity; an open loop's
/// arrivals share a pool of them, concurrently.
struct Identity {
    id: u32,
    origin: usize,
    tls: Option<ClientTls>,
    state: parking_lot::Mutex<IdState>,
}

impl Identity {
    fn new(sh: &Shared, id: u32) -> Self {
        let origin = id as usize % sh.origins.len();
        let o = &sh.origins[origin];
        let tls = o.tls.as_ref().map(|(name, base)| {
            let sessions = ClientSessions::new();
            let config = tls::client_config(base, sessions.clone(), &sh.wrap_store, sh.resume_with);
            ClientTls {
                connector: TlsConnector::from(config).early_data(sh.early_data),
                sessions,
                name: name.clone(),
            }
        });
        let picker = match sh.workload {
            Workload::Specweb96 => Picker::Specweb96(Box::new(Sampler::with_rng(
                tlslab_workload::rng(sh.seed, u64::from(id)),
            ))),
            _ => Picker::Turn(id as usize / sh.origins.len()),
        };
        Identity {
            id,
            origin,
            tls,
            state: parking_lot::Mutex::new(IdState {
                planner: ReusePlanner::new(sh.reuse),
                picker,
                conn_no: 0,
                // Think times: streams above the path streams.
                think: tlslab_workload::rng(sh.seed, (1 << 32) | u64::from(id)),
            }),
        }
    }

    /// After a failure without `--retry-on-failure`: a new client, with no
    /// stored sessions and fresh reuse counters.
    fn renew(&self, reuse: f64) {
        if let Some(tls) = &self.tls {
            tls.sessions.clear();
        }
        self.state.lock().planner = ReusePlanner::new(reuse);
    }
}

/// A client making requests as one identity: a closed-loop client, or one
/// open-loop arrival.
struct Client {
    sh: Arc<Shared>,
    ident: Arc<Identity>,
    /// The request to repeat after a failure (`--retry-on-failure`).
    retry: Option<(u32, Uri)>,
    /// The request to make next, chosen by a browser model.
    fixed: Option<(u32, Uri)>,
}

/// What one request saw, kept outside its timeout so a cut-off request
/// still reports how far it got.
#[derive(Default)]
struct Partial {
    sent: Option<Instant>,
    head: Option<Instant>,
    end: Option<Instant>,
    status: Option<u16>,
    body: u64,
}

impl Client {
    fn new(sh: Arc<Shared>, ident: Arc<Identity>) -> Self {
        Client {
            sh,
            ident,
            retry: None,
            fixed: None,
        }
    }

    /// A browser of the e-commerce model: purchase sessions one after
    /// another, each page's HTML alone first, then its inline objects over
    /// at most `max_connections` parallel connections (one request each),
    /// the next page only after the whole page, then the page's think time.
    async fn browse(&mut self, generator: Generator) {
        let sh = self.sh.clone();
        let max = generator.config().max_connections.max(1);
        let mut browser = generator.browser(sh.seed, u64::from(self.ident.id));
        loop {
            let session = browser.next_session();
            if session.clear_tls_sessions
                && let Some(tls) = &self.ident.tls
            {
                tls.sessions.clear();
            }
            let mut counted = false;
            for page in &session.pages {
                let Some((html, inline)) = page.objects.split_first() else {
                    continue;
                };
                let Some(slot) = sh.next_slot() else { return };
                if !counted && slot == Slot::Measured {
                    sh.sessions.fetch_add(1, Ordering::Relaxed);
                    if session.new_customer {
                        sh.new_customers.fetch_add(1, Ordering::Relaxed);
                    }
                }
                counted = true;
                self.fixed = sh.target_of(&html.path);
                self.connection(&sh, slot, None).await;
                let mut set = JoinSet::new();
                let mut over = false;
                for obj in inline {
                    while set.len() >= max {
                        let _ = set.join_next().await;
                    }
                    let Some(slot) = sh.next_slot() else {
                        over = true;
                        break;
                    };
                    let mut c = Client::new(sh.clone(), self.ident.clone());
                    c.fixed = sh.target_of(&obj.path);
                    set.spawn(async move {
                        let sh = c.sh.clone();
                        c.connection(&sh, slot, None).await;
                    });
                }
                while set.join_next().await.is_some() {}
                if over {
                    return;
                }
                if slot == Slot::Measured {
                    sh.pages.fetch_add(1, Ordering::Relaxed);
                }
                if !page.think_after.is_zero() {
                    tokio::time::sleep(page.think_after).await;
                }
            }
        }
    }

    async fn run(&mut self) {
        let sh = self.sh.clone();
        let mut first = true;
        loop {
            if !first {
                self.think().await;
            }
            first = false;
            let Some(slot) = sh.next_slot() else { return };
            self.connection(&sh, slot, None).await;
        }
    }

    /// Pauses for a think time, if the run has one.
    async fn think(&self) {
        if self.sh.think_time == ThinkTime::Zero {
            return;
        }
        let d = self
            .sh
            .think_time
            .sample(&mut self.ident.state.lock().think);
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// The next request: the failed one again, or the next path. Returns
    /// whether it is a retry.
    fn next_target(&mut self, o: &Origin) -> (u32, Uri, bool) {
        if let Some((i, uri)) = self.retry.take() {
            return (i, uri, true);
        }
        if let Some((i, uri)) = self.fixed.take() {
            return (i, uri, false);
        }
        let mut st = self.ident.state.lock();
        let k = match &mut st.picker {
            Picker::Turn(next) => {
                let k = *next % o.paths.len();
                *next = next.wrapping_add(1);
                k
            }
            Picker::Specweb96(s) => {
                let f = s.next();
                (f.class * FILES_PER_CLASS + f.index) % o.paths.len()
            }
        };
        let (i, uri) = &o.paths[k];
        (*i, uri.clone(), false)
    }

    /// Reacts to a failed request (no complete response): remember it for
    /// a retry, or become a new client.
    fn failed(&mut self, target: u32, uri: Uri) {
        if self.sh.retry_on_failure {
            self.retry = Some((target, uri));
        } else {
            self.ident.renew(self.sh.reuse);
        }
    }

    fn blank_record(
        &self,
        conn: u64,
        req_on_conn: u32,
        target: u32,
        start: Instant,
        retry: bool,
    ) -> RequestRecord {
        RequestRecord {
            t_start_us: self.sh.us_since_window(start),
            client: self.ident.id,
            conn,
            req_on_conn,
            target,
            status: None,
            error: None,
            connect_us: None,
            handshake: None,
            ttfb_us: None,
            transfer_us: None,
            total_us: 0,
            body_bytes: 0,
            retry,
        }
    }

    /// Counts a request that failed before any HTTP exchange, and reacts
    /// to the failure.
    #[allow(clippy::too_many_arguments)]
    fn fail(
        &mut self,
        sh: &Shared,
        slot: Slot,
        guard: InFlight<'_>,
        rec: RequestRecord,
        start: Instant,
        kind: &str,
        uri: Uri,
    ) {
        let target = rec.target;
        emit_failure(sh, slot, guard, rec, start, kind);
        self.failed(target, uri);
    }

    /// One connection: connect, handshake, then requests until K, an error,
    /// the server closing, or the end of the run. With `intended` (an open
    /// loop's arrival time), the first request's start and total time count
    /// from then rather than from now; connect time is always its own.
    async fn connection(&mut self, sh: &Shared, slot: Slot, intended: Option<Instant>) {
        let o = &sh.origins[self.ident.origin];
        let conn = {
            let mut st = self.ident.state.lock();
            st.conn_no += 1;
            st.conn_no - 1
        };
        let t0 = Instant::now();
        let start = intended.unwrap_or(t0);
        let guard = InFlight::new(sh, slot);
        let (target, uri, retry) = self.next_target(o);
        let mut rec = self.blank_record(conn, 0, target, start, retry);
        let ident = self.ident.clone();

        let addr = match o.resolve(sh.timeout).await {
            Ok(a) => a,
            Err(kind) => return self.fail(sh, slot, guard, rec, start, kind, uri),
        };
        let tcp = match with_timeout(sh.timeout, TcpStream::connect(addr)).await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return self.fail(sh, slot, guard, rec, start, io_kind(&e), uri),
            None => return self.fail(sh, slot, guard, rec, start, "timeout", uri),
        };
        rec.connect_us = Some(t0.elapsed().as_micros() as u64);
        // Requests are small and latency is measured: do not wait for ACKs.
        let _ = tcp.set_nodelay(true);
        // What is flushed before the task waits leaves in one write (see
        // tlslab_runtime::cork): the TLS Finished flight with the first
        // request, a 0-RTT ClientHello with its early data.
        let (corked, uncork) = cork(tcp);
        let io = CountingIo::new(corked, RoundTrips::default());
        // Boxed: inline, the TLS and HTTP state would be laid out next to
        // this function's own, making every client's task future (and so
        // each idle connection) 20 KiB instead of 10 KiB.
        uncorked(
            uncork,
            Box::pin(self.over(sh, io, ident, slot, guard, rec, uri, start)),
        )
        .await;
    }

    /// The rest of [`connection`](Self::connection) once TCP is up: the TLS
    /// handshake (if any) and the HTTP exchange.
    #[allow(clippy::too_many_arguments)]
    async fn over(
        &mut self,
        sh: &Shared,
        io: CountingIo<Corked<TcpStream>>,
        ident: Arc<Identity>,
        slot: Slot,
        guard: InFlight<'_>,
        rec: RequestRecord,
        uri: Uri,
        start: Instant,
    ) {
        let Some(tls) = &ident.tls else {
            return self
                .exchange(sh, io, None, slot, guard, rec, uri, start)
                .await;
        };
        // A browser model or a replay resumes whenever it holds a session.
        let offer = if sh.ecommerce.is_some() || sh.replay.is_some() {
            tls.sessions.has_session()
        } else {
            ident.state.lock().planner.offer(tls.sessions.has_session())
        };
        tls.sessions.set_offer(offer);
        let hs_start = Instant::now();
        match with_timeout(sh.timeout, tls.connector.connect(tls.name.clone(), io)).await {
            Some(Ok(stream)) => {
                let slot_hs = HandshakeSlot::default();
                let io =
                    HandshakeWatch::new(stream, hs_start, tls.sessions.clone(), slot_hs.clone());
                self.exchange(sh, io, Some(slot_hs), slot, guard, rec, uri, start)
                    .await
            }
            Some(Err(e)) => {
                let kind = sh.classify(&e);
                if kind.starts_with("tls_") {
                    // A fresh start, as a browser would after a TLS failure.
                    tls.sessions.clear();
                }
                self.fail(sh, slot, guard, rec, start, &kind, uri)
            }
            None => self.fail(sh, slot, guard, rec, start, "timeout", uri),
        }
    }

    /// The HTTP/1.1 part of a connection. The connection future is driven
    /// in this task, alongside the requests.
    #[allow(clippy::too_many_arguments)]
    async fn exchange<IO>(
        &mut self,
        sh: &Shared,
        io: IO,
        hs: Option<HandshakeSlot>,
        slot: Slot,
        guard: InFlight<'_>,
        rec: RequestRecord,
        uri: Uri,
        t0: Instant,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let (sender, conn) = match http1::handshake(TokioIo::new(io)).await {
            Ok(x) => x,
            Err(e) => return self.fail(sh, slot, guard, rec, t0, &sh.classify(&e), uri),
        };
        let mut conn = std::pin::pin!(conn);
        let mut reqs = std::pin::pin!(self.requests(sh, sender, hs, slot, guard, rec, uri, t0));
        let conn_ended_first = tokio::select! {
            biased;
            () = &mut reqs => false,
            _ = &mut conn => true,
        };
        if conn_ended_first {
            // The requests now fail fast (the dispatcher is gone) and
            // report why.
            reqs.await;
        } else {
            // Let the connection close cleanly (close_notify, FIN).
            let _ = with_timeout(CLOSE_GRACE.min(sh.timeout), conn).await;
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn requests(
        &mut self,
        sh: &Shared,
        mut sender: SendRequest<Empty<Bytes>>,
        hs: Option<HandshakeSlot>,
        first_slot: Slot,
        first_guard: InFlight<'_>,
        first_rec: RequestRecord,
        first_uri: Uri,
        t0: Instant,
    ) {
        let o = &sh.origins[self.ident.origin];
        let k = sh.requests_per_conn;
        let conn = first_rec.conn;
        let (mut slot, mut guard, mut rec, mut uri, mut start) =
            (first_slot, first_guard, first_rec, first_uri, t0);
        let mut i: u32 = 0;
        loop {
            let last = (k != 0 && i + 1 >= k) || !sh.more_to_come();
            let req = request(&uri, &o.host_header, last);
            let mut p = Partial::default();
            let result = with_timeout(sh.timeout, send(&mut sender, req, &mut p)).await;
            let end = p.end.unwrap_or_else(Instant::now);
            rec.status = p.status;
            rec.body_bytes = p.body;
            if let (Some(sent), Some(head)) = (p.sent, p.head) {
                rec.ttfb_us = Some((head - sent).as_micros() as u64);
                if let Some(e) = p.end {
                    rec.transfer_us = Some((e - head).as_micros() as u64);
                }
            }
            rec.total_us = (end - start).as_micros() as u64;
            let transport_error = match result {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(sh.classify(&e)),
                None => Some("timeout".to_string()),
            };
            rec.error = transport_error.clone().or_else(|| {
                p.status
                    .filter(|s| !(200..300).contains(s))
                    .map(|s| format!("http_{s}"))
            });
            if i == 0
                && let Some(h) = hs.as_ref().and_then(|h| h.lock().take())
            {
                self.ident
                    .state
                    .lock()
                    .planner
                    .record(h.kind == HandshakeKind::Resumed);
                rec.handshake = Some(h);
            }
            let target = rec.target;
            sh.emit(slot, guard, rec);
            if let Some(e) = &transport_error {
                if e.starts_with("tls_")
                    && let Some(tls) = &self.ident.tls
                {
                    tls.sessions.clear();
                }
                self.failed(target, uri);
                return;
            }
            if last {
                return;
            }
            self.think().await;

            // The next request on this connection, if the server keeps it.
            match with_timeout(sh.timeout, sender.ready()).await {
                Some(Ok(())) => {}
                _ => return,
            }
            let Some(next) = sh.next_slot() else { return };
            i += 1;
            slot = next;
            guard = InFlight::new(sh, slot);
            start = Instant::now();
            let (target, next_uri, retry) = self.next_target(o);
            uri = next_uri;
            rec = self.blank_record(conn, i, target, start, retry);
        }
    }
}

/// Counts a request that failed before any HTTP exchange.
fn emit_failure(
    sh: &Shared,
    slot: Slot,
    guard: InFlight<'_>,
    mut rec: RequestRecord,
    t0: Instant,
    kind: &str,
) {
    rec.error = Some(kind.to_string());
    rec.total_us = t0.elapsed().as_micros() as u64;
    sh.emit(slot, guard, rec);
}

fn request(uri: &Uri, host: &HeaderValue, last: bool) -> Request<Empty<Bytes>> {
    let mut req = Request::new(Empty::new());
    *req.uri_mut() = uri.clone();
    let h = req.headers_mut();
    h.insert(HOST, host.clone());
    h.insert(
        CONNECTION,
        HeaderValue::from_static(if last { "close" } else { "keep-alive" }),
    );
    h.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("tlslab/", env!("CARGO_PKG_VERSION"))),
    );
    req
}

/// Sends one request and reads its body to the end, noting times in `p`.
async fn send(
    sender: &mut SendRequest<Empty<Bytes>>,
    req: Request<Empty<Bytes>>,
    p: &mut Partial,
) -> Result<(), hyper::Error> {
    p.sent = Some(Instant::now());
    let resp = sender.send_request(req).await?;
    p.head = Some(Instant::now());
    p.status = Some(resp.status().as_u16());
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame?.data_ref() {
            p.body += d.len() as u64;
        }
    }
    p.end = Some(Instant::now());
    Ok(())
}
