//! Which groups this node holds a copy of, and how it reaches the groups
//! it holds none of.
//!
//! A node holds a group while it is a member (voter or learner) of it. A
//! replica moved away (`POST /_runnel/cluster/groups/G/members?remove=N`)
//! is never told so: the group's leader stops replicating to a node as
//! soon as the change that removes it is appended. So a member that has
//! heard no leader for a while asks its peers who leads the group
//! ([`LeaderView`]), and asks the leader its membership (so does a copy
//! whose own membership leaves it out: a leader that removed itself).
//! Once the leader holds a committed membership that leaves this node
//! out, set by a newer entry than this copy's own (a deposed leader's
//! older one says nothing), the node drops its copy:
//!
//! 1. it shuts the group's Raft down (no more elections, no more records);
//! 2. it notes in `DATA_DIR/left-groups` the group and the log's end
//!    position: every record of the group before it belongs to the
//!    dropped copy, which recovery skips;
//! 3. it deletes the group's snapshot file and empties the group's state,
//!    so checkpoints no longer wait for it nor keep its bytes.
//!
//! A group left is added again like a new node. While the node runs on,
//! it takes the group back once the group's leader names it a member in
//! a membership newer than the one that removed it: it starts the
//! group's Raft afresh, empty, and the leader catches it up. After a
//! restart a group it left starts empty and uninitialized (recovery
//! skips the dropped copy's records), and is held again once added.
//!
//! Requests for a group this node does not hold (it left it, was never
//! added to it, or joined and has not been added yet) are routed to the
//! group's leader as a peer that holds it last named it, asked again
//! every second ([`follow_groups`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runnel_core::StreamsState;
use runnel_log::Log;

use crate::datadir::{write_file_durably, OpenError};
use crate::raft::group::RaftGroup;
use crate::raft::journal::GroupLog;
use crate::raft::snapshot;
use crate::raft::starter::RaftStarter;
use crate::raft::state_machine::GroupShared;
use crate::raft::transport::{http_addr, LeaderMembers, LeaderView, Transport};
use crate::raft::{LogId, NodeId};

/// The file in a data directory that lists the groups this node left.
pub const LEFT_FILE: &str = "left-groups";

/// How often the groups this node does not hold are looked at.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);
/// How long a known leader of a group held elsewhere is trusted before
/// it is asked for again.
const HINT_FOR: Duration = Duration::from_secs(1);
/// How long a member hears no leader before it asks whether it was
/// removed from the group.
const LEADERLESS_BEFORE_ASKING: Duration = Duration::from_secs(2);

/// The groups this node left, and where their leaders are when it holds
/// no copy of them.
#[derive(Debug)]
pub struct Hosting {
    data_dir: PathBuf,
    /// Group to the log position this node left it at.
    left: Mutex<BTreeMap<u32, u64>>,
    /// The groups whose copy this process shut down, each with the log
    /// entry that set the membership removing this node: a membership
    /// from a later one that names the node again adds it back.
    stopped: Mutex<BTreeMap<u32, Option<LogId>>>,
    /// For groups this node holds no copy of: their leaders.
    hints: Mutex<BTreeMap<u32, Hint>>,
}

/// A group's leader as a peer named it.
#[derive(Debug, Clone)]
struct Hint {
    leader: NodeId,
    /// The leader's HTTP address.
    addr: String,
    learnt: tokio::time::Instant,
    /// The leader answered its membership, and this node is not in it
    /// (rather than an empty copy still to catch up).
    elsewhere: bool,
}

impl Hosting {
    /// Reads `DATA_DIR/left-groups` (none: no group left).
    pub fn load(data_dir: &Path) -> Result<Hosting, OpenError> {
        let path = data_dir.join(LEFT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(OpenError::Config(Box::new(LeftFileError::Read {
                    path,
                    source,
                })))
            }
        };
        let left = parse_left(&text).map_err(|line| {
            OpenError::Config(Box::new(LeftFileError::Line {
                path: path.clone(),
                line: line.to_string(),
            }))
        })?;
        Ok(Hosting {
            data_dir: data_dir.to_path_buf(),
            left: Mutex::new(left),
            stopped: Mutex::default(),
            hints: Mutex::default(),
        })
    }

    /// The log position this node left `group` at, if it left it.
    pub fn left_at(&self, group: u32) -> Option<u64> {
        self.left.lock().expect("left lock").get(&group).copied()
    }

    pub fn has_left(&self, group: u32) -> bool {
        self.left_at(group).is_some()
    }

    /// The entry that set the membership this node's copy of `group` was
    /// dropped for (`None` for a group not stopped, or if unknown).
    fn removed_by(&self, group: u32) -> Option<LogId> {
        let stopped = self.stopped.lock().expect("stopped lock");
        stopped.get(&group).copied().flatten()
    }

    /// Whether this process shut its copy of `group` down and has not
    /// taken the group back.
    pub fn stopped(&self, group: u32) -> bool {
        self.stopped
            .lock()
            .expect("stopped lock")
            .contains_key(&group)
    }

    /// Whether this node holds nothing of `group`: it shut its copy down,
    /// or left it before a restart and has not been added again.
    pub(crate) fn dropped(&self, group: &RaftGroup) -> bool {
        self.stopped(group.index()) || (self.has_left(group.index()) && group.members().is_empty())
    }

    /// Notes, durably, that this node left `group` at log `position`.
    fn mark_left(&self, group: u32, position: u64) -> std::io::Result<()> {
        let mut left = self.left.lock().expect("left lock");
        left.insert(group, position);
        write_file_durably(&self.data_dir, LEFT_FILE, &format_left(&left))
    }

    /// The leader (id and HTTP address) of `group`, which this node does
    /// not hold, as a peer last named it.
    pub fn hint(&self, group: u32) -> Option<(NodeId, String)> {
        let hints = self.hints.lock().expect("hints lock");
        hints.get(&group).map(|h| (h.leader, h.addr.clone()))
    }

    /// Whether `group`'s leader said this node is no member of it: the
    /// group is served elsewhere, and this node has nothing to catch up.
    pub fn elsewhere(&self, group: u32) -> bool {
        let hints = self.hints.lock().expect("hints lock");
        hints.get(&group).is_some_and(|h| h.elsewhere)
    }

    /// The leaders this node routes to for groups it does not hold.
    pub fn hinted_leaders(&self) -> Vec<NodeId> {
        let hints = self.hints.lock().expect("hints lock");
        hints.values().map(|h| h.leader).collect()
    }

    fn fresh_hint(&self, group: u32) -> bool {
        let hints = self.hints.lock().expect("hints lock");
        hints
            .get(&group)
            .is_some_and(|h| h.learnt.elapsed() < HINT_FOR)
    }

    fn set_hint(&self, group: u32, hint: Option<Hint>) {
        let mut hints = self.hints.lock().expect("hints lock");
        match hint {
            Some(hint) => {
                hints.insert(group, hint);
            }
            None => {
                hints.remove(&group);
            }
        }
    }
}

/// Why `DATA_DIR/left-groups` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LeftFileError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {line:?} is not \"GROUP POSITION\"")]
    Line { path: PathBuf, line: String },
}

/// `left-groups`: one `GROUP POSITION` line per group left; the first line
/// that is not is answered.
fn parse_left(text: &str) -> Result<BTreeMap<u32, u64>, &str> {
    let mut left = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let parsed = match (fields.next(), fields.next(), fields.next()) {
            (Some(group), Some(position), None) => group.parse().ok().zip(position.parse().ok()),
            _ => None,
        };
        let (group, position) = parsed.ok_or(line)?;
        left.insert(group, position);
    }
    Ok(left)
}

fn format_left(left: &BTreeMap<u32, u64>) -> String {
    left.iter().map(|(g, pos)| format!("{g} {pos}\n")).collect()
}

/// Whether this node's copy of `group` counts it a member (voter or
/// learner). False for a group not initialized here.
pub(crate) fn is_member(group: &RaftGroup, me: NodeId) -> bool {
    let metrics = group.raft().metrics();
    let metrics = metrics.borrow();
    metrics
        .membership_config
        .membership()
        .get_node(&me)
        .is_some()
}

/// Whether this node's copy of `group` has applied a membership that
/// leaves this node out.
fn removed_here(group: &RaftGroup, me: NodeId) -> bool {
    let metrics = group.raft().metrics();
    let metrics = metrics.borrow();
    let stored = &metrics.membership_config;
    let membership = stored.membership();
    membership.nodes().next().is_some()
        && membership.get_node(&me).is_none()
        && *stored.log_id() <= metrics.last_applied
}

/// The log entry that set this node's copy's membership.
fn own_membership_at(group: &RaftGroup) -> Option<LogId> {
    *group.raft().metrics().borrow().membership_config.log_id()
}

/// Whether a leader's `membership` removes node `me`: committed, without
/// it, and set by an entry newer than the copy's own membership (`mine`;
/// as new will do when the copy's own already leaves the node out). A
/// deposed leader's older membership, from before the node was added,
/// removes nothing.
fn leaves_out(
    membership: &LeaderMembers,
    me: NodeId,
    mine: Option<LogId>,
    same_will_do: bool,
) -> bool {
    let newer = membership.at > mine || (same_will_do && membership.at == mine);
    membership.committed && !membership.nodes.contains(&me) && newer
}

/// Whether this node holds a copy of `group`: a member whose copy runs
/// (a copy started since the node left the group counts).
pub(crate) fn holds(group: &RaftGroup, me: NodeId, hosting: &Hosting) -> bool {
    !hosting.stopped(group.index()) && is_member(group, me)
}

/// Keeps the leaders of the groups this node does not hold known, drops
/// this node's copy of a group it was removed from, and takes a group
/// back once it is added again (see the module docs). Runs until aborted.
pub(super) async fn follow_groups<T: Transport>(
    groups: Vec<Arc<RaftGroup>>,
    shares: Vec<GroupShared>,
    starter: Arc<RaftStarter<T>>,
    hosting: Arc<Hosting>,
) {
    let me = starter.node_id;
    let transport = &*starter.transport;
    let mut leaderless_since = BTreeMap::new();
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        for (group, shared) in groups.iter().zip(&shares) {
            let index = group.index();
            if !holds(group, me, &hosting) {
                leaderless_since.remove(&index);
                // A copy whose own committed membership leaves this node
                // out (a leader that removed itself sees that first hand)
                // is dropped once the group's leader confirms it. A node
                // being added may apply older memberships without it
                // first: its leader's has it.
                let stopped = hosting.stopped(index);
                let maybe_removed = !stopped && removed_here(group, me);
                if hosting.fresh_hint(index) && !maybe_removed && !stopped {
                    continue;
                }
                let found = find_leader(transport, index, hosting.hint(index)).await;
                let members = found.as_ref().and_then(|(_, view)| view.members.as_ref());
                if maybe_removed
                    && members.is_some_and(|m| leaves_out(m, me, own_membership_at(group), true))
                {
                    leave(
                        group,
                        shared,
                        &hosting,
                        &starter.log,
                        members.and_then(|m| m.at),
                    )
                    .await;
                }
                if stopped && members.is_some_and(|m| adds_back(m, me, hosting.removed_by(index))) {
                    take_back(group, shared, &starter, &hosting).await;
                    continue;
                }
                let hint = found.and_then(|(leader, view)| {
                    let (_, raft_addr) = view.leader?;
                    Some(Hint {
                        leader,
                        addr: http_addr(&raft_addr).ok()?,
                        learnt: tokio::time::Instant::now(),
                        // An answer without the membership (the leader
                        // itself did not answer) changes nothing about it.
                        elsewhere: view
                            .members
                            .map_or(hosting.elsewhere(index), |m| !m.nodes.contains(&me)),
                    })
                });
                hosting.set_hint(index, hint);
                continue;
            }
            hosting.set_hint(index, None);
            if group.leader().is_some() {
                leaderless_since.remove(&index);
                continue;
            }
            let since = *leaderless_since
                .entry(index)
                .or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < LEADERLESS_BEFORE_ASKING {
                continue;
            }
            let members = find_leader(transport, index, None)
                .await
                .and_then(|(_, view)| view.members);
            // Only a membership newer than this copy's, which has this node.
            if let Some(m) = members.filter(|m| leaves_out(m, me, own_membership_at(group), false))
            {
                leave(group, shared, &hosting, &starter.log, m.at).await;
                leaderless_since.remove(&index);
            }
        }
    }
}

/// Asks the peers (`first` before the others) who leads `group`, then
/// that leader itself: its answer, with its id.
async fn find_leader<T: Transport>(
    transport: &T,
    group: u32,
    first: Option<(NodeId, String)>,
) -> Option<(NodeId, LeaderView)> {
    let mut peers = transport.peer_ids();
    if let Some((node, _)) = first {
        peers.retain(|p| *p != node);
        peers.insert(0, node);
    }
    for peer in peers {
        let Ok(view) = transport.leader_view(peer, group).await else {
            continue;
        };
        let Some((leader, raft_addr)) = view.leader.clone() else {
            continue;
        };
        if leader == peer {
            return Some((leader, view));
        }
        // A leader that joined after this node started may not be linked.
        transport.learn(leader, &raft_addr);
        match transport.leader_view(leader, group).await {
            Ok(own) if own.members.is_some() => return Some((leader, own)),
            // It no longer leads, or did not answer: what the peer said
            // is still the best guess.
            _ => return Some((leader, view)),
        }
    }
    None
}

/// Drops this node's copy of `group`, which a committed membership (set
/// by the entry `removed_by`) no longer names (see the module docs).
async fn leave(
    group: &RaftGroup,
    shared: &GroupShared,
    hosting: &Hosting,
    log: &Log,
    removed_by: Option<LogId>,
) {
    let index = group.index();
    tracing::info!(
        group = index,
        "this node is no longer a member of the group: dropping its copy"
    );
    if let Err(err) = group.raft().shutdown().await {
        tracing::warn!(group = index, error = %err, "stopping the group's raft");
    }
    hosting
        .stopped
        .lock()
        .expect("stopped lock")
        .insert(index, removed_by);
    let position = log.end_position();
    if let Err(err) = hosting.mark_left(index, position) {
        // The copy is stopped; after a restart it is found removed again.
        tracing::error!(group = index, error = %err, "could not note the group as left");
        return;
    }
    if let Err(err) = snapshot::remove(&hosting.data_dir, index) {
        tracing::warn!(group = index, error = %err, "deleting the group's snapshot");
    }
    *shared.persisted.lock().expect("snapshot lock") = None;
    *shared.index.lock().expect("raft index lock") = GroupLog::default();
    shared.view.apply(|state| *state = StreamsState::new());
}

/// Whether a leader's `membership` names node `me` again after the one
/// set by `removed_by` left it out.
fn adds_back(membership: &LeaderMembers, me: NodeId, removed_by: Option<LogId>) -> bool {
    membership.nodes.contains(&me) && membership.at > removed_by
}

/// Starts this node's copy of `group`, dropped while the node ran, afresh
/// and empty: the group's leader, which named this node a member again,
/// catches it up as it would a new node.
async fn take_back<T: Transport>(
    group: &RaftGroup,
    shared: &GroupShared,
    starter: &RaftStarter<T>,
    hosting: &Hosting,
) {
    let index = group.index();
    match starter.restart_empty(shared).await {
        Ok(raft) => {
            group.raft_slot().replace(raft);
            hosting.stopped.lock().expect("stopped lock").remove(&index);
            tracing::info!(
                group = index,
                "this node was added to the group again: taking it back"
            );
        }
        Err(err) => tracing::warn!(group = index, error = %err, "restarting the group's raft"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn only_a_newer_committed_membership_without_the_node_removes_it() {
        let membership = |nodes: Vec<NodeId>, committed, at| LeaderMembers {
            nodes,
            committed,
            at,
        };
        let mine = Some(log_id(2, 40));
        let newer = Some(log_id(3, 90));
        let older = Some(log_id(1, 10));
        // Removed by a later change.
        assert!(leaves_out(
            &membership(vec![1, 2, 3], true, newer),
            4,
            mine,
            false
        ));
        // Not committed yet, or still a member.
        assert!(!leaves_out(
            &membership(vec![1, 2, 3], false, newer),
            4,
            mine,
            false
        ));
        assert!(!leaves_out(
            &membership(vec![1, 2, 4], true, newer),
            4,
            mine,
            false
        ));
        // A deposed leader's membership from before node 4 was added.
        assert!(!leaves_out(
            &membership(vec![1, 2, 3], true, older),
            4,
            mine,
            false
        ));
        // The same membership as the copy's own: only when that already
        // leaves the node out.
        assert!(!leaves_out(
            &membership(vec![1, 2, 3], true, mine),
            4,
            mine,
            false
        ));
        assert!(leaves_out(
            &membership(vec![1, 2, 3], true, mine),
            4,
            mine,
            true
        ));
    }

    #[test]
    fn only_a_membership_newer_than_the_removal_that_names_the_node_adds_it_back() {
        let membership = |nodes: Vec<NodeId>, at| LeaderMembers {
            nodes,
            committed: false,
            at,
        };
        let removal = Some(log_id(3, 90));
        // Added again (as a learner, not committed yet: enough to start).
        assert!(adds_back(
            &membership(vec![1, 2, 3, 4], Some(log_id(3, 95))),
            4,
            removal
        ));
        assert!(adds_back(
            &membership(vec![1, 2, 4], Some(log_id(5, 7))),
            4,
            removal
        ));
        // Not named, or named by the membership it was removed from, or by
        // a deposed leader's older one.
        assert!(!adds_back(
            &membership(vec![1, 2, 3], Some(log_id(3, 95))),
            4,
            removal
        ));
        assert!(!adds_back(
            &membership(vec![1, 2, 3, 4], Some(log_id(2, 40))),
            4,
            removal
        ));
        assert!(!adds_back(
            &membership(vec![1, 2, 3, 4], removal),
            4,
            removal
        ));
    }

    #[test]
    fn left_groups_round_trip_and_refuse_garbage() {
        let left = BTreeMap::from([(0, 10), (7, 123_456)]);
        assert_eq!(parse_left(&format_left(&left)).unwrap(), left);
        assert_eq!(parse_left("").unwrap(), BTreeMap::new());
        assert!(parse_left("3\n").is_err());
        assert!(parse_left("3 x\n").is_err());
        assert!(parse_left("3 4 5\n").is_err());
    }

    #[test]
    fn marking_a_group_left_survives_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let hosting = Hosting::load(dir.path()).unwrap();
        assert!(!hosting.has_left(2));
        hosting.mark_left(2, 4096).unwrap();
        hosting.mark_left(5, 8192).unwrap();
        let again = Hosting::load(dir.path()).unwrap();
        assert_eq!(again.left_at(2), Some(4096));
        assert_eq!(again.left_at(5), Some(8192));
        assert_eq!(again.left_at(0), None);
        std::fs::write(dir.path().join(LEFT_FILE), "two 3\n").unwrap();
        assert!(Hosting::load(dir.path()).is_err());
    }
}
