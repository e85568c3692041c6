//! A group's Raft state machine: committed entries applied to the group's
//! [`StreamsState`](runnel_core::StreamsState), exactly as the local
//! engine applies them, with each stream's bytes left where the entry's
//! record lies in this node's shared log.
//!
//! Snapshots ([`super::snapshot`]) persist the state so the log before it
//! can go; at start the state is the last snapshot's, and openraft
//! re-applies the committed entries after it.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta,
    StoredMembership,
};
use runnel_core::Entry;

use super::journal::{self, Durability, GroupLog};
use super::snapshot::{self, FileHeader, SnapshotError, SnapshotFile};
use super::{
    kind, storage_error, ApplyOutcome, LogId, NodeId, RaftEntry, StorageError, TypeConfig,
    RECORD_PREFIX,
};
use crate::clock::now_ms;
use crate::copy_forward::Relocation;
use crate::view::GroupView;

type Membership = StoredMembership<NodeId, BasicNode>;

/// The last applied entry and membership, changed only under the state's
/// write lock so that a reader of the state sees the matching pair.
#[derive(Debug, Clone, Default)]
pub struct AppliedPoint {
    pub last: Option<LogId>,
    pub membership: Membership,
}

/// A group's latest snapshot file and the log ranges its state points
/// into (which must outlive any log garbage collection).
#[derive(Debug, Clone)]
pub struct Persisted {
    pub file: SnapshotFile,
    pub live: Vec<(u64, u64)>,
}

/// What the state machine and its snapshot builder share.
#[derive(Clone)]
pub struct GroupShared {
    pub group: u32,
    pub data_dir: PathBuf,
    pub view: GroupView,
    pub index: Arc<Mutex<GroupLog>>,
    pub durability: Arc<Durability>,
    pub applied: Arc<Mutex<AppliedPoint>>,
    pub persisted: Arc<Mutex<Option<Persisted>>>,
    /// Held by whatever rewrites the snapshot file together with the
    /// state's byte positions (snapshot builds and installs, copy-forward),
    /// so that the file never saves positions another of them moved.
    pub file_gate: Arc<tokio::sync::Mutex<()>>,
    /// Simulations: file IO runs inline rather than on the blocking pool
    /// (whose threads would make the schedule nondeterministic).
    pub inline_io: bool,
    /// The followers this node, leading, holds replication back from
    /// during a leadership transfer (see [`super::transfer`]).
    pub muted: Arc<super::transfer::mute::MutedPeers>,
}

pub struct GroupStateMachine {
    shared: GroupShared,
}

impl GroupStateMachine {
    pub(crate) fn new(shared: GroupShared) -> GroupStateMachine {
        GroupStateMachine { shared }
    }
}

fn sm_error(reason: impl std::fmt::Display) -> StorageError {
    storage_error(ErrorSubject::StateMachine, ErrorVerb::Write, reason)
}

fn snapshot_error(reason: impl std::fmt::Display) -> StorageError {
    storage_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, reason)
}

impl GroupShared {
    /// Moves the snapshot file's replay point up to the group's first
    /// entry after the snapshot (or the log's end), so an idle group does
    /// not hold back the collection of the log before it. Records of the
    /// group before the new point are covered by the file (its vote is
    /// refreshed with it).
    pub async fn advance_replay_point(&self) -> Result<(), StorageError> {
        // A snapshot built meanwhile must not be overwritten by this older
        // file (whose state points at bytes the new one may have let go).
        let _gate = self.file_gate.lock().await;
        let Some(persisted) = self.persisted.lock().expect("snapshot lock").clone() else {
            return Ok(());
        };
        let (vote, replay_from) = {
            let index = self.index.lock().expect("raft index lock");
            let snapshot_index = persisted.file.last_log_id().map(|l| l.index);
            let log_end = self.view.log.durable_position();
            (index.vote(), index.replay_point(snapshot_index, log_end))
        };
        if replay_from <= persisted.file.header.replay_from {
            return Ok(());
        }
        let mut file = persisted.file;
        file.header.vote = vote;
        file.header.replay_from = replay_from;
        self.persist(file, persisted.live).await
    }

    /// Copy-forward (see [`crate::copy_forward`]): copies the given live
    /// ranges of the group's snapshot file to the head of the log, then
    /// points both the applied state and the file at the copies. Ranges
    /// the file no longer holds (a snapshot replaced it since they were
    /// planned) are left alone.
    pub async fn move_forward(&self, ranges: Vec<(u64, u64)>) -> Result<u64, SnapshotError> {
        let _gate = self.file_gate.lock().await;
        let Some(persisted) = self.persisted.lock().expect("snapshot lock").clone() else {
            return Ok(0);
        };
        let held: std::collections::HashSet<(u64, u64)> = persisted.live.iter().copied().collect();
        let ranges: Vec<(u64, u64)> = ranges.into_iter().filter(|r| held.contains(r)).collect();
        let mut prefix = self.group.to_le_bytes().to_vec();
        prefix.push(kind::BLOB);
        let log = Arc::clone(&self.view.log);
        let crate::copy_forward::Copied { moved, end } =
            crate::raft::blocking(self.inline_io, move || {
                crate::copy_forward::copy_ranges(&log, &prefix, ranges)
            })
            .await??;
        if moved.is_empty() {
            return Ok(0);
        }
        let bytes = moved.iter().map(|(_, len, _)| len).sum();
        self.durability
            .wait(end)
            .await
            .map_err(SnapshotError::NotDurable)?;
        let relocation = Relocation::new(moved);
        let to = |loc| relocation.moved_to(loc).unwrap_or(loc);
        self.view.apply(|state| state.relocate(to));
        let mut state = snapshot::decode_state(&persisted.file.state)?;
        state.relocate(to);
        let file = SnapshotFile {
            header: persisted.file.header,
            state: state.encode_checkpoint(),
        };
        self.persist(file, state.live_ranges())
            .await
            .map_err(|e| SnapshotError::Store(Box::new(e)))?;
        Ok(bytes)
    }

    /// Writes `file` as the group's snapshot (off the async workers: it
    /// fsyncs) and remembers it with the ranges it points into.
    async fn persist(&self, file: SnapshotFile, live: Vec<(u64, u64)>) -> Result<(), StorageError> {
        let (dir, group, to_store) = (self.data_dir.clone(), self.group, file.clone());
        let log = Arc::clone(&self.view.log);
        crate::raft::blocking(self.inline_io, move || {
            // The file points into the log: the log's bytes must be
            // durable before it is (with `--sync never` nothing else
            // syncs them).
            log.sync_written().map_err(std::io::Error::other)?;
            snapshot::store(&dir, group, &to_store)
        })
        .await
        .map_err(snapshot_error)?
        .map_err(snapshot_error)?;
        let last = file.last_log_id();
        *self.persisted.lock().expect("snapshot lock") = Some(Persisted { file, live });
        if let Some(last) = last {
            journal::snapshot_persisted(&self.view.log, self.group, &self.index, last)
                .map_err(snapshot_error)?;
        }
        Ok(())
    }
}

/// A proposal decoded for applying, with where its data lies in the log.
struct Decoded {
    entry: Entry,
    data_len: u64,
    data_loc: u64,
}

impl RaftStateMachine<TypeConfig> for GroupStateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        let applied = self.shared.applied.lock().expect("applied lock").clone();
        Ok((applied.last, applied.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyOutcome>, StorageError>
    where
        I: IntoIterator<Item = RaftEntry> + Send,
        I::IntoIter: Send,
    {
        // One list of proposals per Raft entry (blank and membership
        // entries carry none).
        let mut decoded: Vec<(u64, Vec<Decoded>)> = Vec::new();
        let mut durable_end = 0;
        let mut point = self.shared.applied.lock().expect("applied lock").clone();
        for raft_entry in entries {
            let log_id = raft_entry.log_id;
            point.last = Some(log_id);
            let mut batch = Vec::new();
            match raft_entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Membership(m) => {
                    point.membership = StoredMembership::new(Some(log_id), m);
                }
                EntryPayload::Normal(request) => {
                    let loc = self
                        .shared
                        .index
                        .lock()
                        .expect("raft index lock")
                        .get(log_id.index)
                        .filter(|loc| loc.log_id == log_id)
                        .ok_or_else(|| {
                            storage_error(
                                ErrorSubject::Log(log_id),
                                ErrorVerb::Read,
                                "a committed entry is missing from this node's log",
                            )
                        })?;
                    durable_end = durable_end.max(loc.end());
                    // The batch is the record's last field.
                    let batch_pos = loc.end() - request.0.len() as u64;
                    for item in request.items() {
                        // The leader encoded it; a failure here is a bug,
                        // and every node reaches the same verdict.
                        let decoded_item = item.and_then(|(offset, bytes)| {
                            let (entry, data_len) = Entry::decode_header(bytes)?;
                            let item_end = batch_pos + (offset + bytes.len()) as u64;
                            Ok(Decoded {
                                entry,
                                data_len,
                                data_loc: item_end - data_len,
                            })
                        });
                        match decoded_item {
                            Ok(d) => batch.push(d),
                            Err(err) => {
                                tracing::error!(?log_id, error = %err, "undecodable proposal skipped")
                            }
                        }
                    }
                }
            }
            decoded.push((log_id.leader_id.term, batch));
        }
        // A quorum may commit an entry before this node's own copy is
        // durable; reads serve bytes from the log, so wait for it.
        self.shared
            .durability
            .wait(durable_end)
            .await
            .map_err(sm_error)?;
        Ok(self.shared.view.apply(|state| {
            *self.shared.applied.lock().expect("applied lock") = point;
            decoded
                .into_iter()
                .map(|(term, batch)| {
                    // Tiering commands are fenced to the entry's term.
                    ApplyOutcome(
                        batch
                            .into_iter()
                            .map(|d| state.apply_in_term(&d.entry, d.data_len, d.data_loc, term))
                            .collect(),
                    )
                })
                .collect()
        }))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// Copies the snapshot's bytes into this node's log, relocates its
    /// state onto them, and replaces the group's state with it.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let shared = &self.shared;
        let _gate = shared.file_gate.lock().await;
        let bytes = snapshot.into_inner();
        let transfer = snapshot::decode_transfer(&bytes).map_err(snapshot_error)?;
        let mut state = snapshot::decode_state(transfer.state).map_err(snapshot_error)?;
        let mut moved = Vec::with_capacity(transfer.ranges.len());
        let mut record = Vec::new();
        let mut end = 0;
        for (from, data) in &transfer.ranges {
            record.clear();
            record.extend_from_slice(&shared.group.to_le_bytes());
            record.push(kind::BLOB);
            record.extend_from_slice(data);
            let at = shared.view.log.append(&record).map_err(snapshot_error)?;
            moved.push((
                *from,
                data.len() as u64,
                at.payload_pos + RECORD_PREFIX as u64,
            ));
            end = at.end;
        }
        shared.durability.wait(end).await.map_err(snapshot_error)?;
        let relocation = Relocation::new(moved);
        state.relocate(|loc| relocation.map(loc));
        let local_state = state.encode_checkpoint();
        let live = state.live_ranges();
        shared.view.apply(|current| {
            let mut changed = current.stream_ids();
            changed.extend(state.stream_ids());
            *current = state;
            current.mark_changed(changed);
            *shared.applied.lock().expect("applied lock") = AppliedPoint {
                last: meta.last_log_id,
                membership: meta.last_membership.clone(),
            };
        });
        let (vote, replay_from) = {
            let index = shared.index.lock().expect("raft index lock");
            let index_of = meta.last_log_id.map(|l| l.index);
            (
                index.vote(),
                index.replay_point(index_of, shared.view.log.durable_position()),
            )
        };
        let file = SnapshotFile {
            header: FileHeader {
                meta: meta.clone(),
                vote,
                replay_from,
            },
            state: local_state,
        };
        tracing::info!(group = shared.group, last = ?meta.last_log_id, bytes = bytes.len(), "installed a snapshot");
        shared.persist(file, live).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(persisted) = self.shared.persisted.lock().expect("snapshot lock").clone() else {
            return Ok(None);
        };
        let log = &self.shared.view.log;
        let data = snapshot::encode_transfer(&persisted.file.state, &persisted.live, |loc, buf| {
            log.read_unmapped_at(loc, buf)
        })
        .map_err(snapshot_error)?;
        Ok(Some(Snapshot {
            meta: persisted.file.header.meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

/// Builds a snapshot of the applied state and persists it as the group's
/// snapshot file (openraft then purges the log before it). The bytes for
/// a follower are assembled when one needs them
/// ([`RaftStateMachine::get_current_snapshot`]).
pub struct SnapshotBuilder {
    shared: GroupShared,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let shared = &self.shared;
        let _gate = shared.file_gate.lock().await;
        let (capture, point) = shared.view.with_state(|state| {
            let point = shared.applied.lock().expect("applied lock").clone();
            (state.capture_checkpoint(), point)
        });
        // Encoded outside the state lock: applies go on meanwhile.
        let (state, live) = (capture.encode(), capture.live_ranges());
        let (vote, replay_from) = {
            let index = shared.index.lock().expect("raft index lock");
            let log_end = shared.view.log.durable_position();
            (
                index.vote(),
                index.replay_point(point.last.map(|l| l.index), log_end),
            )
        };
        let meta = SnapshotMeta {
            last_log_id: point.last,
            last_membership: point.membership,
            snapshot_id: format!("{}-{}", point.last.map_or(0, |l| l.index), now_ms()),
        };
        let file = SnapshotFile {
            header: FileHeader {
                meta: meta.clone(),
                vote,
                replay_from,
            },
            state,
        };
        shared.persist(file, live).await?;
        tracing::debug!(group = shared.group, last = ?meta.last_log_id, "snapshot written");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}
