//! How a member's groups start: formed on a new cluster with leadership
//! balanced, or rejoined, without a vote until caught up, by a node that
//! lost its copy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;

use crate::placement::Placement;
use crate::raft::group::RaftGroup;
use crate::raft::transport::{Served, Transport};
use crate::raft::NodeId;

/// How often an empty node asks its peers again while none answers.
const PROBE_AGAIN: Duration = Duration::from_millis(200);

/// Forms new groups and balances leadership. Each group is formed on the
/// nodes `placement` names for it (all of them for group 0, and while the
/// replication factor is at least the node count), and has a preferred
/// leader among them (its first replica there, balanced by the planner;
/// the control group records them: `cluster::leaders`). A node
/// initializes the new groups it prefers at once (openraft then elects it) and holds back, for
/// a few election timeouts, its election timer in the others, so
/// leadership starts out balanced. A group whose preferred node is down
/// when the cluster first forms is initialized by the others once they
/// stop waiting (initializing with the same membership on several nodes
/// is safe). A group that any peer already has is never initialized
/// here: a node that lost its disk rejoins and is sent a snapshot, and
/// votes or stands for election in that group only once it has heard from
/// its leader and caught up with what its peers had applied (see
/// [`VoteGuard`](crate::raft::vote_guard::VoteGuard)).
pub(super) async fn form_and_balance(
    groups: Vec<Arc<RaftGroup>>,
    me: NodeId,
    members: BTreeMap<NodeId, BasicNode>,
    placement: Placement,
    transport: Arc<impl Transport>,
    served: Arc<Served>,
    hold_back: Duration,
) {
    if !members.contains_key(&me) {
        return;
    }
    // Where each group is formed.
    let placed = |g: &RaftGroup| -> Vec<NodeId> {
        let mut nodes = placement.groups[g.index() as usize].clone();
        nodes.sort_unstable();
        nodes
    };
    let mut held = Vec::new();
    for group in &groups {
        let have = group.raft().is_initialized().await.unwrap_or(false);
        let mut peers = transport.probe_peers(group.index()).await;
        // An empty node cannot tell a forming cluster from one it lost its
        // disk in until a peer answers: it must not vote before then.
        if !have && peers.answered == 0 && members.len() > 1 {
            tracing::info!(
                group = group.index(),
                "no peer answers yet: waiting for one before this empty node votes"
            );
            while peers.answered == 0 {
                tokio::time::sleep(PROBE_AGAIN).await;
                peers = transport.probe_peers(group.index()).await;
            }
        }
        // Formed with just the membership entry (index 0) and no leader
        // yet: the cluster is forming, and this node is one of its members.
        let forming = !peers.led && peers.last_log == 0;
        if have || forming {
            served.votes().release(group.index());
        } else {
            tracing::info!(
                group = group.index(),
                "rejoining without this group's state: no vote until it has caught up with its leader"
            );
            served.votes().hold_until(group.index(), u64::MAX);
            group.raft().runtime_config().elect(false);
            held.push(group.index());
            tokio::spawn(rejoin(
                Arc::clone(group),
                me,
                Arc::clone(&transport),
                Arc::clone(&served),
            ));
        }
    }
    // Who should lead it: its first replica, as the control group
    // records (`cluster::leaders`) and `cluster::rebalance` hands back to.
    let preferred = |g: &RaftGroup| placement.groups[g.index() as usize].first() == Some(&me);
    let form = |group: Arc<RaftGroup>| {
        let transport = Arc::clone(&transport);
        let members: BTreeMap<NodeId, BasicNode> = placed(&group)
            .into_iter()
            .map(|n| (n, members[&n].clone()))
            .collect();
        async move {
            if group.raft().is_initialized().await.unwrap_or(true)
                || transport.probe_peers(group.index()).await.initialized
            {
                return;
            }
            if let Err(err) = group.raft().initialize(members).await {
                tracing::debug!(group = group.index(), error = %err, "not initialized");
            }
        }
    };
    // A held group's elections are left to its vote guard; a group placed
    // on other nodes is theirs to form.
    let left_alone = |g: &RaftGroup| held.contains(&g.index()) || !placed(g).contains(&me);
    for group in groups.iter().filter(|g| !preferred(g) && !left_alone(g)) {
        group.raft().runtime_config().elect(false);
    }
    for group in groups.iter().filter(|g| preferred(g) && !left_alone(g)) {
        form(Arc::clone(group)).await;
    }
    // A running cluster's leaders make themselves known within a heartbeat
    // or two; only leaderless groups need an election.
    tokio::time::sleep(hold_back / 10).await;
    for group in groups.iter().filter(|g| preferred(g) && !left_alone(g)) {
        if group.leader().is_none() && group.raft().is_initialized().await.unwrap_or(false) {
            let _ = group.raft().trigger().elect().await;
        }
    }
    tokio::time::sleep(hold_back).await;
    for group in groups.iter().filter(|g| !preferred(g) && !left_alone(g)) {
        group.raft().runtime_config().elect(true);
        if group.leader().is_none() {
            form(Arc::clone(group)).await;
        }
    }
}

/// Gives a group this node lost its copy of its vote back (see
/// [`VoteGuard`](crate::raft::vote_guard::VoteGuard)): waits to hear from a leader, asks the leader and the
/// other peers how long their logs are, and once this node has applied
/// that much, lets it vote and stand for election again.
async fn rejoin(
    group: Arc<RaftGroup>,
    me: NodeId,
    transport: Arc<impl Transport>,
    served: Arc<Served>,
) {
    let index = group.index();
    let raft = group.raft();
    let mut metrics = raft.metrics();
    let caught_up_at = loop {
        if metrics.has_changed().is_err() {
            return; // the group shut down
        }
        let leader = metrics.borrow().current_leader.filter(|l| *l != me);
        if let Some(leader) = leader {
            if let Some(answer) = transport.probe(leader, index).await {
                let others = transport.probe_peers(index).await;
                break answer.last_log.max(others.last_log);
            }
            // Gone already: wait for the next leader.
            tracing::debug!(group = index, leader, "the leader did not answer a probe");
            tokio::time::sleep(PROBE_AGAIN).await;
            continue;
        }
        if metrics.changed().await.is_err() {
            return; // the group shut down
        }
    };
    tracing::info!(
        group = index,
        caught_up_at,
        "heard from the group's leader: votes again once it has applied this index"
    );
    served.votes().hold_until(index, caught_up_at);
    if served.votes().released(index, &raft).await {
        tracing::info!(group = index, "caught up with the group: votes again");
        raft.runtime_config().elect(true);
    }
}
