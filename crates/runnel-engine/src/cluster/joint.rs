//! Membership changes left halfway, finished by the group's leader.
//!
//! openraft changes a group's voters in two steps that its caller drives:
//! a joint configuration (old and new voters together), then the new one.
//! A caller that stops between the two (a `runnel ctl` killed, an HTTP
//! request cancelled, a leader that crashed) leaves the group joint, and
//! every later change waits behind it (`runnel ctl` reads the group as
//! "changing"). So each node looks at the groups it leads: one whose
//! committed membership has stayed joint for [`JOINT_FOR`] is moved on to
//! the joint configuration's new voters.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::ChangeMembers;

use super::hosting::{self, Hosting};
use crate::raft::group::RaftGroup;
use crate::raft::NodeId;

/// How long a committed joint membership may stand before the leader
/// finishes the change (a change under way takes milliseconds between
/// its two steps).
const JOINT_FOR: Duration = Duration::from_secs(3);
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Runs on every node until aborted (see the module docs).
pub(super) async fn finish_joint_changes(
    groups: Vec<Arc<RaftGroup>>,
    me: NodeId,
    hosting: Arc<Hosting>,
) {
    let mut joint_since = BTreeMap::new();
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        for group in &groups {
            let index = group.index();
            let goal = left_joint(group, me).filter(|_| hosting::holds(group, me, &hosting));
            let Some(goal) = goal else {
                joint_since.remove(&index);
                continue;
            };
            let since = *joint_since
                .entry(index)
                .or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < JOINT_FOR {
                continue;
            }
            joint_since.remove(&index);
            tracing::info!(
                group = index,
                voters = ?goal,
                "finishing a membership change left halfway"
            );
            let change = ChangeMembers::ReplaceAllVoters(goal);
            if let Err(err) = group.raft().change_membership(change, false).await {
                tracing::warn!(group = index, error = %err, "finishing a membership change");
            }
        }
    }
}

/// On the group's leader, when its committed membership is joint: the
/// voters the change was going to.
fn left_joint(group: &RaftGroup, me: NodeId) -> Option<BTreeSet<NodeId>> {
    let metrics = group.raft().metrics();
    let metrics = metrics.borrow();
    let stored = &metrics.membership_config;
    let configs = stored.membership().get_joint_config();
    let joint = configs.len() > 1;
    let committed = *stored.log_id() <= metrics.last_applied;
    (joint && committed && metrics.current_leader == Some(me))
        .then(|| configs.last().cloned())
        .flatten()
}
