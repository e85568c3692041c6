//! What the control group's log records of the cluster itself: its id,
//! so that nodes of different clusters can tell each other apart (a node
//! refuses Raft peers and joins of another cluster), and the nodes
//! removed from it for good, so that a removed node brought back on its
//! old data directory is refused instead of disturbing its old groups.
//!
//! The first [`Command::SetClusterId`](crate::Command::SetClusterId)
//! applied names the cluster for good; later ones change nothing and
//! learn the id that stands. [`Command::RetireNode`](crate::Command::RetireNode)
//! adds a node id to the retired ones, which are never members again.
//! [`Command::SetReplication`](crate::Command::SetReplication) sets how
//! many replicas each data group has: the node that forms the cluster
//! proposes its `--replication-factor` as the initial one (applied only
//! while none is set), and `runnel ctl node rebalance` changes it.
//! [`Command::PreferLeaders`](crate::Command::PreferLeaders) records which
//! node each group should be led by (the placement's balanced choice: a
//! forming cluster's first, then `runnel ctl node`'s after each change of
//! placement); each group's leader hands its leadership there.
//! [`Command::PauseHealing`](crate::Command::PauseHealing) pauses or
//! resumes the cluster's self-healing (replicas moved off dead nodes by
//! the groups' leaders; `runnel ctl rebalance pause|resume`). All of these
//! are part of the state, so checkpoints and snapshots carry them to
//! replicas that join later.

use crate::error::CoreError;
use crate::state::{Applied, StreamsState};

/// The longest cluster id accepted.
pub const MAX_LEN: usize = 64;

/// The most groups a cluster may have (so the most preferred leaders one
/// command may set).
pub const MAX_GROUPS: u32 = 4096;

/// The highest cluster version this build supports: the formats it may
/// write once the cluster's control group records that version (see
/// [`crate::upgrade`]). 1 is release 0.1.0's formats; 2 adds restoring a
/// group from a backup (command tag 21, checkpoint version 11), the
/// recorded cluster version itself (command tag 22, checkpoint version 12)
/// and members' states (command tag 23, in checkpoint version 12).
pub const CLUSTER_VERSION: u32 = 2;

/// The most replicas of a group a cluster may ask for: more voters than
/// this make every write wait on a quorum too large to be useful.
pub const MAX_REPLICATION: u32 = 15;

/// Why a cluster id is refused (see [`validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterIdError {
    #[error("a cluster id has 1 to {MAX_LEN} characters, not {0}")]
    Length(usize),
    #[error("a cluster id holds only letters, digits, '.', '_' and '-', not {0:?}")]
    Character(char),
}

/// Checks a cluster id: 1 to [`MAX_LEN`] characters of ASCII letters,
/// digits, `.`, `_` and `-` (it travels in file names, headers and logs).
pub fn validate(id: &str) -> Result<(), ClusterIdError> {
    if id.is_empty() || id.len() > MAX_LEN {
        return Err(ClusterIdError::Length(id.len()));
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(ClusterIdError::Character(c)),
        None => Ok(()),
    }
}

impl StreamsState {
    /// The id the cluster was given, once the control group applied one.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// Whether node `node` was removed from the cluster for good.
    pub fn is_retired(&self, node: u64) -> bool {
        self.retired_nodes.contains(&node)
    }

    /// The nodes removed from the cluster for good, in id order.
    pub fn retired_nodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.retired_nodes.iter().copied()
    }

    /// The replication factor of the cluster's data groups, once set.
    pub fn replication(&self) -> Option<u32> {
        self.replication
    }

    pub(crate) fn set_replication(
        &mut self,
        factor: u32,
        initial: bool,
    ) -> Result<Applied, CoreError> {
        if !(1..=MAX_REPLICATION).contains(&factor) {
            return Err(CoreError::InvalidReplication { factor });
        }
        let set = !(initial && self.replication.is_some()) && self.replication != Some(factor);
        if set {
            self.replication = Some(factor);
        }
        Ok(Applied::Replication {
            factor: self.replication.unwrap_or(factor),
            set,
        })
    }

    /// Whether any group's preferred leader is set.
    pub fn has_preferred_leaders(&self) -> bool {
        !self.preferred_leaders.is_empty()
    }

    /// The node group `group` should be led by, once set.
    pub fn preferred_leader(&self, group: u32) -> Option<u64> {
        self.preferred_leaders.get(&group).copied()
    }

    pub(crate) fn prefer_leaders(
        &mut self,
        leaders: &[(u32, u64)],
        initial: bool,
    ) -> Result<Applied, CoreError> {
        if let Some((group, _)) = leaders.iter().find(|(g, _)| *g >= MAX_GROUPS) {
            return Err(CoreError::InvalidGroup { group: *group });
        }
        if initial && !self.preferred_leaders.is_empty() {
            return Ok(Applied::PreferredLeaders { changed: false });
        }
        let mut changed = false;
        for (group, node) in leaders {
            changed |= self.preferred_leaders.insert(*group, *node) != Some(*node);
        }
        Ok(Applied::PreferredLeaders { changed })
    }

    /// Whether the cluster's self-healing is paused.
    pub fn healing_paused(&self) -> bool {
        self.healing_paused
    }

    pub(crate) fn pause_healing(&mut self, paused: bool) -> Applied {
        let changed = self.healing_paused != paused;
        self.healing_paused = paused;
        Applied::Healing { paused, changed }
    }

    pub(crate) fn retire_node(&mut self, node: u64) -> Applied {
        self.zones.remove(&node);
        self.member_states.remove(&node);
        Applied::NodeRetired {
            newly: self.retired_nodes.insert(node),
        }
    }

    pub(crate) fn set_cluster_id(&mut self, id: &str) -> Result<Applied, CoreError> {
        validate(id).map_err(CoreError::InvalidClusterId)?;
        let set = self.cluster_id.is_none();
        let id = self.cluster_id.get_or_insert_with(|| id.to_string());
        Ok(Applied::ClusterId {
            id: id.clone(),
            set,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, Entry};

    /// Applies `command` after a round trip through the log's encoding.
    fn run(state: &mut StreamsState, command: Command) -> Result<Applied, CoreError> {
        let entry = Entry { now_ms: 1, command };
        state.apply(&Entry::decode(&entry.encode()).expect("decodes"), 0, 0)
    }

    fn name(state: &mut StreamsState, id: &str) -> Result<Applied, CoreError> {
        run(state, Command::SetClusterId { id: id.into() })
    }

    #[test]
    fn retired_nodes_stay_retired() {
        let mut state = StreamsState::new();
        assert!(!state.is_retired(3));
        let retire = |state: &mut StreamsState, node| run(state, Command::RetireNode { node });
        assert_eq!(
            retire(&mut state, 3),
            Ok(Applied::NodeRetired { newly: true })
        );
        assert_eq!(
            retire(&mut state, 3),
            Ok(Applied::NodeRetired { newly: false })
        );
        assert_eq!(
            retire(&mut state, 1),
            Ok(Applied::NodeRetired { newly: true })
        );
        assert!(state.is_retired(3) && state.is_retired(1) && !state.is_retired(2));
        assert_eq!(state.retired_nodes().collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn the_first_id_applied_stays() {
        let mut state = StreamsState::new();
        assert_eq!(state.cluster_id(), None);
        assert_eq!(
            name(&mut state, "prod-eu"),
            Ok(Applied::ClusterId {
                id: "prod-eu".into(),
                set: true
            })
        );
        assert_eq!(
            name(&mut state, "other"),
            Ok(Applied::ClusterId {
                id: "prod-eu".into(),
                set: false
            })
        );
        assert_eq!(state.cluster_id(), Some("prod-eu"));
    }

    #[test]
    fn bad_ids_are_refused_and_change_nothing() {
        let mut state = StreamsState::new();
        for bad in ["", "a b", "x/y", "é", &"a".repeat(MAX_LEN + 1)] {
            assert!(
                matches!(name(&mut state, bad), Err(CoreError::InvalidClusterId(_))),
                "{bad:?} accepted"
            );
        }
        assert_eq!(state.cluster_id(), None);
        assert!(validate(&"a".repeat(MAX_LEN)).is_ok());
        assert!(validate("rc-0123456789abcdef_A.b").is_ok());
    }

    #[test]
    fn checkpoints_carry_the_id_and_retired_nodes_and_the_digest_sees_them() {
        let mut state = StreamsState::new();
        let unnamed = state.digest();
        name(&mut state, "prod-eu").expect("named");
        assert_ne!(state.digest(), unnamed);
        let named = state.digest();
        run(&mut state, Command::RetireNode { node: 7 }).expect("retired");
        assert_ne!(state.digest(), named);
        let retired = state.digest();
        replicate(&mut state, 3, true).expect("set");
        assert_ne!(state.digest(), retired);
        let replicated = state.digest();
        prefer(&mut state, &[(1, 2), (2, 3)], true).expect("preferred");
        assert_ne!(state.digest(), replicated);
        let bytes = state.capture_checkpoint().encode();
        let restored = StreamsState::decode_checkpoint(&bytes).expect("decodes");
        assert_eq!(restored.cluster_id(), Some("prod-eu"));
        assert!(restored.is_retired(7));
        assert_eq!(restored.replication(), Some(3));
        assert_eq!(restored.preferred_leader(1), Some(2));
        assert_eq!(restored.preferred_leader(2), Some(3));
        assert_eq!(restored.preferred_leader(3), None);
        assert_eq!(restored.digest(), state.digest());
        let unnamed = StreamsState::new().capture_checkpoint().encode();
        let restored = StreamsState::decode_checkpoint(&unnamed).expect("decodes");
        assert_eq!(restored.cluster_id(), None);
        assert_eq!(restored.replication(), None);
        assert_eq!(restored.preferred_leader(1), None);
    }

    fn prefer(
        state: &mut StreamsState,
        leaders: &[(u32, u64)],
        initial: bool,
    ) -> Result<Applied, CoreError> {
        let leaders = leaders.to_vec();
        run(state, Command::PreferLeaders { leaders, initial })
    }

    #[test]
    fn initial_leaders_set_only_when_none_are_and_later_ones_replace_theirs() {
        let mut state = StreamsState::new();
        let applied = |changed| Ok(Applied::PreferredLeaders { changed });
        assert_eq!(prefer(&mut state, &[(0, 1), (1, 2)], true), applied(true));
        // Another forming node's placement does not override the first.
        assert_eq!(prefer(&mut state, &[(1, 3)], true), applied(false));
        assert_eq!(state.preferred_leader(1), Some(2));
        assert_eq!(prefer(&mut state, &[(1, 3), (2, 1)], false), applied(true));
        assert_eq!(prefer(&mut state, &[(1, 3)], false), applied(false));
        assert_eq!(
            [0, 1, 2, 3].map(|g| state.preferred_leader(g)),
            [Some(1), Some(3), Some(1), None]
        );
    }

    #[test]
    fn a_group_beyond_the_most_a_cluster_has_is_refused_and_changes_nothing() {
        let mut state = StreamsState::new();
        assert_eq!(
            prefer(&mut state, &[(1, 2), (MAX_GROUPS, 2)], false),
            Err(CoreError::InvalidGroup { group: MAX_GROUPS })
        );
        assert_eq!(state.preferred_leader(1), None);
        assert!(prefer(&mut state, &[(MAX_GROUPS - 1, 2)], false).is_ok());
    }

    fn replicate(
        state: &mut StreamsState,
        factor: u32,
        initial: bool,
    ) -> Result<Applied, CoreError> {
        run(state, Command::SetReplication { factor, initial })
    }

    #[test]
    fn the_initial_factor_sets_only_an_unset_one_and_a_change_replaces_it() {
        let mut state = StreamsState::new();
        assert_eq!(state.replication(), None);
        let applied = |factor, set| Ok(Applied::Replication { factor, set });
        assert_eq!(replicate(&mut state, 3, true), applied(3, true));
        // A second forming node's flag does not override the first.
        assert_eq!(replicate(&mut state, 5, true), applied(3, false));
        assert_eq!(replicate(&mut state, 5, false), applied(5, true));
        assert_eq!(replicate(&mut state, 5, false), applied(5, false));
        assert_eq!(replicate(&mut state, 2, false), applied(2, true));
        assert_eq!(state.replication(), Some(2));
    }

    #[test]
    fn healing_pauses_and_resumes_and_checkpoints_carry_it() {
        let mut state = StreamsState::new();
        assert!(!state.healing_paused());
        let pause = |state: &mut StreamsState, paused| run(state, Command::PauseHealing { paused });
        let before = state.digest();
        assert_eq!(
            pause(&mut state, true),
            Ok(Applied::Healing {
                paused: true,
                changed: true
            })
        );
        assert_ne!(state.digest(), before);
        assert_eq!(
            pause(&mut state, true),
            Ok(Applied::Healing {
                paused: true,
                changed: false
            })
        );
        let bytes = state.capture_checkpoint().encode();
        let restored = StreamsState::decode_checkpoint(&bytes).expect("decodes");
        assert!(restored.healing_paused());
        assert_eq!(restored.digest(), state.digest());
        pause(&mut state, false).expect("resumed");
        assert!(!state.healing_paused());
    }

    #[test]
    fn factors_out_of_range_are_refused_and_change_nothing() {
        let mut state = StreamsState::new();
        for bad in [0, MAX_REPLICATION + 1, u32::MAX] {
            for initial in [true, false] {
                assert_eq!(
                    replicate(&mut state, bad, initial),
                    Err(CoreError::InvalidReplication { factor: bad })
                );
            }
        }
        assert_eq!(state.replication(), None);
        assert!(replicate(&mut state, MAX_REPLICATION, false).is_ok());
    }
}
