//! What `tlslab breakdown` measured: a row per configuration, the cost
//! table, and their text.

use tlslab_crypto::provider::Version;
use tlslab_report::interval::Convergence;
use tlslab_report::{columns, header};

use super::plan::{Configuration, Workload};
use crate::pin::Placement;

/// The measurements of one configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The configuration.
    pub config: Configuration,
    /// Server CPU per request in µs for each repeat (server-observed).
    pub cpu_us: Vec<f64>,
    /// Client-observed requests/s for each repeat.
    pub requests_per_s: Vec<f64>,
    /// Median server CPU per request, µs.
    pub cpu_us_median: f64,
    /// Median client-observed requests/s.
    pub requests_per_s_median: f64,
    /// (max − min) / median of `cpu_us`.
    pub spread: f64,
    /// cost(baseline) / cost(this configuration).
    pub speedup: f64,
    /// Amdahl: 1 − 1/speedup, the share of the baseline cost this
    /// configuration removed.
    pub fraction_removed: f64,
    /// Returns true if and only if the spread of this row (or of the
    /// baseline) is larger than the effect measured, so the fraction is
    /// not distinguishable from noise.
    pub noisy: bool,
    /// Returns true if and only if the client was ≥ 90 % busy in some repeat.
    pub client_saturated: bool,
    /// In how many of this row's cells the client was ≥ 90 % busy.
    pub client_saturated_cells: usize,
    /// Median share of the server's one pinned CPU that the server used
    /// (server CPU time ÷ wall time of the cell): near 1 means the server
    /// was the bottleneck.
    pub server_busy_median: f64,
    /// Each round's `1 − cost / cost(adjacent baseline)` (paired ratios).
    pub paired_fractions: Vec<f64>,
    /// 95 % half-width of `fraction_removed` (the mean of the paired
    /// fractions); infinite with fewer than two rounds.
    pub fraction_ci95: f64,
}

/// One line of the cost table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Share {
    /// The stage (`sig`, `kx`, …), `other TLS`, `TLS protocol` or `non-TLS`.
    pub stage: String,
    /// Its share of the baseline server CPU per request, 0–1 (mean of the
    /// paired per-round shares).
    pub fraction: f64,
    /// 95 % half-width of `fraction` (infinite with fewer than two rounds).
    pub ci95: f64,
    /// Whether the interval contains 0: the share is within noise of 0.
    pub noisy: bool,
    /// The stopping rule's verdict: `converged`, `cap_hit` (more rounds
    /// would have narrowed it), `variance` (too variable to converge in
    /// reasonable time) or `too_few_samples`.
    pub status: Convergence,
    /// Rounds the current variance needs for the target half-width.
    pub rounds_needed: Option<usize>,
    /// The crypto meter's direct attribution: server time inside the
    /// stage's operations per request ÷ server CPU per request, in the
    /// baseline cells; `None` where the meter cannot isolate the stage
    /// (`mac`: the AEAD is timed as one operation) and for derived rows.
    pub meter_fraction: Option<f64>,
    /// 95 % half-width of `meter_fraction`.
    pub meter_ci95: Option<f64>,
    /// Whether the two methods disagree beyond both intervals.
    pub disagrees: Option<bool>,
}

/// The result of a breakdown.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BreakdownReport {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// The workload.
    pub workload: Workload,
    /// Response body size in bytes.
    pub file_size: u64,
    /// TLS version.
    pub version: Version,
    /// Certificate key type.
    pub key: String,
    /// Seconds per cell.
    pub cell_s: f64,
    /// Clients per cell.
    pub clients: usize,
    /// The minimum number of rounds (`--repeats`).
    pub repeats: usize,
    /// Rounds run: each configuration ran this many times.
    pub rounds: usize,
    /// The time cap, seconds (`--max-time`).
    pub max_time_s: f64,
    /// The target 95 % half-width, as a fraction of the baseline.
    pub target_ci95: f64,
    /// Wall-clock seconds the rounds took.
    pub elapsed_s: f64,
    /// Whether every named stage converged.
    pub converged: bool,
    /// Why the run stopped: `converged` or `time_cap`.
    pub stop_reason: String,
    /// (max − min) / median of all baseline cells: how far the baseline
    /// drifted over the run (paired ratios cancel it out).
    pub baseline_drift: f64,
    /// Where server and client ran.
    pub placement: Placement,
    /// Every configuration.
    pub rows: Vec<Row>,
    /// The Amdahl cost table: each stage, other TLS, TLS protocol, non-TLS.
    pub shares: Vec<Share>,
    /// The crypto meter's own cost per recorded operation, in ns, measured
    /// at the start of this run (client and server always meter).
    pub meter_overhead_ns: f64,
    /// Median over all pairs of the server CPU's busy share (both servers'
    /// worker CPU ÷ the window; server-observed).
    pub server_cpu_busy: f64,
    /// Median over all pairs of the client CPU's busy share (both load
    /// engines' CPU ÷ the window; client-observed).
    pub client_cpu_busy: f64,
    /// Which side was saturated: `server` (server CPU ≥ 85 % busy), `client`
    /// (client CPU ≥ 85 % busy, server not), or `neither` (both waited for
    /// a CPU the machine's other load held).
    pub bottleneck: String,
}

fn pct_pm(f: f64, hw: f64) -> String {
    if hw.is_finite() {
        format!("{:>6.1}% ±{:>4.1}", f * 100.0, hw * 100.0)
    } else {
        format!("{:>6.1}% ±  ? ", f * 100.0)
    }
}

impl BreakdownReport {
    /// The human tables.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nWhere the TLS cost goes: {} {}, {}, {} B responses, {} clients, {} rounds of {:.1} s cells in {:.0} s; {}.",
            self.version,
            self.key,
            match self.workload {
                Workload::NewConn => "new connection and full handshake per request".to_string(),
                Workload::Reuse(r) =>
                    format!("new connection per request, {:.0}% resumed", r * 100.0),
                Workload::KeepAlive => "keep-alive".to_string(),
            },
            self.file_size,
            self.clients,
            self.rounds,
            self.cell_s,
            self.elapsed_s,
            self.placement.describe()
        );
        let _ = writeln!(
            s,
            "Cost = server CPU per request: server-observed, CPU time of the server's one pinned worker thread \
             ÷ requests it served, read from the server's own accounting at the start and end of the \
             measurement window (warm-up and ramp-down excluded). req/s is client-observed.\n\
             Stages are replaced by no-ops on client and server alike. Every ablated cell runs at the \
             same time as a baseline cell: two servers share the server CPU, two load engines the client \
             CPU, over one window, so whatever else the machine does hits both alike; fraction = mean \
             over rounds of 1 − cost/cost(baseline beside it) (Amdahl: 1 − 1/speedup), ± its 95 % interval.\n\
             Why CPU per request: seed 001 measured a saturated server's throughput, and a saturated \
             server's throughput is 1 ÷ its CPU per request, so the speed-ups are the same; CPU per \
             request stays right when the client, not the server, is the bottleneck.\n\
             Client and server meter every crypto operation; the meter costs {:.0} ns per operation \
             (measured at the start of this run), in every configuration alike.",
            self.meter_overhead_ns
        );
        let _ = writeln!(s);
        let head = [header(
            "configuration|CPU/req|spread|req/s|server|speedup|fraction",
        )];
        s.push_str(&columns("", &[-58, 11, 7, 9, 7, 8, 15], &head));
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.config.name.clone(),
                    format!("{:.1} µs", r.cpu_us_median),
                    format!("{:.1}%", r.spread * 100.0),
                    format!("{:.0}", r.requests_per_s_median),
                    format!("{:.0}%", r.server_busy_median * 100.0),
                    format!("{:.2}x", r.speedup),
                    pct_pm(r.fraction_removed, r.fraction_ci95),
                    if r.noisy { " ~" } else { "" }.into(),
                    if r.client_saturated { " !" } else { "" }.into(),
                ]
            })
            .collect();
        s.push_str(&columns("", &[-58, 11, 7, 9, 7, 8, -1, 0, 0], &rows));
        let _ = writeln!(
            s,
            "server = median busy share of the server CPU this configuration's server used (its pair's \
             other server used the rest; server-observed). ~ interval contains 0.  ! client CPU ≥90 % busy \
             in some cell (req/s then measures the client; CPU/req is unaffected)."
        );
        let cells: usize = self.rows.iter().map(|r| r.cpu_us.len()).sum();
        let sat: usize = self.rows.iter().map(|r| r.client_saturated_cells).sum();
        let busy: Vec<f64> = self.rows.iter().map(|r| r.server_busy_median).collect();
        let lo = busy.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = busy.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            s,
            "Saturation: the server CPU was {:.0} % busy with both servers of a pair (median over pairs; each \
             server alone {:.0}–{:.0} %, row medians), the client CPU {:.0} % with both engines; client \
             CPU ≥ 90 % busy in {sat} of {cells} cells. Bottleneck: {}. Baseline drift over the run: {:.1} % \
             (cancelled by running each cell beside a baseline).",
            self.server_cpu_busy * 100.0,
            lo * 100.0,
            hi * 100.0,
            self.client_cpu_busy * 100.0,
            match self.bottleneck.as_str() {
                "server" => "the server (its CPU saturated)".to_string(),
                "client" => "the client (its CPU saturated, the server's not)".to_string(),
                _ => "neither side's CPU was saturated: both waited for a CPU that the machine's other load held"
                    .to_string(),
            },
            self.baseline_drift * 100.0
        );
        let _ = writeln!(
            s,
            "\nCost table (share of the TLS baseline's server CPU per request):\n\
               {:<12} {:>13} {:<16} {:>13}",
            "stage", "ablation", "status", "meter"
        );
        for sh in &self.shares {
            let meter = match (sh.meter_fraction, sh.meter_ci95) {
                (Some(m), Some(h)) => pct_pm(m, h),
                _ => format!("{:>13}", "n/a"),
            };
            let _ = writeln!(
                s,
                "  {:<12} {} {:<16} {}{}{}",
                sh.stage,
                pct_pm(sh.fraction, sh.ci95),
                sh.status.name(),
                meter,
                if sh.disagrees == Some(true) {
                    "  ≠ disagree"
                } else {
                    ""
                },
                if sh.noisy {
                    "  ~ within noise of 0"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "ablation = the paired Amdahl share above (server-observed CPU per request, {} rounds). \
             meter = the server's always-on crypto meter: time inside the stage's operations per \
             request ÷ CPU per request, server-observed over each baseline cell's window (n/a: the meter \
             times the AEAD as one operation and cannot split the MAC from it). ≠ = the two intervals \
             do not overlap: the no-op also changed work outside the metered calls, or the meter \
             misses some of the stage.",
            self.rounds
        );
        let not: Vec<String> = self
            .shares
            .iter()
            .filter(|sh| sh.status != Convergence::Converged)
            .map(|sh| {
                let why = match sh.status {
                    Convergence::CapHit => format!(
                        "the time cap was hit; ≈{} rounds needed",
                        sh.rounds_needed.map_or("?".into(), |n| n.to_string())
                    ),
                    Convergence::Variance => format!(
                        "variance: ±{:.1} points after {} rounds, ≈{} rounds needed",
                        sh.ci95 * 100.0,
                        self.rounds,
                        sh.rounds_needed.map_or("many".into(), |n| n.to_string())
                    ),
                    _ => "fewer than two rounds: no interval".into(),
                };
                format!("{} ({why})", sh.stage)
            })
            .collect();
        let zero: Vec<&str> = self
            .shares
            .iter()
            .filter(|sh| sh.noisy)
            .map(|sh| sh.stage.as_str())
            .collect();
        let _ = writeln!(
            s,
            "Convergence (target ±{:.1} points, cap {:.0} s): {}. Stopped: {}.",
            self.target_ci95 * 100.0,
            self.max_time_s,
            if not.is_empty() {
                "every share converged".to_string()
            } else {
                format!("not converged: {}", not.join("; "))
            },
            self.stop_reason
        );
        if !zero.is_empty() {
            let _ = writeln!(
                s,
                "Within noise of 0 (interval contains 0): {}.",
                zero.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "non-TLS = plain HTTP's cost ÷ baseline's (server and kernel without TLS). \
             TLS protocol = (skeleton − plain HTTP) ÷ baseline: rustls's state machine, record \
             framing and the handshake's extra traffic, which no no-op removes. other TLS = what \
             the named stages, TLS protocol and non-TLS leave (interactions between stages, noise)."
        );
        s
    }
}
