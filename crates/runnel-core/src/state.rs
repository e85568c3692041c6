//! The deterministic state machine over all streams of one group.
//!
//! [`StreamsState::apply`] takes a logged [`Entry`] and the log location of
//! its data and changes state; the same entries in the same order always
//! give the same state and the same answers. Time comes only from the
//! entry. Reads ([`crate::read`]) never change logged state; they only renew
//! the in-memory sliding TTL.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::command::{AppendToStream, Command, Entry, StreamId};
use crate::error::CoreError;
use crate::fork_copy::RemotePin;
use crate::offset::{Offset, MAX_POSITION};
use crate::stream::{same_media_type, Chunk, ContentKind, MessageEnds, ProducerState, StreamState};
use crate::subscription::Subscriptions;
use crate::tier::{ColdChunk, DoomedQueue, Fence};

pub use crate::applied::Applied;

/// A stream's metadata as responses report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: StreamId,
    /// Which life of its name this stream is: minted into every offset
    /// (see [`crate::offset::incarnation`]).
    pub incarnation: u64,
    /// A fork, which also accepts the offsets its sources minted.
    pub fork: bool,
    pub content_type: String,
    pub kind: ContentKind,
    pub next_offset: Offset,
    pub closed: bool,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
}

impl StreamInfo {
    /// The token of `offset` in this stream.
    pub fn token(&self, offset: Offset) -> crate::offset::Token {
        offset.token_in(self.incarnation)
    }

    /// Whether a read may start at a token of incarnation `epoch`: one
    /// minted by this stream, or by no stream in particular (zeros), or,
    /// for a fork, by a stream it was forked from (all older than it). A
    /// token of an earlier stream of the same name is refused, so a reader
    /// of a deleted stream cannot carry on into its successor's bytes.
    pub fn accepts_incarnation(&self, epoch: u64) -> bool {
        epoch == 0 || epoch == self.incarnation || (self.fork && epoch < self.incarnation)
    }

    pub(crate) fn of(s: &StreamState) -> StreamInfo {
        StreamInfo {
            id: s.id,
            incarnation: s.incarnation(),
            fork: s.is_fork(),
            content_type: s.content_type.to_string(),
            kind: s.kind,
            next_offset: Offset(s.tail),
            closed: s.closed,
            ttl_secs: s.ttl_secs(),
            expires_at_ms: s.expires_at_ms(),
        }
    }
}

/// A contiguous run of a stream's bytes as the engine must fetch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slice {
    /// `len` bytes at `loc` in this node's log.
    Log { loc: u64, len: u64 },
    /// Stream positions `from..to` of a chunk object of stream `stream`
    /// (a fork reads its source's objects).
    Object {
        stream: StreamId,
        chunk: ColdChunk,
        from: u64,
        to: u64,
    },
}

impl Slice {
    pub fn len(&self) -> u64 {
        match self {
            Slice::Log { len, .. } => *len,
            Slice::Object { from, to, .. } => to - from,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The chunk containing a position, as seen through a fork chain: its end
/// clipped by the lowest fork point on the way.
pub(crate) struct ChunkView<'a> {
    pub start: u64,
    pub end: u64,
    pub message_ends: Option<&'a [u32]>,
    pub json: bool,
    /// A cold chunk: its boundaries are in the object, not in memory.
    pub tiered: bool,
}

impl ChunkView<'_> {
    /// Message boundaries strictly inside (start, end], absolute.
    pub(crate) fn boundaries(&self) -> Vec<u64> {
        match self.message_ends {
            Some(ends) => ends
                .iter()
                .map(|e| self.start + u64::from(*e))
                .filter(|e| *e <= self.end)
                .collect(),
            None => vec![self.end],
        }
    }
}

#[derive(Debug, Default)]
pub struct StreamsState {
    pub(crate) names: HashMap<Arc<str>, StreamId>,
    /// Boxed: the map's table holds twice its entries' room at times, and
    /// a box keeps that spare room at a pointer per slot.
    pub(crate) streams: HashMap<StreamId, Box<StreamState>>,
    /// Content types in use, each stored once.
    pub(crate) content_types: HashSet<Arc<str>>,
    pub(crate) next_id: StreamId,
    /// Streams whose tail, closure or existence changed since the last
    /// [`StreamsState::take_changed`]: the engine wakes their readers.
    pub(crate) changed: Vec<StreamId>,
    /// Names of streams removed for good since the last
    /// [`StreamsState::take_changed_names`] (their ids no longer resolve).
    pub(crate) removed: Vec<Arc<str>>,
    /// Pins on other groups' streams released while applying the current
    /// entry (see [`crate::fork_copy`]).
    pub(crate) released: Vec<RemotePin>,
    /// Bytes of all streams' hot chunks (in the log only) and cold ones.
    pub(crate) hot_bytes: u64,
    pub(crate) cold_bytes: u64,
    /// Objects whose references were dropped, to delete.
    pub(crate) doomed: DoomedQueue,
    /// The time of the entry being applied.
    pub(crate) now_ms: i64,
    /// The subscriptions, in the control group (empty in the others).
    pub(crate) subscriptions: Subscriptions,
    /// The cluster's id, in the control group (see [`crate::cluster_meta`]).
    pub(crate) cluster_id: Option<String>,
    /// Nodes removed for good, in the control group.
    pub(crate) retired_nodes: std::collections::BTreeSet<u64>,
    /// Replicas of each data group, in the control group, once set.
    pub(crate) replication: Option<u32>,
    /// The node each group should be led by, in the control group.
    pub(crate) preferred_leaders: std::collections::BTreeMap<u32, u64>,
    /// Each node's zone, in the control group (see [`crate::zones`]).
    pub(crate) zones: std::collections::BTreeMap<u64, String>,
    /// Whether the cluster's self-healing is paused, in the control group
    /// (see [`crate::cluster_meta`]).
    pub(crate) healing_paused: bool,
    /// The cluster this group was restored from (see [`crate::restore`]).
    pub(crate) restored_from: Option<String>,
    /// The cluster version, in the control group, once recorded (see
    /// [`crate::upgrade`]); `None` is version 1.
    pub(crate) cluster_version: Option<u32>,
    /// Members draining or filling, in the control group (see
    /// [`crate::member_state`]).
    pub(crate) member_states: std::collections::BTreeMap<u64, crate::member_state::MemberState>,
}

impl StreamsState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one logged entry. `data_len` and `data_loc` give the length
    /// of the entry's data and where the engine stored it.
    pub fn apply(
        &mut self,
        entry: &Entry,
        data_len: u64,
        data_loc: u64,
    ) -> Result<Applied, CoreError> {
        self.apply_in_term(entry, data_len, data_loc, 0)
    }

    /// [`StreamsState::apply`] for an entry logged in Raft term `term`
    /// (the local engine's is 0): tiering commands are fenced to it.
    pub fn apply_in_term(
        &mut self,
        entry: &Entry,
        data_len: u64,
        data_loc: u64,
        term: u64,
    ) -> Result<Applied, CoreError> {
        let now = entry.now_ms;
        self.now_ms = now;
        match &entry.command {
            Command::Create(c) => self.create(c, now, data_len, data_loc),
            Command::Append(a) => self.append(a, now, data_len, data_loc),
            Command::Delete { name } => self.delete(name),
            Command::Expire { ids } => Ok(self.expire(ids)),
            Command::PutSnapshot(p) => self.put_snapshot(p, data_len, data_loc),
            Command::DeleteSnapshot { name, offset } => self.delete_snapshot(name, *offset),
            Command::Trim { name, before } => self.trim(name, *before),
            Command::Pin {
                name,
                token,
                offset,
                sub_offset,
            } => self.pin(name, token, *offset, *sub_offset),
            Command::Unpin { name, token } => Ok(self.unpin(name, token)),
            Command::Tier {
                stream,
                term: uploaded_in,
                chunk,
            } => {
                let fence = Fence {
                    uploaded_in: *uploaded_in,
                    entry: term,
                };
                self.tier(*stream, fence, chunk)
            }
            Command::TierSnapshot {
                stream,
                term: uploaded_in,
                offset,
                server_made,
                from_loc,
                object,
            } => {
                let fence = Fence {
                    uploaded_in: *uploaded_in,
                    entry: term,
                };
                self.tier_snapshot(*stream, (*offset, *server_made, *from_loc), fence, object)
            }
            Command::ObjectsDeleted { up_to } => Ok(self.objects_deleted(*up_to)),
            Command::Subscription(command) => self
                .subscriptions
                .apply((**command).clone())
                .map(Applied::Subscription)
                .map_err(CoreError::Subscription),
            Command::SetClusterId { id } => self.set_cluster_id(id),
            Command::RetireNode { node } => Ok(self.retire_node(*node)),
            Command::SetReplication { factor, initial } => self.set_replication(*factor, *initial),
            Command::PreferLeaders { leaders, initial } => self.prefer_leaders(leaders, *initial),
            Command::SetZones { zones } => self.set_zones(zones),
            Command::PauseHealing { paused } => Ok(self.pause_healing(*paused)),
            Command::RestoreGroup { source, checkpoint } => {
                self.restore_group(source, checkpoint.as_deref())
            }
            Command::SetClusterVersion { version } => self.set_cluster_version(*version),
            Command::SetMemberState { node, state } => self.set_member_state(*node, *state),
        }
    }

    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    /// Streams changed since the last call.
    pub fn take_changed(&mut self) -> Vec<StreamId> {
        std::mem::take(&mut self.changed)
    }

    /// The names of the streams changed since the last call, and of those
    /// removed for good: what subscriptions watch. Call before
    /// [`StreamsState::take_changed`], which drops the changed ids.
    pub fn take_changed_names(&mut self) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = std::mem::take(&mut self.removed);
        names.extend(
            self.changed
                .iter()
                .filter_map(|id| self.streams.get(id).map(|s| Arc::clone(&s.name))),
        );
        names
    }

    /// Forgets the names of removed streams (nobody watches them).
    pub fn clear_removed(&mut self) {
        self.removed.clear();
    }

    /// Marks streams as changed (their readers are woken).
    pub fn mark_changed(&mut self, ids: Vec<StreamId>) {
        self.changed.extend(ids);
    }

    /// Every stream id, live or soft-deleted (readers of each must re-read
    /// when a whole state is replaced).
    pub fn stream_ids(&self) -> Vec<StreamId> {
        self.streams.keys().copied().collect()
    }

    pub fn stream(&self, id: StreamId) -> Option<&StreamState> {
        self.streams.get(&id).map(|s| &**s)
    }

    pub fn stream_by_name(&self, name: &str) -> Option<&StreamState> {
        self.names.get(name).and_then(|id| self.stream(*id))
    }

    /// The shared copy of a content type.
    pub(crate) fn intern_content_type(&mut self, content_type: &str) -> Arc<str> {
        if let Some(shared) = self.content_types.get(content_type) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(content_type);
        self.content_types.insert(Arc::clone(&shared));
        shared
    }

    /// Every live stream (not deleted, not expired at `now_ms`) with its
    /// tail position.
    pub fn live_tails(&self, now_ms: i64) -> impl Iterator<Item = (&str, u64)> {
        self.streams
            .values()
            .filter(move |s| !s.soft_deleted && !s.is_expired(now_ms))
            .map(|s| (&*s.name, s.tail))
    }

    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// A fingerprint of what readers can observe, the same on every
    /// replica that applied the same entries (wherever each stored the
    /// bytes): FNV-1a over each stream's id, name, tail, earliest offset,
    /// closure and deletion, in id order, then the subscriptions, the
    /// cluster id and the retired nodes.
    pub fn digest(&self) -> u64 {
        let mut ids: Vec<&StreamId> = self.streams.keys().collect();
        ids.sort_unstable();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for id in ids {
            let s = &self.streams[id];
            feed(&id.to_le_bytes());
            feed(s.name.as_bytes());
            feed(&s.tail.to_le_bytes());
            feed(&s.earliest.to_le_bytes());
            feed(&[u8::from(s.closed), u8::from(s.soft_deleted)]);
            for c in s.cold_chunks().iter() {
                feed(&c.end.to_le_bytes());
                feed(&c.nonce.to_le_bytes());
            }
        }
        if self.subscriptions.has_state() {
            let json = serde_json::to_vec(&self.subscriptions).expect("subscriptions serialize");
            feed(&json);
        }
        if let Some(id) = &self.cluster_id {
            feed(id.as_bytes());
        }
        for node in &self.retired_nodes {
            feed(&node.to_le_bytes());
        }
        if let Some(factor) = self.replication {
            feed(&factor.to_le_bytes());
        }
        for (group, node) in &self.preferred_leaders {
            feed(&group.to_le_bytes());
            feed(&node.to_le_bytes());
        }
        for (node, zone) in &self.zones {
            feed(&node.to_le_bytes());
            feed(zone.as_bytes());
        }
        if self.healing_paused {
            feed(b"healing paused");
        }
        if let Some(source) = &self.restored_from {
            feed(b"restored from ");
            feed(source.as_bytes());
        }
        if let Some(version) = self.cluster_version {
            feed(b"cluster version ");
            feed(&version.to_le_bytes());
        }
        for (node, state) in &self.member_states {
            feed(&node.to_le_bytes());
            feed(state.as_str().as_bytes());
        }
        hash
    }

    /// Live (not soft-deleted) streams whose TTL or expiry has passed.
    pub fn expired_ids(&self, now_ms: i64) -> Vec<StreamId> {
        self.streams
            .values()
            .filter(|s| !s.soft_deleted && s.is_expired(now_ms))
            .map(|s| s.id)
            .collect()
    }

    /// The id of `name`'s stream if it is live but expired: the engine
    /// proposes its expiry before any command that names it.
    pub fn expired_id(&self, name: &str, now_ms: i64) -> Option<StreamId> {
        self.stream_by_name(name)
            .filter(|s| !s.soft_deleted && s.is_expired(now_ms))
            .map(|s| s.id)
    }

    /// After recovery: renew every sliding TTL to `now_ms`. Read renewals
    /// are not logged, so replay alone could expire a stream early; this
    /// errs towards keeping data.
    pub fn renew_all_ttls(&mut self, now_ms: i64) {
        for s in self.streams.values() {
            if s.ttl_secs().is_some() {
                s.touch(now_ms);
            }
        }
    }

    fn append(
        &mut self,
        a: &AppendToStream,
        now: i64,
        data_len: u64,
        loc: u64,
    ) -> Result<Applied, CoreError> {
        let id = *self.names.get(a.name.as_str()).ok_or(CoreError::NotFound)?;
        let s = self.streams.get_mut(&id).expect("named streams exist");
        if s.soft_deleted {
            return Err(CoreError::Gone);
        }
        let close_only = a.close && data_len == 0;

        // A retry of an accepted producer append is acknowledged before
        // any other check, closure included: it changes nothing.
        if let Some(p) = &a.producer {
            if let Some(state) = s.x().producers.get(&p.id) {
                if p.epoch == state.epoch && p.seq <= state.last_seq {
                    return Ok(Applied::Appended {
                        next_offset: Offset(s.tail),
                        incarnation: s.incarnation(),
                        closed: s.closed,
                        producer: Some((state.epoch, state.last_seq)),
                        duplicate: true,
                    });
                }
            }
        }
        if s.closed {
            if close_only {
                s.touch(now);
                return Ok(Applied::Appended {
                    next_offset: Offset(s.tail),
                    incarnation: s.incarnation(),
                    closed: true,
                    producer: None,
                    duplicate: false,
                });
            }
            return Err(CoreError::Closed {
                next_offset: Offset(s.tail),
                incarnation: s.incarnation(),
            });
        }
        if !close_only {
            let matches = a
                .content_type
                .as_deref()
                .is_some_and(|ct| same_media_type(ct, &s.content_type));
            if !matches {
                return Err(CoreError::ContentTypeMismatch);
            }
        }
        let producer_update = match &a.producer {
            Some(p) => Some(check_producer(
                s.x().producers.get(&p.id).copied(),
                p.epoch,
                p.seq,
            )?),
            None => None,
        };
        if let (Some(seq), Some(last)) = (&a.stream_seq, &s.x().last_stream_seq) {
            if seq <= last {
                return Err(CoreError::StreamSeqRegression { last: last.clone() });
            }
        }
        if s.tail.saturating_add(data_len) > MAX_POSITION {
            return Err(CoreError::StreamFull);
        }

        // Accepted: every check above passed, now change state.
        let stored = push_chunk(s, data_len, loc, &a.body.message_ends, now);
        if let (Some(p), Some(update)) = (&a.producer, producer_update) {
            s.x_mut().producers.insert(p.id.clone(), update);
        }
        if let Some(seq) = &a.stream_seq {
            s.x_mut().last_stream_seq = Some(seq.clone());
        }
        if a.close {
            s.closed = true;
        }
        s.touch(now);
        let applied = Applied::Appended {
            next_offset: Offset(s.tail),
            incarnation: s.incarnation(),
            closed: s.closed,
            producer: a.producer.as_ref().map(|p| (p.epoch, p.seq)),
            duplicate: false,
        };
        self.changed.push(id);
        self.hot_bytes += stored;
        Ok(applied)
    }

    fn delete(&mut self, name: &str) -> Result<Applied, CoreError> {
        let id = *self.names.get(name).ok_or(CoreError::NotFound)?;
        let s = self.streams.get_mut(&id).expect("named streams exist");
        if s.soft_deleted {
            return Err(CoreError::Gone);
        }
        self.retire(id);
        Ok(Applied::Deleted {
            released: std::mem::take(&mut self.released),
        })
    }

    fn expire(&mut self, ids: &[StreamId]) -> Applied {
        let mut count = 0;
        for id in ids {
            if self.streams.get(id).is_some_and(|s| !s.soft_deleted) {
                self.retire(*id);
                count += 1;
            }
        }
        Applied::Expired {
            count,
            released: std::mem::take(&mut self.released),
        }
    }

    /// Deletes a live stream: soft when forks still read it, else fully,
    /// releasing its own fork source (which may cascade).
    fn retire(&mut self, id: StreamId) {
        self.changed.push(id);
        let s = self.streams.get_mut(&id).expect("retired streams exist");
        if s.fork_refs > 0 {
            s.soft_deleted = true;
            return;
        }
        self.remove_chain(id);
    }

    /// Removes stream `id` for good, then each fork source that this
    /// leaves soft-deleted and unread; pins they held on other groups'
    /// streams go to `released`.
    pub(crate) fn remove_chain(&mut self, id: StreamId) {
        let mut next = Some(id);
        while let Some(id) = next.take() {
            let s = *self.streams.remove(&id).expect("removed streams exist");
            if self.names.get(&*s.name) == Some(&id) {
                self.names.remove(&*s.name);
            }
            self.hot_bytes -= s.chunks.iter().map(|c| c.len).sum::<u64>();
            let mut extras = s.extras.map(|x| *x).unwrap_or_default();
            for chunk in std::mem::take(&mut extras.cold).drain_front(usize::MAX) {
                self.cold_bytes -= chunk.len();
                self.doom(id, None, chunk);
            }
            for snap in extras
                .snapshots
                .values()
                .chain(extras.server_snapshot.iter())
            {
                self.doom_snapshot(id, snap.offset, &snap.placement);
            }
            self.changed.push(id);
            self.removed.push(Arc::clone(&s.name));
            self.released.extend(extras.remote_source);
            if let Some(base) = extras.base {
                let source = self
                    .streams
                    .get_mut(&base.source)
                    .expect("fork sources outlive forks");
                source.fork_refs -= 1;
                if source.soft_deleted && source.fork_refs == 0 {
                    next = Some(base.source);
                }
            }
        }
    }

    /// The chunk containing `pos` in stream `id`'s view.
    pub(crate) fn chunk_view(&self, id: StreamId, pos: u64) -> Option<ChunkView<'_>> {
        let mut s = self.streams.get(&id)?;
        let json = s.is_json();
        let mut limit = s.tail;
        loop {
            if pos >= s.own_start() {
                if let Some(i) = s.cold_index(pos) {
                    let cold = s.cold_chunks().get(i).expect("cold_index is in range");
                    return Some(ChunkView {
                        start: cold.start,
                        end: cold.end.min(limit),
                        message_ends: None,
                        json,
                        tiered: true,
                    })
                    .filter(|v| pos < v.end);
                }
                let chunk = s.chunks.get(s.own_chunk_index(pos)?)?;
                return Some(ChunkView {
                    start: chunk.start,
                    end: chunk.end().min(limit),
                    message_ends: chunk.ends(),
                    json,
                    tiered: false,
                })
                .filter(|v| pos < v.end);
            }
            let base = s.x().base.as_ref()?;
            limit = limit.min(base.point);
            s = self.streams.get(&base.source)?;
        }
    }

    /// Whether a read or fork may start at `pos`: any position up to the
    /// tail for byte streams, only message boundaries for JSON streams.
    pub(crate) fn is_boundary(&self, id: StreamId, pos: u64) -> bool {
        let Some(s) = self.streams.get(&id) else {
            return false;
        };
        if pos > s.tail {
            return false;
        }
        if !s.is_json() || pos == s.tail || pos == 0 {
            return true;
        }
        match self.chunk_view(id, pos) {
            // Inside a tiered chunk: checked by the engine against the
            // object's footer (see `crate::tier`).
            Some(view) => view.start == pos || view.tiered || view.boundaries().contains(&pos),
            None => false,
        }
    }
}

/// Producer validation: the state to store if the append is accepted.
fn check_producer(
    state: Option<ProducerState>,
    epoch: u64,
    seq: u64,
) -> Result<ProducerState, CoreError> {
    let accepted = ProducerState {
        epoch,
        last_seq: seq,
    };
    match state {
        None if seq == 0 => Ok(accepted),
        None => Err(CoreError::ProducerSeqGap {
            expected: 0,
            received: seq,
        }),
        Some(s) if epoch < s.epoch => Err(CoreError::ProducerStaleEpoch { current: s.epoch }),
        Some(s) if epoch > s.epoch => {
            if seq == 0 {
                Ok(accepted)
            } else {
                Err(CoreError::ProducerEpochSeqNotZero)
            }
        }
        Some(s) if seq == s.last_seq + 1 => Ok(accepted),
        Some(s) => Err(CoreError::ProducerSeqGap {
            expected: s.last_seq + 1,
            received: seq,
        }),
    }
}

/// Makes room for one more element, growing by an eighth rather than
/// doubling: index vectors are most of a node's memory, and doubling
/// leaves up to half of each unused. Amortized, each element is copied
/// about eight times.
pub(crate) fn grow_gently<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 8).max(4));
    }
}

/// Adds an append's bytes to the stream; returns how many it stored.
pub(crate) fn push_chunk(
    s: &mut StreamState,
    data_len: u64,
    loc: u64,
    message_ends: &[u32],
    now: i64,
) -> u64 {
    if data_len == 0 {
        return 0;
    }
    s.chunks.push(Chunk {
        start: s.tail,
        len: data_len,
        loc,
        message_ends: MessageEnds::of(message_ends),
        at_ms: now,
    });
    s.tail += data_len;
    data_len
}
