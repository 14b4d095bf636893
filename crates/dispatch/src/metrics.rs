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

/// How a client datagram's node was found (UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutedBy {
    /// The QUIC-LB server ID in its Destination Connection ID.
    Cid = 0,
    /// A new connection: the policy's choice on its first Initial (for
    /// `session`, its ClientHello's PSK identity, else by load).
    Connection = 1,
    /// A later Initial or 0-RTT packet, by the client-chosen DCID of a
    /// connection already routed.
    Dcid = 2,
    /// A packet with no routable CID, by the node its 4-tuple last went to.
    Flow = 3,
    /// The 4-tuple hash (the `blind` policy, and the draft's fallback).
    Hash = 4,
}

impl RoutedBy {
    const LABELS: [&'static str; 5] = ["cid", "connection", "dcid", "flow", "hash"];
}

/// Datagrams not forwarded (UDP), by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The socket would block or the send failed.
    SendFailed = 0,
    /// Larger than the dispatcher's datagram buffer.
    Oversize = 1,
}

impl Dropped {
    const LABELS: [&'static str; 2] = ["send_failed", "oversize"];
}

/// The UDP (QUIC) counters.
#[derive(Default)]
pub struct UdpMetrics {
    /// Datagrams forwarded: `[client → node, node → client]`.
    pub datagrams: [AtomicU64; 2],
    /// Client datagrams by [`RoutedBy`].
    pub routed: [AtomicU64; 5],
    /// Datagrams dropped, by [`Dropped`].
    pub dropped: [AtomicU64; 2],
    /// Connections whose held datagrams reached the hold cap before the
    /// ClientHello was whole (routed by the fallback).
    pub hold_full: AtomicU64,
    /// Client Initials that did not decrypt or whose ClientHello did not
    /// parse (routed by the fallback).
    pub unreadable_initials: AtomicU64,
    /// Connection IDs with a QUIC-LB config ID the dispatcher knows but a
    /// server ID no backend has (routed by the fallback).
    pub unknown_server_id: AtomicU64,
    /// Client datagrams held until their connection's ClientHello was
    /// whole (it spans several Initials).
    pub held: AtomicU64,
    /// Flows (client address and port) open now.
    pub flows: AtomicU64,
    /// Flows closed after `--idle-timeout` without a datagram.
    pub flows_expired: AtomicU64,
    /// Flows dropped at `--max-flows` (least recently active first).
    pub flows_evicted: AtomicU64,
    /// Server Initials read for their ServerHello.
    pub server_hellos: AtomicU64,
}

impl UdpMetrics {
    /// Counts a routed client datagram.
    pub fn routed(&self, by: RoutedBy) {
        self.routed[by as usize].fetch_add(1, Relaxed);
    }

    /// Counts a dropped datagram.
    pub fn dropped(&self, why: Dropped) {
        self.dropped[why as usize].fetch_add(1, Relaxed);
    }
}

/// All counters.
#[derive(Default)]
pub struct Metrics {
    /// UDP (QUIC) only.
    pub udp: UdpMetrics,
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
    /// The transport (`tcp`, `udp`).
    pub transport: &'a str,
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
            "Client connections by routing decision (dispatcher-observed; over UDP, QUIC connections by their first Initial).",
            by("decision", &Decision::LABELS, &m.decisions)
                .into_iter()
                .map(|(l, v)| {
                    (
                        format!("transport=\"{}\",policy=\"{}\",{l}", e.transport, e.policy),
                        v,
                    )
                })
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
    if e.transport == "udp" {
        let u = &m.udp;
        families.extend([
            (
                "datagrams_total",
                "counter",
                "UDP datagrams forwarded, by direction.",
                by("direction", &["up", "down"], &u.datagrams),
            ),
            (
                "routed_datagrams_total",
                "counter",
                "Client datagrams by how their node was found: cid (QUIC-LB server ID), connection (the policy's choice for a new connection), dcid (a later Initial or 0-RTT packet of a routed connection), flow (no routable CID: the 4-tuple's last node), hash (the 4-tuple hash: blind, and the fallback).",
                by("by", &RoutedBy::LABELS, &u.routed),
            ),
            (
                "dropped_datagrams_total",
                "counter",
                "Datagrams not forwarded, by reason.",
                by("reason", &Dropped::LABELS, &u.dropped),
            ),
            (
                "unreadable_initials_total",
                "counter",
                "Client Initials that did not decrypt or held no readable ClientHello (routed by the fallback).",
                one(&u.unreadable_initials),
            ),
            (
                "unknown_server_id_total",
                "counter",
                "QUIC-LB connection IDs whose server ID is no backend's (routed by the fallback).",
                one(&u.unknown_server_id),
            ),
            (
                "hold_full_total",
                "counter",
                "Connections whose held datagrams reached the cap (8) before their ClientHello was whole, routed by the fallback.",
                one(&u.hold_full),
            ),
            (
                "held_datagrams_total",
                "counter",
                "Client datagrams held until their connection's ClientHello was whole.",
                one(&u.held),
            ),
            (
                "flows",
                "gauge",
                "UDP flows (client address and port) open now.",
                one(&u.flows),
            ),
            (
                "flows_expired_total",
                "counter",
                "UDP flows closed after --idle-timeout without a datagram either way.",
                one(&u.flows_expired),
            ),
            (
                "flows_evicted_total",
                "counter",
                "UDP flows dropped at --max-flows, least recently active first.",
                one(&u.flows_evicted),
            ),
            (
                "server_hellos_total",
                "counter",
                "Server Initials opened for their ServerHello (what a resumption attempt's outcome is read from).",
                one(&u.server_hellos),
            ),
        ]);
    }
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
