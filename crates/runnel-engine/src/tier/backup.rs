//! Disaster recovery of a single node: its checkpoint goes to the object
//! store after tiering made progress, and a node that lost its disk
//! starts from the newest one.
//!
//! A backed-up checkpoint names chunk objects by reference, so the store
//! holds every byte it needs except each stream's untiered tail. The
//! queue of objects to delete is held back by backups (see [`super::gc`]):
//! an object is deleted only once the newest backup no longer names it.
//! Two backups are kept; older ones are deleted once a newer is up.

use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use runnel_tier::names::CHECKPOINT_AREA;
use runnel_tier::{CheckpointId, ObjectPath, TierStore};

use super::Tiering;
use crate::checkpoint::{self, FileWriter};
use crate::clock::now_ms;
use crate::config::EngineConfig;

/// Backups kept in the store.
const KEEP: usize = 2;

/// Every backup in the store, oldest first.
async fn list(store: &TierStore) -> Result<Vec<CheckpointId>, String> {
    let mut ids: Vec<CheckpointId> = store
        .list(&ObjectPath::from(CHECKPOINT_AREA))
        .await
        .map_err(|e| e.to_string())?
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
) -> Result<(), String> {
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
    tiering
        .store
        .put_new(&id.path(), Bytes::from(file), |_| {})
        .await
        .map_err(|e| format!("uploading checkpoint {}: {e}", id.path()))?;
    tiering.set_backed_up(doomed_next, progress);
    tiering
        .stats
        .backups_uploaded
        .fetch_add(1, Ordering::Relaxed);
    let mut all = existing;
    all.push(id);
    let stale = all.len().saturating_sub(KEEP);
    for old in &all[..stale] {
        tiering
            .store
            .delete(&old.path())
            .await
            .map_err(|e| format!("deleting old checkpoint {}: {e}", old.path()))?;
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
}

/// Writes, into the empty data directory `dir`, the checkpoint of the
/// newest backup in `store`, reduced to what the store holds. `None` when
/// the store holds no backup.
pub async fn restore(
    store: &TierStore,
    dir: &Path,
    groups: usize,
) -> Result<Option<Restored>, String> {
    let Some(newest) = list(store).await?.pop() else {
        return Ok(None);
    };
    let bytes = store
        .get(&newest.path())
        .await
        .map_err(|e| format!("reading checkpoint {}: {e}", newest.path()))?;
    let loaded = checkpoint::decode(&bytes, groups)
        .map_err(|e| format!("checkpoint {}: {e}", newest.path()))?;
    let mut lost_bytes = 0;
    let mut streams = 0;
    let mut file = FileWriter::new(groups);
    for (mut state, _) in loaded.groups {
        lost_bytes += state.keep_only_tiered();
        streams += state.stream_count();
        // A fresh, empty log: nothing to replay.
        file.group(0, &state.capture_checkpoint());
    }
    runnel_log::create_dir_durable(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    checkpoint::store(dir, &file.finish())
        .map_err(|e| format!("writing the restored checkpoint: {e}"))?;
    Ok(Some(Restored {
        checkpoint: newest.path().to_string(),
        streams,
        lost_bytes,
    }))
}

/// Before a single node opens: restores its data directory from the
/// object store when asked to (`force`, refused over existing data), or
/// when the directory holds no data and the store holds a backup.
pub async fn restore_node(config: &EngineConfig, force: bool) -> Result<Option<Restored>, String> {
    let Some(tier) = &config.tier else {
        return if force {
            Err("--restore needs an object store (--object-store)".into())
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
            Err(format!(
                "--restore: {} already holds data; restore into an empty data directory",
                dir.display()
            ))
        } else {
            Ok(None)
        };
    }
    // A local store that does not exist holds no backup (and opening it
    // would create it, and the data directory around it, unsynced).
    if tier.store.local_dir().is_some_and(|d| !d.exists()) {
        return if force {
            Err(format!("--restore: {} does not exist", tier.store.url))
        } else {
            Ok(None)
        };
    }
    let store = TierStore::open(&tier.store).map_err(|e| e.to_string())?;
    let restored = restore(&store, dir, config.groups.max(1) as usize).await?;
    match (&restored, force) {
        (None, true) => Err(format!(
            "--restore: the object store {} holds no checkpoint",
            store.describe()
        )),
        _ => Ok(restored),
    }
}
