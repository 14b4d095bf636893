//! The state every client reads, whatever the mode: origins, the run's
//! bounds and slots, and the sinks measured requests go to. Each mode's own
//! state lives with the mode (open_loop, browser, replay).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use http::{HeaderValue, Uri};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tlslab_crypto::meter::Meter;
use tlslab_stats::{Collector, CsvSink, RequestRecord};

use crate::config::{LoadConfig, ResumeWith, Workload};
use crate::conn::{WithTimeout, with_deadline, with_timeout};
use crate::error::Error;
use crate::errors::{ablation_hint, classify, find_tls};
use crate::progress::Progress;
use crate::target::Scheme;
use crate::tls;
use tlslab_workload::think::ThinkTime;

/// Targets that share a scheme, host and port: one server, one session
/// store per client.
pub(super) struct Origin {
    pub(super) scheme: Scheme,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) host_header: HeaderValue,
    /// (index in the target list, request URI).
    pub(super) paths: Vec<(u32, Uri)>,
    /// The server name and base config, for https.
    pub(super) tls: Option<(ServerName<'static>, ClientConfig)>,
    pub(super) addr: OnceLock<SocketAddr>,
}

impl Origin {
    /// The address to connect to, resolved once; on failure, the error kind.
    pub(super) async fn resolve(&self, timeout: Duration) -> Result<SocketAddr, &'static str> {
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

pub(super) fn group_origins(
    cfg: &LoadConfig,
    base: Option<&ClientConfig>,
) -> Result<Vec<Origin>, Error> {
    let mut origins: Vec<Origin> = Vec::new();
    for (i, t) in cfg.targets.iter().enumerate() {
        let (uri, host_header) = t.request_parts()?;
        if let Some(o) = origins
            .iter_mut()
            .find(|o| o.scheme == t.scheme && o.host == t.host && o.port == t.port)
        {
            o.paths.push((i as u32, uri));
            continue;
        }
        let tls = match (t.scheme, base) {
            (Scheme::Https, Some(base)) => Some((
                crate::target::server_name(cfg.sni.as_deref(), &t.host)?,
                base.clone(),
            )),
            _ => None,
        };
        origins.push(Origin {
            scheme: t.scheme,
            host: t.host.clone(),
            port: t.port,
            host_header,
            paths: vec![(i as u32, uri)],
            tls,
            addr: OnceLock::new(),
        });
    }
    Ok(origins)
}

/// How long a finished connection may take to close (TLS close_notify and
/// FIN) before it is dropped.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Runs `f` until it ends or the run's deadline passes (`None` when it
/// did not end).
pub(super) fn until_deadline<F: Future<Output = ()>>(
    deadline: Option<Instant>,
    f: F,
) -> WithTimeout<F> {
    match deadline {
        Some(d) => with_deadline(d, f),
        None => with_timeout(Duration::MAX, f),
    }
}

/// State every client reads; the sinks records go to.
pub(super) struct Shared {
    pub(super) origins: Vec<Origin>,
    /// The client provider's meter.
    pub(super) meter: Arc<Meter>,
    /// The client's ablations (`--ablate`).
    pub(super) ablation: tlslab_crypto::meter::AblationSet,
    /// The first ablation-mismatch explanation seen, for the report.
    pub(super) ablation_hint: parking_lot::Mutex<Option<String>>,
    /// Wraps each client's session store for the ablations.
    pub(super) wrap_store: tls::StoreWrapper,
    /// When the run (its warm-up) starts: the origin of open-loop arrivals.
    pub(super) run_start: Instant,
    pub(super) window_start: Instant,
    pub(super) deadline: Option<Instant>,
    /// Measured requests still to start, when `-n` bounds the run.
    pub(super) budget: Option<AtomicU64>,
    pub(super) requests_per_conn: u32,
    /// Measured connections: records that were their connection's first
    /// request (`req_on_conn` 0).
    pub(super) connections: AtomicU64,
    pub(super) timeout: Duration,
    /// `--source-ip`: the local addresses clients bind to.
    pub(super) source: Option<crate::source::SourceAddrs>,
    /// `--mss`: the maximum segment size clients announce.
    pub(super) mss: Option<u32>,
    pub(super) reuse: f64,
    pub(super) resume_with: ResumeWith,
    pub(super) early_data: bool,
    /// `--h2`: the protocol every connection speaks (else HTTP/1.1).
    pub(super) http2: Option<crate::protocol::Http2>,
    /// `--h3`: every connection speaks HTTP/3 over QUIC; the run's QUIC
    /// state.
    pub(super) quic: Option<Arc<super::quic::QuicRun>>,
    pub(super) collector: Collector,
    pub(super) csv: Option<CsvSink>,
    pub(super) progress: Option<Progress>,
    pub(super) unfinished: AtomicU64,
    pub(super) workload: Workload,
    pub(super) seed: u64,
    pub(super) think_time: ThinkTime,
    pub(super) retry_on_failure: bool,
    /// The base of the backoff after connections that could not be made
    /// ([`super::backoff`]); the waits made and their total, ns.
    pub(super) retry_backoff: Duration,
    pub(super) backoff_waits: AtomicU64,
    pub(super) backoff_ns: AtomicU64,
    /// The single origin's paths: path and query → index in its `paths`
    /// (for the browser models and the replay, which name their paths).
    pub(super) path_index: std::collections::HashMap<String, usize>,
    /// Offer a stored session whenever there is one (the e-commerce model
    /// and the replay decide resumption themselves) rather than as the
    /// reuse planner says.
    pub(super) offer_held: bool,
    /// Socket bytes of every TCP connection (`LoadReport::socket`).
    pub(super) socket: Arc<crate::io::SocketTotals>,
}

/// Whether a request is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Warmup,
    Measured,
}

impl Shared {
    /// The state of a run of `cfg` against `origins`, its window starting
    /// at `window_start`, its requests counted into `collector`: no QUIC
    /// state, CSV log or named paths yet (the caller sets those it has).
    pub(super) fn new(
        cfg: &LoadConfig,
        origins: Vec<Origin>,
        meter: Arc<Meter>,
        window_start: Instant,
        collector: Collector,
    ) -> Shared {
        Shared {
            origins,
            run_start: window_start.checked_sub(cfg.warmup).unwrap_or(window_start),
            window_start,
            deadline: cfg.duration.map(|d| window_start + d),
            budget: cfg.requests.map(AtomicU64::new),
            requests_per_conn: cfg.requests_per_conn,
            connections: AtomicU64::new(0),
            timeout: cfg.timeout,
            source: cfg.source_ip.clone(),
            mss: cfg.mss,
            reuse: cfg.reuse,
            resume_with: cfg.resume_with,
            early_data: cfg.early_data,
            http2: cfg.http2,
            quic: None,
            collector,
            csv: None,
            progress: cfg.progress.then(Progress::default),
            unfinished: AtomicU64::new(0),
            workload: cfg.workload,
            seed: cfg.seed,
            think_time: cfg.think_time,
            retry_on_failure: cfg.retry_on_failure,
            retry_backoff: cfg.retry_backoff,
            backoff_waits: AtomicU64::new(0),
            backoff_ns: AtomicU64::new(0),
            path_index: Default::default(),
            offer_held: false,
            meter,
            ablation: cfg.ablation,
            ablation_hint: parking_lot::Mutex::new(None),
            wrap_store: tls::store_wrapper(cfg),
            socket: Arc::default(),
        }
    }

    /// The error kind of `e`; a TLS error that a different `--ablate` set on
    /// the server explains is `tls_ablation_mismatch`, and its explanation
    /// is kept for the report.
    pub(super) fn classify(&self, e: &(dyn std::error::Error + 'static)) -> String {
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
    pub(super) fn next_slot(&self) -> Option<Slot> {
        self.slot_at(Instant::now())
    }

    /// The slot of a request that starts at `now`: warm-up before the
    /// window, else measured, taking one from the `-n` budget; `None` when
    /// the run is over (its deadline passed or the budget is spent).
    pub(super) fn slot_at(&self, now: Instant) -> Option<Slot> {
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
    pub(super) fn more_to_come(&self) -> bool {
        self.budget
            .as_ref()
            .is_none_or(|b| b.load(Ordering::Relaxed) > 0)
            && self.deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Hands a finished request to the sinks if it is measured.
    pub(super) fn emit(&self, slot: Slot, guard: InFlight<'_>, rec: RequestRecord) {
        guard.done();
        if slot == Slot::Warmup {
            return;
        }
        if rec.req_on_conn == 0 {
            self.connections.fetch_add(1, Ordering::Relaxed);
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
    pub(super) fn target_of(&self, path: &str) -> Option<(u32, Uri)> {
        let k = *self.path_index.get(path)?;
        self.origins.first().and_then(|o| o.paths.get(k).cloned())
    }

    pub(super) fn us_since_window(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.window_start).as_micros() as u64
    }
}

/// Counts a measured request as unfinished unless it reaches
/// [`Shared::emit`]: dropped at the deadline, it was cut off.
pub(super) struct InFlight<'a>(Option<&'a AtomicU64>);

impl<'a> InFlight<'a> {
    pub(super) fn new(shared: &'a Shared, slot: Slot) -> Self {
        InFlight((slot == Slot::Measured).then_some(&shared.unfinished))
    }

    pub(super) fn done(mut self) {
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
