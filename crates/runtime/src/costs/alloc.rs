//! Counting allocations per thread: [`CountingAlloc`] wraps the process's
//! global allocator and, while counting is on, adds each allocation (and
//! its size) to the calling thread's slot, if the thread has one.
//!
//! A thread gets a slot when it registers in a [`crate::Threads`] set with
//! the probes on ([`thread_slot`], called outside the allocator); slots are
//! plain atomics in a static table, never freed, so a reader can never see
//! a slot that has gone away. Off, an allocation pays one relaxed load.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How many threads can be counted over the process's life (a `tlslab lab`
/// run registers about a hundred); later threads go uncounted and their
/// sets report allocations as unavailable.
pub(crate) const SLOTS: usize = 2048;

/// A global allocator that counts allocations per thread around `A`.
///
/// Install it in a binary's root, e.g.
/// `#[global_allocator] static A: CountingAlloc<System> = CountingAlloc::new(System);`.
/// It counts nothing until [`crate::costs::enable`] is called.
#[derive(Debug, Default)]
pub struct CountingAlloc<A>(A);

impl<A> CountingAlloc<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        CountingAlloc(inner)
    }
}

static COUNTING: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// One thread's counts, on a cache line of its own.
#[repr(align(64))]
struct Slot {
    allocations: AtomicU64,
    bytes: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        allocations: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    }
}; SLOTS];

const NONE: usize = usize::MAX;

thread_local! {
    /// The calling thread's slot in `TABLE`, or `NONE`. A `const` cell
    /// with no destructor: reading it never allocates and works while
    /// the thread is being torn down.
    static MY_SLOT: Cell<usize> = const { Cell::new(NONE) };
}

#[inline]
fn count(size: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    let Ok(i) = MY_SLOT.try_with(Cell::get) else {
        return;
    };
    if let Some(s) = TABLE.get(i) {
        // Only the owning thread writes its slot: load and store, no
        // locked read-modify-write.
        let a = s.allocations.load(Ordering::Relaxed);
        s.allocations.store(a + 1, Ordering::Relaxed);
        let b = s.bytes.load(Ordering::Relaxed);
        s.bytes.store(b + size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `A` with the caller's arguments
// unchanged and returns its result; the counting beside it touches only
// atomics and a destructor-free thread-local, and never allocates.
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { self.0.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// Allocations and bytes counted so far in a slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AllocCounts {
    pub allocations: u64,
    pub bytes: u64,
}

impl AllocCounts {
    pub(crate) fn since(self, earlier: AllocCounts) -> AllocCounts {
        AllocCounts {
            allocations: self.allocations.saturating_sub(earlier.allocations),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// The calling thread's slot, claimed on its first call; `None` once all
/// [`SLOTS`] are taken.
pub(crate) fn thread_slot() -> Option<usize> {
    let mine = MY_SLOT.with(Cell::get);
    if mine != NONE {
        return Some(mine);
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    if i >= SLOTS {
        return None;
    }
    MY_SLOT.with(|s| s.set(i));
    Some(i)
}

/// What slot `i` has counted.
pub(crate) fn counts(i: usize) -> AllocCounts {
    TABLE
        .get(i)
        .map_or_else(AllocCounts::default, |s| AllocCounts {
            allocations: s.allocations.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
        })
}

/// Turns counting on and checks that it works: that this process's global
/// allocator is a [`CountingAlloc`] (only then does an allocation move the
/// calling thread's count).
pub(crate) fn enable() -> Result<(), String> {
    COUNTING.store(true, Ordering::Relaxed);
    let Some(slot) = thread_slot() else {
        return Err(format!(
            "more than {SLOTS} threads were counted in this process"
        ));
    };
    let before = counts(slot);
    let probe = std::hint::black_box(vec![0u8; 64]);
    drop(probe);
    if counts(slot).since(before).allocations == 0 {
        return Err(
            "this program's global allocator does not count allocations \
                    (only the tlslab binary installs tlslab_runtime::CountingAlloc)"
                .into(),
        );
    }
    Ok(())
}

/// Whether counting is on.
pub(crate) fn counting() -> bool {
    COUNTING.load(Ordering::Relaxed)
}
