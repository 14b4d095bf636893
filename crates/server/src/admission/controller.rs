//! The controller of the full-handshake rate: a pure function of the
//! signals of each tick (see the module docs of `admission`).

use std::time::Duration;

/// The controller of the full-handshake rate: multiplicative decrease
/// from what the server serves when its queue is over the target, back to
/// it and multiplicative increase when the queue is under it.
#[derive(Clone, Debug)]
pub struct Controller {
    /// Full handshakes per second admitted; `None`: unlimited (no
    /// overload seen yet).
    limit: Option<f64>,
    /// The least increase per tick.
    step: f64,
    /// Multiplicative decrease.
    beta: f64,
    /// The limit never goes below this.
    min: f64,
    /// The peak of `served`, decaying 2 % a second: a quarter of it
    /// floors the limit.
    peak: f64,
    /// Full handshakes completed per second in the ticks that found the
    /// CPU saturated, smoothed (exponentially, a time constant of about
    /// half a second): what the server has shown it serves beside its
    /// other work. A decrease starts from it and the limit returns to it
    /// once the queue is back under the target. 0: no saturated tick yet.
    served: f64,
    /// Ticks left before another decrease may happen.
    cooldown: u32,
    target: Duration,
    cpu_high: f64,
    in_flight_cap: u64,
}

/// What the controller sees in one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signals {
    /// Mean queueing delay of the new connections read in the tick (zero
    /// if none): how long their first bytes waited in the kernel before
    /// the server read them, from the kernel's receive timestamp (without
    /// one, from `accept()`). A slow client does not count.
    pub queue_delay: Duration,
    /// CPU saturation in the tick: (CPU time + run-queue wait) over the
    /// CPU budget (0 to 1).
    pub cpu_busy: f64,
    /// Full handshakes in flight at the end of the tick (admitted
    /// resumptions, cheap and never shed, do not count).
    pub in_flight: u64,
    /// Full handshakes admitted per second in the tick.
    pub full_admitted_rate: f64,
    /// Full handshakes completed per second in the tick: at saturation,
    /// what the server can do beside its other work.
    pub full_completed_rate: f64,
    /// Full handshakes shed in the tick.
    pub full_shed: u64,
    /// Datagrams the kernel dropped in the tick because the QUIC socket's
    /// receive buffer was full: its queue overflowed, so whatever its
    /// delay reads, the queue is at least as long as the buffer holds
    /// (the dropped are never timed; TCP: always 0).
    pub queue_drops: u64,
}

impl Controller {
    /// A controller that calls the server overloaded beyond `target`
    /// queue delay at `cpu_high` CPU, or beyond `in_flight_cap` handshakes
    /// in flight.
    pub fn new(target: Duration, cpu_high: f64, in_flight_cap: u64) -> Self {
        Controller {
            limit: None,
            step: 1.0,
            beta: 0.5,
            min: 1.0,
            peak: 0.0,
            served: 0.0,
            cooldown: 0,
            target,
            cpu_high,
            in_flight_cap,
        }
    }

    /// True if `s` shows overload.
    pub fn overloaded(&self, s: &Signals) -> bool {
        (s.queue_delay > self.target && s.cpu_busy >= self.cpu_high)
            || (s.queue_drops > 0 && s.cpu_busy >= self.cpu_high.max(DROPS_BUSY))
            || s.in_flight > self.in_flight_cap
    }

    /// The limit now (full handshakes per second; `None`: unlimited).
    pub fn limit(&self) -> Option<f64> {
        self.limit
    }

    /// What the server has shown it serves: full handshakes per second
    /// completed while saturated, smoothed (0: not seen saturated yet).
    pub fn served(&self) -> f64 {
        self.served
    }

    /// One tick: updates and returns the limit.
    pub fn update(&mut self, s: &Signals) -> Option<f64> {
        // A saturated tick's completions measure capacity (an idle one's
        // measure only the demand or the limit). Smoothed over several
        // ticks: a single 100 ms tick holds a few dozen handshakes, and a
        // tick in which another process took the CPU completes few.
        if s.cpu_busy >= self.cpu_high {
            self.served = if self.served > 0.0 {
                self.served + SMOOTH * (s.full_completed_rate - self.served)
            } else {
                s.full_completed_rate
            };
        }
        self.peak = (self.peak * PEAK_DECAY).max(self.served);
        if !self.overloaded(s) {
            self.cooldown = 0;
            if let Some(l) = self.limit {
                // The queue is under its target. Shedding below what the
                // server has shown it serves loses work it can do (and the
                // shed clients come back as retries, which keeps a
                // too-low limit shedding): back to `served` at once, and
                // while the limit still sheds, up by 10 % a tick
                // (multiplicative increase) until the queue says stop.
                let up = if s.full_shed > 0 {
                    l + self.step.max(l * INCREASE)
                } else {
                    l
                };
                self.limit = Some(up.max(self.served));
            }
            return self.limit;
        }
        if self.cooldown > 0 {
            // The last decrease has not had time to drain the queue.
            self.cooldown -= 1;
            return self.limit;
        }
        // What the server serves at saturation estimates capacity; admit
        // less than that so the queue beyond the target drains within
        // DRAIN (by Little's law the excess is (delay − target) × rate, so
        // the factor is 1 − (delay − target) / DRAIN, between β and 0.95);
        // never below a quarter of the peak, so that shed clients retrying
        // cannot drive the limit to nothing.
        let mut excess = s.queue_delay.saturating_sub(self.target).as_secs_f64();
        if s.queue_drops > 0 {
            // An overflowing queue's excess is not measured (the dropped
            // waited forever): taken as a quarter of DRAIN at least.
            excess = excess.max(DRAIN.as_secs_f64() / 4.0);
        }
        let gradient = (1.0 - excess / DRAIN.as_secs_f64()).clamp(self.beta, 0.95);
        let capacity = if self.served > 0.0 {
            self.served
        } else {
            s.full_completed_rate
        };
        let mut l = (capacity * gradient).max(FLOOR * self.peak).max(self.min);
        if let Some(old) = self.limit {
            l = l.min(old);
        }
        self.limit = Some(l);
        self.step = (l * 0.05).max(1.0);
        self.cooldown = COOLDOWN_TICKS;
        self.limit
    }
}

/// Per-tick decay of the peak completion rate (2 % a second at 10 ticks).
const PEAK_DECAY: f64 = 0.998;
/// The limit's floor as a share of the peak completion rate.
const FLOOR: f64 = 0.25;
/// The time a decrease gives the queue beyond the target to drain.
const DRAIN: Duration = Duration::from_secs(1);
/// The CPU saturation at which the QUIC socket's drops show overload. A
/// server with a fifth of its CPU idle drops datagrams too, in bursts: a
/// 4,096-bit RSA signature (about 2 ms) stalls the thread that reads the
/// socket while Initials keep arriving, and the system's default receive
/// buffer holds under a hundred of them. Cutting the limit for those
/// bursts left a fifth of the CPU unused at 3x (overload --h3).
const DROPS_BUSY: f64 = 0.95;
/// Ticks between two decreases (500 ms).
const COOLDOWN_TICKS: u32 = 4;
/// The weight of a saturated tick in `served` (a time constant of about
/// five ticks).
const SMOOTH: f64 = 0.2;
/// The multiplicative increase per tick while the limit sheds and the
/// queue is under its target.
const INCREASE: f64 = 0.1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_queue_is_overload_when_the_cpu_is_busy() {
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 100);
        // A short queue (under the target) that drops: the buffer is full.
        let s = Signals {
            queue_delay: Duration::from_millis(2),
            cpu_busy: 0.95,
            full_completed_rate: 200.0,
            queue_drops: 30,
            ..Signals::default()
        };
        assert!(ctl.overloaded(&s));
        // Cut by at least a quarter from what is served.
        let l = ctl.update(&s).expect("a limit");
        assert!(l <= 0.75 * 200.0 + 1e-9, "{l}");
        // Drops with an idle CPU are a burst, not overload; so are drops
        // with a tenth of it idle (a long signature stalled the reader),
        // though a queue over its target at that CPU is overload.
        let idle = Signals { cpu_busy: 0.3, ..s };
        assert!(!ctl.overloaded(&idle));
        let bursty = Signals { cpu_busy: 0.9, ..s };
        assert!(!ctl.overloaded(&bursty));
        let queued = Signals {
            queue_delay: Duration::from_millis(20),
            queue_drops: 0,
            ..bursty
        };
        assert!(ctl.overloaded(&queued));
    }

    /// A simulated server: it completes at most `capacity` full handshakes
    /// per second on one CPU; admitted work beyond that queues, and a new
    /// connection waits for the queue (its queueing delay).
    struct Sim {
        capacity: f64,
        queue: f64,
    }

    impl Sim {
        fn new(capacity: f64) -> Sim {
            Sim {
                capacity,
                queue: 0.0,
            }
        }

        /// One 100 ms tick with `offered` full handshakes per second and
        /// the controller's limit; returns the signals and the completed
        /// handshakes per second.
        fn tick(&mut self, offered: f64, limit: Option<f64>) -> (Signals, f64) {
            let dt = 0.1;
            let admitted = limit.map_or(offered, |l| offered.min(l));
            let work = self.queue + admitted * dt;
            let done = work.min(self.capacity * dt);
            self.queue = work - done;
            let s = Signals {
                queue_delay: Duration::from_secs_f64(self.queue / self.capacity),
                cpu_busy: done / (self.capacity * dt),
                in_flight: self.queue as u64,
                full_admitted_rate: admitted,
                full_completed_rate: done / dt,
                full_shed: ((offered - admitted) * dt) as u64,
                queue_drops: 0,
            };
            (s, done / dt)
        }

        /// One 100 ms tick in which the server got no CPU (another
        /// process ran): nothing completes, arrivals queue.
        fn stall(&mut self, offered: f64, limit: Option<f64>) -> Signals {
            let dt = 0.1;
            let admitted = limit.map_or(offered, |l| offered.min(l));
            self.queue += admitted * dt;
            Signals {
                queue_delay: Duration::from_secs_f64(self.queue / self.capacity),
                cpu_busy: 1.0,
                in_flight: self.queue as u64,
                full_admitted_rate: admitted,
                full_completed_rate: 0.0,
                full_shed: ((offered - admitted) * dt) as u64,
                queue_drops: 0,
            }
        }
    }

    /// Issue 29: at capacity, one tick in which the server got no CPU set
    /// the limit from that tick's completions (none) to its floor, a
    /// quarter of the peak, and the additive increase took seconds to
    /// climb back: the gate shed much of what the server could serve.
    #[test]
    fn a_stall_at_capacity_sheds_little_of_what_the_server_can_serve() {
        let capacity = 1000.0;
        let offered = 0.95 * capacity;
        let mut sim = Sim::new(capacity);
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 10_000);
        let mut limit = None;
        for _ in 0..50 {
            limit = ctl.update(&sim.tick(offered, limit).0);
        }
        assert_eq!(limit, None, "nothing to shed below capacity");
        limit = ctl.update(&sim.stall(offered, limit));
        let mut shed = 0;
        for _ in 0..50 {
            let (s, _) = sim.tick(offered, limit);
            shed += s.full_shed;
            limit = ctl.update(&s);
        }
        // 5 s after the stall: at most 5 % of the offered handshakes shed,
        // and the limit back above the offered rate.
        assert!(
            shed as f64 <= 0.05 * offered * 5.0,
            "{shed} shed of {}",
            offered * 5.0
        );
        assert!(limit.is_some_and(|l| l >= offered), "limit {limit:?}");
        assert!(sim.queue < 1.0, "queue {}", sim.queue);
    }

    #[test]
    fn the_controller_converges_near_capacity_under_3x_load() {
        let capacity = 1000.0;
        let mut sim = Sim::new(capacity);
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 10_000);
        let mut limit = None;
        let mut done = Vec::new();
        let mut delays = Vec::new();
        for _ in 0..600 {
            let (s, d) = sim.tick(3.0 * capacity, limit);
            limit = ctl.update(&s);
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!("{d:.0} {limit:?} {:?}", s.queue_delay);
            }
            done.push(d);
            delays.push(s.queue_delay);
        }
        // After the first 10 s: throughput near capacity, queue bounded.
        let tail = &done[100..];
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!(mean >= 0.85 * capacity, "mean {mean}");
        let worst = delays[100..].iter().max().unwrap();
        assert!(*worst < Duration::from_millis(100), "{worst:?}");
        let l = ctl.limit().unwrap();
        assert!(l > 0.7 * capacity && l < 1.3 * capacity, "limit {l}");
        // Without control the queue grows without bound.
        let mut open = Sim::new(capacity);
        let mut last = Signals::default();
        for _ in 0..100 {
            last = open.tick(3.0 * capacity, None).0;
        }
        assert!(last.queue_delay > Duration::from_secs(10));
    }

    #[test]
    fn the_controller_recovers_when_load_drops_and_follows_it_up() {
        let capacity = 500.0;
        let mut sim = Sim::new(capacity);
        let mut ctl = Controller::new(Duration::from_millis(10), 0.8, 10_000);
        let mut limit = None;
        for _ in 0..200 {
            limit = ctl.update(&sim.tick(4.0 * capacity, limit).0);
        }
        // Half capacity offered: nothing shed, queue drains, limit kept.
        let mut last = (Signals::default(), 0.0);
        for _ in 0..50 {
            last = sim.tick(0.5 * capacity, limit);
            limit = ctl.update(&last.0);
        }
        assert_eq!(last.0.full_shed, 0);
        assert!((last.1 - 0.5 * capacity).abs() < 1.0, "{}", last.1);
        assert!(!ctl.overloaded(&last.0));
        // Idle CPU: queue delay alone is not overload.
        let quiet = Signals {
            queue_delay: Duration::from_secs(1),
            cpu_busy: 0.1,
            ..Default::default()
        };
        assert!(!ctl.overloaded(&quiet));
    }
}
