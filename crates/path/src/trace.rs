//! Links as packet-delivery traces, in mahimahi's format: one millisecond
//! timestamp per line, each the moment the link may deliver one MTU-sized
//! packet ([`OPPORTUNITY_BYTES`]). The trace repeats with the period of its
//! last timestamp. A constant rate is a generated trace of one opportunity
//! per period, so fixed and cellular links share one code path.

use std::path::Path;

use crate::error::Error;

/// The bytes one delivery opportunity carries: mahimahi's 1504 (an MTU of
/// 1500 plus the 4-byte TUN header it counts).
pub const OPPORTUNITY_BYTES: usize = 1504;

/// The largest trace file read ([`Trace::load`]): 16 MiB, some two
/// million lines of mahimahi's format (its cellular traces are a few
/// hundred thousand).
pub const MAX_TRACE_BYTES: u64 = 16 << 20;

/// The most timestamps a trace may hold ([`Trace::parse`]).
pub const MAX_TRACE_LINES: usize = 2_000_000;

/// A repeating schedule of delivery opportunities, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times within one period, ascending, each `< period`
    /// except that a trace may have several at the same time.
    times: Vec<u64>,
    /// The period after which the trace repeats (nanoseconds, > 0).
    period: u64,
    /// Where it came from, for reports (`10mbit`, a file name).
    label: String,
}

impl Trace {
    /// A constant rate of `bps` bits per second: one opportunity of
    /// [`OPPORTUNITY_BYTES`] every `1504 × 8 / bps` seconds.
    pub fn constant(bps: u64, label: impl Into<String>) -> Result<Trace, Error> {
        if bps == 0 {
            return Err(Error::Invalid("a rate of 0 bit/s never delivers".into()));
        }
        let period = (OPPORTUNITY_BYTES as u128 * 8 * 1_000_000_000 / u128::from(bps)) as u64;
        if period == 0 {
            return Err(Error::Invalid(format!(
                "a rate of {bps} bit/s is above what a nanosecond trace can hold (12 Tbit/s)"
            )));
        }
        Ok(Trace {
            times: vec![0],
            period,
            label: label.into(),
        })
    }

    /// Parses mahimahi's format: one non-negative integer millisecond per
    /// line, non-decreasing, the last above zero (it is the period). Blank
    /// lines are skipped.
    pub fn parse(text: &str, label: impl Into<String>) -> Result<Trace, Error> {
        let label = label.into();
        let mut ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            if ms.len() == MAX_TRACE_LINES {
                return Err(Error::Invalid(format!(
                    "trace {label} has over {MAX_TRACE_LINES} timestamps (the cap on a trace); \
                     use a shorter trace, it repeats"
                )));
            }
            let v: u64 = t.parse().map_err(|_| {
                Error::Invalid(format!(
                    "trace {label} line {}: {t:?} is not a millisecond timestamp \
                     (mahimahi's format: one integer per line)",
                    i + 1
                ))
            })?;
            if ms.last().is_some_and(|&last| v < last) {
                return Err(Error::Invalid(format!(
                    "trace {label} line {}: {v} is earlier than the line before; \
                     timestamps must not decrease",
                    i + 1
                )));
            }
            if v > 365 * 86_400_000 {
                return Err(Error::Invalid(format!(
                    "trace {label} line {}: {v} ms is over a year",
                    i + 1
                )));
            }
            ms.push(v);
        }
        let period_ms = match ms.last() {
            Some(&p) if p > 0 => p,
            _ => {
                return Err(Error::Invalid(format!(
                    "trace {label} has no timestamp above 0; mahimahi's traces end with \
                     the period in milliseconds"
                )));
            }
        };
        let period = period_ms * 1_000_000;
        // The last timestamp is the period: an opportunity at `period` is the
        // one at 0 of the next round (mahimahi wraps the same way).
        let times = ms
            .iter()
            .map(|&m| (m * 1_000_000) % period)
            .collect::<Vec<_>>();
        let mut times = times;
        times.sort_unstable();
        Ok(Trace {
            times,
            period,
            label,
        })
    }

    /// Reads and parses a trace file of at most [`MAX_TRACE_BYTES`].
    pub fn load(path: &Path) -> Result<Trace, Error> {
        use std::io::Read;
        let fail = |source| Error::TraceFile {
            path: path.into(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TRACE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(fail)?;
        if bytes.len() as u64 > MAX_TRACE_BYTES {
            return Err(Error::Invalid(format!(
                "trace {} is over {} MiB (the cap on a trace file); use a shorter trace, it \
                 repeats",
                path.display(),
                MAX_TRACE_BYTES >> 20
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            Error::Invalid(format!(
                "trace {} is not text (mahimahi's format: one integer per line)",
                path.display()
            ))
        })?;
        Trace::parse(&text, path.display().to_string())
    }

    /// The period after which the trace repeats, in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.period
    }

    /// Opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.times.len()
    }

    /// Where the trace came from.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The average rate the trace offers, in bits per second.
    pub fn mean_bps(&self) -> f64 {
        self.times.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 / (self.period as f64 / 1e9)
    }

    /// The time of opportunity number `k` (counted from 0 at time 0 over
    /// the repeating trace).
    pub fn at(&self, k: u64) -> u64 {
        let n = self.times.len() as u64;
        (k / n) * self.period + self.times[(k % n) as usize]
    }

    /// The index of the first opportunity at or after `t`.
    pub fn first_at_or_after(&self, t: u64) -> u64 {
        let n = self.times.len() as u64;
        let round = t / self.period;
        let within = t % self.period;
        let i = self.times.partition_point(|&x| x < within) as u64;
        round * n + i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_is_one_opportunity_per_mtu_time() {
        let t = Trace::constant(10_000_000, "10mbit").unwrap();
        assert_eq!(t.period_ns(), 1_203_200);
        assert_eq!(t.at(0), 0);
        assert_eq!(t.at(3), 3 * 1_203_200);
        assert!((t.mean_bps() - 1e7).abs() < 1.0);
        assert_eq!(t.first_at_or_after(1), 1);
        assert_eq!(t.first_at_or_after(1_203_200), 1);
        assert!(Trace::constant(0, "0").is_err());
    }

    #[test]
    fn mahimahi_format_repeats_with_its_last_timestamp() {
        // Two opportunities at 1 ms, one at 3 ms, one at 4 ms (= the period).
        let t = Trace::parse("1\n1\n3\n\n4\n", "t").unwrap();
        assert_eq!(t.period_ns(), 4_000_000);
        assert_eq!(t.opportunities(), 4);
        let ms: Vec<u64> = (0..8).map(|k| t.at(k) / 1_000_000).collect();
        assert_eq!(ms, [0, 1, 1, 3, 4, 5, 5, 7]);
        assert_eq!(t.first_at_or_after(2_000_000), 3);
        assert_eq!(t.at(t.first_at_or_after(4_500_000)), 5_000_000);
        // 4 × 1504 B every 4 ms.
        assert!((t.mean_bps() - 4.0 * 1504.0 * 8.0 / 0.004).abs() < 1.0);
    }

    // Issue 29: a trace read from /dev/zero grew to 1.07 GB before failing,
    // and 10 million lines took 338 MB; both now stop at a named cap.
    #[test]
    fn trace_reader_is_capped_in_bytes_and_lines() {
        let e = Trace::load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("16 MiB") && e.contains("cap"), "{e}");
        let long: String = (1..=MAX_TRACE_LINES as u64 + 1)
            .map(|i| format!("{}\n", i / 1000 + 1))
            .collect();
        let e = Trace::parse(&long, "long").unwrap_err().to_string();
        assert!(e.contains("2000000 timestamps") && e.contains("cap"), "{e}");
        let at_cap: String = (1..=MAX_TRACE_LINES as u64)
            .map(|i| format!("{}\n", i / 1000 + 1))
            .collect();
        assert_eq!(
            Trace::parse(&at_cap, "ok").unwrap().opportunities(),
            MAX_TRACE_LINES
        );
    }

    #[test]
    fn bad_traces_name_the_line() {
        let e = Trace::parse("1\n2\nx\n", "f").unwrap_err().to_string();
        assert!(e.contains("line 3"), "{e}");
        let e = Trace::parse("5\n2\n", "f").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("earlier"), "{e}");
        assert!(Trace::parse("", "f").is_err());
        assert!(Trace::parse("0\n0\n", "f").is_err());
        assert!(Trace::parse("-1\n3\n", "f").is_err());
    }
}
