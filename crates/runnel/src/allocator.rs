//! The allocator, and giving back to the OS the memory it holds but no
//! longer uses.
//!
//! mimalloc returns freed memory to the OS lazily: a thread's free pages
//! are purged on that thread's later allocations, and pages of threads
//! that ended on a later purge anywhere. A server that goes quiet after a
//! burst (a checkpoint of a large index, a storm of catch-up reads) would
//! keep its peak resident for as long as it stays quiet:
//! `bench/memory-vs-peers.sh` saw a checkpoint of a 15 MB file leave 47 MB
//! resident. So runtime worker threads collect and purge their own free
//! pages when they park (at most once a second each), threads collect
//! theirs as they end, idle blocking-pool threads end after 2 s rather
//! than tokio's 10, and one thread purges what ended threads left, every
//! few seconds.
//!
//! It also counts the bytes allocated and not freed, for the memory
//! breakdown of `/metrics` and `runnel ctl status` ([`report`]).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// mimalloc: the request path allocates small buffers from many threads,
/// which glibc's allocator handles markedly slower. Counted.
#[global_allocator]
static ALLOCATOR: Counted = Counted;

/// mimalloc, with a count of the bytes in use.
///
/// The count is striped: each thread adds to one of [`STRIPES`] counters
/// on cache lines of their own, so threads allocating at once do not
/// contend for one line; a report sums them. A stripe may go negative
/// (memory freed by another thread than the one that allocated it); the
/// sum does not.
struct Counted;

const STRIPES: usize = 16;

#[repr(align(64))]
struct Stripe(AtomicI64);

static IN_USE: [Stripe; STRIPES] = [const { Stripe(AtomicI64::new(0)) }; STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// This thread's stripe (threads take them in turn).
fn stripe() -> &'static AtomicI64 {
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    let index = MINE
        .try_with(|mine| {
            if mine.get() == usize::MAX {
                mine.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
            }
            mine.get()
        })
        // A thread being torn down: any stripe keeps the sum right.
        .unwrap_or(0);
    &IN_USE[index].0
}

fn count(bytes: usize, allocated: bool) {
    let bytes = bytes as i64;
    stripe().fetch_add(if allocated { bytes } else { -bytes }, Ordering::Relaxed);
}

// SAFETY: every call is passed to mimalloc unchanged; counting touches
// only atomics and a const thread-local, and never allocates.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !ptr.is_null() {
            count(layout.size(), true);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(layout.size(), true);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        count(layout.size(), false);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            count(layout.size(), false);
            count(new_size, true);
        }
        moved
    }
}

/// Bytes allocated and not freed.
pub(crate) fn report() -> runnel_server::memory::AllocatorReport {
    let in_use: i64 = IN_USE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    runnel_server::memory::AllocatorReport {
        in_use: in_use.max(0) as u64,
    }
}

/// How often a worker collects its free pages, at most.
const WORKER_COLLECT_EVERY: Duration = Duration::from_secs(1);
/// How long an idle blocking-pool thread lives (tokio's default is 10 s).
/// A burst of file IO (a catch-up storm) starts many; each keeps the
/// pages it freed until it ends, so they end soon after.
pub(crate) const IDLE_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(2);
/// How often ended threads' memory is purged.
const PURGE_EVERY: Duration = Duration::from_secs(5);

/// For the runtime's `on_thread_park`: collects this worker's free pages
/// if it has not for a while.
pub(crate) fn worker_parked() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|at| now.duration_since(at) >= WORKER_COLLECT_EVERY);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        collect(true);
    }
}

/// For the runtime's `on_thread_stop`: a thread that ends gives its free
/// pages back at once.
pub(crate) fn thread_stopping() {
    collect(true);
}

/// Starts the thread that purges, every few seconds, the memory of
/// threads that ended.
pub(crate) fn start_purging() {
    let started = std::thread::Builder::new()
        .name("runnel-mem-purge".into())
        .spawn(|| loop {
            std::thread::sleep(PURGE_EVERY);
            collect(true);
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the memory purge thread; freed memory returns to the OS later");
    }
}

fn collect(force: bool) {
    // SAFETY: mi_collect takes no pointers; it may be called from any
    // thread at any time.
    unsafe { libmimalloc_sys::mi_collect(force) }
}
