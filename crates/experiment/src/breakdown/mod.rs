//! `tlslab breakdown`: the method of seed 001 for today's stack.
//!
//! Each configuration replaces TLS stages with no-ops on client and server
//! alike (`tlslab_crypto::meter::AblationSet`), runs the same closed-loop
//! workload against an embedded server pinned to one CPU from a load engine
//! pinned to another, and measures the server's CPU time per request
//! (server-observed). A stage's share of the cost follows from Amdahl's law
//! with an (almost) infinite stage speed-up: `fraction = 1 − 1/speedup`,
//! where `speedup = cost(baseline) / cost(stage removed)`.
//!
//! Why CPU per request rather than requests per second: seed 001 measured a
//! saturated server's throughput, which is proportional to 1 / (server CPU
//! per request). On a two-CPU machine the client, not the server, is often
//! the bottleneck, so client-observed requests/s would measure the client.
//! Both are reported; the fractions use the server-observed figure.
//!
//! Convergence. The repeats go in rounds; within a round, every
//! configuration runs once, *at the same time as* a baseline cell: two
//! embedded servers pinned to the server CPU, two load engines pinned to
//! the client CPU, one window. Each server's CPU per request is read from
//! its own accounting (worker-thread CPU time and requests served, sampled
//! every 20 ms) at the first and last reading inside the window both
//! engines measured, so warm-up and ramp-down are excluded. On a shared
//! machine the other tenants' load (and what it does to caches, the SMT
//! sibling and the clock) changes from second to second; running the two
//! cells side by side exposes both to the same load, so it cancels out of
//! their ratio, where cells run one after the other only cancel slow
//! drift. A stage's share is the mean over rounds of
//! `1 − cost(stage removed) / cost(baseline beside it)`, with a 95 %
//! Student-t interval. Rounds continue until every named stage's
//! half-width is at most `target_ci95` (2 points of the baseline by
//! default) or the time cap is reached.
//!
//! Over QUIC (`transport: Quic`) the cells are HTTP/3 requests to the
//! server's QUIC listener, the TLS stages are those QUIC uses, and QUIC's
//! own three (packet protection, header protection, key schedule) join
//! them; [`run_both`] runs both and [`pair`] sets the two reports side by side.
//!
//! Beside it, the crypto meter's direct attribution: in each baseline cell,
//! the server time inside each stage's operations per request, over the same
//! window as the CPU per request, divided by that CPU per request.

mod analyse;
mod compare;
mod plan;
mod report;
mod run;

pub use analyse::REMAINDER_QUIC;
pub use compare::{BreakdownPair, Difference, StageCost, difference, pair, render_pair};
pub use plan::{
    BreakdownConfig, Configuration, QUIC_STAGES, Transport, Workload, configurations, meter_ops,
    quic_skeleton,
};
pub use report::{BreakdownReport, BreakdownText, Row, Share, stage_label};
pub use run::{run, run_both};
