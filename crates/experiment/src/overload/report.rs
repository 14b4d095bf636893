//! What `tlslab overload` measured, and its text.

use tlslab_schema::overload::Peer;
pub use tlslab_schema::overload::{OverloadReport, Point, Robustness, ServerSide, ShedCost};

use tlslab_report::{columns, header};

/// Client busy fraction (CPU over wall time, client-observed) from which a
/// point's figures may describe the load generator rather than the server.
pub const CLIENT_SATURATED: f64 = 0.9;

/// The text of an overload report.
pub trait OverloadText {
    /// The table a person reads: one block per arm, one row per load.
    fn render(&self) -> String;
}

impl OverloadText for OverloadReport {
    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tlslab overload{}: capacity {:.1} user sessions/s (K = {} requests, each on a new {} connection); server key {}; {}",
            if self.transport == "h3" { " --h3" } else { "" },
            self.capacity_users_per_sec,
            self.requests_per_session,
            if self.transport == "h3" {
                "QUIC"
            } else {
                "TLS"
            },
            self.key,
            self.placement
        );
        let _ = writeln!(
            out,
            "clients: after a failure, the next attempt {}",
            if self.retry_backoff_ms > 0.0 {
                format!(
                    "waits a uniform random time below min({:.0} ms x 2^(n-1), {:.0} ms) after the n-th failure in a row (exponential backoff, full jitter)",
                    self.retry_backoff_ms,
                    self.retry_backoff_ms * f64::from(tlslab_load::RETRY_BACKOFF_CAP)
                )
            } else {
                "starts at once (no backoff, as httperf)".to_string()
            }
        );
        let c = &self.shed_cost;
        if c.connections > 0 {
            let _ = writeln!(
                out,
                "shedding: {:.1} µs of server worker CPU per shed connection against {:.1} µs per full handshake ({:.1} %), {} of each from {} concurrent clients (a busy server), server-observed",
                c.shed_us,
                c.full_handshake_us,
                c.ratio * 100.0,
                c.connections,
                c.clients
            );
        }
        let _ = writeln!(
            out,
            "goodput = requests of completed sessions/s, throughput = all responses/s, p99 of completed requests (client-observed, per point window); shed, full hs and srv CPU server-observed (a fresh server per point, over the point)"
        );
        let mut arm = String::new();
        let widths = [5, 8, 9, 10, 8, 9, 9, 9, 8, 9, 8];
        for p in &self.points {
            if p.arm_name != arm {
                arm.clone_from(&p.arm_name);
                let _ = writeln!(out, "\n{arm}");
                if p.arm.server == Peer::Nginx {
                    let _ = writeln!(
                        out,
                        "  (nginx, limit_conn {}: full hs from its access log, one per connection that carried a request; \
                         full/res shed = limit_conn's 503s, each after a completed handshake; server CPU = the nginx process; \
                         handshake failures not logged)",
                        p.server.limit.unwrap_or(f64::NAN)
                    );
                }
                let head = "load|users/s|goodput|throughput|p99 ms|sessions|full hs|full shed|res shed|srv CPU s|cli busy";
                out.push_str(&columns("  ", &widths, &[header(head)]));
            }
            let (c, s) = (&p.client, &p.server);
            let row = vec![
                format!("{}x", p.multiplier),
                format!("{:.0}", p.offered_users_per_sec),
                format!("{:.0}", c.goodput_rps),
                format!("{:.0}", c.throughput_rps),
                format!("{:.0}", c.latency_p99_ms),
                c.sessions_completed.to_string(),
                s.handshakes_full.to_string(),
                s.full_shed.to_string(),
                s.resume_shed.to_string(),
                format!("{:.2}", s.worker_cpu_secs),
                format!("{:.0}%", c.client_busy * 100.0),
            ];
            out.push_str(&columns("  ", &widths, &[row]));
        }
        let ahead: Vec<String> = self
            .points
            .iter()
            .filter_map(|p| {
                let n = p.server.returning_ahead.filter(|n| *n > 0)?;
                Some(format!("{} at {}x: {n}", p.arm_name, p.multiplier))
            })
            .collect();
        if !ahead.is_empty() {
            let _ = writeln!(
                out,
                "\nover QUIC, full handshakes of returning clients (a NEW_TOKEN token) admitted ahead of \
                 new clients (server-observed): {}",
                ahead.join(", ")
            );
        }
        let saturated: Vec<String> = self
            .points
            .iter()
            .filter(|p| p.client.client_busy >= CLIENT_SATURATED)
            .map(|p| {
                format!(
                    "{} at {}x ({:.0} %)",
                    p.arm_name,
                    p.multiplier,
                    p.client.client_busy * 100.0
                )
            })
            .collect();
        if !saturated.is_empty() {
            let _ = writeln!(
                out,
                "\nWARNING: the load generator (one thread on its own CPU) was at least {:.0} % \
                 busy in {}: there the client may have set the pace, not the server, and the \
                 point measures both",
                CLIENT_SATURATED * 100.0,
                saturated.join(", ")
            );
        }
        let capped: Vec<String> = self
            .points
            .iter()
            .filter(|p| p.client.users_dropped > 0)
            .map(|p| {
                format!(
                    "{} at {}x ({} of {} arrivals)",
                    p.arm_name, p.multiplier, p.client.users_dropped, p.client.users_arrived
                )
            })
            .collect();
        if !capped.is_empty() {
            let _ = writeln!(
                out,
                "\nNOTE: the client holds at most {} users at once (a quarter of the process's \
                 file-descriptor limit, which the server shares); arrivals beyond that were \
                 dropped, not offered, in {}. There the server saw fewer users than the nominal \
                 load, and its queue was at most that many connections: when that is less work \
                 than the client timeout, requests do not time out and seed 002's collapse is \
                 bounded by the cap (raise `ulimit -n`, or shorten --timeout).",
                self.max_users,
                capped.join(", ")
            );
        }
        let after = |s: Option<u64>| {
            s.map_or_else(
                || "not within the low phase".into(),
                |s| format!("{s} s after the drop"),
            )
        };
        for r in &self.robustness {
            let _ = writeln!(
                out,
                "\nrobustness, admission {}: {} s at {:.0} users/s (3x), then {} s at {:.0}: goodput {:.0} req/s during overload, max RSS {} KiB, server {}; after the drop, goodput back to the offered load {}, new arrivals served {}",
                r.admission,
                r.high_secs,
                r.high_users_per_sec,
                r.low_secs,
                r.low_users_per_sec,
                r.high_goodput_rps,
                r.rss_max_kib,
                if r.survived { "alive" } else { "NOT answering" },
                after(r.goodput_recovery_secs),
                after(r.recovery_secs)
            );
        }
        for n in &self.not_run {
            let _ = writeln!(out, "\nnot run: {n}");
        }
        if let Some(q) = &self.quic {
            let _ = writeln!(out);
            out.push_str(&q.render());
            out.push_str(&side_by_side(self, q));
        }
        out
    }
}

/// The TCP and QUIC points of the same arm at the same multiple of each
/// transport's own capacity, one row each: goodput, p99, handshakes and
/// sheds, TCP's figure before QUIC's.
fn side_by_side(tcp: &OverloadReport, quic: &OverloadReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nTCP and QUIC side by side, each at multiples of its own capacity (TCP {:.1}, QUIC {:.1} user sessions/s); \
         each cell is TCP/QUIC. goodput and p99 client-observed over each point's window; handshakes and sheds \
         server-observed over the point's fresh server",
        tcp.capacity_users_per_sec, quic.capacity_users_per_sec
    );
    let widths = [-32, 5, 11, 11, 13, 13, 13, 9];
    let head = "arm|load|goodput|p99 ms|full hs|resumed hs|full shed|res shed";
    out.push_str(&columns("  ", &widths, &[header(head)]));
    for t in &tcp.points {
        let Some(q) = quic
            .points
            .iter()
            .find(|q| q.arm_name == t.arm_name && q.multiplier == t.multiplier)
        else {
            continue;
        };
        // One figure of both points: TCP's, then QUIC's.
        let both = |f: fn(&Point) -> String| format!("{}/{}", f(t), f(q));
        let row = vec![
            t.arm_name.clone(),
            format!("{}x", t.multiplier),
            both(|p| format!("{:.0}", p.client.goodput_rps)),
            both(|p| format!("{:.0}", p.client.latency_p99_ms)),
            both(|p| p.server.handshakes_full.to_string()),
            both(|p| p.server.handshakes_resumed.to_string()),
            both(|p| p.server.full_shed.to_string()),
            both(|p| p.server.resume_shed.to_string()),
        ];
        out.push_str(&columns("  ", &widths, &[row]));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::overload::plan::Arm;
    use tlslab_load::UsersReport;
    use tlslab_server::AdmissionMode;

    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            // `failures` is a map by reason: one documented field.
            serde_json::Value::Object(m) if !prefix.ends_with("failures") => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&p, v, out);
                }
            }
            serde_json::Value::Array(a) if a.first().is_some_and(|x| x.is_object()) => {
                leaves(&format!("{prefix}[]"), &a[0], out);
            }
            _ => out.push(prefix.to_string()),
        }
    }

    #[test]
    fn every_json_field_is_documented_in_the_schema_doc() {
        let readme = include_str!("../../../../docs/schema.md");
        let start = readme
            .find("### `tlslab overload --json FILE`")
            .expect("docs/schema.md documents tlslab overload --json");
        let rest = &readme[start + 4..];
        let section = &rest[..rest.find("\n### ").or(rest.find("\n## ")).unwrap()];
        let mut failures = std::collections::BTreeMap::new();
        failures.insert("timeout".to_string(), 1);
        let report = OverloadReport {
            placement: "p".into(),
            key: "rsa2048".into(),
            retry_backoff_ms: 100.0,
            max_users: 5000,
            shed_cost: ShedCost::default(),
            requests_per_session: 5,
            capacity_users_per_sec: 1.0,
            capacity_from: "sweep".into(),
            sweep: vec![(1.0, 1.0)],
            points: vec![Point {
                arm: Arm {
                    server: Peer::Tlslab,
                    admission: AdmissionMode::Session,
                    timeout: Some(Duration::from_secs(1)),
                    retry: true,
                    reuse: 0.8,
                }
                .to_schema(),
                arm_name: "a".into(),
                multiplier: 1.0,
                offered_users_per_sec: 1.0,
                client: UsersReport {
                    failures,
                    ..UsersReport::default()
                },
                server: ServerSide::default(),
            }],
            robustness: vec![Robustness {
                admission: AdmissionMode::Off.name().into(),
                high_users_per_sec: 1.0,
                high_secs: 60,
                low_users_per_sec: 1.0,
                low_secs: 15,
                survived: true,
                rss_max_kib: 1,
                recovery_secs: Some(1),
                goodput_recovery_secs: Some(0),
                high_goodput_rps: 1.0,
                timeline: vec![tlslab_load::Second::default()],
            }],
            not_run: vec![],
            transport: "tcp".into(),
            quic: None,
        };
        let v = serde_json::to_value(&report).unwrap();
        let mut paths = Vec::new();
        leaves("", &v, &mut paths);
        assert!(paths.len() > 30, "{paths:?}");
        let missing: Vec<_> = paths
            .iter()
            .filter(|p| !section.contains(&format!("`{p}`")))
            .collect();
        assert!(missing.is_empty(), "undocumented fields: {missing:?}");
    }
}
