//! The model of one direction of an emulated path, with no I/O: given when
//! bytes arrived, when may they leave. [`Link::schedule`] is a pure
//! function of the arrival time, the length, the [`Conditions`] and a
//! seeded RNG, so it is tested without sockets or clocks.

use std::time::{Duration, Instant};

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::conditions::Conditions;

/// TCP's maximum segment size on an Ethernet path with timestamps (1500 −
/// 20 − 20 − 12). Bandwidth, jitter and loss apply per segment of this
/// size, as a router and netem apply them per packet.
pub const MSS: usize = 1448;

/// Segments whose release times fall within this of each other are
/// written together: tokio's timer has millisecond resolution, so waking
/// for each would cost CPU and gain no accuracy.
const COALESCE: Duration = Duration::from_micros(500);

/// One direction of a path: where its bottleneck is busy until, when its
/// last segment leaves (TCP delivers in order, so nothing may overtake it),
/// and the RNG for jitter and loss.
#[derive(Debug)]
pub struct Link {
    cond: Conditions,
    link_free: Option<Instant>,
    last_release: Option<Instant>,
    rng: ChaCha8Rng,
}

/// Bytes that may be delivered at `release`: one or more whole segments of
/// one read, coalesced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// When the receiver may see these bytes.
    pub release: Instant,
    /// Offset into the read that produced them.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// How many of the segments in this span were "lost" and retransmitted.
    pub lost: u32,
    /// How many segments the span holds.
    pub segments: u32,
}

impl Link {
    /// A link with these conditions; `seed` makes jitter and loss
    /// repeatable.
    pub fn new(cond: Conditions, seed: u64) -> Link {
        Link {
            cond,
            link_free: None,
            last_release: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Schedules `len` bytes that arrived at `arrival`, cut into segments
    /// of [`MSS`] bytes. Each segment:
    /// - waits for the bottleneck (if a bandwidth is set) and takes
    ///   `8 × size / bandwidth` to cross it;
    /// - then takes the one-way delay plus a jitter drawn uniformly from
    ///   ±jitter (never below zero);
    /// - if "lost" (probability `loss`), arrives `loss_delay` later, as a
    ///   retransmission after a timeout would;
    /// - never arrives before the segment sent before it (TCP is in
    ///   order: a late segment holds back those behind it).
    ///
    /// Returns spans in order, covering `0..len`.
    pub fn schedule(&mut self, arrival: Instant, len: usize) -> Vec<Span> {
        let mut spans: Vec<Span> = Vec::new();
        let mut start = 0;
        while start < len {
            let end = (start + MSS).min(len);
            let (release, lost) = self.segment(arrival, end - start);
            match spans.last_mut() {
                Some(last) if release.saturating_duration_since(last.release) < COALESCE => {
                    last.end = end;
                    last.release = release;
                    last.lost += u32::from(lost);
                    last.segments += 1;
                }
                _ => spans.push(Span {
                    release,
                    start,
                    end,
                    lost: u32::from(lost),
                    segments: 1,
                }),
            }
            start = end;
        }
        spans
    }

    /// When a FIN that arrived at `arrival` may be delivered: after all
    /// data, one delay later (a FIN is not lost, and takes no bandwidth).
    pub fn schedule_fin(&mut self, arrival: Instant) -> Instant {
        let depart = self.link_free.map_or(arrival, |f| f.max(arrival));
        self.in_order(depart + self.cond.delay)
    }

    fn segment(&mut self, arrival: Instant, size: usize) -> (Instant, bool) {
        let depart = match self.cond.bandwidth {
            Some(bw) => {
                let start = self.link_free.map_or(arrival, |f| f.max(arrival));
                let done = start + bw.transmission(size);
                self.link_free = Some(done);
                done
            }
            None => arrival,
        };
        let mut release = depart + self.cond.delay;
        if !self.cond.jitter.is_zero() {
            let j = self.cond.jitter.as_nanos() as i64;
            let d = self.rng.random_range(-j..=j);
            release = if d >= 0 {
                release + Duration::from_nanos(d as u64)
            } else {
                // Never earlier than leaving the bottleneck.
                release
                    .checked_sub(Duration::from_nanos(d.unsigned_abs()))
                    .map_or(depart, |r| r.max(depart))
            };
        }
        let lost = self.cond.loss > 0.0 && self.rng.random_bool(self.cond.loss);
        if lost {
            release += self.cond.retransmit_delay();
        }
        (self.in_order(release), lost)
    }

    fn in_order(&mut self, release: Instant) -> Instant {
        let release = self.last_release.map_or(release, |l| l.max(release));
        self.last_release = Some(release);
        release
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::Bandwidth;

    fn cond(delay_ms: u64) -> Conditions {
        Conditions {
            delay: Duration::from_millis(delay_ms),
            ..Conditions::default()
        }
    }

    /// 1 Mbit/s (an MSS takes 11.584 ms) and 10 ms of delay.
    fn one_mbit() -> Conditions {
        Conditions {
            bandwidth: Some(Bandwidth::bits_per_sec(1_000_000)),
            ..cond(10)
        }
    }

    #[test]
    fn a_read_without_bandwidth_leaves_whole_one_delay_later() {
        let t0 = Instant::now();
        let mut link = Link::new(cond(50), 1);
        let spans = link.schedule(t0, 10_000);
        assert_eq!(spans.len(), 1, "{spans:?}");
        assert_eq!(spans[0].release, t0 + Duration::from_millis(50));
        assert_eq!((spans[0].start, spans[0].end), (0, 10_000));
        assert_eq!(spans[0].segments, 7);
    }

    #[test]
    fn bandwidth_serialises_segments_and_queues_behind_earlier_reads() {
        // 1 Mbit/s: an MSS takes 11.584 ms.
        let t0 = Instant::now();
        let mut link = Link::new(one_mbit(), 1);
        let spans = link.schedule(t0, 3 * MSS);
        assert_eq!(spans.len(), 3);
        let tx = Duration::from_nanos(11_584_000);
        for (i, s) in spans.iter().enumerate() {
            assert_eq!(
                s.release,
                t0 + tx * (i as u32 + 1) + Duration::from_millis(10)
            );
        }
        // A read arriving while the link is busy waits for it.
        let later = link.schedule(t0 + Duration::from_millis(1), 100);
        let tx100 = Duration::from_nanos(800_000);
        assert_eq!(
            later[0].release,
            t0 + tx * 3 + tx100 + Duration::from_millis(10)
        );
        // Throughput over a long transfer is the bandwidth.
        let mut link = Link::new(one_mbit(), 1);
        let spans = link.schedule(t0, 125_000);
        let last = spans.last().unwrap().release - Duration::from_millis(10);
        let secs = (last - t0).as_secs_f64();
        assert!(
            (secs - 1.0).abs() < 0.001,
            "125 kB at 1 Mbit/s took {secs} s"
        );
    }

    #[test]
    fn jitter_stays_within_bounds_and_never_reorders() {
        let c = Conditions {
            jitter: Duration::from_millis(20),
            ..cond(50)
        };
        let t0 = Instant::now();
        let mut link = Link::new(c, 7);
        let mut prev = t0;
        let mut spread = Vec::new();
        for i in 0..2_000u32 {
            let arrival = t0 + Duration::from_millis(u64::from(i) * 100);
            let s = link.schedule(arrival, 100);
            assert!(s[0].release >= prev, "reordered at {i}");
            prev = s[0].release;
            spread.push((s[0].release - arrival).as_secs_f64() * 1e3);
        }
        let min = spread.iter().cloned().fold(f64::MAX, f64::min);
        let max = spread.iter().cloned().fold(f64::MIN, f64::max);
        assert!((30.0..=30.5).contains(&min), "min one-way {min} ms");
        assert!((69.5..=70.0).contains(&max), "max one-way {max} ms");
        let mean = spread.iter().sum::<f64>() / spread.len() as f64;
        assert!((mean - 50.0).abs() < 1.0, "mean one-way {mean} ms");
    }

    #[test]
    fn loss_adds_the_retransmission_delay_and_holds_back_later_segments() {
        let c = Conditions {
            loss: 1.0,
            loss_delay: Some(Duration::from_millis(300)),
            ..cond(50)
        };
        let t0 = Instant::now();
        let mut link = Link::new(c, 1);
        let s = link.schedule(t0, 100);
        assert_eq!(s[0].lost, 1);
        assert_eq!(s[0].release, t0 + Duration::from_millis(350));
        // With 10 % loss, about a tenth of segments are late, and every
        // segment behind a late one is held back with it.
        let c = Conditions { loss: 0.1, ..c };
        let mut link = Link::new(c, 3);
        let mut lost = 0;
        for i in 0..10_000u64 {
            let s = link.schedule(t0 + Duration::from_secs(i), 100);
            lost += s[0].lost;
        }
        assert!((900..1100).contains(&lost), "{lost} of 10000 lost at 10 %");
    }

    #[test]
    fn the_default_retransmission_delay_is_an_rto() {
        // Linux: RTO = RTT + max(4 × RTTVAR, 200 ms) ≈ RTT + 200 ms.
        assert_eq!(cond(50).retransmit_delay(), Duration::from_millis(300));
    }

    #[test]
    fn a_fin_follows_the_data() {
        let t0 = Instant::now();
        let mut link = Link::new(one_mbit(), 1);
        let data = link.schedule(t0, 2 * MSS);
        let fin = link.schedule_fin(t0);
        assert!(fin >= data.last().unwrap().release);
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let c = Conditions {
            jitter: Duration::from_millis(5),
            loss: 0.2,
            ..cond(20)
        };
        let t0 = Instant::now();
        let run = |seed| {
            let mut link = Link::new(c, seed);
            (0..100)
                .map(|i| link.schedule(t0 + Duration::from_millis(i * 7), 3000))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }
}
