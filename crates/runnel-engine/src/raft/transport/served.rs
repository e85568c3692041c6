//! What a node answers its peers with ([`Served`]), and who it is to them
//! ([`PeerIdentity`]): the same answers whether a peer's request comes
//! over TCP ([`super::listener`]) or through a simulated network.

use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::BasicNode;
use runnel_core::listing::Listed;

use super::{leader_listing, leader_read_index, LeaderView, ListRequest, RequestError};
use crate::error::HelloError;
use crate::raft::starter::RaftSlot;
use crate::raft::transfer;
use crate::raft::vote_guard::{VoteGuard, REFUSAL};
use crate::raft::{NodeId, Raft};
use crate::view::GroupView;

/// Who this node is to its peers: its node id and the cluster it belongs
/// to, which every connection's hello names and checks (see
/// [`super::hello`]). The cluster's `Identity` (`cluster::identity`)
/// implements it; the transport needs nothing else of the cluster.
pub trait PeerIdentity: Send + Sync + 'static {
    /// This node's id.
    fn node_id(&self) -> NodeId;

    /// The cluster id, once this node knows it.
    fn cluster_id(&self) -> Option<&str>;

    /// Whether a peer that says it belongs to cluster `theirs` (`None`:
    /// it knows no id yet) may talk to this node: nodes that know
    /// different ids refuse each other, one that knows none is let in.
    fn admits(&self, theirs: Option<&str>) -> Result<(), HelloError> {
        match (self.cluster_id(), theirs) {
            (Some(mine), Some(theirs)) if mine != theirs => Err(HelloError::OtherCluster {
                mine: mine.to_string(),
                theirs: theirs.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// A peer (at `by`) refused this node as removed from the cluster for
    /// good.
    fn mark_removed(&self, by: &str);

    /// Node `node` said, in its hello, that its build supports cluster
    /// versions up to `version`.
    fn note_peer_version(&self, _node: NodeId, _version: u32) {}
}

/// Why a node refuses a peer's request. Its text is what the peer gets
/// (`PeerError::Remote` there): the wire carries text.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("this node has no group {0}")]
    NoGroup(u32),
    #[error("no such group")]
    NoView,
    /// This node lost its copy of the group and has not caught up (see
    /// [`VoteGuard`]).
    #[error("{}", REFUSAL)]
    VoteHeld,
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Leadership was not confirmed with a quorum (a read index, a
    /// listing).
    #[error(transparent)]
    NotConfirmed(Box<RaftError<NodeId, CheckIsLeaderError<NodeId, BasicNode>>>),
    #[error("a hello only opens a connection")]
    HelloAfterOpen,
    #[error("encoding the raft response: {0}")]
    Encode(#[from] bincode::Error),
}

/// What a node answers peers with: its groups, and whether it may vote in
/// each (see [`VoteGuard`]).
pub struct Served {
    rafts: Vec<RaftSlot>,
    /// Each group's applied state, for listings asked of its leader.
    views: Vec<GroupView>,
    votes: VoteGuard,
    /// The cluster this node belongs to, checked in every hello.
    pub(super) identity: Arc<dyn PeerIdentity>,
    /// Whether a node was removed from the cluster for good (refused in
    /// its hello).
    pub(super) retired: Box<dyn Fn(NodeId) -> bool + Send + Sync>,
}

impl Served {
    /// Answers for the groups of `rafts` (their applied states in `views`,
    /// by group index), voting as `votes` allows.
    pub(crate) fn new(
        rafts: Vec<RaftSlot>,
        views: Vec<GroupView>,
        votes: VoteGuard,
        identity: Arc<dyn PeerIdentity>,
        retired: Box<dyn Fn(NodeId) -> bool + Send + Sync>,
    ) -> Served {
        assert_eq!(rafts.len(), views.len(), "one view per group");
        Served {
            rafts,
            views,
            votes,
            identity,
            retired,
        }
    }

    /// This node's vote guard.
    pub(crate) fn votes(&self) -> &VoteGuard {
        &self.votes
    }

    /// The Raft of `group` now, if this node has the group.
    pub fn raft(&self, group: u32) -> Option<Raft> {
        self.rafts.get(group as usize).map(RaftSlot::get)
    }

    /// The Raft of `group`, or the refusal a peer gets for a group this
    /// node does not have.
    pub(super) fn group_raft(&self, group: u32) -> Result<Raft, ServeError> {
        self.raft(group).ok_or(ServeError::NoGroup(group))
    }

    /// Whether this node refuses to vote in `group` now (it lost its copy
    /// and has not caught up: see [`VoteGuard`]). A group it does not
    /// have is never refused here (the request fails for that instead).
    pub fn refuses_vote(&self, group: u32) -> bool {
        self.raft(group)
            .is_some_and(|raft| self.votes.refuses(group, &raft))
    }

    /// The read index of `group`, which this node leads (see
    /// [`leader_read_index`]).
    pub async fn read_index(&self, group: u32) -> Result<Option<u64>, ServeError> {
        leader_read_index(&self.group_raft(group)?).await
    }

    /// A page of `group`'s streams, which this node leads (see
    /// [`leader_listing`]).
    pub async fn list(&self, group: u32, request: &ListRequest) -> Result<Vec<Listed>, ServeError> {
        let raft = self.group_raft(group)?;
        let view = self.views.get(group as usize).ok_or(ServeError::NoView)?;
        leader_listing(&raft, view, request).await
    }

    /// Who leads `group`, as this node knows it.
    pub fn leader_view(&self, group: u32) -> Result<LeaderView, ServeError> {
        Ok(LeaderView::of(&self.group_raft(group)?))
    }

    /// Plays `role` in another node's leadership transfer of `group`
    /// (see [`transfer::on_handoff`]), unless this node holds its vote.
    pub fn handoff(&self, group: u32, role: u8) -> Result<(), ServeError> {
        let raft = self.group_raft(group)?;
        if self.votes.refuses(group, &raft) {
            return Err(ServeError::VoteHeld);
        }
        transfer::on_handoff(&raft, role);
        Ok(())
    }

    /// How this node's copy of `group` stands.
    pub async fn probe(&self, group: u32) -> Result<PeerGroup, ServeError> {
        Ok(PeerGroup::of(&self.group_raft(group)?).await)
    }
}

/// A peer's copy of a group, as a starting node asks about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerGroup {
    pub initialized: bool,
    /// It knows a leader: the group is running, not being formed.
    pub led: bool,
    /// The index of the last entry in its log (0 for none, or for only
    /// the membership the cluster was formed with).
    pub last_log: u64,
    /// How many peers answered (1 from the answering peer itself).
    pub answered: u32,
}

impl PeerGroup {
    pub async fn of(raft: &Raft) -> PeerGroup {
        let (led, last_log) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            (
                metrics.current_leader.is_some(),
                metrics.last_log_index.unwrap_or(0),
            )
        };
        PeerGroup {
            initialized: raft.is_initialized().await.unwrap_or(false),
            led,
            last_log,
            answered: 1,
        }
    }

    /// What any of the answers says (and the longest log).
    pub fn any(self, other: PeerGroup) -> PeerGroup {
        PeerGroup {
            initialized: self.initialized || other.initialized,
            led: self.led || other.led,
            last_log: self.last_log.max(other.last_log),
            answered: self.answered + other.answered,
        }
    }
}
