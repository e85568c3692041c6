//! The tierer: on each group this node leads, builds chunk objects from
//! the log's hot bytes, uploads them, and proposes their references.
//!
//! One upload, step by step (each a crash-test failpoint):
//!
//! 1. `tier-before-put`: the work is planned from applied (so committed,
//!    durable) state; the chunk is built from this node's log;
//! 2. the object goes up under a fresh name, create-only, in parts when
//!    large (`tier-mid-multipart` after the first part);
//! 3. `tier-after-put`: the reference is proposed through the group's log,
//!    fenced to the term this node leads in;
//! 4. `tier-after-commit`: the reference is applied; the log bytes it
//!    covers go at the next checkpoint, which is asked for once a
//!    segment's worth was tiered.
//!
//! A refused reference (another upload or a trim got there first, or
//! leadership moved) has its object deleted at once; an upload whose
//! outcome is unknown (a timeout, a crash) leaves an object that the
//! sweep removes later. Nothing is ever referenced that is not in the
//! store. After a failed pass the tierer waits, with jitter, before the
//! next.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::hooks::failpoint;
use bytes::Bytes;
use futures::StreamExt;
use rand::Rng;
use runnel_core::{
    Applied, ColdChunk, Command, CoreError, Entry, SnapshotWork, TierPolicy, TierWork,
};
use runnel_log::Log;
use runnel_tier::{ChunkBuilder, ObjectId, ObjectKind, TierError, Writer};

use super::Tiering;
use crate::clock::now_ms;
use crate::error::EngineError;
use crate::upkeep::MaintainedGroup;

/// Why an upload (or its reference) failed; the tierer notes it and
/// tries again after a pause.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("building a {what}: {source}")]
    Task {
        what: &'static str,
        source: tokio::task::JoinError,
    },
    #[error("reading {what} to tier: {source}")]
    Read {
        what: &'static str,
        source: runnel_log::LogError,
    },
    #[error("a chunk's footer exceeds 4 GiB")]
    FooterTooLarge,
    #[error("uploading {path}: {source}")]
    Put { path: String, source: TierError },
    #[error("a tiering command was answered {0:?}")]
    Unexpected(Box<Applied>),
    #[error("deleting refused object {path}: {source}")]
    DeleteRefused { path: String, source: TierError },
    #[error("proposing the reference of {path}: {source}")]
    Propose { path: String, source: EngineError },
}

/// Runs the tierer over `groups` until aborted.
pub(crate) async fn run<G: MaintainedGroup + ?Sized>(
    groups: Vec<Arc<G>>,
    tiering: Arc<Tiering>,
    log: Arc<Log>,
    segment_bytes: u64,
) {
    let mut failures = 0u32;
    let mut since_reclaim = 0u64;
    let mut more = false;
    loop {
        let wait = if failures == 0 {
            // A pass that left work behind is followed at once.
            if more {
                Duration::ZERO
            } else {
                tiering.config.interval
            }
        } else {
            // Exponential, capped at 30 s, with ±50% jitter.
            let base = tiering.config.interval * 2u32.saturating_pow(failures.min(5));
            base.min(Duration::from_secs(30))
                .mul_f64(rand::thread_rng().gen_range(0.5..1.5))
        };
        tokio::time::sleep(wait).await;
        count_totals(&groups, &tiering);
        let mut failed = false;
        more = false;
        for group in groups.iter().filter(|g| g.leads()) {
            match pass(group.as_ref(), &tiering, &log).await {
                Ok(passed) => {
                    since_reclaim += passed.bytes;
                    more |= passed.more;
                }
                Err(err) => {
                    failed = true;
                    tiering
                        .stats
                        .upload_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tiering.note_error(format!("group {}: {err}", group.index()));
                }
            }
        }
        count_totals(&groups, &tiering);
        if failed {
            failures += 1;
        } else {
            if failures > 0 {
                tiering.clear_error();
            }
            failures = 0;
        }
        if since_reclaim >= segment_bytes {
            since_reclaim = 0;
            tiering.reclaim.notify_one();
        }
    }
}

/// Adds up the untiered and tiered bytes of every group (what the write
/// back-pressure and status read).
pub(crate) fn count_totals<G: MaintainedGroup + ?Sized>(groups: &[Arc<G>], tiering: &Tiering) {
    let mut sum = runnel_core::TierTotals::default();
    for group in groups {
        let totals = group.view().with_state(|s| s.tier_totals());
        sum.hot_bytes += totals.hot_bytes;
        sum.cold_bytes += totals.cold_bytes;
        sum.cold_chunks += totals.cold_chunks;
        sum.cold_snapshots += totals.cold_snapshots;
        sum.doomed += totals.doomed;
    }
    let stats = &tiering.stats;
    stats.untiered_bytes.store(sum.hot_bytes, Ordering::Relaxed);
    stats.tiered_bytes.store(sum.cold_bytes, Ordering::Relaxed);
    stats.cold_chunks.store(sum.cold_chunks, Ordering::Relaxed);
    stats
        .cold_snapshots
        .store(sum.cold_snapshots, Ordering::Relaxed);
    stats
        .objects_queued_for_deletion
        .store(sum.doomed, Ordering::Relaxed);
}

/// What a pass did.
pub(crate) struct Passed {
    /// Bytes tiered.
    pub bytes: u64,
    /// It took as many chunks as one pass takes: more may be due.
    pub more: bool,
}

/// One pass over one group: tiers what is due, up to a batch of chunks.
pub(crate) async fn pass<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Arc<Tiering>,
    log: &Arc<Log>,
) -> Result<Passed, UploadError> {
    let config = &tiering.config;
    let term = group.term();
    let head = log.durable_position();
    let policy = TierPolicy {
        min_bytes: config.chunk_bytes,
        max_age_ms: i64::try_from(config.max_age.as_millis()).unwrap_or(i64::MAX),
        max_bytes: config.chunk_bytes.min(runnel_tier::chunk::MAX_CHUNK_BYTES),
        pressure_before_loc: head.checked_sub(config.hot_bytes),
        max_chunks: config.upload_concurrency.max(1) * 8,
        // Bounds what one pass plans and holds (its pieces, its chunks).
        max_pass_bytes: 64 << 20,
    };
    let now = now_ms();
    let work = group.view().with_state(|s| s.tier_candidates(&policy, now));
    let planned: u64 = work.iter().map(|w| w.end - w.start).sum();
    let more = work.len() == policy.max_chunks || planned >= policy.max_pass_bytes;
    let snapshots = group.view().with_state(|s| s.snapshots_in_log(8));
    let mut tiered = 0;
    let mut first_error = None;
    let uploads = futures::stream::iter(work)
        .map(|w| upload_chunk(group, tiering, log, term, w))
        .buffer_unordered(config.upload_concurrency.max(1));
    let outcomes: Vec<Result<u64, UploadError>> = uploads.collect().await;
    for outcome in outcomes {
        match outcome {
            Ok(bytes) => tiered += bytes,
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    for snapshot in snapshots {
        if let Err(err) = upload_snapshot(group, tiering, log, term, snapshot).await {
            first_error.get_or_insert(err);
        }
    }
    match first_error {
        Some(err) => Err(err),
        None => Ok(Passed {
            bytes: tiered,
            more,
        }),
    }
}

/// Builds, uploads and references one chunk; returns the bytes tiered
/// (0 when the reference was refused).
async fn upload_chunk<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Arc<Tiering>,
    log: &Arc<Log>,
    term: u64,
    work: TierWork,
) -> Result<u64, UploadError> {
    failpoint("tier-before-put");
    let block = tiering.config.block_bytes;
    let (stream, start, end) = (work.stream, work.start, work.end);
    let log = Arc::clone(log);
    let built = tokio::task::spawn_blocking(move || {
        let mut builder = ChunkBuilder::new(work.stream, work.start, work.json, block);
        for piece in &work.pieces {
            builder.push_append(piece.len, &piece.message_ends, piece.at_ms, |off, buf| {
                log.read_unmapped_at(piece.loc + off, buf)
            })?;
        }
        Ok::<_, runnel_log::LogError>((builder.finish(), work))
    })
    .await
    .map_err(|source| UploadError::Task {
        what: "chunk",
        source,
    })?
    .map_err(|source| UploadError::Read {
        what: "hot bytes",
        source,
    })?;
    let (built, work) = built;
    let writer = Writer::fresh(term, tiering.node_id);
    let id = ObjectId {
        group: group.index(),
        stream,
        kind: ObjectKind::Chunk { start, end },
        writer,
    };
    let chunk = ColdChunk {
        start,
        end,
        newest_at_ms: work.pieces.iter().map(|p| p.at_ms).max().unwrap_or(0),
        term,
        node: tiering.node_id,
        nonce: writer.nonce,
        block_size: block,
        footer_len: footer_len(&built)?,
    };
    put(tiering, &id, Bytes::from(built.bytes)).await?;
    failpoint("tier-after-put");
    let command = Command::Tier {
        stream,
        term,
        chunk,
    };
    let committed = commit(group, tiering, &id, command).await?;
    if committed {
        failpoint("tier-after-commit");
        tiering
            .stats
            .chunks_uploaded
            .fetch_add(1, Ordering::Relaxed);
        tiering
            .stats
            .bytes_uploaded
            .fetch_add(end - start, Ordering::Relaxed);
        return Ok(end - start);
    }
    Ok(0)
}

/// Moves one snapshot stored in the log to an object.
async fn upload_snapshot<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Arc<Tiering>,
    log: &Arc<Log>,
    term: u64,
    work: SnapshotWork,
) -> Result<(), UploadError> {
    let block = tiering.config.block_bytes;
    let log = Arc::clone(log);
    let (loc, len) = (work.loc, work.len);
    let built = tokio::task::spawn_blocking(move || {
        let mut builder = ChunkBuilder::new(work.stream, 0, false, block);
        builder.push_append(len, &[], 0, |off, buf| log.read_unmapped_at(loc + off, buf))?;
        Ok::<_, runnel_log::LogError>(builder.finish())
    })
    .await
    .map_err(|source| UploadError::Task {
        what: "snapshot object",
        source,
    })?
    .map_err(|source| UploadError::Read {
        what: "a snapshot",
        source,
    })?;
    let writer = Writer::fresh(term, tiering.node_id);
    let id = ObjectId {
        group: group.index(),
        stream: work.stream,
        kind: ObjectKind::Snapshot {
            offset: work.offset,
        },
        writer,
    };
    let object = ColdChunk {
        start: 0,
        end: len,
        newest_at_ms: 0,
        term,
        node: tiering.node_id,
        nonce: writer.nonce,
        block_size: block,
        footer_len: footer_len(&built)?,
    };
    put(tiering, &id, Bytes::from(built.bytes)).await?;
    let command = Command::TierSnapshot {
        stream: work.stream,
        term,
        offset: work.offset,
        server_made: work.server_made,
        from_loc: loc,
        object,
    };
    if commit(group, tiering, &id, command).await? {
        tiering
            .stats
            .snapshots_uploaded
            .fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Bytes of a built object after its blocks.
fn footer_len(built: &runnel_tier::BuiltChunk) -> Result<u32, UploadError> {
    u32::try_from(built.bytes.len() as u64 - built.footer_pos)
        .map_err(|_| UploadError::FooterTooLarge)
}

/// Uploads a new object. An `AlreadyExists` answer for an object of the
/// right size is this upload's own first attempt, retried by the client.
async fn put(tiering: &Tiering, id: &ObjectId, bytes: Bytes) -> Result<(), UploadError> {
    let path = id.path();
    let len = bytes.len() as u64;
    match tiering
        .store
        .put_new(&path, bytes, |part| {
            if part == 0 {
                failpoint("tier-mid-multipart");
            }
        })
        .await
    {
        Ok(()) => Ok(()),
        Err(err @ TierError::AlreadyExists(_)) => match tiering.store.size(&path).await {
            Ok(size) if size == len => Ok(()),
            _ => Err(UploadError::Put {
                path: path.to_string(),
                source: err,
            }),
        },
        Err(source) => Err(UploadError::Put {
            path: path.to_string(),
            source,
        }),
    }
}

/// Proposes a reference; deletes the object if the group refused it.
/// Returns whether it was committed.
async fn commit<G: MaintainedGroup + ?Sized>(
    group: &G,
    tiering: &Tiering,
    id: &ObjectId,
    command: Command,
) -> Result<bool, UploadError> {
    let entry = Entry {
        now_ms: now_ms(),
        command,
    };
    match group.submit_entry(entry).await {
        Ok(Applied::Tiered { .. }) => Ok(true),
        Ok(other) => Err(UploadError::Unexpected(Box::new(other))),
        Err(EngineError::Core(
            refusal @ (CoreError::TierRefused { .. }
            | CoreError::NotFound
            | CoreError::SnapshotNotFound),
        )) => {
            tracing::debug!(object = %id.path(), %refusal, "reference refused; deleting its object");
            tiering.stats.refused.fetch_add(1, Ordering::Relaxed);
            tiering.store.delete(&id.path()).await.map_err(|source| {
                UploadError::DeleteRefused {
                    path: id.path().to_string(),
                    source,
                }
            })?;
            Ok(false)
        }
        // Leadership moved, or the outcome is unknown: the object stays
        // for the sweep (it may be referenced after all).
        Err(source) => Err(UploadError::Propose {
            path: id.path().to_string(),
            source,
        }),
    }
}
