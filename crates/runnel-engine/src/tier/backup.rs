//! Disaster recovery of a single node: its checkpoint goes to the object
//! store after tiering made progress, and a node that lost its disk
//! starts from the newest one.
//!
//! A backed-up checkpoint names chunk objects by reference, so the store
//! holds every byte it needs except each stream's untiered tail. The
//! queue of objects to delete is held back by backups (see [`super::gc`]):
//! an object is deleted only once the newest backup no longer names it.
//! Two backups are kept; older ones are deleted once a newer is up.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use runnel_tier::names::CHECKPOINT_AREA;
use runnel_tier::{CheckpointId, ObjectPath, TierError, TierStore};

use super::Tiering;
use crate::checkpoint::{self, CheckpointError, FileWriter};
use crate::clock::now_ms;
use crate::config::EngineConfig;

/// Backups kept in the store.
const KEEP: usize = 2;

/// Why a backup could not be made, or a restore could not be done.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Store(#[from] TierError),
    #[error(transparent)]
    Rotate(#[from] RotateError),
    #[error("reading checkpoint {path}: {source}")]
    Fetch { path: String, source: TierError },
    #[error("checkpoint {path}: {source}")]
    Damaged {
        path: String,
        source: Box<CheckpointError>,
    },
    #[error("creating {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing the restored checkpoint: {0}")]
    Write(std::io::Error),
    #[error("--restore needs an object store (--object-store)")]
    NoStore,
    #[error("--restore: {0} already holds data; restore into an empty data directory")]
    NotEmpty(PathBuf),
    #[error("--restore: {0} does not exist")]
    NoSuchStore(String),
    #[error("--restore: the object store {0} holds no checkpoint")]
    NoBackup(String),
}

/// Every backup in the store, oldest first.
async fn list(store: &TierStore) -> Result<Vec<CheckpointId>, BackupError> {
    let mut ids: Vec<CheckpointId> = store
        .list(&ObjectPath::from(CHECKPOINT_AREA))
        .await?
        .iter()
        .filter_map(|o| CheckpointId::parse(&o.path))
        .collect();
    ids.sort_unstable_by_key(|id| (id.sequence, id.nonce));
    Ok(ids)
}

/// Uploads a checkpoint file whose groups' next deletion numbers are
/// `doomed_next`, then deletes all but the newest backups.
pub(crate) async fn upload(
    tiering: &Tiering,
    file: Vec<u8>,
    doomed_next: Vec<u64>,
    progress: (u64, u64, u64),
) -> Result<(), BackupError> {
    let existing = list(&tiering.store).await?;
    let sequence = existing
        .last()
        .map_or(0, |id| id.sequence + 1)
        .max(u64::try_from(now_ms()).unwrap_or(0));
    let id = CheckpointId {
        sequence,
        node: tiering.node_id,
        nonce: rand::random(),
    };
    let older = existing.iter().map(CheckpointId::path).collect();
    put_and_rotate(&tiering.store, &id.path(), Bytes::from(file), older).await?;
    tiering.set_backed_up(doomed_next, progress);
    tiering
        .stats
        .backups_uploaded
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Why a new backup was not stored, or an old one not deleted.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("uploading {path}: {source}")]
    Upload { path: String, source: TierError },
    #[error("deleting the old backup {path}: {source}")]
    DeleteOld { path: String, source: TierError },
}

/// Stores a new backup at `new`, then deletes the `older` backups
/// (oldest first) but the newest [`KEEP`] ones, the new one among them.
pub(crate) async fn put_and_rotate(
    store: &TierStore,
    new: &ObjectPath,
    bytes: Bytes,
    older: Vec<ObjectPath>,
) -> Result<(), RotateError> {
    store
        .put_new(new, bytes, |_| {})
        .await
        .map_err(|source| RotateError::Upload {
            path: new.to_string(),
            source,
        })?;
    let stale = (older.len() + 1).saturating_sub(KEEP);
    for old in &older[..stale.min(older.len())] {
        store
            .delete(old)
            .await
            .map_err(|source| RotateError::DeleteOld {
                path: old.to_string(),
                source,
            })?;
    }
    Ok(())
}

/// What a restore brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The backup used.
    pub checkpoint: String,
    /// Streams in it.
    pub streams: usize,
    /// Bytes of streams' untiered tails that the backup did not hold.
    pub lost_bytes: u64,
    /// Groups of the restored checkpoint: the node must open with as many.
    pub groups: u32,
}

/// Writes, into the empty data directory `dir`, the checkpoint of the
/// newest backup in `store`, reduced to what the store holds. `None` when
/// the store holds no backup. A backup of other than `groups` groups is
/// refused; with `None`, it keeps its own count.
pub async fn restore(
    store: &TierStore,
    dir: &Path,
    groups: Option<usize>,
) -> Result<Option<Restored>, BackupError> {
    let Some(newest) = list(store).await?.pop() else {
        return Ok(None);
    };
    let bytes = store
        .get(&newest.path())
        .await
        .map_err(|source| BackupError::Fetch {
            path: newest.path().to_string(),
            source,
        })?;
    let loaded = checkpoint::decode(&bytes, groups).map_err(|e| BackupError::Damaged {
        path: newest.path().to_string(),
        source: Box::new(e),
    })?;
    let mut lost_bytes = 0;
    let mut streams = 0;
    let groups = loaded.groups.len();
    let mut file = FileWriter::new(groups);
    for (mut state, _) in loaded.groups {
        lost_bytes += state.keep_only_tiered();
        streams += state.stream_count();
        // A fresh, empty log: nothing to replay.
        file.group(0, &state.capture_checkpoint());
    }
    runnel_log::create_dir_durable(dir).map_err(|source| BackupError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    checkpoint::store(dir, &file.finish()).map_err(BackupError::Write)?;
    Ok(Some(Restored {
        checkpoint: newest.path().to_string(),
        streams,
        lost_bytes,
        groups: groups as u32,
    }))
}

/// Before a single node opens: restores its data directory from the
/// object store when asked to (`force`, refused over existing data), or
/// when the directory holds no data and the store holds a backup.
///
/// With `keep_groups`, the backup must have `config.groups` groups (the
/// operator chose the count); otherwise it keeps its own, which the
/// caller opens the node with ([`Restored::groups`]).
///
/// Boxed so that it is compiled once, here (see [`ClusterNode::open`]).
///
/// [`ClusterNode::open`]: crate::cluster::ClusterNode::open
pub fn restore_node(
    config: &EngineConfig,
    force: bool,
    keep_groups: bool,
) -> futures::future::BoxFuture<'_, Result<Option<Restored>, BackupError>> {
    Box::pin(restore_node_now(config, force, keep_groups))
}

async fn restore_node_now(
    config: &EngineConfig,
    force: bool,
    keep_groups: bool,
) -> Result<Option<Restored>, BackupError> {
    let Some(tier) = &config.tier else {
        return if force {
            Err(BackupError::NoStore)
        } else {
            Ok(None)
        };
    };
    let dir = &config.data_dir;
    let has_data = checkpoint::path(dir).exists()
        || std::fs::read_dir(dir.join("log"))
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(false);
    if has_data {
        return if force {
            Err(BackupError::NotEmpty(dir.to_path_buf()))
        } else {
            Ok(None)
        };
    }
    // A local store that does not exist holds no backup (and opening it
    // would create it, and the data directory around it, unsynced).
    if tier.store.local_dir().is_some_and(|d| !d.exists()) {
        return if force {
            Err(BackupError::NoSuchStore(tier.store.url.clone()))
        } else {
            Ok(None)
        };
    }
    let store = TierStore::open(&tier.store)?;
    let groups = keep_groups.then_some(config.groups.max(1) as usize);
    let restored = restore(&store, dir, groups).await?;
    match (&restored, force) {
        (None, true) => Err(BackupError::NoBackup(store.describe().to_string())),
        _ => Ok(restored),
    }
}
