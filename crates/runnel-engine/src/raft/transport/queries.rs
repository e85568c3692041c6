//! What a node asks its peers while it serves requests, and the peers'
//! side of it: a group leader's read index, who leads a group this node
//! holds no copy of ([`LeaderView`], see [`crate::cluster::hosting`]),
//! and a page of such a group's streams, or the named ones
//! ([`ListRequest`], capped at [`MAX_LISTED`]).

use runnel_core::listing::Listed;
use runnel_wire::raft::frame::ListRequest;

use super::{ServeError, Transport};
use crate::api::BoxFuture;
use crate::clock::now_ms;
use crate::error::PeerError;
use crate::raft::{LogId, NodeId, Raft};
use crate::view::GroupView;

/// Most streams one listing request answers.
pub const MAX_LISTED: u32 = 10_000;

/// Who leads a group, as a peer that holds a copy of it knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderView {
    /// The leader and its Raft address; `None` when the answering node is
    /// no member of the group, or knows no leader.
    pub leader: Option<(NodeId, String)>,
    /// From the leader itself: the group's membership.
    pub members: Option<LeaderMembers>,
}

/// A group's membership as its leader holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderMembers {
    /// Voters and learners.
    pub nodes: Vec<NodeId>,
    /// Whether the membership is committed.
    pub committed: bool,
    /// The log entry that set it: a membership from an older entry than
    /// one a node holds (a deposed leader cut off since) says nothing
    /// about that node.
    pub at: Option<LogId>,
}

impl LeaderView {
    pub fn of(raft: &Raft) -> LeaderView {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        if membership.get_node(&metrics.id).is_none() {
            return LeaderView::default();
        }
        let Some(leader) = metrics.current_leader else {
            return LeaderView::default();
        };
        let Some(addr) = membership.get_node(&leader).map(|n| n.addr.clone()) else {
            return LeaderView::default();
        };
        let members = (leader == metrics.id).then(|| {
            let at = *metrics.membership_config.log_id();
            LeaderMembers {
                nodes: membership.nodes().map(|(id, _)| *id).collect(),
                committed: at <= metrics.last_applied,
                at,
            }
        });
        LeaderView {
            leader: Some((leader, addr)),
            members,
        }
    }
}

/// What a node asks its peers while it serves requests: a group leader's
/// read index (once this node has applied up to it, its state holds every
/// write acknowledged before the request: a follower read that is not
/// stale), and who leads a group it holds no copy of. Object-safe, unlike
/// [`Transport`].
pub(crate) trait PeerQueries: Send + Sync {
    fn read_index(
        &self,
        leader: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, PeerError>>;

    fn leader_view(&self, node: NodeId, group: u32)
        -> BoxFuture<'_, Result<LeaderView, PeerError>>;

    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> BoxFuture<'a, Result<Vec<Listed>, PeerError>>;

    /// Asks `node` to play `role` in a leadership transfer of `group`
    /// (see [`crate::raft::transfer`]).
    fn handoff(&self, node: NodeId, group: u32, role: u8) -> BoxFuture<'_, Result<(), PeerError>>;
}

impl<T: Transport> PeerQueries for T {
    fn read_index(
        &self,
        leader: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, PeerError>> {
        Transport::read_index(self, leader, group)
    }

    fn leader_view(
        &self,
        node: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<LeaderView, PeerError>> {
        Transport::leader_view(self, node, group)
    }

    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> BoxFuture<'a, Result<Vec<Listed>, PeerError>> {
        Transport::list(self, leader, group, request)
    }

    fn handoff(&self, node: NodeId, group: u32, role: u8) -> BoxFuture<'_, Result<(), PeerError>> {
        Transport::handoff(self, node, group, role)
    }
}

/// The leader's side of a listing: once leadership is confirmed and every
/// committed entry applied, the page from its state.
pub(crate) async fn leader_listing(
    raft: &Raft,
    view: &GroupView,
    request: &ListRequest,
) -> Result<Vec<Listed>, ServeError> {
    leader_read_index(raft).await?;
    let limit = request.limit.min(MAX_LISTED) as usize;
    let now = now_ms();
    Ok(view.with_state(|s| match &request.names {
        Some(names) => names
            .iter()
            .take(limit)
            .filter_map(|name| s.listed(name, now))
            .collect(),
        None => s.list(&request.prefix, request.after.as_deref(), limit, now),
    }))
}

/// The leader's side of a read index: confirms leadership with a quorum
/// and answers the index to apply up to.
pub(crate) async fn leader_read_index(raft: &Raft) -> Result<Option<u64>, ServeError> {
    raft.ensure_linearizable()
        .await
        .map(|log_id| log_id.map(|l| l.index))
        .map_err(|e| ServeError::NotConfirmed(Box::new(e)))
}
