//! The embedded rig every experiment runs on: a `tlslab serve` engine in
//! this process on loopback, its one worker thread pinned to the server's
//! CPUs, driven by a `tlslab load` run pinned to the client's CPUs, and the
//! server's own CPU accounting over the run.
//!
//! `lab`, `breakdown`, `overload`, `cluster` (its embedded nodes), `plan
//! --check` and the studies start from [`Rig::server`] and [`Rig::load`]
//! and change only what their experiment varies; [`measure_over`] and
//! [`Reading`] are the CPU accounting.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tlslab_crypto::meter::{Op, Snapshot};
use tlslab_crypto::pki::{Generated, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_load::{LoadConfig, Target, Trust};
use tlslab_path::PathHandle;
use tlslab_report::LoadReport;
use tlslab_runtime::ThreadCosts;
use tlslab_server::{
    CertSource, Content, H3Settings, ServeConfig, Server, SessionCache, TlsSettings,
};

use crate::Error;
use crate::pin::Placement;

/// Loopback, port 0 (a free port).
pub(crate) const LOOPBACK: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// A certificate and where the server and the load run.
pub(crate) struct Rig {
    /// The server's chain and key.
    pub generated: Generated,
    /// The roots the load trusts (the chain's CA).
    pub roots: rustls::RootCertStore,
    /// The server's and the load's CPUs.
    pub placement: Placement,
}

/// Runs `f` on the server's end of `path` (a thread in the path's server
/// namespace), or here without a path. Threads and sockets that `f`
/// creates, a server's runtime included, live in that namespace.
pub(crate) fn on_server<T: Send>(
    path: Option<&PathHandle>,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    on_end(path, PathHandle::enter_server, "server", f)
}

/// Runs `f` on the client's end of `path` (a thread in the path's client
/// namespace), or here without a path. A load engine whose runtime `f`
/// builds has its threads and sockets there.
pub(crate) fn on_client<T: Send>(
    path: Option<&PathHandle>,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    on_end(path, PathHandle::enter_client, "client", f)
}

/// The progress lines of `cmd` (`tlslab lab`) as its run starts across the
/// packet-level path `spec` (`h`): where `server` (what runs in the
/// server namespace) and the load are, each direction's conditions, and
/// the capture if there is one.
pub(crate) fn announce_path(
    cmd: &str,
    server: &str,
    spec: &tlslab_path::PathConfig,
    h: &PathHandle,
    progress: &mut impl FnMut(&str),
) {
    progress(&format!(
        "{cmd}: across a packet-level path ({server} {} in {}, load {} in {}): up {}; down {}",
        h.server_ip(),
        h.server_netns(),
        h.client_ip(),
        h.client_netns(),
        spec.up,
        spec.down
    ));
    if let Some(d) = spec.pcap.describe() {
        progress(&format!("{cmd}: {d}; one capture of every cell"));
    }
}

/// Runs `f` on a thread that `enter` moved to one end of `path` (`end`
/// names it in the error of a panic), or here without a path; for any
/// error type a path's error converts into.
pub(crate) fn on_end<T: Send, E: Send + From<tlslab_path::Error>>(
    path: Option<&PathHandle>,
    enter: fn(&PathHandle) -> Result<(), tlslab_path::Error>,
    end: &str,
    f: impl FnOnce() -> Result<T, E> + Send,
) -> Result<T, E> {
    let Some(h) = path else {
        return f();
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(h)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(tlslab_path::Error::Setup(format!("the path's {end} thread panicked")).into())
        })
    })
}

/// The host name a client on `path`'s client end (or on loopback without
/// a path) uses for the rig's server: the server namespace's address, which
/// the rig's certificates name (see [`Rig::generate`]), or `localhost`.
pub(crate) fn server_host(path: Option<&PathHandle>) -> String {
    path.map_or_else(|| "localhost".to_string(), |h| h.server_ip().to_string())
}

/// The names a rig's certificate gives its server besides `localhost`:
/// the path's server address, or none without a path.
pub(crate) fn server_sans(path: Option<&PathHandle>) -> Vec<String> {
    path.map_or_else(Vec::new, |h| vec![h.server_ip().to_string()])
}

/// The address a rig's server listens on: loopback, or the path's server
/// address; port 0.
pub(crate) fn server_bind(path: Option<&PathHandle>) -> SocketAddr {
    path.map_or(LOOPBACK, |h| SocketAddr::new(h.server_ip(), 0))
}

/// Stateful tickets and 0-RTT of up to 16 KiB on `c` (rustls accepts early
/// data only with stateful tickets), as `serve --tickets off
/// --max-early-data 16384` serves: a resumed connection's first request
/// may leave in early data.
pub(crate) fn zero_rtt(c: &mut ServeConfig) {
    c.tls.tickets = false;
    c.tls.max_early_data = 16_384;
}

/// The transport of a path study's server: HTTP/3 with 0-RTT
/// ([`zero_rtt`]) when `h3`, else TCP as configured.
pub(crate) fn h3_with_zero_rtt(h3: bool, c: &mut ServeConfig) -> Transport {
    if !h3 {
        return Transport::Tcp;
    }
    zero_rtt(c);
    Transport::Quic
}

/// How a cell's load reaches the server: the one place an experiment
/// tells TCP from QUIC (which listeners its server starts, which one its
/// load connects to, and how the load speaks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    #[default]
    /// TCP: HTTP/1.1 over TLS (`tlslab load`).
    Tcp,
    /// HTTP/3 over QUIC, one stream in flight per connection (`tlslab
    /// load --h3 -m 1`).
    Quic,
}

impl Transport {
    /// The level of a `transport` factor: `tcp` or `quic`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }

    /// The server's listener this transport's load meets (its figures in
    /// [`tlslab_server::Snapshot::transport`]).
    pub(crate) fn server_transport(self) -> tlslab_server::Transport {
        match self {
            Transport::Tcp => tlslab_server::Transport::Tcp,
            Transport::Quic => tlslab_server::Transport::Quic,
        }
    }

    /// Starts `c` with this transport's listeners: its TLS one, and over
    /// QUIC an HTTP/3 one beside it that `h3` makes from the TLS
    /// listener's address (the same port number over UDP: with port 0 the
    /// server picks a number free for both).
    pub(crate) fn start_with(
        self,
        c: ServeConfig,
        h3: impl FnOnce(SocketAddr) -> H3Settings,
    ) -> Result<Server, Error> {
        let h3 = (self == Transport::Quic).then(|| h3(c.https.unwrap_or(LOOPBACK)));
        Ok(Server::start_with_h3(c, h3)?)
    }

    /// [`Transport::start_with`] with `serve --h3`'s defaults.
    pub(crate) fn start(self, c: ServeConfig) -> Result<Server, Error> {
        self.start_with(c, H3Settings::new)
    }

    /// The listener of `server` this transport's load connects to.
    pub(crate) fn listener(self, server: &Server) -> Option<SocketAddr> {
        match self {
            Transport::Tcp => server.https_addr(),
            Transport::Quic => server.h3_addr(),
        }
    }

    /// Makes `load` speak this transport: HTTP/1.1 over TLS, or HTTP/3
    /// with one stream in flight per connection.
    pub(crate) fn speak(self, load: &mut LoadConfig) {
        load.http3 = (self == Transport::Quic).then(|| tlslab_load::Http3::new(1));
    }

    /// Runs `load` over this transport.
    pub(crate) fn run(self, load: &LoadConfig) -> Result<LoadReport, Error> {
        let mut load = load.clone();
        self.speak(&mut load);
        Ok(tlslab_load::run(&load)?)
    }
}

pub use tlslab_schema::lab::Handshakes;

/// `cpus` as a pin set: `None` when empty (not pinned).
pub(crate) fn pin(cpus: &[usize]) -> Option<Vec<usize>> {
    (!cpus.is_empty()).then(|| cpus.to_vec())
}

impl Rig {
    /// A rig for `generated`.
    pub fn new(generated: Generated, placement: Placement) -> Result<Rig, Error> {
        Ok(Rig {
            roots: generated.roots()?,
            generated,
            placement,
        })
    }

    /// A rig with a fresh certificate of `key` (and `sans` besides
    /// `localhost`).
    pub fn generate(key: KeyType, sans: &[String], placement: Placement) -> Result<Rig, Error> {
        Rig::new(tlslab_crypto::pki::generate(key, sans)?, placement)
    }

    /// The embedded server every experiment starts from: an HTTPS listener
    /// on loopback (port 0) serving `content` with the rig's certificate,
    /// one worker thread pinned to the server's CPUs, session tickets on,
    /// ALPN `http/1.1` only, a memory session cache of 100,000 sessions
    /// for 5 minutes, and `tlslab serve`'s other defaults (TLS 1.2 and 1.3,
    /// a 10 s handshake timeout, at most 10,000 connections).
    pub fn server(&self, content: Content) -> ServeConfig {
        let mut tls = TlsSettings::new(CertSource::Generated(self.generated.clone()));
        tls.session_cache = SessionCache::Memory {
            capacity: 100_000,
            ttl: Duration::from_secs(300),
        };
        tls.tickets = true;
        tls.alpn = vec![b"http/1.1".to_vec()];
        let mut c = ServeConfig::new(LOOPBACK, content, tls);
        c.threads = 1;
        c.pin_cpus = pin(&self.placement.server);
        c
    }

    /// The load every experiment starts from: `url` for `window`, one
    /// thread pinned to the client's CPUs, trusting the rig's roots, and
    /// `tlslab load`'s other defaults.
    pub fn load(&self, url: &str, window: Duration) -> Result<LoadConfig, Error> {
        let mut load = LoadConfig::new(vec![Target::parse(url)?]);
        load.threads = 1;
        load.pin_cpus = pin(&self.placement.client);
        load.duration = Some(window);
        load.trust = Trust::Roots(self.roots.clone());
        Ok(load)
    }

    /// The load of a closed-loop cell: `clients` clients for `window`
    /// (after a warm-up of a fifth of it, at most 0.5 s), `k` requests per
    /// connection and `reuse` resumed.
    pub fn cell_load(
        &self,
        url: &str,
        window: Duration,
        clients: usize,
        versions: Vec<Version>,
        k: u32,
        reuse: f64,
    ) -> Result<LoadConfig, Error> {
        let mut load = self.load(url, window)?;
        load.clients = clients;
        load.warmup = (window / 5).min(Duration::from_millis(500));
        load.requests_per_conn = k;
        load.reuse = reuse;
        load.versions = versions;
        Ok(load)
    }
}

/// One reading of an embedded server's own counters.
#[derive(Clone, Debug)]
pub(crate) struct Reading {
    /// When, ms since the Unix epoch.
    pub unix_ms: f64,
    /// The server runtime's CPU time so far.
    pub cpu: Duration,
    /// Requests served, over TCP and QUIC.
    pub served: u64,
    /// TLS handshakes completed over TCP.
    pub handshakes: u64,
    /// Of them, resumed.
    pub resumed: u64,
    /// Handshakes over TCP by kind.
    pub tcp: Handshakes,
    /// Handshakes over QUIC by kind (zero without an HTTP/3 listener).
    pub quic: Handshakes,
    /// The crypto meter.
    pub crypto: Snapshot,
    /// Redis GETs: hits, misses, timeouts, errors (a shared cache only).
    pub redis: [u64; 4],
    /// With the probes on (`lab --explain`): the server threads' costs.
    pub costs: Option<ThreadCosts>,
}

impl Reading {
    /// The counters of `server` now.
    pub fn of(server: &Server) -> Reading {
        let snap = server.snapshot();
        let on = |t: Transport| {
            snap.transport(t.server_transport())
                .map_or(Handshakes::default(), |f| Handshakes {
                    full: f.full_handshakes,
                    resumed: f.resumed_handshakes,
                    zero_rtt: f.early_data_accepted,
                })
        };
        let tcp = on(Transport::Tcp);
        Reading {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3),
            cpu: snap.worker_cpu,
            served: snap.total().requests,
            handshakes: tcp.full + tcp.resumed,
            resumed: tcp.resumed,
            tcp,
            quic: on(Transport::Quic),
            crypto: snap.crypto,
            redis: snap
                .redis
                .map_or([0; 4], |r| [r.hits, r.misses, r.timeouts, r.errors]),
            costs: tlslab_runtime::costs::probes().map(|_| server.thread_costs()),
        }
    }

    /// What happened between `before` and this reading.
    pub fn since(&self, before: &Reading) -> Reading {
        Reading {
            unix_ms: self.unix_ms - before.unix_ms,
            cpu: self.cpu.saturating_sub(before.cpu),
            served: self.served.saturating_sub(before.served),
            handshakes: self.handshakes.saturating_sub(before.handshakes),
            resumed: self.resumed.saturating_sub(before.resumed),
            tcp: self.tcp.since(&before.tcp),
            quic: self.quic.since(&before.quic),
            crypto: self.crypto.diff(&before.crypto),
            redis: std::array::from_fn(|i| self.redis[i].saturating_sub(before.redis[i])),
            costs: self.costs.zip(before.costs).map(|(a, b)| a.since(b)),
        }
    }
}

/// What one cell measured.
pub(crate) struct Measured {
    /// The load engine's report (client-observed).
    pub report: LoadReport,
    /// The server's CPU time per request it served, µs (server-observed,
    /// over the whole run including warm-up).
    pub server_cpu_us_per_request: f64,
    /// The server's CPU time over the wall-clock time of the run, 0–1 per
    /// server thread (server-observed, same window).
    pub server_busy: f64,
    /// The server's crypto meter: mean time of one signature, µs, and the
    /// signatures made (one per full handshake), over the same run.
    pub server_sign: Option<(f64, u64)>,
    /// The server's counters over the load's window: read when the load's
    /// window starts (both wait for the same wall-clock instant, the load
    /// after building its runtime) and when the load has ended.
    pub window: Reading,
    /// The server's counters over the whole run (the window of
    /// `server_cpu_us_per_request`).
    pub run: Reading,
}

/// Room a measured load gets to build its runtime, TLS configuration and
/// clients before its warm-up starts: its window then starts at an
/// instant fixed in advance, at which the server is read too. (Read at
/// the end of a warm-up counted from before the setup, the server's window
/// began early by the setup's time: 37 extra handshakes in a 0.5 s cell
/// at 4,400/s on a busy machine.)
const SETUP: Duration = Duration::from_millis(100);

/// Runs `load` over `transport` against `server` and measures the
/// server's CPU per request served (NaN when it served none) and its busy
/// share over the run.
pub(crate) fn run_measured_over(
    server: &Server,
    load: &LoadConfig,
    transport: Transport,
) -> Result<Measured, Error> {
    let before = Reading::of(server);
    let wall = std::time::Instant::now();
    let mut load = load.clone();
    let window_at = *load
        .start_at
        .get_or_insert_with(|| std::time::SystemTime::now() + SETUP + load.warmup);
    let (report, at_window) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            // Late only if the load's setup outlasted SETUP, by as much.
            let _ = tlslab_load::shard::sleep_until(window_at);
            Reading::of(server)
        });
        let report = transport.run(&load);
        (report, sampler.join())
    });
    let report = report?;
    let wall = wall.elapsed();
    let after = Reading::of(server);
    let window = after.since(&at_window.unwrap_or_else(|_| before.clone()));
    let d = after.since(&before);
    let sign = d.crypto.total(Op::Sign);
    Ok(Measured {
        report,
        server_cpu_us_per_request: if d.served > 0 {
            d.cpu.as_secs_f64() * 1e6 / d.served as f64
        } else {
            f64::NAN
        },
        server_busy: d.cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        server_sign: (sign.calls > 0)
            .then(|| (sign.nanos as f64 / 1e3 / sign.calls as f64, sign.calls)),
        window,
        run: d,
    })
}

/// [`run_measured_over`], where a cell in which nothing was served is an
/// error naming `label`.
pub(crate) fn measure_over(
    server: &Server,
    load: &LoadConfig,
    transport: Transport,
    label: &str,
) -> Result<Measured, Error> {
    let m = run_measured_over(server, load, transport)?;
    if m.report.requests.completed == 0 || m.server_cpu_us_per_request.is_nan() {
        return Err(Error::empty(label, m.report.error_summary()));
    }
    Ok(m)
}
