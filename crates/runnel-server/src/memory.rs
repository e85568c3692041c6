//! The node's memory limit for live readers: the process's resident memory
//! is sampled in the background, and while it is over the configured limit
//! new SSE and long-poll readers are refused (503 + Retry-After) so the
//! readers already connected, and writers, keep their memory.
//!
//! Admission reads one atomic; the sample is at most one interval old, so
//! a burst of readers can overshoot the limit by what they allocate within
//! an interval (about 3 KiB each for idle SSE readers).
//!
//! It also says where resident memory goes ([`breakdown`]), for `/metrics`
//! and `/_runnel/status`: by kind from the kernel, by owner from the
//! engine's tables and from the allocator, when the binary that chose the
//! allocator reports it ([`report_allocator_with`]).

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

/// What the process's allocator says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorReport {
    /// Bytes allocated and not yet freed.
    pub in_use: u64,
}

static ALLOCATOR: std::sync::OnceLock<fn() -> AllocatorReport> = std::sync::OnceLock::new();

/// Registers how to ask the allocator for its figures (the binary chooses
/// the allocator, so it says how); the first registration stands.
pub fn report_allocator_with(report: fn() -> AllocatorReport) {
    let _ = ALLOCATOR.set(report);
}

/// Resident memory by owner, as far as the process can tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Breakdown {
    /// The stream table, the per-append index, the log pages kept for
    /// readers, the tiered-block cache (estimates; see
    /// [`runnel_engine::MemoryUse`]).
    pub streams: u64,
    pub index: u64,
    pub read_pages: u64,
    pub tier_cache: u64,
    /// Allocated and none of the above: connections' and requests'
    /// buffers, tasks, readers' state, checkpoints being written.
    pub other_allocated: Option<u64>,
    /// Resident anonymous memory that is not allocated: the allocator's
    /// free pages not yet returned to the OS and its own tables, and
    /// threads' stacks. With it the owners add up to the process's
    /// anonymous resident memory.
    pub allocator_free: Option<u64>,
}

impl Breakdown {
    /// Each owner and its bytes, the allocator's only when it reports.
    pub fn owners(&self) -> Vec<(&'static str, u64)> {
        let mut owners = vec![
            ("streams", self.streams),
            ("index", self.index),
            ("read_pages", self.read_pages),
            ("tier_cache", self.tier_cache),
        ];
        owners.extend(self.other_allocated.map(|b| ("other_allocated", b)));
        owners.extend(self.allocator_free.map(|b| ("allocator_free", b)));
        owners
    }
}

/// Where memory goes, from the engine's figures, the allocator's and the
/// kernel's.
pub(crate) fn breakdown(engine: &runnel_engine::NodeMetrics) -> Breakdown {
    let anonymous = resident_parts().map(|parts| parts.anonymous);
    breakdown_of(engine, ALLOCATOR.get().map(|report| report()), anonymous)
}

fn breakdown_of(
    engine: &runnel_engine::NodeMetrics,
    allocator: Option<AllocatorReport>,
    anonymous: Option<u64>,
) -> Breakdown {
    let memory = engine.memory;
    let tier_cache = engine.tiering.as_ref().map_or(0, |t| t.cache_bytes);
    let known = memory.streams + memory.index + memory.read_pages + tier_cache;
    Breakdown {
        streams: memory.streams,
        index: memory.index,
        read_pages: memory.read_pages,
        tier_cache,
        other_allocated: allocator.map(|a| a.in_use.saturating_sub(known)),
        allocator_free: allocator
            .zip(anonymous)
            .map(|(a, anonymous)| anonymous.saturating_sub(a.in_use.max(known))),
    }
}

/// The status document's `memory` section: resident memory by kind and by
/// owner, in bytes.
pub(crate) fn status(engine: &runnel_engine::NodeMetrics) -> serde_json::Value {
    let mut section = serde_json::Map::new();
    if let Some(resident) = resident_bytes() {
        section.insert("resident".into(), resident.into());
    }
    if let Some(parts) = resident_parts() {
        section.insert("anonymous".into(), parts.anonymous.into());
        section.insert("file".into(), parts.file.into());
    }
    let owners: serde_json::Map<String, serde_json::Value> = breakdown(engine)
        .owners()
        .into_iter()
        .map(|(owner, bytes)| (owner.to_string(), bytes.into()))
        .collect();
    section.insert("by_owner".into(), owners.into());
    section.into()
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

    #[test]
    fn owners_add_up_to_what_the_allocator_holds() {
        let engine = runnel_engine::NodeMetrics {
            memory: runnel_engine::MemoryUse {
                streams: 100,
                index: 1_000,
                read_pages: 10,
            },
            ..Default::default()
        };
        // Without the allocator's count: engine figures only.
        let owners = breakdown_of(&engine, None, Some(8_000)).owners();
        assert_eq!(
            owners,
            [
                ("streams", 100),
                ("index", 1_000),
                ("read_pages", 10),
                ("tier_cache", 0)
            ]
        );
        let b = breakdown_of(
            &engine,
            Some(AllocatorReport { in_use: 5_000 }),
            Some(8_000),
        );
        assert_eq!(b.other_allocated, Some(5_000 - 1_110));
        assert_eq!(b.allocator_free, Some(3_000));
        let total: u64 = b.owners().iter().map(|(_, bytes)| bytes).sum();
        assert_eq!(
            total, 8_000,
            "the owners add up to anonymous resident memory"
        );
        // Estimates above the allocator's count: nothing negative.
        let b = breakdown_of(&engine, Some(AllocatorReport { in_use: 500 }), Some(800));
        assert_eq!((b.other_allocated, b.allocator_free), (Some(0), Some(0)));
        assert_eq!(status(&engine)["by_owner"]["index"], 1_000);
    }

    #[tokio::test]
    async fn the_limit_trips_only_when_set_and_exceeded() {
        assert!(!MemoryGuard::start(None).over_limit());
        assert!(MemoryGuard::start(Some(1 << 20)).over_limit());
        assert!(!MemoryGuard::start(Some(u64::MAX)).over_limit());
    }
}
