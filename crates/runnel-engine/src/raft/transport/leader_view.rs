//! Who leads a group, asked of peers by a node that holds no copy of it
//! (see [`crate::cluster::hosting`]).

use super::super::Raft;
use crate::raft::{LogId, NodeId};

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
    pub(crate) fn of(raft: &Raft) -> LeaderView {
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
