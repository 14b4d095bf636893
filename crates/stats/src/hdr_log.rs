//! `load --hdr-log`: per-interval latency histograms in the standard
//! HdrHistogram interval log format (V2 compressed, base64, with the
//! `#[StartTime]` and `#[BaseTime]` headers), one line per series and
//! interval, tagged `Tag=total`, `Tag=handshake` and `Tag=ttfb`. Python's
//! `hdrh`, HdrHistogram's `HistogramLogProcessor` and HdrHistogram
//! plotters read it.
//!
//! Values are microseconds, in histograms of the bounds and precision of
//! [`PhaseStats`](crate::PhaseStats) (1 µs to 1 h, 3 significant digits), so
//! the intervals of a run added together give the percentiles of the
//! report exactly. A request is counted in the interval in which it was
//! recorded (it finished); an interval's line is written when the first
//! request of a later interval arrives, and the last one by
//! [`HdrIntervalLog::finish`]. Intervals in which nothing finished are left
//! out.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use parking_lot::Mutex;

use crate::csv_log::{Error, Result};
use crate::record::RequestRecord;

/// The largest value a latency histogram holds (here and in the load's
/// statistics): one hour in microseconds. Larger values are recorded as
/// one hour.
pub const MAX_US: u64 = 3_600_000_000;

/// The series' tags, in the order of each interval's lines.
pub const SERIES: [&str; 3] = ["total", "handshake", "ttfb"];

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// A run's interval log, shared by the threads that record into it.
#[derive(Debug)]
pub struct HdrIntervalLog {
    path: PathBuf,
    start: Instant,
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    out: BufWriter<File>,
    /// The interval the histograms hold.
    index: u64,
    /// One histogram per [`SERIES`].
    hists: [Histogram<u64>; 3],
    /// The first write error; nothing is written after it.
    failed: Option<String>,
}

impl HdrIntervalLog {
    /// Creates (or truncates) `path` and writes the headers. Interval 0
    /// starts at `start`, which is `start_wall` on the wall clock (the
    /// `StartTime` and `BaseTime` headers; interval timestamps are seconds
    /// since then).
    pub fn create(
        path: &Path,
        interval: Duration,
        start: Instant,
        start_wall: SystemTime,
    ) -> Result<HdrIntervalLog> {
        let err = |problem: String| Error::HdrLog {
            path: path.display().to_string(),
            problem,
        };
        if interval.is_zero() {
            return Err(err(
                "the interval is zero; give --hdr-interval of at least 1ms".into(),
            ));
        }
        let file = File::create(path).map_err(|e| err(e.to_string()))?;
        let mut out = BufWriter::new(file);
        let mut ser = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment("tlslab load interval histograms: values in microseconds")
            .add_comment(&format!(
                "series: {} (Tag=...); interval {} ms",
                SERIES.join(", "),
                interval.as_millis()
            ))
            .with_start_time(start_wall)
            .with_base_time(start_wall)
            .with_max_value_divisor(1.0)
            .begin_log_with(&mut out, &mut ser)
            .map_err(|e| err(e.to_string()))?;
        writeln!(
            out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )
        .and_then(|()| out.flush())
        .map_err(|e| err(e.to_string()))?;
        Ok(HdrIntervalLog {
            path: path.to_path_buf(),
            start,
            interval,
            state: Mutex::new(State {
                out,
                index: 0,
                hists: [histogram(), histogram(), histogram()],
                failed: None,
            }),
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `r` in the interval of now.
    pub fn record(&self, r: &RequestRecord) {
        self.record_at(r, Instant::now());
    }

    /// Records `r` in the interval of `at` (a request that arrives after
    /// a later interval was opened is counted in that one).
    pub fn record_at(&self, r: &RequestRecord, at: Instant) {
        let k = (at.saturating_duration_since(self.start).as_nanos()
            / self.interval.as_nanos().max(1)) as u64;
        let mut s = self.state.lock();
        if k > s.index {
            let begin = self.interval_start(s.index);
            s.write_interval(begin, begin + self.interval);
            s.index = k;
        }
        if r.completed() {
            s.hists[0].saturating_record(r.total_us.clamp(1, MAX_US));
        }
        if let Some(h) = &r.handshake {
            s.hists[1].saturating_record(h.duration_us.clamp(1, MAX_US));
        }
        if let (Some(_), Some(t)) = (r.status, r.ttfb_us) {
            s.hists[2].saturating_record(t.clamp(1, MAX_US));
        }
    }

    fn interval_start(&self, index: u64) -> Duration {
        self.interval
            .saturating_mul(u32::try_from(index).unwrap_or(u32::MAX))
    }

    /// Writes the last interval (cut at now) and flushes the file.
    pub fn finish(&self) -> Result<()> {
        let mut s = self.state.lock();
        let begin = self.interval_start(s.index);
        let now = self.start.elapsed().max(begin);
        let end = now.min(begin + self.interval);
        s.write_interval(begin, end);
        if s.failed.is_none()
            && let Err(e) = s.out.flush()
        {
            s.failed = Some(e.to_string());
        }
        match s.failed.take() {
            None => Ok(()),
            Some(problem) => Err(Error::HdrLog {
                path: self.path.display().to_string(),
                problem,
            }),
        }
    }
}

impl State {
    /// Writes the non-empty histograms as the interval `[begin, end)` and
    /// clears them.
    fn write_interval(&mut self, begin: Duration, end: Duration) {
        if self.hists.iter().all(|h| h.is_empty()) {
            return;
        }
        if self.failed.is_none() {
            let mut ser = V2DeflateSerializer::new();
            let out = &mut self.out;
            let written = IntervalLogWriterBuilder::new()
                .begin_log_with(out, &mut ser)
                .map_err(|e| e.to_string())
                .and_then(|mut w| {
                    for (tag, h) in SERIES.iter().zip(&self.hists) {
                        w.write_histogram(h, begin, end.saturating_sub(begin), Tag::new(tag))
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
                .and_then(|()| self.out.flush().map_err(|e| e.to_string()));
            if let Err(e) = written {
                self.failed = Some(e);
            }
        }
        for h in &mut self.hists {
            h.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::record::{HandshakeKind, HandshakeRecord};

    fn rec(total: u64, hs: u64) -> RequestRecord {
        RequestRecord {
            status: Some(200),
            ttfb_us: Some(total / 2),
            transfer_us: Some(total / 2),
            total_us: total,
            handshake: Some(HandshakeRecord {
                duration_us: hs,
                kind: HandshakeKind::Full,
                hrr: false,
                offered: false,
                version: "TLSv1.3".into(),
                suite: String::new(),
                group: String::new(),
                bytes_out: 0,
                bytes_in: 0,
                round_trips: 1,
                early_data: Default::default(),
                wire: None,
            }),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn hdr_log_intervals_are_tagged_and_add_up_to_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.hlog");
        let t0 = Instant::now();
        let log =
            HdrIntervalLog::create(&p, Duration::from_secs(1), t0, SystemTime::now()).unwrap();
        log.record_at(&rec(1000, 300), t0);
        log.record_at(&rec(2000, 400), t0 + Duration::from_millis(500));
        // Interval 1 is empty (left out); interval 2 has one request.
        log.record_at(&rec(9000, 500), t0 + Duration::from_millis(2500));
        log.finish().unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("#[StartTime: "), "{text}");
        assert!(text.contains("#[BaseTime: "), "{text}");
        let mut de = hdrhistogram::serialization::Deserializer::new();
        let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
        for e in
            hdrhistogram::serialization::interval_log::IntervalLogIterator::new(text.as_bytes())
        {
            let hdrhistogram::serialization::interval_log::LogEntry::Interval(h) = e.unwrap()
            else {
                continue;
            };
            use base64::Engine as _;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            let hist: Histogram<u64> = de.deserialize(&mut std::io::Cursor::new(raw)).unwrap();
            let tag = h.tag().unwrap().as_str().to_string();
            seen.insert(
                (tag, format!("{:.0}", h.start_timestamp().as_secs_f64())),
                hist.len(),
            );
        }
        let want: BTreeMap<(String, String), u64> = [
            (("handshake", "0"), 2),
            (("handshake", "2"), 1),
            (("total", "0"), 2),
            (("total", "2"), 1),
            (("ttfb", "0"), 2),
            (("ttfb", "2"), 1),
        ]
        .into_iter()
        .map(|((t, s), n)| ((t.to_string(), s.to_string()), n))
        .collect();
        assert_eq!(seen, want, "{text}");
    }

    #[test]
    fn a_zero_hdr_interval_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = HdrIntervalLog::create(
            &dir.path().join("x"),
            Duration::ZERO,
            Instant::now(),
            SystemTime::now(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("--hdr-interval"), "{e}");
    }
}
