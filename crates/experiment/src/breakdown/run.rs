//! How `tlslab breakdown` runs: rounds of configurations, each cell run
//! at the same time as a baseline cell beside it, until every stage's
//! interval is narrow enough or the time cap.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tlslab_crypto::meter::{Ablation, AblationSet, Op};
use tlslab_report::interval::{self, Interval};
use tlslab_server::{Content, Server};

use super::analyse::{Cell, Sample, analyse, paired_fractions};
use super::compare::BreakdownPair;
use super::plan::{BreakdownConfig, Configuration, Transport, Workload, configurations, meter_ops};
use super::report::BreakdownReport;
use crate::Error;
use crate::pin::Placement;
use crate::rig::{Reading, Rig};

/// `--transport both`: the breakdown of `cfg` over TCP, then the same over
/// QUIC, side by side; the one entry of `tlslab breakdown --transport both`
/// and of seed001-breakdown's QUIC column.
pub fn run_both(
    cfg: &BreakdownConfig,
    mut progress: impl FnMut(&str),
) -> Result<BreakdownPair, Error> {
    let tcp = run(cfg, &mut progress)?;
    let quic_cfg = BreakdownConfig {
        transport: Transport::Quic,
        ..cfg.clone()
    };
    let quic = run(&quic_cfg, &mut progress)?;
    Ok(super::pair(tcp, quic))
}

/// Runs the breakdown. `progress` receives one line per cell.
pub fn run(
    cfg: &BreakdownConfig,
    mut progress: impl FnMut(&str),
) -> Result<BreakdownReport, Error> {
    let placement = Placement::split();
    let configs = configurations(cfg.workload, cfg.transport);
    let min_rounds = cfg.repeats.max(1);
    let base_i = configs
        .iter()
        .position(|c| c.ablation == Some(AblationSet::NONE))
        .unwrap_or(0);
    let others: Vec<usize> = (0..configs.len()).filter(|&i| i != base_i).collect();
    progress(&format!(
        "tlslab breakdown: {} configurations in rounds of {:.1} s cells (each run at the same time as a \
         baseline cell beside it), at least {min_rounds} rounds, until every \
         stage's 95 % interval is within ±{:.1} points or {:.0} s; {}; {} over {}; {}",
        configs.len(),
        cfg.cell.as_secs_f64(),
        cfg.target_ci95 * 100.0,
        cfg.max_time.as_secs_f64(),
        cfg.workload.describe(),
        cfg.version,
        match cfg.transport {
            Transport::Tcp => "TCP (HTTP/1.1)",
            Transport::Quic => "QUIC (HTTP/3)",
        },
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
            let (base_cell, cell) =
                run_pair_again_if_empty(cfg, &rig, &configs[base_i], &configs[i], &mut progress)?;
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
    let path = format!("/bytes/{}", cfg.file_size);
    // Over QUIC, the HTTP/3 listener on the TLS listener's rustls
    // configuration (and so its ablated provider), on loopback like every
    // listener.
    let server = cfg.transport.start(serve)?;
    let url = match (cfg.transport.listener(&server), server.http_addr()) {
        (Some(a), _) => format!("https://localhost:{}{path}", a.port()),
        (None, Some(a)) => format!("http://{a}{path}"),
        (None, None) => {
            server.shutdown();
            let what = format!("the server has no {} listener", cfg.transport.name());
            return Err(Error::empty(&c.name, what));
        }
    };
    let (k, reuse) = match cfg.workload {
        Workload::NewConn => (1, 0.0),
        Workload::Reuse(r) => (1, r),
        Workload::KeepAlive => (0, 0.0),
    };
    let mut load = rig.cell_load(&url, cfg.cell, cfg.clients, vec![cfg.version], k, reuse)?;
    load.ablation = ablation;
    if cfg.transport == Transport::Quic
        && let Err(e) = prime(&load)
    {
        server.shutdown();
        return Err(e);
    }
    Ok((server, load))
}

/// Over QUIC, one request before the cell (up to 5 s): the cell's short
/// window then neither times the listener's first connection nor ends
/// before a server starved by the machine's other load has answered once;
/// a server that cannot answer at all fails here, naming the cause.
fn prime(cell: &tlslab_load::LoadConfig) -> Result<(), Error> {
    let mut one = cell.clone();
    one.clients = 1;
    one.requests = Some(1);
    one.duration = Some(Duration::from_secs(5));
    one.warmup = Duration::ZERO;
    one.timeout = Duration::from_secs(5);
    let r = Transport::Quic.run(&one)?;
    if r.requests.succeeded == 0 {
        return Err(Error::empty("priming request over QUIC", r.error_summary()));
    }
    Ok(())
}

/// How many times a pair runs at most when a cell of it completes no
/// request.
const PAIR_ATTEMPTS: usize = 3;

/// [`run_pair`], run again (up to [`PAIR_ATTEMPTS`] times in all) when a
/// cell completed no request in its window: on a shared machine a short
/// cell can end before a starved server has finished one handshake, and
/// that says nothing about the configuration. Any other error, or the
/// last attempt's, ends the run.
fn run_pair_again_if_empty(
    cfg: &BreakdownConfig,
    rig: &Rig,
    base: &Configuration,
    other: &Configuration,
    progress: &mut impl FnMut(&str),
) -> Result<(Cell, Cell), Error> {
    let mut attempt = 1;
    loop {
        match run_pair(cfg, rig, base, other) {
            Err(e @ Error::EmptyCell { .. }) if attempt < PAIR_ATTEMPTS => {
                progress(&format!(
                    "  {} beside the baseline: {e}; running the pair again (attempt {} of {PAIR_ATTEMPTS})",
                    other.name,
                    attempt + 1
                ));
                attempt += 1;
            }
            r => return r,
        }
    }
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
        let ha = s.spawn(|| cfg.transport.run(&la));
        let hb = s.spawn(|| cfg.transport.run(&lb));
        let ra = ha.join();
        let rb = hb.join();
        stop.store(true, Ordering::Relaxed);
        (sampler.join().unwrap_or_default(), ra, rb)
    });
    sa.shutdown();
    sb.shutdown();
    let joined = |r: std::thread::Result<Result<tlslab_report::LoadReport, Error>>,
                  name: &str|
     -> Result<tlslab_report::LoadReport, Error> {
        match r {
            Ok(r) => r,
            Err(_) => Err(Error::empty(name, "the load engine panicked")),
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
        return Err(Error::empty(
            format!("{} beside the baseline", other.name),
            "no reading of the servers' counters fell inside the measurement window",
        ));
    };
    let wall_s = ((last[0].unix_ms - first[0].unix_ms) / 1e3).max(1e-9);
    let d = [last[0].since(&first[0]), last[1].since(&first[1])];
    let server_side_busy = d.iter().map(|d| d.cpu.as_secs_f64()).sum::<f64>() / wall_s;
    let client_side_busy = ra.client_cpu.busy_fraction + rb.client_cpu.busy_fraction;
    let cell_of = |k: usize, report: &tlslab_report::LoadReport, c: &Configuration| {
        let (served, cpu) = (d[k].served, d[k].cpu);
        if served == 0 || report.requests.completed == 0 {
            return Err(Error::empty(c.name.clone(), report.error_summary()));
        }
        let crypto = &d[k].crypto;
        let mut meter_us = BTreeMap::new();
        for a in Ablation::ALL {
            if let Some(ops) = meter_ops(a.name()) {
                let ns: u64 = ops.iter().map(|&op| crypto.total(op).nanos).sum();
                meter_us.insert(a.name().to_string(), ns as f64 / 1e3 / served as f64);
            }
        }
        let quic_tls_us = crypto.total(Op::QuicTls).nanos as f64 / 1e3 / served as f64;
        Ok(Cell {
            cpu_us: cpu.as_secs_f64() * 1e6 / served as f64,
            quic_tls_us,
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
