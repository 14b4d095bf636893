//! `tlslab plan`: the capacity model.
//!
//! From measured per-unit server CPU costs (a full handshake, a resumed
//! handshake and a request, in µs of one core) and a workload mix (the
//! share of connections resumed, requests per connection) it predicts the
//! service demand of a connection, connections/s and requests/s per core at
//! a target utilisation, the cores a given load needs, and response time
//! against utilisation by two models: M/M/c (Erlang C) and seed 004's
//! `R0/(1−ρ)` form (the paper's R0 is 300 ms of handshake CPU).

use serde::{Deserialize, Serialize};

/// Per-unit server CPU costs, µs of one core.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct UnitCosts {
    /// A full handshake (without its request).
    pub full_handshake_us: f64,
    /// A resumed handshake (without its request).
    pub resumed_handshake_us: f64,
    /// One request on an open connection.
    pub request_us: f64,
}

impl UnitCosts {
    /// From the three cells `lab` measures: CPU per request with a full
    /// handshake per request, with a resumed one, and on kept-alive
    /// connections. A handshake's cost is the difference to keep-alive.
    pub fn from_cells(full_per_req: f64, resumed_per_req: f64, keepalive_per_req: f64) -> Self {
        UnitCosts {
            full_handshake_us: (full_per_req - keepalive_per_req).max(0.0),
            resumed_handshake_us: (resumed_per_req - keepalive_per_req).max(0.0),
            request_us: keepalive_per_req,
        }
    }
}

/// The workload mix.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Mix {
    /// Share of connections that resume a session, 0–1.
    pub reuse: f64,
    /// Requests per connection (≥ 1).
    pub requests_per_conn: f64,
}

/// What the model predicts for one mix.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// The costs used.
    pub costs: UnitCosts,
    /// The mix.
    pub mix: Mix,
    /// Server CPU per connection (its handshake and its requests), µs.
    pub cpu_per_connection_us: f64,
    /// Server CPU per request, µs (the connection's cost ÷ its requests).
    pub cpu_per_request_us: f64,
    /// Connections/s one core sustains at 100 % busy.
    pub connections_per_s_per_core_max: f64,
    /// Requests/s one core sustains at 100 % busy.
    pub requests_per_s_per_core_max: f64,
    /// The target utilisation, 0–1.
    pub target_utilisation: f64,
    /// Requests/s per core at the target utilisation.
    pub requests_per_s_per_core: f64,
    /// Connections/s per core at the target utilisation.
    pub connections_per_s_per_core: f64,
    /// The load to plan for, requests/s (if given).
    pub load_requests_per_s: Option<f64>,
    /// Cores that load needs at the target utilisation (and latency, if a
    /// target latency was given).
    pub cores_needed: Option<usize>,
    /// The target mean response time, ms (if given).
    pub target_latency_ms: Option<f64>,
    /// Response time against utilisation (one core): M/M/1 mean, ms.
    pub mm1_curve: Vec<(f64, f64)>,
    /// Response time against utilisation: seed 004's `R0/(1−ρ)`, with R0 the
    /// measured request service time plus `base_latency_ms`, ms.
    pub seed004_curve: Vec<(f64, f64)>,
    /// The utilisation-independent latency added to every request
    /// (network, client), ms.
    pub base_latency_ms: f64,
}

/// Erlang C: the probability that an arrival waits in an M/M/c queue with
/// `c` servers and offered load `a = λ/μ` (in Erlangs), `a < c`.
pub fn erlang_c(c: usize, a: f64) -> f64 {
    if c == 0 || a <= 0.0 {
        return 0.0;
    }
    let c_f = c as f64;
    if a >= c_f {
        return 1.0;
    }
    // Erlang B by the stable recursion, then C from B.
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (k as f64 + a * b);
    }
    let rho = a / c_f;
    b / (1.0 - rho + rho * b)
}

/// Mean response time of M/M/c with per-job service time `s` (any unit) at
/// per-server utilisation `rho`: `s + C(c, cρ) · s / (c(1−ρ))`.
pub fn mmc_response(c: usize, s: f64, rho: f64) -> f64 {
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    let a = rho * c as f64;
    s + erlang_c(c, a) * s / (c as f64 * (1.0 - rho))
}

/// Median response time of M/M/1 at utilisation `rho`: the response time
/// is exponential with mean `s/(1−ρ)`, so the median is `ln 2` of it.
pub fn mm1_median(s: f64, rho: f64) -> f64 {
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    std::f64::consts::LN_2 * s / (1.0 - rho)
}

/// Seed 004's response time model: `r0 / (1 − ρ)`.
pub fn seed004_response(r0: f64, rho: f64) -> f64 {
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    r0 / (1.0 - rho)
}

/// Errors of the plan.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum PlanError {
    /// An input is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Builds the plan.
pub fn plan(
    costs: UnitCosts,
    mix: Mix,
    target_utilisation: f64,
    load_requests_per_s: Option<f64>,
    target_latency_ms: Option<f64>,
    base_latency_ms: f64,
) -> Result<Plan, PlanError> {
    if !(0.0..=1.0).contains(&mix.reuse) {
        return Err(PlanError::Invalid(format!(
            "reuse {} is outside 0–1; give a share such as 0.5",
            mix.reuse
        )));
    }
    if mix.requests_per_conn.is_nan() || mix.requests_per_conn < 1.0 {
        return Err(PlanError::Invalid(
            "requests per connection must be at least 1".into(),
        ));
    }
    if !(target_utilisation > 0.0 && target_utilisation < 1.0) {
        return Err(PlanError::Invalid(format!(
            "target utilisation {target_utilisation} must be between 0 and 1 (exclusive), e.g. 0.7"
        )));
    }
    for (name, v) in [
        ("full handshake", costs.full_handshake_us),
        ("resumed handshake", costs.resumed_handshake_us),
        ("request", costs.request_us),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(PlanError::Invalid(format!(
                "the {name} cost {v} µs is not a non-negative number"
            )));
        }
    }
    let per_conn = (1.0 - mix.reuse) * costs.full_handshake_us
        + mix.reuse * costs.resumed_handshake_us
        + mix.requests_per_conn * costs.request_us;
    if per_conn <= 0.0 {
        return Err(PlanError::Invalid(
            "the costs give zero CPU per connection; measure them first (tlslab lab --json)".into(),
        ));
    }
    let per_req = per_conn / mix.requests_per_conn;
    let conn_max = 1e6 / per_conn;
    let req_max = conn_max * mix.requests_per_conn;
    let s_ms = per_req / 1000.0;
    let mut cores_needed = load_requests_per_s.map(|l| {
        let mut c = ((l / (req_max * target_utilisation)).ceil() as usize).max(1);
        if let Some(t) = target_latency_ms {
            // Add cores until the M/M/c mean meets the target (bounded).
            while c < 1_000_000 {
                let rho = l / (req_max * c as f64);
                if rho < 1.0 && mmc_response(c, s_ms, rho) + base_latency_ms <= t {
                    break;
                }
                c += 1;
            }
        }
        c
    });
    if load_requests_per_s == Some(0.0) {
        cores_needed = Some(0);
    }
    let grid: Vec<f64> = (1..=19).map(|i| i as f64 * 0.05).collect();
    Ok(Plan {
        costs,
        mix,
        cpu_per_connection_us: per_conn,
        cpu_per_request_us: per_req,
        connections_per_s_per_core_max: conn_max,
        requests_per_s_per_core_max: req_max,
        target_utilisation,
        requests_per_s_per_core: req_max * target_utilisation,
        connections_per_s_per_core: conn_max * target_utilisation,
        load_requests_per_s,
        cores_needed,
        target_latency_ms,
        mm1_curve: grid
            .iter()
            .map(|&r| (r, mmc_response(1, s_ms, r) + base_latency_ms))
            .collect(),
        seed004_curve: grid
            .iter()
            .map(|&r| (r, seed004_response(s_ms + base_latency_ms, r)))
            .collect(),
        base_latency_ms,
    })
}

impl Plan {
    /// The human text.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Capacity plan (server CPU costs per unit, one core: full handshake {:.1} µs, \
             resumed handshake {:.1} µs, request {:.1} µs)",
            self.costs.full_handshake_us, self.costs.resumed_handshake_us, self.costs.request_us
        );
        let _ = writeln!(
            s,
            "mix: {:.0} % of connections resumed, {} requests per connection",
            self.mix.reuse * 100.0,
            self.mix.requests_per_conn
        );
        let _ = writeln!(
            s,
            "CPU per connection {:.1} µs, per request {:.1} µs",
            self.cpu_per_connection_us, self.cpu_per_request_us
        );
        let _ = writeln!(
            s,
            "one core at 100 %: {:.0} conn/s, {:.0} req/s; at the target {:.0} %: {:.0} conn/s, {:.0} req/s",
            self.connections_per_s_per_core_max,
            self.requests_per_s_per_core_max,
            self.target_utilisation * 100.0,
            self.connections_per_s_per_core,
            self.requests_per_s_per_core
        );
        if let (Some(l), Some(c)) = (self.load_requests_per_s, self.cores_needed) {
            let _ = writeln!(
                s,
                "for {l:.0} req/s: {c} core(s){}",
                self.target_latency_ms
                    .map(|t| format!(
                        " (utilisation ≤ {:.0} % and M/M/c mean response ≤ {t} ms)",
                        self.target_utilisation * 100.0
                    ))
                    .unwrap_or_else(|| format!(
                        " (utilisation ≤ {:.0} %)",
                        self.target_utilisation * 100.0
                    ))
            );
        }
        let _ = writeln!(
            s,
            "\nresponse time against utilisation of one core (ms; base latency {:.3} ms added):",
            self.base_latency_ms
        );
        let _ = writeln!(s, "{:>6} {:>12} {:>14}", "ρ", "M/M/1 mean", "R0/(1−ρ)");
        for ((r, a), (_, b)) in self.mm1_curve.iter().zip(&self.seed004_curve) {
            if ((r * 100.0).round() as i64) % 10 == 0 || *r > 0.9 {
                let _ = writeln!(s, "{:>5.0}% {:>12.3} {:>14.3}", r * 100.0, a, b);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erlang_c_known_values() {
        // One server: C = ρ.
        assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
        // Two servers, a = 1 (ρ = 0.5): C = 1/3.
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(erlang_c(2, 2.5), 1.0);
    }

    #[test]
    fn mm1_is_s_over_one_minus_rho() {
        assert!((mmc_response(1, 2.0, 0.5) - 4.0).abs() < 1e-12);
        assert!(mmc_response(1, 2.0, 1.0).is_infinite());
        assert!((seed004_response(300.0, 0.5) - 600.0).abs() < 1e-12);
    }

    #[test]
    fn plan_costs_and_cores() {
        let costs = UnitCosts::from_cells(1100.0, 300.0, 100.0);
        assert_eq!(costs.full_handshake_us, 1000.0);
        assert_eq!(costs.resumed_handshake_us, 200.0);
        let p = plan(
            costs,
            Mix {
                reuse: 0.5,
                requests_per_conn: 4.0,
            },
            0.5,
            Some(10_000.0),
            None,
            0.0,
        )
        .unwrap();
        // 0.5·1000 + 0.5·200 + 4·100 = 1000 µs per connection.
        assert!((p.cpu_per_connection_us - 1000.0).abs() < 1e-9);
        assert!((p.requests_per_s_per_core_max - 4000.0).abs() < 1e-6);
        // 10 000 req/s at 50 % of 4000 per core → 5 cores.
        assert_eq!(p.cores_needed, Some(5));
        let with_latency = plan(costs, p.mix, 0.9, Some(10_000.0), Some(0.26), 0.0).unwrap();
        // 0.25 ms service: M/M/c must keep the mean ≤ 0.26 ms, which needs
        // more than the utilisation bound's 3 cores.
        assert!(with_latency.cores_needed.unwrap() > 3);
    }

    #[test]
    fn plan_rejects_bad_input() {
        let c = UnitCosts::from_cells(10.0, 5.0, 1.0);
        let m = Mix {
            reuse: 1.5,
            requests_per_conn: 1.0,
        };
        assert!(plan(c, m, 0.5, None, None, 0.0).is_err());
        let m = Mix {
            reuse: 0.5,
            requests_per_conn: 1.0,
        };
        assert!(plan(c, m, 1.0, None, None, 0.0).is_err());
        assert!(plan(c, m, 0.7, None, None, 0.0).is_ok());
    }
}
