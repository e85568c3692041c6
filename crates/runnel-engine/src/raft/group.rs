//! A Raft group as a [`GroupEngine`]: proposals go through openraft
//! (replicated to a quorum, then applied by
//! [`GroupStateMachine`](super::state_machine::GroupStateMachine)); reads
//! serve this node's applied state.
//!
//! Only the leader accepts proposals. The HTTP layer forwards requests
//! for a group to its leader (see [`crate::Route`]), so a proposal that
//! reaches a follower raced a leadership change and is refused as
//! [`EngineError::NotLeader`].

use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use runnel_core::{Applied, Command, Entry};
use serde::Serialize;
use tokio::sync::Semaphore;

use super::{AppRequest, NodeId, Raft};
use crate::view::{delegate_reads_to_view, GroupView};
use crate::{propose_with_expiry, BoxFuture, EngineError, GroupEngine, MaintainedGroup};

pub struct RaftGroup {
    index: u32,
    node_id: NodeId,
    raft: Raft,
    view: GroupView,
    /// One permit per proposal waiting for its commit.
    proposals: Arc<Semaphore>,
}

/// One group as `runnel ctl status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    pub group: u32,
    pub state: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// Fingerprint of the applied streams (equal on replicas that applied
    /// the same entries).
    pub applied_digest: String,
    /// On the leader: how many entries each follower is behind (`None`
    /// until it acknowledged one).
    pub follower_lag: Vec<(NodeId, Option<u64>)>,
}

impl RaftGroup {
    pub(crate) fn new(
        index: u32,
        node_id: NodeId,
        raft: Raft,
        view: GroupView,
        max_pending: usize,
    ) -> RaftGroup {
        RaftGroup {
            index,
            node_id,
            raft,
            view,
            proposals: Arc::new(Semaphore::new(max_pending.max(1))),
        }
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn status(&self) -> GroupStatus {
        // openraft publishes the applied index just after the state machine
        // applied: while entries apply the digest may be a little ahead.
        let metrics = self.raft.metrics().borrow().clone();
        let digest = self.view.with_state(|state| state.digest());
        let last = metrics.last_log_index;
        GroupStatus {
            group: self.index,
            state: format!("{:?}", metrics.state),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_log_index: last,
            last_applied_index: metrics.last_applied.map(|l| l.index),
            applied_digest: format!("{digest:016x}"),
            follower_lag: metrics
                .replication
                .iter()
                .flatten()
                .filter(|(id, _)| **id != self.node_id)
                .map(|(id, matched)| {
                    let lag = matched.map(|m| last.unwrap_or(0).saturating_sub(m.index));
                    (*id, lag)
                })
                .collect(),
        }
    }

    async fn submit(&self, entry: Entry) -> Result<Applied, EngineError> {
        let _permit = self
            .proposals
            .try_acquire()
            .map_err(|_| EngineError::Overloaded)?;
        let response = self
            .raft
            .client_write(AppRequest(entry.encode()))
            .await
            .map_err(|err| match err {
                RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
                    EngineError::NotLeader(forward.leader_id)
                }
                RaftError::APIError(other) => EngineError::Replication(other.to_string()),
                RaftError::Fatal(fatal) => EngineError::Replication(fatal.to_string()),
            })?;
        match response.data.0 {
            Some(result) => Ok(result?),
            None => Err(EngineError::Replication(
                "the entry was committed but not applied".into(),
            )),
        }
    }
}

impl MaintainedGroup for RaftGroup {
    fn index(&self) -> u32 {
        self.index
    }

    fn view(&self) -> &GroupView {
        &self.view
    }

    fn leads(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    fn submit_entry(&self, entry: Entry) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(self.submit(entry))
    }
}

impl GroupEngine for RaftGroup {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(propose_with_expiry(self, command))
    }

    delegate_reads_to_view!();
}
