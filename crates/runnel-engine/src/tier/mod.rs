//! Tiering, as the engine runs it: what to move to the object store and
//! when, committing the references through each group's log, serving
//! reads of tiered history, deleting objects nothing needs, and backing
//! up a single node's checkpoint for disaster recovery. The object store
//! itself, the chunk format and the block cache are `runnel_tier`'s; the
//! rules that keep references right are `runnel_core::tier`'s.
//!
//! Module map: [`reader`] fetches tiered bytes for reads, snapshots and
//! fork copies; [`prepare`] checks positions inside tiered chunks before
//! a command that names one is proposed; [`uploader`] builds and uploads
//! chunks and proposes their references; [`gc`] deletes objects whose
//! references were dropped and sweeps orphans; [`backup`] uploads and
//! restores checkpoints.

pub mod backup;
pub(crate) mod gc;
pub(crate) mod prepare;
pub(crate) mod reader;
pub(crate) mod uploader;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runnel_core::{ColdChunk, StreamId};
use runnel_tier::{BlockCache, Layout, ObjectId, ObjectKind, StoreConfig, TierStore, Writer};
use tokio::sync::Notify;

use crate::error::{EngineError, TierReadError};
use crate::metrics::TierMetrics;

/// Why a node's object store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TierOpenError {
    #[error("creating the object store directory {dir}: {source}")]
    CreateDir {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] runnel_tier::TierError),
}

/// How a node tiers.
#[derive(Debug, Clone)]
pub struct TierConfig {
    pub store: StoreConfig,
    /// A stream's hot bytes are tiered once they reach this many; also the
    /// largest chunk.
    pub chunk_bytes: u64,
    /// Appends older than this are tiered whatever their stream's size.
    pub max_age: Duration,
    /// The local window: log bytes further back than this from the head
    /// are tiered first, whatever their stream's size and age.
    pub hot_bytes: u64,
    /// Past this many untiered bytes on the node, writes get 503.
    pub max_untiered_bytes: u64,
    /// Memory for cached blocks and footers.
    pub cache_bytes: u64,
    /// Stream bytes per checksummed block of a chunk object.
    pub block_bytes: u32,
    /// Blocks fetched ahead of a sequential reader.
    pub readahead_blocks: u32,
    /// How often the tierer looks for work.
    pub interval: Duration,
    /// Uploads in flight at once.
    pub upload_concurrency: usize,
    /// How long a dropped reference's object stays (reads planned before
    /// the drop finish meanwhile).
    pub gc_grace: Duration,
    /// Objects that nothing references and that are older than this are
    /// deleted by the sweep.
    pub orphan_grace: Duration,
    /// How often the sweep runs.
    pub sweep_interval: Duration,
    /// Single node: upload the checkpoint after tiering, for `--restore`.
    pub backup: bool,
    /// A backup follows tiering progress at most this often.
    pub backup_interval: Duration,
}

impl TierConfig {
    pub fn new(store: StoreConfig) -> TierConfig {
        TierConfig {
            store,
            chunk_bytes: 8 << 20,
            max_age: Duration::from_secs(60),
            hot_bytes: 1 << 30,
            max_untiered_bytes: 8 << 30,
            cache_bytes: 256 << 20,
            block_bytes: 1 << 20,
            readahead_blocks: 8,
            interval: Duration::from_secs(1),
            upload_concurrency: 8,
            gc_grace: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(3600),
            sweep_interval: Duration::from_secs(3600),
            backup: true,
            backup_interval: Duration::from_secs(30),
        }
    }
}

/// Counters of the tierer's work, for status and metrics.
#[derive(Debug, Default)]
pub struct TierStats {
    pub chunks_uploaded: AtomicU64,
    pub bytes_uploaded: AtomicU64,
    pub snapshots_uploaded: AtomicU64,
    pub upload_failures: AtomicU64,
    /// Uploads whose reference the group refused (their object deleted).
    pub refused: AtomicU64,
    pub objects_deleted: AtomicU64,
    pub orphans_swept: AtomicU64,
    pub backups_uploaded: AtomicU64,
    pub read_failures: AtomicU64,
    /// Untiered bytes of the node, as last counted.
    pub untiered_bytes: AtomicU64,
    pub tiered_bytes: AtomicU64,
    /// Objects the node's state names, as last counted: chunk
    /// references, snapshots in objects, queued deletions.
    pub cold_chunks: AtomicU64,
    pub cold_snapshots: AtomicU64,
    pub objects_queued_for_deletion: AtomicU64,
}

/// A node's tiering: its store, cache, settings and counters, shared by
/// its groups.
pub struct Tiering {
    pub config: TierConfig,
    pub store: Arc<TierStore>,
    pub cache: Arc<BlockCache>,
    pub node_id: u64,
    pub stats: TierStats,
    /// The last failure of an upload or deletion, until one succeeds.
    last_error: Mutex<Option<String>>,
    /// Rung when enough was tiered that a checkpoint would free disk.
    pub reclaim: Notify,
    /// Per group: deletions queued before this sequence number are in
    /// the newest backed-up checkpoint's past (see [`backup`]); `None`
    /// until a backup exists or when backups are off.
    backed_up: Mutex<Vec<Option<u64>>>,
    /// Tiering's progress when the newest backup's checkpoint was taken.
    backup_progress: Mutex<Option<(u64, u64, u64)>>,
    /// Set while a cluster member restores its groups from the bucket:
    /// a group not restored yet names none of its objects, and a sweep
    /// would delete them all.
    sweeps_held: std::sync::atomic::AtomicBool,
}

impl Tiering {
    /// Opens the store a configuration names.
    pub fn open(
        config: TierConfig,
        node_id: u64,
        groups: usize,
    ) -> Result<Arc<Tiering>, TierOpenError> {
        // A local store's root must survive a power loss like the log's.
        if let Some(dir) = config.store.local_dir() {
            runnel_log::create_dir_durable(&dir)
                .map_err(|source| TierOpenError::CreateDir { dir, source })?;
        }
        let store = Arc::new(TierStore::open(&config.store)?);
        Ok(Tiering::with_store(config, store, node_id, groups))
    }

    /// Tiering over an already opened store (tests wrap one in faults).
    pub fn with_store(
        config: TierConfig,
        store: Arc<TierStore>,
        node_id: u64,
        groups: usize,
    ) -> Arc<Tiering> {
        Arc::new(Tiering {
            cache: BlockCache::new(Arc::clone(&store), config.cache_bytes),
            store,
            node_id,
            stats: TierStats::default(),
            last_error: Mutex::new(None),
            reclaim: Notify::new(),
            backed_up: Mutex::new(vec![None; groups]),
            backup_progress: Mutex::new(None),
            sweeps_held: std::sync::atomic::AtomicBool::new(false),
            config,
        })
    }

    /// Whether appends must wait for the tierer to catch up.
    pub fn over_backlog(&self) -> Option<EngineError> {
        let untiered = self.stats.untiered_bytes.load(Ordering::Relaxed);
        let cap = self.config.max_untiered_bytes;
        (untiered > cap).then_some(EngineError::TierBacklog { untiered, cap })
    }

    /// Counts `bytes` just stored as untiered until the tierer's next
    /// recount (the write back-pressure reads the count).
    pub fn note_stored(&self, bytes: u64) {
        self.stats
            .untiered_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn note_error(&self, error: impl std::fmt::Display) {
        let text = error.to_string();
        tracing::warn!(error = %text, "tiering");
        *self.last_error.lock().expect("error lock") = Some(text);
    }

    pub fn clear_error(&self) {
        *self.last_error.lock().expect("error lock") = None;
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().expect("error lock").clone()
    }

    /// The status document's `tiering` section.
    /// The figures `/metrics` shows.
    pub fn metrics(&self) -> TierMetrics {
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let store = &self.store.stats;
        let cache = &self.cache.stats;
        TierMetrics {
            untiered_bytes: load(&s.untiered_bytes),
            tiered_bytes: load(&s.tiered_bytes),
            backlog_full: self.over_backlog().is_some(),
            upload_failures: load(&s.upload_failures),
            read_failures: load(&s.read_failures),
            store_gets: load(&store.gets),
            store_puts: load(&store.puts),
            store_errors: load(&store.errors),
            store_call_seconds: load(&store.call_micros) as f64 / 1e6,
            cache_hits: load(&cache.hits),
            cache_misses: load(&cache.misses),
            cache_bytes: load(&cache.bytes),
        }
    }

    pub fn status(&self) -> serde_json::Value {
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let store = &self.store.stats;
        let cache = &self.cache.stats;
        serde_json::json!({
            "object_store": self.store.describe(),
            "untiered_bytes": load(&s.untiered_bytes),
            "tiered_bytes": load(&s.tiered_bytes),
            "tiered_chunks": load(&s.cold_chunks),
            "tiered_snapshots": load(&s.cold_snapshots),
            "objects_queued_for_deletion": load(&s.objects_queued_for_deletion),
            "max_untiered_bytes": self.config.max_untiered_bytes,
            "backlog_full": self.over_backlog().is_some(),
            "chunks_uploaded": load(&s.chunks_uploaded),
            "bytes_uploaded": load(&s.bytes_uploaded),
            "snapshots_uploaded": load(&s.snapshots_uploaded),
            "upload_failures": load(&s.upload_failures),
            "references_refused": load(&s.refused),
            "objects_deleted": load(&s.objects_deleted),
            "orphans_swept": load(&s.orphans_swept),
            "backups_uploaded": load(&s.backups_uploaded),
            "backup_current": self.config.backup
                && *self.backup_progress.lock().expect("backup lock") == Some(progress(self)),
            "read_failures": load(&s.read_failures),
            "store_errors": load(&store.errors),
            "store_gets": load(&store.gets),
            "store_puts": load(&store.puts),
            "cache_bytes": load(&cache.bytes),
            "cache_hits": load(&cache.hits),
            "cache_misses": load(&cache.misses),
            "last_error": self.last_error(),
        })
    }

    fn backed_up(&self, group: u32) -> Option<u64> {
        self.backed_up.lock().expect("backup lock")[group as usize]
    }

    /// One group's backup (a cluster's, see `cluster::backup`) names no
    /// object whose deletion was queued before `floor`.
    pub(crate) fn set_group_backed_up(&self, group: u32, floor: u64) {
        self.backed_up.lock().expect("backup lock")[group as usize] = Some(floor);
    }

    /// Holds or releases the sweep of unreferenced objects.
    pub(crate) fn hold_sweeps(&self, held: bool) {
        self.sweeps_held.store(held, Ordering::Relaxed);
    }

    pub(crate) fn sweeps_held(&self) -> bool {
        self.sweeps_held.load(Ordering::Relaxed)
    }

    fn set_backed_up(&self, floors: Vec<u64>, progress: (u64, u64, u64)) {
        *self.backup_progress.lock().expect("backup lock") = Some(progress);
        let mut backed = self.backed_up.lock().expect("backup lock");
        for (slot, floor) in backed.iter_mut().zip(floors) {
            *slot = Some(floor);
        }
    }
}

/// A fingerprint of tiering's progress (what a backup would change by):
/// uploads and deletions so far.
pub(crate) fn progress(tiering: &Tiering) -> (u64, u64, u64) {
    let s = &tiering.stats;
    (
        s.chunks_uploaded.load(Ordering::Relaxed),
        s.snapshots_uploaded.load(Ordering::Relaxed),
        s.objects_deleted.load(Ordering::Relaxed),
    )
}

/// A group's access to its node's tiering (reads need the group index to
/// name objects).
#[derive(Clone)]
pub struct GroupTier {
    pub tiering: Arc<Tiering>,
    pub group: u32,
}

/// The object name of a chunk of `stream` in `group`.
pub(crate) fn chunk_id(group: u32, stream: StreamId, chunk: &ColdChunk) -> ObjectId {
    ObjectId {
        group,
        stream,
        kind: ObjectKind::Chunk {
            start: chunk.start,
            end: chunk.end,
        },
        writer: writer_of(chunk),
    }
}

/// The object name of `stream`'s snapshot at `offset`.
pub(crate) fn snapshot_id(
    group: u32,
    stream: StreamId,
    offset: u64,
    object: &ColdChunk,
) -> ObjectId {
    ObjectId {
        group,
        stream,
        kind: ObjectKind::Snapshot { offset },
        writer: writer_of(object),
    }
}

fn writer_of(chunk: &ColdChunk) -> Writer {
    Writer {
        term: chunk.term,
        node: chunk.node,
        nonce: chunk.nonce,
    }
}

pub(crate) fn layout(chunk: &ColdChunk) -> Layout {
    Layout {
        start: chunk.start,
        end: chunk.end,
        block_size: chunk.block_size,
    }
}

/// A read of tiered bytes failed: the client gets a 503, never bytes
/// that might be wrong.
pub(crate) fn read_failed(tiering: &Tiering, err: runnel_tier::TierError) -> EngineError {
    tiering.stats.read_failures.fetch_add(1, Ordering::Relaxed);
    EngineError::Tier(TierReadError::Store(err))
}
