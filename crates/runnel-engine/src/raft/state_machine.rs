//! A group's Raft state machine: committed entries applied to the group's
//! [`StreamsState`](runnel_core::StreamsState), exactly as the local
//! engine applies them, with each stream's bytes left where the entry's
//! record lies in this node's shared log.
//!
//! The state is rebuilt from the log at start (openraft re-applies the
//! committed entries), so nothing here is persisted separately.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta,
    StoredMembership,
};
use runnel_core::Entry;

use super::journal::{Durability, GroupLog};
use super::{storage_error, ApplyOutcome, LogId, NodeId, RaftEntry, StorageError, TypeConfig};
use crate::view::GroupView;

pub struct GroupStateMachine {
    view: GroupView,
    index: Arc<Mutex<GroupLog>>,
    durability: Arc<Durability>,
    last_applied: Option<LogId>,
    membership: StoredMembership<NodeId, BasicNode>,
}

impl GroupStateMachine {
    pub(crate) fn new(
        view: GroupView,
        index: Arc<Mutex<GroupLog>>,
        durability: Arc<Durability>,
    ) -> GroupStateMachine {
        GroupStateMachine {
            view,
            index,
            durability,
            last_applied: None,
            membership: StoredMembership::default(),
        }
    }
}

/// A proposal decoded for applying, with where its data lies in the log.
struct Decoded {
    entry: Entry,
    data_len: u64,
    data_loc: u64,
}

impl RaftStateMachine<TypeConfig> for GroupStateMachine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyOutcome>, StorageError>
    where
        I: IntoIterator<Item = RaftEntry> + Send,
        I::IntoIter: Send,
    {
        // One list of proposals per Raft entry (blank and membership
        // entries carry none).
        let mut decoded: Vec<Vec<Decoded>> = Vec::new();
        let mut durable_end = 0;
        for raft_entry in entries {
            let log_id = raft_entry.log_id;
            self.last_applied = Some(log_id);
            let mut batch = Vec::new();
            match raft_entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(log_id), m);
                }
                EntryPayload::Normal(request) => {
                    let loc = self
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
                            let (entry, data_len) =
                                Entry::decode_header(bytes).map_err(|e| e.to_string())?;
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
            decoded.push(batch);
        }
        // A quorum may commit an entry before this node's own copy is
        // durable; reads serve bytes from the log, so wait for it.
        self.durability
            .wait(durable_end)
            .await
            .map_err(|e| storage_error(ErrorSubject::StateMachine, ErrorVerb::Write, e))?;
        Ok(self.view.apply(|state| {
            decoded
                .into_iter()
                .map(|batch| {
                    ApplyOutcome(
                        batch
                            .into_iter()
                            .map(|d| state.apply(&d.entry, d.data_len, d.data_loc))
                            .collect(),
                    )
                })
                .collect()
        }))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        Err(storage_error(
            ErrorSubject::Snapshot(Some(meta.signature())),
            ErrorVerb::Write,
            "installing Raft snapshots is not supported yet (logs are never purged)",
        ))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(None)
    }
}

/// Groups keep their whole Raft log (the snapshot policy is `Never` and
/// nothing is purged), so a lagging follower always catches up from the
/// log and no snapshot is ever built.
pub struct NoSnapshots;

impl RaftSnapshotBuilder<TypeConfig> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        Err(storage_error(
            ErrorSubject::Snapshot(None),
            ErrorVerb::Write,
            "building Raft snapshots is not supported yet (logs are never purged)",
        ))
    }
}
