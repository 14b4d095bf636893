//! Sharding one run over N agents (`tlslab load --shard I/N`): each agent
//! runs its share of the clients, rate and requests, and owns a disjoint
//! set of client identities.

use std::net::IpAddr;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use tlslab_stats::distributed::ShardId;

use crate::config::LoadConfig;
use crate::error::Error;

/// The most agents one run may have.
pub const MAX_AGENTS: u32 = 10_000;

/// Agent `index` (1-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard(pub ShardId);

impl FromStr for Shard {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why: &str| {
            Error::Invalid(format!(
                "--shard {s}: {why}; give I/N with 1 ≤ I ≤ N ≤ {MAX_AGENTS}, e.g. 1/3 for the first of three agents"
            ))
        };
        let (i, n) = s.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let index: u32 = i.trim().parse().map_err(|_| bad("I is not a number"))?;
        let count: u32 = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        if count == 0 || count > MAX_AGENTS {
            return Err(bad("N is out of range"));
        }
        if index == 0 {
            return Err(bad("agents are numbered from 1"));
        }
        if index > count {
            return Err(bad("I is larger than N"));
        }
        Ok(Shard(ShardId { index, count }))
    }
}

/// 64-bit FNV-1a: a hash that is the same on every host, build and
/// version, unlike `std`'s randomly keyed one.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Shard {
    /// This agent's share of `total` items: `total / N`, plus one for the
    /// first `total % N` agents, so the shares add up to `total`.
    pub fn share(&self, total: u64) -> u64 {
        let (i, n) = (u64::from(self.0.index - 1), u64::from(self.0.count));
        total / n + u64::from(i < total % n)
    }

    /// Returns true if and only if this agent replays the browser of `ip`:
    /// `stable_hash(ip as text) mod N = I − 1`. Every request of one IP
    /// goes to one agent, in log order.
    pub fn owns_ip(&self, ip: &IpAddr) -> bool {
        self.owns_client(&ip.to_string())
    }

    /// Returns true if and only if this agent replays the client whose
    /// access-log identity (an address or a host name, as text) is `id`:
    /// `stable_hash(id) mod N = I − 1`. For an address it is [`Shard::owns_ip`].
    pub fn owns_client(&self, id: &str) -> bool {
        stable_hash(id.as_bytes()) % u64::from(self.0.count) == u64::from(self.0.index - 1)
    }

    /// The seed of this agent's random streams: the run's seed for 1/1,
    /// else a stable mix of the seed and the shard, so that agents'
    /// clients (SPECweb96 paths, e-commerce browsers, think times,
    /// arrivals) are distinct identities.
    pub fn seed(&self, seed: u64) -> u64 {
        if self.0.count == 1 {
            return seed;
        }
        // splitmix64 of seed ⊕ (index, count).
        let mut z = seed
            ^ (u64::from(self.0.index) << 32 | u64::from(self.0.count))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Turns the whole run's configuration into this agent's: its share of
    /// the clients (or, for replay, of the requests in flight), of `-n` and
    /// of the open-loop rate and in-flight cap, and its own seed. A replay
    /// log must already be restricted to [`Shard::owns_ip`].
    pub fn apply(&self, cfg: &mut LoadConfig) -> Result<(), Error> {
        let n = self.0.count;
        let clients = self.share(cfg.clients as u64);
        if clients == 0 {
            return Err(Error::Invalid(format!(
                "--shard {}: -c {} is fewer clients than the {n} agents; give at least -c {n}",
                self.0, cfg.clients
            )));
        }
        cfg.clients = usize::try_from(clients).unwrap_or(usize::MAX);
        if let Some(total) = cfg.requests {
            let mine = self.share(total);
            if mine == 0 {
                return Err(Error::Invalid(format!(
                    "--shard {}: -n {total} is fewer requests than the {n} agents; give at least -n {n}",
                    self.0
                )));
            }
            cfg.requests = Some(mine);
        }
        if let Some(ol) = &mut cfg.open_loop {
            ol.rate /= f64::from(n);
            ol.max_in_flight =
                usize::try_from(self.share(ol.max_in_flight as u64).max(1)).unwrap_or(1);
        }
        cfg.seed = self.seed(cfg.seed);
        Ok(())
    }
}

/// How far in the past a `--start-at` may be and still be honoured (the
/// agent then starts at once).
pub const START_GRACE: Duration = Duration::from_secs(2);

/// Sleeps until the wall-clock time `at`: coarse sleeps, then the last
/// 2 ms in short ones, so agents on one host start within a millisecond.
/// Fails if `at` is more than [`START_GRACE`] in the past.
pub fn sleep_until(at: SystemTime) -> Result<(), Error> {
    loop {
        let now = SystemTime::now();
        match at.duration_since(now) {
            Ok(left) if left > Duration::from_millis(2) => {
                std::thread::sleep(left - Duration::from_millis(2));
            }
            Ok(left) if !left.is_zero() => std::thread::sleep(Duration::from_micros(100)),
            Ok(_) => return Ok(()),
            Err(e) if e.duration() <= START_GRACE => return Ok(()),
            Err(e) => {
                return Err(Error::StartPassed {
                    late: e.duration(),
                    grace: START_GRACE,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Shard {
        x.parse().unwrap()
    }

    #[test]
    fn parses_and_rejects() {
        assert_eq!(s("2/3").0, ShardId { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "1/0", "3", "a/3", "1/b", "", "1/10001"] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains("--shard"), "{bad}: {e}");
        }
    }

    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 2, 7, 100, 101] {
            let sum: u64 = (1..=3).map(|i| s(&format!("{i}/3")).share(total)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(s("1/3").share(7), 3);
        assert_eq!(s("3/3").share(7), 2);
    }

    #[test]
    fn ips_go_to_exactly_one_agent_and_spread() {
        let mut per = [0; 4];
        for k in 0..1000u32 {
            let ip = IpAddr::from(k.to_be_bytes());
            let owners: Vec<u32> = (1..=4)
                .filter(|i| s(&format!("{i}/4")).owns_ip(&ip))
                .collect();
            assert_eq!(owners.len(), 1);
            per[owners[0] as usize - 1] += 1;
        }
        assert!(per.iter().all(|&c| c > 150), "{per:?}");
        // Stable: a fixed value, the same on every host.
        assert_eq!(stable_hash(b"10.0.0.1"), stable_hash(b"10.0.0.1"));
        assert_eq!(stable_hash(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn seeds_differ_per_agent_but_one_agent_keeps_the_seed() {
        assert_eq!(s("1/1").seed(7), 7);
        let seeds: Vec<u64> = (1..=3).map(|i| s(&format!("{i}/3")).seed(7)).collect();
        assert!(seeds[0] != seeds[1] && seeds[1] != seeds[2] && seeds[0] != seeds[2]);
    }

    #[test]
    fn start_in_the_past_beyond_grace_is_an_error() {
        let past = SystemTime::now() - Duration::from_secs(60);
        assert!(sleep_until(past).unwrap_err().to_string().contains("past"));
        let t = SystemTime::now() + Duration::from_millis(30);
        sleep_until(t).unwrap();
        let late = SystemTime::now().duration_since(t).unwrap();
        assert!(late < Duration::from_millis(20), "{late:?}");
    }
}
