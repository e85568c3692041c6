//! Leadership back to each group's preferred node after a failover.
//!
//! Groups start with balanced leaders (group `g` prefers the voter
//! `g mod voters` of its membership, in node-id order), but a failover
//! moves a group's leadership to another node and nothing would move it
//! back: after a node restarts, the others keep leading its groups.
//! openraft 0.9 has no leadership transfer, so a leader that is not its
//! group's preferred node, once that node has been (nearly) caught up for
//! two checks in a row, hands the group over itself:
//!
//! 1. it stops submitting new batches (proposals queue) and waits for the
//!    ones in flight, so every follower can hold the whole log;
//! 2. it stops its heartbeats and its own election timer, asks the other
//!    followers to hold back their election timers for [`HOLD_FOR`], and
//!    asks the preferred node to campaign once the followers' leader
//!    lease (the longest election timeout) has run out;
//! 3. the preferred node wins the election (its log is complete), and the
//!    old leader steps down; the queued proposals are then refused with
//!    [`crate::EngineError::NotLeader`], which the server retries inside
//!    the cluster against the new leader (clients see the latency, not
//!    an error). Whatever happens, everything is re-enabled after
//!    [`HOLD_FOR`], or at once if the preferred node refuses (it is still
//!    catching up after losing its disk) or cannot be reached.
//!
//! A handover stalls the group's writes for about one election timeout;
//! it happens only when a preferred node comes back.

use std::sync::Arc;
use std::time::Duration;

use super::group::RaftGroup;
use super::transport::Transport;
use super::{NodeId, Raft};
use crate::MaintainedGroup;

/// Roles in a handover, sent to the other nodes.
pub(crate) const CAMPAIGN: u8 = 0;
pub(crate) const HOLD: u8 = 1;
/// How often leaders look for groups to hand back.
const CHECK_EVERY: Duration = Duration::from_secs(3);
/// How long a handover may take before everything is re-enabled.
pub(crate) const HOLD_FOR: Duration = Duration::from_secs(3);
/// Beyond the leader lease, how long the new leader waits to campaign
/// (batches in flight may have refreshed the followers' leases).
const LEASE_MARGIN: Duration = Duration::from_millis(300);

/// Runs on every node: hands back the groups this node leads but does
/// not prefer. Starts after `start_after` (the formation's hold-back).
pub(crate) async fn rebalance(
    groups: Vec<Arc<RaftGroup>>,
    me: NodeId,
    transport: Arc<impl Transport>,
    start_after: Duration,
) {
    tokio::time::sleep(start_after).await;
    let mut caught_up = vec![0u32; groups.len()];
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        for (g, group) in groups.iter().enumerate() {
            // Every replica agrees on the voters (they are replicated), so
            // on the preferred node too, whoever joined or left.
            let nodes: Vec<NodeId> = {
                let metrics = group.raft().metrics();
                let metrics = metrics.borrow();
                metrics.membership_config.membership().voter_ids().collect()
            };
            let Some(&preferred) = nodes.get(g % nodes.len().max(1)) else {
                continue;
            };
            if preferred == me
                || group.leader() != Some(me)
                || !follower_within(group, preferred, NEARLY_CAUGHT_UP)
            {
                caught_up[g] = 0;
                continue;
            }
            caught_up[g] += 1;
            if caught_up[g] >= 2 {
                caught_up[g] = 0;
                hand_over(group, preferred, me, &nodes, &*transport).await;
            }
        }
    }
}

/// A follower this close to the leader's log is worth handing over to
/// (under load followers always trail by the entries in flight).
const NEARLY_CAUGHT_UP: u64 = 64;

/// Whether `follower` holds all but at most `lag` entries of this
/// leader's log.
fn follower_within(group: &RaftGroup, follower: NodeId, lag: u64) -> bool {
    let metrics = group.raft().metrics().borrow().clone();
    let matched = metrics
        .replication
        .as_ref()
        .and_then(|r| r.get(&follower).copied().flatten())
        .map(|l| l.index);
    match (matched, metrics.last_log_index) {
        (Some(matched), Some(last)) => matched + lag >= last,
        _ => false,
    }
}

async fn hand_over(
    group: &RaftGroup,
    to: NodeId,
    me: NodeId,
    nodes: &[NodeId],
    transport: &impl Transport,
) {
    let index = group.index();
    let paused = group.pause_proposals().await;
    // With no batch in flight the follower catches up at once, or is not
    // the one to hand over to.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while !follower_within(group, to, 0) {
        if tokio::time::Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::info!(
        group = index,
        to,
        "handing leadership back to the group's preferred node"
    );
    let raft = group.raft();
    raft.runtime_config().heartbeat(false);
    raft.runtime_config().elect(false);
    for node in nodes.iter().filter(|n| **n != me && **n != to) {
        if let Err(reason) = transport.handoff(*node, index, HOLD).await {
            tracing::debug!(group = index, node, %reason, "no hold for the handover");
        }
    }
    match transport.handoff(to, index, CAMPAIGN).await {
        Ok(()) => {
            let deadline = tokio::time::Instant::now() + HOLD_FOR;
            while tokio::time::Instant::now() < deadline && group.leader() == Some(me) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Refused (it has not caught up since losing its disk, see
        // `vote_guard`) or unreachable: lead on at once.
        Err(reason) => {
            tracing::warn!(group = index, to, %reason, "the preferred node did not take the handover");
        }
    }
    raft.runtime_config().heartbeat(true);
    raft.runtime_config().elect(true);
    drop(paused);
}

/// A node's part in another's handover of `raft`'s group.
pub(crate) fn on_handoff(raft: &Raft, role: u8) {
    let raft = raft.clone();
    match role {
        CAMPAIGN => {
            let lease = Duration::from_millis(raft.config().election_timeout_max);
            tokio::spawn(async move {
                tokio::time::sleep(lease + LEASE_MARGIN).await;
                // Already elected (a repeated request, or the old leader
                // lost the group anyway): a new election would only churn.
                let metrics = raft.metrics().borrow().clone();
                if metrics.current_leader != Some(metrics.id) {
                    let _ = raft.trigger().elect().await;
                }
            });
        }
        HOLD => {
            raft.runtime_config().elect(false);
            tokio::spawn(async move {
                tokio::time::sleep(HOLD_FOR).await;
                raft.runtime_config().elect(true);
            });
        }
        other => tracing::warn!(role = other, "unknown handover role"),
    }
}
