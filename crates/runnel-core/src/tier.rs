//! Tiered history in the state machine: references to chunk objects in
//! the object store, where snapshots are stored, the queue of objects no
//! reference needs any more, and which hot bytes are due to be tiered.
//!
//! A stream's bytes are a run of cold chunks (one reference each, in
//! [`StreamState::cold_chunks`]) followed by hot chunks (one per append, in this
//! node's log). [`Command::Tier`](crate::Command::Tier) turns a prefix of
//! the hot chunks into one cold reference. It is the only way a reference
//! comes into being, and applying it checks that
//!
//! - the command's term is the term of the log entry carrying it (the
//!   uploader still led the group when the reference was committed), and
//! - the chunk starts at the stream's first hot chunk and ends at the end
//!   of one of them (no range is ever referenced twice, no gap opens).
//!
//! Append and message boundaries inside a cold chunk are not held in
//! memory: they are in the object's footer. The state machine therefore
//! accepts a position strictly inside a cold chunk of a JSON stream as a
//! message boundary; the engine checks such positions against the footer
//! before it proposes a trim, snapshot or fork there and before it serves
//! a read from one.

use crate::codec::{CodecError, Reader, Writer};
use crate::command::StreamId;
use crate::error::CoreError;
use crate::state::{Applied, StreamsState};
use crate::stream::StreamState;
use std::collections::VecDeque;

/// A reference to a chunk object: a range of one stream's bytes. Held in
/// memory once per chunk (packed, about 20 bytes: [`crate::cold_list`]),
/// so kept small: the object's size and where its footer starts follow
/// from the range and the block size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdChunk {
    /// Stream offset of the first byte.
    pub start: u64,
    /// Stream offset after the last byte.
    pub end: u64,
    /// When the newest append in it was made (retention by age).
    pub newest_at_ms: i64,
    /// Who uploaded it: with the group, stream and range these make the
    /// object's name (see `runnel_tier::names`).
    pub term: u64,
    pub node: u64,
    pub nonce: u64,
    /// Stream bytes per checksummed block of the object.
    pub block_size: u32,
    /// Bytes of the object after its blocks (footer and trailer).
    pub footer_len: u32,
}

impl ColdChunk {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        w.u64(self.start);
        w.u64(self.end);
        w.i64(self.newest_at_ms);
        for v in [self.term, self.node, self.nonce] {
            w.u64(v);
        }
        w.u32(self.block_size);
        w.u32(self.footer_len);
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<ColdChunk, CodecError> {
        let chunk = ColdChunk {
            start: r.u64()?,
            end: r.u64()?,
            newest_at_ms: r.i64()?,
            term: r.u64()?,
            node: r.u64()?,
            nonce: r.u64()?,
            block_size: r.u32()?,
            footer_len: r.u32()?,
        };
        // Found by fuzzing: a range that ends before it starts decoded, and
        // every length computed from it then overflowed.
        if chunk.end < chunk.start {
            return Err(CodecError::Invalid(
                "a tiered chunk that ends before it starts",
            ));
        }
        Ok(chunk)
    }
}

/// Where a snapshot's bytes are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In this node's log, at this location.
    Log(u64),
    /// In an object of the chunk format (one "append", no messages).
    Object(ColdChunk),
}

/// An object no reference needs any more, waiting for its deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    pub seq: u64,
    pub stream: StreamId,
    /// Set for a snapshot object (its offset is part of its name).
    pub snapshot_offset: Option<u64>,
    pub object: ColdChunk,
    /// Time of the command that dropped the reference: the deletion waits
    /// a grace period after it, so reads planned before it can finish.
    pub queued_ms: i64,
}

/// Objects to delete, in the order their references were dropped.
#[derive(Debug, Default)]
pub(crate) struct DoomedQueue {
    pub items: VecDeque<Doomed>,
    pub next_seq: u64,
}

/// When hot bytes go to the object store.
#[derive(Debug, Clone, Copy)]
pub struct TierPolicy {
    /// A stream's hot bytes are tiered once they reach this many...
    pub min_bytes: u64,
    /// ...or once its oldest hot append is this old.
    pub max_age_ms: i64,
    /// One chunk holds at most this many bytes (whole appends; a single
    /// larger append is a chunk of its own).
    pub max_bytes: u64,
    /// Under disk pressure: streams whose first hot append lies in the
    /// log before this location are tiered whatever their size and age.
    pub pressure_before_loc: Option<u64>,
    /// At most this many chunks per call...
    pub max_chunks: usize,
    /// ...and no more once they add up to this many bytes.
    pub max_pass_bytes: u64,
}

/// One append to tier: where its bytes are in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotPiece {
    pub loc: u64,
    pub len: u64,
    /// JSON streams: message ends relative to the piece (empty: one).
    pub message_ends: Vec<u32>,
    pub at_ms: i64,
}

/// A chunk to build: a prefix of one stream's hot appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierWork {
    pub stream: StreamId,
    pub json: bool,
    pub start: u64,
    pub end: u64,
    pub pieces: Vec<HotPiece>,
}

/// A snapshot stored in the log, to move to the object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWork {
    pub stream: StreamId,
    pub offset: u64,
    pub server_made: bool,
    pub loc: u64,
    pub len: u64,
}

/// A tiered chunk as a stream's view sees it, through its fork chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredView {
    /// The stream that owns the chunk (a fork's source, or itself).
    pub owner: StreamId,
    pub chunk: ColdChunk,
    /// Where the view of the chunk ends (a fork point may clip it).
    pub end: u64,
    pub json: bool,
}

/// Tiered and untiered bytes of a group, for status and back-pressure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierTotals {
    pub hot_bytes: u64,
    pub cold_bytes: u64,
    pub cold_chunks: u64,
    /// Snapshots stored as objects.
    pub cold_snapshots: u64,
    pub doomed: u64,
}

impl StreamState {
    /// First position of the stream's hot chunks (its tail if none).
    pub fn hot_start(&self) -> u64 {
        self.chunks.first().map_or(self.tail, |c| c.start)
    }

    /// Index of the cold chunk containing `pos`, if any.
    pub(crate) fn cold_index(&self, pos: u64) -> Option<usize> {
        let cold = self.cold_chunks();
        let idx = cold.partition_point(|c| c.start <= pos);
        let idx = idx.checked_sub(1)?;
        (pos < cold.get(idx)?.end).then_some(idx)
    }

    /// Time of the newest append, tiered or not.
    pub(crate) fn last_append_ms(&self) -> Option<i64> {
        self.chunks
            .last()
            .map(|c| c.at_ms)
            .or_else(|| self.cold_chunks().last().map(|c| c.newest_at_ms))
    }

    pub fn cold_chunks(&self) -> &crate::cold_list::ColdList {
        &self.x().cold
    }
}

impl StreamsState {
    /// The tiered chunk holding `pos` in the view of stream `name`, if
    /// `pos` lies in one: what the engine checks tiered positions with.
    pub fn tiered_at(&self, name: &str, pos: u64) -> Option<TieredView> {
        let top = self.stream_by_name(name)?;
        let json = top.is_json();
        let mut s = top;
        let mut limit = s.tail;
        loop {
            if pos >= s.own_start() {
                let chunk = s.cold_chunks().get(s.cold_index(pos)?)?;
                let end = chunk.end.min(limit);
                return (pos < end).then_some(TieredView {
                    owner: s.id,
                    chunk,
                    end,
                    json,
                });
            }
            let base = s.x().base.as_ref()?;
            limit = limit.min(base.point);
            s = self.streams.get(&base.source)?;
        }
    }

    /// Where a fork of `source` as asked would begin, as applying the
    /// create would decide it now.
    pub fn fork_point(&self, source: &str, fork: &crate::ForkFrom) -> Result<u64, CoreError> {
        let id = *self
            .names
            .get(source)
            .ok_or(CoreError::ForkSourceNotFound)?;
        self.resolve_fork_point(id, fork)
    }

    /// Applies a tiering command.
    pub(crate) fn tier(
        &mut self,
        stream: StreamId,
        fence: Fence,
        chunk: &ColdChunk,
    ) -> Result<Applied, CoreError> {
        fence.check()?;
        let s = self.streams.get_mut(&stream).ok_or(CoreError::NotFound)?;
        let first = s.chunks.first().ok_or_else(|| refused("nothing is hot"))?;
        if chunk.start != first.start || chunk.end <= chunk.start {
            return Err(refused("the chunk does not start at the first hot byte"));
        }
        let covered = s.chunks.partition_point(|c| c.end() <= chunk.end);
        if covered == 0 || s.chunks.get(covered - 1).map(|c| c.end()) != Some(chunk.end) {
            return Err(refused("the chunk does not end on an append boundary"));
        }
        s.chunks.remove_front(covered);
        s.x_mut().cold.push(chunk.clone());
        self.hot_bytes -= chunk.len();
        self.cold_bytes += chunk.len();
        Ok(Applied::Tiered { bytes: chunk.len() })
    }

    /// Applies the move of a stored snapshot from the log to an object.
    pub(crate) fn tier_snapshot(
        &mut self,
        stream: StreamId,
        (offset, server_made, from_loc): (u64, bool, u64),
        fence: Fence,
        object: &ColdChunk,
    ) -> Result<Applied, CoreError> {
        fence.check()?;
        let s = self.streams.get_mut(&stream).ok_or(CoreError::NotFound)?;
        let x = s.x_mut();
        let snapshot = if server_made {
            x.server_snapshot
                .as_mut()
                .filter(|snap| snap.offset == offset)
        } else {
            x.snapshots.get_mut(&offset)
        }
        .ok_or(CoreError::SnapshotNotFound)?;
        if snapshot.placement != Placement::Log(from_loc) || snapshot.len != object.len() {
            return Err(refused("the snapshot changed since it was uploaded"));
        }
        snapshot.placement = Placement::Object(object.clone());
        Ok(Applied::Tiered {
            bytes: object.len(),
        })
    }

    /// Forgets the queued deletions up to `up_to` (their objects are gone).
    pub(crate) fn objects_deleted(&mut self, up_to: u64) -> Applied {
        let before = self.doomed.items.len();
        while self.doomed.items.front().is_some_and(|d| d.seq <= up_to) {
            self.doomed.items.pop_front();
        }
        Applied::ObjectsDeleted {
            count: before - self.doomed.items.len(),
        }
    }

    /// Queues an object for deletion.
    pub(crate) fn doom(
        &mut self,
        stream: StreamId,
        snapshot_offset: Option<u64>,
        object: ColdChunk,
    ) {
        let seq = self.doomed.next_seq;
        self.doomed.next_seq += 1;
        self.doomed.items.push_back(Doomed {
            seq,
            stream,
            snapshot_offset,
            object,
            queued_ms: self.now_ms,
        });
    }

    /// Queues the snapshot's object, if it has one.
    pub(crate) fn doom_snapshot(&mut self, stream: StreamId, offset: u64, placement: &Placement) {
        if let Placement::Object(object) = placement {
            self.doom(stream, Some(offset), object.clone());
        }
    }

    /// The sequence number the next queued deletion gets.
    pub fn doomed_next_seq(&self) -> u64 {
        self.doomed.next_seq
    }

    /// Objects waiting for deletion, oldest first.
    pub fn doomed(&self) -> impl Iterator<Item = &Doomed> {
        self.doomed.items.iter()
    }

    /// Hot prefixes due for tiering under `policy` at `now_ms`, the
    /// streams that hold the oldest log bytes first.
    pub fn tier_candidates(&self, policy: &TierPolicy, now_ms: i64) -> Vec<TierWork> {
        // Soft-deleted streams too: their forks still read them.
        let mut due: Vec<(u64, &StreamState)> = self
            .streams
            .values()
            .map(|s| &**s)
            .filter_map(|s| {
                let first = s.chunks.first()?;
                let hot = s.tail - first.start;
                let pressed = policy.pressure_before_loc.is_some_and(|b| first.loc < b);
                let old = now_ms.saturating_sub(first.at_ms) >= policy.max_age_ms;
                (hot >= policy.min_bytes || old || pressed).then_some((first.loc, s))
            })
            .collect();
        due.sort_unstable_by_key(|(loc, s)| (*loc, s.id));
        let mut planned = 0u64;
        due.into_iter()
            .take(policy.max_chunks)
            .take_while(|(_, s)| {
                let under = planned < policy.max_pass_bytes;
                planned += (s.tail - s.hot_start()).min(policy.max_bytes);
                under
            })
            .map(|(_, s)| {
                let mut pieces = Vec::new();
                let mut len = 0;
                for c in s.chunks.iter() {
                    if !pieces.is_empty() && len + c.len > policy.max_bytes {
                        break;
                    }
                    len += c.len;
                    pieces.push(HotPiece {
                        loc: c.loc,
                        len: c.len,
                        message_ends: c.ends().unwrap_or(&[]).to_vec(),
                        at_ms: c.at_ms,
                    });
                }
                let start = s.chunks.first().expect("due streams have hot chunks").start;
                TierWork {
                    stream: s.id,
                    json: s.is_json(),
                    start,
                    end: start + len,
                    pieces,
                }
            })
            .collect()
    }

    /// Snapshots stored in the log, to move to the object store.
    pub fn snapshots_in_log(&self, max: usize) -> Vec<SnapshotWork> {
        let mut work = Vec::new();
        for s in self.streams.values().filter(|s| !s.soft_deleted) {
            let snaps = s.x().snapshots.values().chain(s.x().server_snapshot.iter());
            for snap in snaps {
                if let Placement::Log(loc) = snap.placement {
                    work.push(SnapshotWork {
                        stream: s.id,
                        offset: snap.offset,
                        server_made: snap.server_made,
                        loc,
                        len: snap.len,
                    });
                    if work.len() >= max {
                        return work;
                    }
                }
            }
        }
        work
    }

    /// Every object a reference, snapshot or queued deletion names, as
    /// (stream, snapshot offset, object): what the orphan sweep keeps.
    pub fn referenced_objects(&self) -> Vec<(StreamId, Option<u64>, ColdChunk)> {
        let mut out = Vec::new();
        for s in self.streams.values() {
            out.extend(s.cold_chunks().iter().map(|c| (s.id, None, c)));
            let snaps = s.x().snapshots.values().chain(s.x().server_snapshot.iter());
            for snap in snaps {
                if let Placement::Object(o) = &snap.placement {
                    out.push((s.id, Some(snap.offset), o.clone()));
                }
            }
        }
        out.extend(
            self.doomed
                .items
                .iter()
                .map(|d| (d.stream, d.snapshot_offset, d.object.clone())),
        );
        out
    }

    /// Tiered and untiered bytes of the group.
    pub fn tier_totals(&self) -> TierTotals {
        let cold_snapshots = self
            .streams
            .values()
            .flat_map(|s| s.x().snapshots.values().chain(s.x().server_snapshot.iter()))
            .filter(|snap| matches!(snap.placement, Placement::Object(_)))
            .count() as u64;
        TierTotals {
            hot_bytes: self.hot_bytes,
            cold_bytes: self.cold_bytes,
            cold_chunks: self
                .streams
                .values()
                .map(|s| s.cold_chunks().len() as u64)
                .sum(),
            cold_snapshots,
            doomed: self.doomed.items.len() as u64,
        }
    }

    /// Bytes of the group's streams still in the log only.
    pub fn hot_bytes(&self) -> u64 {
        self.hot_bytes
    }

    /// After a disaster: the state as the object store alone can serve
    /// it. Every stream ends where its tiered history ends (its hot tail
    /// and anything depending on it are gone), snapshots still in the log
    /// are dropped, and idempotent producers of streams that lost bytes
    /// start over. Returns the bytes lost.
    pub fn keep_only_tiered(&mut self) -> u64 {
        let mut lost = 0;
        let mut ids: Vec<StreamId> = self.streams.keys().copied().collect();
        // Sources were created before their forks: lower ids first.
        ids.sort_unstable();
        let mut doomed = Vec::new();
        for id in ids {
            let source_tail = self.streams[&id]
                .x()
                .base
                .as_ref()
                .map(|b| self.streams[&b.source].tail);
            let s = self.streams.get_mut(&id).expect("listed");
            let mut keep_to = s.hot_start();
            let base = s.extras.as_deref_mut().and_then(|x| x.base.as_mut());
            if let (Some(base), Some(source_tail)) = (base, source_tail) {
                // The source lost bytes below the fork point: the fork
                // cannot serve anything past what the source still has.
                if base.point > source_tail {
                    base.point = source_tail;
                    keep_to = source_tail;
                    if let Some(x) = s.extras.as_deref_mut() {
                        let cold = std::mem::take(&mut x.cold).drain_front(usize::MAX);
                        doomed.extend(cold.into_iter().map(|c| (id, c)));
                    }
                }
            }
            if keep_to < s.tail || !s.chunks.is_empty() {
                lost += s.tail - keep_to;
                s.tail = keep_to;
                s.chunks.clear();
                s.closed = false;
                if let Some(x) = s.extras.as_deref_mut() {
                    x.producers.clear();
                    x.last_stream_seq = None;
                }
            }
            if let Some(x) = s.extras.as_deref_mut() {
                x.snapshots.retain(|offset, snap| {
                    *offset <= keep_to && matches!(snap.placement, Placement::Object(_))
                });
                if x.server_snapshot.as_ref().is_some_and(|snap| {
                    snap.offset > keep_to || matches!(snap.placement, Placement::Log(_))
                }) {
                    x.server_snapshot = None;
                }
            }
            s.earliest = s.earliest.min(s.tail);
        }
        for (id, chunk) in doomed {
            self.cold_bytes -= chunk.len();
            self.doom(id, None, chunk);
        }
        self.hot_bytes = 0;
        lost
    }
}

/// The terms a tiering command is checked against: the one its uploader
/// led the group in, and the one of the log entry carrying it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fence {
    pub uploaded_in: u64,
    pub entry: u64,
}

impl Fence {
    fn check(self) -> Result<(), CoreError> {
        if self.uploaded_in == self.entry {
            Ok(())
        } else {
            Err(refused("the uploader no longer leads the group"))
        }
    }
}

fn refused(reason: &str) -> CoreError {
    CoreError::TierRefused {
        reason: reason.to_string(),
    }
}
