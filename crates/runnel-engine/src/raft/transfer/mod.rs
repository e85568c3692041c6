//! Moving a group's leadership to another voter while writes go on.
//!
//! openraft 0.9 has no leadership transfer, and its leader lease stands
//! in the way of one: a voter that heard from its leader within the
//! longest election timeout refuses every vote request. The old leader
//! is the exception: openraft dates a leader's vote from its election, so
//! once it has led for a lease it grants a vote to a candidate whose log
//! is as long as its own, and steps down. The leader therefore (see
//! [`plan`] for how many followers it needs to mute):
//!
//! 1. asks the followers it will mute to hold back their own election
//!    timers (they are about to hear nothing from it);
//! 2. mutes them ([`mute`]): its append requests to them fail at once, so
//!    their lease runs out, while it goes on committing writes with the
//!    target and the followers it keeps (in a group of three, it mutes
//!    nobody: the target's vote and its own make a quorum);
//! 3. pauses proposals, waits until the target holds its whole log
//!    (milliseconds: the batches in flight), and asks the target to
//!    campaign at once;
//! 4. the target wins the votes of the old leader and of the muted
//!    followers, and the old leader steps down as it grants its vote.
//!    The proposals queued meanwhile are refused as
//!    [`crate::EngineError::NotLeader`], which the server retries at the
//!    new leader.
//!
//! Writes therefore pause for one election round (a vote and the new
//! leader's first commit), not a lease. With a follower down, the others
//! may be too few to keep a quorum on each side: then writes pause from
//! the start, for a lease. Whatever happens, the mutes and timers are
//! restored when the transfer returns; one that fails (the target
//! refused, a muted follower could not be held, time ran out) leaves the
//! leader leading, or, if the target had campaigned, an ordinary
//! election.

pub mod mute;
pub mod plan;

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::group::RaftGroup;
use super::transport::PeerQueries;
use super::{NodeId, Raft};
pub use crate::error::TransferError;

/// Roles in a transfer, sent to the other nodes (the body of a
/// `KIND_HANDOFF` request).
pub(crate) const HOLD: u8 = 1;
pub(crate) const CAMPAIGN: u8 = 2;
/// How long a held follower keeps its election timer off; a transfer
/// gives up well before.
pub(crate) const HOLD_FOR: Duration = Duration::from_secs(3);
/// What a transfer leaves of [`HOLD_FOR`] before it gives up, so the held
/// followers' timers are still off when it restores replication.
const HOLD_SPARE: Duration = Duration::from_millis(500);
/// Beyond the muted followers' lease, for their clocks and the scheduling
/// of their Raft tasks.
const LEASE_MARGIN: Duration = Duration::from_millis(100);
/// A follower this close to the leader's log is worth transferring to
/// (under load followers always trail by the entries in flight).
pub(crate) const NEARLY_CAUGHT_UP: u64 = 64;

/// Moves the leadership of `group`, which this node (`me`) leads, to the
/// voter `to`, with the peers in `reachable` up; answers once `to` leads,
/// or why it does not.
pub(crate) async fn transfer(
    group: &RaftGroup,
    me: NodeId,
    to: NodeId,
    reachable: &BTreeSet<NodeId>,
    peers: &dyn PeerQueries,
) -> Result<(), TransferError> {
    let index = group.index();
    let raft = group.raft();
    if !follower_within(group, to, NEARLY_CAUGHT_UP) {
        return Err(TransferError::Behind {
            node: to,
            group: index,
        });
    }
    let lease = Duration::from_millis(raft.config().election_timeout_max) + LEASE_MARGIN;
    let leader_grants = own_lease_over(&raft, lease).await;
    let plan = {
        let metrics = raft.metrics().borrow().clone();
        if metrics.current_leader != Some(me) {
            return Err(TransferError::NotLeading {
                node: me,
                group: index,
            });
        }
        let membership = metrics.membership_config.membership();
        if super::group::is_joint(membership) {
            return Err(TransferError::Changing { group: index });
        }
        let voters = membership.voter_ids().collect();
        let replication = metrics.replication.unwrap_or_default();
        let matched = |n| {
            replication
                .get(&n)
                .copied()
                .flatten()
                .map_or(0, |l| l.index)
        };
        plan::plan(&voters, me, to, reachable, leader_grants, matched).map_err(|refusal| {
            TransferError::NoPlan {
                group: index,
                refusal,
            }
        })?
    };
    let started = Instant::now();
    let deadline = started + HOLD_FOR - HOLD_SPARE;
    for node in &plan.mute {
        peers
            .handoff(*node, index, HOLD)
            .await
            .map_err(|error| TransferError::WouldNotHold { node: *node, error })?;
    }
    let _restore = Restore {
        raft: raft.clone(),
        group,
    };
    let mut paused = None;
    if !plan.writes_flow {
        paused = Some(pause(group, deadline).await?);
        wait_caught_up(group, to, deadline).await?;
    }
    raft.runtime_config().elect(false);
    if !plan.mute.is_empty() {
        group.muted().mute(plan.mute.iter().copied());
        let left = deadline.saturating_duration_since(Instant::now());
        if !group.muted().wait_idle(&plan.mute, left).await {
            return Err(TransferError::MutedBusy);
        }
        if Instant::now() + lease >= deadline {
            return Err(TransferError::NoTimeForLease);
        }
        tokio::time::sleep(lease).await;
    }
    let writes_paused = Instant::now();
    if paused.is_none() {
        paused = Some(pause(group, deadline).await?);
    }
    wait_caught_up(group, to, deadline).await?;
    peers
        .handoff(to, index, CAMPAIGN)
        .await
        .map_err(|error| TransferError::DidNotCampaign { node: to, error })?;
    while group.leader() == Some(me) {
        if Instant::now() >= deadline {
            return Err(TransferError::NotTakenOver {
                node: to,
                group: index,
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Not leading any more: what queued is refused, and retried at the
    // new leader.
    drop(paused);
    while group.leader() != Some(to) {
        if Instant::now() >= deadline {
            return Err(TransferError::LedByAnother {
                group: index,
                leader: group.leader(),
                node: to,
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tracing::info!(
        group = index,
        to,
        muted = ?plan.mute,
        writes_flowed = plan.writes_flow,
        took_ms = started.elapsed().as_millis() as u64,
        writes_paused_ms = writes_paused.elapsed().as_millis() as u64,
        "leadership transferred"
    );
    Ok(())
}

/// Whether this leader votes for a transfer's target: openraft 0.9 dates
/// a leader's vote from its election, and a voter refuses vote requests
/// within the lease of its vote's date. A leader elected less than a
/// lease ago waits for it; one whose vote is renewed otherwise (another
/// openraft) does not vote, and the plan mutes one follower more.
async fn own_lease_over(raft: &Raft, lease: Duration) -> bool {
    let dated = || async { raft.with_raft_state(|s| s.vote_last_modified()).await };
    let over = match dated().await {
        Ok(Some(dated)) => dated + lease,
        Ok(None) => return true,
        Err(_) => return false,
    };
    if over > Instant::now() + lease {
        return false;
    }
    tokio::time::sleep_until(over).await;
    matches!(dated().await, Ok(Some(dated)) if dated + lease <= Instant::now())
}

/// Unmutes the group's followers and lets this node campaign again when
/// a transfer returns, however it ends.
struct Restore<'a> {
    raft: Raft,
    group: &'a RaftGroup,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        self.group.muted().unmute_all();
        self.raft.runtime_config().elect(true);
    }
}

/// Stops the group's proposals once the batches in flight are answered,
/// unless they are not by `deadline` (a quorum lost meanwhile).
async fn pause(
    group: &RaftGroup,
    deadline: Instant,
) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, TransferError> {
    tokio::time::timeout_at(deadline, group.pause_proposals())
        .await
        .map_err(|_| TransferError::BatchesInFlight {
            group: group.index(),
        })
}

async fn wait_caught_up(
    group: &RaftGroup,
    to: NodeId,
    deadline: Instant,
) -> Result<(), TransferError> {
    while !follower_within(group, to, 0) {
        if Instant::now() >= deadline {
            return Err(TransferError::CatchUpTimeout {
                node: to,
                group: group.index(),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Whether `follower` holds all but at most `lag` entries of this
/// leader's log.
pub(crate) fn follower_within(group: &RaftGroup, follower: NodeId, lag: u64) -> bool {
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

/// A node's part in another's transfer of `raft`'s group.
pub(crate) fn on_handoff(raft: &Raft, role: u8) {
    let raft = raft.clone();
    match role {
        CAMPAIGN => {
            tokio::spawn(async move {
                // Already leading (a repeated request): an election would
                // only churn.
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
        other => tracing::warn!(role = other, "unknown leadership transfer role"),
    }
}
