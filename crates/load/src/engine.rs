//! The engine: a runtime of its own, closed-loop clients, and what each
//! connection and request measures.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
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
use tlslab_crypto::store::ClientSessions;
use tlslab_report::{
    Collector, ConfigEcho, CpuUsage, CsvLog, CsvSink, HandshakeKind, LoadReport, RequestRecord,
    Window,
};
use tlslab_runtime::{CpuPin, CpuTime, RuntimeSpec, Threads, allowed_cpus};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use crate::errors::{classify, io_kind};
use crate::io::{CountingIo, HandshakeSlot, HandshakeWatch, RoundTrips};
use crate::progress::Progress;
use crate::reuse::ReusePlanner;
use crate::target::{Scheme, Target};
use crate::{Error, LoadConfig, ResumeWith, tls};

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
    let tls_base = if cfg.targets.iter().any(Target::is_tls) {
        Some(tls::base_config(cfg)?)
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
    let window_start = Instant::now() + cfg.warmup;
    let shared = Arc::new(Shared {
        origins,
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
    });
    // `orchestrate` owns the last handle to `shared`, so the log's sender
    // is gone when it returns and `finish` below cannot wait forever.
    let out = rt.block_on(orchestrate(shared, cfg.clients, threads));
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
    Ok(LoadReport::build(
        config,
        window,
        &out.stats,
        out.unfinished,
        cpu,
    ))
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
    if cfg.duration.is_none() && cfg.requests.is_none() {
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
}

/// Whether a request is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Warmup,
    Measured,
}

impl Shared {
    /// The slot of the next request, or `None` when the run is over.
    fn next_slot(&self) -> Option<Slot> {
        let now = Instant::now();
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
    stats: tlslab_report::Stats,
    unfinished: u64,
    start_unix_ms: u64,
    measured: Duration,
    cpu: CpuTime,
}

async fn orchestrate(shared: Arc<Shared>, clients: usize, threads: Arc<Threads>) -> Outcome {
    let window_start = shared.window_start;
    let progress = shared.progress.is_some().then(|| {
        let sh = shared.clone();
        tokio::spawn(async move {
            if let Some(p) = &sh.progress {
                p.draw(sh.window_start).await;
            }
        })
    });
    let mut set = JoinSet::new();
    for id in 0..clients {
        set.spawn(client_task(shared.clone(), id as u32));
    }

    tokio::time::sleep_until(window_start.into()).await;
    let cpu0 = threads.cpu_time();
    let start_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            tracing::error!("a load client stopped abnormally: {e}");
        }
    }
    let end = Instant::now();
    let cpu = threads.cpu_time().since(cpu0);
    if let Some(p) = progress {
        p.abort();
        let _ = p.await;
    }
    Outcome {
        stats: shared.collector.merged(),
        unfinished: shared.unfinished.load(Ordering::Relaxed),
        start_unix_ms,
        measured: end.saturating_duration_since(window_start),
        cpu,
    }
}

async fn client_task(shared: Arc<Shared>, id: u32) {
    let deadline = shared.deadline;
    let mut client = Client::new(shared, id);
    match deadline {
        Some(d) => {
            tokio::select! {
                () = client.run() => {}
                () = tokio::time::sleep_until(d.into()) => {}
            }
        }
        None => client.run().await,
    }
}

struct ClientTls {
    connector: TlsConnector,
    sessions: Arc<ClientSessions>,
    name: ServerName<'static>,
}

/// One closed-loop client: one connection at a time, its own sessions.
struct Client {
    sh: Arc<Shared>,
    id: u32,
    origin: usize,
    tls: Option<ClientTls>,
    planner: ReusePlanner,
    next_path: usize,
    conn_no: u64,
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
    fn new(sh: Arc<Shared>, id: u32) -> Self {
        let origin = id as usize % sh.origins.len();
        let o = &sh.origins[origin];
        let tls = o.tls.as_ref().map(|(name, base)| {
            let sessions = ClientSessions::new();
            let config = tls::client_config(base, sessions.clone(), sh.resume_with);
            ClientTls {
                connector: TlsConnector::from(config).early_data(sh.early_data),
                sessions,
                name: name.clone(),
            }
        });
        Client {
            planner: ReusePlanner::new(sh.reuse),
            next_path: id as usize / sh.origins.len(),
            origin,
            tls,
            id,
            conn_no: 0,
            sh,
        }
    }

    async fn run(&mut self) {
        let sh = self.sh.clone();
        while let Some(slot) = sh.next_slot() {
            self.connection(&sh, slot).await;
        }
    }

    fn next_target(&mut self, o: &Origin) -> (u32, Uri) {
        let (i, uri) = &o.paths[self.next_path % o.paths.len()];
        self.next_path = self.next_path.wrapping_add(1);
        (*i, uri.clone())
    }

    fn blank_record(
        &self,
        conn: u64,
        req_on_conn: u32,
        target: u32,
        start: Instant,
    ) -> RequestRecord {
        RequestRecord {
            t_start_us: self.sh.us_since_window(start),
            client: self.id,
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
        }
    }

    /// One connection: connect, handshake, then requests until K, an error,
    /// the server closing, or the end of the run.
    async fn connection(&mut self, sh: &Shared, slot: Slot) {
        let o = &sh.origins[self.origin];
        let conn = self.conn_no;
        self.conn_no += 1;
        let t0 = Instant::now();
        let guard = InFlight::new(sh, slot);
        let (target, uri) = self.next_target(o);
        let mut rec = self.blank_record(conn, 0, target, t0);
        let fail = |rec, guard, kind: &str| emit_failure(sh, slot, guard, rec, t0, kind);

        let addr = match o.resolve(sh.timeout).await {
            Ok(a) => a,
            Err(kind) => return fail(rec, guard, kind),
        };
        let tcp = match with_timeout(sh.timeout, TcpStream::connect(addr)).await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return fail(rec, guard, io_kind(&e)),
            None => return fail(rec, guard, "timeout"),
        };
        rec.connect_us = Some(t0.elapsed().as_micros() as u64);
        // Requests are small and latency is measured: do not wait for ACKs.
        let _ = tcp.set_nodelay(true);
        let io = CountingIo::new(tcp, RoundTrips::default());

        let Some(tls) = &self.tls else {
            return self.exchange(sh, io, None, slot, guard, rec, uri, t0).await;
        };
        let offer = self.planner.offer(tls.sessions.has_session());
        tls.sessions.set_offer(offer);
        let hs_start = Instant::now();
        match with_timeout(sh.timeout, tls.connector.connect(tls.name.clone(), io)).await {
            Some(Ok(stream)) => {
                let slot_hs = HandshakeSlot::default();
                let io =
                    HandshakeWatch::new(stream, hs_start, tls.sessions.clone(), slot_hs.clone());
                self.exchange(sh, io, Some(slot_hs), slot, guard, rec, uri, t0)
                    .await
            }
            Some(Err(e)) => {
                let kind = classify(&e);
                if kind.starts_with("tls_") {
                    // A fresh start, as a browser would after a TLS failure.
                    tls.sessions.clear();
                }
                fail(rec, guard, &kind)
            }
            None => fail(rec, guard, "timeout"),
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
            Err(e) => return emit_failure(sh, slot, guard, rec, t0, &classify(&e)),
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
        let o = &sh.origins[self.origin];
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
                Some(Err(e)) => Some(classify(&e)),
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
                self.planner.record(h.kind == HandshakeKind::Resumed);
                rec.handshake = Some(h);
            }
            sh.emit(slot, guard, rec);
            if let Some(e) = &transport_error {
                if e.starts_with("tls_")
                    && let Some(tls) = &self.tls
                {
                    tls.sessions.clear();
                }
                return;
            }
            if last {
                return;
            }

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
            let (target, next_uri) = self.next_target(o);
            uri = next_uri;
            rec = self.blank_record(conn, i, target, start);
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
