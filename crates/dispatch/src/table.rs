//! The learned-session table: session ID or ticket key name → node.
//!
//! An LRU map ([`lru::LruCache`], a hash map threaded by a doubly linked
//! list): lookups, inserts and evictions are O(1), the entry count is
//! bounded by `--max-sessions` (the least recently used mapping goes
//! first), and each entry expires `--session-timeout` after it was learned,
//! checked on lookup, as a node's own session cache does.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

/// What a learned key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// A TLS 1.2 session ID (learned from the ServerHello that issued it).
    SessionId = 0,
    /// A ticket key name: the first 16 bytes of a TLS 1.2 ticket (learned
    /// from the cleartext NewSessionTicket) or of a TLS 1.3 PSK identity
    /// (learned from the ServerHello that accepted it).
    TicketKey = 1,
}

impl KeyKind {
    /// Both kinds, in metric order.
    pub const ALL: [KeyKind; 2] = [KeyKind::SessionId, KeyKind::TicketKey];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            KeyKind::SessionId => "session_id",
            KeyKind::TicketKey => "ticket_key",
        }
    }
}

/// Bytes of a ticket (or PSK identity) that name its key (RFC 5077 §4).
pub const KEY_NAME_LEN: usize = 16;
/// The longest key kept: a TLS 1.2 session ID is at most 32 bytes.
pub const MAX_KEY_LEN: usize = 32;

/// A table key: kind, length and up to 32 bytes, inline (no heap).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    kind: u8,
    len: u8,
    bytes: [u8; MAX_KEY_LEN],
}

impl Key {
    /// The key for `bytes` (truncated to 32), or `None` if empty.
    pub fn new(kind: KeyKind, bytes: &[u8]) -> Option<Key> {
        if bytes.is_empty() {
            return None;
        }
        let n = bytes.len().min(MAX_KEY_LEN);
        let mut k = Key {
            kind: kind as u8,
            len: n as u8,
            bytes: [0; MAX_KEY_LEN],
        };
        k.bytes[..n].copy_from_slice(&bytes[..n]);
        Some(k)
    }

    /// The key naming a ticket or PSK identity: its first 16 bytes.
    pub fn ticket(ticket: &[u8]) -> Option<Key> {
        Key::new(
            KeyKind::TicketKey,
            &ticket[..ticket.len().min(KEY_NAME_LEN)],
        )
    }

    /// The key's kind.
    pub fn kind(&self) -> KeyKind {
        if self.kind == 0 {
            KeyKind::SessionId
        } else {
            KeyKind::TicketKey
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:", self.kind().label())?;
        for b in &self.bytes[..usize::from(self.len)] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Entry {
    node: u16,
    /// Seconds since the table's epoch at which the entry expires.
    expires: u32,
}

/// The table. Shared by all connections behind one mutex: every operation
/// is O(1) and holds it for well under a microsecond.
pub struct SessionTable {
    inner: Mutex<LruCache<Key, Entry>>,
    timeout: Duration,
    epoch: Instant,
}

/// What [`SessionTable::lookup`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A live mapping to this node.
    Hit(usize),
    /// A mapping that expired (and was removed).
    Expired,
    /// No mapping.
    Miss,
}

impl SessionTable {
    /// A table holding at most `max` mappings for `timeout` each.
    pub fn new(max: NonZeroUsize, timeout: Duration) -> SessionTable {
        SessionTable {
            inner: Mutex::new(LruCache::new(max)),
            timeout,
            epoch: Instant::now(),
        }
    }

    fn now_secs(&self) -> u32 {
        u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Maps `key` to `node`, replacing an older mapping; evicts the least
    /// recently used mapping when full.
    pub fn learn(&self, key: Key, node: usize) {
        let timeout = u32::try_from(self.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let e = Entry {
            node: u16::try_from(node).unwrap_or(u16::MAX),
            expires: self.now_secs().saturating_add(timeout),
        };
        self.inner.lock().put(key, e);
    }

    /// The node `key` maps to, if the mapping is live.
    pub fn lookup(&self, key: &Key) -> Lookup {
        let now = self.now_secs();
        let mut t = self.inner.lock();
        match t.get(key) {
            Some(e) if e.expires > now => Lookup::Hit(usize::from(e.node)),
            Some(_) => {
                t.pop(key);
                Lookup::Expired
            }
            None => Lookup::Miss,
        }
    }

    /// Mappings held, by kind (expired ones not yet looked up included).
    pub fn counts(&self) -> [u64; 2] {
        let t = self.inner.lock();
        let mut c = [0u64; 2];
        for (k, _) in t.iter() {
            c[usize::from(k.kind)] += 1;
        }
        c
    }

    /// Mappings held.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn learns_looks_up_and_bounds() {
        let t = SessionTable::new(nz(2), Duration::from_secs(60));
        let a = Key::new(KeyKind::SessionId, &[1; 32]).unwrap();
        let b = Key::ticket(&[2; 100]).unwrap();
        let c = Key::ticket(&[3; 16]).unwrap();
        t.learn(a, 0);
        t.learn(b, 1);
        assert_eq!(t.lookup(&a), Lookup::Hit(0));
        assert_eq!(t.lookup(&b), Lookup::Hit(1));
        // a is now the least recently used; c evicts it.
        t.learn(c, 2);
        assert_eq!(t.lookup(&a), Lookup::Miss);
        assert_eq!(t.lookup(&c), Lookup::Hit(2));
        assert_eq!(t.len(), 2);
        assert_eq!(t.counts(), [0, 2]);
        // A ticket's key is its 16-byte key name, whatever follows.
        let mut other = [2u8; 100];
        other[50] = 9;
        assert_eq!(t.lookup(&Key::ticket(&other).unwrap()), Lookup::Hit(1));
        // The kinds do not collide.
        assert_eq!(
            t.lookup(&Key::new(KeyKind::SessionId, &[2; 16]).unwrap()),
            Lookup::Miss
        );
        assert!(Key::new(KeyKind::SessionId, &[]).is_none());
    }

    #[test]
    fn mappings_expire() {
        let t = SessionTable::new(nz(10), Duration::from_secs(1));
        let a = Key::new(KeyKind::SessionId, &[1; 32]).unwrap();
        t.learn(a, 3);
        assert_eq!(t.lookup(&a), Lookup::Hit(3));
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(t.lookup(&a), Lookup::Expired);
        assert_eq!(t.lookup(&a), Lookup::Miss);
    }
}
