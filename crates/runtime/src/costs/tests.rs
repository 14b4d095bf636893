use super::*;
use crate::Threads;
use std::hint::black_box;
use std::io::Write;
use std::sync::{Arc, mpsc};

#[test]
fn tracefs_ids_parse_and_garbage_does_not() {
    assert_eq!(perf::parse_id("443\n"), Some(443));
    assert_eq!(perf::parse_id(" 840 "), Some(840));
    assert_eq!(perf::parse_id(""), None);
    assert_eq!(perf::parse_id("sys_enter"), None);
    assert_eq!(perf::parse_id("-1"), None);
}

#[test]
fn since_subtracts_and_keeps_unavailable_unavailable() {
    let a = ThreadCosts {
        syscalls: Some(10),
        writes: Some(3),
        allocations: None,
        task_clock: Some(Duration::from_micros(5)),
        ..ThreadCosts::default()
    };
    let b = ThreadCosts {
        syscalls: Some(25),
        writes: None,
        allocations: Some(7),
        task_clock: Some(Duration::from_micros(9)),
        ..ThreadCosts::default()
    };
    let d = b.since(a);
    assert_eq!(d.syscalls, Some(15));
    assert_eq!(d.writes, None);
    assert_eq!(d.allocations, None);
    assert_eq!(d.task_clock, Some(Duration::from_micros(4)));
    // Counters never go down; a later `earlier` saturates.
    assert_eq!(a.since(b).syscalls, Some(0));
}

#[test]
fn one_unprobed_thread_makes_the_counts_unavailable_not_partial() {
    let probed = Extra {
        perf: PerfCounts {
            syscalls: 4,
            writes: 1,
            task_clock_ns: 1_000,
        },
        allocs: AllocCounts {
            allocations: 2,
            bytes: 64,
        },
        ..Extra::ZERO
    };
    let both = probed.add(probed);
    let c = both.with_cpu(CpuTime::default());
    assert_eq!(c.syscalls, Some(8));
    assert_eq!(c.writes, Some(2));
    assert_eq!(c.task_clock, Some(Duration::from_micros(2)));
    assert_eq!((c.allocations, c.allocated_bytes), (Some(4), Some(128)));
    let c = probed.add(Extra::UNPROBED).with_cpu(CpuTime::default());
    assert_eq!((c.syscalls, c.allocations), (None, None));
    let s = c.to_schema(Duration::from_millis(3));
    assert_eq!(s.syscalls, None);
    assert!((s.crypto_s - 0.003).abs() < 1e-12);
}

/// Runs `f` on a thread registered in a fresh set, probed; returns the
/// set's costs over `f` and `f`'s result.
fn on_probed_thread<T: Send>(f: impl FnOnce() -> T + Send) -> (ThreadCosts, T) {
    enable();
    let t = Threads::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            t.register();
            let c0 = t.costs();
            let out = f();
            (t.costs().since(c0), out)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn allocations_of_a_registered_thread_are_counted_with_their_bytes() {
    // This test binary's global allocator is a CountingAlloc (lib.rs).
    assert_eq!(enable().allocations_unavailable(), None);
    let (c, ()) = on_probed_thread(|| {
        for _ in 0..100 {
            black_box(vec![1u8; 1000]);
        }
    });
    let n = c.allocations.expect("counted");
    // 100, plus what reading the set's CPU from /proc allocates.
    assert!((100..150).contains(&n), "{c:?}");
    let bytes = c.allocated_bytes.expect("counted");
    assert!((100_000..120_000).contains(&bytes), "{c:?}");
}

#[test]
fn other_threads_allocations_are_not_counted_and_retired_ones_are_kept() {
    enable();
    let set = Arc::new(Threads::default());
    let (go_tx, go_rx) = mpsc::channel::<usize>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let member = {
        let set = set.clone();
        std::thread::spawn(move || {
            set.register();
            done_tx.send(()).unwrap();
            let n = go_rx.recv().unwrap();
            for _ in 0..n {
                black_box(Box::new([0u64; 4]));
            }
            set.retire();
            done_tx.send(()).unwrap();
        })
    };
    done_rx.recv().unwrap();
    let c0 = set.costs();
    for _ in 0..500 {
        black_box(vec![0u8; 100]);
    }
    let idle = set.costs().since(c0);
    assert_eq!(idle.allocations, Some(0), "{idle:?}");
    go_tx.send(40).unwrap();
    done_rx.recv().unwrap();
    member.join().unwrap();
    assert_eq!(set.live_count(), 0);
    let after = set.costs().since(c0);
    let n = after.allocations.expect("counted");
    assert!((40..60).contains(&n), "{after:?}");
    assert!(after.allocated_bytes >= Some(40 * 32), "{after:?}");
}

#[test]
fn writes_and_syscalls_of_a_registered_thread_are_counted_as_root() {
    if let Some(why) = enable().syscalls_unavailable() {
        eprintln!("SKIPPED: syscall counters unavailable here: {why}");
        return;
    }
    let mut null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let (c, ()) = on_probed_thread(move || {
        for _ in 0..20 {
            null.write_all(b"x").unwrap();
        }
    });
    let writes = c.writes.expect("counted");
    // 20 writes to /dev/null; reading the counters themselves is `read`s.
    assert!((20..=22).contains(&writes), "{c:?}");
    let syscalls = c.syscalls.expect("counted");
    assert!(syscalls >= writes && syscalls < 200, "{c:?}");
    assert!(c.task_clock.is_some_and(|t| t > Duration::ZERO), "{c:?}");
}
