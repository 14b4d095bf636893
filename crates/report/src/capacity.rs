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
    /// Server CPU per request spent on handshakes (the mix's handshake cost
    /// ÷ requests per connection), µs: seed 004's "300 ms" of today.
    pub handshake_cpu_per_request_us: f64,
    /// Servers (cores) of the M/M/c curve: `cores_needed`, else 1.
    pub curve_cores: usize,
    /// Mean response time against per-core utilisation ρ by M/M/c (Erlang C)
    /// with `curve_cores` servers and the per-request CPU as the mean service
    /// time, plus `base_latency_ms`: (ρ, ms).
    pub mmc_curve: Vec<(f64, f64)>,
    /// Response time against ρ by seed 004's form: `base_latency_ms` + the
    /// request's own CPU + H/(1−ρ), H the handshake CPU per request (the
    /// paper's H was 300 ms): (ρ, ms).
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

/// Percentiles of the time in system of a single-server FCFS queue with
/// Poisson arrivals (M/G/1), by simulation (Lindley's recursion) with a
/// fixed seed: `services` is the service-time distribution as (probability,
/// time) pairs, `rho` the utilisation; `n` customers after `n/10` warm-up
/// ones. Returns the sorted times in system (for [`quantile`]).
pub fn mg1_fcfs_sojourns(services: &[(f64, f64)], rho: f64, n: usize, seed: u64) -> Vec<f64> {
    use rand::RngExt as _;
    use rand::SeedableRng as _;
    use rand_distr::Distribution as _;
    let total_p: f64 = services.iter().map(|s| s.0).sum();
    let mean_s: f64 = services.iter().map(|s| s.0 * s.1).sum::<f64>() / total_p.max(1e-300);
    if !(rho > 0.0 && rho < 1.0) || mean_s <= 0.0 || services.is_empty() {
        return vec![];
    }
    let gap = mean_s / rho;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let draw = |rng: &mut rand_chacha::ChaCha8Rng| {
        let mut u: f64 = rng.random::<f64>() * total_p;
        for &(p, s) in services {
            if u < p {
                return s;
            }
            u -= p;
        }
        services[services.len() - 1].1
    };
    let warm = n / 10;
    let mut out = Vec::with_capacity(n);
    let mut wait = 0.0_f64;
    let mut service = draw(&mut rng);
    for i in 0..(n + warm) {
        if i >= warm {
            out.push(wait + service);
        }
        let a: f64 = rand_distr::Exp1.sample(&mut rng);
        let next_service = draw(&mut rng);
        wait = (wait + service - a * gap).max(0.0);
        service = next_service;
    }
    out.sort_by(f64::total_cmp);
    out
}

/// The `q`-quantile (0–1) of sorted values, nearest rank; NaN when empty.
pub use crate::interval::quantile;

/// The service-time distribution of one connection of `mix` under `costs`
/// (µs): a full handshake with probability 1 − reuse, a resumed one
/// otherwise, each plus its requests.
pub fn service_mix(costs: &UnitCosts, mix: &Mix) -> Vec<(f64, f64)> {
    let req = mix.requests_per_conn * costs.request_us;
    let mut v = Vec::new();
    if mix.reuse < 1.0 {
        v.push((1.0 - mix.reuse, costs.full_handshake_us + req));
    }
    if mix.reuse > 0.0 {
        v.push((mix.reuse, costs.resumed_handshake_us + req));
    }
    v
}

/// Where [`costs_from_json`] found the costs.
#[derive(Clone, Debug, PartialEq)]
pub struct CostSource {
    /// The costs.
    pub costs: UnitCosts,
    /// A sentence naming the file kind and the cells used.
    pub how: String,
}

fn norm_version(v: &str) -> String {
    v.trim()
        .trim_start_matches("TLSv")
        .trim_start_matches("tls")
        .trim_start_matches("TLS")
        .trim()
        .to_string()
}

/// What [`costs_from_json`] reads of a lab report or a results document.
#[derive(Deserialize)]
struct CostFile {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    cells: Option<Vec<CostCell>>,
}

/// A cell of either file: a lab report's (`mode`, `version`, `key`,
/// `server_cpu_us_per_request`) or a results document's (`id`, `factors`,
/// `metrics.server_cpu_us_per_request`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct CostCell {
    id: Option<String>,
    mode: Option<String>,
    version: Option<String>,
    key: Option<String>,
    server_cpu_us_per_request: Option<f64>,
    factors: std::collections::BTreeMap<String, String>,
    metrics: CostMetrics,
}

/// The part of a results cell's `metrics` the costs come from.
#[derive(Deserialize, Default)]
#[serde(default)]
struct CostMetrics {
    server_cpu_us_per_request: Option<f64>,
}

/// Per-unit server CPU costs from a `tlslab lab --json` report or a
/// `tlslab experiment` results document, for TLS `version` (`1.2`, `1.3`)
/// and certificate `key` (`ecdsa-p256`, `rsa2048`).
///
/// - lab: the `tls_full`, `tls_resumed` and `tls_keep_alive` cells' server
///   CPU per request ([`UnitCosts::from_cells`]).
/// - results document: a least-squares fit of each cell's server CPU per
///   request to `(1−r)/k · full + r/k · resumed + request`, r its `reuse`
///   factor and k its `requests_per_conn` (or `k`) factor (default 1; 0 is
///   keep-alive, all requests); a `mode` factor of lab's names counts too.
///   Cells at one k only cannot separate the request cost: then
///   `request_us` must be given and is held fixed.
pub fn costs_from_json(
    v: &serde_json::Value,
    version: &str,
    key: &str,
    request_us: Option<f64>,
) -> Result<CostSource, PlanError> {
    let want_v = norm_version(version);
    let bad = |m: String| Err(PlanError::Invalid(m));
    let file = CostFile::deserialize(v).ok();
    let Some((kind, cells)) = file.and_then(|f| Some((f.kind, f.cells?))) else {
        return bad(
            "the file has no `cells`; give a `tlslab lab --json` report or a \
                    `tlslab experiment` results document"
                .into(),
        );
    };
    let is_study = kind.as_deref() == Some(crate::study::STUDY_KIND);
    // (mode or None, reuse, k, cpu/request, label)
    let mut rows: Vec<(f64, f64, f64, String)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for c in cells {
        let (factors, cpu, label) = if is_study {
            let cpu = c.metrics.server_cpu_us_per_request;
            let id = c.id.unwrap_or_else(|| "?".into());
            (c.factors, cpu, id)
        } else {
            let label = format!(
                "{} {} {}",
                c.mode.as_deref().unwrap_or("?"),
                c.version.as_deref().unwrap_or("-"),
                c.key.as_deref().unwrap_or("-")
            );
            let f = [("mode", c.mode), ("version", c.version), ("key", c.key)]
                .into_iter()
                .filter_map(|(k, x)| Some((k.to_string(), x?)))
                .collect();
            (f, c.server_cpu_us_per_request, label)
        };
        let get = |k: &str| factors.get(k).cloned();
        // TCP+TLS costs only: QUIC cells (quic-vs-tcp) cost another thing.
        if get("transport").is_some_and(|t| t != "tcp") {
            continue;
        }
        let ver = get("version").or(get("tls"));
        let k_ty = get("key");
        if let (Some(v), Some(k)) = (&ver, &k_ty) {
            let s = format!("TLS {} {k}", norm_version(v));
            if !seen.contains(&s) {
                seen.push(s);
            }
        }
        if ver.as_deref().is_some_and(|x| norm_version(x) != want_v)
            || k_ty
                .as_deref()
                .is_some_and(|x| !x.eq_ignore_ascii_case(key))
        {
            continue;
        }
        let Some(cpu) = cpu.filter(|x| x.is_finite() && *x > 0.0) else {
            continue;
        };
        let (reuse, k) = match get("mode").as_deref() {
            Some("tls_full") => (0.0, 1.0),
            Some("tls_resumed") => (1.0, 1.0),
            Some("tls_keep_alive") => (0.0, 0.0),
            Some(_) => continue,
            None => {
                let Some(r) = get("reuse").and_then(|x| x.parse::<f64>().ok()) else {
                    continue;
                };
                let k = get("requests_per_conn")
                    .or(get("k"))
                    .map_or(Some(1.0), |x| x.parse::<f64>().ok());
                let Some(k) = k else { continue };
                (r, k)
            }
        };
        rows.push((reuse, k, cpu, label));
    }
    if rows.is_empty() {
        return bad(format!(
            "no cell with server CPU per request for TLS {want_v} with a {key} certificate{}; \
             pick one with --tls and --key",
            if seen.is_empty() {
                String::new()
            } else {
                format!(" (the file has: {})", seen.join(", "))
            }
        ));
    }
    // Least squares on x = ((1−r)/k, r/k, 1), y = cpu; k = 0 → (0, 0, 1).
    let x_of = |r: f64, k: f64| {
        if k == 0.0 {
            [0.0, 0.0, 1.0]
        } else {
            [(1.0 - r) / k, r / k, 1.0]
        }
    };
    let ks: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let one_k = ks.iter().all(|k| (*k - ks[0]).abs() < 1e-12);
    let labels: Vec<String> = rows.iter().map(|r| r.3.clone()).collect();
    let how = |what: &str| {
        format!(
            "{what}: server-observed CPU per request of {} cell(s) ({})",
            labels.len(),
            labels.join(", ")
        )
    };
    let kind = if is_study {
        "a tlslab experiment results document"
    } else {
        "a `tlslab lab --json` report"
    };
    if one_k {
        let Some(req) = request_us else {
            return bad(format!(
                "the cells of {kind} all have {} request(s) per connection, which cannot \
                 separate the request's cost from the handshake's; give --request-us (the server \
                 CPU of one request on a kept-alive connection, from `tlslab lab`)",
                ks[0]
            ));
        };
        // Two unknowns: y − req = a·(1−r)/k + b·r/k.
        let (mut s11, mut s12, mut s22, mut t1, mut t2) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (r, k, y, _) in &rows {
            let x = x_of(*r, *k);
            let y = y - req;
            s11 += x[0] * x[0];
            s12 += x[0] * x[1];
            s22 += x[1] * x[1];
            t1 += x[0] * y;
            t2 += x[1] * y;
        }
        let det = s11 * s22 - s12 * s12;
        if det.abs() < 1e-12 {
            return bad(format!(
                "the cells of {kind} are all at one reuse level; the full and resumed \
                 handshake costs need cells at two (e.g. reuse 0 and 1)"
            ));
        }
        let full = (t1 * s22 - t2 * s12) / det;
        let resumed = (s11 * t2 - s12 * t1) / det;
        return Ok(CostSource {
            costs: UnitCosts {
                full_handshake_us: full.max(0.0),
                resumed_handshake_us: resumed.max(0.0),
                request_us: req,
            },
            how: how(&format!("{kind}, request cost {req} µs given")),
        });
    }
    let mut m = [[0.0_f64; 3]; 3];
    let mut t = [0.0_f64; 3];
    for (r, k, y, _) in &rows {
        let x = x_of(*r, *k);
        for i in 0..3 {
            t[i] += x[i] * y;
            for j in 0..3 {
                m[i][j] += x[i] * x[j];
            }
        }
    }
    let Some(sol) = solve3(m, t) else {
        return bad(format!(
            "the cells of {kind} cannot separate full, resumed and request costs (they need \
             full-handshake, resumed and keep-alive cells, or cells at two reuse levels and two \
             requests-per-connection levels)"
        ));
    };
    Ok(CostSource {
        costs: UnitCosts {
            full_handshake_us: sol[0].max(0.0),
            resumed_handshake_us: sol[1].max(0.0),
            request_us: sol[2].max(0.0),
        },
        how: how(kind),
    })
}

/// Solves a 3×3 linear system by Gaussian elimination with partial
/// pivoting; `None` if it is singular.
fn solve3(mut m: [[f64; 3]; 3], mut t: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let piv = (col..3).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        let scale = m.iter().flatten().fold(0.0_f64, |a, x| a.max(x.abs()));
        if m[piv][col].abs() <= 1e-9 * scale.max(1e-300) {
            return None;
        }
        m.swap(col, piv);
        t.swap(col, piv);
        for row in 0..3 {
            if row != col {
                let f = m[row][col] / m[col][col];
                let pivot_row = m[col];
                for (x, p) in m[row].iter_mut().zip(pivot_row) {
                    *x -= f * p;
                }
                t[row] -= f * t[col];
            }
        }
    }
    Some([t[0] / m[0][0], t[1] / m[1][1], t[2] / m[2][2]])
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
    let hs_per_req = (per_conn - mix.requests_per_conn * costs.request_us) / mix.requests_per_conn;
    let curve_cores = cores_needed.unwrap_or(1).max(1);
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
        handshake_cpu_per_request_us: hs_per_req,
        curve_cores,
        mmc_curve: grid
            .iter()
            .map(|&r| (r, mmc_response(curve_cores, s_ms, r) + base_latency_ms))
            .collect(),
        seed004_curve: grid
            .iter()
            .map(|&r| {
                (
                    r,
                    base_latency_ms
                        + costs.request_us / 1000.0
                        + seed004_response(hs_per_req / 1000.0, r),
                )
            })
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
            "\nmean response time against per-core utilisation ρ, ms (base latency {:.3} ms added \
             to both):",
            self.base_latency_ms
        );
        let _ = writeln!(
            s,
            "  M/M/{c}: Poisson arrivals, exponential service of mean {:.1} µs (the CPU per \
             request), {c} core(s), FCFS (Erlang C);",
            self.cpu_per_request_us,
            c = self.curve_cores
        );
        let _ = writeln!(
            s,
            "  seed 004: the request's own CPU ({:.1} µs) + H/(1−ρ), H = {:.1} µs of handshake \
             CPU per request (the paper's H was ~300 ms: a 1024-bit RSA decryption and session \
             key generation on 2000's servers; the paper's curve, 300/(1−ρ) ms, is shown for \
             scale).",
            self.costs.request_us, self.handshake_cpu_per_request_us
        );
        let _ = writeln!(
            s,
            "{:>6} {:>12} {:>14} {:>16}",
            "ρ",
            format!("M/M/{}", self.curve_cores),
            "seed 004 form",
            "paper 300/(1−ρ)"
        );
        for ((r, a), (_, b)) in self.mmc_curve.iter().zip(&self.seed004_curve) {
            if ((r * 100.0).round() as i64) % 10 == 0 || *r > 0.9 {
                let _ = writeln!(
                    s,
                    "{:>5.0}% {:>12.3} {:>14.3} {:>16.0}",
                    r * 100.0,
                    a,
                    b,
                    seed004_response(300.0, *r)
                );
            }
        }
        s
    }
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
