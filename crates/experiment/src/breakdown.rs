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
//! Beside it, the crypto meter's direct attribution: in each baseline cell,
//! the server time inside each stage's operations per request, over the same
//! window as the CPU per request, divided by that CPU per request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tlslab_crypto::meter::{Ablation, AblationSet, Op};
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::interval::{self, Convergence, Interval};
use tlslab_server::{Content, Server};

use crate::Error;
use crate::pin::Placement;
use crate::rig::{Reading, Rig};

/// The request pattern of every cell.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "reuse")]
pub enum Workload {
    /// A new connection and a full handshake per request.
    NewConn,
    /// A new connection per request; this share (0–1) of them resumed.
    Reuse(f64),
    /// Connections kept alive.
    KeepAlive,
}

impl Workload {
    fn describe(self) -> String {
        match self {
            Workload::NewConn => "new connection and full handshake per request".into(),
            Workload::Reuse(r) => format!("new connection per request, {:.0}% resumed", r * 100.0),
            Workload::KeepAlive => "keep-alive connections".into(),
        }
    }
}

/// What `breakdown` runs.
#[derive(Clone, Debug)]
pub struct BreakdownConfig {
    /// The request pattern.
    pub workload: Workload,
    /// Response body size in bytes (served from `/bytes/<N>`).
    pub file_size: u64,
    /// TLS version of every TLS cell.
    pub version: Version,
    /// Certificate key type.
    pub key: KeyType,
    /// Measurement time per cell.
    pub cell: Duration,
    /// Closed-loop clients.
    pub clients: usize,
    /// The fewest rounds (runs per configuration) before the stopping rule
    /// may stop.
    pub repeats: usize,
    /// The time cap: no round starts that would end after it (at least
    /// `repeats` rounds always run).
    pub max_time: Duration,
    /// The target 95 % half-width of every named stage's share, as a
    /// fraction of the baseline (0.02 = 2 points).
    pub target_ci95: f64,
}

/// One configuration of the breakdown.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Configuration {
    /// Its label, after seed 001 where one exists.
    pub name: String,
    /// The stages replaced by no-ops; `None` is plain HTTP (no TLS at all).
    pub ablation: Option<AblationSet>,
    /// Whether this row is a single stage whose Amdahl fraction is part of
    /// the cost table.
    pub stage: Option<String>,
}

/// The configurations run, in order: plain HTTP, the TLS baseline, each
/// stage alone, seed 001's cumulative configurations, skeleton, minimal.
pub fn configurations(workload: Workload) -> Vec<Configuration> {
    let mut out = vec![
        Configuration {
            name: "plain HTTP".into(),
            ablation: None,
            stage: None,
        },
        Configuration {
            name: "TLS (baseline)".into(),
            ablation: Some(AblationSet::NONE),
            stage: None,
        },
    ];
    let resumes = matches!(workload, Workload::Reuse(r) if r > 0.0);
    for (a, label) in [
        (Ablation::Sig, "no signatures"),
        (Ablation::Kx, "no key exchange"),
        (Ablation::Cipher, "NULL cipher"),
        (Ablation::Mac, "no MAC (cipher only)"),
        (Ablation::Hash, "no hash"),
        (Ablation::Rng, "no randomness"),
        (Ablation::Cache, "perfect cache"),
    ] {
        // A perfect cache only matters when sessions are resumed.
        if a == Ablation::Cache && !resumes {
            continue;
        }
        out.push(Configuration {
            name: label.into(),
            ablation: Some(AblationSet::NONE.with(a)),
            stage: Some(a.name().into()),
        });
    }
    let pkx = AblationSet::NONE.with(Ablation::Sig).with(Ablation::Kx);
    let pkx_rng_cache = pkx.with(Ablation::Rng).with(Ablation::Cache);
    // Seed 001's "PKX, NULL, no MAC, no randomness, perfect cache" is, in
    // rustls, exactly the skeleton: every crypto stage is a no-op while the
    // protocol machinery still runs (rustls cannot skip it; ABLATIONS.md).
    for (name, set) in [
        ("PKX (no sig, no kx)", pkx),
        ("PKX, no randomness, perfect cache", pkx_rng_cache),
        (
            "skeleton (every crypto stage a no-op)",
            AblationSet::skeleton(),
        ),
        ("minimal setup, encrypted data", AblationSet::minimal()),
    ] {
        out.push(Configuration {
            name: name.into(),
            ablation: Some(set),
            stage: None,
        });
    }
    out
}

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

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / median(v)
}

/// The crypto-meter operations that make up a named stage, for the direct
/// attribution; `None` where the meter cannot isolate the stage.
pub fn meter_ops(stage: &str) -> Option<&'static [Op]> {
    Some(match stage {
        "sig" => &[Op::Sign, Op::Verify],
        "kx" => &[Op::KxStart, Op::KxComplete, Op::KxStartAndComplete],
        // The NULL cipher removes the whole AEAD: every record seal and open.
        "cipher" => &[
            Op::SealHandshake,
            Op::SealApplication,
            Op::OpenHandshake,
            Op::OpenApplication,
        ],
        "hash" => &[Op::Hash],
        "rng" => &[Op::Random],
        "cache" => &[Op::StoreGet, Op::StorePut],
        // `mac` keeps AES-CTR and drops the tag: the meter times the AEAD
        // as one operation and cannot split authentication from it.
        _ => return None,
    })
}

#[derive(Clone)]
struct Cell {
    cpu_us: f64,
    requests_per_s: f64,
    saturated: bool,
    server_busy: f64,
    /// Both servers' CPU ÷ window: how busy the server CPU was.
    server_side_busy: f64,
    /// Both load engines' CPU ÷ window: how busy the client CPU was.
    client_side_busy: f64,
    /// Server µs per request inside each named stage's meter operations.
    meter_us: BTreeMap<String, f64>,
}

/// One cell and the cost of the baseline next to it in time.
#[derive(Clone)]
struct Sample {
    cell: Cell,
    /// Mean CPU per request of the baseline cells adjacent in time (for a
    /// baseline cell: its own).
    paired_base_us: f64,
}

/// Runs the breakdown. `progress` receives one line per cell.
pub fn run(
    cfg: &BreakdownConfig,
    mut progress: impl FnMut(&str),
) -> Result<BreakdownReport, Error> {
    let placement = Placement::split();
    let configs = configurations(cfg.workload);
    let min_rounds = cfg.repeats.max(1);
    let base_i = configs
        .iter()
        .position(|c| c.ablation == Some(AblationSet::NONE))
        .unwrap_or(0);
    let others: Vec<usize> = (0..configs.len()).filter(|&i| i != base_i).collect();
    progress(&format!(
        "tlslab breakdown: {} configurations in rounds of {:.1} s cells (each run at the same time as a \
         baseline cell beside it), at least {min_rounds} rounds, until every \
         stage's 95 % interval is within ±{:.1} points or {:.0} s; {}; {}; {}",
        configs.len(),
        cfg.cell.as_secs_f64(),
        cfg.target_ci95 * 100.0,
        cfg.max_time.as_secs_f64(),
        cfg.workload.describe(),
        cfg.version,
        placement.describe()
    ));
    let meter_overhead_ns = tlslab_crypto::meter::self_overhead().as_secs_f64() * 1e9;
    let rig = Rig::generate(cfg.key, &[], placement.clone())?;
    let mut samples: Vec<Vec<Sample>> = configs.iter().map(|_| Vec::new()).collect();
    let start = Instant::now();
    let mut rounds = 0;
    let mut last_round = Duration::ZERO;
    let stop_reason = loop {
        if rounds >= min_rounds {
            let stage_ivs: Vec<Interval> = configs
                .iter()
                .zip(&samples)
                .filter(|(c, _)| c.stage.is_some())
                .map(|(_, s)| Interval::of(&paired_fractions(s)))
                .collect();
            if interval::all_converged(&stage_ivs, cfg.target_ci95, min_rounds) {
                break "converged";
            }
            if start.elapsed() + last_round > cfg.max_time {
                break "time_cap";
            }
        }
        let round_start = Instant::now();
        let mut order = others.clone();
        if rounds % 2 == 1 {
            order.reverse();
        }
        for &i in &order {
            let (base_cell, cell) = run_pair(cfg, &rig, &configs[base_i], &configs[i])?;
            progress(&format!(
                "  [round {}] {:<46} {:>7.1} µs/req (baseline beside it {:>7.1})  {:>6.0} req/s  server CPU {:>3.0}% busy, client CPU {:>3.0}%",
                rounds + 1,
                configs[i].name,
                cell.cpu_us,
                base_cell.cpu_us,
                cell.requests_per_s,
                cell.server_side_busy * 100.0,
                cell.client_side_busy * 100.0,
            ));
            let b = base_cell.cpu_us;
            samples[i].push(Sample {
                cell,
                paired_base_us: b,
            });
            samples[base_i].push(Sample {
                cell: base_cell,
                paired_base_us: b,
            });
        }
        rounds += 1;
        last_round = round_start.elapsed();
        let widest = configs
            .iter()
            .zip(&samples)
            .filter(|(c, _)| c.stage.is_some())
            .map(|(c, s)| (c, Interval::of(&paired_fractions(s))))
            .max_by(|a, b| a.1.half_width.total_cmp(&b.1.half_width));
        if let Some((c, iv)) = widest {
            progress(&format!(
                "round {rounds} done in {:.0} s ({:.0} s so far); widest interval: {} ±{:.1} points",
                last_round.as_secs_f64(),
                start.elapsed().as_secs_f64(),
                c.stage.as_deref().unwrap_or_default(),
                iv.half_width * 100.0
            ));
        }
    };
    let mut report = analyse(cfg, placement, configs, samples);
    report.meter_overhead_ns = meter_overhead_ns;
    report.elapsed_s = start.elapsed().as_secs_f64();
    report.stop_reason = stop_reason.into();
    Ok(report)
}

fn paired_fractions(s: &[Sample]) -> Vec<f64> {
    s.iter()
        .map(|x| 1.0 - x.cell.cpu_us / x.paired_base_us)
        .collect()
}

/// Starts the embedded server of configuration `c` and builds its load.
fn prepare(
    cfg: &BreakdownConfig,
    rig: &Rig,
    c: &Configuration,
) -> Result<(Server, tlslab_load::LoadConfig), Error> {
    let ablation = c.ablation.unwrap_or(AblationSet::NONE);
    let mut serve = rig.server(Content::Empty);
    serve.tls.versions = vec![cfg.version];
    serve.tls.ablation = ablation;
    if c.ablation.is_none() {
        // Plain HTTP: the listener is the plain one.
        serve.http = serve.https.take();
    }
    let server = Server::start(serve)?;
    let path = format!("/bytes/{}", cfg.file_size);
    let url = match (server.https_addr(), server.http_addr()) {
        (Some(a), _) => format!("https://localhost:{}{path}", a.port()),
        (None, Some(a)) => format!("http://{a}{path}"),
        (None, None) => unreachable!("one listener is always configured"),
    };
    let (k, reuse) = match cfg.workload {
        Workload::NewConn => (1, 0.0),
        Workload::Reuse(r) => (1, r),
        Workload::KeepAlive => (0, 0.0),
    };
    let mut load = rig.cell_load(&url, cfg.cell, cfg.clients, vec![cfg.version], k, reuse)?;
    load.ablation = ablation;
    Ok((server, load))
}

/// How often the servers' counters are read during a pair.
const TICK: Duration = Duration::from_millis(20);

/// Runs the baseline and configuration `other` at the same time: two
/// embedded servers pinned to the server CPU, two load engines pinned to
/// the client CPU, the same window. Each server's CPU per request is its
/// own worker thread's CPU time ÷ the requests it served, both read from
/// the server's own accounting at the first and last reading inside the
/// window both engines measured (warm-up and ramp-down excluded). Both
/// cells share whatever else the machine did in that window, so the ratio
/// of the two cancels it.
fn run_pair(
    cfg: &BreakdownConfig,
    rig: &Rig,
    base: &Configuration,
    other: &Configuration,
) -> Result<(Cell, Cell), Error> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (sa, la) = prepare(cfg, rig, base)?;
    let (sb, lb) = match prepare(cfg, rig, other) {
        Ok(x) => x,
        Err(e) => {
            sa.shutdown();
            return Err(e);
        }
    };
    let stop = AtomicBool::new(false);
    let (ticks, ra, rb) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                v.push([Reading::of(&sa), Reading::of(&sb)]);
                std::thread::sleep(TICK);
            }
            v
        });
        let ha = s.spawn(|| tlslab_load::run(&la));
        let hb = s.spawn(|| tlslab_load::run(&lb));
        let ra = ha.join();
        let rb = hb.join();
        stop.store(true, Ordering::Relaxed);
        (sampler.join().unwrap_or_default(), ra, rb)
    });
    sa.shutdown();
    sb.shutdown();
    let joined = |r: std::thread::Result<Result<tlslab_report::LoadReport, tlslab_load::Error>>,
                  name: &str|
     -> Result<tlslab_report::LoadReport, Error> {
        match r {
            Ok(r) => Ok(r?),
            Err(_) => Err(Error::EmptyCell {
                cell: name.into(),
                errors: "the load engine panicked".into(),
            }),
        }
    };
    let ra = joined(ra, &base.name)?;
    let rb = joined(rb, &other.name)?;
    // The window both engines measured: from the later start to the
    // earlier nominal end (the ramp-down after it is excluded).
    let len_ms = cfg.cell.as_secs_f64() * 1e3;
    let from = ra.window.start_unix_ms.max(rb.window.start_unix_ms) as f64;
    let to = (ra.window.start_unix_ms as f64 + len_ms).min(rb.window.start_unix_ms as f64 + len_ms);
    let inside: Vec<&[Reading; 2]> = ticks
        .iter()
        .filter(|t| t[0].unix_ms >= from && t[1].unix_ms <= to)
        .collect();
    let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
        return Err(Error::EmptyCell {
            cell: format!("{} beside the baseline", other.name),
            errors: "no reading of the servers' counters fell inside the measurement window".into(),
        });
    };
    let wall_s = ((last[0].unix_ms - first[0].unix_ms) / 1e3).max(1e-9);
    let d = [last[0].since(&first[0]), last[1].since(&first[1])];
    let server_side_busy = d.iter().map(|d| d.cpu.as_secs_f64()).sum::<f64>() / wall_s;
    let client_side_busy = ra.client_cpu.busy_fraction + rb.client_cpu.busy_fraction;
    let cell_of = |k: usize, report: &tlslab_report::LoadReport, c: &Configuration| {
        let (served, cpu) = (d[k].served, d[k].cpu);
        if served == 0 || report.requests.completed == 0 {
            return Err(Error::EmptyCell {
                cell: c.name.clone(),
                errors: report.error_summary(),
            });
        }
        let crypto = &d[k].crypto;
        let mut meter_us = BTreeMap::new();
        for a in Ablation::ALL {
            if let Some(ops) = meter_ops(a.name()) {
                let ns: u64 = ops.iter().map(|&op| crypto.total(op).nanos).sum();
                meter_us.insert(a.name().to_string(), ns as f64 / 1e3 / served as f64);
            }
        }
        Ok(Cell {
            cpu_us: cpu.as_secs_f64() * 1e6 / served as f64,
            requests_per_s: report.throughput.requests_per_s,
            saturated: client_side_busy >= 0.9,
            server_busy: cpu.as_secs_f64() / wall_s,
            server_side_busy,
            client_side_busy,
            meter_us,
        })
    };
    Ok((cell_of(0, &ra, base)?, cell_of(1, &rb, other)?))
}

fn share(stage: &str, xs: &[f64], target: f64) -> Share {
    let iv = Interval::of(xs);
    let status = Convergence::of(&iv, target);
    Share {
        stage: stage.into(),
        fraction: iv.mean,
        ci95: iv.half_width,
        noisy: iv.contains_zero(),
        status,
        rounds_needed: (status != Convergence::Converged && iv.n >= 2)
            .then(|| iv.samples_needed(target))
            .filter(|&n| n != usize::MAX),
        meter_fraction: None,
        meter_ci95: None,
        disagrees: None,
    }
}

fn analyse(
    cfg: &BreakdownConfig,
    placement: Placement,
    configs: Vec<Configuration>,
    samples: Vec<Vec<Sample>>,
) -> BreakdownReport {
    let base_i = configs
        .iter()
        .position(|c| c.ablation == Some(AblationSet::NONE))
        .unwrap_or(0);
    let base_cpu: Vec<f64> = samples[base_i].iter().map(|x| x.cell.cpu_us).collect();
    let base = median(&base_cpu);
    let rounds = configs
        .iter()
        .zip(&samples)
        .filter(|(c, _)| c.ablation != Some(AblationSet::NONE))
        .map(|(_, s)| s.len())
        .min()
        .unwrap_or(0);
    let mut rows = Vec::new();
    for (config, ss) in configs.into_iter().zip(&samples) {
        let cpus: Vec<f64> = ss.iter().map(|x| x.cell.cpu_us).collect();
        let rps: Vec<f64> = ss.iter().map(|x| x.cell.requests_per_s).collect();
        let is_base = config.ablation == Some(AblationSet::NONE);
        let fr = if is_base {
            vec![0.0; ss.len()]
        } else {
            paired_fractions(ss)
        };
        let iv = Interval::of(&fr);
        let m = median(&cpus);
        let sat = ss.iter().filter(|x| x.cell.saturated).count();
        rows.push(Row {
            cpu_us_median: m,
            requests_per_s_median: median(&rps),
            requests_per_s: rps,
            spread: spread(&cpus),
            speedup: 1.0 / (1.0 - iv.mean),
            fraction_removed: iv.mean,
            fraction_ci95: if is_base { 0.0 } else { iv.half_width },
            noisy: !is_base && iv.contains_zero(),
            client_saturated: sat > 0,
            client_saturated_cells: sat,
            server_busy_median: median(&ss.iter().map(|x| x.cell.server_busy).collect::<Vec<_>>()),
            paired_fractions: if is_base { Vec::new() } else { fr },
            cpu_us: cpus,
            config,
        });
    }
    // The meter's direct attribution, from the baseline cells.
    let meter_share = |stage: &str| -> Option<Interval> {
        meter_ops(stage)?;
        let xs: Vec<f64> = samples[base_i]
            .iter()
            .filter_map(|x| x.cell.meter_us.get(stage).map(|us| us / x.cell.cpu_us))
            .collect();
        (!xs.is_empty()).then(|| Interval::of(&xs))
    };
    let mut shares = Vec::new();
    let mut named_sum = vec![0.0; rounds];
    for r in rows.iter().filter(|r| r.config.stage.is_some()) {
        let stage = r.config.stage.clone().unwrap_or_default();
        for (k, f) in r.paired_fractions.iter().take(rounds).enumerate() {
            named_sum[k] += f;
        }
        let mut sh = share(&stage, &r.paired_fractions, cfg.target_ci95);
        if let Some(m) = meter_share(&stage) {
            sh.meter_fraction = Some(m.mean);
            sh.meter_ci95 = Some(m.half_width);
            sh.disagrees = Some(Interval::of(&r.paired_fractions).disjoint(&m));
        }
        shares.push(sh);
    }
    // Derived rows, per round from the same round's paired ratios:
    // non-TLS = plain ÷ baseline; TLS protocol = (skeleton − plain) ÷
    // baseline; other TLS = 1 − named − skeleton ÷ baseline.
    let ratio_of = |pred: &dyn Fn(&Configuration) -> bool| -> Option<Vec<f64>> {
        rows.iter()
            .find(|r| pred(&r.config))
            .map(|r| r.paired_fractions.iter().map(|f| 1.0 - f).collect())
    };
    let skel = ratio_of(&|c| c.ablation == Some(AblationSet::skeleton()));
    let plain = ratio_of(&|c| c.ablation.is_none());
    if let (Some(skel), Some(plain)) = (skel, plain) {
        let other: Vec<f64> = (0..rounds).map(|k| 1.0 - named_sum[k] - skel[k]).collect();
        let protocol: Vec<f64> = (0..rounds).map(|k| skel[k] - plain[k]).collect();
        shares.push(share("other TLS", &other, cfg.target_ci95));
        shares.push(share("TLS protocol", &protocol, cfg.target_ci95));
        shares.push(share(
            "non-TLS",
            &plain[..rounds.min(plain.len())],
            cfg.target_ci95,
        ));
    }
    let pairs: Vec<&Cell> = samples
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != base_i)
        .flat_map(|(_, ss)| ss.iter().map(|x| &x.cell))
        .collect();
    let server_cpu_busy = median(&pairs.iter().map(|c| c.server_side_busy).collect::<Vec<_>>());
    let client_cpu_busy = median(&pairs.iter().map(|c| c.client_side_busy).collect::<Vec<_>>());
    let bottleneck = if server_cpu_busy >= 0.85 {
        "server"
    } else if client_cpu_busy >= 0.85 {
        "client"
    } else {
        "neither"
    };
    let converged = shares
        .iter()
        .filter(|s| meter_ops(&s.stage).is_some() || s.stage == "mac")
        .all(|s| s.status == Convergence::Converged);
    BreakdownReport {
        schema_version: 3,
        workload: cfg.workload,
        file_size: cfg.file_size,
        version: cfg.version,
        key: cfg.key.name().into(),
        cell_s: cfg.cell.as_secs_f64(),
        clients: cfg.clients,
        repeats: cfg.repeats.max(1),
        rounds,
        max_time_s: cfg.max_time.as_secs_f64(),
        target_ci95: cfg.target_ci95,
        elapsed_s: f64::NAN,
        converged,
        stop_reason: if converged { "converged" } else { "time_cap" }.into(),
        baseline_drift: if base > 0.0 {
            spread(&base_cpu)
        } else {
            f64::NAN
        },
        placement,
        rows,
        shares,
        meter_overhead_ns: f64::NAN,
        server_cpu_busy,
        client_cpu_busy,
        bottleneck: bottleneck.into(),
    }
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
        let _ = writeln!(
            s,
            "{:<58} {:>11} {:>7} {:>9} {:>7} {:>8} {:>15}",
            "configuration", "CPU/req", "spread", "req/s", "server", "speedup", "fraction"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<58} {:>8.1} µs {:>6.1}% {:>9.0} {:>6.0}% {:>7.2}x {}{}{}",
                r.config.name,
                r.cpu_us_median,
                r.spread * 100.0,
                r.requests_per_s_median,
                r.server_busy_median * 100.0,
                r.speedup,
                pct_pm(r.fraction_removed, r.fraction_ci95),
                if r.noisy { " ~" } else { "" },
                if r.client_saturated { " !" } else { "" }
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!((spread(&[90.0, 100.0, 110.0]) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn cache_only_with_resumption() {
        let stages = |w| {
            configurations(w)
                .into_iter()
                .filter_map(|c| c.stage)
                .collect::<Vec<_>>()
        };
        assert!(!stages(Workload::NewConn).contains(&"cache".to_string()));
        assert!(stages(Workload::Reuse(0.5)).contains(&"cache".to_string()));
    }

    fn sample(cpu: f64, base: f64, meter_sig_us: f64) -> Sample {
        Sample {
            cell: Cell {
                cpu_us: cpu,
                requests_per_s: 1e6 / cpu,
                saturated: false,
                server_busy: 0.47,
                server_side_busy: 0.97,
                client_side_busy: 0.5,
                meter_us: [("sig".to_string(), meter_sig_us)].into(),
            },
            paired_base_us: base,
        }
    }

    fn cfg(workload: Workload) -> BreakdownConfig {
        BreakdownConfig {
            workload,
            file_size: 1024,
            version: Version::Tls13,
            key: KeyType::EcdsaP256,
            cell: Duration::from_secs(1),
            clients: 1,
            repeats: 3,
            max_time: Duration::from_secs(60),
            target_ci95: 0.02,
        }
    }

    fn no_pin() -> Placement {
        Placement {
            server: vec![],
            client: vec![],
        }
    }

    #[test]
    fn amdahl_fractions_and_residuals() {
        let cfg = cfg(Workload::NewConn);
        let configs = configurations(cfg.workload);
        // Baseline 400 µs; sig saves 100, kx 100; every other stage 10;
        // skeleton leaves 80, plain HTTP 40. The baseline drifts by ±10 %
        // across rounds; pairing cancels it exactly.
        let drift = [0.9, 1.0, 1.1];
        let samples = configs
            .iter()
            .map(|c| {
                let v = match (&c.ablation, c.stage.as_deref()) {
                    (None, _) => 40.0,
                    (Some(a), _) if *a == AblationSet::NONE => 400.0,
                    (_, Some("sig")) | (_, Some("kx")) => 300.0,
                    (_, Some(_)) => 390.0,
                    (Some(a), None) if *a == AblationSet::skeleton() => 80.0,
                    _ => 150.0,
                };
                drift
                    .iter()
                    .map(|d| sample(v * d, 400.0 * d, 90.0 * d))
                    .collect()
            })
            .collect();
        let r = analyse(&cfg, no_pin(), configs, samples);
        assert_eq!(r.rounds, 3);
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap();
        assert!((share("sig").fraction - 0.25).abs() < 1e-9);
        assert!((share("hash").fraction - 0.025).abs() < 1e-9);
        assert!((share("non-TLS").fraction - 0.1).abs() < 1e-9);
        assert!((share("TLS protocol").fraction - 0.1).abs() < 1e-9);
        // 1 − (0.25 + 0.25 + 4 × 0.025) − 0.1 − 0.1 = 0.2
        assert!((share("other TLS").fraction - 0.2).abs() < 1e-9);
        let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
        assert!((total - 1.0).abs() < 1e-9);
        // The drift cancels: zero-width intervals, everything converged.
        for sh in &r.shares {
            assert!(sh.ci95 < 1e-9, "{sh:?}");
            assert_eq!(sh.status, Convergence::Converged, "{sh:?}");
        }
        assert!(r.converged);
        // Without pairing, the raw baseline drift is 20 %.
        assert!((r.baseline_drift - 0.2).abs() < 1e-9);
        // The meter said 90 of 400 µs for sig: 22.5 %, against 25 % ± 0:
        // the two disagree; for kx the meter saw nothing recorded.
        let sig = share("sig");
        assert!((sig.meter_fraction.unwrap() - 0.225).abs() < 1e-9);
        assert_eq!(sig.disagrees, Some(true));
        assert_eq!(share("mac").meter_fraction, None);
        let text = r.render();
        assert!(text.contains("every share converged"), "{text}");
        assert!(text.contains("≠ disagree"), "{text}");
    }

    #[test]
    fn noisy_and_unconverged_stages_are_named_with_a_reason() {
        let cfg = cfg(Workload::KeepAlive);
        let configs = configurations(cfg.workload);
        let samples = configs
            .iter()
            .map(|c| match c.stage.as_deref() {
                // ±20 %: far from the ±2-point target (variance).
                Some("rng") => vec![
                    sample(80.0, 100.0, 0.0),
                    sample(99.0, 100.0, 0.0),
                    sample(120.0, 100.0, 0.0),
                ],
                // 10 % ± a little: needs a few more rounds (cap hit).
                Some("hash") => vec![
                    sample(88.0, 100.0, 0.0),
                    sample(90.0, 100.0, 0.0),
                    sample(92.0, 100.0, 0.0),
                ],
                _ => vec![sample(100.0, 100.0, 0.0); 3],
            })
            .collect();
        let r = analyse(&cfg, no_pin(), configs, samples);
        let share = |n: &str| r.shares.iter().find(|s| s.stage == n).unwrap();
        let rng = share("rng");
        assert!(rng.noisy);
        assert_eq!(rng.status, Convergence::Variance);
        let hash = share("hash");
        assert!(!hash.noisy);
        assert_eq!(hash.status, Convergence::CapHit, "{hash:?}");
        assert!(hash.rounds_needed.unwrap() > 3);
        // No effect and no spread: 0 ± 0 is "within noise of 0" and converged.
        let sig = share("sig");
        assert_eq!(sig.status, Convergence::Converged);
        assert!(!r.converged);
        let text = r.render();
        assert!(
            text.contains("not converged: hash (the time cap was hit"),
            "{text}"
        );
        assert!(text.contains("rng (variance"), "{text}");
    }

    #[test]
    fn every_breakdown_json_field_is_documented_in_the_schema_doc() {
        let cfg = cfg(Workload::Reuse(0.5));
        let configs = configurations(cfg.workload);
        let samples = configs
            .iter()
            .map(|_| vec![sample(100.0, 100.0, 1.0); 2])
            .collect();
        let r = analyse(&cfg, no_pin(), configs, samples);
        let v = serde_json::to_value(&r).unwrap();
        let readme = include_str!("../../../docs/schema.md");
        let start = readme
            .find("### `tlslab breakdown --json")
            .expect("docs/schema.md documents the breakdown JSON");
        let section = &readme[start..];
        let section = &section[..section[4..].find("\n## ").map_or(section.len(), |i| i + 4)];
        let mut names: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        for (list, item) in [("rows", &v["rows"][0]), ("shares", &v["shares"][0])] {
            names.extend(
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(|k| format!("{list}[].{k}")),
            );
        }
        names.extend(
            v["placement"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| format!("placement.{k}")),
        );
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| {
                !section.contains(&format!("`{n}`")) && !section.contains(&format!("`{n}[]`"))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "undocumented breakdown fields: {missing:?}"
        );
    }
}
