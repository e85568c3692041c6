//! Copy-forward: frees log segments that are mostly dead.
//!
//! A checkpoint deletes a segment only when nothing in it is live, so one
//! long-lived append keeps a segment of otherwise deleted, expired or
//! trimmed bytes on disk. After a checkpoint, each sealed segment behind
//! every group's checkpoint position whose live bytes are less than half
//! of it has those bytes copied to the head of the log as relocation
//! records, and the groups' states are pointed at the copies. The next
//! checkpoint saves the moved states; then the old segments hold nothing
//! live and are deleted. Deleting a round later rather than at once leaves
//! a reader that planned a read at an old position (reads copy bytes
//! outside the state lock) a whole checkpoint interval to finish it.
//!
//! A relocation record is `[group: u32][RELOCATED][bytes]`. Recovery skips
//! it: only a checkpoint written after the move points into it, and replay
//! starts after that checkpoint. A crash before that checkpoint recovers
//! the old positions, which are still there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use runnel_log::Log;

use crate::local::{GroupCheckpoint, LocalGroup};
use crate::raft::snapshot::Relocation;

/// Marks a relocation record after the group prefix (where an entry has
/// its format version, which is never this).
pub(crate) const RELOCATED: u8 = 0xFF;
/// A segment is copied forward when less than this share of it is live.
const SPARSE_SHARE: f64 = 0.5;
/// Bytes moved in one round at most, so a round stays short.
const MAX_MOVED_PER_ROUND: u64 = 256 << 20;
/// How long a round waits for its copies to become durable.
const DURABLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What one round did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    pub segments: usize,
    pub bytes: u64,
}

/// Copies the live bytes of sparse segments ending at or before `before`
/// (the lowest checkpoint position) forward, and relocates the groups'
/// states onto the copies. `captured` is the checkpoint just written: its
/// live ranges say what is live in each group.
pub(crate) fn copy_forward(
    groups: &[Arc<LocalGroup>],
    captured: &[GroupCheckpoint],
    log: &Log,
    before: u64,
) -> Result<Moved, String> {
    let segments: Vec<(u64, u64)> = log
        .sealed_segments()
        .into_iter()
        .filter(|(_, end)| *end <= before)
        .collect();
    if segments.is_empty() {
        return Ok(Moved::default());
    }
    // Each live range lies inside one record, so inside one segment.
    let mut live_in = vec![0u64; segments.len()];
    let segment_of = |loc: u64| {
        let i = segments.partition_point(|(base, _)| *base <= loc);
        i.checked_sub(1).filter(|&i| loc < segments[i].1)
    };
    let mut ranges: Vec<(usize, u64, u64)> = Vec::new();
    for (g, checkpoint) in captured.iter().enumerate() {
        for &(loc, len) in &checkpoint.live {
            if let Some(i) = segment_of(loc) {
                ranges.push((g, loc, len));
                live_in[i] += len;
            }
        }
    }
    let mut sparse = vec![false; segments.len()];
    let mut planned = Moved::default();
    for (i, (base, end)) in segments.iter().enumerate() {
        let size = end - base;
        let live = live_in[i];
        if live > 0
            && (live as f64) < SPARSE_SHARE * size as f64
            && planned.bytes + live <= MAX_MOVED_PER_ROUND
        {
            sparse[i] = true;
            planned.segments += 1;
            planned.bytes += live;
        }
    }
    if planned.segments == 0 {
        return Ok(Moved::default());
    }
    ranges.retain(|(_, loc, _)| segment_of(*loc).is_some_and(|i| sparse[i]));
    ranges.sort_unstable();
    // Forks share their source's chunks: one copy per range.
    ranges.dedup();

    let mut moved: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); groups.len()];
    let mut record = Vec::new();
    let mut last_end = 0;
    for (g, loc, len) in ranges {
        record.clear();
        record.extend_from_slice(&(g as u32).to_le_bytes());
        record.push(RELOCATED);
        let header = record.len();
        record.resize(header + len as usize, 0);
        log.read_at(loc, &mut record[header..])
            .map_err(|e| format!("reading live bytes to move: {e}"))?;
        let at = log
            .append(&record)
            .map_err(|e| format!("writing moved bytes: {e}"))?;
        moved[g].push((loc, len, at.payload_pos + header as u64));
        last_end = at.end;
    }
    wait_durable(log, last_end)?;
    for (group, moved) in groups.iter().zip(moved) {
        if moved.is_empty() {
            continue;
        }
        let relocation = Relocation::new(moved);
        // Chunks only ever gain new positions by this, so the ranges read
        // from the checkpoint are still the state's (or were dropped).
        group.view.apply(|state| {
            state.relocate(|loc| relocation.moved_to(loc).unwrap_or(loc));
        });
    }
    Ok(planned)
}

fn wait_durable(log: &Log, end: u64) -> Result<(), String> {
    let deadline = Instant::now() + DURABLE_TIMEOUT;
    while log.durable_position() < end {
        if let Some(failure) = log.failure() {
            return Err(format!("the log failed while moving bytes: {failure}"));
        }
        if Instant::now() > deadline {
            return Err("moved bytes did not become durable in time".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
