//! Metered wrappers for the server's session store and ticketer.

use std::sync::Arc;
use std::time::Instant;

use rustls::server::{ProducesTickets, StoresServerSessions};

use super::{Meter, Op};

/// A server session store that records `get`/`take` as
/// [`Op::StoreGet`] and `put` as [`Op::StorePut`] (bytes: value length),
/// then delegates to the wrapped store.
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn StoresServerSessions>,
    meter: Arc<Meter>,
}

impl MeteredStore {
    /// Wraps `inner`, recording into `meter`.
    pub fn new(inner: Arc<dyn StoresServerSessions>, meter: Arc<Meter>) -> Arc<Self> {
        Arc::new(MeteredStore { inner, meter })
    }
}

impl StoresServerSessions for MeteredStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let len = value.len();
        let t = Instant::now();
        let r = self.inner.put(key, value);
        self.meter.record(Op::StorePut, 0, len, t);
        r
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let t = Instant::now();
        let r = self.inner.get(key);
        self.meter
            .record(Op::StoreGet, 0, r.as_ref().map_or(0, Vec::len), t);
        r
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let t = Instant::now();
        let r = self.inner.take(key);
        self.meter
            .record(Op::StoreGet, 0, r.as_ref().map_or(0, Vec::len), t);
        r
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// A ticketer that records `encrypt` as [`Op::TicketSeal`] and `decrypt`
/// as [`Op::TicketOpen`], then delegates to the wrapped ticketer.
#[derive(Debug)]
pub struct MeteredTicketer {
    inner: Arc<dyn ProducesTickets>,
    meter: Arc<Meter>,
}

impl MeteredTicketer {
    /// Wraps `inner`, recording into `meter`.
    pub fn new(inner: Arc<dyn ProducesTickets>, meter: Arc<Meter>) -> Arc<Self> {
        Arc::new(MeteredTicketer { inner, meter })
    }
}

impl ProducesTickets for MeteredTicketer {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let t = Instant::now();
        let r = self.inner.encrypt(plain);
        self.meter.record(Op::TicketSeal, 0, plain.len(), t);
        r
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let t = Instant::now();
        let r = self.inner.decrypt(cipher);
        self.meter.record(Op::TicketOpen, 0, cipher.len(), t);
        r
    }
}
