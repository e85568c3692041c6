//! Checkpoints and log garbage collection.
//!
//! A checkpoint is every group's state with the log position it reflects
//! (`applied_end`: the end of the group's last applied record), written to
//! `DATA_DIR/checkpoint` atomically (temporary file, fsync, rename, fsync
//! of the directory) and checksummed. Recovery loads it and replays only
//! the records after each group's position.
//!
//! Once a checkpoint is on disk, log segments that lie wholly before every
//! group's position and hold no live byte (no stream chunk or snapshot
//! points into them) are deleted: this is how deleted, expired and trimmed
//! data leaves the disk. Segments that are mostly dead have their live
//! bytes moved forward so that a later checkpoint can delete them (see
//! [`crate::copy_forward`]). The local engine's round (capture, store,
//! collect, copy forward) is `node::checkpoint_and_collect`; this module
//! holds the file format and the per-segment live bytes both engines
//! collect by ([`SegmentLive`]).
//!
//! File layout: `RNLCKPT1`, group count (u32), then per group its
//! `applied_end` (u64), state length (u64) and state bytes, then a CRC32C
//! (u32) of everything before it. All little-endian.

use std::path::{Path, PathBuf};

use runnel_core::checkpoint::CheckpointCapture;
use runnel_core::StreamsState;

const MAGIC: &[u8; 8] = b"RNLCKPT1";

/// Why a checkpoint could not be read, written or followed up (its log
/// collected, its sparse segments copied forward, its backup uploaded).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading the checkpoint: {0}")]
    Read(std::io::Error),
    #[error("checkpoint is truncated")]
    Truncated,
    #[error("checkpoint fails its checksum")]
    Checksum,
    #[error("checkpoint has no magic")]
    NoMagic,
    #[error("checkpoint has {found} groups and the node is configured for {node} (--groups)")]
    Groups { found: usize, node: usize },
    #[error("checkpoint state of {0} bytes does not fit in memory")]
    TooLarge(u64),
    #[error("checkpoint state: {0}")]
    State(#[from] runnel_core::CodecError),
    #[error("writing the checkpoint: {0}")]
    Write(std::io::Error),
    /// Syncing the log before the checkpoint, or collecting its
    /// segments after.
    #[error("the log under the checkpoint: {0}")]
    Collect(runnel_log::LogError),
    #[error(transparent)]
    CopyForward(#[from] crate::copy_forward::CopyError),
    /// The checkpoint's blocking task failed.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    #[error("backing up the checkpoint: {0}")]
    Backup(#[from] crate::tier::backup::BackupError),
}
const FILE: &str = "checkpoint";

/// A loaded checkpoint: per group, its state and applied position.
pub(crate) struct Loaded {
    pub groups: Vec<(StreamsState, u64)>,
}

impl Loaded {
    /// Where replay must start: the lowest group position.
    pub fn replay_from(&self) -> u64 {
        self.groups.iter().map(|(_, end)| *end).min().unwrap_or(0)
    }
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Reads the checkpoint, if there is one. A damaged checkpoint is an
/// error, never silently ignored: the log before it may be gone.
pub(crate) fn load(dir: &Path, groups: usize) -> Result<Option<Loaded>, CheckpointError> {
    let bytes = match std::fs::read(path(dir)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CheckpointError::Read(e)),
    };
    decode(&bytes, Some(groups)).map(Some)
}

/// Decodes a checkpoint file's bytes, of `groups` groups (`None`: of
/// however many it holds).
pub(crate) fn decode(bytes: &[u8], groups: Option<usize>) -> Result<Loaded, CheckpointError> {
    let (body, crc) = bytes
        .split_last_chunk::<4>()
        .ok_or(CheckpointError::Truncated)?;
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err(CheckpointError::Checksum);
    }
    let mut at = body.strip_prefix(MAGIC).ok_or(CheckpointError::NoMagic)?;
    let mut take = |n: usize| -> Result<&[u8], CheckpointError> {
        let (head, rest) = at.split_at_checked(n).ok_or(CheckpointError::Truncated)?;
        at = rest;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    if let Some(groups) = groups.filter(|&g| g != count) {
        return Err(CheckpointError::Groups {
            found: count,
            node: groups,
        });
    }
    let mut loaded = Vec::with_capacity(count);
    for _ in 0..count {
        let applied_end = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        let len = usize::try_from(len).map_err(|_| CheckpointError::TooLarge(len))?;
        let state = StreamsState::decode_checkpoint(take(len)?)?;
        loaded.push((state, applied_end));
    }
    Ok(Loaded { groups: loaded })
}

/// Builds a checkpoint file's bytes group by group, each group's state
/// encoded straight into the file (a checkpoint's size in memory once).
pub(crate) struct FileWriter {
    bytes: Vec<u8>,
}

impl FileWriter {
    pub fn new(groups: usize) -> FileWriter {
        FileWriter::with_capacity(groups, 0)
    }

    /// A writer with room for `bytes` (the last checkpoint's size, say),
    /// so the buffer is not grown by doubling past it.
    pub fn with_capacity(groups: usize, bytes: usize) -> FileWriter {
        let mut bytes = Vec::with_capacity(bytes);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(groups as u32).to_le_bytes());
        FileWriter { bytes }
    }

    /// Adds the next group: its applied position and state.
    pub fn group(&mut self, applied_end: u64, state: &CheckpointCapture) {
        self.bytes.extend_from_slice(&applied_end.to_le_bytes());
        let len_at = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 8]);
        state.encode_into(&mut self.bytes);
        let len = (self.bytes.len() - len_at - 8) as u64;
        self.bytes[len_at..len_at + 8].copy_from_slice(&len.to_le_bytes());
    }

    /// The file's bytes, checksummed.
    pub fn finish(mut self) -> Vec<u8> {
        let crc = crc32c::crc32c(&self.bytes);
        self.bytes.extend_from_slice(&crc.to_le_bytes());
        self.bytes
    }
}

/// Bytes of a checkpoint written back to the disk at a time.
const WRITEBACK_PIECE: usize = 1 << 20;

/// Writes a checkpoint file atomically.
///
/// The file goes to the disk a piece at a time, each piece's writeback
/// waited for before the next is queued: the whole file queued at once
/// (tens of MiB for a busy group) would sit in the device's queue ahead
/// of the log's group-commit fsyncs, stalling every append behind it.
pub(crate) fn store(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    let mut written = 0;
    for piece in bytes.chunks(WRITEBACK_PIECE) {
        file.write_all(piece)?;
        runnel_log::write_back(&file, written as u64, piece.len() as u64)?;
        written += piece.len();
    }
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path(dir))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Live bytes per sealed log segment, counted from the live ranges in
/// one pass: what a checkpoint's collection and copy-forward decide by,
/// without a list of the ranges (a large state has one per untiered
/// append, and the lists were most of a checkpoint's transient memory).
///
/// Each live range lies inside one record, so inside one segment. A range
/// that several forks share is counted once per fork: a segment may look
/// less sparse than it is, never more.
pub(crate) struct SegmentLive {
    /// `(base, end)` of the sealed segments wholly before the position
    /// counted to, ascending.
    segments: Vec<(u64, u64)>,
    bytes: Vec<u64>,
    touched: Vec<bool>,
}

impl SegmentLive {
    /// Counts the ranges `each` gives into the segments of `sealed` that
    /// end at or before `before`.
    pub(crate) fn count(
        sealed: &[(u64, u64)],
        before: u64,
        each: impl FnOnce(&mut dyn FnMut(u64, u64)),
    ) -> SegmentLive {
        let segments: Vec<(u64, u64)> = sealed
            .iter()
            .copied()
            .filter(|(_, end)| *end <= before)
            .collect();
        let mut live = SegmentLive {
            bytes: vec![0; segments.len()],
            touched: vec![false; segments.len()],
            segments,
        };
        each(&mut |loc, len| {
            if let Some(i) = live.segment_of(loc) {
                live.bytes[i] += len;
                live.touched[i] = true;
            }
        });
        live
    }

    /// The counted segment holding `loc`.
    pub(crate) fn segment_of(&self, loc: u64) -> Option<usize> {
        let i = self.segments.partition_point(|(base, _)| *base <= loc);
        i.checked_sub(1).filter(|&i| loc < self.segments[i].1)
    }

    /// Whether any live range lies in segment `[base, end)`; a segment
    /// that was not counted is taken as live.
    pub(crate) fn touches(&self, base: u64, end: u64) -> bool {
        match self.segments.binary_search(&(base, end)) {
            Ok(i) => self.touched[i],
            Err(_) => true,
        }
    }

    /// `(base, end, live bytes)` of each counted segment.
    pub(crate) fn segments(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.segments
            .iter()
            .zip(&self.bytes)
            .map(|(&(base, end), &bytes)| (base, end, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_ranges_touching_a_segment_keep_it() {
        let sealed = [
            (0, 12),
            (12, 100),
            (100, 150),
            (150, 400),
            (400, 500),
            (500, 900),
        ];
        let ranges = [(410, 0), (10, 2), (100, 50), (120, 5), (600, 1)];
        let live = SegmentLive::count(&sealed, 500, |f| ranges.iter().for_each(|&(l, n)| f(l, n)));
        assert!(live.touches(0, 12));
        assert!(!live.touches(12, 100));
        assert!(live.touches(100, 150));
        assert!(!live.touches(150, 400));
        assert!(
            live.touches(400, 500),
            "an empty range still holds its segment"
        );
        assert!(live.touches(500, 900), "a segment not counted is live");
        assert!(live.touches(7, 30), "a segment not counted is live");
        let bytes: Vec<u64> = live.segments().map(|(_, _, b)| b).collect();
        assert_eq!(bytes, vec![2, 0, 55, 0, 0]);
        let none = SegmentLive::count(&sealed, 500, |_| {});
        assert!(!none.touches(0, 12));
    }
}
