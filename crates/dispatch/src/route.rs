//! Where a connection goes: the dispatcher's shared state, the policies'
//! choice of a node, and what a finished handshake teaches the session
//! table.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::config::{Config, Policy};
use crate::hello::RawKeys;
use crate::inspect::{Offer, ServerLearner};
use crate::metrics::{self, Decision, Exposition, Metrics, NodeStats};
use crate::table::{Key, Lookup, SessionTable};

/// What every connection task shares.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) nodes: Vec<NodeStats>,
    pub(crate) table: SessionTable,
    pub(crate) metrics: Metrics,
    pub(crate) rr: AtomicU64,
    pub(crate) rng: AtomicU64,
}

impl Shared {
    pub(crate) fn exposition(&self) -> String {
        metrics::render(&Exposition {
            metrics: &self.metrics,
            nodes: self
                .cfg
                .backends
                .iter()
                .zip(&self.nodes)
                .map(|(b, s)| (b.addr.to_string(), s))
                .collect(),
            held: self.table.counts(),
            policy: self.cfg.policy.name(),
            transport: self.cfg.transport.name(),
            cpu_seconds: tlslab_runtime::process_cpu_time().as_secs_f64(),
        })
    }

    pub(crate) fn up(&self, i: usize) -> bool {
        self.nodes[i].healthy.load(Relaxed)
    }

    /// The healthy node with the fewest open connections (ties: lowest
    /// index after a rotating start, so ties spread); any node if all are
    /// down.
    pub(crate) fn least_loaded(&self, exclude: &[usize]) -> Option<usize> {
        let n = self.nodes.len();
        let start = (self.rr.fetch_add(1, Relaxed) as usize) % n;
        let mut best: Option<(u64, usize)> = None;
        for pass in [true, false] {
            for j in 0..n {
                let i = (start + j) % n;
                if exclude.contains(&i) || (pass && !self.up(i)) {
                    continue;
                }
                let a = self.nodes[i].active.load(Relaxed);
                if best.is_none_or(|(b, _)| a < b) {
                    best = Some((a, i));
                }
            }
            if best.is_some() {
                break;
            }
        }
        best.map(|(_, i)| i)
    }

    fn next_random(&self) -> u64 {
        // xorshift64*; contention-free enough for load spreading.
        let mut x = self.rng.load(Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Relaxed);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The first healthy node at or after `i` in ring order.
    fn healthy_from(&self, i: usize) -> Option<usize> {
        let n = self.nodes.len();
        (0..n).map(|j| (i + j) % n).find(|&k| self.up(k))
    }

    /// The blind 4-tuple hash's node for a client address and port (the
    /// dispatcher's side of the tuple is fixed), healthy if any is.
    pub(crate) fn by_hash(&self, peer: SocketAddr) -> usize {
        let n = self.nodes.len();
        let i = (tuple_hash(peer) % n as u64) as usize;
        self.healthy_from(i).unwrap_or(i)
    }

    /// Where a configured tag routes `bytes`, if one matches.
    pub(crate) fn by_tag(&self, bytes: &[u8]) -> Option<usize> {
        self.cfg
            .backends
            .iter()
            .position(|b| b.tags.iter().any(|t| bytes.starts_with(t)))
    }

    /// Picks a node and names the decision.
    pub(crate) fn choose(
        &self,
        offer: Option<&Offer>,
        raw: Option<&RawKeys>,
        peer: SocketAddr,
    ) -> (Option<usize>, Decision) {
        let n = self.nodes.len();
        match self.cfg.policy {
            Policy::RoundRobin => {
                let i = (self.rr.fetch_add(1, Relaxed) as usize) % n;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            Policy::Random => {
                let i = (self.next_random() % n as u64) as usize;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            Policy::LeastConn => (self.least_loaded(&[]), Decision::NoSession),
            Policy::SourceIp => {
                let h = match peer.ip() {
                    std::net::IpAddr::V4(a) => u64::from(u32::from(a)),
                    std::net::IpAddr::V6(a) => (u128::from(a) % u128::from(u64::MAX)) as u64,
                };
                let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
                let i = (h % n as u64) as usize;
                (self.healthy_from(i).or(Some(i)), Decision::NoSession)
            }
            // `cid` is QUIC's (Config::check); over TCP it would be blind.
            Policy::Blind | Policy::Cid => (Some(self.by_hash(peer)), Decision::NoSession),
            Policy::Session => {
                let Some(offer) = offer else {
                    return (self.least_loaded(&[]), Decision::NoSession);
                };
                let mut mapped_down = false;
                let mut found = None;
                for k in offer.keys() {
                    if let Lookup::Hit(i) = self.table.lookup(k)
                        && i < n
                    {
                        found = Some(i);
                        break;
                    }
                }
                if found.is_none()
                    && let Some(raw) = raw
                {
                    found = raw.all().find_map(|b| self.by_tag(b));
                }
                if let Some(i) = found {
                    if self.up(i) {
                        return (Some(i), Decision::SessionHit);
                    }
                    mapped_down = true;
                }
                if mapped_down {
                    self.metrics.rerouted_down.fetch_add(1, Relaxed);
                }
                let d = if offer.attempt || mapped_down {
                    Decision::SessionMiss
                } else {
                    Decision::NoSession
                };
                (self.least_loaded(&[]), d)
            }
        }
    }
}

/// A hash of a client's address and port (FNV-1a, then a multiplicative
/// mix): stable over a run, no allocation.
pub(crate) fn tuple_hash(peer: SocketAddr) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    match peer.ip() {
        std::net::IpAddr::V4(a) => a.octets().into_iter().for_each(&mut eat),
        std::net::IpAddr::V6(a) => a.octets().into_iter().for_each(&mut eat),
    }
    peer.port().to_be_bytes().into_iter().for_each(&mut eat);
    (h ^ (h >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32
}

/// Books what a finished learner saw: the attempt's outcome and the keys
/// to remember.
pub(crate) fn settle(shared: &Shared, node: usize, l: &mut ServerLearner) {
    let learned = std::mem::take(&mut l.learned);
    if !learned.server_hello {
        return;
    }
    if l.offer_attempt() {
        shared.metrics.attempts.fetch_add(1, Relaxed);
        if learned.resumed {
            shared.metrics.accepted.fetch_add(1, Relaxed);
        }
    }
    // Blind policies do not use the table, so they do not pay for it.
    if shared.cfg.policy == Policy::Session {
        for k in learned.keys {
            learn(shared, k, node);
        }
    }
}

pub(crate) fn learn(shared: &Shared, k: Key, node: usize) {
    shared.table.learn(k, node);
    shared.metrics.learned[k.kind() as usize].fetch_add(1, Relaxed);
}
