//! Session stores: a bounded server cache, a client store the load engine
//! steers, and a ticketer that counts what it issues.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;
use rustls::NamedGroup;
use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;
use rustls::server::{ProducesTickets, StoresServerSessions};

/// Counters of a [`ServerSessionCache`], as of one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Lookups that found a live entry.
    pub hits: u64,
    /// Lookups that found nothing, or only an expired entry.
    pub misses: u64,
    /// Entries dropped because the cache was full (least recently used first).
    pub evictions: u64,
    /// Entries dropped because they outlived the timeout.
    pub expirations: u64,
    /// Entries stored.
    pub puts: u64,
    /// Entries held now (expired ones not yet noticed included).
    pub size: u64,
    /// The configured capacity.
    pub capacity: u64,
}

struct Entry {
    value: Vec<u8>,
    stored: Instant,
}

type Shard = Mutex<LruCache<Vec<u8>, Entry>>;

/// A server session cache: bounded in size, with a time-to-live, O(1)
/// lookups and inserts, and safe to share between threads.
///
/// Entries live in up to 64 independent LRU maps (shards, chosen by a hash
/// of the session key), each behind its own mutex, so concurrent handshakes
/// rarely contend. When a shard is full its least recently used entry is
/// evicted, so the cache as a whole is approximately LRU and a shard may
/// evict slightly before the whole cache is full. An entry older than the timeout is never
/// returned: it is removed when next looked up (counted as an expiration and
/// a miss) or evicted by LRU order.
///
/// As rustls requires of `StoresServerSessions`, [`take`] reliably removes
/// the entry it returns, so TLS 1.3 stateful tickets are single-use.
///
/// [`take`]: StoresServerSessions::take
pub struct ServerSessionCache {
    shards: Box<[Shard]>,
    hasher: std::collections::hash_map::RandomState,
    ttl: Duration,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    expirations: AtomicU64,
    puts: AtomicU64,
}

impl std::fmt::Debug for ServerSessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSessionCache")
            .field("capacity", &self.capacity)
            .field("ttl", &self.ttl)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ServerSessionCache {
    /// A cache of at most `capacity` sessions (at least 1), each kept for at
    /// most `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Arc<Self> {
        let capacity = capacity.max(1);
        // Enough shards to spread contention, but never a shard of zero size.
        // Enough shards to spread contention; every shard holds at least one
        // entry and the shard sizes add up to exactly `capacity`.
        let nshards = capacity.min(64);
        let mut shards = Vec::with_capacity(nshards);
        for i in 0..nshards {
            let size = capacity / nshards + usize::from(i < capacity % nshards);
            let size = NonZeroUsize::new(size).unwrap_or(NonZeroUsize::MIN);
            shards.push(Mutex::new(LruCache::new(size)));
        }
        Arc::new(ServerSessionCache {
            shards: shards.into_boxed_slice(),
            hasher: Default::default(),
            ttl,
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            expirations: AtomicU64::new(0),
            puts: AtomicU64::new(0),
        })
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[(self.hasher.hash_one(key) as usize) % self.shards.len()]
    }

    /// The configured time-to-live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The current counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            expirations: self.expirations.load(Ordering::Relaxed),
            puts: self.puts.load(Ordering::Relaxed),
            size: self.shards.iter().map(|s| s.lock().len() as u64).sum(),
            capacity: self.capacity as u64,
        }
    }

    /// Returns true if a live entry for `key` is held, without counting a
    /// lookup or touching the LRU order.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.shard(key)
            .lock()
            .peek(key)
            .is_some_and(|e| e.stored.elapsed() <= self.ttl)
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let mut shard = self.shard(key).lock();
        let live = shard.peek(key).map(|e| e.stored.elapsed() <= self.ttl);
        let out = match live {
            None => None,
            Some(false) => {
                shard.pop(key);
                self.expirations.fetch_add(1, Ordering::Relaxed);
                None
            }
            Some(true) if remove => shard.pop(key).map(|e| e.value),
            Some(true) => shard.get(key).map(|e| e.value.clone()),
        };
        drop(shard);
        match out {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        out
    }
}

impl StoresServerSessions for ServerSessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut shard = self.shard(&key).lock();
        let evicted = shard.push(
            key.clone(),
            Entry {
                value,
                stored: Instant::now(),
            },
        );
        drop(shard);
        self.puts.fetch_add(1, Ordering::Relaxed);
        if let Some((old_key, _)) = evicted {
            // `push` also returns the old value when it replaced the same key.
            if old_key != key {
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// Counts of a [`CountingTicketer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TicketStats {
    /// Tickets sealed (issued).
    pub issued: u64,
    /// Tickets that decrypted (accepted for resumption).
    pub accepted: u64,
    /// Tickets that did not decrypt (expired key, garbage, other server).
    pub rejected: u64,
}

/// Wraps a ticketer and counts tickets issued, accepted and rejected.
pub struct CountingTicketer {
    inner: Arc<dyn ProducesTickets>,
    issued: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
}

impl std::fmt::Debug for CountingTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingTicketer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl CountingTicketer {
    /// Counts the tickets of `inner`.
    pub fn new(inner: Arc<dyn ProducesTickets>) -> Arc<Self> {
        Arc::new(CountingTicketer {
            inner,
            issued: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// The current counts.
    pub fn stats(&self) -> TicketStats {
        TicketStats {
            issued: self.issued.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

impl ProducesTickets for CountingTicketer {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let r = self.inner.encrypt(plain);
        if r.is_some() {
            self.issued.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let r = self.inner.decrypt(cipher);
        match r {
            Some(_) => self.accepted.fetch_add(1, Ordering::Relaxed),
            None => self.rejected.fetch_add(1, Ordering::Relaxed),
        };
        r
    }
}

/// How many TLS 1.3 tickets a [`ClientSessions`] keeps per server.
pub const TICKETS_PER_SERVER: usize = 8;

#[derive(Default)]
struct ClientState {
    kx_hint: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    tls13: VecDeque<Tls13ClientSessionValue>,
}

/// The session store of one simulated client, steered per connection.
///
/// A real browser keeps the sessions it was given; so does this store,
/// always, so that fresh single-use TLS 1.3 tickets are on hand. Whether the
/// *next* handshake offers one of them is set by [`set_offer`]: with offers
/// off, lookups answer "nothing stored" and the handshake is full.
/// [`take_offered`] then tells whether the handshake did offer resumption.
///
/// One store serves one client, whose connections are sequential; it keeps
/// state for a single server (the last name it saw) as the load engine
/// drives one target per client.
///
/// [`set_offer`]: ClientSessions::set_offer
/// [`take_offered`]: ClientSessions::take_offered
#[derive(Default)]
pub struct ClientSessions {
    offer: AtomicBool,
    offered: AtomicBool,
    state: Mutex<ClientState>,
}

impl std::fmt::Debug for ClientSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSessions")
            .field("offer", &self.offer.load(Ordering::Relaxed))
            .field("has_session", &self.has_session())
            .finish()
    }
}

impl ClientSessions {
    /// An empty store with offers off.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Whether the next handshake may offer a stored session.
    pub fn set_offer(&self, offer: bool) {
        self.offer.store(offer, Ordering::Relaxed);
        self.offered.store(false, Ordering::Relaxed);
    }

    /// Returns true if and only if a handshake since the last
    /// [`set_offer`](Self::set_offer) was handed a stored session to offer.
    pub fn take_offered(&self) -> bool {
        self.offered.swap(false, Ordering::Relaxed)
    }

    /// Returns true if and only if a TLS 1.2 session or a TLS 1.3 ticket is
    /// held, so a resumption could be offered.
    pub fn has_session(&self) -> bool {
        let s = self.state.lock();
        s.tls12.is_some() || !s.tls13.is_empty()
    }

    /// Forgets every stored session (a "new browser").
    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.tls12 = None;
        s.tls13.clear();
    }

    fn offering(&self) -> bool {
        self.offer.load(Ordering::Relaxed)
    }
}

impl ClientSessionStore for ClientSessions {
    fn set_kx_hint(&self, _server_name: ServerName<'static>, group: NamedGroup) {
        self.state.lock().kx_hint = Some(group);
    }

    fn kx_hint(&self, _server_name: &ServerName<'_>) -> Option<NamedGroup> {
        self.state.lock().kx_hint
    }

    fn set_tls12_session(&self, _server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.state.lock().tls12 = Some(value);
    }

    fn tls12_session(&self, _server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        if !self.offering() {
            return None;
        }
        let v = self.state.lock().tls12.clone();
        if v.is_some() {
            self.offered.store(true, Ordering::Relaxed);
        }
        v
    }

    fn remove_tls12_session(&self, _server_name: &ServerName<'static>) {
        self.state.lock().tls12 = None;
    }

    fn insert_tls13_ticket(
        &self,
        _server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        let mut s = self.state.lock();
        if s.tls13.len() == TICKETS_PER_SERVER {
            s.tls13.pop_front();
        }
        s.tls13.push_back(value);
    }

    fn take_tls13_ticket(
        &self,
        _server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        if !self.offering() {
            return None;
        }
        // Newest first: it is the least likely to have expired.
        let v = self.state.lock().tls13.pop_back();
        if v.is_some() {
            self.offered.store(true, Ordering::Relaxed);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_bounded_and_counts_evictions() {
        let c = ServerSessionCache::new(100, Duration::from_secs(60));
        for i in 0u32..1000 {
            c.put(i.to_be_bytes().to_vec(), vec![1]);
        }
        let s = c.stats();
        assert!(s.size <= 100, "{s:?}");
        assert_eq!(s.puts, 1000);
        assert_eq!(s.evictions, 1000 - s.size);
        // The newest entry survives.
        assert!(c.get(&999u32.to_be_bytes()).is_some());
    }

    #[test]
    fn take_removes_and_get_does_not() {
        let c = ServerSessionCache::new(10, Duration::from_secs(60));
        c.put(b"k".to_vec(), b"v".to_vec());
        assert_eq!(c.get(b"k").as_deref(), Some(&b"v"[..]));
        assert_eq!(c.take(b"k").as_deref(), Some(&b"v"[..]));
        assert_eq!(c.take(b"k"), None);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.size), (2, 1, 0));
    }

    #[test]
    fn expired_entries_are_misses() {
        let c = ServerSessionCache::new(10, Duration::from_millis(1));
        c.put(b"k".to_vec(), b"v".to_vec());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.get(b"k"), None);
        let s = c.stats();
        assert_eq!((s.expirations, s.misses, s.size), (1, 1, 0));
    }

    #[test]
    fn cache_is_safe_under_concurrency() {
        let c = ServerSessionCache::new(1000, Duration::from_secs(60));
        std::thread::scope(|s| {
            for t in 0u32..4 {
                let c = &c;
                s.spawn(move || {
                    for i in 0u32..5000 {
                        let k = (t * 10_000 + i).to_be_bytes().to_vec();
                        c.put(k.clone(), vec![0; 8]);
                        assert!(c.get(&k).is_some() || c.stats().evictions > 0);
                    }
                });
            }
        });
        let s = c.stats();
        assert_eq!(s.puts, 20_000);
        assert!(s.size <= 1000);
        assert_eq!(s.size + s.evictions, 20_000);
    }

    #[test]
    fn small_capacities_hold_exactly_capacity() {
        for cap in [1usize, 2, 3, 63, 64, 65, 1000] {
            let c = ServerSessionCache::new(cap, Duration::from_secs(60));
            for i in 0u32..(cap as u32 * 20) {
                c.put(i.to_be_bytes().to_vec(), vec![]);
            }
            assert!(c.stats().size <= cap as u64, "cap {cap}: {:?}", c.stats());
        }
    }
}
