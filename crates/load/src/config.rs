//! What a load run is told: [`LoadConfig`] and the choices it holds.
//! Checked by [`LoadConfig::validate`] before any work.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tlslab_crypto::provider::{Algorithms, Version};
use tlslab_stats::ConfigEcho;
use tlslab_workload::think::ThinkTime;

use crate::error::Error;
use crate::protocol::{Http2, Http3};
use crate::source;
use crate::target::Target;

/// Where request paths come from.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Workload {
    /// The target URLs, each client walking them in turn.
    #[default]
    Urls,
    /// The SPECweb96 mix: one base URL (`https://host:port`), paths drawn
    /// by [`tlslab_workload::specweb96::Sampler`] with the stream
    /// `rng(seed, client)` of each client.
    #[cfg_attr(
        feature = "clap",
        value(help = "The SPECweb96 mix (35/50/14/1 % over four size classes); give one base URL")
    )]
    Specweb96,
    /// The e-commerce browser model of [`LoadConfig::ecommerce`]: one base
    /// URL; each client is a browser making purchase sessions.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Browsers making purchase sessions (seed 001's e-commerce model); give one base URL"
        )
    )]
    Ecommerce,
    /// Replay of an access log ([`LoadConfig::replay`]): one base URL; one
    /// browser per client IP, `clients` requests at most in flight.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Replay an access log (--access-log): one browser per client IP; give one base URL"
        )
    )]
    Replay,
}

impl Workload {
    /// The flag spelling: `urls` or `specweb96`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Urls => "urls",
            Workload::Specweb96 => "specweb96",
            Workload::Ecommerce => "ecommerce",
            Workload::Replay => "replay",
        }
    }
}

/// The arrival process of an open loop.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrivals {
    /// Exponential gaps of mean 1/rate (a Poisson process).
    #[default]
    Poisson,
    /// Gaps of exactly 1/rate.
    Constant,
}

impl Arrivals {
    /// The flag spelling: `poisson` or `constant`.
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Poisson => "poisson",
            Arrivals::Constant => "constant",
        }
    }
}

/// Open-loop load: requests arrive at a rate whatever the server does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenLoop {
    /// Arrivals per second.
    pub rate: f64,
    /// The arrival process (deterministic from the seed).
    pub arrivals: Arrivals,
    /// At most this many requests in flight; an arrival beyond it is
    /// dropped (and counted).
    pub max_in_flight: usize,
}

/// How resumption is offered for TLS 1.2 (TLS 1.3 always uses tickets).
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResumeWith {
    /// TLS 1.2 session IDs only (the client sends no ticket extension).
    Id,
    /// Session tickets (the client also keeps session IDs as a fallback,
    /// as rustls does).
    Ticket,
    /// Whatever the server offers: tickets if it issues them, else IDs.
    /// The client is configured as for [`ResumeWith::Ticket`].
    #[default]
    Auto,
}

impl ResumeWith {
    /// The flag spelling: `id`, `ticket` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            ResumeWith::Id => "id",
            ResumeWith::Ticket => "ticket",
            ResumeWith::Auto => "auto",
        }
    }
}

impl FromStr for ResumeWith {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "id" | "session-id" => Ok(ResumeWith::Id),
            "ticket" | "tickets" => Ok(ResumeWith::Ticket),
            "auto" => Ok(ResumeWith::Auto),
            _ => Err(Error::Invalid(format!(
                "resumption mode '{s}' is unknown; choose id, ticket or auto"
            ))),
        }
    }
}

/// Which server certificates the client accepts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// The CA certificates in this PEM file (`--cacert`).
    CaFile(PathBuf),
    /// These roots (for embedding, e.g. a generated CA).
    Roots(rustls::RootCertStore),
    /// The Mozilla root program, as shipped by the `webpki-roots` crate.
    WebPki,
    /// Any certificate (`--insecure`); handshake signatures are still
    /// checked.
    Insecure,
}

/// Everything a load run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The URLs to request. Targets with the same scheme, host and port
    /// form an origin; client `c` uses origin `c % origins` and walks that
    /// origin's paths in turn, one per request.
    pub targets: Vec<Target>,
    /// Concurrent clients (`-c`); each runs one connection at a time.
    pub clients: usize,
    /// Tokio worker threads of the engine.
    pub threads: usize,
    /// Pin every engine thread to this set of CPUs (affinity mask = the set).
    pub pin_cpus: Option<Vec<usize>>,
    /// Measure for this long (`-d`). At least one of `duration` and
    /// `requests` must be set; when both are, the first reached ends the run.
    pub duration: Option<Duration>,
    /// Measure this many requests in total (`-n`), failed ones included.
    pub requests: Option<u64>,
    /// Run this long before measuring; nothing from it is recorded.
    pub warmup: Duration,
    /// Requests per connection (K): 1 opens a new connection per request,
    /// 0 keeps connections open as long as the server allows. With
    /// [`http2`](Self::http2), streams per connection.
    pub requests_per_conn: u32,
    /// Speak HTTP/2 instead of HTTP/1.1 (`--h2`, `-m`); `None`: HTTP/1.1.
    /// Closed loop with the URLs or SPECweb96 workload only.
    pub http2: Option<Http2>,
    /// `--h3`: HTTP/3 over QUIC and its options; every connection then
    /// speaks HTTP/3. Excludes [`LoadConfig::http2`].
    pub http3: Option<Http3>,
    /// Requested share of resumed handshakes, 0.0–1.0 (`--reuse P` / 100).
    pub reuse: f64,
    /// How TLS 1.2 resumption is offered.
    pub resume_with: ResumeWith,
    /// TLS versions the client offers.
    pub versions: Vec<Version>,
    /// Cipher suites and key-exchange groups the client offers.
    pub algorithms: Algorithms,
    /// Server name to send and verify; default: the URL's host (an IP
    /// address sends no SNI).
    pub sni: Option<String>,
    /// Which certificates to accept.
    pub trust: Trust,
    /// Send each connection's first request as TLS 1.3 early data when the
    /// stored session allows it.
    pub early_data: bool,
    /// Limit on each of: TCP connect, TLS handshake, one request (send to
    /// last body byte). `Duration::MAX` means none.
    pub timeout: Duration,
    /// Local addresses clients bind their sockets to (`--source-ip`,
    /// `--clients-per-ip`); `None`: the system's choice.
    pub source_ip: Option<source::SourceAddrs>,
    /// Write one CSV row per measured request to this file.
    pub log: Option<PathBuf>,
    /// Draw a live progress line on standard error.
    pub progress: bool,
    /// Where request paths come from.
    pub workload: Workload,
    /// Seed of every random stream (paths, think times, arrivals).
    pub seed: u64,
    /// Pause of a closed-loop client after each request, not counted in
    /// any latency.
    pub think_time: ThinkTime,
    /// After a failed request (no complete response), the same client
    /// retries it, keeping its sessions; otherwise it becomes a new client
    /// (sessions and reuse counters cleared). Closed loop only.
    pub retry_on_failure: bool,
    /// Open-loop arrivals instead of closed-loop clients; `clients` is then
    /// the pool of client identities (session stores) arrivals take in
    /// turn, which does not cap concurrency.
    pub open_loop: Option<OpenLoop>,
    /// The e-commerce model for [`Workload::Ecommerce`] (default: the
    /// built-in one, `tlslab_workload::ecommerce::Config::default()`).
    pub ecommerce: Option<tlslab_workload::ecommerce::Config>,
    /// The log to replay for [`Workload::Replay`].
    pub replay: Option<Replay>,
    /// Client stages replaced by no-ops (`--ablate`, INSECURE; see
    /// `crates/crypto/ABLATIONS.md`). The server must use the same set.
    /// Needs [`Trust::CaFile`] or [`Trust::Roots`]. Default: none.
    pub ablation: tlslab_crypto::meter::AblationSet,
    /// Begin the measurement window at this wall-clock time (`--start-at`,
    /// distributed load), after every setup step: the engine sleeps until
    /// `start_at − warmup` just before its clients start. More than
    /// [`crate::shard::START_GRACE`] in the past is an error. Default: at once.
    pub start_at: Option<std::time::SystemTime>,
    /// The base B of the backoff after a connection that could not be made
    /// (refused, reset, unreachable, timed out, name not resolved): before
    /// the n-th attempt in a row a closed-loop client, a browser or a
    /// replay worker waits a uniform random time below
    /// [`crate::retry_backoff_bound`]`(B, n)` = min(B·2ⁿ⁻¹, 32·B) (exponential
    /// backoff with full jitter). Zero: at once. Open-loop arrivals keep
    /// their schedule and do not back off.
    pub retry_backoff: Duration,
    /// `--cert-compression`: RFC 8879 algorithms offered to the server, in
    /// preference order. Empty (the default): none offered.
    pub cert_compression: Vec<tlslab_crypto::compress::CertCompression>,
    /// `--mss`: the TCP maximum segment size the client announces (set with
    /// TCP_MAXSEG before connecting), so that over loopback, whose MTU is
    /// 64 KiB, the server's flights are cut into Internet-sized segments
    /// and the handshake's segment counts mean what they would on a path.
    pub mss: Option<u32>,
    /// `--keylog` (or `SSLKEYLOGFILE`): append every connection's TLS
    /// secrets, TCP and QUIC, to this file in the NSS key log format
    /// (created 0600), so a capture of the run can be decrypted.
    pub key_log: Option<PathBuf>,
    /// `--hdr-log`: write per-interval latency histograms (total,
    /// handshake, first byte) to this HdrHistogram interval log.
    pub hdr_log: Option<HdrLog>,
}

/// Where and how often [`LoadConfig::hdr_log`] writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HdrLog {
    /// The log file (overwritten).
    pub path: PathBuf,
    /// The length of an interval (`--hdr-interval`, default 1 s).
    pub interval: Duration,
}

/// An access log prepared for replay.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The filtered log as per-browser request sequences.
    pub plan: std::sync::Arc<tlslab_workload::replay::ReplayPlan>,
    /// The window bound LP − LS ≤ `window` (`--window`).
    pub window: usize,
    /// As fast as possible, or at the log's timing times a speed factor.
    pub pacing: tlslab_workload::replay::Pacing,
    /// Log lines that could not be parsed and were skipped.
    pub skipped_lines: u64,
    /// What the IP filters dropped.
    pub filtered: tlslab_workload::replay::FilterReport,
}

impl LoadConfig {
    /// A configuration for `targets` with the defaults: 1 client on 1
    /// thread for 10 s, a new connection per request, no reuse, TLS 1.2 and
    /// 1.3 with default algorithms, the webpki roots, a 10 s timeout, no
    /// warm-up, log or progress line; the URLs workload, seed 1, no think
    /// time, no retries, closed loop, HTTP/1.1, no ablation.
    pub fn new(targets: Vec<Target>) -> Self {
        LoadConfig {
            targets,
            clients: 1,
            threads: 1,
            pin_cpus: None,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            warmup: Duration::ZERO,
            requests_per_conn: 1,
            http2: None,
            http3: None,
            reuse: 0.0,
            resume_with: ResumeWith::Auto,
            versions: vec![Version::Tls12, Version::Tls13],
            algorithms: Algorithms::default(),
            sni: None,
            trust: Trust::WebPki,
            early_data: false,
            timeout: Duration::from_secs(10),
            source_ip: None,
            log: None,
            progress: false,
            workload: Workload::Urls,
            seed: 1,
            think_time: ThinkTime::Zero,
            retry_on_failure: false,
            open_loop: None,
            ecommerce: None,
            replay: None,
            ablation: tlslab_crypto::meter::AblationSet::NONE,
            start_at: None,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            cert_compression: Vec::new(),
            mss: None,
            key_log: None,
            hdr_log: None,
        }
    }
}

/// The default [`LoadConfig::retry_backoff`]: 10 ms, so a closed-loop
/// client makes at most about 6 attempts a second against a dead server
/// once its wait is at the 320 ms cap, and is back within 320 ms of the
/// server's return.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(10);

/// The backoff's cap, as a multiple of its base.
pub const RETRY_BACKOFF_CAP: u32 = 32;

/// The longest wait before the next attempt after `failures` failures in a
/// row (at least 1) with backoff base `base`: `min(base·2ⁿ⁻¹, 32·base)`.
/// The wait is drawn uniformly below it (full jitter).
pub fn retry_backoff_bound(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(RETRY_BACKOFF_CAP.ilog2());
    base.saturating_mul(1 << doublings)
}

impl LoadConfig {
    /// The echo of this configuration in a report, `targets` as given.
    pub(crate) fn echo(&self, targets: Vec<String>) -> ConfigEcho {
        ConfigEcho {
            targets,
            clients: self.clients,
            threads: self.threads,
            requests_per_conn: self.requests_per_conn,
            reuse: self.reuse,
            resume_with: self.resume_with.name().into(),
            versions: self.versions.iter().map(|v| v.name().to_string()).collect(),
            duration_s: self.duration.map(|d| d.as_secs_f64()),
            requests: self.requests,
            warmup_s: self.warmup.as_secs_f64(),
            timeout_s: (self.timeout != Duration::MAX).then_some(self.timeout.as_secs_f64()),
            early_data: self.early_data,
            workload: self.workload.name().into(),
            seed: self.seed,
            think_time: self.think_time.to_string(),
            retry_on_failure: self.retry_on_failure,
            ..ConfigEcho::default()
        }
    }
}
