//! The engine's figures for `GET /metrics`: read from counters the log,
//! the groups, the Raft transport and the tierer keep anyway, when a
//! scrape asks, so nothing but relaxed atomic additions is added to the
//! write path. [`histogram`] is the latency histogram both this crate and
//! the HTTP layer keep.

pub mod histogram;

use std::time::Duration;

use runnel_log::SyncStats;

/// One node's engine figures at one moment.
#[derive(Debug, Clone, Default)]
pub struct NodeMetrics {
    /// The log's durable position: bytes ever made durable.
    pub log_bytes: u64,
    /// The log failed and accepts no writes until a restart.
    pub log_failed: bool,
    /// Syncs, their time and histogram, and the records written.
    pub syncs: SyncStats,
    /// Streams held (live and soft-deleted), over every group.
    pub streams: u64,
    /// Raft groups (clusters only).
    pub groups: Vec<GroupMetrics>,
    /// A single node's groups: how long each one's commit task has been
    /// busy, by group index (see `LocalGroup::commit_busy`).
    pub commit_busy: Vec<Duration>,
    /// Raft RPCs to each peer (clusters only).
    pub peers: Vec<PeerMetrics>,
    pub tiering: Option<TierMetrics>,
    /// Free and total bytes of the data directory's file system.
    pub disk: Option<DiskSpace>,
    /// What the groups this node holds keep in memory, by owner.
    pub memory: MemoryUse,
    /// Self-healing (clusters only): replicas this node moved off silent
    /// members, and the members it finds silent now.
    pub healing: Option<HealingMetrics>,
}

/// What a cluster member's self-healing did (see `cluster::healing`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealingMetrics {
    pub moves: u64,
    pub silent_members: u64,
    /// Replicas moved onto filling members (`cluster::balancing`).
    pub rebalance_moves: u64,
}

/// Bytes the groups keep in memory, by owner: estimates from the sizes and
/// capacities of their tables (see [`runnel_core::StateMemory`]), and the
/// bytes of the log pages kept for readers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Stream records, names and the tables that find them.
    pub streams: u64,
    /// Where each append sits: the per-append index and tiered chunks'
    /// references.
    pub index: u64,
    /// Log pages read lately, kept for readers of the same bytes.
    pub read_pages: u64,
}

/// Space on the data directory's file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskSpace {
    /// Bytes an unprivileged writer may still use.
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl DiskSpace {
    /// `statvfs(2)` of the file system holding `path`.
    pub fn of(path: &std::path::Path) -> Option<DiskSpace> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs writes only into the struct we pass, and `path`
        // is a NUL-terminated string that outlives the call.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
            return None;
        }
        let block = stat.f_frsize as u64;
        Some(DiskSpace {
            free_bytes: (stat.f_bavail as u64).saturating_mul(block),
            total_bytes: (stat.f_blocks as u64).saturating_mul(block),
        })
    }
}

/// Raft RPCs to one peer, as this node made them.
#[derive(Debug, Clone)]
pub struct PeerMetrics {
    pub node: u64,
    /// Calls that failed: no connection, no answer in time, or an error
    /// answered.
    pub failures: u64,
    /// Round trips of the calls answered, failed or not.
    pub latency: histogram::Snapshot,
    /// Whether the last attempt to connect succeeded.
    pub reachable: bool,
}

/// One Raft group as this node sees it.
#[derive(Debug, Clone, Default)]
pub struct GroupMetrics {
    pub group: u32,
    pub leader: Option<u64>,
    pub is_leader: bool,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    /// On the leader: how far the furthest-behind follower is, in entries.
    pub max_follower_lag: Option<u64>,
    /// This node votes (false while it catches up after losing its state).
    pub votes: bool,
    /// Proposals queued on this node, not yet submitted to Raft.
    pub pending_proposals: u64,
    /// Proposals this node submitted that were committed and applied.
    pub proposals_committed: u64,
    /// Proposals this node submitted that failed (leadership lost, the
    /// group shut down, replication failed).
    pub proposals_failed: u64,
}

/// Tiering to object storage.
#[derive(Debug, Clone, Default)]
pub struct TierMetrics {
    pub untiered_bytes: u64,
    pub tiered_bytes: u64,
    pub backlog_full: bool,
    pub upload_failures: u64,
    pub read_failures: u64,
    pub store_gets: u64,
    pub store_puts: u64,
    pub store_errors: u64,
    /// Time spent in object-store calls.
    pub store_call_seconds: f64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Bytes of blocks and footers the block cache holds now.
    pub cache_bytes: u64,
}

/// Bounds of the sync-duration histogram, in seconds.
pub const SYNC_BUCKETS: [f64; 10] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.05,
];

impl NodeMetrics {
    /// Cumulative sync counts at each of [`SYNC_BUCKETS`] (a sync over 20
    /// ms counts only at `+Inf`: the log's own histogram stops there).
    pub fn sync_buckets(&self) -> Vec<(f64, u64)> {
        SYNC_BUCKETS
            .iter()
            .map(|&le| {
                let count = if le < 0.02 {
                    self.syncs.at_most(Duration::from_secs_f64(le))
                } else {
                    // The last bucket of the log's histogram holds every
                    // sync of 20 ms or more.
                    self.syncs
                        .at_most(Duration::from_millis(20) - Duration::from_micros(10))
                };
                (le, count)
            })
            .collect()
    }
}
