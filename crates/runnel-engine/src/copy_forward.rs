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

use runnel_log::{Log, LogError};

use crate::checkpoint::SegmentLive;

/// Marks a relocation record after the group prefix (where an entry has
/// its format version, which is never this).
pub(crate) const RELOCATED: u8 = 0xFF;
/// A segment is copied forward when less than this share of it is live.
const SPARSE_SHARE: f64 = 0.5;
/// Bytes moved in one round at most, so a round stays short.
const MAX_MOVED_PER_ROUND: u64 = 256 << 20;
/// Bytes a round lets wait in the log's buffer at once: a round copies
/// far faster than the log writes, and would otherwise buffer all it
/// moves.
const COPY_BUFFERED_BYTES: usize = 4 << 20;

/// What one round did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    pub segments: usize,
    pub bytes: u64,
}

/// Which segments to empty: the counted ones (sealed, wholly before the
/// lowest recovery position) that are less than [`SPARSE_SHARE`] live, up
/// to [`MAX_MOVED_PER_ROUND`] bytes.
pub(crate) struct Plan {
    pub moved: Moved,
    /// `(base, end)` of the segments to empty, ascending.
    sparse: Vec<(u64, u64)>,
}

pub(crate) fn plan(live: &SegmentLive) -> Plan {
    let mut sparse = Vec::new();
    let mut moved = Moved::default();
    for (base, end, bytes) in live.segments() {
        if bytes > 0
            && (bytes as f64) < SPARSE_SHARE * (end - base) as f64
            && moved.bytes + bytes <= MAX_MOVED_PER_ROUND
        {
            sparse.push((base, end));
            moved.segments += 1;
            moved.bytes += bytes;
        }
    }
    Plan { moved, sparse }
}

impl Plan {
    /// Whether the live byte at `loc` is to move.
    fn moves(&self, loc: u64) -> bool {
        let i = self.sparse.partition_point(|(base, _)| *base <= loc);
        i.checked_sub(1).is_some_and(|i| loc < self.sparse[i].1)
    }

    /// The ranges `each` gives that lie in the segments to empty: sorted,
    /// each once (forks share their source's chunks).
    pub fn ranges(&self, each: impl FnOnce(&mut dyn FnMut(u64, u64))) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        if !self.sparse.is_empty() {
            each(&mut |loc, len| {
                if self.moves(loc) {
                    ranges.push((loc, len));
                }
            });
        }
        ranges.sort_unstable();
        ranges.dedup();
        ranges
    }
}

/// Why a round of copy-forward stopped (the next checkpoint tries
/// again; nothing was pointed at bytes that are not durable).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CopyError {
    #[error("reading live bytes to move: {0}")]
    Read(LogError),
    #[error("writing moved bytes: {0}")]
    Write(LogError),
    #[error("the log failed while moving bytes: {0}")]
    LogFailed(std::sync::Arc<LogError>),
    #[error("moved bytes did not become durable in time")]
    NotDurable,
}

/// Ranges copied: `(from, len, to)` each, and the end of the last record
/// written (durable once the log's durable position passes it).
pub(crate) struct Copied {
    pub moved: Vec<(u64, u64, u64)>,
    pub end: u64,
}

/// Copies each `(loc, len)` of `ranges` into a record `[prefix][bytes]`
/// at the head of the log. It blocks while the log catches up (call it
/// off the async workers).
pub(crate) fn copy_ranges(
    log: &Log,
    prefix: &[u8],
    ranges: impl IntoIterator<Item = (u64, u64)>,
) -> Result<Copied, CopyError> {
    let mut moved = Vec::new();
    let mut record = Vec::new();
    let mut last_end = 0;
    for (loc, len) in ranges {
        record.clear();
        record.extend_from_slice(prefix);
        record.resize(prefix.len() + len as usize, 0);
        log.read_unmapped_at(loc, &mut record[prefix.len()..])
            .map_err(CopyError::Read)?;
        let at = log.append(&record).map_err(CopyError::Write)?;
        log.wait_for_room(COPY_BUFFERED_BYTES);
        moved.push((loc, len, at.payload_pos + prefix.len() as u64));
        last_end = at.end;
    }
    Ok(Copied {
        moved,
        end: last_end,
    })
}

/// Maps sender positions to receiver positions, range by range.
pub struct Relocation {
    /// (sender start, length, receiver start), sorted by sender start.
    moved: Vec<(u64, u64, u64)>,
}

impl Relocation {
    pub fn new(mut moved: Vec<(u64, u64, u64)>) -> Relocation {
        moved.sort_unstable();
        Relocation { moved }
    }

    /// Where the byte the sender held at `loc` now lies. References always
    /// fall inside a copied range (the ranges are the state's own).
    pub fn map(&self, loc: u64) -> u64 {
        self.moved_to(loc).unwrap_or_else(|| {
            debug_assert!(false, "position {loc} is in no copied range");
            loc
        })
    }

    /// Where the byte at `loc` was copied to, if it was.
    pub fn moved_to(&self, loc: u64) -> Option<u64> {
        let idx = self.moved.partition_point(|(from, _, _)| *from <= loc);
        match idx.checked_sub(1).map(|i| self.moved[i]) {
            Some((from, len, to)) if loc < from + len.max(1) => Some(to + (loc - from)),
            _ => None,
        }
    }
}
