//! Histograms and counters, and a sharded collector many tasks record into.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use crate::record::{EarlyData, HandshakeKind, RequestRecord};

/// The largest value a histogram holds: one hour in microseconds. Larger
/// values are recorded as one hour.
pub const MAX_US: u64 = 3_600_000_000;

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

/// Counters for one handshake kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindTotals {
    /// Handshakes of this kind.
    pub count: u64,
    /// Sum of bytes written during them.
    pub bytes_out: u64,
    /// Sum of bytes read during them.
    pub bytes_in: u64,
    /// Sum of their round trips.
    pub round_trips: u64,
    /// Handshakes whose TLS records were counted, and the sums of records
    /// written and read.
    pub records_count: u64,
    /// Sum of TLS records written.
    pub records_out: u64,
    /// Sum of TLS records read.
    pub records_in: u64,
    /// Handshakes that received a certificate, and the sum of its
    /// uncompressed message bodies.
    pub cert_count: u64,
    /// Sum of uncompressed certificate message bodies.
    pub cert_bytes: u64,
    /// Handshakes whose certificate came compressed, and the sums of the
    /// compressed data and of what it decompressed to.
    pub compressed_count: u64,
    /// Sum of compressed certificate data.
    pub compressed_bytes: u64,
    /// Sum of the uncompressed bodies of the compressed certificates.
    pub compressed_from_bytes: u64,
    /// Handshakes with TCP_INFO, and the sums over them.
    pub tcp_count: u64,
    /// Sum of data segments received during the handshake.
    pub data_segs_in: u64,
    /// Sum of the peer MSS estimates.
    pub rcv_mss: u64,
    /// Handshakes whose received data segments exceeded the initial window
    /// of [`HandshakeTcp::INITIAL_WINDOW`](crate::record::HandshakeTcp::INITIAL_WINDOW).
    pub beyond_initial_window: u64,
    /// Sum of slow-start rounds the received segments need from that window.
    pub slow_start_rounds: u64,
}

impl KindTotals {
    fn merge(&mut self, o: &KindTotals) {
        self.count += o.count;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.round_trips += o.round_trips;
        self.records_count += o.records_count;
        self.records_out += o.records_out;
        self.records_in += o.records_in;
        self.cert_count += o.cert_count;
        self.cert_bytes += o.cert_bytes;
        self.compressed_count += o.compressed_count;
        self.compressed_bytes += o.compressed_bytes;
        self.compressed_from_bytes += o.compressed_from_bytes;
        self.tcp_count += o.tcp_count;
        self.data_segs_in += o.data_segs_in;
        self.rcv_mss += o.rcv_mss;
        self.beyond_initial_window += o.beyond_initial_window;
        self.slow_start_rounds += o.slow_start_rounds;
    }

    fn add_wire(&mut self, w: &crate::record::HandshakeWire) {
        use crate::record::HandshakeTcp;
        self.records_count += 1;
        self.records_out += u64::from(w.records_out);
        self.records_in += u64::from(w.records_in);
        if let Some(c) = w.cert_bytes {
            self.cert_count += 1;
            self.cert_bytes += u64::from(c);
        }
        if let (Some(c), Some(u)) = (w.cert_compressed_bytes, w.cert_bytes) {
            self.compressed_count += 1;
            self.compressed_bytes += u64::from(c);
            self.compressed_from_bytes += u64::from(u);
        }
        if let Some(t) = &w.tcp {
            self.tcp_count += 1;
            self.data_segs_in += u64::from(t.data_segs_in);
            self.rcv_mss += u64::from(t.rcv_mss);
            self.beyond_initial_window += u64::from(t.data_segs_in > HandshakeTcp::INITIAL_WINDOW);
            self.slow_start_rounds += u64::from(HandshakeTcp::slow_start_rounds(
                t.data_segs_in,
                HandshakeTcp::INITIAL_WINDOW,
            ));
        }
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
    /// Requests attempted (one per record).
    pub attempted: u64,
    /// Requests whose response arrived completely (any status).
    pub completed: u64,
    /// Completed requests without error (2xx).
    pub succeeded: u64,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Responses by HTTP status.
    pub status: BTreeMap<u16, u64>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Full handshakes: counts and byte/round-trip sums.
    pub full: KindTotals,
    /// Resumed handshakes: counts and byte/round-trip sums.
    pub resumed: KindTotals,
    /// Full handshakes that needed a HelloRetryRequest.
    pub hrr: u64,
    /// Handshakes that offered a stored session.
    pub offered: u64,
    /// Handshakes by version: (full, resumed).
    pub by_version: BTreeMap<String, (u64, u64)>,
    /// Handshakes by cipher suite.
    pub suites: BTreeMap<String, u64>,
    /// Handshakes by key-exchange group (TLS 1.2 resumptions use none and
    /// are not counted here).
    pub groups: BTreeMap<String, u64>,
    /// Connections that sent early data, and of those, how many the server
    /// accepted.
    pub early_data_sent: u64,
    /// Connections whose early data the server accepted.
    pub early_data_accepted: u64,
    /// Requests that repeated a failed one (`--retry-on-failure`).
    pub retries: u64,
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str, by: u64) {
    match map.get_mut(key) {
        Some(v) => *v += by,
        None => {
            map.insert(key.to_owned(), by);
        }
    }
}

impl Stats {
    /// Adds one request.
    pub fn record(&mut self, r: &RequestRecord) {
        self.attempted += 1;
        self.retries += u64::from(r.retry);
        if let Some(c) = r.connect_us {
            self.connect.record(c);
        }
        if let Some(h) = &r.handshake {
            let (hist, totals) = match h.kind {
                HandshakeKind::Full => (&mut self.handshake_full, &mut self.full),
                HandshakeKind::Resumed => (&mut self.handshake_resumed, &mut self.resumed),
            };
            hist.record(h.duration_us);
            totals.count += 1;
            totals.bytes_out += h.bytes_out;
            totals.bytes_in += h.bytes_in;
            totals.round_trips += u64::from(h.round_trips);
            if let Some(w) = &h.wire {
                totals.add_wire(w);
            }
            self.hrr += u64::from(h.hrr);
            self.offered += u64::from(h.offered);
            let add = match h.kind {
                HandshakeKind::Full => (1, 0),
                HandshakeKind::Resumed => (0, 1),
            };
            match self.by_version.get_mut(h.version.as_str()) {
                Some(e) => {
                    e.0 += add.0;
                    e.1 += add.1;
                }
                None => {
                    self.by_version.insert(h.version.clone(), add);
                }
            }
            // Empty: not known (QUIC: quinn does not expose them).
            if !h.suite.is_empty() {
                bump(&mut self.suites, &h.suite, 1);
            }
            if !h.group.is_empty() {
                bump(&mut self.groups, &h.group, 1);
            }
            match h.early_data {
                EarlyData::NotSent => {}
                EarlyData::Accepted => {
                    self.early_data_sent += 1;
                    self.early_data_accepted += 1;
                }
                EarlyData::Rejected => self.early_data_sent += 1,
            }
        }
        if let Some(s) = r.status {
            *self.status.entry(s).or_default() += 1;
            if let Some(t) = r.ttfb_us {
                self.ttfb.record(t);
            }
        }
        self.body_bytes += r.body_bytes;
        if r.completed() {
            self.completed += 1;
            if let Some(t) = r.transfer_us {
                self.transfer.record(t);
            }
            self.total.record(r.total_us);
            if r.error.is_none() {
                self.succeeded += 1;
            }
        }
        if let Some(e) = &r.error {
            bump(&mut self.errors, e, 1);
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
        self.attempted += other.attempted;
        self.completed += other.completed;
        self.succeeded += other.succeeded;
        self.body_bytes += other.body_bytes;
        for (k, v) in &other.status {
            *self.status.entry(*k).or_default() += v;
        }
        for (k, v) in &other.errors {
            bump(&mut self.errors, k, *v);
        }
        self.full.merge(&other.full);
        self.resumed.merge(&other.resumed);
        self.hrr += other.hrr;
        self.offered += other.offered;
        for (k, (f, r)) in &other.by_version {
            let e = self.by_version.entry(k.clone()).or_default();
            e.0 += f;
            e.1 += r;
        }
        for (k, v) in &other.suites {
            bump(&mut self.suites, k, *v);
        }
        for (k, v) in &other.groups {
            bump(&mut self.groups, k, *v);
        }
        self.early_data_sent += other.early_data_sent;
        self.early_data_accepted += other.early_data_accepted;
        self.retries += other.retries;
    }

    /// Completed handshakes of either kind.
    pub fn handshakes(&self) -> u64 {
        self.full.count + self.resumed.count
    }

    /// Errors of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// A [`Stats`] split into shards behind mutexes, so concurrent clients
/// rarely wait for each other. Client `c` records into shard
/// `c % shards`; memory is bounded by the shard count, not the client count.
#[derive(Debug)]
pub struct Collector {
    shards: Box<[Mutex<Stats>]>,
}

impl Collector {
    /// A collector with `shards` shards (at least one).
    pub fn new(shards: usize) -> Self {
        Collector {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Stats::default()))
                .collect(),
        }
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
pub(crate) mod tests {
    use super::*;
    use crate::record::HandshakeRecord;

    pub(crate) fn record(client: u32, i: u64, kind: Option<HandshakeKind>) -> RequestRecord {
        RequestRecord {
            t_start_us: i * 10,
            client,
            conn: i,
            req_on_conn: 0,
            target: 0,
            status: Some(if i % 10 == 9 { 404 } else { 200 }),
            error: (i % 10 == 9).then(|| "http_404".to_string()),
            connect_us: Some(100 + i),
            handshake: kind.map(|kind| HandshakeRecord {
                duration_us: 1000 + i,
                kind,
                hrr: false,
                offered: kind == HandshakeKind::Resumed,
                version: "TLSv1.3".into(),
                suite: "TLS13_AES_128_GCM_SHA256".into(),
                group: "x25519".into(),
                bytes_out: 500,
                bytes_in: if kind == HandshakeKind::Full {
                    2000
                } else {
                    400
                },
                round_trips: 1,
                early_data: EarlyData::NotSent,
                wire: None,
            }),
            ttfb_us: Some(200 + i),
            transfer_us: Some(50),
            total_us: 2000 + i,
            body_bytes: 1024,
            retry: i % 10 == 9,
        }
    }

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
        assert_eq!(s.attempted, 20);
        assert_eq!(s.completed, 20);
        assert_eq!(s.succeeded, 18);
        assert_eq!(s.errors.get("http_404"), Some(&2));
        assert_eq!(s.status.get(&200), Some(&18));
        assert_eq!((s.full.count, s.resumed.count), (10, 10));
        assert_eq!(s.offered, 10);
        assert_eq!(s.by_version.get("TLSv1.3"), Some(&(10, 10)));
        assert_eq!(s.full.bytes_in, 20_000);
        assert_eq!(s.resumed.bytes_in, 4_000);
        assert_eq!(s.connect.count(), 20);
        assert_eq!(s.connect.max_us(), Some(119));
        assert_eq!(s.connect.mean_us(), Some(109.5));
        assert_eq!(s.body_bytes, 20 * 1024);
        assert_eq!(s.retries, 2);
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
        assert_eq!(merged.attempted, whole.attempted);
        assert_eq!(merged.full, whole.full);
        assert_eq!(merged.errors, whole.errors);
        assert_eq!(merged.status, whole.status);
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
        assert_eq!((s.attempted, s.completed, s.error_count()), (1, 0, 1));
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
