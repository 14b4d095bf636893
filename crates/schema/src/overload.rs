//! The report of `tlslab overload --json` (also a seed002 study's
//! `engine_report`), and the user-session figures of the load engine
//! (`tlslab load --users`) each point carries. Field names are documented
//! in docs/schema.md ("`tlslab overload --json FILE`").

use serde::{Deserialize, Serialize};

use crate::float::or_nan;

/// Which server a point runs against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// The embedded `tlslab serve` engine.
    #[default]
    Tlslab,
    /// nginx with `limit_conn` (the unprotected reference).
    Nginx,
}

/// One client behaviour and server protection, as the report records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    /// The server: the embedded one or nginx.
    pub server: Peer,
    /// Server admission control (`off`, `static`, `session`).
    pub admission: String,
    /// Client timeout per request, seconds; `None`: infinite.
    pub timeout: Option<f64>,
    /// Retry a failed request in the same session (else a new client).
    pub retry: bool,
    /// Share of connections offering the stored session (0 to 1).
    pub reuse: f64,
}

/// One point: an arm at one offered load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The arm.
    pub arm: Arm,
    /// The arm's name.
    pub arm_name: String,
    /// Offered load as a multiple of the capacity.
    #[serde(deserialize_with = "or_nan")]
    pub multiplier: f64,
    /// Offered new users per second.
    #[serde(deserialize_with = "or_nan")]
    pub offered_users_per_sec: f64,
    /// What the client measured.
    pub client: UsersReport,
    /// What the server measured over the same run.
    pub server: ServerSide,
}

/// Server-observed figures of one point (the server's whole life, which
/// is the point: a fresh server per point). For nginx: from its access log
/// and `/proc`; what it cannot give is `null` and named in `unavailable`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSide {
    /// Where the figures come from.
    pub source: String,
    /// Requests the server answered with 200 (tlslab: every request it
    /// served; nginx: status-200 lines of its access log).
    pub requests_served: u64,
    /// Full handshakes completed (nginx: connections whose first request
    /// it logged on a new session; a handshake with no request is not
    /// logged).
    pub handshakes_full: u64,
    /// Resumed handshakes completed (nginx: as above, `$ssl_session_reused`).
    pub handshakes_resumed: u64,
    /// Failed or abandoned handshakes (sheds included as `admission_shed`);
    /// `null` for nginx (its access log has no line for them).
    pub handshake_failures: Option<u64>,
    /// Full handshakes shed (tlslab: closed after the ClientHello; nginx:
    /// requests `limit_conn` answered 503 on a full handshake, which nginx
    /// completed first).
    pub full_shed: u64,
    /// Resumptions shed (nginx: `limit_conn` 503s on a resumed session).
    pub resume_shed: u64,
    /// Over QUIC: full handshakes of returning clients (an Initial with a
    /// NEW_TOKEN token) admitted ahead of new clients, when a new client's
    /// would have been shed. Absent over TCP and for nginx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returning_ahead: Option<u64>,
    /// The controller's last limit (full handshakes/s; static: in-flight
    /// cap; nginx: its `limit_conn`), if any.
    pub limit: Option<f64>,
    /// Server CPU seconds (tlslab: its worker thread; nginx: its one
    /// process, `/proc/PID/schedstat`, over the load run).
    #[serde(deserialize_with = "or_nan")]
    pub worker_cpu_secs: f64,
    /// Resident set size at the end of the point, KiB (tlslab: this
    /// process, server and client; nginx: the nginx process alone).
    pub rss_kib: u64,
    /// Figures this server cannot give, and why.
    pub unavailable: Vec<String>,
}

/// What shedding costs the server against a full handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShedCost {
    /// Connections in each of the two runs.
    pub connections: u64,
    /// Concurrent blocking clients in each run (the server stays busy).
    pub clients: usize,
    /// Server worker CPU per full handshake (admission off), µs.
    #[serde(deserialize_with = "or_nan")]
    pub full_handshake_us: f64,
    /// Server worker CPU per shed connection (accept, read and parse the
    /// ClientHello, close), µs.
    #[serde(deserialize_with = "or_nan")]
    pub shed_us: f64,
    /// `shed_us / full_handshake_us`.
    #[serde(deserialize_with = "or_nan")]
    pub ratio: f64,
}

/// The whole study.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverloadReport {
    /// Where the server and client ran.
    pub placement: String,
    /// The server certificate's key.
    pub key: String,
    /// The clients' backoff base after a failure, ms (0: at once).
    #[serde(deserialize_with = "or_nan")]
    pub retry_backoff_ms: f64,
    /// The most users the client holds at once (a quarter of the
    /// file-descriptor limit, which the server in this process shares);
    /// arrivals beyond it are dropped and counted (`users_dropped`).
    pub max_users: usize,
    /// The cost of a shed against a full handshake (server-observed).
    pub shed_cost: ShedCost,
    /// Requests per session.
    pub requests_per_session: u32,
    /// Capacity found by the sweep: completed user sessions per second.
    #[serde(deserialize_with = "or_nan")]
    pub capacity_users_per_sec: f64,
    /// `sweep` (found by the sweep) or `given` (`--capacity`).
    pub capacity_from: String,
    /// The sweep: (offered users/s, completed sessions/s); empty if given.
    pub sweep: Vec<(f64, f64)>,
    /// Every point.
    pub points: Vec<Point>,
    /// The robustness runs (`--robustness`; empty otherwise).
    pub robustness: Vec<Robustness>,
    /// What was not run, said plainly.
    pub not_run: Vec<String>,
    /// `tcp` (HTTPS over TCP) or `h3` (`overload --h3`: HTTP/3 over QUIC,
    /// each request a new QUIC connection). Reports from before it was
    /// recorded were TCP's, and read as `tcp`.
    #[serde(default = "tcp")]
    pub transport: String,
    /// The same plan over QUIC (`overload --transport both`, and the
    /// seed002 study): a report of its own (`transport` `h3`, its own
    /// capacity sweep), set beside this TCP one so the two are read at
    /// multiples of each transport's own capacity. Absent otherwise, and
    /// in reports from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<Box<OverloadReport>>,
}

fn tcp() -> String {
    "tcp".into()
}

/// The robustness run of one admission mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Robustness {
    /// The server's admission control (`off`, `static`, `session`).
    pub admission: String,
    /// Offered users/s during the overload phase (3x capacity).
    #[serde(deserialize_with = "or_nan")]
    pub high_users_per_sec: f64,
    /// Length of the overload phase (s).
    pub high_secs: u64,
    /// Offered users/s after the drop (0.5x capacity).
    #[serde(deserialize_with = "or_nan")]
    pub low_users_per_sec: f64,
    /// Length of the low phase (s).
    pub low_secs: u64,
    /// The server kept answering: it was alive (`/health`) after the run.
    pub survived: bool,
    /// The most RSS of the process (server and client) seen, sampled
    /// every 500 ms (KiB).
    pub rss_max_kib: u64,
    /// Seconds from the drop until the first second whose arriving users
    /// all but 10 % completed their sessions, two seconds in a row; null:
    /// not within the low phase.
    pub recovery_secs: Option<u64>,
    /// Seconds from the drop until the first second whose completed
    /// sessions reach 90 % of the low phase's arrival rate, two seconds in
    /// a row: goodput back to the offered load (whoever's sessions they
    /// are; a backlog of users from the overload counts). Null: not within
    /// the low phase.
    pub goodput_recovery_secs: Option<u64>,
    /// Goodput during the overload phase: requests of completed sessions
    /// per second of the phase (by completion time).
    #[serde(deserialize_with = "or_nan")]
    pub high_goodput_rps: f64,
    /// The client's per-second timeline.
    pub timeline: Vec<Second>,
}

/// One second of a run, by completion time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Responses completed in this second.
    pub responses: u64,
    /// Sessions completed in this second.
    pub sessions_completed: u64,
    /// Users that arrived in this second.
    pub users_arrived: u64,
    /// Of those users, how many completed their session (at any time):
    /// with `users_arrived`, whether a user arriving then was served.
    pub arrivals_completed: u64,
}

/// What a user-session run measured (client-observed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsersReport {
    /// The arrival window, seconds.
    #[serde(deserialize_with = "or_nan")]
    pub window_secs: f64,
    /// Users that arrived in the window.
    pub users_arrived: u64,
    /// Arrivals dropped because `max_users` were running.
    pub users_dropped: u64,
    /// Sessions started: arrivals plus the new users that replaced
    /// failed ones (without retry on failure).
    pub sessions_started: u64,
    /// Sessions whose K requests all completed, inside the window or in the
    /// drain after it.
    pub sessions_completed: u64,
    /// Sessions abandoned after a failure: by a new client replacing the
    /// user (without retry on failure), or because the failure came after
    /// the window ended.
    pub sessions_abandoned: u64,
    /// Sessions still running when the drain ended.
    pub sessions_unfinished: u64,
    /// Responses completed (any session), the drain included.
    pub responses: u64,
    /// Requests that failed, by reason: the load engine's error kinds
    /// (`timeout`, `refused`, `reset`, `closed` as a shed connection is,
    /// `tls_…`, `http_<status>`, …).
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Connections whose handshake was full.
    pub handshakes_full: u64,
    /// Connections whose handshake resumed a session.
    pub handshakes_resumed: u64,
    /// Responses completed inside the window, per second of window (raw
    /// throughput). `responses` also counts those of the drain.
    #[serde(deserialize_with = "or_nan")]
    pub throughput_rps: f64,
    /// Requests of the sessions completed inside the window, per second of
    /// window (goodput).
    #[serde(deserialize_with = "or_nan")]
    pub goodput_rps: f64,
    /// Sessions completed inside the window, per second of window.
    /// `sessions_completed` also counts those the drain let finish.
    #[serde(deserialize_with = "or_nan")]
    pub goodput_sessions_per_sec: f64,
    /// Median latency of completed requests (connect to last byte), ms.
    #[serde(deserialize_with = "or_nan")]
    pub latency_p50_ms: f64,
    /// 99th percentile of that latency, ms.
    #[serde(deserialize_with = "or_nan")]
    pub latency_p99_ms: f64,
    /// CPU time the client's own threads used, seconds.
    #[serde(deserialize_with = "or_nan")]
    pub client_cpu_secs: f64,
    /// That CPU time over the run's wall time (window and drain) times the
    /// CPUs its threads could use, 0–1: at 0.9 or more the client, not the
    /// server, may have set the pace.
    #[serde(deserialize_with = "or_nan")]
    pub client_busy: f64,
    /// Per second from the window's start (drain included), by completion
    /// time.
    pub timeline: Vec<Second>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed002 study's `engine_report`: an overload report the current
    /// code wrote (`docs/results/full`).
    fn written() -> serde_json::Value {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../../docs/results/full/seed002-overload/results.json"
        ))
        .unwrap();
        doc["engine_report"].clone()
    }

    #[test]
    fn a_written_overload_report_reads_back_and_writes_the_same_json() {
        let v = written();
        let r: OverloadReport = serde_json::from_value(v.clone()).unwrap();
        assert!(r.points.len() > 4 && r.shed_cost.full_handshake_us > 0.0);
        assert!(r.points.iter().any(|p| p.arm.admission == "session"));
        // Written before `transport` was recorded: read as TCP's, and
        // written back with it.
        assert!(v.get("transport").is_none());
        assert_eq!(r.transport, "tcp");
        let mut v = v;
        v["transport"] = "tcp".into();
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
    }

    #[test]
    fn a_robustness_run_and_a_nan_figure_round_trip() {
        let r = Robustness {
            admission: "session".into(),
            high_users_per_sec: 30.0,
            high_secs: 60,
            low_users_per_sec: 5.0,
            low_secs: 15,
            survived: true,
            rss_max_kib: 4096,
            recovery_secs: None,
            goodput_recovery_secs: Some(3),
            high_goodput_rps: f64::NAN,
            timeline: vec![Second {
                responses: 5,
                sessions_completed: 1,
                users_arrived: 1,
                arrivals_completed: 1,
            }],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["high_goodput_rps"].is_null());
        let back: Robustness = serde_json::from_value(v.clone()).unwrap();
        assert!(back.high_goodput_rps.is_nan());
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
    }
}
