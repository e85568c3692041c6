//! Membership changes, one group at a time at its leader: a node is added
//! (as a learner, caught up by snapshot and log, then promoted to voter)
//! or removed (its replica leaves the group). The control group has five
//! voters at most; the other members follow it as learners (a learner is
//! added, or a voter demoted to one). `runnel ctl node add` and
//! `node remove` drive every group through these, each at its leader;
//! each step is idempotent, so a command cut short is finished by running
//! it again.
//!
//! Once a node is removed from every group, `runnel ctl node remove`
//! retires its id through the control group: it is never a member again,
//! and its peers refuse it (see [`super::identity`]).
//!
//! A node that joined after the others started is named by no `--peers`:
//! the nodes find its Raft address in the groups' membership
//! ([`link_members`]), and route requests to it from there. A node that
//! no group has as a member any more loses its links and its place in the
//! status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::ClientWriteError;
use openraft::{BasicNode, ChangeMembers};

pub use crate::api::{MemberChange, MemberReport};

use super::hosting::Hosting;
use super::ClusterNode;
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::error::{EngineError, MembershipError, ReplicationError, TransferError};
use crate::raft::group::RaftGroup;
use crate::raft::transfer::{follower_within, transfer, NEARLY_CAUGHT_UP};
use crate::raft::transport::{raft_addr, PeerQueries, Transport};
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;
use runnel_core::{Applied, Command};

/// How long a new member may take to catch up before the command gives
/// up (it can be run again and goes on from where it stopped).
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);
/// How long a member may take to answer before a membership change or a
/// transfer counts it as down.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// How long a retirement waits for this node to see the node gone from
/// every group.
const RETIRE_WAIT: Duration = Duration::from_secs(5);

impl ClusterNode {
    /// Applies `change` to group `group`, which this node must lead.
    pub async fn change_member(
        &self,
        group: u32,
        change: MemberChange,
    ) -> Result<MemberReport, EngineError> {
        let g = self
            .groups
            .get(group as usize)
            .ok_or(MembershipError::NoSuchGroup {
                group,
                groups: self.groups.len() as u32,
            })?;
        if g.leader() != Some(self.node_id) {
            return Err(EngineError::NotLeader(g.leader()));
        }
        if let MemberChange::Add { node, .. } | MemberChange::Learn { node, .. } = &change {
            if self.is_retired(*node) {
                return Err(MembershipError::Retired { node: *node }.into());
            }
        }
        let changed = match change {
            MemberChange::Add { node, http_addr } => add(g, node, &http_addr).await?,
            MemberChange::Remove { node } => {
                let reachable = self.answering(g).await;
                self.hand_over_before_leaving(g, node, &reachable).await?;
                leave(g, node, &reachable, Leaving::Group).await?
            }
            MemberChange::Learn { node, http_addr } => {
                only_through_control(group, "a learner is added")?;
                learn(g, node, &http_addr).await?
            }
            MemberChange::Demote { node } => {
                only_through_control(group, "a voter is made a learner")?;
                let reachable = self.answering(g).await;
                self.hand_over_before_leaving(g, node, &reachable).await?;
                leave(g, node, &reachable, Leaving::VotesOnly).await?
            }
            MemberChange::Lead { node } => self.lead(g, node).await?,
            MemberChange::LeadAway { node } if node == self.node_id => {
                let reachable = self.answering(g).await;
                self.lead_away(g, &reachable)
                    .await
                    .map_err(ReplicationError::Transfer)?;
                true
            }
            MemberChange::LeadAway { .. } => false,
            MemberChange::Retire { node } => self.retire(group, node).await?,
            MemberChange::SetReplication { factor } => {
                only_through_control(group, "the replication factor is set")?;
                self.set_replication(factor).await?
            }
            MemberChange::PreferLeaders { leaders } => {
                only_through_control(group, "preferred leaders are set")?;
                self.prefer_leaders(leaders).await?
            }
            MemberChange::SetZone { node, zone } => {
                only_through_control(group, "a node's zone is recorded")?;
                self.set_zone(node, zone).await?
            }
            MemberChange::PauseHealing { paused } => {
                only_through_control(group, "self-healing is paused or resumed")?;
                self.pause_healing(paused).await?
            }
            MemberChange::Drain { node, draining } => {
                only_through_control(group, "a member's draining is recorded")?;
                self.set_draining(node, draining).await?
            }
            MemberChange::FinalizeUpgrade => {
                only_through_control(group, "an upgrade is finalised")?;
                self.finalize_upgrade().await?
            }
        };
        let (voters, learners) = members(g);
        Ok(MemberReport {
            group,
            voters: voters.into_iter().collect(),
            learners: learners.into_iter().collect(),
            leader: g.leader(),
            changed,
        })
    }

    /// Before this node stops voting in `g`, which it leads, hands the
    /// leadership over with no gap in writes, and answers the new leader
    /// as `NotLeader` (the caller sends the change there). openraft would
    /// have it step down once the change commits, and the others wait out
    /// its lease. A change naming another node passes.
    async fn hand_over_before_leaving(
        &self,
        g: &RaftGroup,
        node: NodeId,
        reachable: &BTreeSet<NodeId>,
    ) -> Result<(), EngineError> {
        if node != self.node_id {
            return Ok(());
        }
        check_removal(g, node, reachable)?;
        match self.lead_away(g, reachable).await {
            Ok(to) => Err(EngineError::NotLeader(Some(to))),
            Err(reason) => {
                tracing::warn!(
                    group = g.index(),
                    %reason,
                    "a leader leaving its group's voters could not hand its leadership over first"
                );
                Ok(())
            }
        }
    }

    /// This node and the members of `g` that answer now (see
    /// [`answering`]).
    async fn answering(&self, g: &RaftGroup) -> BTreeSet<NodeId> {
        answering(&*self.peers_asked, self.node_id, g).await
    }

    /// Moves the leadership of `g`, which this node leads, to `node`.
    async fn lead(&self, g: &RaftGroup, node: NodeId) -> Result<bool, EngineError> {
        if node == self.node_id {
            return Ok(false);
        }
        let (voters, _) = members(g);
        if !voters.contains(&node) {
            return Err(MembershipError::NotAVoter {
                node,
                group: g.index(),
            }
            .into());
        }
        let reachable = self.answering(g).await;
        transfer(g, self.node_id, node, &reachable, &*self.peers_asked)
            .await
            .map_err(ReplicationError::Transfer)?;
        Ok(true)
    }

    /// Moves the leadership of `g`, which this node leads, to another
    /// voter: the group's preferred leader among them, or the voter most
    /// caught up if that one is behind. Answers the new leader.
    async fn lead_away(
        &self,
        g: &RaftGroup,
        reachable: &BTreeSet<NodeId>,
    ) -> Result<NodeId, TransferError> {
        let (voters, _) = members(g);
        let others: Vec<NodeId> = voters.into_iter().filter(|v| *v != self.node_id).collect();
        let control = &self.groups[CONTROL_GROUP];
        let preferred = super::leaders::preferred_leader(control, g.index(), &others).ok_or(
            TransferError::OnlyVoter {
                node: self.node_id,
                group: g.index(),
            },
        )?;
        let to = match follower_within(g, preferred, NEARLY_CAUGHT_UP) {
            true => preferred,
            false => {
                let metrics = g.raft().metrics().borrow().clone();
                let replication = metrics.replication.unwrap_or_default();
                let matched = |n: &NodeId| replication.get(n).copied().flatten();
                *others
                    .iter()
                    .max_by_key(|n| matched(n))
                    .unwrap_or(&preferred)
            }
        };
        transfer(g, self.node_id, to, reachable, &*self.peers_asked).await?;
        Ok(to)
    }
}

impl ClusterNode {
    pub(super) fn is_retired(&self, node: NodeId) -> bool {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.is_retired(node))
    }

    /// Retires `node` once no group has it as a member; answers whether
    /// it was not retired before.
    async fn retire(&self, group: u32, node: NodeId) -> Result<bool, EngineError> {
        if group as usize != CONTROL_GROUP {
            return Err(MembershipError::WrongGroup {
                what: "a node is retired",
                group,
            }
            .into());
        }
        if node == self.node_id {
            let (voters, learners) = members(&self.groups[CONTROL_GROUP]);
            if voters.contains(&node) || learners.contains(&node) {
                return Err(MembershipError::StillMember {
                    node,
                    groups: vec![CONTROL_GROUP as u32],
                }
                .into());
            }
            // Removed, it leads on only until its removal commits (and it
            // never learns the other groups' last changes): the caller
            // retries at the group's next leader.
            return Err(EngineError::NotLeader(None));
        }
        // This node may learn the other groups' last changes a moment
        // after their leaders acknowledged them.
        let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
        loop {
            let (mut holding, mut unknown) = (Vec::new(), Vec::new());
            for group in &self.groups {
                let members = match self.holds(group) {
                    true => {
                        let (voters, learners) = members(group);
                        Some(voters.into_iter().chain(learners).collect())
                    }
                    false => self.members_elsewhere(group.index()).await,
                };
                match members {
                    Some(members) if members.contains(&node) => holding.push(group.index()),
                    Some(_) => {}
                    None => unknown.push(group.index()),
                }
            }
            if holding.is_empty() && unknown.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(if holding.is_empty() {
                    MembershipError::Unknown {
                        node,
                        groups: unknown,
                    }
                } else {
                    MembershipError::StillMember {
                        node,
                        groups: holding,
                    }
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let control = &self.groups[CONTROL_GROUP];
        match control.propose(Command::RetireNode { node }).await? {
            Applied::NodeRetired { newly } => Ok(newly),
            other => unreachable!("a retirement applied as {other:?}"),
        }
    }
}

impl ClusterNode {
    /// The members of `group`, which this node holds no copy of, as its
    /// leader answers (`None`: no leader known, or it did not answer).
    pub(super) async fn members_elsewhere(&self, group: u32) -> Option<BTreeSet<NodeId>> {
        let (leader, _) = self.hosting.hint(group)?;
        let view = self.peers_asked.leader_view(leader, group).await.ok()?;
        view.members.map(|m| m.nodes.into_iter().collect())
    }
}

/// Node `me` and the members of `g` that answer a query about it now,
/// within [`ANSWER_WITHIN`]. (A peer's link learns that the peer died
/// only at its next connection attempt: a removal checked against it
/// could leave the group a joint membership that needs the dead node,
/// and no write could commit.)
pub(super) async fn answering(
    peers: &dyn PeerQueries,
    me: NodeId,
    g: &RaftGroup,
) -> BTreeSet<NodeId> {
    let (voters, learners) = members(g);
    let asks = voters
        .into_iter()
        .chain(learners)
        .filter(|n| *n != me)
        .map(|node| async move {
            let asked = peers.leader_view(node, g.index());
            let answer = tokio::time::timeout(ANSWER_WITHIN, asked).await;
            matches!(answer, Ok(Ok(_))).then_some(node)
        });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .chain(std::iter::once(me))
        .collect()
}

/// The group's voters and learners as this node knows them.
pub(super) fn members(group: &RaftGroup) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
    let metrics = group.raft().metrics();
    let metrics = metrics.borrow();
    let membership = metrics.membership_config.membership();
    (
        membership.voter_ids().collect(),
        membership.learner_ids().collect(),
    )
}

/// Makes `node` a voter of `group`: a learner first, caught up, then
/// promoted; answers false if it was a voter already.
async fn add(group: &RaftGroup, node: NodeId, http_addr: &str) -> Result<bool, EngineError> {
    check_address(group, node, http_addr)?;
    let (voters, _) = members(group);
    if voters.contains(&node) {
        return Ok(false);
    }
    // A learner first: it catches up (snapshot and log) without counting
    // towards the quorum, so the group's writes never wait for it. A
    // learner from an earlier, cut-short run is added again and waited
    // for the same way.
    add_learner_caught_up(group, node, http_addr).await?;
    let promote = ChangeMembers::AddVoterIds(BTreeSet::from([node]));
    group
        .raft()
        .change_membership(promote, false)
        .await
        .map_err(raft_refusal)?;
    Ok(true)
}

/// Makes `node` a learner of `group`, caught up; answers false if it was
/// a member (voter or learner) already.
async fn learn(group: &RaftGroup, node: NodeId, http_addr: &str) -> Result<bool, EngineError> {
    check_address(group, node, http_addr)?;
    let (voters, learners) = members(group);
    if voters.contains(&node) || learners.contains(&node) {
        return Ok(false);
    }
    add_learner_caught_up(group, node, http_addr).await?;
    Ok(true)
}

/// Refuses `node` at `http_addr` if the group knows it at another address.
fn check_address(group: &RaftGroup, node: NodeId, http_addr: &str) -> Result<(), EngineError> {
    let known = group.member_http_addr(node);
    if let Some(known) = known.as_deref().filter(|known| *known != http_addr) {
        return Err(MembershipError::AddressTaken {
            node,
            group: group.index(),
            known: known.to_string(),
        }
        .into());
    }
    Ok(())
}

/// Adds `node` to `group` as a learner and waits until it holds the
/// entry that added it.
async fn add_learner_caught_up(
    group: &RaftGroup,
    node: NodeId,
    http_addr: &str,
) -> Result<(), EngineError> {
    let addr = raft_addr(http_addr).map_err(MembershipError::BadAddress)?;
    let raft = group.raft();
    let added = raft
        .add_learner(node, BasicNode { addr }, false)
        .await
        .map_err(raft_refusal)?;
    // openraft's own blocking wait counts a learner within
    // `replication_lag_threshold` entries (thousands) as caught up, even
    // one that never answered: wait until it holds the entry that added it.
    let holds_the_addition = |m: &openraft::RaftMetrics<NodeId, BasicNode>| {
        m.replication
            .as_ref()
            .is_none_or(|r| r.get(&node).copied().flatten() >= Some(added.log_id))
    };
    let waited = raft
        .wait(Some(CATCH_UP_LIMIT))
        .metrics(
            holds_the_addition,
            "the new learner holds the entry that added it",
        )
        .await;
    match waited {
        Ok(m) if m.replication.is_some() => Ok(()),
        // Leadership moved meanwhile: the caller asks the new leader.
        Ok(m) => Err(EngineError::NotLeader(m.current_leader)),
        Err(openraft::metrics::WaitError::Timeout(..)) => Err(MembershipError::CatchUpTimeout {
            node,
            group: group.index(),
            within: CATCH_UP_LIMIT,
        }
        .into()),
        Err(_) => Err(EngineError::ShuttingDown),
    }
}

/// Refuses a change of cluster state sent to a data group.
fn only_through_control(group: u32, what: &'static str) -> Result<(), EngineError> {
    match group as usize == CONTROL_GROUP {
        true => Ok(()),
        false => Err(MembershipError::WrongGroup { what, group }.into()),
    }
}

/// Refuses the removal of `node` from `group` if the remaining voters
/// would have no quorum among the nodes `reachable`.
fn check_removal(
    group: &RaftGroup,
    node: NodeId,
    reachable: &BTreeSet<NodeId>,
) -> Result<(), EngineError> {
    let (voters, _) = members(group);
    let remaining: BTreeSet<NodeId> = voters.iter().copied().filter(|v| *v != node).collect();
    let up = remaining.intersection(reachable).count();
    let quorum = remaining.len() / 2 + 1;
    if remaining.is_empty() || up < quorum {
        return Err(MembershipError::NoQuorum {
            node,
            group: group.index(),
            up,
            remaining,
            quorum,
        }
        .into());
    }
    Ok(())
}

/// How a node leaves a group's voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaving {
    /// It leaves the group (a learner too).
    Group,
    /// It stays a learner (the control group's voters past five).
    VotesOnly,
}

/// Takes `node` out of `group`'s voters (and, `Leaving::Group`, out of
/// the group), if the remaining voters keep a quorum among `reachable`;
/// answers false if there was nothing to take it out of.
pub(super) async fn leave(
    group: &RaftGroup,
    node: NodeId,
    reachable: &BTreeSet<NodeId>,
    leaving: Leaving,
) -> Result<bool, EngineError> {
    let (voters, learners) = members(group);
    let learner_stays = leaving == Leaving::VotesOnly;
    if !voters.contains(&node) && (learner_stays || !learners.contains(&node)) {
        return Ok(false);
    }
    check_removal(group, node, reachable)?;
    let change = if voters.contains(&node) {
        ChangeMembers::RemoveVoters(BTreeSet::from([node]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([node]))
    };
    // `retain`: a voter taken out stays a learner.
    group
        .raft()
        .change_membership(change, learner_stays)
        .await
        .map_err(raft_refusal)?;
    Ok(true)
}

/// openraft's answer to a membership change, as an engine error: "not
/// leader" as such (the caller retries at the new leader), the rest as a
/// refused change.
fn raft_refusal(
    error: openraft::error::RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
) -> EngineError {
    use openraft::error::RaftError;
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
            EngineError::NotLeader(forward.leader_id)
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            MembershipError::Refused(e).into()
        }
        RaftError::Fatal(fatal) => ReplicationError::Fatal(Box::new(fatal)).into(),
    }
}

/// Keeps a link to every member of every group this node holds (see the
/// module docs) and to the leaders it routes to for the others, and, once
/// the membership of every group it holds is known, none to other nodes
/// (removed ones).
pub(super) async fn link_members(
    groups: Vec<Arc<RaftGroup>>,
    me: NodeId,
    transport: Arc<impl Transport>,
    hosting: Arc<Hosting>,
) {
    loop {
        let mut members: BTreeSet<NodeId> = hosting.hinted_leaders().into_iter().collect();
        let mut every_group_known = true;
        for group in groups.iter().filter(|g| !hosting.dropped(g)) {
            let group_members = group.members();
            every_group_known &= !group_members.is_empty();
            if !group_members.iter().any(|(node, _)| *node == me) {
                continue; // held elsewhere: its members are not this node's peers
            }
            for (node, addr) in group_members {
                members.insert(node);
                if node != me {
                    transport.learn(node, &addr);
                }
            }
        }
        // A group not formed yet, or not yet joined, may still have any
        // peer as a member.
        if every_group_known {
            transport.forget_all_but(&members);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
