//! The allocator, and giving back to the OS the memory it holds but no
//! longer uses.
//!
//! mimalloc returns freed memory to the OS lazily: a thread's free pages
//! are purged on that thread's later allocations, and pages of threads
//! that ended on a later purge anywhere. A server that goes quiet after a
//! burst (a checkpoint of a large index, a storm of catch-up reads) would
//! keep its peak resident for as long as it stays quiet:
//! `bench/memory-vs-peers.sh` saw a checkpoint of a 15 MB file leave 47 MB
//! resident. So runtime worker threads collect their own free pages when
//! they park (at most once a second each), threads collect theirs as they
//! end, and one thread purges what ended threads left, every few seconds.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// mimalloc: the request path allocates small buffers from many threads,
/// which glibc's allocator handles markedly slower.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often a worker collects its free pages, at most.
const WORKER_COLLECT_EVERY: Duration = Duration::from_secs(1);
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
        collect(false);
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
