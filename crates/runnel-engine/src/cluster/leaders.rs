//! Which node should lead each group: cluster state in the control group
//! ([`runnel_core::cluster_meta`]), so that leaderships stay balanced as
//! replicas move. The placement planner chooses them (each group's first
//! replica in [`crate::placement::target`], at most `ceil(groups /
//! nodes)` per node, keeping current leaders where it can): a forming
//! cluster records its placement's choice ([`record_initial`]), and
//! `runnel ctl node` records the new placement's after every change
//! (`?prefer=G:N,...` to group 0, [`ClusterNode::prefer_leaders`]). Each
//! group's leader hands its leadership to the preferred node
//! ([`super::rebalance`]); a group with no preference, or whose
//! preferred node is not one of its voters, prefers its voter
//! `g mod voters` in node-id order.

use std::collections::BTreeSet;
use std::sync::Arc;

use runnel_core::{Applied, Command, StreamsState};

use super::replication::propose_initial;
use super::ClusterNode;
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::error::{EngineError, MembershipError};
use crate::placement::Placement;
use crate::raft::group::RaftGroup;
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;

/// The node group `group` (with these `voters`, in node-id order) should
/// be led by, as `control` (the control group's copy on this node) has
/// it.
pub(crate) fn preferred_leader(
    control: &RaftGroup,
    group: u32,
    voters: &[NodeId],
) -> Option<NodeId> {
    let recorded = control.view().with_state(|s| s.preferred_leader(group));
    recorded
        .filter(|node| voters.contains(node))
        .or_else(|| voters.get(group as usize % voters.len().max(1)).copied())
}

/// Until the control group holds preferred leaders: its leader (on
/// whichever node) proposes those of the placement the cluster formed
/// on, each group's first replica (every founder computes the same).
pub(crate) async fn record_initial(control: Arc<RaftGroup>, formed_on: Placement) {
    let leaders: Vec<(u32, u64)> = formed_on
        .groups
        .iter()
        .enumerate()
        .filter_map(|(g, replicas)| Some((g as u32, *replicas.first()?)))
        .collect();
    let command = Command::PreferLeaders {
        leaders,
        initial: true,
    };
    let recorded = |s: &StreamsState| s.has_preferred_leaders();
    propose_initial(&control, "preferred leaders", recorded, command).await;
}

impl ClusterNode {
    /// Records which node each listed group should be led by (at the
    /// control group's leader); answers whether that changed any. The
    /// nodes must be members of the cluster (voters of group 0).
    pub(super) async fn prefer_leaders(
        &self,
        leaders: Vec<(u32, NodeId)>,
    ) -> Result<bool, EngineError> {
        let control = &self.groups[CONTROL_GROUP];
        let members: BTreeSet<NodeId> = {
            let metrics = control.raft().metrics().borrow().clone();
            metrics.membership_config.membership().voter_ids().collect()
        };
        let groups = self.groups.len() as u32;
        for (group, node) in &leaders {
            if *group >= groups {
                return Err(MembershipError::NoSuchGroup {
                    group: *group,
                    groups,
                }
                .into());
            }
            if !members.contains(node) {
                return Err(MembershipError::NotAMember {
                    node: *node,
                    group: *group,
                }
                .into());
            }
        }
        let command = Command::PreferLeaders {
            leaders,
            initial: false,
        };
        match control.propose(command).await? {
            Applied::PreferredLeaders { changed } => Ok(changed),
            other => unreachable!("preferred leaders applied as {other:?}"),
        }
    }
}
