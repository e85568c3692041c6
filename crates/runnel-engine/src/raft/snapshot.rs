//! Raft snapshots of a group: its applied state, persisted so the group's
//! log can be purged and the shared log's segments before it deleted, and
//! shipped to followers that are too far behind (or wiped).
//!
//! Two forms:
//!
//! - the **file**, `DATA_DIR/snapshots/group-{g}.snap`, the state as this
//!   node stores it: stream bytes stay where they are in the shared log,
//!   referenced by position. Layout: `RNLRSNP1`, header length (u32),
//!   bincode header ([`FileHeader`]), the encoded state, CRC32C (u32) of
//!   everything before it. Written atomically (temporary file, fsync,
//!   rename, fsync of the directory).
//! - the **transfer**, what a follower receives: the header's snapshot
//!   metadata comes separately from openraft; the data is the encoded
//!   state (positions in the sender's log) followed by every live byte
//!   range with its sender position. The receiver copies the ranges into
//!   its own log and relocates the state ([`StreamsState::relocate`]).

use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use runnel_core::StreamsState;
use serde::{Deserialize, Serialize};

use super::{LogId, NodeId, Vote};

const MAGIC: &[u8; 8] = b"RNLRSNP1";

/// Why a snapshot (file or transfer) could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is damaged (`what`: how): the log before it may be gone,
    /// so it is never ignored.
    #[error("{path}: {what}")]
    Damaged { path: PathBuf, what: &'static str },
    #[error("{path}: header: {source}")]
    Header {
        path: PathBuf,
        source: bincode::Error,
    },
    #[error("snapshot transfer is truncated")]
    TransferTruncated,
    #[error("snapshot state: {0}")]
    State(#[from] runnel_core::CodecError),
    /// A live range's bytes could not be read from the log.
    #[error("reading a snapshot's bytes: {0}")]
    Bytes(#[from] runnel_log::LogError),
    /// Bytes copied into the log did not become durable.
    #[error("the copied bytes did not become durable: {0}")]
    NotDurable(runnel_log::LogError),
    /// Moving the live bytes forward failed (see `crate::copy_forward`).
    #[error(transparent)]
    Copy(#[from] crate::copy_forward::CopyError),
    /// The task moving the bytes forward did not finish.
    #[error("moving bytes forward: {0}")]
    CopyTask(#[from] tokio::task::JoinError),
    /// The snapshot file could not be written.
    #[error(transparent)]
    Store(Box<super::StorageError>),
}

/// What a snapshot file records besides the state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileHeader {
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    /// The group's vote when the file was written: vote records before
    /// `replay_from` may be deleted with their segments.
    pub vote: Option<Vote>,
    /// Shared-log position from which this group's records must be
    /// replayed on top of the state (its first entry after the snapshot).
    pub replay_from: u64,
}

/// A group's snapshot as this node stores it.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub header: FileHeader,
    /// [`StreamsState::encode_checkpoint`], positions in this node's log.
    pub state: Vec<u8>,
}

impl SnapshotFile {
    pub fn last_log_id(&self) -> Option<LogId> {
        self.header.meta.last_log_id
    }
}

pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}

fn path(data_dir: &Path, group: u32) -> PathBuf {
    dir(data_dir).join(format!("group-{group}.snap"))
}

/// Reads group `group`'s snapshot file, if there is one. A damaged file is
/// an error: the log before it may be gone.
pub fn load(data_dir: &Path, group: u32) -> Result<Option<SnapshotFile>, SnapshotError> {
    let path = path(data_dir, group);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SnapshotError::Read { path, source }),
    };
    let fail = |what| SnapshotError::Damaged {
        path: path.clone(),
        what,
    };
    let (body, crc) = bytes
        .split_last_chunk::<4>()
        .ok_or_else(|| fail("truncated"))?;
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err(fail("fails its checksum"));
    }
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| fail("no magic"))?;
    let (len, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| fail("truncated"))?;
    let (header, state) = rest
        .split_at_checked(u32::from_le_bytes(*len) as usize)
        .ok_or_else(|| fail("truncated header"))?;
    let header: FileHeader =
        bincode::deserialize(header).map_err(|source| SnapshotError::Header {
            path: path.clone(),
            source,
        })?;
    Ok(Some(SnapshotFile {
        header,
        state: state.to_vec(),
    }))
}

/// Deletes group `group`'s snapshot file, if there is one.
pub fn remove(data_dir: &Path, group: u32) -> std::io::Result<()> {
    match std::fs::remove_file(path(data_dir, group)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => std::fs::File::open(dir(data_dir)).map_or(Ok(()), |d| d.sync_all()),
    }
}

/// Writes group `group`'s snapshot file atomically.
pub fn store(data_dir: &Path, group: u32, file: &SnapshotFile) -> std::io::Result<()> {
    let header = bincode::serialize(&file.header).map_err(std::io::Error::other)?;
    let mut bytes = Vec::with_capacity(16 + header.len() + file.state.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&file.state);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let dir = dir(data_dir);
    runnel_log::create_dir_durable(&dir)?;
    let final_path = path(data_dir, group);
    let tmp = final_path.with_extension("tmp");
    std::fs::write(&tmp, &bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &final_path)?;
    std::fs::File::open(&dir)?.sync_all()
}

/// Transfer form: `[state len: u64][state]` then per live range
/// `[sender position: u64][len: u64][bytes]`.
pub fn encode_transfer(
    state: &[u8],
    ranges: &[(u64, u64)],
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), runnel_log::LogError>,
) -> Result<Vec<u8>, SnapshotError> {
    let total: u64 = ranges.iter().map(|(_, len)| 16 + len).sum();
    let mut out = Vec::with_capacity(8 + state.len() + total as usize);
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    for (loc, len) in ranges {
        out.extend_from_slice(&loc.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        let at = out.len();
        out.resize(at + *len as usize, 0);
        read(*loc, &mut out[at..])?;
    }
    Ok(out)
}

/// A parsed transfer: the state and the byte ranges (sender position,
/// bytes).
pub struct Transfer<'a> {
    pub state: &'a [u8],
    pub ranges: Vec<(u64, &'a [u8])>,
}

pub fn decode_transfer(bytes: &[u8]) -> Result<Transfer<'_>, SnapshotError> {
    fn take<'a>(at: &mut &'a [u8], n: usize) -> Result<&'a [u8], SnapshotError> {
        let (head, rest) = at
            .split_at_checked(n)
            .ok_or(SnapshotError::TransferTruncated)?;
        *at = rest;
        Ok(head)
    }
    fn take_u64(at: &mut &[u8]) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(
            take(at, 8)?.try_into().expect("8 bytes"),
        ))
    }
    let mut at = bytes;
    let state_len = take_u64(&mut at)? as usize;
    let state = take(&mut at, state_len)?;
    let mut ranges = Vec::new();
    while !at.is_empty() {
        let loc = take_u64(&mut at)?;
        let len = take_u64(&mut at)? as usize;
        ranges.push((loc, take(&mut at, len)?));
    }
    Ok(Transfer { state, ranges })
}

/// Decodes a state from a snapshot file or transfer.
pub fn decode_state(bytes: &[u8]) -> Result<StreamsState, SnapshotError> {
    Ok(StreamsState::decode_checkpoint(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy_forward::Relocation;

    #[test]
    fn transfer_round_trips_and_relocation_maps_inside_ranges() {
        let log: Vec<u8> = (0..200u8).collect();
        let ranges = [(10, 5), (100, 20)];
        let bytes = encode_transfer(b"state", &ranges, |loc, buf| {
            buf.copy_from_slice(&log[loc as usize..loc as usize + buf.len()]);
            Ok(())
        })
        .unwrap();
        let t = decode_transfer(&bytes).unwrap();
        assert_eq!(t.state, b"state");
        assert_eq!(t.ranges.len(), 2);
        assert_eq!(t.ranges[1], (100, &log[100..120]));
        let r = Relocation::new(vec![(100, 20, 5000), (10, 5, 7000)]);
        assert_eq!(r.map(10), 7000);
        assert_eq!(r.map(14), 7004);
        assert_eq!(r.map(119), 5019);
        assert!(decode_transfer(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn files_round_trip_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = SnapshotFile {
            header: FileHeader {
                meta: SnapshotMeta::default(),
                vote: Some(Vote::new(3, 2)),
                replay_from: 1234,
            },
            state: StreamsState::new().encode_checkpoint(),
        };
        store(dir.path(), 4, &file).unwrap();
        let back = load(dir.path(), 4).unwrap().unwrap();
        assert_eq!(back.header.replay_from, 1234);
        assert_eq!(back.header.vote, Some(Vote::new(3, 2)));
        assert_eq!(back.state, file.state);
        assert!(load(dir.path(), 5).unwrap().is_none());
        let path = path(dir.path(), 4);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(load(dir.path(), 4).is_err());
    }
}
