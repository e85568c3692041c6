//! Continuous rebalancing: a member that holds no replica of a data group
//! (it joined, or came back after self-healing moved its replicas off it)
//! takes its share of replicas without an operator.
//!
//! Two steps, each by the node that leads the group it changes, so that no
//! node acts at another's leader (as in [`super::healing`]):
//!
//! - The control group's leader notes since when each live member has
//!   held no data group that the placement would give it some of. Once
//!   that has lasted `--rebalance-after` seconds, it marks the member
//!   *filling* in group 0 (`runnel_core::member_state`); once the member
//!   holds its share, it clears the mark. Members that do not answer are
//!   left to self-healing, and nothing is planned while one does not.
//! - Every node, each round, plans the whole placement (the same pure
//!   planner as `runnel ctl node` and self-healing: zones, balance, fewest
//!   moves, draining members left out) and applies, in one group it leads,
//!   one move that puts a replica on a filling member: the new replica is
//!   added (a learner caught up, then a voter) before the old one is
//!   removed. One move per leader per round bounds the moves at once.
//!
//! Only filling members receive replicas: a placement an operator made by
//! hand (`runnel ctl node move`) is left as it is, and a member that `ctl
//! node remove` drains (marked *draining*) is never a target. Nothing
//! moves while the cluster's rebalancing is paused (`runnel ctl rebalance
//! pause`, which pauses self-healing too) or while the cluster is below
//! version 2 (the marks are a format of version 2). Every decision is
//! logged and counted in the status and `/metrics`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;

// The runtime's clock, which simulations pause and advance.
use tokio::time::Instant;

use runnel_core::member_state::MemberState;
use runnel_core::{Applied, Command};

use super::membership::members;
use super::ClusterNode;
use crate::api::{GroupEngine, MemberChange};
use crate::control::CONTROL_GROUP;
use crate::error::EngineError;
use crate::placement::{self, Placement};
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;

/// How often a node plans.
const ROUND: Duration = Duration::from_secs(2);
/// How long a member may take to answer before it counts as silent.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// What continuous rebalancing did on this node, for the status.
#[derive(Debug, Default)]
pub(crate) struct BalancingState {
    /// Live members holding no data group, and since when (control group
    /// leader only).
    empty: Mutex<BTreeMap<NodeId, Instant>>,
    /// Replicas this node moved onto filling members.
    pub(crate) moves: AtomicU64,
}

/// Runs on every member while `node` lives (see the module docs).
pub(crate) async fn balance(node: Weak<ClusterNode>, fill_after: Duration) {
    loop {
        tokio::time::sleep(ROUND).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        if node.cluster_version() < 2 || node.healing_paused() {
            continue;
        }
        if node.groups[CONTROL_GROUP].leads() {
            node.mark_filling(fill_after).await;
        }
        node.fill_one().await;
    }
}

/// Data groups (not group 0, which every member holds) whose voters
/// include `node`.
fn data_replicas(placement: &Placement, node: NodeId) -> usize {
    placement
        .groups
        .iter()
        .skip(CONTROL_GROUP + 1)
        .filter(|voters| voters.contains(&node))
        .count()
}

impl ClusterNode {
    /// Each member's recorded state (group 0's).
    pub(crate) fn member_states(&self) -> BTreeMap<NodeId, MemberState> {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.member_states().clone())
    }

    /// The members placement may put replicas on: group 0's members,
    /// neither retired nor draining.
    pub(super) fn placeable_members(&self) -> Vec<NodeId> {
        let states = self.member_states();
        let (voters, learners) = members(&self.groups[CONTROL_GROUP]);
        voters
            .union(&learners)
            .filter(|n| !self.is_retired(**n) && states.get(n) != Some(&MemberState::Draining))
            .copied()
            .collect()
    }

    /// The placement the planner wants over the placeable members, with
    /// the current one; `None` while a group's leader does not answer.
    async fn planned(&self) -> Option<(Placement, Placement)> {
        let current = self.current_placement().await?;
        let target = placement::cluster_target(
            &current,
            &self.placeable_members(),
            &self.zones(),
            self.groups.len(),
            self.replication(),
        );
        Some((current, target))
    }

    /// Whether every one of `nodes` answers now.
    async fn all_answer(&self, nodes: &[NodeId]) -> bool {
        let peers = &self.peers_asked;
        let asked = nodes
            .iter()
            .filter(|n| **n != self.node_id)
            .map(|node| async move {
                let asked = peers.leader_view(*node, CONTROL_GROUP as u32);
                matches!(tokio::time::timeout(ANSWER_WITHIN, asked).await, Ok(Ok(_)))
            });
        futures::future::join_all(asked)
            .await
            .into_iter()
            .all(|a| a)
    }

    /// At group 0's leader: marks members that have held no data group
    /// for `fill_after` as filling, and clears the mark of those that
    /// hold their share.
    async fn mark_filling(&self, fill_after: Duration) {
        let placeable = self.placeable_members();
        if !self.all_answer(&placeable).await {
            // Self-healing's turn: a plan would count a silent member.
            self.balancing.empty.lock().expect("balancing lock").clear();
            return;
        }
        let Some((current, target)) = self.planned().await else {
            return;
        };
        let states = self.member_states();
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut empty = self.balancing.empty.lock().expect("balancing lock");
            empty.retain(|node, _| placeable.contains(node));
            for &node in &placeable {
                let holds = data_replicas(&current, node);
                let share = data_replicas(&target, node);
                if holds > 0 || share == 0 || states.contains_key(&node) {
                    empty.remove(&node);
                    continue;
                }
                let since = *empty.entry(node).or_insert(now);
                if now.duration_since(since) >= fill_after {
                    due.push((node, share));
                }
            }
        }
        for (node, share) in due {
            tracing::warn!(
                node,
                share,
                "node {node} has held no replica for longer than --rebalance-after: moving \
                 {share} replicas onto it"
            );
            self.set_member_state(node, Some(MemberState::Filling))
                .await;
        }
        for (&node, &state) in &states {
            let filled = data_replicas(&current, node) >= data_replicas(&target, node);
            if state == MemberState::Filling && filled {
                tracing::info!(node, "node {node} holds its share of replicas");
                self.set_member_state(node, None).await;
            }
        }
    }

    /// Proposes a member's state to group 0 (at its leader); a failure is
    /// logged, and the next round tries again.
    async fn set_member_state(&self, node: NodeId, state: Option<MemberState>) {
        let command = Command::SetMemberState { node, state };
        if let Err(err) = self.groups[CONTROL_GROUP].propose(command).await {
            tracing::warn!(node, error = %err, "recording a member's state failed; retrying");
        }
    }

    /// Applies, in one group this node leads, one move that puts a
    /// replica on a filling member.
    async fn fill_one(&self) {
        let states = self.member_states();
        let filling: BTreeSet<NodeId> = states
            .iter()
            .filter(|(_, s)| **s == MemberState::Filling)
            .map(|(n, _)| *n)
            .collect();
        if filling.is_empty() {
            return;
        }
        let led: BTreeSet<u32> = self
            .groups
            .iter()
            .skip(CONTROL_GROUP + 1)
            .filter(|g| g.leads() && !g.changing_membership())
            .map(|g| g.index())
            .collect();
        if led.is_empty() {
            return;
        }
        let Some((current, target)) = self.planned().await else {
            return;
        };
        let control = &self.groups[CONTROL_GROUP];
        let replication = self.replication();
        let moves = placement::moves(&current, &target);
        // A move left half done (its removal failed after the new replica
        // was added): the extra replica goes first.
        let extra = moves.iter().find(|m| {
            m.to.is_none()
                && led.contains(&(m.group as u32))
                && current.groups[m.group].len() > replication
        });
        if let Some(m) = extra {
            let (group, from) = (m.group as u32, m.from.expect("a removal names its node"));
            self.finish_move(group, from).await;
            return;
        }
        let chosen = moves.into_iter().find(|m| {
            m.to.is_some_and(|to| filling.contains(&to))
                && m.from.is_some()
                && led.contains(&(m.group as u32))
        });
        let Some(m) = chosen else {
            return;
        };
        let (group, from, to) = (m.group as u32, m.from.expect("found"), m.to.expect("found"));
        if from == self.node_id {
            // Its own replica moves: the group's next leader moves it.
            let away = MemberChange::LeadAway { node: self.node_id };
            if let Err(err) = self.change_member(group, away).await {
                tracing::debug!(group, error = %err, "handing the group over before its replica moves");
            }
            return;
        }
        let Some(http_addr) = control.member_http_addr(to) else {
            return;
        };
        // A filling member that stopped answering is self-healing's.
        if !self.all_answer(&[to]).await {
            return;
        }
        tracing::warn!(
            group,
            from,
            to,
            "rebalancing: moving group {group}'s replica from node {from} to the filling node {to}"
        );
        let add = MemberChange::Add {
            node: to,
            http_addr,
        };
        match self.change_member(group, add).await {
            Ok(_) => self.finish_move(group, from).await,
            Err(err) => tracing::warn!(
                group,
                from,
                to,
                error = %err,
                "adding a replica on a filling node failed; planned again next round"
            ),
        }
    }

    /// Removes `from`'s replica of `group`, the second half of a move.
    async fn finish_move(&self, group: u32, from: NodeId) {
        match self
            .change_member(group, MemberChange::Remove { node: from })
            .await
        {
            Ok(_) => {
                self.balancing.moves.fetch_add(1, Ordering::Relaxed);
                tracing::info!(group, from, "replica moved onto a filling node");
            }
            Err(err) => tracing::warn!(
                group,
                from,
                error = %err,
                "removing the replica a filling node took over failed; planned again next round"
            ),
        }
    }

    /// Marks (or unmarks) `node` as draining, at group 0's leader; answers
    /// whether that changed it. A format of cluster version 2.
    pub(super) async fn set_draining(
        &self,
        node: NodeId,
        draining: bool,
    ) -> Result<bool, EngineError> {
        let current = self.cluster_version();
        if current < 2 {
            return Err(crate::error::MembershipError::NeedsVersion {
                what: "marking a member as draining",
                needed: 2,
                current,
            }
            .into());
        }
        let state = draining.then_some(MemberState::Draining);
        match self.groups[CONTROL_GROUP]
            .propose(Command::SetMemberState { node, state })
            .await?
        {
            Applied::MemberState { changed, .. } => Ok(changed),
            other => unreachable!("a member state applied as {other:?}"),
        }
    }

    /// The status document's `rebalancing` section.
    pub(super) fn balancing_status(&self) -> serde_json::Value {
        let states: BTreeMap<String, &str> = self
            .member_states()
            .into_iter()
            .map(|(n, s)| (n.to_string(), s.as_str()))
            .collect();
        let empty: Vec<(NodeId, u64)> = self
            .balancing
            .empty
            .lock()
            .expect("balancing lock")
            .iter()
            .map(|(n, since)| (*n, since.elapsed().as_secs()))
            .collect();
        serde_json::json!({
            "after_secs": self.fill_after.map(|d| d.as_secs()),
            "members": states,
            "empty": empty,
            "moves": self.balancing.moves.load(Ordering::Relaxed),
        })
    }
}
