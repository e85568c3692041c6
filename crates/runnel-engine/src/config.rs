//! How a node's engine is configured ([`EngineConfig`]): its data
//! directory, groups, log, queue limits, upkeep and tiering.

use std::path::PathBuf;
use std::time::Duration;

use runnel_log::SyncMode;

use crate::history::CompactionPolicy;
use crate::tier::TierConfig;

/// A node's engine configuration (a cluster member's is part of
/// `cluster::ClusterConfig`).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Groups the node's streams are spread over.
    pub groups: u32,
    pub sync: SyncMode,
    pub segment_bytes: u64,
    /// Prepare each next log segment ahead of time as a synced file of
    /// zeros, which makes syncs cheaper (see `runnel_log::LogOptions`).
    pub preallocate_segments: bool,
    /// Largest log record (one command, body included).
    pub max_record_bytes: u32,
    pub max_pending_proposals: usize,
    pub max_inflight_bytes: u64,
    /// How often expiry, retention and compaction run.
    pub sweep_interval: Duration,
    /// A checkpoint (and log garbage collection) runs this often...
    pub checkpoint_interval: Duration,
    /// ...or after this many new log bytes, whichever comes first.
    pub checkpoint_bytes: u64,
    pub compaction: CompactionPolicy,
    /// Tiering to an object store; `None` keeps every byte in the log.
    pub tier: Option<TierConfig>,
    /// Bytes of recently read log pages each group keeps for readers of
    /// the same bytes (see [`crate::recent_pages`]).
    pub read_pages_bytes: u64,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            groups: 1,
            sync: SyncMode::Batch,
            segment_bytes: 256 << 20,
            preallocate_segments: true,
            max_record_bytes: 128 << 20,
            max_pending_proposals: 65_536,
            max_inflight_bytes: 512 << 20,
            sweep_interval: Duration::from_millis(500),
            checkpoint_interval: Duration::from_secs(300),
            checkpoint_bytes: 256 << 20,
            read_pages_bytes: crate::recent_pages::DEFAULT_BUDGET_BYTES,
            compaction: CompactionPolicy {
                min_bytes: 64 << 10,
                idle: Duration::from_secs(1),
                max_snapshot_bytes: 128 << 20,
            },
            tier: None,
        }
    }
}
