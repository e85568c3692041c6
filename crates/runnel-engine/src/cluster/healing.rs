//! Self-healing: a replica on a member that has not answered for
//! `--dead-node-after` moves to a live node, without an operator.
//!
//! Each group's own leader heals its group, so no node needs to act at
//! another's leader: every few seconds a node asks the members of the
//! groups it leads whether they answer, and notes since when each has
//! not. Once one has been silent for longer than the limit, the node
//! plans the whole cluster's placement without the silent members (the
//! same pure planner as `runnel ctl node`: zones, balance, fewest moves;
//! every group's voters read from its leader) and applies, in the groups
//! it leads, the moves that take a replica off a silent member: the new
//! node is added (a learner caught up, then a voter) before the silent
//! one is removed, so a group never has fewer voters than before. In
//! group 0 the silent voter is made a learner instead: it stays a member
//! of the cluster. One move at a time per node (the moves of a round run
//! in turn), so a node's leaderships bound its concurrent moves.
//!
//! A silent member comes back as a member holding no data group: its
//! copies are dropped when it hears the groups' leaders (`hosting`), and
//! `runnel ctl node rebalance` gives it replicas again. Nothing moves
//! while fewer members answer than the replication factor, nor while the
//! cluster's healing is paused (`runnel ctl rebalance pause`, kept in
//! group 0). Every decision is logged and counted in the status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

// The runtime's clock, which simulations pause and advance.
use tokio::time::Instant;

use runnel_core::{Applied, Command};

use super::membership::members;
use super::ClusterNode;
use crate::api::{GroupEngine, MemberChange};
use crate::control::CONTROL_GROUP;
use crate::error::EngineError;
use crate::placement::{self, Placement};
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;

/// How often a node looks at the members of the groups it leads.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a member may take to answer before it counts as silent.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// What the status shows of self-healing on this node.
#[derive(Debug, Default)]
pub(crate) struct HealingState {
    /// Members of the groups this node leads that do not answer, and
    /// since when.
    silent: std::sync::Mutex<BTreeMap<NodeId, Instant>>,
    /// Replicas this node moved off silent members.
    pub(crate) moves: std::sync::atomic::AtomicU64,
}

/// Runs on every node while `node` lives (see the module docs).
pub(crate) async fn heal(node: Weak<ClusterNode>, dead_after: Duration) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        let dead = node.note_silent_members(dead_after).await;
        if dead.is_empty() || node.healing_paused() {
            continue;
        }
        node.move_off(&dead).await;
    }
}

impl ClusterNode {
    /// Whether the cluster's self-healing is paused (group 0's state).
    pub fn healing_paused(&self) -> bool {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.healing_paused())
    }

    /// Pauses or resumes the cluster's self-healing (at the control
    /// group's leader); answers whether that changed it.
    pub(super) async fn pause_healing(&self, paused: bool) -> Result<bool, EngineError> {
        match self.groups[CONTROL_GROUP]
            .propose(Command::PauseHealing { paused })
            .await?
        {
            Applied::Healing { changed, .. } => Ok(changed),
            other => unreachable!("a pause applied as {other:?}"),
        }
    }

    /// The groups this node leads whose membership is settled.
    fn led_groups(&self) -> Vec<u32> {
        self.groups
            .iter()
            .filter(|g| g.leader() == Some(self.node_id) && !g.changing_membership())
            .map(|g| g.index())
            .collect()
    }

    /// Asks every member of the groups this node leads whether it
    /// answers, notes since when each silent one has been, and answers
    /// those silent for `dead_after` or longer.
    async fn note_silent_members(&self, dead_after: Duration) -> BTreeSet<NodeId> {
        let mut asked: BTreeSet<NodeId> = BTreeSet::new();
        for g in self.led_groups() {
            let (voters, _) = members(&self.groups[g as usize]);
            asked.extend(voters.into_iter().filter(|n| *n != self.node_id));
        }
        let peers = &self.peers_asked;
        let answers = asked.iter().map(|node| async move {
            let asked = peers.leader_view(*node, CONTROL_GROUP as u32);
            let answer = tokio::time::timeout(ANSWER_WITHIN, asked).await;
            (*node, matches!(answer, Ok(Ok(_))))
        });
        let answers = futures::future::join_all(answers).await;
        let now = Instant::now();
        let mut silent = self.healing.silent.lock().expect("healing lock");
        silent.retain(|node, _| asked.contains(node));
        for (node, answered) in answers {
            match answered {
                true => {
                    silent.remove(&node);
                }
                false => {
                    silent.entry(node).or_insert(now);
                }
            }
        }
        silent
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= dead_after)
            .map(|(node, _)| *node)
            .collect()
    }

    /// The members silent for how long, for the status.
    pub(super) fn silent_members(&self) -> Vec<(NodeId, u64)> {
        let silent = self.healing.silent.lock().expect("healing lock");
        silent
            .iter()
            .map(|(node, since)| (*node, since.elapsed().as_secs()))
            .collect()
    }

    /// Every group's voters, the leader first where known: from this
    /// node's copy of the groups it holds, from their leaders for the
    /// others (`None` if any does not answer: the plan would be wrong).
    pub(super) async fn current_placement(&self) -> Option<Placement> {
        let mut groups = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let mut voters: Vec<NodeId> = if self.holds(g) {
                members(g).0.into_iter().collect()
            } else {
                self.members_elsewhere(g.index())
                    .await?
                    .into_iter()
                    .collect()
            };
            if let Some(at) = voters.iter().position(|v| Some(*v) == g.leader()) {
                voters[..=at].rotate_right(1);
            }
            groups.push(voters);
        }
        Some(Placement { groups })
    }

    /// Moves, in the groups this node leads, the replicas on `dead`
    /// members to the nodes the placement without them names.
    async fn move_off(&self, dead: &BTreeSet<NodeId>) {
        let led: Vec<u32> = self
            .led_groups()
            .into_iter()
            .filter(|g| {
                let (voters, _) = members(&self.groups[*g as usize]);
                voters.iter().any(|v| dead.contains(v))
            })
            .collect();
        if led.is_empty() {
            return;
        }
        let control = &self.groups[CONTROL_GROUP];
        let (voters, learners) = members(control);
        // A draining member (`ctl node remove`) takes no replica either.
        let live: Vec<NodeId> = self
            .placeable_members()
            .into_iter()
            .filter(|n| !dead.contains(n))
            .collect();
        let replication = self.replication();
        if live.len() < replication.min(voters.len() + learners.len()) {
            tracing::warn!(
                ?dead,
                live = live.len(),
                replication,
                "members do not answer, but fewer answer than the replication factor: \
                 their replicas stay until they come back or nodes are added"
            );
            return;
        }
        let Some(current) = self.current_placement().await else {
            tracing::debug!("a group's leader did not answer: the placement is planned again");
            return;
        };
        let target = placement::cluster_target(
            &current,
            &live,
            &self.zones(),
            self.groups.len(),
            replication,
        );
        for m in placement::moves(&current, &target) {
            let (Some(from), Some(to)) = (m.from, m.to) else {
                continue;
            };
            if !dead.contains(&from) || !led.contains(&(m.group as u32)) {
                continue;
            }
            let Some(addr) = control.member_http_addr(to) else {
                continue;
            };
            let group = m.group as u32;
            tracing::warn!(
                group,
                from,
                to,
                "node {from} has not answered for longer than --dead-node-after: moving its \
                 replica of group {group} to node {to}"
            );
            let leaves = match group as usize == CONTROL_GROUP {
                true => MemberChange::Demote { node: from },
                false => MemberChange::Remove { node: from },
            };
            let add = MemberChange::Add {
                node: to,
                http_addr: addr,
            };
            let moved = match self.change_member(group, add).await {
                Ok(_) => self.change_member(group, leaves).await,
                Err(e) => Err(e),
            };
            match moved {
                Ok(_) => {
                    self.healing.moves.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(group, from, to, "replica moved off a silent node");
                }
                Err(err) => tracing::warn!(
                    group,
                    from,
                    to,
                    error = %err,
                    "moving a replica off a silent node failed; planned again next round"
                ),
            }
        }
    }
}
