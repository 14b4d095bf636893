//! `tlslab overload`: seed 002's collapse and its prevention.
//!
//! An embedded server (one worker thread pinned to the server's CPU,
//! RSA-4096 by default, stateless tickets) is driven by open-loop
//! arrivals of users, each a session of K requests on new connections
//! reusing its TLS session (`tlslab_load::run_users`), pinned to the
//! client's CPU. First the capacity is found: a doubling sweep of the
//! arrival rate (admission off, no client timeout, retry on, 80 % reuse)
//! until a step does not keep up (its sessions completed per second in the
//! second half of the window, the steady state, fall below 85 % of the
//! offered rate), then two bisection steps; capacity is the highest steady
//! completion rate of any step, a step's rate capped at what it was
//! offered, and a step whose second half completed more sessions than
//! could arrive in it taken for the measurement error it is (see
//! [`judge_step`]). Then
//! each arm runs at multiples of that capacity, each point on a fresh
//! server: admission `off`, `static` or `session`; a finite client timeout
//! or none; retry on failure or a new client; 80 % or 0 % reuse. For each
//! point it reports client-observed goodput (requests of completed
//! sessions per second), throughput (all responses per second), p99
//! latency, and server-observed handshakes, shed counts and worker CPU,
//! all over the point's window. The shapes are those of seed 002's
//! Figs. 3 (throughput against load), 5 (reuse), 6 (retry) and 7
//! (timeout), with the admission arms added.
//!
//! nginx with `limit_conn` is the unprotected reference (`Peer::Nginx`
//! arms, `--servers tlslab,nginx`): the same certificate and key, one
//! process pinned to the server CPU, started fresh per point with `-p` in a
//! temporary prefix on a loopback port, driven by the same user sessions at
//! the same multiples of the embedded server's capacity. Its
//! server-observed figures come from its access log (200s, 503s,
//! `$ssl_session_reused`, `$connection_requests`) and its CPU from
//! `/proc/PID/schedstat`; figures nginx cannot give are `null` and named in
//! the point's `server.unavailable`.

mod plan;
mod point;
mod report;
mod run;
mod sweep;

pub use plan::{Arm, NGINX_LIMIT_CONN, NginxPlan, OverloadPlan, Peer, RETRY_BACKOFF, Transport};
pub use report::{
    CLIENT_SATURATED, OverloadReport, OverloadText, Point, Robustness, ServerSide, ShedCost,
};
pub use run::{run, run_both};
pub use sweep::{SweepStep, judge_step};
