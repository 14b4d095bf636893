//! A session cache shared by a cluster through Redis
//! (`--session-cache redis://HOST:PORT[/DB]` or `memory:N+redis://…`).
//!
//! rustls's `StoresServerSessions` is synchronous and runs inside the
//! handshake, so this store never talks to Redis from it:
//! - before the handshake, the prefetch stage (`prefetch.rs`) reads the ClientHello, and
//!   [`RedisStore::prefetch`] GETs the offered session ID or PSK identity
//!   (bounded by `--redis-timeout`) and stages the value in the local
//!   layer, where rustls then finds it;
//! - `put` queues a `SET … PX ttl NX` on a bounded queue that one task
//!   drains in pipelines; a full queue drops the put and counts it;
//! - a TLS 1.3 stateful ticket (single use, and the only way to 0-RTT) is
//!   claimed before the handshake with an atomic `GETDEL` of its PSK
//!   identity, in every mode, and `take` returns only a claimed ticket,
//!   never a copy in the memory layer. So a ticket resumes, and its 0-RTT
//!   data is answered, at most once in the whole cluster (Redis ≥ 6.2): a
//!   replay to the node that issued the ticket finds it claimed already,
//!   as a replay to any other node does. The price is that a TLS 1.3
//!   resumption always waits for one Redis round trip, even when the
//!   memory layer holds the ticket, and that it is a full handshake while
//!   Redis is unreachable; TLS 1.2 session IDs (multi-use) keep the memory
//!   layer's local hits.
//! - A claim that finds nothing leaves a tombstone (an empty value, with
//!   the sessions' TTL) in the same atomic step ([`CLAIM`]), and a put never
//!   overwrites a key (`NX`). Otherwise a ticket still on its way to Redis
//!   when its client resumed elsewhere (a full handshake, the 0-RTT request
//!   retried in 1-RTT and answered) would arrive afterwards, and a replay
//!   of that first flight would then claim it and be answered in 0-RTT: the
//!   same request twice. `tests/quic_replay.rs` saw exactly that.
//!
//! Failure is a full handshake, never an error: a GET that fails or
//! times out is a miss, counted as an error or a timeout. After a failed
//! GET the store stops asking Redis for a backoff that doubles from 50 ms
//! to 2 s (counted as errors, too), while the redis crate's connection
//! manager reconnects.
//!
//! An outage is logged, not per failure: a warning at the first failure,
//! then one every 30 s with the count of failures since, and one line when
//! Redis answers again ([`Outage`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rustls::server::StoresServerSessions;
use tlslab_crypto::store::ServerSessionCache;
use tokio::sync::mpsc;

use crate::config::RemoteCache;
use crate::error::{Error, Result};

/// How many puts and deletes may wait for Redis.
const QUEUE: usize = 8192;
/// How many queued writes go out in one pipeline.
const BATCH: usize = 128;
/// How long a pipeline of writes may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// The capacity of the staging area when there is no memory layer, and of
/// the claimed tickets.
const STAGING: usize = 16_384;
/// How long a staged (prefetched) value waits for its handshake.
const STAGING_TTL: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often a continuing outage is logged again.
const OUTAGE_REPEAT: Duration = Duration::from_secs(30);

/// What one failed exchange with Redis cost: a lookup (failed, or
/// skipped while backing off; counted in `tlslab_redis_errors_total`), or
/// a pipeline of session writes (each counted in
/// `tlslab_redis_write_errors_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lost {
    Lookup,
    Writes(u64),
}

/// What an outage cost so far: the units of the two metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Losses {
    /// Lookups that failed or were skipped.
    lookups: u64,
    /// Session writes lost.
    writes: u64,
}

impl Losses {
    fn add(&mut self, l: Lost) {
        match l {
            Lost::Lookup => self.lookups += 1,
            Lost::Writes(n) => self.writes += n,
        }
    }
}

impl std::fmt::Display for Losses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} lookups failed or skipped (tlslab_redis_errors_total), {} session writes lost (tlslab_redis_write_errors_total)",
            self.lookups, self.writes
        )
    }
}

/// A line about a Redis outage to log.
#[derive(Clone, Debug, PartialEq, Eq)]
enum OutageLine {
    /// The first failure of an outage.
    Down,
    /// Still down: what was lost since the last line, and since when.
    Still { lost: Losses, down_for: Duration },
    /// Answering again after `down_for`, with this much lost in all.
    Back { lost: Losses, down_for: Duration },
}

/// Rate-limits the log of a Redis outage: the first failure, then at most
/// one line every [`OUTAGE_REPEAT`] with what was lost since, and one line
/// at recovery. The losses are counted in the units of the metrics, so the
/// lines and the metrics agree. Time is given, so tests need no clock.
#[derive(Debug, Default)]
struct Outage {
    /// When the outage began (`None`: Redis is up).
    since: Option<Instant>,
    /// When the last line was logged.
    logged: Option<Instant>,
    /// Lost since the last line.
    unlogged: Losses,
    /// Lost in the whole outage.
    total: Losses,
}

impl Outage {
    fn failure(&mut self, now: Instant, lost: Lost) -> Option<OutageLine> {
        self.total.add(lost);
        let Some(since) = self.since else {
            self.since = Some(now);
            self.logged = Some(now);
            self.unlogged = Losses::default();
            return Some(OutageLine::Down);
        };
        self.unlogged.add(lost);
        let last = self.logged.unwrap_or(since);
        if now.duration_since(last) < OUTAGE_REPEAT {
            return None;
        }
        self.logged = Some(now);
        Some(OutageLine::Still {
            lost: std::mem::take(&mut self.unlogged),
            down_for: now.duration_since(since),
        })
    }

    fn success(&mut self, now: Instant) -> Option<OutageLine> {
        let since = self.since.take()?;
        let line = OutageLine::Back {
            lost: self.total,
            down_for: now.duration_since(since),
        };
        *self = Outage::default();
        Some(line)
    }
}

/// Counters of the Redis session store, as of one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RedisStats {
    /// Prefetch GETs that found a session in Redis.
    pub hits: u64,
    /// Prefetch GETs that found nothing.
    pub misses: u64,
    /// GETs that failed (connection refused, reset, a Redis error), and
    /// lookups skipped while backing off after a failure.
    pub errors: u64,
    /// GETs that did not answer within `--redis-timeout`.
    pub timeouts: u64,
    /// Lookups answered by the memory layer without asking Redis (TLS 1.2
    /// session IDs only: a TLS 1.3 ticket is always claimed in Redis).
    pub local_hits: u64,
    /// Puts written to Redis.
    pub writes: u64,
    /// Puts that failed or timed out at Redis (sessions not shared).
    pub write_errors: u64,
    /// Puts dropped because the queue to Redis was full.
    pub put_drops: u64,
    /// GET latency, median, in microseconds (answered GETs only).
    pub get_p50_us: u64,
    /// GET latency, 99th percentile, in microseconds.
    pub get_p99_us: u64,
}

/// A session to write to Redis: key, value.
struct Write(Vec<u8>, Vec<u8>);

/// A session store whose sessions live in Redis and, staged or as a
/// memory layer, in this process.
pub struct RedisStore {
    spec: RemoteCache,
    local: Arc<ServerSessionCache>,
    /// TLS 1.3 tickets claimed in Redis by `GETDEL` for a handshake under
    /// way: the only ones `take` returns.
    claimed: Arc<ServerSessionCache>,
    layered: bool,
    client: redis::Client,
    conn: OnceLock<ConnectionManager>,
    queue: mpsc::Sender<Write>,
    queue_rx: Mutex<Option<mpsc::Receiver<Write>>>,
    started: Instant,
    /// Milliseconds since `started` before which GETs are skipped.
    down_until: AtomicU64,
    backoff_ms: AtomicU64,
    /// Whether an outage is under way (read without the lock on success).
    down: AtomicBool,
    outage: Mutex<Outage>,
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    local_hits: AtomicU64,
    writes: AtomicU64,
    write_errors: AtomicU64,
    put_drops: AtomicU64,
    latency: Mutex<hdrhistogram::Histogram<u64>>,
    /// GET latency buckets for `/metrics` (seconds).
    pub(crate) histogram: prometheus_client::metrics::histogram::Histogram,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.spec.url)
            .field("layered", &self.layered)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RedisStore {
    /// A store for `spec`; nothing is connected until [`RedisStore::start`].
    pub(crate) fn new(spec: &RemoteCache) -> Result<Arc<Self>> {
        let client = redis::Client::open(spec.url.as_str()).map_err(|source| Error::RedisUrl {
            option: "--session-cache",
            url: spec.url.clone(),
            source,
        })?;
        if spec.timeout.is_zero() {
            return Err(Error::Usage(
                "--redis-timeout 0 would time out every GET; give a positive duration such as 5ms"
                    .into(),
            ));
        }
        let (layered, local) = match spec.memory {
            Some(n) if n > 0 => (true, ServerSessionCache::new(n, spec.ttl)),
            Some(_) => {
                return Err(Error::Usage(
                    "a memory layer of capacity 0 holds nothing; use memory:N+redis://… with N ≥ 1, or redis://… alone".into(),
                ));
            }
            None => (false, ServerSessionCache::new(STAGING, STAGING_TTL)),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let latency = hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2).map_err(
            Error::setup("cannot create the Redis GET latency histogram"),
        )?;
        // 25 µs .. ~0.4 s.
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(25e-6, 2.0, 15);
        Ok(Arc::new(RedisStore {
            spec: spec.clone(),
            local,
            claimed: ServerSessionCache::new(STAGING, STAGING_TTL),
            layered,
            client,
            conn: OnceLock::new(),
            queue: tx,
            queue_rx: Mutex::new(Some(rx)),
            started: Instant::now(),
            down_until: AtomicU64::new(0),
            backoff_ms: AtomicU64::new(0),
            down: AtomicBool::new(false),
            outage: Mutex::new(Outage::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            local_hits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            put_drops: AtomicU64::new(0),
            latency: Mutex::new(latency),
            histogram: prometheus_client::metrics::histogram::Histogram::new(buckets),
        }))
    }

    /// The local layer (the memory cache, or the staging area).
    pub(crate) fn local(&self) -> &Arc<ServerSessionCache> {
        &self.local
    }

    /// Connects lazily and starts the writer. Call inside the server's
    /// runtime.
    pub(crate) fn start(self: &Arc<Self>) -> Result<()> {
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(WRITE_TIMEOUT))
            .set_number_of_retries(2)
            .set_min_delay(BACKOFF_MIN)
            .set_max_delay(BACKOFF_MAX);
        let conn = ConnectionManager::new_lazy_with_config(self.client.clone(), cfg)
            .map_err(Error::setup("cannot create the Redis connection manager"))?;
        let _ = self.conn.set(conn);
        if let Some(rx) = self.queue_rx.lock().take() {
            tokio::spawn(writer(self.clone(), rx));
        }
        Ok(())
    }

    fn key(&self, k: &[u8]) -> Vec<u8> {
        let mut v = self.spec.prefix.as_bytes().to_vec();
        v.extend_from_slice(k);
        v
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Logs a failed exchange with Redis, rate-limited.
    fn unreachable(&self, e: &dyn std::fmt::Display, lost: Lost) {
        self.down.store(true, Ordering::Relaxed);
        let line = self.outage.lock().failure(Instant::now(), lost);
        match line {
            Some(OutageLine::Down) => tracing::warn!(
                "Redis session cache {} is unreachable: {e}; sessions are not shared until it is back (handshakes go on, full where Redis would have resumed them); further failures are reported every {} s and counted in the tlslab_redis_* metrics",
                self.spec.url,
                OUTAGE_REPEAT.as_secs()
            ),
            Some(OutageLine::Still { lost, down_for }) => tracing::warn!(
                "Redis session cache {} still unreachable after {:.0} s; in the last {} s: {lost} (last failure: {e})",
                self.spec.url,
                down_for.as_secs_f64(),
                OUTAGE_REPEAT.as_secs()
            ),
            _ => {}
        }
    }

    /// Logs a successful exchange with Redis: one line if it ends an outage.
    /// Any exchange that succeeded (a write too) ends the back-off.
    fn reachable(&self) {
        if !self.down.load(Ordering::Relaxed) {
            return;
        }
        self.backoff_ms.store(0, Ordering::Relaxed);
        self.down_until.store(0, Ordering::Relaxed);
        self.down.store(false, Ordering::Relaxed);
        if let Some(OutageLine::Back { lost, down_for }) =
            self.outage.lock().success(Instant::now())
        {
            tracing::warn!(
                "Redis session cache {} is reachable again after {:.1} s; in the outage: {lost}",
                self.spec.url,
                down_for.as_secs_f64()
            );
        }
    }

    fn failed(&self) {
        let b = self.backoff_ms.load(Ordering::Relaxed);
        let next = if b == 0 {
            BACKOFF_MIN.as_millis() as u64
        } else {
            (b * 2).min(BACKOFF_MAX.as_millis() as u64)
        };
        self.backoff_ms.store(next, Ordering::Relaxed);
        self.down_until
            .store(self.now_ms() + next, Ordering::Relaxed);
    }

    /// Fetches the sessions a ClientHello offers into the local layer,
    /// within `--redis-timeout` for all of them together. `single_use`: TLS
    /// 1.3 stateful tickets, claimed with `GETDEL` whatever the memory layer
    /// holds (only a claimed ticket may be taken). Never fails: a failure is
    /// a miss, counted.
    pub(crate) async fn prefetch(&self, keys: &[Vec<u8>], single_use: bool) {
        let Some(conn) = self.conn.get() else { return };
        if !single_use {
            for k in keys {
                if self.local.contains(k) {
                    self.local_hits.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        if keys.is_empty() {
            return;
        }
        if self.now_ms() < self.down_until.load(Ordering::Relaxed) {
            self.errors.fetch_add(1, Ordering::Relaxed);
            // Part of the outage under way, never the start of one: a write
            // that succeeded has ended the outage and the back-off with it.
            if self.down.load(Ordering::Relaxed) {
                self.unreachable(&"skipped while backing off after a failure", Lost::Lookup);
            }
            return;
        }
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        let ttl_ms = self.spec.ttl.as_millis().max(1) as u64;
        for k in keys {
            if single_use {
                pipe.cmd("EVAL")
                    .arg(CLAIM)
                    .arg(1)
                    .arg(self.key(k))
                    .arg(ttl_ms);
            } else {
                pipe.cmd("GET").arg(self.key(k));
            }
        }
        let t = Instant::now();
        let r = tokio::time::timeout(
            self.spec.timeout,
            pipe.query_async::<Vec<Option<Vec<u8>>>>(&mut conn),
        )
        .await;
        match r {
            Err(_) => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                tracing::debug!("Redis GET failed: {e}");
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.failed();
                self.unreachable(&e, Lost::Lookup);
            }
            Ok(Ok(values)) => {
                self.reachable();
                let us = t.elapsed().as_micros() as u64;
                let _ = self.latency.lock().record(us.max(1));
                self.histogram.observe(us as f64 / 1e6);
                self.backoff_ms.store(0, Ordering::Relaxed);
                let mut found = false;
                let staged = if single_use {
                    &self.claimed
                } else {
                    &self.local
                };
                for (k, v) in keys.iter().zip(values) {
                    // Empty: a tombstone, a ticket claimed (or missed) already.
                    if let Some(v) = v.filter(|v| !v.is_empty()) {
                        found = true;
                        staged.put(k.clone(), v);
                    }
                }
                if found {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn enqueue(&self, w: Write) {
        if self.queue.try_send(w).is_err() {
            self.put_drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub fn stats(&self) -> RedisStats {
        let h = self.latency.lock();
        let q = |p: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        RedisStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            local_hits: self.local_hits.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            put_drops: self.put_drops.load(Ordering::Relaxed),
            get_p50_us: q(0.5),
            get_p99_us: q(0.99),
        }
    }
}

/// The claim of a TLS 1.3 ticket, atomic in Redis: take it (`GETDEL`),
/// and where there was none, or only a tombstone, leave a tombstone (an
/// empty value, for the sessions' TTL) so that the ticket, if it is still
/// on its way, can never be claimed later. `KEYS[1]`: the key; `ARGV[1]`: TTL
/// in ms. Returns the value, nil, or the tombstone.
pub(crate) const CLAIM: &str = "local v = redis.call('GETDEL', KEYS[1]) \
if not v or v == '' then redis.call('SET', KEYS[1], '', 'PX', ARGV[1]) end \
return v";

/// Drains the write queue in pipelines.
async fn writer(store: Arc<RedisStore>, mut rx: mpsc::Receiver<Write>) {
    let ttl_ms = store.spec.ttl.as_millis().max(1) as u64;
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let Some(conn) = store.conn.get() else { return };
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        for Write(k, v) in batch.drain(..) {
            // NX: a tombstone (a claim came first) is never overwritten.
            pipe.cmd("SET")
                .arg(store.key(&k))
                .arg(v)
                .arg("PX")
                .arg(ttl_ms)
                .arg("NX")
                .ignore();
        }
        let n = pipe.len() as u64;
        match tokio::time::timeout(WRITE_TIMEOUT, pipe.query_async::<()>(&mut conn)).await {
            Ok(Ok(())) => {
                store.writes.fetch_add(n, Ordering::Relaxed);
                store.reachable();
            }
            Ok(Err(e)) => {
                tracing::debug!("Redis write failed: {e}");
                store.write_errors.fetch_add(n, Ordering::Relaxed);
                store.unreachable(&e, Lost::Writes(n));
            }
            Err(_) => {
                store.write_errors.fetch_add(n, Ordering::Relaxed);
                store.unreachable(
                    &format_args!("a write took over {} s", WRITE_TIMEOUT.as_secs()),
                    Lost::Writes(n),
                );
            }
        }
    }
}

impl StoresServerSessions for RedisStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if self.layered {
            self.local.put(key.clone(), value.clone());
        }
        self.enqueue(Write(key, value));
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.layered {
            self.local.get(key)
        } else {
            // A staged value serves one handshake.
            self.local.take(key)
        }
    }

    /// A TLS 1.3 stateful ticket, single use in the whole cluster: only one
    /// that the prefetch claimed in Redis with `GETDEL`. The memory layer's
    /// copy (left to expire) is never returned: it would let a replay of the
    /// first flight to the node that issued the ticket resume, and answer
    /// its 0-RTT data, a second time.
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.claimed.take(key)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_logged_first_then_every_30_s_and_once_at_recovery() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let lost = |lookups, writes| Losses { lookups, writes };
        let mut o = Outage::default();
        assert_eq!(o.success(at(0)), None, "no outage, nothing to say");
        assert_eq!(o.failure(at(0), Lost::Lookup), Some(OutageLine::Down));
        // 5,000 failures within the next 30 s: silent.
        for i in 1..=5000 {
            assert_eq!(o.failure(at(i * 5), Lost::Lookup), None, "failure {i}");
        }
        assert_eq!(
            o.failure(at(30_000), Lost::Writes(3)),
            Some(OutageLine::Still {
                lost: lost(5000, 3),
                down_for: Duration::from_secs(30)
            })
        );
        assert_eq!(o.failure(at(59_999), Lost::Lookup), None);
        assert_eq!(
            o.failure(at(60_000), Lost::Writes(128)),
            Some(OutageLine::Still {
                lost: lost(1, 128),
                down_for: Duration::from_secs(60)
            })
        );
        assert_eq!(
            o.success(at(61_500)),
            Some(OutageLine::Back {
                lost: lost(5002, 131),
                down_for: Duration::from_millis(61_500)
            })
        );
        assert_eq!(o.success(at(62_000)), None, "one line at recovery");
        // A new outage starts afresh.
        assert_eq!(o.failure(at(70_000), Lost::Lookup), Some(OutageLine::Down));
    }

    fn store(memory: Option<usize>) -> Arc<RedisStore> {
        RedisStore::new(&RemoteCache {
            url: "redis://127.0.0.1:1".into(),
            memory,
            ttl: Duration::from_secs(60),
            prefix: "t:".into(),
            timeout: Duration::from_millis(5),
        })
        .unwrap()
    }

    // A TLS 1.3 ticket found in the memory layer was taken without asking
    // Redis, so a replayed 0-RTT first flight to the node that issued the
    // ticket resumed (and was answered in early data) a second time after
    // another node had already claimed it through Redis.
    #[test]
    fn a_layered_store_takes_only_tickets_claimed_in_redis_not_local_copies() {
        let s = store(Some(100));
        assert!(s.put(b"ticket".to_vec(), b"session".to_vec()));
        assert_eq!(s.take(b"ticket"), None, "a local copy was taken");
        // A claim (what the prefetch's GETDEL stages) is taken, once.
        assert!(s.put(b"ticket".to_vec(), b"session".to_vec()));
        s.claimed.put(b"ticket".to_vec(), b"session".to_vec());
        assert_eq!(s.take(b"ticket").as_deref(), Some(&b"session"[..]));
        assert_eq!(s.take(b"ticket"), None, "taken twice");
        // TLS 1.2 session IDs (multi-use) still hit the memory layer.
        assert!(s.put(b"id".to_vec(), b"s12".to_vec()));
        assert_eq!(s.get(b"id").as_deref(), Some(&b"s12"[..]));
        assert_eq!(s.get(b"id").as_deref(), Some(&b"s12"[..]));
    }

    #[test]
    fn a_redis_only_store_takes_no_session_fetched_by_a_multi_use_get() {
        let s = store(None);
        // What a TLS 1.2 prefetch (GET) stages is not a claimed ticket.
        s.local.put(b"k".to_vec(), b"v".to_vec());
        assert_eq!(s.take(b"k"), None);
        s.claimed.put(b"k".to_vec(), b"v".to_vec());
        assert_eq!(s.take(b"k").as_deref(), Some(&b"v"[..]));
        assert_eq!(s.take(b"k"), None);
    }
}
