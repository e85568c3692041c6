//! Checkpoints: the whole state of a group as bytes, so that recovery can
//! start from a checkpoint instead of the first log record, and log
//! segments that hold nothing live any more can be deleted.
//!
//! Everything applying the log built is saved: names, streams with their
//! chunk index, producers, snapshots, forks and counters. Read renewals of
//! sliding TTLs are saved as they stand (they are in-memory state too).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicI64;

use crate::chunk_index::ChunkIndex;
use crate::codec::{CodecError, Reader, Writer};
use crate::command::{read_fork, write_fork, Retention};
use crate::fork_copy::RemotePin;
use crate::state::StreamsState;
use crate::stream::{
    Chunk, ContentKind, Extras, ForkBase, MessageEnds, ProducerState, SnapshotRef, StreamState,
};
use crate::tier::{ColdChunk, Doomed, Placement};
use std::sync::Arc;

/// Version 2 added pins and copies of sources in other groups
/// ([`crate::fork_copy`]); version 3 tiered chunks, snapshot placements
/// and the queue of objects to delete ([`crate::tier`]); version 4 the
/// subscriptions ([`crate::subscription`], as JSON); version 5 the
/// cluster id, version 6 the retired nodes, version 7 the replication
/// factor, version 8 the preferred leaders ([`crate::cluster_meta`]),
/// version 9 the nodes' zones ([`crate::zones`]), version 10 whether
/// self-healing is paused ([`crate::cluster_meta`]), version 11 the
/// cluster a group was restored from ([`crate::restore`]), version 12
/// the cluster version ([`crate::upgrade`]) and the members' states
/// ([`crate::member_state`]). Earlier versions still load,
/// and a state that the later versions add nothing to is written as
/// version 10, as release 0.1.0 wrote it.
const CHECKPOINT_VERSION: u8 = 12;

/// A group's state taken for a checkpoint under its lock, encoded after.
///
/// Taking it encodes everything but the streams' hot chunk indexes, which
/// are shared instead ([`ChunkIndex`] clones copy block pointers): the
/// chunks are the bulk of a large group's checkpoint, and encoding them
/// under the state lock stalled every append to the group for as long.
pub struct CheckpointCapture {
    /// The encoding without hot chunks.
    bytes: Vec<u8>,
    /// Where each stream's hot chunks go in `bytes`, in order.
    cuts: Vec<(usize, ChunkIndex)>,
    /// Log ranges of snapshots stored in the log.
    snapshot_ranges: Vec<(u64, u64)>,
}

impl CheckpointCapture {
    /// Appends the checkpoint encoding (as [`StreamsState::encode_checkpoint`]
    /// would have written at capture time) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut w = Writer::wrap(std::mem::take(out));
        let mut from = 0;
        for (cut, chunks) in &self.cuts {
            w.raw(&self.bytes[from..*cut]);
            encode_chunks(&mut w, chunks);
            from = *cut;
        }
        w.raw(&self.bytes[from..]);
        *out = w.finish();
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Every log range a live byte of the captured state lives at (see
    /// [`StreamsState::live_ranges`]).
    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        self.for_each_live_range(|loc, len| ranges.push((loc, len)));
        ranges
    }

    /// Calls `f` with each of [`CheckpointCapture::live_ranges`], without
    /// collecting them (a large group has one per untiered append).
    pub fn for_each_live_range(&self, mut f: impl FnMut(u64, u64)) {
        for &(loc, len) in &self.snapshot_ranges {
            f(loc, len);
        }
        for (_, chunks) in &self.cuts {
            for c in chunks.iter() {
                f(c.loc, c.len);
            }
        }
    }
}

impl StreamsState {
    /// Encodes the whole state.
    pub fn encode_checkpoint(&self) -> Vec<u8> {
        self.capture_checkpoint().encode()
    }

    /// Takes the state for a checkpoint cheaply enough to do under the
    /// group's lock; encode the capture after releasing it.
    pub fn capture_checkpoint(&self) -> CheckpointCapture {
        let mut w = Writer::wrap(Vec::new());
        let mut cuts = Vec::with_capacity(self.streams.len());
        let version = if self.cluster_version.is_some() || !self.member_states.is_empty() {
            12
        } else if self.restored_from.is_some() {
            11
        } else {
            10
        };
        w.u8(version);
        w.u64(self.next_id);
        let mut ids: Vec<_> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        w.u64(ids.len() as u64);
        for id in ids {
            encode_stream(&mut w, &self.streams[&id], &mut cuts);
        }
        w.u64(self.doomed.next_seq);
        w.u64(self.doomed.items.len() as u64);
        for d in &self.doomed.items {
            w.u64(d.seq);
            w.u64(d.stream);
            w.opt_u64(d.snapshot_offset);
            d.object.write(&mut w);
            w.i64(d.queued_ms);
        }
        let subscriptions =
            serde_json::to_string(&self.subscriptions).expect("subscriptions serialize");
        w.str(&subscriptions);
        w.opt_str(self.cluster_id.as_deref());
        w.u64(self.retired_nodes.len() as u64);
        for node in &self.retired_nodes {
            w.u64(*node);
        }
        w.opt_u64(self.replication.map(u64::from));
        w.u64(self.preferred_leaders.len() as u64);
        for (group, node) in &self.preferred_leaders {
            w.u64(u64::from(*group));
            w.u64(*node);
        }
        w.u64(self.zones.len() as u64);
        for (node, zone) in &self.zones {
            w.u64(*node);
            w.str(zone);
        }
        w.bool(self.healing_paused);
        match (version, &self.restored_from) {
            (11, Some(source)) => w.str(source),
            (12, source) => {
                w.opt_str(source.as_deref());
                w.opt_u64(self.cluster_version.map(u64::from));
                w.u64(self.member_states.len() as u64);
                for (node, state) in &self.member_states {
                    w.u64(*node);
                    w.u8(state.code());
                }
            }
            _ => {}
        }
        CheckpointCapture {
            bytes: w.finish(),
            cuts,
            snapshot_ranges: self.snapshot_ranges(),
        }
    }

    /// Decodes a state written by [`StreamsState::encode_checkpoint`].
    pub fn decode_checkpoint(bytes: &[u8]) -> Result<StreamsState, CodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if !(1..=CHECKPOINT_VERSION).contains(&version) {
            return Err(CodecError::UnknownVersion(version));
        }
        let mut state = StreamsState::new();
        state.next_id = r.u64()?;
        let count = r.u64()?;
        for _ in 0..count {
            let s = decode_stream(&mut r, version, &mut state)?;
            // A soft-deleted stream keeps its name until its last fork goes.
            state.names.insert(Arc::clone(&s.name), s.id);
            // Checked: a damaged checkpoint must fail to decode, not wrap
            // (found by fuzzing).
            let overflow = CodecError::Invalid("stream byte counts overflow");
            let hot = s
                .chunks
                .iter()
                .try_fold(0u64, |sum, c| sum.checked_add(c.len));
            let cold = s
                .cold_chunks()
                .iter()
                .try_fold(0u64, |sum, c| sum.checked_add(c.len()));
            state.hot_bytes = hot
                .and_then(|h| state.hot_bytes.checked_add(h))
                .ok_or(overflow.clone())?;
            state.cold_bytes = cold
                .and_then(|c| state.cold_bytes.checked_add(c))
                .ok_or(overflow)?;
            state.streams.insert(s.id, Box::new(s));
        }
        if version >= 3 {
            state.doomed.next_seq = r.u64()?;
            for _ in 0..r.u64()? {
                state.doomed.items.push_back(Doomed {
                    seq: r.u64()?,
                    stream: r.u64()?,
                    snapshot_offset: r.opt_u64()?,
                    object: ColdChunk::read(&mut r)?,
                    queued_ms: r.i64()?,
                });
            }
        }
        if version >= 4 {
            state.subscriptions = serde_json::from_str(&r.string()?)
                .map_err(|_| CodecError::Invalid("subscriptions"))?;
            state.subscriptions.rebuild_index();
        }
        if version >= 5 {
            state.cluster_id = r.opt_string()?;
        }
        if version >= 6 {
            for _ in 0..r.u64()? {
                state.retired_nodes.insert(r.u64()?);
            }
        }
        if version >= 7 {
            state.replication = r
                .opt_u64()?
                .map(|f| u32::try_from(f).map_err(|_| CodecError::Invalid("replication factor")))
                .transpose()?;
        }
        if version >= 8 {
            for _ in 0..r.u64()? {
                let group = u32::try_from(r.u64()?)
                    .map_err(|_| CodecError::Invalid("preferred leader group"))?;
                state.preferred_leaders.insert(group, r.u64()?);
            }
        }
        if version >= 9 {
            for _ in 0..r.u64()? {
                let node = r.u64()?;
                state.zones.insert(node, r.string()?);
            }
        }
        if version >= 10 {
            state.healing_paused = r.bool()?;
        }
        if version == 11 {
            state.restored_from = Some(r.string()?);
        }
        if version >= 12 {
            state.restored_from = r.opt_string()?;
            state.cluster_version = r
                .opt_u64()?
                .map(|v| u32::try_from(v).map_err(|_| CodecError::Invalid("cluster version")))
                .transpose()?;
            for _ in 0..r.u64()? {
                let node = r.u64()?;
                let member = crate::member_state::MemberState::from_code(r.u8()?)
                    .ok_or(CodecError::Invalid("member state"))?;
                state.member_states.insert(node, member);
            }
        }
        r.expect_end()?;
        Ok(state)
    }

    /// Every log location a live byte lives at: chunk and snapshot starts
    /// with their lengths. Segments holding none of these can be deleted.
    /// Moves every byte reference (stream chunks, snapshots): the byte
    /// stored at `loc` now lies at `relocate(loc)`. A replica that installs
    /// another's state copies the live bytes into its own log and
    /// relocates; a chunk is one contiguous range, so it moves as a whole.
    pub fn relocate(&mut self, relocate: impl Fn(u64) -> u64) {
        for s in self.streams.values_mut() {
            s.chunks.relocate(&relocate);
            let Some(x) = s.extras.as_deref_mut() else {
                continue;
            };
            let snaps = x.snapshots.values_mut().chain(x.server_snapshot.as_mut());
            for snap in snaps {
                if let Placement::Log(loc) = &mut snap.placement {
                    *loc = relocate(*loc);
                }
            }
        }
    }

    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges = self.snapshot_ranges();
        for s in self.streams.values() {
            ranges.extend(s.chunks.iter().map(|c| (c.loc, c.len)));
        }
        ranges
    }

    /// Log ranges of the snapshots stored in the log.
    fn snapshot_ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        for s in self.streams.values() {
            let snaps = s.x().snapshots.values().chain(s.x().server_snapshot.iter());
            ranges.extend(snaps.filter_map(|snap| match snap.placement {
                Placement::Log(loc) => Some((loc, snap.len)),
                Placement::Object(_) => None,
            }));
        }
        ranges
    }
}

/// Encodes a stream, leaving out its hot chunks: their place and index
/// go to `cuts`.
fn encode_stream(w: &mut Writer, s: &StreamState, cuts: &mut Vec<(usize, ChunkIndex)>) {
    w.u64(s.id);
    w.str(&s.name);
    w.str(&s.content_type);
    w.opt_u64(s.ttl_secs());
    w.opt_i64(s.expires_at_ms());
    w.i64(s.created_at_ms);
    w.i64(s.last_access_ms());
    w.bool(s.closed);
    w.u64(s.tail);
    match &s.x().base {
        Some(b) => {
            w.bool(true);
            w.u64(b.source);
            w.u64(b.point);
        }
        None => w.bool(false),
    }
    write_fork(w, s.x().fork_spec.as_ref());
    cuts.push((w.len(), s.chunks.clone()));
    w.u64(s.cold_chunks().len() as u64);
    for c in s.cold_chunks().iter() {
        c.write(w);
    }
    let mut producers: Vec<_> = s.x().producers.iter().collect();
    producers.sort_unstable_by(|a, b| a.0.cmp(b.0));
    w.u64(producers.len() as u64);
    for (id, p) in producers {
        w.str(id);
        w.u64(p.epoch);
        w.u64(p.last_seq);
    }
    w.opt_str(s.x().last_stream_seq.as_deref());
    w.u32(s.fork_refs);
    w.bool(s.soft_deleted);
    w.u64(s.earliest);
    w.u64(s.x().snapshots.len() as u64);
    for snap in s.x().snapshots.values() {
        encode_snapshot(w, snap);
    }
    match &s.x().server_snapshot {
        Some(snap) => {
            w.bool(true);
            encode_snapshot(w, snap);
        }
        None => w.bool(false),
    }
    w.bool(s.compaction);
    w.opt_u64(s.retention().max_bytes);
    w.opt_u64(s.retention().max_age_secs);
    w.u64(s.x().pins.len() as u64);
    for token in &s.x().pins {
        w.str(token);
    }
    match &s.x().remote_source {
        Some(pin) => {
            w.bool(true);
            w.str(&pin.source);
            w.str(&pin.token);
        }
        None => w.bool(false),
    }
}

fn encode_snapshot(w: &mut Writer, snap: &SnapshotRef) {
    w.u64(snap.offset);
    match &snap.placement {
        Placement::Log(loc) => {
            w.u8(0);
            w.u64(*loc);
        }
        Placement::Object(object) => {
            w.u8(1);
            object.write(w);
        }
    }
    w.u64(snap.len);
    w.raw(&snap.digest);
    w.str(&snap.content_type);
    w.bool(snap.server_made);
}

fn decode_snapshot(r: &mut Reader<'_>, version: u8) -> Result<SnapshotRef, CodecError> {
    let offset = r.u64()?;
    let placement = if version < 3 {
        Placement::Log(r.u64()?)
    } else {
        match r.u8()? {
            0 => Placement::Log(r.u64()?),
            1 => Placement::Object(ColdChunk::read(r)?),
            other => return Err(CodecError::BadFlag(other)),
        }
    };
    Ok(SnapshotRef {
        offset,
        placement,
        len: r.u64()?,
        digest: r.array::<32>()?,
        content_type: r.string()?,
        server_made: r.bool()?,
    })
}

fn encode_chunks(w: &mut Writer, chunks: &ChunkIndex) {
    w.u64(chunks.len() as u64);
    for c in chunks.iter() {
        w.u64(c.start);
        w.u64(c.len);
        w.u64(c.loc);
        w.i64(c.at_ms);
        w.u32_list(c.ends().unwrap_or(&[]));
    }
}

fn decode_stream(
    r: &mut Reader<'_>,
    version: u8,
    state: &mut StreamsState,
) -> Result<StreamState, CodecError> {
    let id = r.u64()?;
    let name = r.string()?;
    let content_type = r.string()?;
    let ttl_secs = r.opt_u64()?;
    let expires_at_ms = r.opt_i64()?;
    let created_at_ms = r.i64()?;
    let last_access_ms = r.i64()?;
    let closed = r.bool()?;
    let tail = r.u64()?;
    let base = if r.bool()? {
        Some(ForkBase {
            source: r.u64()?,
            point: r.u64()?,
        })
    } else {
        None
    };
    let fork_spec = read_fork(r)?;
    let chunk_count = r.u64()?;
    let mut chunks = ChunkIndex::default();
    for _ in 0..chunk_count {
        let (start, len, loc, at_ms) = (r.u64()?, r.u64()?, r.u64()?, r.i64()?);
        let ends = r.u32_list()?;
        chunks.push(Chunk {
            start,
            len,
            loc,
            message_ends: MessageEnds::stored(ends),
            at_ms,
        });
    }
    let mut cold = crate::cold_list::ColdList::default();
    if version >= 3 {
        for _ in 0..r.u64()? {
            cold.push(ColdChunk::read(r)?);
        }
    }
    let producer_count = r.u64()?;
    let mut producers = HashMap::new();
    for _ in 0..producer_count {
        let pid = r.string()?;
        producers.insert(
            pid,
            ProducerState {
                epoch: r.u64()?,
                last_seq: r.u64()?,
            },
        );
    }
    let last_stream_seq = r.opt_string()?;
    let fork_refs = r.u32()?;
    let soft_deleted = r.bool()?;
    let earliest = r.u64()?;
    let snapshot_count = r.u64()?;
    let mut snapshots = BTreeMap::new();
    for _ in 0..snapshot_count {
        let snap = decode_snapshot(r, version)?;
        snapshots.insert(snap.offset, snap);
    }
    let server_snapshot = if r.bool()? {
        Some(decode_snapshot(r, version)?)
    } else {
        None
    };
    let compaction = r.bool()?;
    let retention = Retention {
        max_bytes: r.opt_u64()?,
        max_age_secs: r.opt_u64()?,
    };
    let mut pins = std::collections::BTreeSet::new();
    let mut remote_source = None;
    if version >= 2 {
        for _ in 0..r.u64()? {
            pins.insert(r.string()?);
        }
        if r.bool()? {
            remote_source = Some(RemotePin {
                source: r.string()?,
                token: r.string()?,
            });
        }
    }
    let extras = Extras {
        cold,
        ttl_secs,
        expires_at_ms,
        base,
        fork_spec,
        producers,
        last_stream_seq,
        snapshots,
        server_snapshot,
        retention,
        pins,
        remote_source,
    };
    let plain = extras.cold.is_empty()
        && extras.ttl_secs.is_none()
        && extras.expires_at_ms.is_none()
        && extras.base.is_none()
        && extras.fork_spec.is_none()
        && extras.producers.is_empty()
        && extras.last_stream_seq.is_none()
        && extras.snapshots.is_empty()
        && extras.server_snapshot.is_none()
        && extras.retention == Retention::default()
        && extras.pins.is_empty()
        && extras.remote_source.is_none();
    Ok(StreamState {
        id,
        name: Arc::from(name),
        kind: ContentKind::of(&content_type),
        content_type: state.intern_content_type(&content_type),
        created_at_ms,
        last_access_ms: AtomicI64::new(last_access_ms),
        closed,
        tail,
        chunks,
        fork_refs,
        soft_deleted,
        earliest,
        compaction,
        extras: (!plain).then(|| Box::new(extras)),
    })
}
