//! A cluster rebuilt from its bucket alone: fresh nodes started with
//! `runnel serve --restore` form a new cluster (a new id: no node of it
//! talks to a survivor of the old one) and each group takes its streams
//! from the old cluster's newest backup of it ([`super::backup`]).
//!
//! Before a node opens, [`prepare`] checks that its data directory is
//! empty and picks the old cluster (`--restore-from`, or the one whose
//! control group was backed up last), and writes it to
//! `DATA_DIR/restoring`. While that file is there the node restores: the
//! leader of each group it holds proposes the group's backup as the
//! group's first entry (`Command::RestoreGroup`, see
//! `runnel_core::restore`), the control group first, the data groups
//! from the cluster the control group was restored from. Until a group
//! is restored the node refuses writes to it (503) and is not ready, and
//! no object is swept. Once every group it holds is restored the file
//! goes. A node restarted mid-restore (without `--restore`) goes on.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use runnel_core::{Applied, Command};
use runnel_tier::names::{GroupBackupId, GROUP_BACKUP_AREA};
use runnel_tier::{ObjectPath, TierError, TierStore};

use super::{ClusterConfig, ClusterNode};
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::datadir::write_file_durably;
use crate::error::EngineError;
use crate::raft::group::RaftGroup;
use crate::upkeep::MaintainedGroup;

/// The file that marks a data directory still being restored.
pub const RESTORING_FILE: &str = "restoring";
/// How often a restoring node looks at its groups.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Why a restore cannot start, or a group's backup cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("--restore needs the object store the old cluster backed up to (--object-store)")]
    NoStore,
    #[error("--restore: {0} already holds data; restore into an empty data directory (a node whose restore was interrupted goes on when started without --restore)")]
    NotEmpty(PathBuf),
    #[error("--restore: the object store {0} holds no cluster backup")]
    NoBackup(String),
    #[error("--restore-from {wanted}: the object store holds no backup of that cluster (it holds: {held})")]
    NoSuchCluster { wanted: String, held: String },
    #[error("--cluster-id {0} is the id of the cluster being restored: the restored cluster takes a new id, so that no node of the old one mistakes it for its own")]
    SameId(String),
    #[error("cluster {cluster} had {theirs} groups, this node has {ours} (--groups): streams would land in other groups")]
    GroupCount {
        cluster: String,
        theirs: u32,
        ours: u32,
    },
    #[error("{path}: {source}")]
    Marker {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] TierError),
    #[error(transparent)]
    Backup(#[from] super::backup::GroupBackupError),
    #[error("group {group}'s backup {path} holds {bytes} bytes, more than the {max} one restore entry carries")]
    TooLarge {
        group: u32,
        path: String,
        bytes: usize,
        max: usize,
    },
}

/// Checks that a restore can start and picks the cluster to restore
/// from; writes `DATA_DIR/restoring`. Returns that cluster's id. Nothing
/// is written when it refuses.
pub fn prepare<'a>(
    config: &'a ClusterConfig,
    from: Option<&'a str>,
) -> futures::future::BoxFuture<'a, Result<String, RestoreError>> {
    Box::pin(prepare_now(config, from))
}

async fn prepare_now(config: &ClusterConfig, from: Option<&str>) -> Result<String, RestoreError> {
    let dir = &config.engine.data_dir;
    let tier = config.engine.tier.as_ref().ok_or(RestoreError::NoStore)?;
    let holds_data = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().any(|e| e.file_name() != RESTORING_FILE))
        .unwrap_or(false);
    if holds_data {
        return Err(RestoreError::NotEmpty(dir.clone()));
    }
    let store = TierStore::open(&tier.store)?;
    let backups: Vec<GroupBackupId> = store
        .list(&ObjectPath::from(GROUP_BACKUP_AREA))
        .await?
        .iter()
        .filter_map(|o| GroupBackupId::parse(&o.path))
        .collect();
    // The clusters whose control group was backed up, by their newest.
    let mut clusters: Vec<(u64, String)> = Vec::new();
    for id in backups.iter().filter(|id| id.group == CONTROL_GROUP as u32) {
        match clusters.iter_mut().find(|(_, c)| *c == id.cluster) {
            Some((newest, _)) => *newest = (*newest).max(id.sequence),
            None => clusters.push((id.sequence, id.cluster.clone())),
        }
    }
    clusters.sort_unstable();
    let source = match from {
        Some(wanted) => clusters
            .iter()
            .find(|(_, c)| c == wanted)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| RestoreError::NoSuchCluster {
                wanted: wanted.to_string(),
                held: held(&clusters),
            })?,
        None => clusters
            .last()
            .map(|(_, c)| c.clone())
            .ok_or_else(|| RestoreError::NoBackup(store.describe().to_string()))?,
    };
    if config.cluster_id.as_deref() == Some(source.as_str()) {
        return Err(RestoreError::SameId(source));
    }
    let theirs = backups
        .iter()
        .filter(|id| id.cluster == source)
        .map(|id| id.group + 1)
        .max()
        .unwrap_or(1);
    let ours = config.engine.groups.max(1);
    if theirs != ours {
        return Err(RestoreError::GroupCount {
            cluster: source,
            theirs,
            ours,
        });
    }
    runnel_log::create_dir_durable(dir).map_err(|source| RestoreError::Marker {
        path: dir.clone(),
        source,
    })?;
    let marker = dir.join(RESTORING_FILE);
    write_file_durably(dir, RESTORING_FILE, &source).map_err(|source| RestoreError::Marker {
        path: marker.clone(),
        source,
    })?;
    Ok(source)
}

fn held(clusters: &[(u64, String)]) -> String {
    if clusters.is_empty() {
        return "none".into();
    }
    clusters
        .iter()
        .map(|(_, c)| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cluster this node is restoring from, if `DATA_DIR/restoring` says so.
pub(super) fn pending_source(dir: &Path) -> Result<Option<String>, std::io::Error> {
    match std::fs::read_to_string(dir.join(RESTORING_FILE)) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs on a restoring node until every group it holds is restored.
pub(crate) async fn restore(node: Weak<ClusterNode>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        if node.restore_round().await {
            return;
        }
    }
}

impl ClusterNode {
    /// Whether `group` waits for its restore: this node restores and the
    /// group's state is not restored yet.
    pub(crate) fn restore_pending(&self, group: &RaftGroup) -> bool {
        self.restoring.load(Ordering::Relaxed)
            && group.view().with_state(|s| s.restored_from().is_none())
    }

    /// Refuses a write to `group` while it waits for its restore.
    pub(crate) fn refuse_unrestored(&self, group: &RaftGroup) -> Result<(), EngineError> {
        if self.restore_pending(group) {
            return Err(EngineError::Restoring {
                group: group.index(),
            });
        }
        Ok(())
    }

    /// Restores the groups this node leads and that wait; returns whether
    /// every group it holds is restored (and the restore is over here).
    async fn restore_round(&self) -> bool {
        let Some(source) = self.restore_source.as_deref() else {
            return true;
        };
        // A restore entry is a format of cluster version 2: written once
        // the new cluster is at it (it finalises by itself while restoring).
        if self.cluster_version() < 2 {
            return false;
        }
        let control_source = self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.restored_from().map(str::to_string));
        let mut waiting = 0;
        for group in &self.groups {
            if !self.holds(group) || !self.restore_pending(group) {
                continue;
            }
            waiting += 1;
            if !group.leads() {
                continue;
            }
            let from = if group.index() == CONTROL_GROUP as u32 {
                source.to_string()
            } else {
                match &control_source {
                    Some(from) => from.clone(),
                    None => continue,
                }
            };
            if let Err(err) = self.restore_group(group, &from).await {
                tracing::warn!(group = group.index(), error = %err, "restoring the group; retrying");
            }
        }
        if waiting > 0 {
            return false;
        }
        let marker = self.data_dir.join(RESTORING_FILE);
        let removed = std::fs::remove_file(&marker)
            .and_then(|()| std::fs::File::open(&self.data_dir).and_then(|d| d.sync_all()));
        if let Err(err) = removed {
            tracing::error!(path = %marker.display(), error = %err, "the restore is done, but its marker stays");
            return false;
        }
        self.restoring.store(false, Ordering::Relaxed);
        if let Some(tiering) = &self.tiering {
            tiering.hold_sweeps(false);
        }
        tracing::warn!(
            from = source,
            "every group of this node is restored from the bucket"
        );
        true
    }

    /// Proposes `group`'s newest backup by cluster `from` as its restore.
    async fn restore_group(&self, group: &RaftGroup, from: &str) -> Result<(), RestoreGroupError> {
        let tiering = self.tiering.as_ref().ok_or(RestoreGroupError::NoStore)?;
        let index = group.index();
        let newest = super::backup::list(&tiering.store, from, index)
            .await?
            .pop();
        let checkpoint = match &newest {
            Some(id) => {
                let bytes = tiering.store.get(&id.path()).await?;
                if bytes.len() > runnel_core::restore::MAX_CHECKPOINT {
                    return Err(RestoreError::TooLarge {
                        group: index,
                        path: id.path().to_string(),
                        bytes: bytes.len(),
                        max: runnel_core::restore::MAX_CHECKPOINT,
                    }
                    .into());
                }
                Some(bytes.to_vec())
            }
            None => None,
        };
        let command = Command::RestoreGroup {
            source: from.to_string(),
            checkpoint,
        };
        match group.propose(command).await? {
            Applied::Restored {
                streams,
                lost_bytes,
                newly,
                ..
            } => {
                tracing::warn!(
                    group = index,
                    from,
                    backup = newest.map(|id| id.path().to_string()),
                    streams,
                    lost_bytes,
                    newly,
                    "group restored from the bucket; untiered tails were lost"
                );
                Ok(())
            }
            other => Err(RestoreGroupError::Unexpected(Box::new(other))),
        }
    }

    /// The status document's `restore` section, while restoring.
    pub(crate) fn restore_status(&self) -> Option<serde_json::Value> {
        if !self.restoring.load(Ordering::Relaxed) {
            return None;
        }
        let waiting: Vec<u32> = self
            .groups
            .iter()
            .filter(|g| self.holds(g) && self.restore_pending(g))
            .map(|g| g.index())
            .collect();
        Some(serde_json::json!({
            "from": self.restore_source,
            "groups_waiting": waiting,
        }))
    }
}

/// Why one round's restore of a group failed (the next round retries).
#[derive(Debug, thiserror::Error)]
enum RestoreGroupError {
    #[error("this node has no object store")]
    NoStore,
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error(transparent)]
    Backup(#[from] super::backup::GroupBackupError),
    #[error("reading the backup: {0}")]
    Store(#[from] TierError),
    #[error(transparent)]
    Propose(#[from] EngineError),
    #[error("the restore entry applied as {0:?}")]
    Unexpected(Box<Applied>),
}
