//! The failure domain (zone) of each node, as the control group records
//! it: placement puts a group's replicas in distinct zones, so that losing
//! a zone leaves every group a quorum (see `docs/long-running.md`).
//!
//! [`Command::SetZones`](crate::Command::SetZones) records zones of nodes.
//! A node's zone, once recorded, does not change: a command naming
//! another zone for it is refused whole (a machine that moved is a new
//! node). Retiring a node forgets its zone. The zones are part of the
//! state, so checkpoints and snapshots carry them to replicas that join
//! later.

use std::collections::BTreeMap;

use crate::error::CoreError;
use crate::state::{Applied, StreamsState};

/// The longest zone name accepted.
pub const MAX_LEN: usize = 64;

/// The most nodes one [`Command::SetZones`](crate::Command::SetZones) may
/// name.
pub const MAX_NODES: usize = 4096;

/// Why a zone name is refused (see [`validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneNameError {
    #[error("a zone has 1 to {MAX_LEN} characters, not {0}")]
    Length(usize),
    #[error("a zone holds only letters, digits, '.', '_' and '-', not {0:?}")]
    Character(char),
}

/// Checks a zone name: 1 to [`MAX_LEN`] characters of ASCII letters,
/// digits, `.`, `_` and `-` (it travels in flags, status and metrics
/// labels).
pub fn validate(zone: &str) -> Result<(), ZoneNameError> {
    if zone.is_empty() || zone.len() > MAX_LEN {
        return Err(ZoneNameError::Length(zone.len()));
    }
    match zone
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(ZoneNameError::Character(c)),
        None => Ok(()),
    }
}

impl StreamsState {
    /// The zone recorded for `node`, if any.
    pub fn zone_of(&self, node: u64) -> Option<&str> {
        self.zones.get(&node).map(String::as_str)
    }

    /// Every recorded zone, by node id.
    pub fn zones(&self) -> &BTreeMap<u64, String> {
        &self.zones
    }

    pub(crate) fn set_zones(&mut self, zones: &[(u64, String)]) -> Result<Applied, CoreError> {
        if zones.len() > MAX_NODES {
            return Err(CoreError::TooManyZones { count: zones.len() });
        }
        // Every entry is checked before any is applied: nothing half done.
        for (node, zone) in zones {
            validate(zone).map_err(CoreError::InvalidZone)?;
            if let Some(recorded) = self.zones.get(node).filter(|r| *r != zone) {
                return Err(CoreError::ZoneChanged {
                    node: *node,
                    recorded: recorded.clone(),
                    asked: zone.clone(),
                });
            }
        }
        let mut changed = false;
        for (node, zone) in zones {
            changed |= self.zones.insert(*node, zone.clone()).is_none();
        }
        Ok(Applied::Zones { changed })
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

    fn set(state: &mut StreamsState, zones: &[(u64, &str)]) -> Result<Applied, CoreError> {
        let zones = zones.iter().map(|(n, z)| (*n, z.to_string())).collect();
        run(state, Command::SetZones { zones })
    }

    #[test]
    fn zones_are_recorded_once_and_the_same_zone_again_changes_nothing() {
        let mut state = StreamsState::new();
        assert_eq!(state.zone_of(1), None);
        let applied = |changed| Ok(Applied::Zones { changed });
        assert_eq!(set(&mut state, &[(1, "a"), (2, "b")]), applied(true));
        assert_eq!(set(&mut state, &[(1, "a")]), applied(false));
        assert_eq!(set(&mut state, &[(1, "a"), (3, "b")]), applied(true));
        assert_eq!(state.zone_of(1), Some("a"));
        assert_eq!(state.zone_of(3), Some("b"));
        assert_eq!(state.zones().len(), 3);
    }

    #[test]
    fn another_zone_for_a_node_is_refused_whole() {
        let mut state = StreamsState::new();
        set(&mut state, &[(1, "a")]).expect("set");
        assert_eq!(
            set(&mut state, &[(2, "b"), (1, "c")]),
            Err(CoreError::ZoneChanged {
                node: 1,
                recorded: "a".into(),
                asked: "c".into()
            })
        );
        assert_eq!(state.zone_of(1), Some("a"));
        assert_eq!(state.zone_of(2), None, "half of a refused command applied");
    }

    #[test]
    fn bad_names_are_refused_and_change_nothing() {
        let mut state = StreamsState::new();
        for bad in ["", "a b", "x/y", "é", &"a".repeat(MAX_LEN + 1)] {
            assert!(
                matches!(
                    set(&mut state, &[(1, "ok"), (2, bad)]),
                    Err(CoreError::InvalidZone(_))
                ),
                "{bad:?} accepted"
            );
        }
        assert!(state.zones().is_empty());
        assert!(validate(&"a".repeat(MAX_LEN)).is_ok());
        assert!(validate("us-east-1a").is_ok());
    }

    #[test]
    fn a_retired_node_loses_its_zone() {
        let mut state = StreamsState::new();
        set(&mut state, &[(1, "a"), (2, "b")]).expect("set");
        run(&mut state, Command::RetireNode { node: 1 }).expect("retired");
        assert_eq!(state.zone_of(1), None);
        assert_eq!(state.zone_of(2), Some("b"));
    }

    #[test]
    fn checkpoints_carry_zones_and_the_digest_sees_them() {
        let mut state = StreamsState::new();
        let before = state.digest();
        set(&mut state, &[(1, "a"), (2, "b")]).expect("set");
        assert_ne!(state.digest(), before);
        let restored =
            StreamsState::decode_checkpoint(&state.capture_checkpoint().encode()).expect("decodes");
        assert_eq!(restored.zones(), state.zones());
        assert_eq!(restored.digest(), state.digest());
    }
}
