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
//!
//! Purges wait for the snapshot that covers them. openraft 0.9 asks a
//! follower to purge up to an incoming snapshot before the snapshot is
//! installed, while the state machine may still be applying entries it
//! replaces; a purge done at once would pull those entries from under it,
//! and a purge record made durable before the snapshot file would leave a
//! node that crashed in between with neither. So a purge beyond the
//! group's snapshot file is held ([`GroupLog::request_purge`]) and done
//! once a snapshot covering it is persisted ([`snapshot_persisted`]).

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
    /// The last entry the group's persisted snapshot file covers: the
    /// log may be purged up to it and no further.
    snapshot_covers: Option<LogId>,
    /// A purge openraft asked for beyond `snapshot_covers`, done once a
    /// snapshot covers it.
    held_purge: Option<LogId>,
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

    /// Removes the entries up to `log_id` (a purge never moves back:
    /// records of two purges may be replayed in either order).
    fn purge(&mut self, log_id: LogId) {
        if self.last_purged >= Some(log_id) {
            return;
        }
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

    /// openraft asks to purge up to `log_id`: returns the purge to do now,
    /// or holds it until a snapshot file covers it.
    fn request_purge(&mut self, log_id: LogId) -> Option<LogId> {
        if self.snapshot_covers >= Some(log_id) {
            return Some(log_id);
        }
        if self.held_purge < Some(log_id) {
            self.held_purge = Some(log_id);
        }
        None
    }

    /// A snapshot file covering up to `last` is durable: returns the held
    /// purge it now covers, if any.
    fn covered_by_snapshot(&mut self, last: LogId) -> Option<LogId> {
        if self.snapshot_covers < Some(last) {
            self.snapshot_covers = Some(last);
        }
        match self.held_purge {
            Some(held) if Some(held) <= self.snapshot_covers => self.held_purge.take(),
            _ => None,
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
        self.snapshot_covers = Some(last);
        self.purge(last);
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
        let mut index = self.index.lock().expect("raft index lock");
        match index.request_purge(log_id) {
            Some(upto) => write_purge(&self.log, self.group, &mut index, upto)
                .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e)),
            None => {
                tracing::debug!(group = self.group, upto = %log_id, "purge held until a snapshot covers it");
                Ok(())
            }
        }
    }
}

/// A snapshot file of `group` covering up to `last` is durable: does the
/// purge held for it, if any.
pub fn snapshot_persisted(
    log: &Log,
    group: u32,
    index: &Mutex<GroupLog>,
    last: LogId,
) -> Result<(), LogError> {
    let mut index = index.lock().expect("raft index lock");
    match index.covered_by_snapshot(last) {
        Some(upto) => write_purge(log, group, &mut index, upto),
        None => Ok(()),
    }
}

/// Records a purge and drops the entries. The record is appended under
/// the index lock, so purge records lie in the log in the order they were
/// made. It needs no fsync: losing it only keeps entries a snapshot
/// already covers.
fn write_purge(log: &Log, group: u32, index: &mut GroupLog, upto: LogId) -> Result<(), LogError> {
    let mut record = Vec::new();
    encode_record(group, kind::PURGE, &upto, &mut record);
    log.append(&record)?;
    index.purge(upto);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};
    use runnel_log::{LogOptions, SyncMode};

    const GROUP: u32 = 7;

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn open(dir: &std::path::Path) -> (Arc<Log>, GroupLog) {
        let options = LogOptions {
            segment_bytes: 1 << 20,
            sync: SyncMode::Never,
            ..LogOptions::default()
        };
        let mut replayed = GroupLog::default();
        let log = Log::open(dir, options, Box::new(|_| {}), |record| {
            replayed
                .replay(record.payload_pos, record.payload)
                .expect("a record this test wrote");
            Ok(())
        })
        .expect("open the log");
        (Arc::new(log), replayed)
    }

    fn store_with_entries(log: &Arc<Log>, upto: u64) -> JournalStore {
        let index = Arc::new(Mutex::new(GroupLog::default()));
        let mut record = Vec::new();
        for i in 1..=upto {
            let entry = RaftEntry {
                log_id: log_id(i),
                payload: EntryPayload::Blank,
            };
            encode_record(GROUP, kind::ENTRY, &entry, &mut record);
            let at = log.append(&record).expect("append");
            index.lock().unwrap().push(EntryLoc {
                log_id: entry.log_id,
                payload_pos: at.payload_pos,
                payload_len: record.len() as u32,
            });
        }
        JournalStore::new(GROUP, Arc::clone(log), Durability::new(), index)
    }

    /// openraft's follower asks to purge up to an incoming snapshot before
    /// installing it: the entries stay until the snapshot file is written,
    /// and no purge record reaches the log before it.
    #[tokio::test]
    async fn a_purge_waits_for_the_snapshot_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = open(dir.path());
        let mut store = store_with_entries(&log, 10);

        store.purge(log_id(8)).await.unwrap();
        {
            let index = store.index.lock().unwrap();
            assert_eq!(index.last_purged(), None, "purged with no snapshot");
            assert!(index.get(5).is_some(), "an entry left before its snapshot");
        }
        log.sync_written().unwrap();
        let (_, replayed) = open(dir.path());
        assert_eq!(
            replayed.last_purged(),
            None,
            "a purge record before the snapshot"
        );

        // A snapshot up to 6 covers part of it: nothing is purged yet.
        snapshot_persisted(&log, GROUP, &store.index, log_id(6)).unwrap();
        assert_eq!(store.index.lock().unwrap().last_purged(), None);

        snapshot_persisted(&log, GROUP, &store.index, log_id(8)).unwrap();
        {
            let index = store.index.lock().unwrap();
            assert_eq!(index.last_purged(), Some(log_id(8)));
            assert!(index.get(8).is_none() && index.get(9).is_some());
        }
        // Covered purges are done at once; an older one changes nothing.
        store.purge(log_id(5)).await.unwrap();
        assert_eq!(store.index.lock().unwrap().last_purged(), Some(log_id(8)));

        log.sync_written().unwrap();
        drop(store);
        drop(log);
        let (_, replayed) = open(dir.path());
        assert_eq!(replayed.last_purged(), Some(log_id(8)));
        assert_eq!(replayed.get(9).map(|l| l.log_id), Some(log_id(9)));
    }

    #[test]
    fn a_snapshot_found_at_start_covers_purges() {
        let mut index = GroupLog::default();
        index.start_after_snapshot(log_id(4), None);
        assert_eq!(index.request_purge(log_id(4)), Some(log_id(4)));
        assert_eq!(index.request_purge(log_id(5)), None);
        assert_eq!(index.covered_by_snapshot(log_id(5)), Some(log_id(5)));
        assert_eq!(index.covered_by_snapshot(log_id(6)), None);
    }
}
