//! Measures the memory of the learned-session table: fills it with N
//! 32-byte TLS 1.2 session IDs and reports the resident-set growth per
//! entry (from /proc/self/statm), so the figure includes the allocator's
//! and the hash table's overhead.
//!
//! `cargo run --release -p tlslab-dispatch --example table_memory -- 1000000`

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use tlslab_dispatch::table::{Key, KeyKind, Lookup, SessionTable};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn key(i: u64) -> Key {
    let mut id = [0u8; 32];
    // Spread like random session IDs.
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    id[..8].copy_from_slice(&h.to_le_bytes());
    id[8..16].copy_from_slice(&i.to_le_bytes());
    Key::new(KeyKind::SessionId, &id).expect("non-empty")
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let max = NonZeroUsize::new(n as usize).expect("N >= 1");
    let before = rss_bytes();
    let t = SessionTable::new(max, Duration::from_secs(300));
    let t0 = Instant::now();
    for i in 0..n {
        t.learn(key(i), (i % 3) as usize);
    }
    let insert = t0.elapsed();
    let after = rss_bytes();
    let t0 = Instant::now();
    let mut hits = 0u64;
    for i in 0..n {
        if matches!(t.lookup(&key(i)), Lookup::Hit(_)) {
            hits += 1;
        }
    }
    let lookup = t0.elapsed();
    assert_eq!(hits, n, "every learned key must be found");
    println!(
        "entries {n}: resident growth {} bytes = {:.1} B/entry; insert {:.0} ns/entry, lookup {:.0} ns/entry (one thread, mutex held)",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / n as f64,
        insert.as_nanos() as f64 / n as f64,
        lookup.as_nanos() as f64 / n as f64,
    );
}
