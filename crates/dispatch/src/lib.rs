//! `tlslab dispatch`: a TLS-session-aware L4 (TCP) load balancer.
//!
//! It reads the cleartext parts of each TLS handshake with `tlslab-wire`,
//! never terminates TLS, and routes a ClientHello that tries to resume a
//! session to the node that holds it (seed 000's cluster result, Fig. 9):
//! - a TLS 1.2 session ID, learned from the ServerHello that issued it;
//! - a TLS 1.2 ticket, by its 16-byte key name (RFC 5077), learned from
//!   the cleartext NewSessionTicket;
//! - a TLS 1.3 PSK identity, by the same key name, learned from the
//!   ServerHello that accepts a PSK (its `selected_identity` is cleartext)
//!   or given per backend (`--backend ADDR=HEXPREFIX`: the node's ticket
//!   key names, such as those of its `tlslab serve --ticket-keys` file);
//! - any of these by a configured node prefix (`--backend ADDR=HEX` or
//!   `ADDR=tag:TAG`): `tlslab serve --node-tag TAG` starts its TLS 1.2
//!   session IDs and stateful TLS 1.3 tickets with
//!   [`node_tag_prefix`]`(TAG)`, so even a session the dispatcher never saw
//!   issued (single-use stateful tickets, a restarted dispatcher) routes on
//!   first use.
//!
//! Blind baselines (`round-robin`, `least-conn`, `random`, `source-ip`)
//! are there to be measured against. Learned mappings live in a bounded,
//! expiring O(1) [`table::SessionTable`]. Health checks, PROXY protocol v2,
//! bad-input handling and a Prometheus `/metrics` endpoint complete it.

pub mod health;
pub mod inspect;
pub mod metrics;
pub mod proxy_v2;
pub mod table;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::inspect::{Offer, ServerLearner};
use crate::metrics::{BadInput, Decision, Exposition, Metrics, NodeStats};
use crate::table::{Key, Lookup, SessionTable};

/// How connections are spread over the backends.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Each node in turn (blind).
    RoundRobin,
    /// The node with the fewest open connections (blind).
    LeastConn,
    /// A uniformly random node (blind).
    Random,
    /// A hash of the client's IP address (breaks behind NAT and proxies).
    SourceIp,
    /// By the session the ClientHello tries to resume; else least-conn.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "By the session the ClientHello resumes (TLS 1.2 ID, TLS 1.2 ticket key name, TLS 1.3 PSK key name); else least-conn"
        )
    )]
    Session,
}

impl Policy {
    /// The policy's command-line and metric name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LeastConn => "least-conn",
            Policy::Random => "random",
            Policy::SourceIp => "source-ip",
            Policy::Session => "session",
        }
    }
}

/// What to do with a connection whose first bytes are not a valid
/// ClientHello. (One that stalls before finishing its ClientHello is
/// closed either way: see [`Config::hello_timeout`].)
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadInputAction {
    /// Forward it to the least-loaded node, bytes untouched.
    Forward,
    /// Close it.
    Close,
}

/// How a node's health is checked.
#[derive(Clone, Debug, PartialEq)]
pub enum HealthCheck {
    /// A TCP connect succeeds.
    Tcp,
    /// A full TLS handshake succeeds (a liveness check; the certificate is
    /// verified only if the check was built with a CA).
    Tls(health::TlsCheck),
    /// No checks: nodes are always up (a failed connect fails over to
    /// another node for that connection only).
    Off,
}

pub use tlslab_crypto::provider::node_tag_prefix;

/// One backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Its address.
    pub addr: SocketAddr,
    /// Prefixes of tickets / PSK identities / session IDs it issues (its
    /// ticket key names).
    pub tags: Vec<Vec<u8>>,
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// `ADDR` or `ADDR=PREFIX[,PREFIX…]`, each PREFIX hex or `tag:TAG`
    /// (the prefix of `serve --node-tag TAG`, [`node_tag_prefix`]).
    fn from_str(s: &str) -> Result<Backend, String> {
        let (addr, tags) = match s.split_once('=') {
            Some((a, t)) => (a, Some(t)),
            None => (s, None),
        };
        let addr: SocketAddr = addr.parse().map_err(|e| {
            format!("backend {addr:?}: {e}; give IP:PORT, for example 127.0.0.1:8443")
        })?;
        let mut out = Vec::new();
        for t in tags.into_iter().flat_map(|t| t.split(',')) {
            if let Some(name) = t.strip_prefix("tag:") {
                if name.is_empty() {
                    return Err("backend tag:TAG needs a name, as given to serve --node-tag".into());
                }
                out.push(node_tag_prefix(name).to_vec());
                continue;
            }
            let b = decode_hex(t).ok_or_else(|| {
                format!("backend tag {t:?} is not hex; give an even number of hex digits (1 to 32 bytes), for example 127.0.0.1:8443=6e31")
            })?;
            if b.is_empty() || b.len() > table::MAX_KEY_LEN {
                return Err(format!(
                    "backend tag {t:?} must be 1 to 32 bytes (2 to 64 hex digits)"
                ));
            }
            out.push(b);
        }
        Ok(Backend { addr, tags: out })
    }
}

/// Decodes a hex string.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The dispatcher's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The nodes.
    pub backends: Vec<Backend>,
    /// The policy.
    pub policy: Policy,
    /// How long a learned mapping lives (match the nodes' cache timeout).
    pub session_timeout: Duration,
    /// How many mappings are kept at most.
    pub max_sessions: NonZeroUsize,
    /// How long a client may take to send its whole ClientHello; a client
    /// that has not finished by then is closed, whatever [`Config::bad_input`]
    /// says (a slowloris is not a protocol to forward).
    pub hello_timeout: Duration,
    /// A proxied connection on which no byte moved, in either direction,
    /// for this long is closed ([`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// What to do with bad input.
    pub bad_input: BadInputAction,
    /// Send a PROXY protocol v2 header to backends.
    pub send_proxy_v2: bool,
    /// Health-check method.
    pub health_check: HealthCheck,
    /// Health-check interval.
    pub health_interval: Duration,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics: Option<SocketAddr>,
}

/// Errors starting the dispatcher.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}; pick a free address or port")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
}

/// The default [`Config::idle_timeout`]: nginx stream's `proxy_timeout`
/// (10 minutes). HAProxy's `timeout client`/`timeout server` have no
/// default and are usually set to 30 s to a few minutes; the nodes'
/// own timeouts (`serve --keepalive-timeout`) normally end an idle HTTPS
/// connection long before this one does.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest ClientHello buffered before routing (bytes, records
/// included); longer ones count as malformed.
pub const MAX_HELLO: usize = 64 * 1024;

struct Shared {
    cfg: Config,
    nodes: Vec<NodeStats>,
    table: SessionTable,
    metrics: Metrics,
    rr: AtomicU64,
    rng: AtomicU64,
}

/// A bound, not yet running dispatcher.
pub struct Dispatcher {
    shared: Arc<Shared>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
}

impl Dispatcher {
    /// Checks the configuration and binds the listeners.
    pub async fn bind(cfg: Config) -> Result<Dispatcher, Error> {
        if cfg.backends.is_empty() {
            return Err(Error::Config(
                "no backends; give at least one --backend ADDR".into(),
            ));
        }
        if cfg.backends.len() > usize::from(u16::MAX) {
            return Err(Error::Config("at most 65535 backends".into()));
        }
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: cfg.listen,
                source,
            })?;
        let metrics_listener = match cfg.metrics {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| Error::Bind { addr, source })?,
            ),
            None => None,
        };
        let nodes = cfg
            .backends
            .iter()
            .map(|_| {
                let s = NodeStats::default();
                s.healthy.store(true, Relaxed);
                s
            })
            .collect();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        let shared = Arc::new(Shared {
            table: SessionTable::new(cfg.max_sessions, cfg.session_timeout),
            cfg,
            nodes,
            metrics: Metrics::default(),
            rr: AtomicU64::new(0),
            rng: AtomicU64::new(seed),
        });
        Ok(Dispatcher {
            shared,
            listener,
            metrics_listener,
        })
    }

    /// The proxy's bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The metrics listener's bound address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The current `/metrics` text.
    pub fn metrics_text(&self) -> String {
        self.shared.exposition()
    }

    /// Runs until `shutdown` turns true; then stops accepting (open
    /// connections are left to finish on the runtime).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let Dispatcher {
            shared,
            listener,
            metrics_listener,
        } = self;
        if !matches!(shared.cfg.health_check, HealthCheck::Off) {
            for i in 0..shared.nodes.len() {
                tokio::spawn(health_loop(shared.clone(), i, shutdown.clone()));
            }
        }
        if let Some(l) = metrics_listener {
            tokio::spawn(serve_metrics(shared.clone(), l, shutdown.clone()));
        }
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((sock, peer)) => {
                        let _ = sock.set_nodelay(true);
                        tokio::spawn(handle(shared.clone(), sock, peer));
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return; }
                }
            }
        }
    }
}

impl Shared {
    fn exposition(&self) -> String {
        metrics::render(&Exposition {
            metrics: &self.metrics,
            nodes: self
                .cfg
                .backends
                .iter()
                .zip(&self.nodes)
                .map(|(b, s)| (b.addr.to_string(), s))
                .collect(),
            held: self.table.counts(),
            policy: self.cfg.policy.name(),
            cpu_seconds: tlslab_runtime::process_cpu_time().as_secs_f64(),
        })
    }

    fn up(&self, i: usize) -> bool {
        self.nodes[i].healthy.load(Relaxed)
    }

    /// The healthy node with the fewest open connections (ties: lowest
    /// index after a rotating start, so ties spread); any node if all are
    /// down.
    fn least_loaded(&self, exclude: &[usize]) -> Option<usize> {
        let n = self.nodes.len();
        let start = (self.rr.fetch_add(1, Relaxed) as usize) % n;
        let mut best: Option<(u64, usize)> = None;
        for pass in [true, false] {
            for j in 0..n {
                let i = (start + j) % n;
                if exclude.contains(&i) || (pass && !self.up(i)) {
                    continue;
                }
                let a = self.nodes[i].active.load(Relaxed);
                if best.is_none_or(|(b, _)| a < b) {
                    best = Some((a, i));
                }
            }
            if best.is_some() {
                break;
            }
        }
        best.map(|(_, i)| i)
    }

    fn next_random(&self) -> u64 {
        // xorshift64*; contention-free enough for load spreading.
        let mut x = self.rng.load(Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Relaxed);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The first healthy node at or after `i` in ring order.
    fn healthy_from(&self, i: usize) -> Option<usize> {
        let n = self.nodes.len();
        (0..n).map(|j| (i + j) % n).find(|&k| self.up(k))
    }

    /// Where a configured tag routes `bytes`, if one matches.
    fn by_tag(&self, bytes: &[u8]) -> Option<usize> {
        self.cfg
            .backends
            .iter()
            .position(|b| b.tags.iter().any(|t| bytes.starts_with(t)))
    }

    /// Picks a node and names the decision.
    fn choose(
        &self,
        offer: Option<&Offer>,
        raw: Option<&RawKeys>,
        peer: SocketAddr,
    ) -> (Option<usize>, Decision) {
        let n = self.nodes.len();
        match self.cfg.policy {
            Policy::RoundRobin => {
                let i = (self.rr.fetch_add(1, Relaxed) as usize) % n;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            Policy::Random => {
                let i = (self.next_random() % n as u64) as usize;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            Policy::LeastConn => (self.least_loaded(&[]), Decision::NoSession),
            Policy::SourceIp => {
                let h = match peer.ip() {
                    std::net::IpAddr::V4(a) => u64::from(u32::from(a)),
                    std::net::IpAddr::V6(a) => (u128::from(a) % u128::from(u64::MAX)) as u64,
                };
                let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
                let i = (h % n as u64) as usize;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            Policy::Session => {
                let Some(offer) = offer else {
                    return (self.least_loaded(&[]), Decision::NoSession);
                };
                let mut mapped_down = false;
                let mut found = None;
                for k in offer.keys() {
                    if let Lookup::Hit(i) = self.table.lookup(k)
                        && i < n
                    {
                        found = Some(i);
                        break;
                    }
                }
                if found.is_none()
                    && let Some(raw) = raw
                {
                    found = raw.all().find_map(|b| self.by_tag(b));
                }
                if let Some(i) = found {
                    if self.up(i) {
                        return (Some(i), Decision::SessionHit);
                    }
                    mapped_down = true;
                }
                if mapped_down {
                    self.metrics.rerouted_down.fetch_add(1, Relaxed);
                }
                let d = if offer.attempt || mapped_down {
                    Decision::SessionMiss
                } else {
                    Decision::NoSession
                };
                (self.least_loaded(&[]), d)
            }
        }
    }
}

/// The raw resumption bytes of a ClientHello, for prefix (tag) matching.
struct RawKeys {
    session_id: Vec<u8>,
    ticket: Vec<u8>,
    psks: Vec<Vec<u8>>,
}

impl RawKeys {
    fn all(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.session_id.as_slice())
            .chain(std::iter::once(self.ticket.as_slice()))
            .chain(self.psks.iter().map(Vec::as_slice))
            .filter(|b| !b.is_empty())
    }
}

/// Reading the ClientHello: the bytes read and what they are.
enum Hello {
    Parsed(Vec<u8>, Offer, RawKeys),
    Bad(Vec<u8>, BadInput),
}

/// What the client's first bytes so far are.
enum HelloStep {
    /// Not a whole ClientHello yet.
    Incomplete,
    /// A ClientHello and its routing keys.
    Parsed(Offer, RawKeys),
    /// Not a valid ClientHello.
    Bad(BadInput),
}

/// Inspects the client's first bytes: the dispatcher's whole ClientHello
/// path (record reassembly, parsing, routing keys), pure so the fuzz
/// target runs exactly this.
fn inspect_hello(buf: &[u8]) -> HelloStep {
    match tlslab_wire::first_handshake_message(buf, MAX_HELLO) {
        Ok(msg) => match tlslab_wire::ClientHello::parse(&msg) {
            Ok(ch) => {
                let offer = Offer::of(&ch);
                let raw = RawKeys {
                    session_id: ch.session_id.to_vec(),
                    ticket: ch.session_ticket.unwrap_or_default().to_vec(),
                    psks: ch
                        .pre_shared_key
                        .map(|p| p.identities.iter().map(|i| i.identity.to_vec()).collect())
                        .unwrap_or_default(),
                };
                HelloStep::Parsed(offer, raw)
            }
            Err(_) => HelloStep::Bad(BadInput::Malformed),
        },
        Err(tlslab_wire::Error::Incomplete { .. }) => HelloStep::Incomplete,
        Err(tlslab_wire::Error::UnexpectedRecord { .. }) => HelloStep::Bad(BadInput::NotTls),
        Err(_) => HelloStep::Bad(if buf.first() == Some(&22) {
            BadInput::Malformed
        } else {
            BadInput::NotTls
        }),
    }
}

async fn read_hello(sock: &mut TcpStream, limit: Duration) -> Hello {
    let mut buf = Vec::with_capacity(2048);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match inspect_hello(&buf) {
            HelloStep::Parsed(offer, raw) => return Hello::Parsed(buf, offer, raw),
            HelloStep::Bad(kind) => return Hello::Bad(buf, kind),
            HelloStep::Incomplete => {}
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, sock.read(&mut chunk)).await {
            Err(_) => return Hello::Bad(buf, BadInput::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) => return Hello::Bad(buf, BadInput::Truncated),
            Ok(Ok(k)) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

/// Counts a client connection as open while it lives.
struct OpenGuard<'a>(&'a AtomicU64);

impl<'a> OpenGuard<'a> {
    fn new(c: &'a AtomicU64) -> Self {
        c.fetch_add(1, Relaxed);
        OpenGuard(c)
    }
}

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

async fn handle(shared: Arc<Shared>, mut client: TcpStream, peer: SocketAddr) {
    let _open = OpenGuard::new(&shared.metrics.open);
    let (first, offer, raw) = match read_hello(&mut client, shared.cfg.hello_timeout).await {
        Hello::Parsed(b, o, r) => (b, Some(o), Some(r)),
        Hello::Bad(b, kind) => {
            shared.metrics.bad(kind);
            // A client that stalls mid-hello is closed whatever
            // --bad-input says: forwarding it would hand a slowloris to
            // the nodes and hold two sockets here.
            if shared.cfg.bad_input == BadInputAction::Close
                || kind == BadInput::Timeout
                || kind == BadInput::Truncated && b.is_empty()
            {
                shared.metrics.bad_input_closed.fetch_add(1, Relaxed);
                return;
            }
            (b, None, None)
        }
    };
    let (choice, decision) = shared.choose(offer.as_ref(), raw.as_ref(), peer);
    shared.metrics.decision(decision);
    // Connect, failing over to the least-loaded other nodes.
    let mut tried = Vec::new();
    let mut next = choice;
    let (node, backend) = loop {
        let Some(i) = next else {
            shared.metrics.no_backend.fetch_add(1, Relaxed);
            return;
        };
        tried.push(i);
        let addr = shared.cfg.backends[i].addr;
        match tokio::time::timeout(shared.cfg.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => break (i, s),
            _ => {
                shared.nodes[i].connect_errors.fetch_add(1, Relaxed);
                // With health checks, the next passing check brings the
                // node back; without, nothing would, so it stays up.
                if !matches!(shared.cfg.health_check, HealthCheck::Off) {
                    shared.nodes[i].healthy.store(false, Relaxed);
                    tracing::warn!(node = %addr, "connect failed; marked down until a health check passes");
                } else {
                    tracing::warn!(node = %addr, "connect failed; trying another node");
                }
                next = shared.least_loaded(&tried);
            }
        }
    };
    let _ = backend.set_nodelay(true);
    let stats = &shared.nodes[node];
    stats.connections.fetch_add(1, Relaxed);
    stats.active.fetch_add(1, Relaxed);
    let learner = offer.map(ServerLearner::new);
    proxy(&shared, node, client, backend, peer, first, learner).await;
    shared.nodes[node].active.fetch_sub(1, Relaxed);
}

const BUF: usize = 16 * 1024;

/// Why one direction of a proxied connection failed.
enum Broken {
    /// The client's socket failed (a reset, or gone).
    Client(std::io::Error),
    /// The node's socket failed.
    Node(std::io::Error),
}

/// How a proxied connection ended.
enum Ended {
    /// Both directions finished (EOF each way).
    Closed,
    /// One side failed; the other is reset in turn.
    Broken(Broken),
    /// Nothing moved for `--idle-timeout`.
    Idle,
}

/// Moves bytes both ways until both directions end, one side fails, or
/// the connection is idle for `--idle-timeout`. A clean EOF in one
/// direction is passed on as a half-close and leaves the other running.
/// A failure (a reset, a write to a closed socket) ends both at once and
/// is passed on as a reset (`SO_LINGER` 0), so the client of a node that
/// resets sees the reset as it would without the dispatcher.
async fn proxy(
    shared: &Shared,
    node: usize,
    client: TcpStream,
    backend: TcpStream,
    peer: SocketAddr,
    first: Vec<u8>,
    mut learner: Option<ServerLearner>,
) {
    let stats = &shared.nodes[node];
    let activity = tlslab_runtime::idle::Activity::new();
    let (mut cr, mut cw) = client.into_split();
    let (mut br, mut bw) = backend.into_split();
    let ended = {
        let up = async {
            if shared.cfg.send_proxy_v2 {
                let dst = cr.local_addr().unwrap_or(shared.cfg.listen);
                bw.write_all(&proxy_v2::header(peer, dst))
                    .await
                    .map_err(Broken::Node)?;
            }
            bw.write_all(&first).await.map_err(Broken::Node)?;
            stats.bytes_up.fetch_add(first.len() as u64, Relaxed);
            activity.touch();
            let mut buf = vec![0u8; BUF];
            loop {
                let k = cr.read(&mut buf).await.map_err(Broken::Client)?;
                if k == 0 {
                    break;
                }
                activity.touch();
                bw.write_all(&buf[..k]).await.map_err(Broken::Node)?;
                stats.bytes_up.fetch_add(k as u64, Relaxed);
                activity.touch();
            }
            bw.shutdown().await.map_err(Broken::Node)
        };
        let down = async {
            let mut buf = vec![0u8; BUF];
            let r: Result<(), Broken> = async {
                loop {
                    let k = br.read(&mut buf).await.map_err(Broken::Node)?;
                    if k == 0 {
                        break;
                    }
                    activity.touch();
                    if let Some(l) = learner.as_mut()
                        && !l.done()
                    {
                        l.feed(&buf[..k]);
                        if l.done() {
                            settle(shared, node, l);
                        }
                    }
                    cw.write_all(&buf[..k]).await.map_err(Broken::Client)?;
                    stats.bytes_down.fetch_add(k as u64, Relaxed);
                    activity.touch();
                }
                cw.shutdown().await.map_err(Broken::Client)
            }
            .await;
            if let Some(l) = learner.as_mut()
                && !l.done()
            {
                settle(shared, node, l);
            }
            r
        };
        let idle = activity.idle_for(shared.cfg.idle_timeout);
        tokio::pin!(up, down, idle);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) if down_done => break Ended::Closed,
                    Ok(()) => up_done = true,
                    Err(b) => break Ended::Broken(b),
                },
                r = &mut down, if !down_done => match r {
                    Ok(()) if up_done => break Ended::Closed,
                    Ok(()) => down_done = true,
                    Err(b) => break Ended::Broken(b),
                },
                () = &mut idle => break Ended::Idle,
            }
        }
    };
    match ended {
        Ended::Closed => {}
        Ended::Idle => {
            shared.metrics.idle_closed.fetch_add(1, Relaxed);
            tracing::debug!(%peer, "idle for --idle-timeout; closed");
        }
        Ended::Broken(Broken::Node(e)) => {
            shared.metrics.resets[0].fetch_add(1, Relaxed);
            tracing::debug!(%peer, "node connection failed ({e}); resetting the client");
            reset(cr, cw);
        }
        Ended::Broken(Broken::Client(e)) => {
            shared.metrics.resets[1].fetch_add(1, Relaxed);
            tracing::debug!(%peer, "client connection failed ({e}); resetting the node's");
            reset(br, bw);
        }
    }
}

/// Closes a connection with a reset (`SO_LINGER` 0). The halves are
/// joined first: dropping a write half on its own sends a FIN.
fn reset(r: tokio::net::tcp::OwnedReadHalf, w: tokio::net::tcp::OwnedWriteHalf) {
    if let Ok(s) = r.reunite(w) {
        let _ = s.set_zero_linger();
    }
}

/// Books what a finished learner saw: the attempt's outcome and the keys
/// to remember.
fn settle(shared: &Shared, node: usize, l: &mut ServerLearner) {
    let learned = std::mem::take(&mut l.learned);
    if !learned.server_hello {
        return;
    }
    if l.offer_attempt() {
        shared.metrics.attempts.fetch_add(1, Relaxed);
        if learned.resumed {
            shared.metrics.accepted.fetch_add(1, Relaxed);
        }
    }
    // Blind policies do not use the table, so they do not pay for it.
    if shared.cfg.policy == Policy::Session {
        for k in learned.keys {
            learn(shared, k, node);
        }
    }
}

fn learn(shared: &Shared, k: Key, node: usize) {
    shared.table.learn(k, node);
    shared.metrics.learned[k.kind() as usize].fetch_add(1, Relaxed);
}

async fn health_loop(shared: Arc<Shared>, i: usize, mut shutdown: watch::Receiver<bool>) {
    let addr = shared.cfg.backends[i].addr;
    let limit = shared.cfg.connect_timeout;
    loop {
        let r = match &shared.cfg.health_check {
            HealthCheck::Tcp => health::tcp_check(addr, limit).await,
            HealthCheck::Tls(t) => t.check(addr, limit).await,
            HealthCheck::Off => return,
        };
        let ok = r.is_ok();
        if !ok {
            shared.nodes[i].health_failures.fetch_add(1, Relaxed);
        }
        let was = shared.nodes[i].healthy.swap(ok, Relaxed);
        if was != ok {
            match r {
                Ok(()) => tracing::info!(node = %addr, "health check passed; node rejoins"),
                Err(e) => {
                    tracing::warn!(node = %addr, "health check failed ({e}); node marked down, its sessions go to other nodes by load")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.cfg.health_interval) => {}
            _ = shutdown.changed() => if *shutdown.borrow() { return; },
        }
    }
}

/// The time a `/metrics` client has to send each request head (the first,
/// and each next on a kept-alive connection).
const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_metrics(shared: Arc<Shared>, l: TcpListener, mut shutdown: watch::Receiver<bool>) {
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    loop {
        let sock = tokio::select! {
            r = l.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
            _ = shutdown.changed() => if *shutdown.borrow() { return } else { continue },
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        hyper::Response::builder()
                            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                            .body(Full::new(bytes::Bytes::from(shared.exposition())))
                    } else {
                        hyper::Response::builder().status(404).body(Full::new(
                            bytes::Bytes::from_static(b"not found; try /metrics\n"),
                        ))
                    };
                    Ok::<_, http::Error>(resp.unwrap_or_default())
                }
            });
            // An idle or trickling scraper is closed after 10 s.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(sock), svc)
                .await;
        });
    }
}

/// Runs the dispatcher's input handling on `data` and checks it cannot
/// panic: the first half as a client's first bytes, fed to the same
/// [`inspect_hello`] the proxy runs, growing by 7 bytes at a time as from
/// a slow client (ClientHello, routing keys, tag matching against a few
/// prefixes), the rest as the server's reply fed to a learner in 5-byte
/// chunks. The fuzz target (`fuzz/fuzz_targets/dispatch.rs`) and a
/// proptest call this. Compiled only for tests and under the `fuzzing`
/// feature, so it is not part of the public API.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub fn fuzz_entry(data: &[u8]) {
    let mid = data.len() / 2;
    let (client, server) = data.split_at(mid);
    let mut offer = Offer::default();
    let mut end = 0;
    loop {
        end = (end + 7).min(client.len());
        match inspect_hello(&client[..end]) {
            HelloStep::Incomplete if end < client.len() => continue,
            HelloStep::Incomplete | HelloStep::Bad(_) => break,
            HelloStep::Parsed(o, raw) => {
                // Once whole, more bytes (the client's next records) must
                // not change the answer.
                if let HelloStep::Parsed(again, _) = inspect_hello(client) {
                    assert_eq!(again.keys().count(), o.keys().count());
                }
                let tags: [&[u8]; 3] = [&[0x67, 0x6b], &[0], &raw.session_id];
                let _ = raw
                    .all()
                    .filter(|b| tags.iter().any(|t| !t.is_empty() && b.starts_with(t)))
                    .count();
                offer = o;
                break;
            }
        }
    }
    let _ = offer.keys().count();
    let mut l = ServerLearner::new(offer);
    for c in server.chunks(5) {
        l.feed(c);
    }
    assert!(l.learned.keys.len() <= server.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_flags_parse() {
        let b: Backend = "127.0.0.1:9=6e31,00ff".parse().unwrap();
        assert_eq!(b.tags, vec![b"n1".to_vec(), vec![0, 0xff]]);
        assert!("127.0.0.1:9=6".parse::<Backend>().is_err());
        assert!("localhost:9".parse::<Backend>().is_err());
        assert!("127.0.0.1:9".parse::<Backend>().unwrap().tags.is_empty());
        let b: Backend = "127.0.0.1:9=tag:n1,00".parse().unwrap();
        assert_eq!(b.tags, vec![vec![0x67, 0x6b, 0x8b, 0xb8], vec![0]]);
        assert!("127.0.0.1:9=tag:".parse::<Backend>().is_err());
    }

    proptest::proptest! {
        /// The ClientHello path the proxy runs ([`inspect_hello`] via
        /// [`fuzz_entry`]) on arbitrary bytes, and on bytes framed as a
        /// handshake record holding a ClientHello-typed message whose
        /// lengths agree, so the parser gets past the framing.
        #[test]
        fn hello_path_never_panics(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            split in 0usize..100,
        ) {
            fuzz_entry(&junk);
            let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
            // A plausible start: legacy version 3.3 and a 32-byte random.
            msg.extend_from_slice(&[3, 3]);
            msg.extend_from_slice(&body);
            let len = msg.len() - 4;
            msg[2] = (len >> 8) as u8;
            msg[3] = len as u8;
            let cut = split.min(msg.len());
            let mut wire = Vec::new();
            for part in [&msg[..cut], &msg[cut..]] {
                wire.extend_from_slice(&[22, 3, 1, (part.len() >> 8) as u8, part.len() as u8]);
                wire.extend_from_slice(part);
            }
            let mut both = wire.clone();
            both.extend_from_slice(&junk);
            fuzz_entry(&both);
            let _ = inspect_hello(&wire);
        }
    }

    /// A real ClientHello from rustls (TLS 1.2 and 1.3 offered).
    fn real_hello() -> Vec<u8> {
        let prov = tlslab_crypto::provider::build(
            &[
                tlslab_crypto::provider::Version::Tls12,
                tlslab_crypto::provider::Version::Tls13,
            ],
            &tlslab_crypto::provider::Algorithms::default(),
        )
        .unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(prov)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut c = rustls::ClientConnection::new(
            std::sync::Arc::new(cfg),
            "example.com".try_into().unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_real_hello_parses_whole_and_in_pieces() {
        let h = real_hello();
        assert!(matches!(inspect_hello(&h), HelloStep::Parsed(..)));
        for cut in [0, 1, 5, 6, h.len() / 2, h.len() - 1] {
            assert!(
                matches!(inspect_hello(&h[..cut]), HelloStep::Incomplete),
                "{cut}"
            );
        }
    }

    proptest::proptest! {
        /// Single-byte and truncation mutations of a real ClientHello.
        #[test]
        fn mutated_real_hellos_never_panic(
            at in 0usize..4096,
            to in proptest::prelude::any::<u8>(),
            keep in 0usize..4096,
        ) {
            let mut h = real_hello();
            let n = h.len();
            h[at % n] = to;
            h.truncate(1 + keep % n);
            let _ = inspect_hello(&h);
            let mut both = h.clone();
            both.extend_from_slice(&h);
            fuzz_entry(&both);
        }
    }

    #[test]
    fn fuzz_entry_survives_junk() {
        let mut x = 1u64;
        for len in 0..400 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fuzz_entry(&v);
            let mut tls = vec![22, 3, 1, 1, 0, 1, 0, 0, 252];
            tls.extend_from_slice(&v);
            fuzz_entry(&tls);
        }
    }
}
