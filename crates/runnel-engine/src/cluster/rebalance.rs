//! Leadership to each group's preferred node: back after a failover, and
//! on after the placement's choice changed.
//!
//! Groups start with balanced leaders (the preferred ones, cluster state:
//! see `cluster::leaders`), but a failover moves a group's leadership to
//! another node and nothing would move it back: after a node restarts,
//! the others keep leading its groups.
//! So a leader that is not its group's preferred node, once that node has
//! been (nearly) caught up for two checks in a row, moves the leadership
//! there with a [`transfer`](crate::raft::transfer), which keeps writes
//! flowing (with an odd number of voters) until one election round.
//! It happens only when a preferred node comes back, or after a move
//! changed the group's voters.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::raft::group::RaftGroup;
use crate::raft::transfer::{follower_within, transfer, NEARLY_CAUGHT_UP};
use crate::raft::transport::Transport;
use crate::raft::NodeId;

/// How often leaders look for groups to hand back.
const CHECK_EVERY: Duration = Duration::from_secs(3);

/// Runs on every node: hands back the groups this node leads but does
/// not prefer. Starts after `start_after` (the formation's hold-back).
pub(crate) async fn rebalance(
    groups: Vec<Arc<RaftGroup>>,
    prefers: impl Fn(u32, &[NodeId]) -> Option<NodeId> + Send + 'static,
    me: NodeId,
    transport: Arc<impl Transport>,
    start_after: Duration,
) {
    tokio::time::sleep(start_after).await;
    let mut caught_up = vec![0u32; groups.len()];
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        // Once per round, not per group.
        let reachable: BTreeSet<NodeId> = transport
            .peer_metrics()
            .into_iter()
            .filter(|p| p.reachable)
            .map(|p| p.node)
            .collect();
        for (g, group) in groups.iter().enumerate() {
            let nodes: Vec<NodeId> = {
                let metrics = group.raft().metrics();
                let metrics = metrics.borrow();
                metrics.membership_config.membership().voter_ids().collect()
            };
            let Some(preferred) = prefers(g as u32, &nodes) else {
                continue;
            };
            if preferred == me
                || group.leader() != Some(me)
                || !reachable.contains(&preferred)
                || !follower_within(group, preferred, NEARLY_CAUGHT_UP)
            {
                caught_up[g] = 0;
                continue;
            }
            caught_up[g] += 1;
            if caught_up[g] >= 2 {
                caught_up[g] = 0;
                if let Err(reason) = transfer(group, me, preferred, &reachable, &*transport).await {
                    tracing::warn!(
                        group = g,
                        to = preferred,
                        %reason,
                        "leadership stays: the transfer to the preferred node failed"
                    );
                }
            }
        }
    }
}
