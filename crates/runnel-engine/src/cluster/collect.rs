//! Checkpoints of a cluster member: snapshot every group that applied
//! entries since its last snapshot, then delete the shared log's segments
//! that no group needs any more.
//!
//! A segment is needed while it holds bytes a group's snapshot file points
//! into, or lies at or after a group's replay point (records recovery
//! replays on top of the snapshot) or its first live Raft entry (entries
//! a lagging follower may still be sent). Nothing is collected until every
//! group has a snapshot file, groups this node dropped its copy of aside
//! (see [`super::hosting`]). openraft purges each group's Raft log up to
//! its snapshot once built (asynchronously: the segments that frees go at
//! the next checkpoint).

use std::sync::Arc;
use std::time::Duration;

use runnel_log::Log;

use super::hosting::Hosting;
use crate::checkpoint::SegmentLive;
use crate::copy_forward;
use crate::raft::group::RaftGroup;
use crate::raft::snapshot::SnapshotError;
use crate::raft::state_machine::GroupShared;
use crate::raft::{self, LogId, NodeId, StorageError};
use crate::tier::Tiering;

/// Why a cluster checkpoint stopped (the next one tries again).
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("asking group {group} for a snapshot: {source}")]
    Trigger {
        group: u32,
        source: Box<openraft::error::Fatal<NodeId>>,
    },
    #[error("group {0} did not snapshot in time")]
    SnapshotTimeout(u32),
    #[error("moving group {group}'s replay point: {source}")]
    ReplayPoint {
        group: u32,
        source: Box<StorageError>,
    },
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    #[error("collecting segments: {0}")]
    Collect(runnel_log::LogError),
    #[error(transparent)]
    CopyForward(#[from] SnapshotError),
}

pub struct Collector {
    groups: Vec<Arc<RaftGroup>>,
    shares: Vec<GroupShared>,
    log: Arc<Log>,
    inline_io: bool,
    /// Groups this node left are neither snapshotted nor waited for.
    hosting: Arc<Hosting>,
}

/// How long a checkpoint waits for the snapshots it asked for.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(30);

impl Collector {
    pub fn new(
        groups: Vec<Arc<RaftGroup>>,
        shares: Vec<GroupShared>,
        log: Arc<Log>,
        inline_io: bool,
        hosting: Arc<Hosting>,
    ) -> Collector {
        Collector {
            groups,
            shares,
            log,
            inline_io,
            hosting,
        }
    }

    /// Checkpoints every `interval`, or sooner once `bytes` of log were
    /// written since the last one, or once the tierer freed log bytes.
    pub async fn run(
        self: Arc<Self>,
        interval: Duration,
        bytes: u64,
        tiering: Option<Arc<Tiering>>,
    ) {
        let mut last = (tokio::time::Instant::now(), self.log.durable_position());
        loop {
            let reclaim = async {
                match &tiering {
                    Some(t) => t.reclaim.notified().await,
                    None => std::future::pending().await,
                }
            };
            let asked = tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1).min(interval)) => false,
                _ = reclaim => true,
            };
            let position = self.log.durable_position();
            if !asked && last.0.elapsed() < interval && position.saturating_sub(last.1) < bytes {
                continue;
            }
            last = (tokio::time::Instant::now(), position);
            match self.checkpoint().await {
                Ok(reclaimed) => tracing::debug!(reclaimed, "cluster checkpoint done"),
                Err(err) => tracing::error!(error = %err, "cluster checkpoint failed"),
            }
        }
    }

    /// Snapshots the groups that moved, then collects segments; returns
    /// the bytes reclaimed.
    pub async fn checkpoint(&self) -> Result<u64, CollectError> {
        let mut waiting = Vec::new();
        for (group, shared) in self.groups.iter().zip(&self.shares) {
            if self.dropped(shared) {
                continue;
            }
            let applied = shared.applied.lock().expect("applied lock").last;
            if applied.is_some() && applied > snapshot_point(shared) {
                group
                    .raft()
                    .trigger()
                    .snapshot()
                    .await
                    .map_err(|e| CollectError::Trigger {
                        group: shared.group,
                        source: Box::new(e),
                    })?;
                waiting.push((shared, applied));
            }
        }
        let deadline = tokio::time::Instant::now() + SNAPSHOT_WAIT;
        for (shared, applied) in waiting {
            while snapshot_point(shared) < applied {
                if tokio::time::Instant::now() > deadline {
                    return Err(CollectError::SnapshotTimeout(shared.group));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for shared in self.shares.iter().filter(|s| !self.dropped(s)) {
            shared
                .advance_replay_point()
                .await
                .map_err(|e| CollectError::ReplayPoint {
                    group: shared.group,
                    source: Box::new(e),
                })?;
        }
        self.collect().await
    }

    async fn collect(&self) -> Result<u64, CollectError> {
        let mut before = u64::MAX;
        let mut live = Vec::new();
        for shared in &self.shares {
            if self.dropped(shared) {
                live.push(Vec::new()); // `live` is indexed by group
                continue;
            }
            let Some(persisted) = shared.persisted.lock().expect("snapshot lock").clone() else {
                return Ok(0);
            };
            let first_entry = shared
                .index
                .lock()
                .expect("raft index lock")
                .first_entry_position();
            tracing::debug!(
                group = shared.group,
                replay_from = persisted.file.header.replay_from,
                first_entry,
                "log needed from"
            );
            before = before
                .min(persisted.file.header.replay_from)
                .min(first_entry.unwrap_or(u64::MAX));
            live.push(persisted.live);
        }
        let log = Arc::clone(&self.log);
        let counted = SegmentLive::count(&log.sealed_segments(), before, |f| {
            live.iter().flatten().for_each(|&(loc, len)| f(loc, len))
        });
        let counted = Arc::new(counted);
        let segments = Arc::clone(&counted);
        let reclaimed = raft::blocking(self.inline_io, move || {
            log.collect_segments(before, |base, end| segments.touches(base, end))
        })
        .await?
        .map_err(CollectError::Collect)?;
        self.copy_forward(&counted, &live).await?;
        Ok(reclaimed)
    }

    /// Whether this node dropped its copy of the group and holds nothing
    /// of it since (a group left and added again is collected as any).
    fn dropped(&self, shared: &GroupShared) -> bool {
        if !self.hosting.has_left(shared.group) {
            return false;
        }
        let index = shared.index.lock().expect("raft index lock");
        index.vote().is_none() && index.first_entry_position().is_none()
    }

    /// Moves the live bytes of mostly-dead segments forward (see
    /// [`crate::copy_forward`]); the next checkpoint deletes the segments.
    async fn copy_forward(
        &self,
        counted: &SegmentLive,
        live: &[Vec<(u64, u64)>],
    ) -> Result<(), CollectError> {
        let plan = copy_forward::plan(counted);
        if plan.moved.segments == 0 {
            return Ok(());
        }
        let mut bytes = 0;
        for (shared, group_live) in self.shares.iter().zip(live) {
            let ranges = plan.ranges(|f| group_live.iter().for_each(|&(loc, len)| f(loc, len)));
            if !ranges.is_empty() {
                bytes += shared.move_forward(ranges).await?;
            }
        }
        tracing::info!(
            segments = plan.moved.segments,
            bytes,
            "moved the live bytes of sparse segments forward; the next checkpoint deletes them"
        );
        Ok(())
    }
}

fn snapshot_point(shared: &GroupShared) -> Option<LogId> {
    shared
        .persisted
        .lock()
        .expect("snapshot lock")
        .as_ref()
        .and_then(|p| p.file.last_log_id())
}
