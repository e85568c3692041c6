//! Deleting objects: those whose references were dropped (trim, delete,
//! expiry, replaced snapshots), queued in each group's state, and orphans
//! of uploads that never got a reference.
//!
//! Queued objects go once a grace period has passed since their
//! reference was dropped (reads planned before it may still fetch them)
//! and, when the node backs up its checkpoint, once a backed-up
//! checkpoint no longer names them (a restore must find every object it
//! names). Then the group is told, through its log, that they are gone.
//! Only the group's leader deletes.
//!
//! The sweep lists a group's objects and deletes those that nothing in
//! its state names and that are older than the orphan grace (young ones
//! may belong to an upload whose reference is being committed).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use runnel_core::{Applied, Command, Entry};
use runnel_tier::names::{group_prefix, GROUP_AREAS};
use runnel_tier::{ObjectId, TierError};

use super::{chunk_id, snapshot_id, Tiering};
use crate::clock::now_ms;
use crate::error::EngineError;
use crate::upkeep::MaintainedGroup;

/// Deletion passes at most this often.
const PASS: Duration = Duration::from_secs(2);
/// Objects deleted per group per pass at most.
const BATCH: usize = 256;

/// Why a deletion pass or a sweep stopped (the next one tries again).
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("deleting {path}: {source}")]
    Delete { path: String, source: TierError },
    #[error("object deletions answered {0:?}")]
    Unexpected(Box<Applied>),
    #[error("recording object deletions: {0}")]
    Record(EngineError),
    #[error(transparent)]
    Store(#[from] TierError),
}

/// Runs deletions and sweeps over `groups` until aborted.
pub(crate) async fn run<G: MaintainedGroup + ?Sized>(groups: Vec<Arc<G>>, tiering: Arc<Tiering>) {
    let pass = PASS.min(tiering.config.gc_grace.max(Duration::from_millis(100)));
    let mut last_sweep = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(pass).await;
        for group in groups.iter().filter(|g| g.leads()) {
            if let Err(err) = delete_doomed(group.as_ref(), &tiering).await {
                tiering.note_error(format!("group {}: {err}", group.index()));
            }
        }
        if last_sweep.elapsed() >= tiering.config.sweep_interval && !tiering.sweeps_held() {
            last_sweep = tokio::time::Instant::now();
            for group in groups.iter().filter(|g| g.leads()) {
                match sweep(group.as_ref(), &tiering).await {
                    Ok(0) => {}
                    Ok(swept) => {
                        tracing::info!(group = group.index(), swept, "deleted orphaned objects")
                    }
                    Err(err) => {
                        tiering.note_error(format!("sweeping group {}: {err}", group.index()))
                    }
                }
            }
        }
    }
}

/// Deletes the group's queued objects that are due; returns how many.
pub(crate) async fn delete_doomed<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Tiering,
) -> Result<usize, GcError> {
    let grace = i64::try_from(tiering.config.gc_grace.as_millis()).unwrap_or(i64::MAX);
    let now = now_ms();
    let floor = if tiering.config.backup {
        match tiering.backed_up(group.index()) {
            Some(floor) => floor,
            None => return Ok(0),
        }
    } else {
        u64::MAX
    };
    let due: Vec<_> = group.view().with_state(|s| {
        s.doomed()
            .take_while(|d| d.queued_ms.saturating_add(grace) <= now && d.seq < floor)
            .take(BATCH)
            .cloned()
            .collect()
    });
    let Some(last) = due.last().map(|d| d.seq) else {
        return Ok(0);
    };
    for d in &due {
        let id = match d.snapshot_offset {
            Some(offset) => snapshot_id(group.index(), d.stream, offset, &d.object),
            None => chunk_id(group.index(), d.stream, &d.object),
        };
        tiering
            .store
            .delete(&id.path())
            .await
            .map_err(|source| GcError::Delete {
                path: id.path().to_string(),
                source,
            })?;
        tiering
            .stats
            .objects_deleted
            .fetch_add(1, Ordering::Relaxed);
    }
    let entry = Entry {
        now_ms: now,
        command: Command::ObjectsDeleted { up_to: last },
    };
    match group.submit_entry(entry).await {
        Ok(Applied::ObjectsDeleted { .. }) => Ok(due.len()),
        Ok(other) => Err(GcError::Unexpected(Box::new(other))),
        // Deleted but not yet forgotten: the next pass deletes them again
        // (a deletion of a missing object succeeds) and tells the group.
        Err(err) => Err(GcError::Record(err)),
    }
}

/// Deletes the group's objects nothing names; returns how many.
pub(crate) async fn sweep<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Tiering,
) -> Result<usize, GcError> {
    let index = group.index();
    let mut listed = Vec::new();
    for area in GROUP_AREAS {
        listed.extend(tiering.store.list(&group_prefix(area, index)).await?);
    }
    // Read the state after listing: a reference committed meanwhile is
    // seen, and an object uploaded meanwhile is young.
    let referenced: HashSet<ObjectId> = group.view().with_state(|s| {
        s.referenced_objects()
            .into_iter()
            .map(|(stream, snapshot, object)| match snapshot {
                Some(offset) => snapshot_id(index, stream, offset, &object),
                None => chunk_id(index, stream, &object),
            })
            .collect()
    });
    let grace = i64::try_from(tiering.config.orphan_grace.as_millis()).unwrap_or(i64::MAX);
    let old_before = now_ms().saturating_sub(grace);
    let mut swept = 0;
    for object in listed {
        let Some(id) = ObjectId::parse(&object.path) else {
            continue;
        };
        if id.group != index || referenced.contains(&id) || object.modified_ms > old_before {
            continue;
        }
        tiering.store.delete(&object.path).await?;
        swept += 1;
        tiering.stats.orphans_swept.fetch_add(1, Ordering::Relaxed);
    }
    Ok(swept)
}
