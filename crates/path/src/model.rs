//! One direction of the path as a state machine with no I/O and injected
//! time (nanoseconds on any monotonic clock): packets [`arrive`], and
//! [`poll`] hands back those whose time has come. The forwarder drives it
//! from a TUN device; the tests drive it with made-up clocks.
//!
//! A packet meets, in order (mahimahi's `mm-loss`, `mm-link`, `mm-delay`):
//! 1. loss, on arrival;
//! 2. the bottleneck: a drop-tail queue served at the trace's delivery
//!    opportunities, each worth [`OPPORTUNITY_BYTES`]; a packet larger than
//!    what is left of an opportunity continues in the next one, and an
//!    opportunity that finds the queue empty is lost;
//! 3. the propagation delay, with jitter; without reordering a packet
//!    never leaves before the one ahead of it.
//!
//! [`arrive`]: Model::arrive
//! [`poll`]: Model::poll

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use hdrhistogram::Histogram;
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::spec::{Direction, Loss, QueueLimit};
use crate::trace::{OPPORTUNITY_BYTES, Trace};

/// What happened to the packets of one direction.
#[derive(Clone, Debug)]
pub struct Counters {
    /// Packets that arrived.
    pub packets_in: u64,
    /// Their bytes (IP packets).
    pub bytes_in: u64,
    /// Packets handed on (to the far TUN device).
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Packets dropped because the queue was full.
    pub dropped_queue: u64,
    /// Packets dropped by the loss model.
    pub dropped_loss: u64,
    /// The most packets that waited in the queue at once.
    pub max_queue_packets: u64,
    /// Time in the bottleneck (queueing plus the packet's own serving
    /// time), nanoseconds, per packet that crossed it.
    pub queue_delay: Histogram<u64>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            packets_in: 0,
            bytes_in: 0,
            packets_out: 0,
            bytes_out: 0,
            dropped_queue: 0,
            dropped_loss: 0,
            max_queue_packets: 0,
            queue_delay: histogram(),
        }
    }
}

/// An auto-resizing nanosecond histogram with 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    let mut h = Histogram::new(3).expect("3 significant digits is valid");
    h.auto(true);
    h
}

/// Why a packet was dropped on arrival ([`Model::arrive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// The loss model drew it.
    Loss,
    /// The bottleneck's drop-tail queue was full.
    Queue,
}

struct Queued {
    data: Vec<u8>,
    arrived: u64,
    /// Bytes not yet served by the link.
    left: usize,
}

/// A packet in the delay line, ordered by release time then arrival order.
struct Delayed {
    release: u64,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Delayed {
    fn eq(&self, o: &Delayed) -> bool {
        (self.release, self.seq) == (o.release, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Delayed) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Delayed) -> Ordering {
        (self.release, self.seq).cmp(&(o.release, o.seq))
    }
}

/// One direction of the path (see the module docs).
pub struct Model {
    delay: u64,
    jitter: u64,
    reorder: bool,
    loss: Loss,
    queue_limit: QueueLimit,
    link: Option<Trace>,
    rng: ChaCha8Rng,
    bad_state: bool,
    queue: VecDeque<Queued>,
    queue_bytes: usize,
    /// The index of the next delivery opportunity in the trace.
    next_opportunity: u64,
    /// Bytes left of the opportunity being used (carried while packets
    /// wait; lost when the queue empties).
    credit: usize,
    line: BinaryHeap<Reverse<Delayed>>,
    seq: u64,
    last_release: u64,
    counters: Counters,
}

impl Model {
    /// A direction with its own generator seeded by `seed`. Time 0 is the
    /// trace's start.
    pub fn new(dir: &Direction, seed: u64) -> Model {
        Model {
            delay: dir.delay.as_nanos() as u64,
            jitter: dir.jitter.as_nanos() as u64,
            reorder: dir.reorder,
            loss: dir.loss,
            queue_limit: dir.queue,
            link: dir.link.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            bad_state: false,
            queue: VecDeque::new(),
            queue_bytes: 0,
            next_opportunity: 0,
            credit: 0,
            line: BinaryHeap::new(),
            seq: 0,
            last_release: 0,
            counters: Counters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Packets held (queued or in the delay line).
    pub fn in_flight(&self) -> usize {
        self.queue.len() + self.line.len()
    }

    fn lost(&mut self) -> bool {
        match self.loss {
            Loss::None => false,
            Loss::Random(p) => self.rng.random_bool(p),
            Loss::GilbertElliott { p, r, bad, good } => {
                let flip = if self.bad_state { r } else { p };
                if self.rng.random_bool(flip) {
                    self.bad_state = !self.bad_state;
                }
                let q = if self.bad_state { bad } else { good };
                q > 0.0 && self.rng.random_bool(q)
            }
        }
    }

    /// A packet arrives at time `now`. A packet dropped on arrival (by the
    /// loss model or a full queue) is handed back with why, for a capture.
    pub fn arrive(&mut self, now: u64, data: Vec<u8>) -> Option<(DropCause, Vec<u8>)> {
        self.counters.packets_in += 1;
        self.counters.bytes_in += data.len() as u64;
        if self.lost() {
            self.counters.dropped_loss += 1;
            return Some((DropCause::Loss, data));
        }
        if self.link.is_none() {
            let _ = self.counters.queue_delay.record(0);
            self.delay_line(now, data);
            return None;
        }
        // Serve what was queued before this packet, up to just before now.
        if now > 0 {
            self.serve(now - 1);
        }
        let full = match self.queue_limit {
            QueueLimit::Packets(n) => self.queue.len() >= n,
            QueueLimit::Bytes(n) => self.queue_bytes + data.len() > n,
        };
        if full {
            self.counters.dropped_queue += 1;
            return Some((DropCause::Queue, data));
        }
        if self.queue.is_empty() {
            // Opportunities that found the queue empty are gone.
            let trace = self.link.as_ref().expect("checked above");
            let first = trace.first_at_or_after(now);
            if first > self.next_opportunity {
                self.next_opportunity = first;
                self.credit = 0;
            }
        }
        self.queue_bytes += data.len();
        let left = data.len();
        self.queue.push_back(Queued {
            data,
            arrived: now,
            left,
        });
        self.counters.max_queue_packets =
            self.counters.max_queue_packets.max(self.queue.len() as u64);
        None
    }

    /// Runs the link's delivery opportunities up to and including `until`.
    fn serve(&mut self, until: u64) {
        let Some(trace) = self.link.take() else {
            return;
        };
        self.serve_with(&trace, until);
        self.link = Some(trace);
    }

    fn serve_with(&mut self, trace: &Trace, until: u64) {
        while !self.queue.is_empty() {
            if self.credit == 0 {
                let t = trace.at(self.next_opportunity);
                if t > until {
                    return;
                }
                self.credit = OPPORTUNITY_BYTES;
                self.next_opportunity += 1;
            }
            let at = trace.at(self.next_opportunity - 1);
            let head = self.queue.front_mut().expect("not empty");
            let used = head.left.min(self.credit);
            head.left -= used;
            self.credit -= used;
            if head.left == 0 {
                let q = self.queue.pop_front().expect("not empty");
                self.queue_bytes -= q.data.len();
                let _ = self
                    .counters
                    .queue_delay
                    .record(at.saturating_sub(q.arrived));
                self.delay_line(at, q.data);
                if self.queue.is_empty() {
                    self.credit = 0;
                }
            }
        }
    }

    fn delay_line(&mut self, left_link: u64, data: Vec<u8>) {
        let mut release = left_link + self.delay;
        if self.jitter > 0 {
            let j = self.jitter as i64;
            let d = self.rng.random_range(-j..=j);
            release = release.saturating_add_signed(d).max(left_link);
        }
        if !self.reorder {
            release = release.max(self.last_release);
        }
        self.last_release = self.last_release.max(release);
        self.seq += 1;
        self.line.push(Reverse(Delayed {
            release,
            seq: self.seq,
            data,
        }));
    }

    /// Hands `out` each packet due at `now` with its scheduled release
    /// time (which may be earlier than `now`: the caller's lateness), in
    /// release order. Returns the time of the next event (a release or a
    /// delivery opportunity with packets waiting), if any.
    pub fn poll(&mut self, now: u64, mut out: impl FnMut(u64, Vec<u8>)) -> Option<u64> {
        self.serve(now);
        while self.line.peek().is_some_and(|d| d.0.release <= now) {
            let Reverse(d) = self.line.pop().expect("peeked");
            self.counters.packets_out += 1;
            self.counters.bytes_out += d.data.len() as u64;
            out(d.release, d.data);
        }
        self.next_event()
    }

    /// The time of the next release or delivery opportunity, if any.
    pub fn next_event(&self) -> Option<u64> {
        let release = self.line.peek().map(|d| d.0.release);
        let serve = match (&self.link, self.queue.is_empty()) {
            (Some(t), false) if self.credit == 0 => Some(t.at(self.next_opportunity)),
            (Some(t), false) => Some(t.at(self.next_opportunity.saturating_sub(1))),
            _ => None,
        };
        match (release, serve) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    fn run(m: &mut Model, arrivals: &[(u64, usize)], until: u64) -> Vec<(u64, usize)> {
        // Step a fake clock 10 µs at a time; record (release, size).
        let mut out = Vec::new();
        let mut next = 0;
        let mut t = 0;
        while t <= until {
            while next < arrivals.len() && arrivals[next].0 <= t {
                m.arrive(t, vec![0; arrivals[next].1]);
                next += 1;
            }
            m.poll(t, |at, d| out.push((at, d.len())));
            t += 10_000;
        }
        out
    }

    #[test]
    fn delay_only_releases_at_arrival_plus_delay() {
        let dir = Direction {
            delay: Duration::from_millis(25),
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 1);
        let out = run(&mut m, &[(0, 100), (MS, 1500)], 100 * MS);
        assert_eq!(out, [(25 * MS, 100), (26 * MS, 1500)]);
        assert_eq!(m.counters().packets_out, 2);
        assert_eq!(m.counters().bytes_out, 1600);
        assert_eq!(m.next_event(), None);
    }

    #[test]
    fn jitter_without_reordering_keeps_order_and_bounds() {
        let dir = Direction {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 2);
        let arrivals: Vec<(u64, usize)> = (0..2000).map(|i| (i * 100_000, 100)).collect();
        let mut released = Vec::new();
        for &(t, n) in &arrivals {
            m.arrive(t, vec![0; n]);
            m.poll(t, |at, _| released.push(at));
        }
        m.poll(u64::MAX / 2, |at, _| released.push(at));
        assert_eq!(released.len(), 2000);
        assert!(released.windows(2).all(|w| w[0] <= w[1]));
        for (i, &r) in released.iter().enumerate() {
            let sent = arrivals[i].0;
            assert!(r >= sent + 5 * MS, "{i}: {r} < {sent} + 5 ms");
        }
        // Spaced wider than the jitter window, the delays spread over all
        // of ±5 ms, not one end of it.
        let mut m = Model::new(&dir, 2);
        let mut late = Vec::new();
        for i in 0..500u64 {
            m.arrive(i * 20 * MS, vec![0; 100]);
            m.poll(u64::MAX / 2, |at, _| late.push(at - i * 20 * MS));
        }
        assert!(late.iter().all(|&d| (5 * MS..=15 * MS).contains(&d)));
        assert!(late.iter().any(|&d| d < 6 * MS) && late.iter().any(|&d| d > 14 * MS));
    }

    #[test]
    fn jitter_with_reordering_lets_packets_overtake() {
        let dir = Direction {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            reorder: true,
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 3);
        for i in 0..200u64 {
            m.arrive(i * 100_000, (i as u32).to_be_bytes().to_vec());
        }
        let mut order = Vec::new();
        m.poll(u64::MAX / 2, |_, d| {
            order.push(u32::from_be_bytes(d.try_into().unwrap()))
        });
        assert_eq!(order.len(), 200);
        assert!(order.windows(2).any(|w| w[0] > w[1]), "no reordering");
    }

    /// A 10 Mbit/s link behind `queue`.
    fn ten_mbit(queue: QueueLimit) -> Direction {
        Direction {
            link: Some(Trace::constant(10_000_000, "10mbit").unwrap()),
            queue,
            ..Direction::default()
        }
    }

    #[test]
    fn constant_rate_serves_1504_bytes_per_opportunity() {
        // 10 Mbit/s: one 1504-byte opportunity every 1.2032 ms.
        let dir = ten_mbit(QueueLimit::Packets(1000));
        let mut m = Model::new(&dir, 4);
        // 100 packets of 1504 bytes arrive at once at t = 0.
        let arrivals: Vec<(u64, usize)> = (0..100).map(|_| (0, 1504)).collect();
        let out = run(&mut m, &arrivals, 200 * MS);
        assert_eq!(out.len(), 100);
        for (k, &(at, _)) in out.iter().enumerate() {
            assert_eq!(at, k as u64 * 1_203_200, "packet {k}");
        }
        // The last waited 99 opportunities.
        assert_eq!(
            m.counters().queue_delay.max(),
            m.counters().queue_delay.highest_equivalent(99 * 1_203_200)
        );
        assert_eq!(m.counters().max_queue_packets, 100);
    }

    #[test]
    fn rate_over_a_long_run_is_exact_for_mixed_sizes() {
        let dir = ten_mbit(QueueLimit::Packets(100_000));
        let mut m = Model::new(&dir, 5);
        // Saturate: 3000 packets of 1500 and 3000 of 52 bytes.
        let mut bytes = 0;
        for i in 0..6000 {
            let n = if i % 2 == 0 { 1500 } else { 52 };
            bytes += n;
            m.arrive(0, vec![0; n]);
        }
        let mut last = 0;
        m.poll(10_000 * MS, |at, _| last = at);
        let rate = bytes as f64 * 8.0 / (last as f64 / 1e9);
        assert!((rate / 1e7 - 1.0).abs() < 0.001, "{rate}");
    }

    #[test]
    fn idle_opportunities_are_lost_not_banked() {
        let dir = Direction {
            link: Some(Trace::constant(10_000_000, "10mbit").unwrap()),
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 6);
        // After 1 s idle, two packets still go one opportunity apart.
        let out = run(&mut m, &[(1000 * MS, 1504), (1000 * MS, 1504)], 1010 * MS);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].0 - out[0].0, 1_203_200);
        assert!(out[0].0 >= 1000 * MS && out[0].0 < 1000 * MS + 1_203_200);
    }

    #[test]
    fn mahimahi_trace_drives_the_link() {
        // Opportunities at 1, 1, 3 ms, period 4 ms.
        let dir = Direction {
            link: Some(Trace::parse("1\n1\n3\n4\n", "t").unwrap()),
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 7);
        let arrivals: Vec<(u64, usize)> = (0..5).map(|_| (0, 1500)).collect();
        let out = run(&mut m, &arrivals, 20 * MS);
        let ms: Vec<u64> = out.iter().map(|o| o.0 / MS).collect();
        assert_eq!(ms, [0, 1, 1, 3, 4]);
    }

    #[test]
    fn drop_tail_in_packets_and_bytes() {
        for (q, kept) in [
            (QueueLimit::Packets(10), 10),
            (QueueLimit::Bytes(15_000), 10),
        ] {
            let dir = Direction {
                link: Some(Trace::constant(1_000_000, "1mbit").unwrap()),
                queue: q,
                ..Direction::default()
            };
            let mut m = Model::new(&dir, 8);
            for _ in 0..50 {
                m.arrive(5, vec![0; 1500]);
            }
            assert_eq!(m.counters().dropped_queue, 50 - kept, "{q}");
            let mut n = 0;
            m.poll(u64::MAX / 4, |_, _| n += 1);
            assert_eq!(n, kept, "{q}");
        }
    }

    #[test]
    fn random_loss_is_within_its_binomial_interval() {
        let dir = Direction {
            loss: Loss::Random(0.01),
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 9);
        let n = 100_000u64;
        for i in 0..n {
            m.arrive(i, vec![0; 10]);
        }
        let lost = m.counters().dropped_loss as f64;
        // 95 %: n p ± 1.96 sqrt(n p (1 - p)) = 1000 ± 61.7.
        let half = 1.96 * (n as f64 * 0.01 * 0.99).sqrt();
        assert!((lost - 1000.0).abs() <= half, "{lost}");
        assert_eq!(m.counters().packets_in, n);
    }

    #[test]
    fn gilbert_elliott_loss_comes_in_bursts() {
        let dir = Direction {
            loss: Loss::GilbertElliott {
                p: 0.01,
                r: 0.25,
                bad: 1.0,
                good: 0.0,
            },
            ..Direction::default()
        };
        let mut m = Model::new(&dir, 10);
        let n = 200_000u64;
        let mut lost = Vec::new();
        for i in 0..n {
            let before = m.counters().dropped_loss;
            m.arrive(i, vec![0; 10]);
            lost.push(m.counters().dropped_loss > before);
        }
        let rate = m.counters().dropped_loss as f64 / n as f64;
        let mean = 0.01 / 0.26;
        assert!((rate - mean).abs() < mean * 0.15, "{rate} vs {mean}");
        // The mean burst is 1/r = 4 packets, far above random loss's ~1.04.
        let bursts = lost.windows(2).filter(|w| w[1] && !w[0]).count() as f64;
        let burst = m.counters().dropped_loss as f64 / bursts;
        assert!((3.0..5.0).contains(&burst), "{burst}");
    }

    #[test]
    fn same_seed_same_fate() {
        let dir = Direction {
            loss: Loss::Random(0.3),
            jitter: Duration::from_millis(3),
            delay: Duration::from_millis(5),
            ..Direction::default()
        };
        let fate = |seed| {
            let mut m = Model::new(&dir, seed);
            let mut out = Vec::new();
            for i in 0..500 {
                m.arrive(i * 1000, vec![0; 1]);
            }
            m.poll(u64::MAX / 2, |at, _| out.push(at));
            out
        };
        assert_eq!(fate(1), fate(1));
        assert_ne!(fate(1), fate(2));
    }
}
