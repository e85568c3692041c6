//! Who leads a group, asked of peers by a node that holds no copy of it
//! (see [`crate::cluster::hosting`]).

use super::super::Raft;
use crate::raft::NodeId;

/// Who leads a group, as a peer that holds a copy of it knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderView {
    /// The leader and its Raft address; `None` when the answering node is
    /// no member of the group, or knows no leader.
    pub leader: Option<(NodeId, String)>,
    /// From the leader itself: the group's members (voters and learners)
    /// and whether that membership is committed.
    pub members: Option<(Vec<NodeId>, bool)>,
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
            let committed = *metrics.membership_config.log_id() <= metrics.last_applied;
            (membership.nodes().map(|(id, _)| *id).collect(), committed)
        });
        LeaderView {
            leader: Some((leader, addr)),
            members,
        }
    }
}
