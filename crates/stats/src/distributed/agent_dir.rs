//! An agent's `--out` directory: writing it, and reading it back into
//! exact [`Stats`].

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
use tlslab_schema::agent::{AgentCounters, AgentMarker, RunFlags, ShardId};

use crate::model::LoadReport;
use crate::record::{
    EarlyData, HandshakeKind, HandshakeRecord, HandshakeTcp, HandshakeWire, RequestRecord,
};
use crate::stats::{PhaseStats, Stats};

use super::error::{
    COUNTERS_FILE, CSV_FILE, HLOG_FILE, MARKER_FILE, PHASE_TAGS, REPORT_FILE, Result, corrupt,
    io_err, read_input,
};

pub(super) fn phases(s: &Stats) -> [&PhaseStats; 6] {
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
        counts: s.counts.clone(),
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
    // Layout 1 ended before the wire columns; its rows read without them.
    let layout1 = &crate::CSV_COLUMNS[..crate::CSV_COLUMNS.len() - crate::WIRE_COLUMNS];
    if header != crate::CSV_COLUMNS && header != layout1 {
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
            let v = row.get(col(name)).unwrap_or("");
            if v.is_empty() {
                Ok(None)
            } else {
                v.parse().map(Some).map_err(|_| bad(name))
            }
        };
        let num = |name: &str| -> Result<u64> { opt(name)?.ok_or_else(|| bad(name)) };
        let text = |name: &str| row.get(col(name)).unwrap_or("").to_string();
        let small = |name: &str| -> Result<Option<u32>> {
            opt(name)?
                .map(|v| u32::try_from(v).map_err(|_| bad(name)))
                .transpose()
        };
        let tcp = match small("tcp_data_segs_in")? {
            None => None,
            Some(data_segs_in) => Some(HandshakeTcp {
                data_segs_in,
                data_segs_out: small("tcp_data_segs_out")?.unwrap_or(0),
                rcv_mss: small("tcp_rcv_mss")?.unwrap_or(0),
                total_retrans: small("tcp_total_retrans")?.unwrap_or(0),
            }),
        };
        let wire = match small("hs_records_out")? {
            None => None,
            Some(records_out) => Some(HandshakeWire {
                records_out,
                records_in: small("hs_records_in")?.unwrap_or(0),
                cert_bytes: small("cert_bytes")?,
                cert_compressed_bytes: small("cert_compressed_bytes")?,
                cert_compression: Some(text("cert_compression")).filter(|c| !c.is_empty()),
                tcp,
            }),
        };
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
                wire,
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
    if stats.counts.attempted != report.requests.attempted
        || stats.counts.completed != report.requests.completed
    {
        return Err(corrupt(
            &csv,
            format!(
                "holds {} requests ({} completed) but the run reported {} ({}); the log is incomplete",
                stats.counts.attempted,
                stats.counts.completed,
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
        schema_version: 2,
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
        counts: c.counts,
        ..Stats::default()
    };
    for (i, (tag, p)) in PHASE_TAGS.iter().zip(phases_mut(&mut stats)).enumerate() {
        let h = hists
            .remove(*tag)
            .ok_or_else(|| corrupt(&hpath, format!("no histogram tagged {tag}")))?;
        *p = PhaseStats::from_parts(h, u128::from(c.phase_sum_us[i]), c.phase_max_us[i])
            .map_err(|e| corrupt(&hpath, e))?;
    }
    if stats.counts.attempted != report.requests.attempted {
        return Err(corrupt(
            &cpath,
            format!(
                "counts {} requests but {} says {}",
                stats.counts.attempted, REPORT_FILE, report.requests.attempted
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

/// The current time as Unix ms.
pub fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}
