//! The dispatcher's counters and their Prometheus text exposition.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::table::KeyKind;

/// How a connection was routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The ClientHello carried a key the table maps to a live node.
    SessionHit = 0,
    /// It carried a resumption key the table does not know (or whose node
    /// is down); routed by load.
    SessionMiss = 1,
    /// It carried no resumption key (or the policy is blind).
    NoSession = 2,
}

impl Decision {
    const LABELS: [&'static str; 3] = ["session_hit", "session_miss", "no_session"];
}

/// Bad input from a client, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadInput {
    /// The first bytes are not a TLS handshake record.
    NotTls = 0,
    /// A TLS handshake whose ClientHello does not parse.
    Malformed = 1,
    /// The client stalled before its ClientHello was complete.
    Timeout = 2,
    /// The client closed before its ClientHello was complete.
    Truncated = 3,
}

impl BadInput {
    const LABELS: [&'static str; 4] = ["not_tls", "malformed", "timeout", "truncated"];
}

/// One backend's counters.
#[derive(Default)]
pub struct NodeStats {
    /// Connections proxied to it.
    pub connections: AtomicU64,
    /// Connections open now.
    pub active: AtomicU64,
    /// Bytes client → node.
    pub bytes_up: AtomicU64,
    /// Bytes node → client.
    pub bytes_down: AtomicU64,
    /// Connect failures.
    pub connect_errors: AtomicU64,
    /// Health: true when the last check passed.
    pub healthy: AtomicBool,
    /// Failed health checks.
    pub health_failures: AtomicU64,
}

/// All counters.
#[derive(Default)]
pub struct Metrics {
    /// Connections by [`Decision`].
    pub decisions: [AtomicU64; 3],
    /// Resumption attempts whose ServerHello was seen.
    pub attempts: AtomicU64,
    /// Of those, the ones the chosen node accepted.
    pub accepted: AtomicU64,
    /// Connections whose mapped node was down and were re-routed by load.
    pub rerouted_down: AtomicU64,
    /// Bad input by [`BadInput`].
    pub bad_input: [AtomicU64; 4],
    /// Bad-input connections closed rather than forwarded.
    pub bad_input_closed: AtomicU64,
    /// Connections for which no node could be reached.
    pub no_backend: AtomicU64,
    /// Mappings learned, by kind.
    pub learned: [AtomicU64; 2],
    /// Client connections open now (reading a hello or proxied).
    pub open: AtomicU64,
    /// Proxied connections closed by `--idle-timeout`.
    pub idle_closed: AtomicU64,
    /// Proxied connections ended by a failure of one side, passed on to
    /// the other as a reset: `[node failed, client failed]`.
    pub resets: [AtomicU64; 2],
}

impl Metrics {
    /// Counts a routing decision.
    pub fn decision(&self, d: Decision) {
        self.decisions[d as usize].fetch_add(1, Relaxed);
    }

    /// Counts bad input.
    pub fn bad(&self, b: BadInput) {
        self.bad_input[b as usize].fetch_add(1, Relaxed);
    }

    /// Routing efficiency so far: accepted / attempts (NaN before any).
    pub fn routing_efficiency(&self) -> f64 {
        let a = self.attempts.load(Relaxed);
        if a == 0 {
            f64::NAN
        } else {
            self.accepted.load(Relaxed) as f64 / a as f64
        }
    }
}

/// Everything the exposition needs beyond [`Metrics`].
pub struct Exposition<'a> {
    /// The counters.
    pub metrics: &'a Metrics,
    /// The nodes: address and counters.
    pub nodes: Vec<(String, &'a NodeStats)>,
    /// Mappings held, by kind.
    pub held: [u64; 2],
    /// The policy name.
    pub policy: &'a str,
    /// Process CPU seconds (user + system).
    pub cpu_seconds: f64,
}

/// The Prometheus text (version 0.0.4) exposition.
pub fn render(e: &Exposition<'_>) -> String {
    let m = e.metrics;
    let mut o = String::with_capacity(4096);
    let family = |o: &mut String, name: &str, typ: &str, help: &str| {
        let _ = writeln!(o, "# HELP tlslab_dispatch_{name} {help}");
        let _ = writeln!(o, "# TYPE tlslab_dispatch_{name} {typ}");
    };
    family(
        &mut o,
        "connections_total",
        "counter",
        "Client connections by routing decision (dispatcher-observed).",
    );
    for (i, l) in Decision::LABELS.iter().enumerate() {
        let _ = writeln!(
            o,
            "tlslab_dispatch_connections_total{{policy=\"{}\",decision=\"{l}\"}} {}",
            e.policy,
            m.decisions[i].load(Relaxed)
        );
    }
    family(
        &mut o,
        "resumption_attempts_total",
        "counter",
        "ClientHellos offering a session ID (TLS 1.2 only clients), a ticket or a PSK, whose ServerHello was seen.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_resumption_attempts_total {}",
        m.attempts.load(Relaxed)
    );
    family(
        &mut o,
        "resumptions_accepted_total",
        "counter",
        "Resumption attempts the chosen node accepted, read from its ServerHello.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_resumptions_accepted_total {}",
        m.accepted.load(Relaxed)
    );
    family(
        &mut o,
        "routing_efficiency",
        "gauge",
        "resumptions_accepted_total / resumption_attempts_total since start (NaN before any attempt).",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_routing_efficiency {}",
        m.routing_efficiency()
    );
    family(
        &mut o,
        "rerouted_down_total",
        "counter",
        "Connections whose learned node was down, routed by load instead.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_rerouted_down_total {}",
        m.rerouted_down.load(Relaxed)
    );
    family(
        &mut o,
        "bad_input_total",
        "counter",
        "Connections whose first bytes were not a complete, valid ClientHello, by kind.",
    );
    for (i, l) in BadInput::LABELS.iter().enumerate() {
        let _ = writeln!(
            o,
            "tlslab_dispatch_bad_input_total{{kind=\"{l}\"}} {}",
            m.bad_input[i].load(Relaxed)
        );
    }
    family(
        &mut o,
        "bad_input_closed_total",
        "counter",
        "Bad-input connections closed instead of forwarded (--bad-input close).",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_bad_input_closed_total {}",
        m.bad_input_closed.load(Relaxed)
    );
    family(
        &mut o,
        "open_connections",
        "gauge",
        "Client connections open now, reading a ClientHello or proxied.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_open_connections {}",
        m.open.load(Relaxed)
    );
    family(
        &mut o,
        "idle_closed_total",
        "counter",
        "Proxied connections closed because nothing moved either way for --idle-timeout.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_idle_closed_total {}",
        m.idle_closed.load(Relaxed)
    );
    family(
        &mut o,
        "resets_total",
        "counter",
        "Proxied connections ended by a reset or failed write on one side, passed on to the other side as a reset.",
    );
    for (i, l) in ["node", "client"].iter().enumerate() {
        let _ = writeln!(
            o,
            "tlslab_dispatch_resets_total{{from=\"{l}\"}} {}",
            m.resets[i].load(Relaxed)
        );
    }
    family(
        &mut o,
        "no_backend_total",
        "counter",
        "Connections closed because no backend could be reached.",
    );
    let _ = writeln!(
        o,
        "tlslab_dispatch_no_backend_total {}",
        m.no_backend.load(Relaxed)
    );
    family(
        &mut o,
        "learned_total",
        "counter",
        "Session mappings learned, by kind.",
    );
    for k in KeyKind::ALL {
        let _ = writeln!(
            o,
            "tlslab_dispatch_learned_total{{kind=\"{}\"}} {}",
            k.label(),
            m.learned[k as usize].load(Relaxed)
        );
    }
    family(
        &mut o,
        "sessions",
        "gauge",
        "Session mappings held now, by kind.",
    );
    for k in KeyKind::ALL {
        let _ = writeln!(
            o,
            "tlslab_dispatch_sessions{{kind=\"{}\"}} {}",
            k.label(),
            e.held[k as usize]
        );
    }
    family(
        &mut o,
        "cpu_seconds_total",
        "counter",
        "The dispatcher process's CPU time, user + system (getrusage).",
    );
    let _ = writeln!(o, "tlslab_dispatch_cpu_seconds_total {:.6}", e.cpu_seconds);
    type Get = fn(&NodeStats) -> u64;
    let per_node: [(&str, &str, &str, Get); 7] = [
        (
            "node_connections_total",
            "counter",
            "Connections proxied to each node.",
            |s| s.connections.load(Relaxed),
        ),
        (
            "node_active_connections",
            "gauge",
            "Connections open to each node now.",
            |s| s.active.load(Relaxed),
        ),
        (
            "node_received_bytes_total",
            "counter",
            "Bytes from clients forwarded to each node.",
            |s| s.bytes_up.load(Relaxed),
        ),
        (
            "node_sent_bytes_total",
            "counter",
            "Bytes from each node forwarded to clients.",
            |s| s.bytes_down.load(Relaxed),
        ),
        (
            "node_connect_errors_total",
            "counter",
            "Failed connects to each node.",
            |s| s.connect_errors.load(Relaxed),
        ),
        (
            "node_up",
            "gauge",
            "1 when the node passed its last health check, else 0.",
            |s| u64::from(s.healthy.load(Relaxed)),
        ),
        (
            "node_health_check_failures_total",
            "counter",
            "Failed health checks of each node (TCP connect or TLS handshake).",
            |s| s.health_failures.load(Relaxed),
        ),
    ];
    for (name, typ, help, get) in per_node {
        family(&mut o, name, typ, help);
        for (addr, s) in &e.nodes {
            let _ = writeln!(o, "tlslab_dispatch_{name}{{node=\"{addr}\"}} {}", get(s));
        }
    }
    o
}
