//! Histograms and counters, and a sharded collector many tasks record into.

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use tlslab_schema::counters::{Counters, KindTotals, bump};

pub use crate::hdr_log::MAX_US;
use crate::record::{EarlyData, HandshakeKind, RequestRecord};

/// One latency phase: an HDR histogram (1 µs to 1 h, 3 significant digits)
/// plus the exact sum and maximum.
#[derive(Clone, Debug)]
pub struct PhaseStats {
    hist: Histogram<u64>,
    sum_us: u128,
    max_us: u64,
}

impl Default for PhaseStats {
    fn default() -> Self {
        PhaseStats {
            // The bounds are constants that hdrhistogram accepts.
            hist: Histogram::new_with_bounds(1, MAX_US, 3)
                .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid")),
            sum_us: 0,
            max_us: 0,
        }
    }
}

impl PhaseStats {
    /// Records one value in microseconds (0 counts as 1 µs, above an hour as
    /// an hour in the histogram; the sum and maximum stay exact).
    pub fn record(&mut self, us: u64) {
        self.hist.saturating_record(us.clamp(1, MAX_US));
        self.sum_us += u128::from(us);
        self.max_us = self.max_us.max(us);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The exact mean, or `None` when nothing was recorded.
    pub fn mean_us(&self) -> Option<f64> {
        let n = self.count();
        (n > 0).then(|| self.sum_us as f64 / n as f64)
    }

    /// The exact maximum, or `None` when nothing was recorded.
    pub fn max_us(&self) -> Option<u64> {
        (self.count() > 0).then_some(self.max_us)
    }

    /// The value at quantile `q` (0.0–1.0) to 3 significant digits, or `None`
    /// when nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        (self.count() > 0).then(|| self.hist.value_at_quantile(q).min(self.max_us))
    }

    /// The exact sum of the recorded values, µs.
    pub fn sum_us(&self) -> u128 {
        self.sum_us
    }

    /// The HDR histogram (1 µs to 1 h, 3 significant digits).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Rebuilds a phase from a histogram read back from an interval log and
    /// its exact sum and maximum. Fails if the histogram's values do not fit
    /// this phase's bounds.
    pub fn from_parts(hist: Histogram<u64>, sum_us: u128, max_us: u64) -> Result<Self, String> {
        let mut p = PhaseStats::default();
        p.hist
            .add(&hist)
            .map_err(|e| format!("histogram does not fit 1 µs..1 h: {e:?}"))?;
        p.sum_us = sum_us;
        p.max_us = max_us;
        Ok(p)
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &PhaseStats) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.sum_us += other.sum_us;
        self.max_us = self.max_us.max(other.max_us);
    }
}

/// Adds one handshake's wire figures (records, certificate, TCP_INFO) to
/// its kind's sums.
fn add_wire(k: &mut KindTotals, w: &crate::record::HandshakeWire) {
    use crate::record::HandshakeTcp;
    k.records_count += 1;
    k.records_out += u64::from(w.records_out);
    k.records_in += u64::from(w.records_in);
    if let Some(c) = w.cert_bytes {
        k.cert_count += 1;
        k.cert_bytes += u64::from(c);
    }
    if let (Some(c), Some(u)) = (w.cert_compressed_bytes, w.cert_bytes) {
        k.compressed_count += 1;
        k.compressed_bytes += u64::from(c);
        k.compressed_from_bytes += u64::from(u);
    }
    if let Some(t) = &w.tcp {
        k.tcp_count += 1;
        k.data_segs_in += u64::from(t.data_segs_in);
        k.rcv_mss += u64::from(t.rcv_mss);
        k.beyond_initial_window += u64::from(t.data_segs_in > HandshakeTcp::INITIAL_WINDOW);
        k.slow_start_rounds += u64::from(HandshakeTcp::slow_start_rounds(
            t.data_segs_in,
            HandshakeTcp::INITIAL_WINDOW,
        ));
    }
}

/// Histograms and counters of a set of requests. Everything is a sum or a
/// histogram, so [`Stats::merge`] of two parts equals the stats of the whole.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// TCP connect times.
    pub connect: PhaseStats,
    /// Full handshake times (HelloRetryRequest ones included).
    pub handshake_full: PhaseStats,
    /// Resumed handshake times.
    pub handshake_resumed: PhaseStats,
    /// Time to first byte of completed requests.
    pub ttfb: PhaseStats,
    /// Head → last byte of completed requests.
    pub transfer: PhaseStats,
    /// Total time of completed requests.
    pub total: PhaseStats,
    /// Every other counter: requests, statuses, errors and handshake
    /// sums (the fields an agent writes to `counters.json`).
    pub counts: Counters,
}

impl Stats {
    /// Adds one request.
    pub fn record(&mut self, r: &RequestRecord) {
        self.counts.attempted += 1;
        self.counts.retries += u64::from(r.retry);
        if let Some(c) = r.connect_us {
            self.connect.record(c);
        }
        if let Some(h) = &r.handshake {
            let (hist, totals) = match h.kind {
                HandshakeKind::Full => (&mut self.handshake_full, &mut self.counts.full),
                HandshakeKind::Resumed => (&mut self.handshake_resumed, &mut self.counts.resumed),
            };
            hist.record(h.duration_us);
            totals.count += 1;
            totals.bytes_out += h.bytes_out;
            totals.bytes_in += h.bytes_in;
            totals.round_trips += u64::from(h.round_trips);
            if let Some(w) = &h.wire {
                add_wire(totals, w);
            }
            self.counts.hrr += u64::from(h.hrr);
            self.counts.offered += u64::from(h.offered);
            let add = match h.kind {
                HandshakeKind::Full => (1, 0),
                HandshakeKind::Resumed => (0, 1),
            };
            match self.counts.by_version.get_mut(h.version.as_str()) {
                Some(e) => {
                    e.0 += add.0;
                    e.1 += add.1;
                }
                None => {
                    self.counts.by_version.insert(h.version.clone(), add);
                }
            }
            // Empty: not known (QUIC: quinn does not expose them).
            if !h.suite.is_empty() {
                bump(&mut self.counts.suites, &h.suite, 1);
            }
            if !h.group.is_empty() {
                bump(&mut self.counts.groups, &h.group, 1);
            }
            match h.early_data {
                EarlyData::NotSent => {}
                EarlyData::Accepted => {
                    self.counts.early_data_sent += 1;
                    self.counts.early_data_accepted += 1;
                }
                EarlyData::Rejected => self.counts.early_data_sent += 1,
            }
        }
        if let Some(s) = r.status {
            *self.counts.status.entry(s).or_default() += 1;
            if let Some(t) = r.ttfb_us {
                self.ttfb.record(t);
            }
        }
        self.counts.body_bytes += r.body_bytes;
        if r.completed() {
            self.counts.completed += 1;
            if let Some(t) = r.transfer_us {
                self.transfer.record(t);
            }
            self.total.record(r.total_us);
            if r.error.is_none() {
                self.counts.succeeded += 1;
            }
        }
        if let Some(e) = &r.error {
            bump(&mut self.counts.errors, e, 1);
        }
    }

    /// Adds everything in `other`.
    pub fn merge(&mut self, other: &Stats) {
        self.connect.merge(&other.connect);
        self.handshake_full.merge(&other.handshake_full);
        self.handshake_resumed.merge(&other.handshake_resumed);
        self.ttfb.merge(&other.ttfb);
        self.transfer.merge(&other.transfer);
        self.total.merge(&other.total);
        self.counts.merge(&other.counts);
    }
}

/// A [`Stats`] split into shards behind mutexes, so concurrent clients
/// rarely wait for each other. Client `c` records into shard
/// `c % shards`; memory is bounded by the shard count, not the client count.
#[derive(Debug)]
pub struct Collector {
    shards: Box<[Mutex<Stats>]>,
    /// `--hdr-log`: every recorded request also goes to this interval log.
    hdr_log: Option<std::sync::Arc<crate::hdr_log::HdrIntervalLog>>,
}

impl Collector {
    /// A collector with `shards` shards (at least one).
    pub fn new(shards: usize) -> Self {
        Collector {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Stats::default()))
                .collect(),
            hdr_log: None,
        }
    }

    /// This collector, also recording every request into `log`.
    pub fn with_hdr_log(
        mut self,
        log: Option<std::sync::Arc<crate::hdr_log::HdrIntervalLog>>,
    ) -> Self {
        self.hdr_log = log;
        self
    }

    /// How many shards there are.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Records a request of `r.client` into its shard.
    pub fn record(&self, r: &RequestRecord) {
        self.shards[r.client as usize % self.shards.len()]
            .lock()
            .record(r);
        if let Some(log) = &self.hdr_log {
            log.record(r);
        }
    }

    /// All shards merged.
    pub fn merged(&self) -> Stats {
        let mut out = Stats::default();
        for s in self.shards.iter() {
            out.merge(&s.lock());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::record;

    #[test]
    fn record_counts_each_field() {
        let mut s = Stats::default();
        for i in 0..20 {
            let kind = if i % 2 == 0 {
                HandshakeKind::Full
            } else {
                HandshakeKind::Resumed
            };
            s.record(&record(0, i, Some(kind)));
        }
        assert_eq!(s.counts.attempted, 20);
        assert_eq!(s.counts.completed, 20);
        assert_eq!(s.counts.succeeded, 18);
        assert_eq!(s.counts.errors.get("http_404"), Some(&2));
        assert_eq!(s.counts.status.get(&200), Some(&18));
        assert_eq!((s.counts.full.count, s.counts.resumed.count), (10, 10));
        assert_eq!(s.counts.offered, 10);
        assert_eq!(s.counts.by_version.get("TLSv1.3"), Some(&(10, 10)));
        assert_eq!(s.counts.full.bytes_in, 20_000);
        assert_eq!(s.counts.resumed.bytes_in, 4_000);
        assert_eq!(s.connect.count(), 20);
        assert_eq!(s.connect.max_us(), Some(119));
        assert_eq!(s.connect.mean_us(), Some(109.5));
        assert_eq!(s.counts.body_bytes, 20 * 1024);
        assert_eq!(s.counts.retries, 2);
    }

    #[test]
    fn merge_of_parts_equals_whole() {
        let recs: Vec<_> = (0..100)
            .map(|i| {
                record(
                    (i % 7) as u32,
                    i,
                    (i % 3 != 0).then_some(HandshakeKind::Full),
                )
            })
            .collect();
        let mut whole = Stats::default();
        recs.iter().for_each(|r| whole.record(r));
        let c = Collector::new(4);
        recs.iter().for_each(|r| c.record(r));
        let merged = c.merged();
        assert_eq!(merged.counts.attempted, whole.counts.attempted);
        assert_eq!(merged.counts.full, whole.counts.full);
        assert_eq!(merged.counts.errors, whole.counts.errors);
        assert_eq!(merged.counts.status, whole.counts.status);
        assert_eq!(merged.total.count(), whole.total.count());
        assert_eq!(merged.total.mean_us(), whole.total.mean_us());
        assert_eq!(
            merged.total.quantile_us(0.99),
            whole.total.quantile_us(0.99)
        );
        assert_eq!(
            merged.handshake_full.max_us(),
            whole.handshake_full.max_us()
        );
    }

    #[test]
    fn failed_connection_counts_as_error_not_latency() {
        let mut s = Stats::default();
        s.record(&RequestRecord {
            error: Some("refused".into()),
            total_us: 80,
            ..RequestRecord::default()
        });
        assert_eq!(
            (
                s.counts.attempted,
                s.counts.completed,
                s.counts.error_count()
            ),
            (1, 0, 1)
        );
        assert_eq!(s.total.count(), 0);
        assert_eq!(s.total.quantile_us(0.5), None);
    }

    #[test]
    fn huge_values_saturate_in_histogram_but_max_is_exact() {
        let mut p = PhaseStats::default();
        p.record(MAX_US * 2);
        p.record(0);
        assert_eq!(p.count(), 2);
        assert_eq!(p.max_us(), Some(MAX_US * 2));
        assert!(p.quantile_us(1.0).unwrap() >= MAX_US - MAX_US / 1000);
    }
}
