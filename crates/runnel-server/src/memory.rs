//! The node's memory limit for live readers: the process's resident memory
//! is sampled in the background, and while it is over the configured limit
//! new SSE and long-poll readers are refused (503 + Retry-After) so the
//! readers already connected, and writers, keep their memory.
//!
//! Admission reads one atomic; the sample is at most one interval old, so
//! a burst of readers can overshoot the limit by what they allocate within
//! an interval (about 3 KiB each for idle SSE readers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often resident memory is sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct MemoryGuard {
    /// Bytes of resident memory above which live readers are refused.
    limit: Option<u64>,
    /// The last sample of resident memory, in bytes.
    resident: AtomicU64,
}

impl MemoryGuard {
    /// A guard for `limit` (none: never refuses). With a limit, sampling
    /// starts on the current tokio runtime and stops when the guard goes.
    pub fn start(limit: Option<u64>) -> Arc<MemoryGuard> {
        let guard = Arc::new(MemoryGuard {
            limit,
            resident: AtomicU64::new(resident_bytes().unwrap_or(0)),
        });
        if limit.is_some() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let weak = Arc::downgrade(&guard);
                runtime.spawn(async move {
                    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
                    loop {
                        ticks.tick().await;
                        let Some(guard) = weak.upgrade() else { return };
                        if let Some(bytes) = resident_bytes() {
                            guard.resident.store(bytes, Ordering::Relaxed);
                        }
                    }
                });
            }
        }
        guard
    }

    /// True while the last sample is over the limit.
    pub fn over_limit(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.resident.load(Ordering::Relaxed) > limit)
    }
}

/// Resident memory of this process, from `/proc/self/statm` (Linux); none
/// elsewhere, which never trips the limit.
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page_size).ok().filter(|p| *p > 0)?)
}

/// Resident memory by kind, from `/proc/self/status` (Linux), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResidentParts {
    /// What the process allocated (heap, stacks).
    pub anonymous: u64,
    /// Pages of files it maps: its binary and libraries, and the log
    /// segments reads go through by `mmap`, which the kernel reclaims
    /// under pressure.
    pub file: u64,
    /// Shared memory.
    pub shared: u64,
}

pub(crate) fn resident_parts() -> Option<ResidentParts> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    };
    Some(ResidentParts {
        anonymous: field("RssAnon:")?,
        file: field("RssFile:")?,
        shared: field("RssShmem:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_broken_down_by_kind() {
        let parts = resident_parts().expect("Linux has RssAnon, RssFile and RssShmem");
        // The test binary is a mapped file; its heap and stacks anonymous.
        assert!(parts.anonymous > 0 && parts.file > 1 << 20, "{parts:?}");
        let total = parts.anonymous + parts.file + parts.shared;
        let resident = resident_bytes().unwrap();
        // Read at two moments: close, not equal.
        assert!(
            total.abs_diff(resident) < resident / 2,
            "{parts:?} against {resident}"
        );
    }

    #[test]
    fn resident_memory_is_measured() {
        let bytes = resident_bytes().expect("Linux has /proc/self/statm");
        assert!(bytes > 1 << 20, "{bytes}");
    }

    #[tokio::test]
    async fn the_limit_trips_only_when_set_and_exceeded() {
        assert!(!MemoryGuard::start(None).over_limit());
        assert!(MemoryGuard::start(Some(1 << 20)).over_limit());
        assert!(!MemoryGuard::start(Some(u64::MAX)).over_limit());
    }
}
