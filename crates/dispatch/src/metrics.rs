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

/// One metric family: its name (after `tlslab_dispatch_`), type, help and
/// samples (labels, value).
type Family<'a> = (&'a str, &'a str, &'a str, Vec<(String, String)>);

/// The Prometheus text (version 0.0.4) exposition.
pub fn render(e: &Exposition<'_>) -> String {
    let m = e.metrics;
    let one = |v: &AtomicU64| vec![(String::new(), v.load(Relaxed).to_string())];
    let by = |key: &str, labels: &[&str], values: &[AtomicU64]| -> Vec<(String, String)> {
        labels
            .iter()
            .zip(values)
            .map(|(l, v)| (format!("{key}=\"{l}\""), v.load(Relaxed).to_string()))
            .collect()
    };
    let kinds = KeyKind::ALL.map(KeyKind::label);
    let held = e.held.map(AtomicU64::new);
    let mut families: Vec<Family<'_>> = vec![
        (
            "connections_total",
            "counter",
            "Client connections by routing decision (dispatcher-observed).",
            by("decision", &Decision::LABELS, &m.decisions)
                .into_iter()
                .map(|(l, v)| (format!("policy=\"{}\",{l}", e.policy), v))
                .collect(),
        ),
        (
            "resumption_attempts_total",
            "counter",
            "ClientHellos offering a session ID (TLS 1.2 only clients), a ticket or a PSK, whose ServerHello was seen.",
            one(&m.attempts),
        ),
        (
            "resumptions_accepted_total",
            "counter",
            "Resumption attempts the chosen node accepted, read from its ServerHello.",
            one(&m.accepted),
        ),
        (
            "routing_efficiency",
            "gauge",
            "resumptions_accepted_total / resumption_attempts_total since start (NaN before any attempt).",
            vec![(String::new(), m.routing_efficiency().to_string())],
        ),
        (
            "rerouted_down_total",
            "counter",
            "Connections whose learned node was down, routed by load instead.",
            one(&m.rerouted_down),
        ),
        (
            "bad_input_total",
            "counter",
            "Connections whose first bytes were not a complete, valid ClientHello, by kind.",
            by("kind", &BadInput::LABELS, &m.bad_input),
        ),
        (
            "bad_input_closed_total",
            "counter",
            "Bad-input connections closed instead of forwarded (--bad-input close).",
            one(&m.bad_input_closed),
        ),
        (
            "open_connections",
            "gauge",
            "Client connections open now, reading a ClientHello or proxied.",
            one(&m.open),
        ),
        (
            "idle_closed_total",
            "counter",
            "Proxied connections closed because nothing moved either way for --idle-timeout.",
            one(&m.idle_closed),
        ),
        (
            "resets_total",
            "counter",
            "Proxied connections ended by a reset or failed write on one side, passed on to the other side as a reset.",
            by("from", &["node", "client"], &m.resets),
        ),
        (
            "no_backend_total",
            "counter",
            "Connections closed because no backend could be reached.",
            one(&m.no_backend),
        ),
        (
            "learned_total",
            "counter",
            "Session mappings learned, by kind.",
            by("kind", &kinds, &m.learned),
        ),
        (
            "sessions",
            "gauge",
            "Session mappings held now, by kind.",
            by("kind", &kinds, &held),
        ),
        (
            "cpu_seconds_total",
            "counter",
            "The dispatcher process's CPU time, user + system (getrusage).",
            vec![(String::new(), format!("{:.6}", e.cpu_seconds))],
        ),
    ];
    type Get = fn(&NodeStats) -> u64;
    // One row a family: name, type, help, and the node counter it reads.
    #[rustfmt::skip]
    let per_node: [(&str, &str, &str, Get); 7] = [
        ("node_connections_total", "counter", "Connections proxied to each node.", |s| s.connections.load(Relaxed)),
        ("node_active_connections", "gauge", "Connections open to each node now.", |s| s.active.load(Relaxed)),
        ("node_received_bytes_total", "counter", "Bytes from clients forwarded to each node.", |s| s.bytes_up.load(Relaxed)),
        ("node_sent_bytes_total", "counter", "Bytes from each node forwarded to clients.", |s| s.bytes_down.load(Relaxed)),
        ("node_connect_errors_total", "counter", "Failed connects to each node.", |s| s.connect_errors.load(Relaxed)),
        ("node_up", "gauge", "1 when the node passed its last health check, else 0.", |s| u64::from(s.healthy.load(Relaxed))),
        ("node_health_check_failures_total", "counter", "Failed health checks of each node (TCP connect or TLS handshake).", |s| s.health_failures.load(Relaxed)),
    ];
    families.extend(per_node.map(|(name, typ, help, get)| {
        let samples = e
            .nodes
            .iter()
            .map(|(addr, s)| (format!("node=\"{addr}\""), get(s).to_string()))
            .collect();
        (name, typ, help, samples)
    }));
    let mut o = String::with_capacity(4096);
    for (name, typ, help, samples) in families {
        let _ = writeln!(o, "# HELP tlslab_dispatch_{name} {help}");
        let _ = writeln!(o, "# TYPE tlslab_dispatch_{name} {typ}");
        for (labels, v) in samples {
            if labels.is_empty() {
                let _ = writeln!(o, "tlslab_dispatch_{name} {v}");
            } else {
                let _ = writeln!(o, "tlslab_dispatch_{name}{{{labels}}} {v}");
            }
        }
    }
    o
}
