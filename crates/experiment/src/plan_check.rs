//! `tlslab plan --check`: the capacity model against measurement.
//!
//! One embedded server (one worker pinned to the first CPU this process may
//! use) and the load engine (one thread pinned to the second), as `lab`
//! runs them. Steps:
//! 1. Unless the costs were given, calibrate them: three closed-loop cells
//!    (a full handshake per request, a resumed one, keep-alive), each
//!    cell's server CPU per request server-observed; then one open-loop
//!    cell at 60 % of the capacity those costs predict. A saturated closed
//!    loop finds several connections ready at each wake-up; Poisson
//!    arrivals below saturation mostly wake an idle worker, one connection
//!    each, and cost more per connection (11–13 % more for RSA-2048 here,
//!    BENCHMARKS.md). The difference, server CPU per connection, is added
//!    to both handshake costs.
//! 2. The unloaded point: open loop at 5 % of the predicted capacity, whose
//!    client-observed latency gives the model its load-independent part
//!    (client CPU, loopback, the kernel).
//! 3. At each target utilisation (50, 70, 90 %): open loop, Poisson
//!    arrivals at the predicted rate, one request per new connection.
//!
//! Predictions: throughput = the offered rate if the server keeps up (ρ <
//! 1 by the model); p50 latency = the unloaded p50 + the rise of the
//! median time in system of an M/G/1 FCFS queue (service times from the
//! costs and the mix, simulated); mean latency by M/M/1 and by seed 004's
//! form, the same way. Every measured figure is client-observed over the
//! point's window except `server_busy` (server-observed CPU time ÷ wall time).

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_load::{Arrivals, OpenLoop};
use tlslab_report::capacity::{self, Mix, UnitCosts};
use tlslab_report::{columns, header};
use tlslab_server::{Content, Server};

use crate::Error;
use crate::pin::Placement;
use crate::rig::{self, Rig, Transport};

/// What the check runs.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// The costs to predict from; `None` measures them first.
    pub costs: Option<UnitCosts>,
    /// Share of connections resumed, 0–1 (one request per connection).
    pub reuse: f64,
    /// The TLS version of the server.
    pub version: Version,
    /// The server's certificate key.
    pub key: KeyType,
    /// Measurement window of each utilisation point (and of the unloaded one).
    pub cell: Duration,
    /// Measurement window of each calibration cell.
    pub calibration_cell: Duration,
    /// Closed-loop clients of the calibration cells.
    pub calibration_clients: usize,
    /// The target utilisations, 0–1.
    pub levels: Vec<f64>,
    /// Seed of the arrivals and the simulation.
    pub seed: u64,
}

/// The calibration: what each closed-loop cell measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Calibration {
    /// Server CPU per request, full handshake per request, µs.
    pub full_per_request_us: f64,
    /// Server CPU per request, resumed handshake per request, µs.
    pub resumed_per_request_us: f64,
    /// Server CPU per request on kept-alive connections, µs.
    pub keepalive_per_request_us: f64,
    /// Requests/s of the full-handshake cell (client-observed).
    pub full_requests_per_s: f64,
    /// The server's busy fraction in the full-handshake cell.
    pub full_server_busy: f64,
    /// Window of each cell, s.
    pub cell_s: f64,
    /// Closed-loop clients.
    pub clients: usize,
    /// The open-loop calibration cell's utilisation by the closed-loop
    /// costs (0–1).
    pub open_loop_utilisation: f64,
    /// Server CPU per request the closed-loop costs predict for the mix, µs.
    pub closed_loop_per_request_us: f64,
    /// Server CPU per request measured in the open-loop cell, µs
    /// (server-observed).
    pub open_loop_per_request_us: f64,
    /// What was added to each handshake's cost: the open-loop cell's CPU
    /// per connection over the closed-loop prediction (never negative), µs.
    pub per_connection_overhead_us: f64,
}

/// One open-loop point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckPoint {
    /// The utilisation the model was asked for (0–1); 0.05 for the
    /// unloaded point.
    pub target_utilisation: f64,
    /// Offered arrivals/s (the model's requests/s at that utilisation).
    pub offered_per_s: f64,
    /// Predicted requests/s.
    pub predicted_per_s: f64,
    /// Requests/s completed, client-observed over `window_s`.
    pub measured_per_s: f64,
    /// Successful requests/s, client-observed.
    pub goodput_per_s: f64,
    /// (measured − predicted) ÷ predicted.
    pub throughput_error: f64,
    /// The server worker's CPU time ÷ wall time (server-observed).
    pub server_busy: f64,
    /// Server CPU per request served, µs (server-observed).
    pub server_cpu_us_per_request: f64,
    /// Predicted p50 latency, ms.
    pub p50_predicted_ms: f64,
    /// Measured p50 latency (connect + handshake + request, from the
    /// arrival's intended start), ms.
    pub p50_measured_ms: f64,
    /// (measured − predicted) ÷ predicted.
    pub p50_error: f64,
    /// Predicted mean latency by M/M/1, ms.
    pub mean_mm1_ms: f64,
    /// Predicted mean latency by seed 004's form, ms.
    pub mean_seed004_ms: f64,
    /// Measured mean latency, ms.
    pub mean_measured_ms: f64,
    /// Measured p99 latency, ms.
    pub p99_measured_ms: f64,
    /// Arrivals started more than 1 ms late (the client fell behind).
    pub late: u64,
    /// Arrivals dropped at the in-flight cap.
    pub dropped: u64,
    /// Failed requests.
    pub errors: u64,
    /// The client's CPU busy fraction.
    pub client_busy: f64,
    /// The client-observed window, s.
    pub window_s: f64,
}

/// The check's results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckReport {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// The costs the predictions used.
    pub costs: UnitCosts,
    /// Where they came from.
    pub costs_from: String,
    /// The calibration cells, when the check measured the costs.
    pub calibration: Option<Calibration>,
    /// Share of connections resumed.
    pub reuse: f64,
    /// TLS version.
    pub version: String,
    /// Certificate key.
    pub key: String,
    /// Where server and client ran.
    pub placement: Placement,
    /// Predicted requests/s of one core at 100 %.
    pub capacity_per_s: f64,
    /// The unloaded point (5 %).
    pub unloaded: CheckPoint,
    /// The points at the target utilisations.
    pub points: Vec<CheckPoint>,
    /// The 1-minute load average of the machine before and after the check
    /// (/proc/loadavg): other processes on the server's and client's CPUs
    /// starve them, which the model does not know about.
    pub loadavg_1m: (Option<f64>, Option<f64>),
}

fn ms(us: Option<u64>) -> f64 {
    us.map_or(f64::NAN, |v| v as f64 / 1000.0)
}

fn rel(measured: f64, predicted: f64) -> f64 {
    (measured - predicted) / predicted
}

/// Runs the check; `progress` gets a line per step.
pub fn run(cfg: &CheckConfig, mut progress: impl FnMut(&str)) -> Result<CheckReport, Error> {
    let placement = Placement::split();
    let load_before = crate::loadavg();
    progress(&format!(
        "tlslab plan --check: TLS {} with {}, reuse {:.0} %; {}",
        cfg.version.short(),
        cfg.key.name(),
        cfg.reuse * 100.0,
        placement.describe()
    ));
    let rig = Rig::generate(cfg.key, &[], placement.clone())?;
    let mut serve = rig.server(Content::Specweb96);
    serve.tls.versions = vec![cfg.version];
    let server = Server::start(serve)?;
    let Some(addr) = server.https_addr() else {
        return Err(Error::empty(
            "start-up",
            "the embedded server has no HTTPS listener",
        ));
    };
    let url = format!("https://localhost:{}{}", addr.port(), crate::lab::PATH);

    // An open-loop load at `rate` arrivals/s for `window`: one request per
    // new connection, Poisson arrivals, the check's reuse.
    let open_loop = |rate: f64, window: Duration| -> Result<tlslab_load::LoadConfig, Error> {
        let mut load = rig.cell_load(&url, window, 64, vec![cfg.version], 1, cfg.reuse)?;
        load.open_loop = Some(OpenLoop {
            rate,
            arrivals: Arrivals::Poisson,
            max_in_flight: 10_000,
        });
        load.seed = cfg.seed;
        load.warmup = (window / 5).min(Duration::from_secs(1));
        Ok(load)
    };
    let mix = Mix {
        reuse: cfg.reuse,
        requests_per_conn: 1.0,
    };
    let model = |costs: UnitCosts| {
        capacity::plan(costs, mix, 0.5, None, None, 0.0)
            .map_err(|e| Error::empty("the model", e.to_string()))
    };

    let mut calibration = None;
    let (costs, costs_from) = match cfg.costs {
        Some(c) => (c, "given".to_string()),
        None => {
            let mut per = Vec::new();
            for (name, k, reuse) in [
                ("full handshake per request", 1, 0.0),
                ("resumed handshake per request", 1, 1.0),
                ("keep-alive", 0, 0.0),
            ] {
                let load = rig.cell_load(
                    &url,
                    cfg.calibration_cell,
                    cfg.calibration_clients,
                    vec![cfg.version],
                    k,
                    reuse,
                )?;
                let m = rig::measure_over(&server, &load, Transport::Tcp, name)?;
                progress(&format!(
                    "  calibration, {name}: {:.1} µs server CPU per request, {:.0} req/s, \
                     server {:.0} % busy",
                    m.server_cpu_us_per_request,
                    m.report.throughput.requests_per_s,
                    m.server_busy * 100.0
                ));
                per.push(m);
            }
            if per[0].server_busy < 0.8 {
                progress(&format!(
                    "  WARNING: the full-handshake calibration kept the server only {:.0} % busy: \
                     the client or other processes on this machine were the bottleneck; the \
                     costs are still server CPU per request, but the check's load may not reach \
                     the rates it offers",
                    per[0].server_busy * 100.0
                ));
            }
            let closed = UnitCosts::from_cells(
                per[0].server_cpu_us_per_request,
                per[1].server_cpu_us_per_request,
                per[2].server_cpu_us_per_request,
            );
            let closed_plan = model(closed)?;
            const OPEN_LOOP_RHO: f64 = 0.6;
            let rate = closed_plan.requests_per_s_per_core_max * OPEN_LOOP_RHO;
            let load = open_loop(rate, cfg.calibration_cell)?;
            let m = rig::run_measured_over(&server, &load, Transport::Tcp)?;
            let open_us = m.server_cpu_us_per_request;
            if !open_us.is_finite() {
                return Err(Error::empty(
                    "open-loop calibration",
                    "the server answered no request",
                ));
            }
            // One request per connection: per request is per connection.
            let overhead = (open_us - closed_plan.cpu_per_request_us).max(0.0);
            progress(&format!(
                "  calibration, open loop at {:.0} %: {open_us:.1} µs server CPU per request \
                 against {:.1} µs from the closed-loop cells: +{overhead:.1} µs per connection",
                OPEN_LOOP_RHO * 100.0,
                closed_plan.cpu_per_request_us,
            ));
            let c = UnitCosts {
                full_handshake_us: closed.full_handshake_us + overhead,
                resumed_handshake_us: closed.resumed_handshake_us + overhead,
                request_us: closed.request_us,
            };
            calibration = Some(Calibration {
                full_per_request_us: per[0].server_cpu_us_per_request,
                resumed_per_request_us: per[1].server_cpu_us_per_request,
                keepalive_per_request_us: per[2].server_cpu_us_per_request,
                full_requests_per_s: per[0].report.throughput.requests_per_s,
                full_server_busy: per[0].server_busy,
                cell_s: cfg.calibration_cell.as_secs_f64(),
                clients: cfg.calibration_clients,
                open_loop_utilisation: OPEN_LOOP_RHO,
                closed_loop_per_request_us: closed_plan.cpu_per_request_us,
                open_loop_per_request_us: open_us,
                per_connection_overhead_us: overhead,
            });
            (
                c,
                format!(
                    "measured by this check: three closed-loop cells of {:.0} s, {} clients, \
                     then an open-loop cell at {:.0} % whose extra CPU per connection \
                     (+{overhead:.1} µs) is added to each handshake (server-observed CPU per \
                     request)",
                    cfg.calibration_cell.as_secs_f64(),
                    cfg.calibration_clients,
                    OPEN_LOOP_RHO * 100.0,
                ),
            )
        }
    };
    let plan = model(costs)?;
    let cap = plan.requests_per_s_per_core_max;
    let services = capacity::service_mix(&costs, &mix);
    let s_us = plan.cpu_per_request_us;
    let hs_us = plan.handshake_cpu_per_request_us;
    let sim_p50 = |rho: f64| {
        let v = capacity::mg1_fcfs_sojourns(&services, rho, 200_000, cfg.seed);
        capacity::quantile(&v, 0.5) / 1000.0
    };
    progress(&format!(
        "  model: {s_us:.1} µs server CPU per request → {cap:.0} req/s per core at 100 %"
    ));

    let run_point = |rho: f64| -> Result<CheckPoint, Error> {
        let rate = cap * rho;
        // A point that completes nothing (the model offered more than the
        // server or the client could take) is a result, not an error.
        let m = rig::run_measured_over(&server, &open_loop(rate, cfg.cell)?, Transport::Tcp)?;
        let r = &m.report;
        let ol = r.open_loop.as_ref();
        let goodput = if r.window.measured_s > 0.0 {
            r.requests.succeeded as f64 / r.window.measured_s
        } else {
            0.0
        };
        Ok(CheckPoint {
            target_utilisation: rho,
            offered_per_s: rate,
            predicted_per_s: rate,
            measured_per_s: r.throughput.requests_per_s,
            goodput_per_s: goodput,
            throughput_error: rel(r.throughput.requests_per_s, rate),
            server_busy: m.server_busy,
            server_cpu_us_per_request: m.server_cpu_us_per_request,
            p50_predicted_ms: f64::NAN,
            p50_measured_ms: ms(r.latency.total.p50_us),
            p50_error: f64::NAN,
            mean_mm1_ms: f64::NAN,
            mean_seed004_ms: f64::NAN,
            mean_measured_ms: r.latency.total.mean_us.map_or(f64::NAN, |v| v / 1000.0),
            p99_measured_ms: ms(r.latency.total.p99_us),
            late: ol.map_or(0, |o| o.late),
            dropped: ol.map_or(0, |o| o.dropped),
            errors: r.requests.errors,
            client_busy: r.client_cpu.busy_fraction,
            window_s: r.window.measured_s,
        })
    };

    const UNLOADED: f64 = 0.05;
    let mut unloaded = run_point(UNLOADED)?;
    // The load-independent part of the latency: what the unloaded point
    // measured less what the model puts in the server there.
    let base_p50 = unloaded.p50_measured_ms - sim_p50(UNLOADED);
    let mm1 = |rho: f64| s_us / 1000.0 / (1.0 - rho);
    let seed004 = |rho: f64| (s_us - hs_us) / 1000.0 + hs_us / 1000.0 / (1.0 - rho);
    let base_mean_mm1 = unloaded.mean_measured_ms - mm1(UNLOADED);
    let base_mean_004 = unloaded.mean_measured_ms - seed004(UNLOADED);
    let predict = |p: &mut CheckPoint| {
        p.p50_predicted_ms = base_p50 + sim_p50(p.target_utilisation);
        p.p50_error = rel(p.p50_measured_ms, p.p50_predicted_ms);
        p.mean_mm1_ms = base_mean_mm1 + mm1(p.target_utilisation);
        p.mean_seed004_ms = base_mean_004 + seed004(p.target_utilisation);
    };
    predict(&mut unloaded);
    if !unloaded.p50_measured_ms.is_finite() {
        progress(
            "  the unloaded point completed no request, so there is no latency \
             baseline: the p50 predictions are left out (null in the JSON). The \
             machine was too busy; rerun on a quieter one or with a longer --cell.",
        );
    }
    progress(&format!(
        "  unloaded point ({:.0} req/s): p50 {:.3} ms, mean {:.3} ms, server {:.0} % busy",
        unloaded.offered_per_s,
        unloaded.p50_measured_ms,
        unloaded.mean_measured_ms,
        unloaded.server_busy * 100.0
    ));
    let mut points = Vec::new();
    for &rho in &cfg.levels {
        let mut p = run_point(rho)?;
        predict(&mut p);
        progress(&format!(
            "  {:.0} %: offered {:.0} req/s, measured {:.0} req/s, server {:.0} % busy, \
             p50 {:.3} ms (predicted {:.3})",
            rho * 100.0,
            p.offered_per_s,
            p.measured_per_s,
            p.server_busy * 100.0,
            p.p50_measured_ms,
            p.p50_predicted_ms
        ));
        points.push(p);
    }
    server.shutdown();
    Ok(CheckReport {
        schema_version: 1,
        costs,
        costs_from,
        calibration,
        reuse: cfg.reuse,
        version: cfg.version.name().into(),
        key: cfg.key.name().into(),
        placement,
        capacity_per_s: cap,
        unloaded,
        points,
        loadavg_1m: (load_before, crate::loadavg()),
    })
}

/// Target: throughput within this share of the prediction.
pub const THROUGHPUT_TOLERANCE: f64 = 0.10;
/// Target: p50 latency within this share of the prediction.
pub const P50_TOLERANCE: f64 = 0.25;
/// The utilisations the targets apply to.
pub const JUDGED: [f64; 2] = [0.5, 0.7];

impl CheckReport {
    /// Whether the targets were met at each judged utilisation: (ρ,
    /// throughput met, p50 met).
    pub fn verdicts(&self) -> Vec<(f64, bool, bool)> {
        self.points
            .iter()
            .filter(|p| {
                JUDGED
                    .iter()
                    .any(|j| (p.target_utilisation - j).abs() < 1e-9)
            })
            .map(|p| {
                (
                    p.target_utilisation,
                    p.throughput_error.abs() <= THROUGHPUT_TOLERANCE,
                    p.p50_error.abs() <= P50_TOLERANCE,
                )
            })
            .collect()
    }

    /// The human table.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nplan --check: predicted against measured ({} with {}, reuse {:.0} %, one request \
             per connection; {})",
            self.version,
            self.key,
            self.reuse * 100.0,
            self.placement.describe()
        );
        let _ = writeln!(
            s,
            "costs ({}): full handshake {:.1} µs, resumed {:.1} µs, request {:.1} µs → {:.0} req/s \
             per core at 100 %",
            self.costs_from,
            self.costs.full_handshake_us,
            self.costs.resumed_handshake_us,
            self.costs.request_us,
            self.capacity_per_s
        );
        let _ = writeln!(
            s,
            "Open loop, Poisson arrivals at the predicted rate, {:.1} s per point. Measured \
             req/s and latency: client-observed over each point's window, latency from each \
             arrival's intended start; server busy: server-observed CPU ÷ wall time.",
            self.unloaded.window_s
        );
        let _ = writeln!(
            s,
            "p50 predicted = unloaded p50 − M/G/1 median at 5 % + M/G/1 FCFS median time in \
             system at ρ (simulated, service times from the costs). Means: M/M/1 and seed \
             004's request CPU + H/(1−ρ), each anchored at the unloaded mean the same way."
        );
        let mut rows = vec![header(
            "ρ|pred/s|meas/s|Δ|busy|p50 pred|p50 meas|Δ|mean M/M1|mean 004|mean meas|p99 meas|client",
        )];
        rows.extend(
            std::iter::once(&self.unloaded)
                .chain(&self.points)
                .map(|p| {
                    let pct = |x: f64, digits: usize| format!("{:.*}%", digits, x * 100.0);
                    let ms = |x: f64| format!("{x:.3}");
                    vec![
                        pct(p.target_utilisation, 0),
                        format!("{:.0}", p.predicted_per_s),
                        format!("{:.0}", p.measured_per_s),
                        pct(p.throughput_error, 1),
                        pct(p.server_busy, 0),
                        ms(p.p50_predicted_ms),
                        ms(p.p50_measured_ms),
                        pct(p.p50_error, 1),
                        ms(p.mean_mm1_ms),
                        ms(p.mean_seed004_ms),
                        ms(p.mean_measured_ms),
                        ms(p.p99_measured_ms),
                        pct(p.client_busy, 0),
                        if p.late > 0 || p.dropped > 0 || p.errors > 0 {
                            format!(
                                " ({} late, {} dropped, {} errors)",
                                p.late, p.dropped, p.errors
                            )
                        } else {
                            String::new()
                        },
                    ]
                }),
        );
        s.push('\n');
        s.push_str(&columns(
            "",
            &[6, 9, 9, 7, 7, 9, 9, 7, 9, 9, 9, 8, 7, 0],
            &rows,
        ));
        let _ = writeln!(
            s,
            "(latencies in ms; the 5 % row is the unloaded point the latency model is anchored at)"
        );
        for (rho, thr, p50) in self.verdicts() {
            let _ = writeln!(
                s,
                "target at {:.0} %: throughput within {:.0} %: {}; p50 within {:.0} %: {}",
                rho * 100.0,
                THROUGHPUT_TOLERANCE * 100.0,
                if thr { "met" } else { "MISSED" },
                P50_TOLERANCE * 100.0,
                if p50 { "met" } else { "MISSED" }
            );
        }
        let _ = writeln!(
            s,
            "machine load average (1 min) before and after: {} and {} on {} CPU(s) this process \
             may use",
            self.loadavg_1m.0.map_or("?".into(), |l| format!("{l:.1}")),
            self.loadavg_1m.1.map_or("?".into(), |l| format!("{l:.1}")),
            tlslab_runtime::allowed_cpus().len()
        );
        for p in &self.points {
            if p.throughput_error < -THROUGHPUT_TOLERANCE
                && p.server_busy < 0.8 * p.target_utilisation
                && p.client_busy < 0.9
            {
                let _ = writeln!(
                    s,
                    "! at {:.0} %: neither the server ({:.0} % busy) nor the client ({:.0} % busy) \
                     used the CPU the offered load needed: other processes had it (a shared \
                     machine); this point does not test the model",
                    p.target_utilisation * 100.0,
                    p.server_busy * 100.0,
                    p.client_busy * 100.0
                );
            }
        }
        if self.points.iter().any(|p| p.client_busy >= 0.9) {
            let _ = writeln!(
                s,
                "! the client was ≥ 90 % busy at some point: there the latency measures the \
                 client too; use an RSA key (--key rsa2048) so the server is the bottleneck"
            );
        }
        s
    }
}
