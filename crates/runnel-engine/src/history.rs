//! Background upkeep of stream history, proposed like any other command so
//! that it is logged (and, in a cluster, replicated), plus the pruning of
//! idle reader notifications:
//!
//! - expiry: streams whose TTL or expiry passed are expired;
//! - retention: streams with a byte or age limit are trimmed;
//! - compaction: streams created with `Stream-Compaction: state` get a
//!   server-made snapshot (latest value per type and key) once enough
//!   history built up since the last one, or once they go idle. The
//!   compactor reads applied state and proposes a snapshot command; it
//!   never blocks appends and never changes an offset.
//!
//! On every group this node holds, led or not, the same loop drops the
//! pages kept for readers once they are [`RELEASE_MEMORY`] old
//! ([`crate::recent_pages`]), and as often hands the log pages reads
//! mapped in back to the page cache ([`runnel_log::Log::release_mapped_pages`]).

use std::sync::Arc;
use std::time::Duration;

use runnel_core::json::render_json_array;
use runnel_core::state_protocol::MaterializedState;
use runnel_core::{Body, Command, CompactionWork, Entry, Offset, PutSnapshot};

use crate::clock::now_ms;
use crate::error::EngineError;
use crate::upkeep::MaintainedGroup;

/// When the compactor acts.
#[derive(Debug, Clone, Copy)]
pub struct CompactionPolicy {
    /// History since the last server snapshot that triggers a new one (at
    /// least the snapshot's own size, so work stays linear in the log).
    pub min_bytes: u64,
    /// A stream idle this long is compacted whatever its pending history.
    pub idle: Duration,
    /// Largest snapshot the compactor writes.
    pub max_snapshot_bytes: u64,
}

/// How often the log pages reads mapped in are unmapped, and how old a
/// page kept for readers is dropped: often enough that a burst of catch-up
/// reads leaves little behind for long, rarely enough that steady readers
/// of the same pages rarely read them again.
const RELEASE_MEMORY: Duration = Duration::from_secs(10);

/// Runs expiry, retention and compaction every `interval` until aborted.
pub(crate) async fn upkeep<G: MaintainedGroup + ?Sized>(
    groups: Vec<Arc<G>>,
    interval: Duration,
    policy: CompactionPolicy,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut released = tokio::time::Instant::now();
    loop {
        ticker.tick().await;
        for group in &groups {
            let pages = &group.view().pages;
            pages.drop_older_than(std::time::Instant::now(), RELEASE_MEMORY);
        }
        if released.elapsed() >= RELEASE_MEMORY {
            released = tokio::time::Instant::now();
            // The groups share one log: it is released once.
            let mut logs: Vec<Arc<runnel_log::Log>> = Vec::new();
            for group in &groups {
                let log = &group.view().log;
                if !logs.iter().any(|l| Arc::ptr_eq(l, log)) {
                    logs.push(Arc::clone(log));
                }
            }
            for log in logs {
                log.release_mapped_pages();
            }
        }
        for group in groups.iter().filter(|g| g.leads()) {
            if let Err(err) = upkeep_group(group.as_ref(), policy).await {
                tracing::warn!(group = group.index(), error = %err, "stream upkeep failed");
            }
        }
    }
}

async fn upkeep_group<G: MaintainedGroup + ?Sized>(
    group: &G,
    policy: CompactionPolicy,
) -> Result<(), EngineError> {
    group.view().tails.watched();
    let now = now_ms();
    let (expired, trims, work) = group.view().with_state(|state| {
        (
            state.expired_ids(now),
            state.retention_trims(now),
            state.compaction_candidates(policy.min_bytes, policy.idle.as_millis() as i64, now),
        )
    });
    if !expired.is_empty() {
        let entry = Entry {
            now_ms: now,
            command: Command::Expire { ids: expired },
        };
        let applied = group.submit_entry(entry).await;
        if let Ok(applied) = &applied {
            group.view().keep_released(applied);
        }
        benign(applied.map(drop))?;
    }
    for (name, before) in trims {
        benign(
            group
                .propose(Command::Trim { name, before })
                .await
                .map(drop),
        )?;
    }
    for item in work {
        benign(compact(group, item, policy).await)?;
    }
    Ok(())
}

/// A protocol refusal here is a race with a client (the stream was deleted
/// or trimmed meanwhile), not a failure.
fn benign(result: Result<(), EngineError>) -> Result<(), EngineError> {
    match result {
        Err(EngineError::Core(_)) => Ok(()),
        other => other,
    }
}

/// Folds a stream's last server snapshot and the messages since into a new
/// server snapshot at the stream's tail (as it was when planned).
async fn compact<G: MaintainedGroup + ?Sized>(
    group: &G,
    work: CompactionWork,
    policy: CompactionPolicy,
) -> Result<(), EngineError> {
    let mut state = MaterializedState::default();
    if let Some(snapshot) = &work.snapshot {
        let (_, bytes, _) = group
            .view()
            .snapshot(&work.name, Some(snapshot.offset))
            .await?;
        if state.apply_array(&bytes).is_err() {
            tracing::warn!(stream = %work.name, "previous server snapshot is not a JSON array; starting over");
            state = MaterializedState::default();
        }
    }
    let mut position = work.from;
    while position < work.tail {
        let read = group.view().read_by_id(work.id, position, 4 << 20).await?;
        if read.body.is_empty() {
            break;
        }
        // Stored messages are valid JSON by construction.
        let _ = state.apply_array(&render_json_array(&read.body));
        position = read.plan.next.position();
    }
    let snapshot = state.render_snapshot(&Offset(position).to_string());
    if snapshot.len() as u64 > policy.max_snapshot_bytes {
        tracing::warn!(stream = %work.name, bytes = snapshot.len(), "compacted state exceeds the snapshot limit; not stored");
        return Ok(());
    }
    group
        .propose(Command::PutSnapshot(PutSnapshot {
            name: work.name,
            offset: position,
            content_type: "application/json".into(),
            digest: [0; 32],
            server_made: true,
            body: Body {
                data: snapshot,
                message_ends: Vec::new(),
            },
        }))
        .await?;
    Ok(())
}
