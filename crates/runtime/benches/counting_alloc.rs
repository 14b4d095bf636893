//! What `tlslab lab --explain`'s probes add, around mimalloc as in the
//! tlslab binary: per allocation (a `Box<[u8; 64]>` allocated and freed a
//! million times) with counting off (one relaxed load) and on for a
//! registered thread, and per syscall (`getppid`, a million times) before
//! and after the perf counters are open (as root: the syscall tracepoint
//! then fires on every syscall). Best of 15 rounds each.
//! `cargo bench -p tlslab-runtime --bench counting_alloc`.

use std::hint::black_box;
use std::time::Instant;

use tlslab_runtime::{CountingAlloc, Threads};

#[global_allocator]
static GLOBAL: CountingAlloc<mimalloc::MiMalloc> = CountingAlloc::new(mimalloc::MiMalloc);

const N: u32 = 1_000_000;

/// ns per call of `f`, best of 15 rounds of `N` calls.
fn best(mut f: impl FnMut(u32)) -> f64 {
    (0..15)
        .map(|_| {
            let t = Instant::now();
            for i in 0..N {
                f(i);
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

fn alloc(i: u32) {
    black_box(Box::new([i as u8; 64]));
}

fn syscall(_: u32) {
    black_box(nix::unistd::getppid());
}

fn main() {
    let (alloc_off, syscall_off) = (best(alloc), best(syscall));
    let probes = tlslab_runtime::costs::enable();
    let set = Threads::default();
    set.register();
    let before = set.costs();
    let (alloc_on, syscall_on) = (best(alloc), best(syscall));
    let d = set.costs().since(before);
    match probes.allocations_unavailable() {
        Some(why) => println!("allocations: not counted here ({why})"),
        None => println!(
            "allocation and free: {alloc_off:.2} ns counting off, {alloc_on:.2} ns counted \
             (+{:.2} ns); {} counted of {} made",
            alloc_on - alloc_off,
            d.allocations.unwrap_or(0),
            15 * N
        ),
    }
    match probes.syscalls_unavailable() {
        Some(why) => println!("syscalls: not counted here ({why})"),
        None => println!(
            "getppid: {syscall_off:.2} ns before the counters, {syscall_on:.2} ns counted \
             (+{:.2} ns); {} syscalls counted of {} made",
            syscall_on - syscall_off,
            d.syscalls.unwrap_or(0),
            15 * N
        ),
    }
}
