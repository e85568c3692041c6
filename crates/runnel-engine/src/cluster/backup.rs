//! Backups of a cluster's groups to its object store, for a cluster
//! rebuilt from its bucket alone ([`super::restore`]).
//!
//! Each group's leader backs up its group: the group's whole state (as a
//! checkpoint encodes it; it names its tiered history by object) under
//! `backups/c-{cluster}/g{group}/`, when the state changed since this
//! node's last backup of it and at most once per `--tier-backup-interval`.
//! The two newest backups of a group are kept. A backup holds every byte
//! a restore needs except each stream's untiered tail, which the object
//! store does not have.
//!
//! Object deletions wait for backups as on a single node (see
//! [`crate::tier::gc`]): a leader deletes a queued object only once its
//! own newest backup of the group was taken after the object's reference
//! was dropped, so no backup a restore may use names a deleted object. A
//! new leader deletes nothing before its first backup of the group.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use runnel_tier::names::{group_backups, GroupBackupId};
use runnel_tier::{TierError, TierStore};
// The runtime's clock, which simulations pause and advance.
use tokio::time::Instant;

use super::ClusterNode;
use crate::clock::now_ms;
use crate::raft::group::RaftGroup;
use crate::tier::backup::{put_and_rotate, RotateError};
use crate::tier::Tiering;
use crate::upkeep::MaintainedGroup;

/// How often a node looks for groups to back up.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why a group's backup was not made (the next round tries again).
#[derive(Debug, thiserror::Error)]
pub enum GroupBackupError {
    #[error("listing {prefix}: {source}")]
    List { prefix: String, source: TierError },
    #[error(transparent)]
    Rotate(#[from] RotateError),
}

/// A group state's fingerprint (see [`fingerprint`]).
type Fingerprint = (u64, u64);

/// What this node backed up, per group, for the next round and the status.
#[derive(Debug, Default)]
pub(crate) struct BackupState {
    /// Per group: the state's fingerprint at this node's last backup of
    /// it, and when that was.
    last: Mutex<BTreeMap<u32, (Fingerprint, Instant)>>,
    pub(crate) uploaded: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// Runs on every member of a cluster that tiers with backups on, while
/// `node` lives.
pub(crate) async fn back_up(node: Weak<ClusterNode>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        node.back_up_led_groups().await;
    }
}

/// A group state's fingerprint: what readers see, and the queue of
/// deletions (a backup taken after a reference was dropped lets the
/// object go).
fn fingerprint(group: &RaftGroup) -> Fingerprint {
    group
        .view()
        .with_state(|s| (s.digest(), s.doomed_next_seq()))
}

impl ClusterNode {
    /// Backs up each group this node leads whose state changed since its
    /// last backup here, at most once per backup interval.
    async fn back_up_led_groups(&self) {
        let Some(tiering) = self.tiering.as_ref().filter(|t| t.config.backup) else {
            return;
        };
        let Some(cluster) = self.cluster_id().map(str::to_string) else {
            return;
        };
        for group in &self.groups {
            let index = group.index();
            if !group.leads() || !self.holds(group) || self.restore_pending(group) {
                continue;
            }
            let due = self
                .backups
                .last
                .lock()
                .expect("backup lock")
                .get(&index)
                .is_none_or(|(_, at)| at.elapsed() >= tiering.config.backup_interval);
            if !due {
                continue;
            }
            let fingerprint = fingerprint(group);
            let unchanged = self
                .backups
                .last
                .lock()
                .expect("backup lock")
                .get(&index)
                .is_some_and(|(last, _)| *last == fingerprint);
            if unchanged {
                // Looked at again an interval from now (the fingerprint
                // reads every stream of the group).
                self.backups
                    .last
                    .lock()
                    .expect("backup lock")
                    .insert(index, (fingerprint, Instant::now()));
                continue;
            }
            match back_up_group(tiering, &cluster, group).await {
                Ok(()) => {
                    self.backups
                        .last
                        .lock()
                        .expect("backup lock")
                        .insert(index, (fingerprint, Instant::now()));
                    self.backups.uploaded.fetch_add(1, Ordering::Relaxed);
                    *self.backups.last_error.lock().expect("backup lock") = None;
                }
                Err(err) => {
                    tracing::warn!(group = index, error = %err, "group backup failed");
                    *self.backups.last_error.lock().expect("backup lock") =
                        Some(format!("group {index}: {err}"));
                }
            }
        }
    }

    /// The status document's `backups` section: `current` while every
    /// group this node leads is backed up as it stands.
    pub(crate) fn backup_status(&self) -> Option<serde_json::Value> {
        let tiering = self.tiering.as_ref().filter(|t| t.config.backup)?;
        let last = self.backups.last.lock().expect("backup lock").clone();
        let behind: Vec<u32> = self
            .groups
            .iter()
            .filter(|g| g.leads() && self.holds(g))
            .filter(|g| {
                last.get(&g.index())
                    .is_none_or(|(fingerprint, _)| *fingerprint != self::fingerprint(g))
            })
            .map(|g| g.index())
            .collect();
        Some(serde_json::json!({
            "interval_secs": tiering.config.backup_interval.as_secs(),
            "uploaded": self.backups.uploaded.load(Ordering::Relaxed),
            "groups_behind": behind,
            "current": behind.is_empty(),
            "last_error": self.backups.last_error.lock().expect("backup lock").clone(),
        }))
    }
}

/// Uploads `group`'s state as a backup of cluster `cluster`, lets the
/// deletions queued before it go, and deletes all but the newest backups
/// of the group.
async fn back_up_group(
    tiering: &Tiering,
    cluster: &str,
    group: &RaftGroup,
) -> Result<(), GroupBackupError> {
    let index = group.index();
    // Taken under the group's lock, encoded after it (see `CheckpointCapture`).
    let (capture, doomed_next) = group
        .view()
        .with_state(|s| (s.capture_checkpoint(), s.doomed_next_seq()));
    let existing = list(&tiering.store, cluster, index).await?;
    let id = GroupBackupId {
        cluster: cluster.to_string(),
        group: index,
        sequence: existing
            .last()
            .map_or(0, |id| id.sequence + 1)
            .max(u64::try_from(now_ms()).unwrap_or(0)),
        node: tiering.node_id,
        nonce: rand::random(),
    };
    let older = existing.iter().map(GroupBackupId::path).collect();
    put_and_rotate(
        &tiering.store,
        &id.path(),
        Bytes::from(capture.encode()),
        older,
    )
    .await?;
    tiering.set_group_backed_up(index, doomed_next);
    Ok(())
}

/// Group `group`'s backups by cluster `cluster`, oldest first.
pub(crate) async fn list(
    store: &TierStore,
    cluster: &str,
    group: u32,
) -> Result<Vec<GroupBackupId>, GroupBackupError> {
    let prefix = group_backups(cluster, group);
    let mut ids: Vec<GroupBackupId> = store
        .list(&prefix)
        .await
        .map_err(|source| GroupBackupError::List {
            prefix: prefix.to_string(),
            source,
        })?
        .iter()
        .filter_map(|o| GroupBackupId::parse(&o.path))
        .filter(|id| id.cluster == cluster && id.group == group)
        .collect();
    ids.sort_unstable_by_key(|id| (id.sequence, id.nonce));
    Ok(ids)
}
