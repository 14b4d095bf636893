//! What `tlslab cluster` measured: the cells, the targets checked, and
//! the text (every cell, then Fig. 9's shape).

use tlslab_report::{columns, header};

use super::plan::{ClusterConfig, DispatcherKind, Mechanism, NodeKind};

/// Schema version of [`ClusterReport`]'s JSON.
pub const SCHEMA_VERSION: u32 = 1;

pub use tlslab_schema::cluster::{ClusterCell, RedisGets, Skipped, TargetCheck};

/// The cluster's results, with the packet-level path's own report.
pub type ClusterReport = tlslab_schema::cluster::ClusterReport<tlslab_path::PathReport>;

pub(super) const METHOD: &str = "one connection per request, closed loop; every figure over the cell's load \
run (no warm-up): throughput client-observed; CPU per request and achieved resumption \
server-observed (node CPU summed over the nodes: thread schedstat of each embedded node, or \
/proc/PID/task/*/schedstat of each nginx; resumed and total handshakes from each node's counters \
or nginx access log of $ssl_session_reused); routing efficiency dispatcher-observed for tlslab \
dispatch (its /metrics: accepted ÷ attempts, read from ServerHellos), and nodes' resumed ÷ the \
client's offers for HAProxy; nodes, dispatcher and load fresh in every cell";

fn cell_at<'a>(
    cells: &'a [ClusterCell],
    m: Mechanism,
    arm: &str,
    reuse: f64,
) -> Option<&'a ClusterCell> {
    cells
        .iter()
        .find(|c| c.mechanism == m && c.arm == arm && (c.reuse_requested - reuse).abs() < 1e-9)
}

/// Issue 32's targets over QUIC at 80 % reuse: session-aware routing
/// reaches the ticket's issuer, and session and shared keys resume what
/// the client offered (within a point).
fn quic_targets(cfg: &ClusterConfig, cells: &[ClusterCell]) -> Vec<TargetCheck> {
    let m = Mechanism::Tls13Ticket;
    let n = cfg.nodes;
    let mut out = vec![check(
        format!("issue 32: QUIC session at 80 % reuse, {n} nodes: routing efficiency ≥ 0.99"),
        cell_at(cells, m, "session", 0.8).and_then(|c| c.routing_efficiency),
        0.99,
        false,
    )];
    for arm in ["session", "blind+shared-ticket-keys"] {
        let gap = cell_at(cells, m, arm, 0.8).and_then(|c| {
            c.resumption_offered
                .map(|o| (c.resumption_achieved - o).abs())
        });
        out.push(check(
            format!(
                "issue 32: QUIC {arm} at 80 % reuse, {n} nodes: |resumed − offered| share ≤ 0.01"
            ),
            gap,
            0.01,
            true,
        ));
    }
    out
}

pub(super) fn targets(cfg: &ClusterConfig, cells: &[ClusterCell]) -> Vec<TargetCheck> {
    if cfg.h3 {
        return quic_targets(cfg, cells);
    }
    let mut out = Vec::new();
    let nodes = match cfg.node_kind {
        NodeKind::Tlslab => "tlslab",
        NodeKind::Nginx => "nginx",
    };
    for m in [Mechanism::Tls12Id, Mechanism::Tls13Ticket] {
        let rr = cell_at(cells, m, "round-robin", 0.8);
        let se = cell_at(cells, m, "session", 0.8);
        let measured = match (rr, se) {
            (Some(r), Some(s)) => Some(s.cluster_cpu_us_per_request / r.cluster_cpu_us_per_request),
            _ => None,
        };
        out.push(check(
            format!(
                "issue 10: {} at 80 % reuse, {nodes} nodes: cluster CPU/request, session ÷ round-robin ≤ 0.6",
                m.name()
            ),
            measured,
            0.6,
            true,
        ));
    }
    for (arm, mechs) in [
        (
            "round-robin+redis-cache",
            [Mechanism::Tls12Id, Mechanism::Tls13Ticket],
        ),
        (
            "round-robin+shared-ticket-keys",
            [Mechanism::Tls12Ticket, Mechanism::Tls13Ticket],
        ),
    ] {
        for m in mechs {
            if !cells.iter().any(|c| c.arm == arm) {
                continue;
            }
            let measured = cell_at(cells, m, arm, 0.8).and_then(|c| c.achieved_over_requested);
            out.push(check(
                format!(
                    "issue 11: {} {arm} at 80 % reuse, {} nodes: achieved ÷ requested resumption ≥ 0.98",
                    m.name(),
                    cfg.nodes
                ),
                measured,
                0.98,
                false,
            ));
        }
    }
    out
}

fn check(target: String, measured: Option<f64>, bound: f64, at_most: bool) -> TargetCheck {
    let verdict = match measured {
        None => "not run",
        Some(v) if (at_most && v <= bound) || (!at_most && v >= bound) => "met",
        Some(_) => "missed",
    };
    TargetCheck {
        target,
        measured,
        bound,
        verdict: verdict.to_string(),
    }
}

/// The text of a cluster report.
pub trait ClusterText {
    /// Every cell, then Fig. 9's shape.
    fn render(&self) -> String;

    /// Fig. 9's shape: per mechanism, throughput and CPU per request
    /// against reuse for each arm, and a bar chart of throughput.
    fn render_fig9(&self) -> String;
}

impl ClusterText for ClusterReport {
    /// The human report: every cell, then Fig. 9's shape per mechanism
    /// (throughput and CPU per request against reuse, blind against
    /// session-aware and shared state), then the targets.
    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "tlslab cluster{}: {} {} nodes behind {}, {} clients, {:.1} s per cell, {} certificate, GET {}",
            if self.quick { " (quick)" } else { "" },
            self.nodes,
            match (self.node_kind, self.h3) {
                (NodeKind::Tlslab, false) => "tlslab serve",
                (NodeKind::Tlslab, true) =>
                    "tlslab serve --h3 (HTTP/3 over QUIC, QUIC-LB connection IDs)",
                (NodeKind::Nginx, _) => "nginx",
            },
            match (self.dispatcher, self.h3) {
                (DispatcherKind::Tlslab, false) => "tlslab dispatch",
                (DispatcherKind::Tlslab, true) =>
                    "tlslab dispatch --udp (a new client port per connection)",
                (DispatcherKind::Haproxy, _) =>
                    "HAProxy (TCP mode; session = stick-table recipe on the TLS 1.2 session ID)",
            },
            self.clients,
            self.cell_s,
            self.key,
            self.path
        );
        let _ = writeln!(
            o,
            "key exchange: {}",
            match &self.groups {
                Some(g) => format!("{} (--groups), nodes and load", g.join(",")),
                None => "each side's default groups (tlslab: X25519MLKEM768 first; nginx: OpenSSL's, X25519 first)".into(),
            }
        );
        let _ = writeln!(o, "placement: {}", self.placement.description);
        for (k, v) in &self.peers {
            let _ = writeln!(o, "peer {k}: {v}");
        }
        let _ = writeln!(o, "method: {}", self.method);
        let _ = writeln!(o);
        let mut rows = vec![
            header(
                "mechanism|arm|reuse|req/s|p50 ms|cpu µs/req|offered|resumed|routing|nodes|client|disp µs|errors",
            ),
            header("||%|(client)|(client)|(server)|(client)|(server)|eff.|busy|busy|/conn|"),
        ];
        rows.extend(self.cells.iter().map(|c| {
            vec![
                c.mechanism.name().into(),
                c.arm.clone(),
                format!("{:.0}", c.reuse_requested * 100.0),
                format!("{:.0}", c.throughput_rps),
                c.latency_p50_us
                    .map_or("-".into(), |v| format!("{:.2}", v as f64 / 1e3)),
                format!("{:.1}", c.cluster_cpu_us_per_request),
                c.resumption_offered
                    .map_or("-".into(), |o| format!("{:.1}%", o * 100.0)),
                format!("{:.1}%", c.resumption_achieved * 100.0),
                c.routing_efficiency.map_or("-".into(), |e| {
                    let mark = if c.routing_efficiency_source == "dispatcher" {
                        ""
                    } else {
                        "*"
                    };
                    format!("{e:.3}{mark}")
                }),
                format!("{:.2}", c.nodes_busy),
                format!(
                    "{:.2}{}",
                    c.client_busy,
                    if c.client_saturated { "!" } else { " " }
                ),
                format!("{:.1}", c.dispatcher_cpu_us_per_conn.unwrap_or(f64::NAN)),
                c.errors.to_string(),
            ]
        }));
        let widths = [-13, -31, 5, 8, 8, 9, 8, 8, 8, 7, 7, 7, 6];
        o.push_str(&columns("", &widths, &rows));
        let _ = writeln!(
            o,
            "routing eff.: dispatcher-observed; * = nodes' resumed ÷ client's offers (HAProxy cannot tell). \
             nodes busy: node CPU ÷ window (1.00 = one CPU). client busy ! = load engine ≥ 90 % busy \
             (throughput then measures the client side)."
        );
        if let Some(c) = self.cells.iter().find(|c| c.note.is_some()) {
            let _ = writeln!(
                o,
                "note: {} {}: {}",
                c.mechanism.name(),
                c.arm,
                c.note.as_deref().unwrap_or("")
            );
        }
        for c in &self.cells {
            if let Some(g) = c.redis_gets {
                let _ = writeln!(
                    o,
                    "redis: {} {} reuse {:.0} %: node GETs {} hits, {} misses, {} timeouts (> {:.0} ms), {} errors; redis-server CPU {:.1} µs/request (server-observed, not in cluster CPU)",
                    c.mechanism.name(),
                    c.arm,
                    c.reuse_requested * 100.0,
                    g.hits,
                    g.misses,
                    g.timeouts,
                    self.redis_timeout_ms,
                    g.errors,
                    c.redis_cpu_us_per_request.unwrap_or(f64::NAN)
                );
            }
        }
        for s in &self.skipped {
            let _ = writeln!(o, "skipped: {} {}: {}", s.mechanism.name(), s.arm, s.reason);
        }
        if let Some(p) = &self.wan_path {
            let _ = writeln!(
                o,
                "\nAcross a packet-level WAN path (tlslab path) between the load and the \
                 dispatcher: req/s and p50 are bounded by the round trips (connect, handshake, \
                 GET); CPU per request still measures the nodes.\n{p}"
            );
        }
        o.push_str(&self.render_fig9());
        let _ = writeln!(o);
        let _ = writeln!(o, "Targets:");
        for t in &self.targets {
            let _ = writeln!(
                o,
                "  [{}] {}: {}",
                t.verdict,
                t.target,
                t.measured
                    .map_or("not measured".into(), |v| format!("{v:.3}"))
            );
        }
        o
    }

    fn render_fig9(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let mut mechs: Vec<Mechanism> = self.cells.iter().map(|c| c.mechanism).collect();
        mechs.dedup();
        let max_rps = self
            .cells
            .iter()
            .map(|c| c.throughput_rps)
            .fold(0.0f64, f64::max)
            .max(1.0);
        for m in mechs {
            let cells: Vec<&ClusterCell> = self.cells.iter().filter(|c| c.mechanism == m).collect();
            let mut arms: Vec<String> = Vec::new();
            for c in &cells {
                if !arms.contains(&c.arm) {
                    arms.push(c.arm.clone());
                }
            }
            let mut reuses: Vec<f64> = Vec::new();
            for c in &cells {
                if !reuses.iter().any(|r| (r - c.reuse_requested).abs() < 1e-9) {
                    reuses.push(c.reuse_requested);
                }
            }
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "Fig. 9 shape, {}: throughput (req/s, client-observed) | cluster CPU per request (µs, server-observed)",
                m.name()
            );
            // reuse | throughput of each arm | CPU of each arm | session ÷ rr.
            let mut widths = vec![6];
            widths.extend(arms.iter().map(|_| 14));
            widths.push(1);
            widths.extend(arms.iter().map(|_| 14));
            widths.extend([1, 15, 6]);
            // The blind baseline: round-robin over TCP, the 4-tuple hash
            // over QUIC.
            let base = if arms.iter().any(|a| a == "round-robin") {
                "round-robin"
            } else {
                "blind"
            };
            let has_ratio = arms.iter().any(|a| a == base) && arms.iter().any(|a| a == "session");
            let mut head = vec!["reuse".to_string()];
            head.extend(arms.iter().map(|a| short(a)));
            head.push("|".into());
            head.extend(arms.iter().map(|a| short(a)));
            if has_ratio {
                head.extend([
                    "|".into(),
                    if base == "blind" {
                        "session÷blind rps cpu".into()
                    } else {
                        "session÷rr rps  cpu".into()
                    },
                ]);
            }
            let mut rows = vec![head];
            for &r in &reuses {
                let get = |a: &str| cell_at(&self.cells, m, a, r);
                let mut row = vec![format!("{:.0}%", r * 100.0)];
                row.extend(
                    arms.iter()
                        .map(|a| get(a).map_or("-".into(), |c| format!("{:.0}", c.throughput_rps))),
                );
                row.push("|".into());
                row.extend(arms.iter().map(|a| {
                    get(a).map_or("-".into(), |c| {
                        format!("{:.1}", c.cluster_cpu_us_per_request)
                    })
                }));
                if has_ratio && let (Some(rr), Some(se)) = (get(base), get("session")) {
                    row.extend([
                        "|".into(),
                        format!("{:.2}x", se.throughput_rps / rr.throughput_rps.max(1e-9)),
                        format!(
                            "{:.2}x",
                            se.cluster_cpu_us_per_request / rr.cluster_cpu_us_per_request.max(1e-9)
                        ),
                    ]);
                }
                rows.push(row);
            }
            o.push_str(&columns("", &widths, &rows));
            // Below 10 req/s a whole number would read "each # = 0".
            let per = max_rps / 50.0;
            let per = if per >= 10.0 {
                format!("{per:.0}")
            } else {
                format!("{per:.2}")
            };
            let _ = writeln!(o, "  throughput against reuse (each # = {per} req/s):");
            let mut bars = Vec::new();
            for &r in &reuses {
                for a in &arms {
                    if let Some(c) = cell_at(&self.cells, m, a, r) {
                        let n = ((c.throughput_rps / max_rps) * 50.0).round() as usize;
                        bars.push(vec![
                            format!("{:.0}%", r * 100.0),
                            short(a),
                            "#".repeat(n),
                            format!("{:.0}", c.throughput_rps),
                        ]);
                    }
                }
            }
            o.push_str(&columns("  ", &[5, -14, -50, 1], &bars));
        }
        o
    }
}

/// A column label of at most 14 characters.
fn short(arm: &str) -> String {
    match arm {
        "round-robin" => "rr (blind)".into(),
        "session" => "session-aware".into(),
        "round-robin+redis-cache" => "rr+redis-cache".into(),
        "round-robin+shared-ticket-keys" => "rr+shared-keys".into(),
        "blind" => "blind (hash)".into(),
        "blind+shared-ticket-keys" => "blind+shared".into(),
        a => a.chars().take(14).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Sharing;

    #[test]
    fn targets_compare_session_with_round_robin() {
        let cell = |arm: &str, cpu: f64| ClusterCell {
            mechanism: Mechanism::Tls12Id,
            policy: arm.into(),
            sharing: Sharing::None,
            arm: arm.into(),
            reuse_requested: 0.8,
            window_s: 1.0,
            requests: 1,
            errors: 0,
            throughput_rps: 1.0,
            connect_p50_us: None,
            latency_p50_us: None,
            cluster_cpu_us_per_request: cpu,
            nodes_busy: 1.0,
            node_cpu_s: vec![],
            node_requests: vec![],
            handshakes: 1,
            resumed: 1,
            resumption_achieved: 0.8,
            achieved_over_requested: Some(1.0),
            client_offers: 1,
            resumption_offered: None,
            routing_efficiency: Some(1.0),
            routing_efficiency_source: "dispatcher".into(),
            dispatcher_cpu_us_per_conn: None,
            redis_cpu_us_per_request: None,
            redis_gets: None,
            client_busy: 0.5,
            client_saturated: false,
            note: None,
        };
        let t = targets(
            &ClusterConfig::quick(),
            &[cell("round-robin", 100.0), cell("session", 50.0)],
        );
        assert_eq!(t[0].verdict, "met");
        assert_eq!(t[0].measured, Some(0.5));
        assert_eq!(t[1].verdict, "not run");
        let t = targets(
            &ClusterConfig::quick(),
            &[cell("round-robin", 100.0), cell("session", 70.0)],
        );
        assert_eq!(t[0].verdict, "missed");
    }
}
