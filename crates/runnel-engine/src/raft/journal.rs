//! Each group's Raft log, stored in the node's shared [`Log`].
//!
//! The shared log is append-only, so a group's Raft log is the sequence
//! of its records read in order: entries, votes, committed marks, and
//! truncation and purge marks that cancel earlier entries. [`GroupLog`] is
//! the in-memory result of that sequence (where each live entry sits); the
//! [`JournalStore`] keeps it current as openraft appends, truncates and
//! purges, and recovery rebuilds it by replaying the records.
//!
//! Durability: a record is durable once the log's durable position passes
//! its end, and the log becomes durable as a prefix. So a truncation mark
//! needs no fsync of its own: any later entry that is durable implies it.
//! Votes are waited for before openraft is answered.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, RaftLogReader};
use runnel_log::{Log, LogError};
use tokio::sync::oneshot;

use super::{
    encode_record, kind, storage_error, LogId, RaftEntry, StorageError, TypeConfig, Vote,
    RECORD_PREFIX,
};

/// Completion callbacks waiting for the shared log's durable position.
pub struct Durability {
    inner: Mutex<DurabilityInner>,
}

type Waiter = Box<dyn FnOnce(Result<(), LogError>) + Send>;

struct DurabilityInner {
    status: Result<u64, LogError>,
    waiters: BTreeMap<u64, Vec<Waiter>>,
}

impl Durability {
    pub fn new() -> Arc<Durability> {
        Arc::new(Durability {
            inner: Mutex::new(DurabilityInner {
                status: Ok(0),
                waiters: BTreeMap::new(),
            }),
        })
    }

    /// The log's durability listener: runs every waiter the new position
    /// covers, or fails them all once the log failed.
    pub fn on_status(&self, status: Result<u64, LogError>) {
        let ready: Vec<(Waiter, Result<(), LogError>)> = {
            let mut inner = self.inner.lock().expect("durability lock");
            inner.status = status.clone();
            match status {
                Ok(position) => {
                    let later = inner.waiters.split_off(&(position + 1));
                    std::mem::replace(&mut inner.waiters, later)
                        .into_values()
                        .flatten()
                        .map(|w| (w, Ok(())))
                        .collect()
                }
                Err(err) => std::mem::take(&mut inner.waiters)
                    .into_values()
                    .flatten()
                    .map(|w| (w, Err(err.clone())))
                    .collect(),
            }
        };
        for (waiter, result) in ready {
            waiter(result);
        }
    }

    /// Runs `waiter` once everything before `end` is durable.
    pub fn when_durable(&self, end: u64, waiter: Waiter) {
        let mut inner = self.inner.lock().expect("durability lock");
        let result = match &inner.status {
            Ok(position) if *position >= end => Ok(()),
            Ok(_) => {
                inner.waiters.entry(end).or_default().push(waiter);
                return;
            }
            Err(err) => Err(err.clone()),
        };
        drop(inner);
        waiter(result);
    }

    /// Resolves once everything before `end` is durable.
    pub async fn wait(&self, end: u64) -> Result<(), LogError> {
        let (tx, rx) = oneshot::channel();
        self.when_durable(
            end,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        rx.await.unwrap_or(Err(LogError::Closed))
    }
}

/// Why a recovered record of a group could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("raft record of kind {kind}: {source}")]
    Undecodable { kind: u8, source: bincode::Error },
    #[error("unknown raft record kind {0}")]
    UnknownKind(u8),
}

/// Where one live entry of a group sits in the shared log.
#[derive(Debug, Clone, Copy)]
pub struct EntryLoc {
    pub log_id: LogId,
    pub payload_pos: u64,
    pub payload_len: u32,
}

impl EntryLoc {
    pub fn end(&self) -> u64 {
        self.payload_pos + u64::from(self.payload_len)
    }
}

/// One group's Raft log as its records describe it.
#[derive(Debug, Default)]
pub struct GroupLog {
    /// Live entries, by consecutive index from `first_index`.
    entries: VecDeque<EntryLoc>,
    first_index: u64,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    /// Entries appended but maybe not durable yet (the log reads only
    /// durable bytes), served from memory until they are.
    unflushed: BTreeMap<u64, (RaftEntry, u64)>,
}

impl GroupLog {
    /// Applies one recovered record of this group.
    pub fn replay(&mut self, payload_pos: u64, payload: &[u8]) -> Result<(), JournalError> {
        let (kind, body) = (payload[RECORD_PREFIX - 1], &payload[RECORD_PREFIX..]);
        let decode_err = |source| JournalError::Undecodable { kind, source };
        match kind {
            kind::ENTRY => {
                let entry: RaftEntry = bincode::deserialize(body).map_err(decode_err)?;
                self.push(EntryLoc {
                    log_id: entry.log_id,
                    payload_pos,
                    payload_len: payload.len() as u32,
                });
            }
            kind::VOTE => self.vote = Some(bincode::deserialize(body).map_err(decode_err)?),
            kind::COMMITTED => self.committed = bincode::deserialize(body).map_err(decode_err)?,
            kind::TRUNCATE => self.truncate(bincode::deserialize(body).map_err(decode_err)?),
            kind::PURGE => self.purge(bincode::deserialize(body).map_err(decode_err)?),
            // Bytes of an installed snapshot: the snapshot file points here.
            kind::BLOB => {}
            other => return Err(JournalError::UnknownKind(other)),
        }
        Ok(())
    }

    fn next_index(&self) -> u64 {
        self.first_index + self.entries.len() as u64
    }

    fn push(&mut self, loc: EntryLoc) {
        let index = loc.log_id.index;
        if self.entries.is_empty() {
            self.first_index = index;
        } else if index < self.next_index() {
            self.truncate(index);
        }
        assert!(
            self.entries.is_empty() || index == self.next_index(),
            "raft log gap: entry {index} after {}",
            self.next_index()
        );
        if self.entries.is_empty() {
            self.first_index = index;
        }
        self.entries.push_back(loc);
    }

    /// Removes the entries at `index` and after.
    fn truncate(&mut self, index: u64) {
        let keep = index.saturating_sub(self.first_index) as usize;
        self.entries.truncate(keep);
        self.unflushed.split_off(&index);
    }

    /// Removes the entries up to `log_id`.
    fn purge(&mut self, log_id: LogId) {
        let drop = (log_id.index + 1).saturating_sub(self.first_index) as usize;
        self.entries.drain(..drop.min(self.entries.len()));
        self.first_index = self.first_index.max(log_id.index + 1);
        self.last_purged = Some(log_id);
        self.unflushed = self.unflushed.split_off(&(log_id.index + 1));
    }

    /// Drops the in-memory copies of entries the log now holds durably.
    fn forget_durable(&mut self, durable: u64) {
        while let Some(first) = self.unflushed.first_entry() {
            if first.get().1 > durable {
                break;
            }
            first.remove();
        }
    }

    pub fn get(&self, index: u64) -> Option<EntryLoc> {
        let at = index.checked_sub(self.first_index)?;
        self.entries.get(at as usize).copied()
    }

    pub fn last_log_id(&self) -> Option<LogId> {
        self.entries.back().map(|e| e.log_id).or(self.last_purged)
    }

    pub fn last_purged(&self) -> Option<LogId> {
        self.last_purged
    }

    pub fn vote(&self) -> Option<Vote> {
        self.vote
    }

    /// Where replay must start to recover everything after a snapshot
    /// whose last entry is `snapshot_index`: the record of the first entry
    /// after it, or, with none yet, `log_end` (later ones go after it).
    pub fn replay_point(&self, snapshot_index: Option<u64>, log_end: u64) -> u64 {
        let after = snapshot_index.map_or(0, |i| i + 1);
        let first = after.max(self.first_index);
        match self.get(first) {
            Some(loc) => loc.payload_pos - runnel_log::HEADER_LEN,
            None => log_end,
        }
    }

    /// The record of the group's first live entry, if any: segments before
    /// it hold nothing a lagging follower could still be sent.
    pub fn first_entry_position(&self) -> Option<u64> {
        self.entries
            .front()
            .map(|loc| loc.payload_pos - runnel_log::HEADER_LEN)
    }

    /// After recovery: entries up to a loaded snapshot are covered by it,
    /// and its vote may be newer than any vote record replayed.
    pub fn start_after_snapshot(&mut self, last: LogId, vote: Option<Vote>) {
        if self.last_purged.is_none_or(|p| p < last) {
            self.purge(last);
        }
        if vote > self.vote {
            self.vote = vote;
        }
        if self.committed.is_none_or(|c| c < last) {
            self.committed = Some(last);
        }
    }
}

/// A group's [`RaftLogStorage`] (and reader) over the shared log.
#[derive(Clone)]
pub struct JournalStore {
    group: u32,
    log: Arc<Log>,
    durability: Arc<Durability>,
    index: Arc<Mutex<GroupLog>>,
}

impl JournalStore {
    pub fn new(
        group: u32,
        log: Arc<Log>,
        durability: Arc<Durability>,
        index: Arc<Mutex<GroupLog>>,
    ) -> JournalStore {
        JournalStore {
            group,
            log,
            durability,
            index,
        }
    }

    fn append_record<T: serde::Serialize>(
        &self,
        kind: u8,
        body: &T,
    ) -> Result<runnel_log::Appended, StorageError> {
        let mut record = Vec::new();
        encode_record(self.group, kind, body, &mut record);
        self.log
            .append(&record)
            .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e))
    }

    /// Reads one entry back from the log (or from memory, if it may not be
    /// durable yet).
    fn read_entry(&self, loc: EntryLoc) -> Result<RaftEntry, StorageError> {
        let mut buf = vec![0u8; loc.payload_len as usize];
        self.log
            .read_at(loc.payload_pos, &mut buf)
            .map_err(|e| storage_error(ErrorSubject::Log(loc.log_id), ErrorVerb::Read, e))?;
        let entry: RaftEntry = bincode::deserialize(&buf[RECORD_PREFIX..])
            .map_err(|e| storage_error(ErrorSubject::Log(loc.log_id), ErrorVerb::Read, e))?;
        debug_assert_eq!(entry.log_id, loc.log_id, "index points at another entry");
        Ok(entry)
    }
}

impl RaftLogReader<TypeConfig> for JournalStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<RaftEntry>, StorageError> {
        let durable = self.log.durable_position();
        let mut wanted = Vec::new();
        {
            let mut index = self.index.lock().expect("raft index lock");
            index.forget_durable(durable);
            let start = match range.start_bound() {
                Bound::Included(&i) => i,
                Bound::Excluded(&i) => i + 1,
                Bound::Unbounded => index.first_index,
            };
            // Only a prefix of the range may be returned: entries after a
            // purged start would be taken as following it (a replication
            // request built from them would skip the purged ones).
            let start = if start < index.first_index && !index.entries.is_empty() {
                index.next_index()
            } else {
                start.max(index.first_index)
            };
            let end = match range.end_bound() {
                Bound::Included(&i) => i + 1,
                Bound::Excluded(&i) => i,
                Bound::Unbounded => index.next_index(),
            }
            .min(index.next_index());
            for i in start..end {
                let loc = index.get(i).expect("index within the live range");
                match index.unflushed.get(&i) {
                    Some((entry, _)) => wanted.push(Ok(entry.clone())),
                    None => wanted.push(Err(loc)),
                }
            }
        }
        wanted
            .into_iter()
            .map(|w| match w {
                Ok(entry) => Ok(entry),
                Err(loc) => self.read_entry(loc),
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for JournalStore {
    type LogReader = JournalStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let index = self.index.lock().expect("raft index lock");
        Ok(LogState {
            last_purged_log_id: index.last_purged(),
            last_log_id: index.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let at = self.append_record(kind::VOTE, vote)?;
        self.durability
            .wait(at.end)
            .await
            .map_err(|e| storage_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        self.index.lock().expect("raft index lock").vote = Some(*vote);
        Ok(())
    }

    /// openraft reads the vote once, as the group starts, and we report
    /// it uncommitted: given a committed vote of its own, openraft 0.9
    /// would resume leading at once, in the same term, with a log that
    /// may lack entries it had sent to followers but not yet made
    /// durable when it went down (power loss). The followers may have
    /// committed them; the resumed leader's next entries would take the
    /// same log ids with other content, and a read at it would miss
    /// acknowledged writes. Uncommitted, the vote still binds this node
    /// in its term, and the node starts as a follower; the group elects
    /// a leader whose log holds everything committed
    /// (`sim_a_node_joins_and_another_leaves_under_load` found this).
    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let vote = self.index.lock().expect("raft index lock").vote;
        Ok(vote.map(|vote| Vote {
            committed: false,
            ..vote
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.append_record(kind::COMMITTED, &committed)?;
        self.index.lock().expect("raft index lock").committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.index.lock().expect("raft index lock").committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = RaftEntry> + Send,
        I::IntoIter: Send,
    {
        let mut record = Vec::new();
        let mut last_end = None;
        // Held across the appends, so a snapshot that reads the index and
        // the log's position sees every appended entry (see
        // `GroupLog::replay_point`).
        let mut index = self.index.lock().expect("raft index lock");
        index.forget_durable(self.log.durable_position());
        for entry in entries {
            encode_record(self.group, kind::ENTRY, &entry, &mut record);
            let at = self
                .log
                .append(&record)
                .map_err(|e| storage_error(ErrorSubject::Log(entry.log_id), ErrorVerb::Write, e))?;
            index.push(EntryLoc {
                log_id: entry.log_id,
                payload_pos: at.payload_pos,
                payload_len: record.len() as u32,
            });
            index.unflushed.insert(entry.log_id.index, (entry, at.end));
            last_end = Some(at.end);
        }
        drop(index);
        match last_end {
            Some(end) => self.durability.when_durable(
                end,
                Box::new(move |result| {
                    callback.log_io_completed(result.map_err(std::io::Error::other));
                }),
            ),
            None => callback.log_io_completed(Ok(())),
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.append_record(kind::TRUNCATE, &log_id.index)?;
        self.index
            .lock()
            .expect("raft index lock")
            .truncate(log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.append_record(kind::PURGE, &log_id)?;
        self.index.lock().expect("raft index lock").purge(log_id);
        Ok(())
    }
}
