//! A Raft group as a [`GroupEngine`]: proposals go through openraft
//! (replicated to a quorum, then applied by
//! [`GroupStateMachine`](super::state_machine::GroupStateMachine)); reads
//! serve this node's applied state.
//!
//! Proposals are packed into batches, one Raft entry each (see the
//! [module docs](super)), by one proposer task per group that submits them
//! in arrival order.
//!
//! Only the leader accepts proposals. The HTTP layer forwards requests
//! for a group to its leader (see [`crate::Route`]), so a proposal that
//! reaches a follower raced a leadership change and is refused as
//! [`EngineError::NotLeader`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::error::ClientWriteError;
use runnel_core::{Applied, Command, Entry};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::read_barrier::ReadBarrier;
use super::starter::RaftSlot;
use super::transfer::mute::MutedPeers;
use super::{AppRequest, NodeId, Raft};
use crate::api::{BoxFuture, GroupEngine};
use crate::error::{EngineError, ReplicationError};
use crate::metrics::GroupMetrics;
use crate::upkeep::{propose_with_expiry, MaintainedGroup};
use crate::view::{delegate_reads_to_view, GroupView};

pub struct RaftGroup {
    index: u32,
    node_id: NodeId,
    raft: RaftSlot,
    view: GroupView,
    proposals: mpsc::Sender<Proposal>,
    /// One permit per batch in flight (see [`propose_batches`]).
    in_flight: Arc<Semaphore>,
    read_barrier: Arc<ReadBarrier>,
    counts: Arc<ProposalCounts>,
    muted: Arc<MutedPeers>,
}

struct Proposal {
    entry: Entry,
    reply: oneshot::Sender<Result<Applied, EngineError>>,
}

/// Batches submitted to Raft and not yet answered, per group. While they
/// are in flight new proposals queue up and form the next batch.
const BATCHES_IN_FLIGHT: usize = 2;
/// A batch is closed once it holds this many bytes or proposals.
const MAX_BATCH_BYTES: usize = 1 << 20;
const MAX_BATCH_PROPOSALS: usize = 4096;

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
    /// Whether this node votes in the group: false while it rejoins
    /// without its state and has not caught up (see `raft::vote_guard`).
    pub votes: bool,
    /// The group's members as this node knows them.
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// A membership change is under way (a joint configuration).
    pub changing: bool,
    /// The node the cluster would have lead the group, once recorded
    /// (filled in by the cluster's status: `cluster::leaders`).
    pub preferred_leader: Option<NodeId>,
}

impl RaftGroup {
    pub(crate) fn new(
        index: u32,
        node_id: NodeId,
        raft: Raft,
        view: GroupView,
        muted: Arc<MutedPeers>,
        max_pending: usize,
    ) -> RaftGroup {
        let (proposals, queue) = mpsc::channel(max_pending.max(1));
        let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
        let counts = Arc::new(ProposalCounts::default());
        let raft = RaftSlot::new(raft);
        tokio::spawn(propose_batches(
            raft.clone(),
            queue,
            Arc::clone(&in_flight),
            Arc::clone(&counts),
        ));
        RaftGroup {
            counts,
            in_flight,
            index,
            node_id,
            read_barrier: ReadBarrier::new(raft.clone()),
            raft,
            view,
            proposals,
            muted,
        }
    }

    /// The group's Raft now (another one once a dropped copy is taken
    /// back).
    pub fn raft(&self) -> Raft {
        self.raft.get()
    }

    pub(crate) fn raft_slot(&self) -> &RaftSlot {
        &self.raft
    }

    /// The followers replication is held back from during a leadership
    /// transfer.
    pub(crate) fn muted(&self) -> &MutedPeers {
        &self.muted
    }

    /// The group's figures for `/metrics`, from Raft's own metrics (not
    /// [`RaftGroup::status`]: that also digests the whole state, too much
    /// for every scrape). `votes`: whether this node votes in it.
    pub fn metrics(&self, votes: bool) -> GroupMetrics {
        let m = self.raft.get().metrics().borrow().clone();
        let last = m.last_log_index.unwrap_or(0);
        GroupMetrics {
            group: self.index,
            leader: m.current_leader,
            is_leader: m.current_leader == Some(self.node_id),
            term: m.current_term,
            last_log_index: last,
            applied_index: m.last_applied.map_or(0, |l| l.index),
            max_follower_lag: m.replication.as_ref().and_then(|followers| {
                followers
                    .iter()
                    .filter(|(id, _)| **id != self.node_id)
                    .map(|(_, matched)| last.saturating_sub(matched.map_or(0, |m| m.index)))
                    .max()
            }),
            votes,
            pending_proposals: self.pending_proposals(),
            proposals_committed: self.counts.committed.load(Ordering::Relaxed),
            proposals_failed: self.counts.failed.load(Ordering::Relaxed),
        }
    }

    /// Proposals queued here, not yet submitted to Raft.
    pub fn pending_proposals(&self) -> u64 {
        (self.proposals.max_capacity() - self.proposals.capacity()) as u64
    }

    /// Stops submitting batches until the guard drops, once those in
    /// flight are answered (proposals queue meanwhile).
    pub async fn pause_proposals(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.in_flight
            .acquire_many(BATCHES_IN_FLIGHT as u32)
            .await
            .ok()
    }

    /// On the leader: waits until a read of this node's state is
    /// linearizable (see [`ReadBarrier`]).
    pub async fn read_barrier(&self) -> Result<(), EngineError> {
        self.read_barrier.wait().await
    }

    /// The group's index among the node's groups.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Whether this node leads the group now, as far as it knows.
    pub fn leads(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.get().metrics().borrow().current_leader
    }

    /// The group's members (voters and learners) and their Raft
    /// addresses, as its membership records them.
    pub fn members(&self) -> Vec<(NodeId, String)> {
        let metrics = self.raft.get().metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    }

    /// The HTTP address of `node` as the group's membership records it
    /// (a node that joined after this one started is in no `--peers`).
    pub fn member_http_addr(&self, node: NodeId) -> Option<String> {
        let metrics = self.raft.get().metrics();
        let metrics = metrics.borrow();
        let member = metrics.membership_config.membership().get_node(&node)?;
        super::transport::http_addr(&member.addr).ok()
    }

    /// Whether the group's membership is joint as this node knows it: a
    /// change of voters under way.
    pub fn changing_membership(&self) -> bool {
        let metrics = self.raft.get().metrics();
        let metrics = metrics.borrow();
        is_joint(metrics.membership_config.membership())
    }

    pub fn status(&self) -> GroupStatus {
        // openraft publishes the applied index just after the state machine
        // applied: while entries apply the digest may be a little ahead.
        let receiver = self.raft.get().metrics();
        let metrics = receiver.borrow().clone();
        // The core drops its metrics sender when it exits (shutdown or a
        // fatal error): the last metrics are then stale.
        let state = match receiver.has_changed() {
            Ok(_) => format!("{:?}", metrics.state),
            Err(_) => "Stopped".to_string(),
        };
        let digest = self.view.with_state(|state| state.digest());
        let last = metrics.last_log_index;
        GroupStatus {
            group: self.index,
            state,
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
            // The cluster node overrides this from its vote guard.
            votes: true,
            voters: metrics.membership_config.membership().voter_ids().collect(),
            learners: metrics
                .membership_config
                .membership()
                .learner_ids()
                .collect(),
            changing: is_joint(metrics.membership_config.membership()),
            preferred_leader: None,
        }
    }

    async fn submit(&self, entry: Entry) -> Result<Applied, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.proposals
            .try_send(Proposal { entry, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => EngineError::Overloaded,
                mpsc::error::TrySendError::Closed(_) => EngineError::ShuttingDown,
            })?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }
}

/// The group's proposer: packs queued proposals into batches and submits
/// them to Raft in arrival order, at most [`BATCHES_IN_FLIGHT`] at once.
/// What became of the proposals a group submitted, for `/metrics`.
#[derive(Debug, Default)]
pub struct ProposalCounts {
    /// Committed and applied (whether the command succeeded or was refused
    /// by the state machine).
    pub committed: AtomicU64,
    /// Not committed: leadership lost, shutdown, replication failed.
    pub failed: AtomicU64,
}

async fn propose_batches(
    raft: RaftSlot,
    mut queue: mpsc::Receiver<Proposal>,
    in_flight: Arc<Semaphore>,
    counts: Arc<ProposalCounts>,
) {
    while let Some(first) = queue.recv().await {
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        // Everything that queued while waiting joins this batch.
        let mut batch = AppRequest::default();
        let mut replies = Vec::new();
        let mut next = Some(first);
        while let Some(proposal) = next.take() {
            batch.push(&proposal.entry);
            replies.push(proposal.reply);
            if batch.0.len() < MAX_BATCH_BYTES && replies.len() < MAX_BATCH_PROPOSALS {
                next = queue.try_recv().ok();
            }
        }
        let submitted = raft.get().client_write_ff(batch).await;
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            let results = match submitted {
                Err(fatal) => Err(EngineError::Replication(ReplicationError::Fatal(Box::new(
                    fatal,
                )))),
                Ok(receiver) => match receiver.await {
                    Err(_) => Err(EngineError::ShuttingDown),
                    Ok(Err(ClientWriteError::ForwardToLeader(forward))) => {
                        Err(EngineError::NotLeader(forward.leader_id))
                    }
                    Ok(Err(other)) => Err(EngineError::Replication(ReplicationError::Write(
                        Box::new(other),
                    ))),
                    Ok(Ok(response)) => Ok(response.data.0),
                },
            };
            drop(permit);
            let outcome = match &results {
                Ok(_) => &counts.committed,
                Err(_) => &counts.failed,
            };
            outcome.fetch_add(replies.len() as u64, Ordering::Relaxed);
            match results {
                Ok(results) if results.len() == replies.len() => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result.map_err(EngineError::Core));
                    }
                }
                Ok(results) => {
                    tracing::error!(
                        proposals = replies.len(),
                        results = results.len(),
                        "a batch was applied with a different number of results"
                    );
                    for reply in replies {
                        let _ = reply.send(Err(EngineError::Replication(
                            ReplicationError::OutcomeUnknown,
                        )));
                    }
                }
                Err(err) => {
                    for reply in replies {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
        });
    }
}

impl MaintainedGroup for RaftGroup {
    fn index(&self) -> u32 {
        RaftGroup::index(self)
    }

    fn view(&self) -> &GroupView {
        &self.view
    }

    fn leads(&self) -> bool {
        RaftGroup::leads(self)
    }

    fn term(&self) -> u64 {
        self.raft.get().metrics().borrow().current_term
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

/// Whether `membership` is joint (old and new voters together).
pub(crate) fn is_joint(membership: &openraft::Membership<NodeId, openraft::BasicNode>) -> bool {
    membership.get_joint_config().len() > 1
}
