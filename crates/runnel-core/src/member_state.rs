//! What the control group records of a member's part in placement, so
//! that automatic moves and an operator's do not work against each other:
//!
//! - **draining**: `runnel ctl node remove` (or `replace`) is moving the
//!   member's replicas away; nothing moves onto it.
//! - **filling**: it held no replica of a data group for a while (it
//!   joined, or came back after its replicas moved off it); the groups'
//!   leaders move replicas onto it until it holds its share, and the
//!   control group's leader then clears the mark (continuous rebalancing,
//!   in the engine's `cluster::balancing`).
//!
//! [`Command::SetMemberState`](crate::Command::SetMemberState) sets or
//! clears a member's state; a node retired for good loses it. A format of
//! cluster version 2 (see [`crate::upgrade`]).

use crate::error::CoreError;
use crate::state::{Applied, StreamsState};

/// A member's part in placement (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberState {
    Draining,
    Filling,
}

impl MemberState {
    /// The byte a log entry or checkpoint holds for it.
    pub(crate) fn code(self) -> u8 {
        match self {
            MemberState::Draining => 1,
            MemberState::Filling => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<MemberState> {
        match code {
            1 => Some(MemberState::Draining),
            2 => Some(MemberState::Filling),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Draining => "draining",
            MemberState::Filling => "filling",
        }
    }
}

impl StreamsState {
    /// Each member's recorded state (members in neither are absent).
    pub fn member_states(&self) -> &std::collections::BTreeMap<u64, MemberState> {
        &self.member_states
    }

    pub(crate) fn set_member_state(
        &mut self,
        node: u64,
        state: Option<MemberState>,
    ) -> Result<Applied, CoreError> {
        if self.retired_nodes.contains(&node) {
            return Err(CoreError::RetiredMember { node });
        }
        let before = match state {
            Some(state) => self.member_states.insert(node, state),
            None => self.member_states.remove(&node),
        };
        Ok(Applied::MemberState {
            node,
            state,
            changed: before != state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Entry};

    fn run(state: &mut StreamsState, command: Command) -> Result<Applied, CoreError> {
        state.apply(&Entry { now_ms: 1, command }, 0, 0)
    }

    fn set(node: u64, state: Option<MemberState>) -> Command {
        Command::SetMemberState { node, state }
    }

    #[test]
    fn member_states_are_set_cleared_and_forgotten_on_retirement() {
        let mut s = StreamsState::new();
        let applied = run(&mut s, set(4, Some(MemberState::Draining))).unwrap();
        assert_eq!(
            applied,
            Applied::MemberState {
                node: 4,
                state: Some(MemberState::Draining),
                changed: true
            }
        );
        assert!(matches!(
            run(&mut s, set(4, Some(MemberState::Draining))),
            Ok(Applied::MemberState { changed: false, .. })
        ));
        run(&mut s, set(5, Some(MemberState::Filling))).unwrap();
        // Kept by a checkpoint (version 12), and in the digest.
        let bytes = s.encode_checkpoint();
        assert_eq!(bytes[0], 12);
        let decoded = StreamsState::decode_checkpoint(&bytes).unwrap();
        assert_eq!(decoded.member_states(), s.member_states());
        assert_eq!(decoded.digest(), s.digest());
        assert_eq!(decoded.cluster_version(), 1);
        run(&mut s, set(5, None)).unwrap();
        assert_eq!(s.member_states().get(&5), None);
        run(&mut s, Command::RetireNode { node: 4 }).unwrap();
        assert!(s.member_states().is_empty());
        assert!(matches!(
            run(&mut s, set(4, Some(MemberState::Filling))),
            Err(CoreError::RetiredMember { node: 4 })
        ));
        // Nothing recorded: written as 0.1.0 wrote it.
        assert_eq!(s.encode_checkpoint()[0], 10);
    }

    #[test]
    fn a_member_state_entry_round_trips_through_the_log_encoding() {
        for state in [
            None,
            Some(MemberState::Draining),
            Some(MemberState::Filling),
        ] {
            let entry = Entry {
                now_ms: 7,
                command: set(3, state),
            };
            assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
        }
    }
}
