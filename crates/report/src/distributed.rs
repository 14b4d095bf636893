//! Distributed load: what one agent of a sharded run writes (`load --out
//! DIR`), and the exact merge of N agents' outputs (`tlslab merge`).
//!
//! An agent directory holds, written in this order:
//! - `requests.csv`: the request log ([`crate::CsvLog`]), one row per request;
//! - `report.json`: the agent's own [`LoadReport`];
//! - `histograms.hlog`: its latency histograms in the HdrHistogram interval
//!   log format (one interval per phase, tagged with the phase name,
//!   V2-deflate encoded, readable by HdrHistogram's `HistogramLogReader`);
//! - `counters.json`: every other counter of its [`Stats`] (the exact sums
//!   and maxima of each phase, counts by status, error, version, suite, …);
//! - `complete.json`: the completion marker ([`AgentMarker`]), written
//!   last, through a temporary file and a rename, so that it exists if and
//!   only if everything before it was written and flushed.
//!
//! A directory without the marker belongs to an agent that died or has
//! not finished: [`merge`] reports it as missing and never counts any of
//! its partial files. Everything in [`Stats`] is a sum or a histogram, so
//! the merge of the agents equals the statistics of one run that made all
//! their requests: percentiles come from the added histograms, never from
//! averaged percentiles.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
pub use tlslab_schema::agent::{AgentCounters, AgentMarker, RunFlags, ShardId};
pub use tlslab_schema::load::{AgentSummary, Distributed, MissingAgent};

use crate::model::{
    ClientCpu, CpuUsage, CryptoOp, CryptoPerHandshake, LoadReport, LoadReportBuild,
    SATURATION_THRESHOLD, Window,
};
use crate::record::{EarlyData, HandshakeKind, HandshakeRecord, RequestRecord};
use crate::stats::{KindTotals, PhaseStats, Stats};

/// The agent's request log in its `--out` directory.
pub const CSV_FILE: &str = "requests.csv";
/// The agent's report in its `--out` directory.
pub const REPORT_FILE: &str = "report.json";
/// The agent's histograms (HdrHistogram interval log).
pub const HLOG_FILE: &str = "histograms.hlog";
/// The agent's counters.
pub const COUNTERS_FILE: &str = "counters.json";
/// The completion marker, written last and atomically.
pub const MARKER_FILE: &str = "complete.json";

/// The phases, as tagged in the interval log, in [`Stats`] order.
pub const PHASE_TAGS: [&str; 6] = [
    "connect",
    "handshake_full",
    "handshake_resumed",
    "ttfb",
    "transfer",
    "total",
];

/// Errors reading or writing agent outputs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistributedError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file exists but its content is not what an agent writes.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The agents do not belong to one run (another seed, start time,
    /// target, `-c`, `-n`, …), or one shard was given twice.
    #[error("{0}")]
    Mismatch(String),
    /// No agent directory has a completion marker.
    #[error(
        "no agent output is complete ({0}); each agent writes {MARKER_FILE} last, when its run ended"
    )]
    NothingComplete(String),
}

type Result<T> = std::result::Result<T, DistributedError>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DistributedError + '_ {
    move |source| DistributedError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads an agent file whole, at most
/// [`MAX_JSON_FILE`](tlslab_workload::input::MAX_JSON_FILE) bytes: a
/// larger one is corrupt, not a reason to exhaust memory.
fn read_input(path: &Path) -> Result<Vec<u8>> {
    use tlslab_workload::input::{MAX_JSON_FILE, read_capped};
    read_capped(path, MAX_JSON_FILE).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            corrupt(path, e)
        } else {
            io_err(path)(e)
        }
    })
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> DistributedError {
    DistributedError::Corrupt {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn kind_arr(k: &KindTotals) -> [u64; 4] {
    [k.count, k.bytes_out, k.bytes_in, k.round_trips]
}

fn arr_kind(a: [u64; 4]) -> KindTotals {
    KindTotals {
        count: a[0],
        bytes_out: a[1],
        bytes_in: a[2],
        round_trips: a[3],
        ..KindTotals::default()
    }
}

fn phases(s: &Stats) -> [&PhaseStats; 6] {
    [
        &s.connect,
        &s.handshake_full,
        &s.handshake_resumed,
        &s.ttfb,
        &s.transfer,
        &s.total,
    ]
}

fn phases_mut(s: &mut Stats) -> [&mut PhaseStats; 6] {
    [
        &mut s.connect,
        &mut s.handshake_full,
        &mut s.handshake_resumed,
        &mut s.ttfb,
        &mut s.transfer,
        &mut s.total,
    ]
}

fn counters_of(s: &Stats) -> AgentCounters {
    AgentCounters {
        phase_sum_us: phases(s)
            .iter()
            .map(|p| u64::try_from(p.sum_us()).unwrap_or(u64::MAX))
            .collect(),
        phase_max_us: phases(s).iter().map(|p| p.max_us().unwrap_or(0)).collect(),
        attempted: s.attempted,
        completed: s.completed,
        succeeded: s.succeeded,
        body_bytes: s.body_bytes,
        status: s.status.clone(),
        errors: s.errors.clone(),
        full: kind_arr(&s.full),
        resumed: kind_arr(&s.resumed),
        hrr: s.hrr,
        offered: s.offered,
        by_version: s.by_version.clone(),
        suites: s.suites.clone(),
        groups: s.groups.clone(),
        early_data_sent: s.early_data_sent,
        early_data_accepted: s.early_data_accepted,
        retries: s.retries,
    }
}

/// Reads a request log written by [`crate::CsvLog`] back into records
/// (the `target` column is not kept: it is 0 in every record).
pub fn read_csv_log(path: &Path) -> Result<Vec<RequestRecord>> {
    let mut rd = csv::Reader::from_path(path).map_err(|e| corrupt(path, e))?;
    let header: Vec<String> = rd
        .headers()
        .map_err(|e| corrupt(path, e))?
        .iter()
        .map(String::from)
        .collect();
    if header != crate::CSV_COLUMNS {
        return Err(corrupt(
            path,
            "not a tlslab request log (unexpected header)",
        ));
    }
    let col = |name: &str| {
        crate::CSV_COLUMNS
            .iter()
            .position(|c| *c == name)
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    for (line, row) in rd.records().enumerate() {
        let row = row.map_err(|e| corrupt(path, e))?;
        let bad = |what: &str| corrupt(path, format!("row {}: bad {what}", line + 2));
        let opt = |name: &str| -> Result<Option<u64>> {
            let v = &row[col(name)];
            if v.is_empty() {
                Ok(None)
            } else {
                v.parse().map(Some).map_err(|_| bad(name))
            }
        };
        let num = |name: &str| -> Result<u64> { opt(name)?.ok_or_else(|| bad(name)) };
        let text = |name: &str| row[col(name)].to_string();
        let kind = match &row[col("kind")] {
            "full" => Some(HandshakeKind::Full),
            "resumed" => Some(HandshakeKind::Resumed),
            "none" => None,
            _ => return Err(bad("kind")),
        };
        let handshake = match kind {
            None => None,
            Some(kind) => Some(HandshakeRecord {
                duration_us: num("handshake_us")?,
                kind,
                hrr: num("hrr")? != 0,
                offered: num("offered")? != 0,
                version: text("version"),
                suite: text("suite"),
                group: text("group"),
                bytes_out: num("hs_bytes_out")?,
                bytes_in: num("hs_bytes_in")?,
                round_trips: u32::try_from(num("round_trips")?).map_err(|_| bad("round_trips"))?,
                early_data: match &row[col("early_data")] {
                    "" => EarlyData::NotSent,
                    "accepted" => EarlyData::Accepted,
                    "rejected" => EarlyData::Rejected,
                    _ => return Err(bad("early_data")),
                },
                wire: None,
            }),
        };
        let error = text("error");
        out.push(RequestRecord {
            t_start_us: num("t_start_us")?,
            client: u32::try_from(num("client")?).map_err(|_| bad("client"))?,
            conn: num("conn")?,
            req_on_conn: u32::try_from(num("req_on_conn")?).map_err(|_| bad("req_on_conn"))?,
            target: 0,
            status: opt("status")?
                .map(|s| u16::try_from(s).map_err(|_| bad("status")))
                .transpose()?,
            error: (!error.is_empty()).then_some(error),
            connect_us: opt("connect_us")?,
            handshake,
            ttfb_us: opt("ttfb_us")?,
            transfer_us: opt("transfer_us")?,
            total_us: num("total_us")?,
            body_bytes: num("body_bytes")?,
            retry: num("retry")? != 0,
        });
    }
    Ok(out)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The host name an agent reports: `HOSTNAME`, else `/etc/hostname`.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn write_atomic(dir: &Path, name: &str, body: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    let mut f = fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(body).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    Ok(())
}

/// Completes an agent's `--out` directory after its run: `requests.csv`
/// must already be there (the engine wrote it). Rebuilds the statistics
/// from that log, checks them against `report`, and writes
/// `report.json`, `histograms.hlog`, `counters.json` and, last,
/// `complete.json`.
pub fn write_agent_dir(
    dir: &Path,
    report: &LoadReport,
    shard: ShardId,
    start_at_unix_ms: Option<u64>,
    run_seed: u64,
    run_flags: Option<RunFlags>,
) -> Result<AgentMarker> {
    let csv = dir.join(CSV_FILE);
    let records = read_csv_log(&csv)?;
    let mut stats = Stats::default();
    records.iter().for_each(|r| stats.record(r));
    if stats.attempted != report.requests.attempted || stats.completed != report.requests.completed
    {
        return Err(corrupt(
            &csv,
            format!(
                "holds {} requests ({} completed) but the run reported {} ({}); the log is incomplete",
                stats.attempted,
                stats.completed,
                report.requests.attempted,
                report.requests.completed
            ),
        ));
    }
    write_atomic(dir, REPORT_FILE, report.to_json().as_bytes())?;

    let start = UNIX_EPOCH + Duration::from_millis(report.window.start_unix_ms);
    let mut hlog = Vec::new();
    {
        let mut ser = V2DeflateSerializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment("tlslab load agent histograms: values in microseconds")
            .add_comment(&format!("shard {shard}"))
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(1.0)
            .begin_log_with(&mut hlog, &mut ser)
            .map_err(|e| corrupt(&dir.join(HLOG_FILE), e))?;
        let window = Duration::from_secs_f64(report.window.measured_s.max(0.0));
        for (tag, p) in PHASE_TAGS.iter().zip(phases(&stats)) {
            let tag = Tag::new(tag).ok_or_else(|| corrupt(&dir.join(HLOG_FILE), "bad tag"))?;
            w.write_histogram(p.histogram(), Duration::ZERO, window, Some(tag))
                .map_err(|e| corrupt(&dir.join(HLOG_FILE), format!("{e:?}")))?;
        }
    }
    write_atomic(dir, HLOG_FILE, &hlog)?;
    let counters = serde_json::to_vec_pretty(&counters_of(&stats))
        .map_err(|e| corrupt(&dir.join(COUNTERS_FILE), e))?;
    write_atomic(dir, COUNTERS_FILE, &counters)?;
    let marker = AgentMarker {
        schema_version: 1,
        shard,
        start_at_unix_ms,
        window_start_unix_ms: report.window.start_unix_ms,
        measured_s: report.window.measured_s,
        csv_rows: records.len() as u64,
        host: host_name(),
        run_seed,
        run_flags,
    };
    let body =
        serde_json::to_vec_pretty(&marker).map_err(|e| corrupt(&dir.join(MARKER_FILE), e))?;
    write_atomic(dir, MARKER_FILE, &body)?;
    Ok(marker)
}

/// Reads the tagged histograms of an interval log written by
/// [`write_agent_dir`]; several intervals with one tag are added.
pub fn read_hlog(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>> {
    let bytes = read_input(path)?;
    let mut out: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut de = Deserializer::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let entry = entry.map_err(|e| corrupt(path, format!("{e:?}")))?;
        let LogEntry::Interval(h) = entry else {
            continue;
        };
        let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(h.encoded_histogram())
            .map_err(|e| corrupt(path, e))?;
        let hist: Histogram<u64> = de
            .deserialize(&mut std::io::Cursor::new(raw))
            .map_err(|e| corrupt(path, format!("{e:?}")))?;
        match out.get_mut(&tag) {
            Some(acc) => acc
                .add(&hist)
                .map_err(|e| corrupt(path, format!("{e:?}")))?,
            None => {
                out.insert(tag, hist);
            }
        }
    }
    Ok(out)
}

/// One complete agent output, read back.
#[derive(Clone, Debug)]
pub struct AgentOutput {
    /// Its directory.
    pub dir: PathBuf,
    /// Its completion marker.
    pub marker: AgentMarker,
    /// Its own report.
    pub report: LoadReport,
    /// Its statistics, from `histograms.hlog` and `counters.json`.
    pub stats: Stats,
}

/// Reads a complete agent directory; `Ok(None)` when it has no marker.
pub fn read_agent_dir(dir: &Path) -> Result<Option<AgentOutput>> {
    let marker_path = dir.join(MARKER_FILE);
    if !marker_path.exists() {
        if !dir.is_dir() {
            return Err(corrupt(dir, "no such directory"));
        }
        return Ok(None);
    }
    let read_json = |name: &str| -> Result<serde_json::Value> {
        let p = dir.join(name);
        let bytes = read_input(&p)?;
        serde_json::from_slice(&bytes).map_err(|e| corrupt(&p, e))
    };
    let marker: AgentMarker =
        serde_json::from_value(read_json(MARKER_FILE)?).map_err(|e| corrupt(&marker_path, e))?;
    let report: LoadReport = serde_json::from_value(read_json(REPORT_FILE)?)
        .map_err(|e| corrupt(&dir.join(REPORT_FILE), e))?;
    let cpath = dir.join(COUNTERS_FILE);
    let c: AgentCounters =
        serde_json::from_value(read_json(COUNTERS_FILE)?).map_err(|e| corrupt(&cpath, e))?;
    if c.phase_sum_us.len() != 6 || c.phase_max_us.len() != 6 {
        return Err(corrupt(&cpath, "expected six phases"));
    }
    let hpath = dir.join(HLOG_FILE);
    let mut hists = read_hlog(&hpath)?;
    let mut stats = Stats {
        attempted: c.attempted,
        completed: c.completed,
        succeeded: c.succeeded,
        body_bytes: c.body_bytes,
        status: c.status,
        errors: c.errors,
        full: arr_kind(c.full),
        resumed: arr_kind(c.resumed),
        hrr: c.hrr,
        offered: c.offered,
        by_version: c.by_version,
        suites: c.suites,
        groups: c.groups,
        early_data_sent: c.early_data_sent,
        early_data_accepted: c.early_data_accepted,
        retries: c.retries,
        ..Stats::default()
    };
    for (i, (tag, p)) in PHASE_TAGS.iter().zip(phases_mut(&mut stats)).enumerate() {
        let h = hists
            .remove(*tag)
            .ok_or_else(|| corrupt(&hpath, format!("no histogram tagged {tag}")))?;
        *p = PhaseStats::from_parts(h, u128::from(c.phase_sum_us[i]), c.phase_max_us[i])
            .map_err(|e| corrupt(&hpath, e))?;
    }
    if stats.attempted != report.requests.attempted {
        return Err(corrupt(
            &cpath,
            format!(
                "counts {} requests but {} says {}",
                stats.attempted, REPORT_FILE, report.requests.attempted
            ),
        ));
    }
    Ok(Some(AgentOutput {
        dir: dir.to_path_buf(),
        marker,
        report,
        stats,
    }))
}

/// Merges agent directories into one report in `load`'s schema, with a
/// `distributed` section. Directories without a completion marker, and
/// shard indexes for which no directory was given, are listed as missing;
/// their data is not counted. Agents that are not from one run (see
/// [`merge_with`]) are a [`DistributedError::Mismatch`].
pub fn merge(dirs: &[PathBuf]) -> Result<LoadReport> {
    merge_with(dirs, false)
}

/// Like [`merge`]. Agents of one run share the run's seed, `--start-at`,
/// `-c`, `-n` and `--rate` (before sharding), its targets, requests per
/// connection, reuse, resumption, versions, workload, think time, retries,
/// duration, warm-up, timeout and early data, and their windows overlap.
/// Any difference is a [`DistributedError::Mismatch`] naming it, unless
/// `force`: then the agents are merged and each difference is a warning.
pub fn merge_with(dirs: &[PathBuf], force: bool) -> Result<LoadReport> {
    let mut agents = Vec::new();
    let mut missing = Vec::new();
    for d in dirs {
        match read_agent_dir(d)? {
            Some(a) => agents.push(a),
            None => missing.push(MissingAgent {
                shard: "?".into(),
                dir: Some(d.display().to_string()),
                reason: format!(
                    "no {MARKER_FILE}: the agent died mid-run or has not finished; its partial files are not counted"
                ),
            }),
        }
    }
    if agents.is_empty() {
        return Err(DistributedError::NothingComplete(
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    agents.sort_by_key(|a| a.marker.shard.index);
    let n = agents[0].marker.shard.count;
    for w in agents.windows(2) {
        if w[0].marker.shard == w[1].marker.shard {
            return Err(DistributedError::Mismatch(format!(
                "{} and {} both hold shard {}; give each agent's directory once",
                w[0].dir.display(),
                w[1].dir.display(),
                w[0].marker.shard
            )));
        }
    }
    if let Some(a) = agents.iter().find(|a| a.marker.shard.count != n) {
        return Err(DistributedError::Mismatch(format!(
            "{} is shard {} but {} is shard {}: they are not from one run",
            a.dir.display(),
            a.marker.shard,
            agents[0].dir.display(),
            agents[0].marker.shard
        )));
    }
    let differences = run_differences(&agents);
    if !differences.is_empty() && !force {
        return Err(DistributedError::Mismatch(format!(
            "the agents are not from one run: {}; merge the outputs of one run (every agent given \
             the same flags and --start-at), or add --force to merge them anyway",
            differences.join("; ")
        )));
    }
    let present: Vec<u32> = agents.iter().map(|a| a.marker.shard.index).collect();
    let mut absent: Vec<u32> = (1..=n).filter(|i| !present.contains(i)).collect();
    // A marker-less directory stands for one of the absent indexes; name
    // them by index when it is unambiguous.
    if missing.len() == 1 && absent.len() == 1 {
        missing[0].shard = format!("{}/{n}", absent[0]);
        absent.clear();
    }
    let unnamed = missing.len();
    for i in absent.into_iter().skip(unnamed) {
        missing.push(MissingAgent {
            shard: format!("{i}/{n}"),
            dir: None,
            reason: "no directory of this shard was given".into(),
        });
    }

    let mut stats = Stats::default();
    agents.iter().for_each(|a| stats.merge(&a.stats));
    let t0 = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms)
        .min()
        .unwrap_or(0);
    let t_last = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms)
        .max()
        .unwrap_or(0);
    let end_ms = agents
        .iter()
        .map(|a| a.marker.window_start_unix_ms as f64 + a.marker.measured_s * 1e3)
        .fold(0.0f64, f64::max);
    let first = &agents[0].report;
    let mut config = first.config.clone();
    config.clients = agents.iter().map(|a| a.report.config.clients).sum();
    config.threads = agents.iter().map(|a| a.report.config.threads).sum();
    config.seed = agents[0].marker.run_seed;
    config.requests = agents
        .iter()
        .map(|a| a.report.config.requests)
        .sum::<Option<u64>>();
    let window = Window {
        start_unix_ms: t0,
        measured_s: ((end_ms - t0 as f64) / 1e3).max(0.0),
        // The contract value; the merged window (earliest agent's start to
        // the latest agent's end) is documented with `tlslab merge`.
        observed: "client-observed".into(),
    };
    let cpu = CpuUsage {
        user_s: agents.iter().map(|a| a.report.client_cpu.user_s).sum(),
        sys_s: agents.iter().map(|a| a.report.client_cpu.sys_s).sum(),
        capacity: agents.iter().map(|a| a.report.client_cpu.capacity).sum(),
    };
    let unfinished = agents.iter().map(|a| a.report.requests.unfinished).sum();
    let mut report = LoadReport::build(config, window, &stats, unfinished, cpu);

    // CPU: busy over each agent's own window and capacity.
    let cpu_capacity_s: f64 = agents
        .iter()
        .map(|a| a.report.window.measured_s * a.report.client_cpu.capacity as f64)
        .sum();
    let saturated_agents: Vec<String> = agents
        .iter()
        .filter(|a| {
            a.report.client_cpu.saturated
                || a.report.client_cpu.busy_fraction >= SATURATION_THRESHOLD
        })
        .map(|a| a.marker.shard.to_string())
        .collect();
    let busy = if cpu_capacity_s > 0.0 {
        (cpu.user_s + cpu.sys_s) / cpu_capacity_s
    } else {
        0.0
    };
    report.client_cpu = ClientCpu {
        busy_fraction: busy,
        saturated: !saturated_agents.is_empty(),
        warning: (!saturated_agents.is_empty()).then(|| {
            format!(
                "agent(s) {} were saturated (client CPU ≥ {:.0}% busy): the merged result measures those clients, \
                 not the server; add agents or give them more CPUs",
                saturated_agents.join(", "),
                SATURATION_THRESHOLD * 100.0
            )
        }),
        ..report.client_cpu
    };

    report.open_loop = merge_open_loop(&agents);
    report.ecommerce = agents
        .iter()
        .try_fold(crate::model::Ecommerce::default(), |mut acc, a| {
            let e = a.report.ecommerce.as_ref()?;
            acc.sessions += e.sessions;
            acc.new_customers += e.new_customers;
            acc.returning_customers += e.returning_customers;
            acc.pages += e.pages;
            Some(acc)
        });
    report.replay = merge_replay(&agents, report.reuse.achieved);
    report.crypto = merge_crypto(&agents);
    report.backoff = agents
        .iter()
        .filter_map(|a| a.report.backoff.as_ref())
        .fold(None, |acc: Option<crate::model::Backoff>, b| {
            let mut acc = acc.unwrap_or_else(|| crate::model::Backoff {
                base_ms: b.base_ms,
                ..Default::default()
            });
            acc.waits += b.waits;
            acc.waited_s += b.waited_s;
            Some(acc)
        });
    report.ablation = first.ablation.clone();
    report.ablation_hint = agents.iter().find_map(|a| a.report.ablation_hint.clone());

    let mut warnings = Vec::new();
    for m in &missing {
        warnings.push(format!(
            "agent {} is MISSING ({}){}: the merge covers {} of {n} agents and is NOT the whole run",
            m.shard,
            m.reason,
            m.dir
                .as_deref()
                .map(|d| format!(" in {d}"))
                .unwrap_or_default(),
            agents.len()
        ));
    }
    if let Some(w) = &report.client_cpu.warning {
        warnings.push(w.clone());
    }
    for d in differences {
        warnings.push(format!(
            "--force: merged although {d}; the config shown is the first agent's"
        ));
    }
    let start_at = agents.iter().find_map(|a| a.marker.start_at_unix_ms);
    report.distributed = Some(Distributed {
        agents_expected: n,
        agents_merged: agents.len() as u32,
        agents: agents
            .iter()
            .map(|a| AgentSummary {
                shard: a.marker.shard.to_string(),
                dir: a.dir.display().to_string(),
                host: a.marker.host.clone(),
                window_start_unix_ms: a.marker.window_start_unix_ms,
                start_offset_ms: a.marker.window_start_unix_ms as i64 - t0 as i64,
                measured_s: a.marker.measured_s,
                attempted: a.stats.attempted,
                completed: a.stats.completed,
                busy_fraction: a.report.client_cpu.busy_fraction,
                saturated: a.report.client_cpu.saturated
                    || a.report.client_cpu.busy_fraction >= SATURATION_THRESHOLD,
            })
            .collect(),
        missing,
        start_skew_ms: t_last - t0,
        start_at_unix_ms: start_at,
        saturated_agents,
        warnings,
    });
    Ok(report)
}

/// Each way the agents differ from the first (lowest shard): what differs,
/// which agents, and both values. Empty when they are from one run.
fn run_differences(agents: &[AgentOutput]) -> Vec<String> {
    let Some(first) = agents.first() else {
        return Vec::new();
    };
    let name = |a: &AgentOutput| format!("agent {} ({})", a.marker.shard, a.dir.display());
    let mut out = Vec::new();
    let mut check = |what: &str, f: &dyn Fn(&AgentOutput) -> Option<String>| {
        let Some(want) = f(first) else { return };
        if let Some((a, got)) = agents[1..]
            .iter()
            .find_map(|a| f(a).filter(|g| *g != want).map(|g| (a, g)))
        {
            out.push(format!(
                "{} has {what} {} but {} has {}",
                name(a),
                shorten(&got),
                name(first),
                shorten(&want)
            ));
        }
    };
    fn opt(v: Option<String>) -> String {
        v.unwrap_or_else(|| "none".into())
    }
    check("seed", &|a| Some(a.marker.run_seed.to_string()));
    check("--start-at (Unix ms)", &|a| {
        Some(opt(a.marker.start_at_unix_ms.map(|t| t.to_string())))
    });
    check("-c", &|a| a.marker.run_flags.map(|f| f.clients.to_string()));
    check("-n", &|a| {
        a.marker
            .run_flags
            .map(|f| opt(f.requests.map(|n| n.to_string())))
    });
    check("--rate", &|a| {
        a.marker
            .run_flags
            .map(|f| opt(f.rate.map(|r| r.to_string())))
    });
    let config = |f: fn(&crate::model::ConfigEcho) -> String| {
        move |a: &AgentOutput| Some(f(&a.report.config))
    };
    check("targets", &config(targets_key));
    check(
        "requests per connection",
        &config(|c| c.requests_per_conn.to_string()),
    );
    check("reuse", &config(|c| c.reuse.to_string()));
    check("resumption", &config(|c| c.resume_with.clone()));
    check("TLS versions", &config(|c| c.versions.join(",")));
    check("workload", &config(|c| c.workload.clone()));
    check("think time", &config(|c| c.think_time.clone()));
    check(
        "retry on failure",
        &config(|c| c.retry_on_failure.to_string()),
    );
    check(
        "duration (s)",
        &config(|c| opt(c.duration_s.map(|d| d.to_string()))),
    );
    check("warm-up (s)", &config(|c| c.warmup_s.to_string()));
    check(
        "timeout (s)",
        &config(|c| opt(c.timeout_s.map(|d| d.to_string()))),
    );
    check("early data", &config(|c| c.early_data.to_string()));
    // Agents of one run measure at the same time: windows that do not
    // overlap (beyond a second of clock offset between hosts) belong to
    // runs made one after another.
    let end = |a: &AgentOutput| {
        a.marker.window_start_unix_ms + (a.marker.measured_s.max(0.0) * 1e3) as u64
    };
    if let (Some(late), Some(early)) = (
        agents.iter().max_by_key(|a| a.marker.window_start_unix_ms),
        agents.iter().min_by_key(|a| end(a)),
    ) && late.marker.window_start_unix_ms > end(early) + WINDOW_SLACK_MS
    {
        out.push(format!(
            "{}'s window starts {} ms after {}'s ended (their windows do not overlap)",
            name(late),
            late.marker.window_start_unix_ms - end(early),
            name(early)
        ));
    }
    out
}

/// The targets agents of one run share: the URLs themselves for the urls
/// workload; for a workload that draws its paths (specweb96, ecommerce,
/// replay, whose shards replay different paths) the servers they went to.
fn targets_key(c: &crate::model::ConfigEcho) -> String {
    if c.workload.is_empty() || c.workload == "urls" {
        return c.targets.join(" ");
    }
    let mut origins: Vec<&str> = c
        .targets
        .iter()
        .map(|t| {
            let after = t.find("://").map_or(0, |i| i + 3);
            t.get(after..)
                .and_then(|rest| rest.find('/'))
                .map_or(t.as_str(), |end| &t[..after + end])
        })
        .collect();
    origins.sort_unstable();
    origins.dedup();
    origins.join(" ")
}

/// A value cut to 120 characters for a message.
fn shorten(v: &str) -> String {
    match v.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &v[..i]),
        None => v.to_string(),
    }
}

/// How far apart (clock offset between hosts) two windows of one run may
/// be and still count as overlapping, ms.
const WINDOW_SLACK_MS: u64 = 1000;

fn merge_open_loop(agents: &[AgentOutput]) -> Option<crate::model::OpenLoop> {
    let mut acc = agents.first()?.report.open_loop.clone()?;
    acc.rate = 0.0;
    acc.max_in_flight = 0;
    acc.scheduled = 0;
    acc.late = 0;
    acc.dropped = 0;
    for a in agents {
        let o = a.report.open_loop.as_ref()?;
        acc.rate += o.rate;
        acc.max_in_flight += o.max_in_flight;
        acc.scheduled += o.scheduled;
        acc.late += o.late;
        acc.dropped += o.dropped;
    }
    Some(acc)
}

fn merge_replay(agents: &[AgentOutput], achieved: f64) -> Option<crate::model::Replay> {
    // The log is parsed and filtered by every agent (skipped and filtered
    // counts are the whole log's); its browsers are split between them.
    let mut acc = agents.first()?.report.replay.clone()?;
    acc.log_requests = 0;
    acc.log_sessions = 0;
    acc.sessions_replayed = 0;
    acc.requests_replayed = 0;
    for a in agents {
        let r = a.report.replay.as_ref()?;
        acc.log_requests += r.log_requests;
        acc.log_sessions += r.log_sessions;
        acc.sessions_replayed += r.sessions_replayed;
        acc.requests_replayed += r.requests_replayed;
    }
    acc.implied_resumption = if acc.log_requests > 0 {
        (acc.log_requests - acc.log_sessions.min(acc.log_requests)) as f64 / acc.log_requests as f64
    } else {
        0.0
    };
    acc.achieved_resumption = achieved;
    Some(acc)
}

fn merge_crypto(agents: &[AgentOutput]) -> Option<CryptoPerHandshake> {
    let mut totals: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut handshakes = 0u64;
    for a in agents {
        let c = a.report.crypto.as_ref()?;
        handshakes += c.handshakes;
        for op in &c.ops {
            let e = totals.entry(op.op.clone()).or_default();
            e.0 += op.calls;
            // Back to nanoseconds: us_per_handshake × handshakes × 1000.
            e.1 += (op.us_per_handshake * c.handshakes as f64 * 1e3).round() as u64;
        }
    }
    let ops: Vec<CryptoOp> = CryptoPerHandshake::from_totals(
        handshakes,
        totals.iter().map(|(k, &(c, ns))| (k.as_str(), c, ns)),
    )?
    .ops;
    Some(CryptoPerHandshake { handshakes, ops })
}

/// The current time as Unix ms.
pub fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigEcho;
    use crate::stats::tests::record;
    use crate::{CsvLog, HandshakeKind};

    /// The `--start-at` of the agents' run.
    const START_AT_MS: u64 = 4_000;

    fn recs(range: std::ops::Range<u64>) -> Vec<RequestRecord> {
        range
            .map(|i| {
                let kind = match i % 3 {
                    0 => Some(HandshakeKind::Full),
                    1 => Some(HandshakeKind::Resumed),
                    _ => None,
                };
                let mut r = record((i % 5) as u32, i, kind);
                r.total_us = 100 + i * i % 50_000;
                r
            })
            .collect()
    }

    /// Writes a complete agent directory holding `records`, of a run with
    /// seed 7, `-c 6` and one start time.
    fn agent(dir: &Path, shard: ShardId, records: &[RequestRecord], start_ms: u64) -> Stats {
        agent_of_run(dir, shard, records, start_ms, 7, 6)
    }

    /// Like [`agent`], of the run with `seed` and `-c clients`.
    fn agent_of_run(
        dir: &Path,
        shard: ShardId,
        records: &[RequestRecord],
        start_ms: u64,
        seed: u64,
        clients: u64,
    ) -> Stats {
        fs::create_dir_all(dir).unwrap();
        let (log, sink) = CsvLog::create(&dir.join(CSV_FILE), vec!["https://h/".into()]).unwrap();
        let mut stats = Stats::default();
        for r in records {
            stats.record(r);
            assert!(sink.record(r.clone()));
        }
        drop(sink);
        log.finish().unwrap();
        let config = ConfigEcho {
            clients: 2,
            reuse: 0.5,
            ..Default::default()
        };
        let window = Window {
            start_unix_ms: start_ms,
            measured_s: 2.0,
            observed: "client-observed".into(),
        };
        let cpu = CpuUsage {
            user_s: 0.1,
            sys_s: 0.1,
            capacity: 1,
        };
        let report = LoadReport::build(config, window, &stats, 0, cpu);
        write_agent_dir(
            dir,
            &report,
            shard,
            Some(START_AT_MS),
            seed,
            Some(RunFlags {
                clients,
                requests: None,
                rate: None,
            }),
        )
        .unwrap();
        stats
    }

    #[test]
    fn agent_directory_round_trips_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("a");
        let records = recs(0..500);
        let stats = agent(&d, ShardId { index: 1, count: 1 }, &records, 1000);
        let back = read_agent_dir(&d).unwrap().expect("complete");
        assert_eq!(back.marker.csv_rows, 500);
        assert_eq!(back.stats.attempted, stats.attempted);
        assert_eq!(back.stats.full, stats.full);
        assert_eq!(back.stats.by_version, stats.by_version);
        for (a, b) in phases(&back.stats).iter().zip(phases(&stats)) {
            assert_eq!(a.count(), b.count());
            assert_eq!(a.mean_us(), b.mean_us());
            assert_eq!(a.max_us(), b.max_us());
            for q in [0.5, 0.9, 0.99, 0.999] {
                assert_eq!(a.quantile_us(q), b.quantile_us(q));
            }
        }
        // The log is an interval log HdrHistogram's own reader accepts.
        let text = fs::read_to_string(d.join(HLOG_FILE)).unwrap();
        assert!(text.contains("#[StartTime: 1.000"), "{text}");
        assert!(text.contains("Tag=total,0.000,2.000,"), "{text}");
    }

    #[test]
    fn merge_of_agents_equals_one_run_and_names_the_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let all = recs(0..900);
        let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("a{i}"))).collect();
        let mut whole = Stats::default();
        all.iter().for_each(|r| whole.record(r));
        for (i, part) in all.chunks(300).enumerate() {
            agent(
                &dirs[i],
                ShardId {
                    index: i as u32 + 1,
                    count: 3,
                },
                part,
                5_000 + i as u64 * 3,
            );
        }
        let m = merge(&dirs).unwrap();
        assert_eq!(m.requests.attempted, 900);
        assert_eq!(m.reuse.resumed_count, whole.resumed.count);
        assert_eq!(m.latency.total.p99_us, whole.total.quantile_us(0.99));
        assert_eq!(m.latency.total.p50_us, whole.total.quantile_us(0.5));
        assert_eq!(m.latency.total.mean_us, whole.total.mean_us());
        assert_eq!(m.config.clients, 6);
        assert_eq!(m.config.seed, 7);
        let d = m.distributed.as_ref().unwrap();
        assert_eq!((d.agents_merged, d.start_skew_ms), (3, 6));
        assert!(d.missing.is_empty() && d.warnings.is_empty(), "{d:?}");

        // Agent 2 dies: its marker is gone, its partial files are ignored.
        fs::remove_file(dirs[1].join(MARKER_FILE)).unwrap();
        let m = merge(&dirs).unwrap();
        assert_eq!(m.requests.attempted, 600);
        let d = m.distributed.unwrap();
        assert_eq!(d.missing.len(), 1);
        assert_eq!(d.missing[0].shard, "2/3");
        assert!(d.warnings[0].contains("MISSING"), "{:?}", d.warnings);

        // Only agent 1 given: 2/3 and 3/3 are missing.
        let m = merge(&dirs[..1]).unwrap();
        let shards: Vec<_> = m
            .distributed
            .unwrap()
            .missing
            .into_iter()
            .map(|m| m.shard)
            .collect();
        assert_eq!(shards, ["2/3", "3/3"]);

        // The same shard twice is an error, not a double count.
        let e = merge(&[dirs[0].clone(), dirs[0].clone()]).unwrap_err();
        assert!(e.to_string().contains("both hold shard 1/3"), "{e}");
        // Nothing complete.
        let e = merge(&dirs[1..2]).unwrap_err();
        assert!(e.to_string().contains("no agent output is complete"), "{e}");
    }

    // Issue 20: merge combined agents of different runs silently, and a
    // different target, -c or -n was only a WARNING with exit 0.
    #[test]
    fn agents_of_different_runs_are_refused_unless_forced() {
        let tmp = tempfile::tempdir().unwrap();
        let shard = |index| ShardId { index, count: 2 };
        let d = |name: &str| tmp.path().join(name);
        agent(&d("a1"), shard(1), &recs(0..10), 5_000);
        agent(&d("a2"), shard(2), &recs(0..10), 5_010);
        agent_of_run(&d("seed"), shard(2), &recs(0..10), 5_010, 8, 6);
        agent_of_run(&d("clients"), shard(2), &recs(0..10), 5_010, 7, 12);
        // Same seed and flags, but measured a minute later.
        agent(&d("later"), shard(2), &recs(0..10), 65_000);
        assert!(merge(&[d("a1"), d("a2")]).is_ok());
        for (other, want) in [
            ("seed", "has seed 8 but agent 1/2"),
            ("clients", "has -c 12 but agent 1/2"),
            ("later", "do not overlap"),
        ] {
            let dirs = [d("a1"), d(other)];
            let e = merge(&dirs).unwrap_err();
            assert!(matches!(e, DistributedError::Mismatch(_)), "{e}");
            let msg = e.to_string();
            assert!(msg.contains(want) && msg.contains("--force"), "{msg}");
            let m = merge_with(&dirs, true).unwrap();
            assert_eq!(m.requests.attempted, 20);
            let w = m.distributed.unwrap().warnings;
            assert!(w.iter().any(|w| w.contains(want)), "{w:?}");
        }
        // A different target, from the agent's report.
        let p = d("a2").join(REPORT_FILE);
        let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        r.config.targets = vec!["https://other/".into()];
        fs::write(&p, r.to_json()).unwrap();
        let e = merge(&[d("a1"), d("a2")]).unwrap_err();
        assert!(e.to_string().contains("has targets https://other/"), "{e}");
        // A workload that draws paths: the shards' paths differ, the server not.
        for (dir, path) in [("a1", "/bytes/1"), ("a2", "/bytes/2")] {
            let p = d(dir).join(REPORT_FILE);
            let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
            r.config.workload = "replay".into();
            r.config.targets = vec![format!("https://h:1{path}")];
            fs::write(&p, r.to_json()).unwrap();
        }
        assert!(merge(&[d("a1"), d("a2")]).is_ok());
    }

    #[test]
    fn saturated_agents_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (1..=2).map(|i| tmp.path().join(format!("a{i}"))).collect();
        for (i, d) in dirs.iter().enumerate() {
            agent(
                d,
                ShardId {
                    index: i as u32 + 1,
                    count: 2,
                },
                &recs(0..10),
                0,
            );
        }
        // Mark agent 2 saturated in its report.
        let p = dirs[1].join(REPORT_FILE);
        let mut r: LoadReport = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        r.client_cpu.busy_fraction = 0.97;
        r.client_cpu.saturated = true;
        fs::write(&p, r.to_json()).unwrap();
        let m = merge(&dirs).unwrap();
        assert!(m.client_cpu.saturated);
        let w = m.client_cpu.warning.unwrap();
        assert!(w.contains("agent(s) 2/2 were saturated"), "{w}");
        assert_eq!(m.distributed.unwrap().saturated_agents, ["2/2"]);
    }
}
