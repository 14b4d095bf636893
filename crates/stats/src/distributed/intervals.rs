//! `tlslab merge --hdr-log`: the agents' per-interval HdrHistogram logs
//! (`intervals.hlog`, written by `load --out`) merged into one. Intervals
//! are placed on the wall clock (each log's `BaseTime` plus the interval's
//! start) and numbered from the earliest log's `StartTime` in units of the
//! interval length; histograms of one series and number are added.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

use super::error::{Result, corrupt, io_err, read_input};

/// An agent's per-interval log in its `--out` directory.
pub const INTERVALS_FILE: &str = "intervals.hlog";

/// One interval of one log, on the wall clock.
struct Read {
    tag: String,
    start: Duration,
    length: Duration,
    hist: Histogram<u64>,
}

fn read_log(path: &Path) -> Result<(Option<Duration>, Vec<Read>)> {
    let bytes = read_input(path)?;
    let mut de = Deserializer::new();
    let (mut start_time, mut base) = (None, Duration::ZERO);
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(&bytes) {
        match entry.map_err(|e| corrupt(path, format!("{e:?}")))? {
            LogEntry::StartTime(t) => start_time = Some(t),
            LogEntry::BaseTime(t) => base = t,
            LogEntry::Interval(h) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.encoded_histogram())
                    .map_err(|e| corrupt(path, e))?;
                let hist: Histogram<u64> = de
                    .deserialize(&mut std::io::Cursor::new(raw))
                    .map_err(|e| corrupt(path, format!("{e:?}")))?;
                out.push(Read {
                    tag: h.tag().map(|t| t.as_str().to_string()).unwrap_or_default(),
                    start: base + h.start_timestamp(),
                    length: h.duration(),
                    hist,
                });
            }
        }
    }
    Ok((start_time, out))
}

/// What [`merge_interval_logs`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedIntervals {
    /// The logs read.
    pub logs: usize,
    /// Interval lines written.
    pub lines: usize,
}

/// Merges the interval logs `inputs` into `out`.
pub fn merge_interval_logs(inputs: &[PathBuf], out: &Path) -> Result<MergedIntervals> {
    let mut all = Vec::new();
    let mut t0: Option<Duration> = None;
    for p in inputs {
        let (start, reads) = read_log(p)?;
        let first = start.or_else(|| reads.iter().map(|r| r.start).min());
        t0 = match (t0, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        all.extend(reads);
    }
    let t0 = t0.unwrap_or_default();
    let length = all
        .iter()
        .map(|r| r.length)
        .filter(|l| !l.is_zero())
        .max()
        .unwrap_or(Duration::from_secs(1));
    let mut merged: BTreeMap<(u64, String), (Duration, Histogram<u64>)> = BTreeMap::new();
    for r in all {
        let k = (r.start.saturating_sub(t0).as_secs_f64() / length.as_secs_f64()).round() as u64;
        match merged.get_mut(&(k, r.tag.clone())) {
            Some((len, h)) => {
                *len = (*len).max(r.length);
                h.add(&r.hist).map_err(|e| corrupt(out, format!("{e:?}")))?;
            }
            None => {
                merged.insert((k, r.tag), (r.length, r.hist));
            }
        }
    }
    let file = File::create(out).map_err(io_err(out))?;
    let mut w = BufWriter::new(file);
    let mut ser = V2DeflateSerializer::new();
    let wall = UNIX_EPOCH + t0;
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "tlslab merge: {} agents' interval histograms, values in microseconds",
            inputs.len()
        ))
        .with_start_time(wall)
        .with_base_time(wall)
        .with_max_value_divisor(1.0)
        .begin_log_with(&mut w, &mut ser)
        .map_err(io_err(out))?;
    for ((k, tag), (len, h)) in &merged {
        let start = length.saturating_mul(u32::try_from(*k).unwrap_or(u32::MAX));
        log.write_histogram(h, start, *len, Tag::new(tag))
            .map_err(|e| corrupt(out, e))?;
    }
    drop(log);
    w.flush().map_err(io_err(out))?;
    Ok(MergedIntervals {
        logs: inputs.len(),
        lines: merged.len(),
    })
}
