//! The cluster version: which formats a cluster may write, kept in its
//! control group so that a rolling upgrade never writes what a member
//! still running the previous build cannot read.
//!
//! Every build supports the cluster versions up to
//! [`CLUSTER_VERSION`](crate::cluster_meta::CLUSTER_VERSION) and reads
//! every format of the versions before. A cluster that never recorded one
//! is at version 1 (release 0.1.0's formats). The upgrade is finalised by
//! logging [`Command::SetClusterVersion`](crate::Command::SetClusterVersion)
//! once every member runs a build that supports the new version (the
//! engine checks; `runnel ctl upgrade finalize`); from then on the new
//! formats may be written, and a member can no longer go back to the
//! previous build. The version only rises: a lower one is refused.
//!
//! Applying the command does not compare the version with what this
//! build supports: every replica must apply the same entries the same
//! way whatever its build. A node whose build supports less than the
//! cluster's version says so instead (it is not ready).

use crate::error::CoreError;
use crate::state::{Applied, StreamsState};

impl StreamsState {
    /// The cluster version the control group recorded (1 until one is).
    pub fn cluster_version(&self) -> u32 {
        self.cluster_version.unwrap_or(1)
    }

    pub(crate) fn set_cluster_version(&mut self, version: u32) -> Result<Applied, CoreError> {
        let current = self.cluster_version();
        if version < current || version == 0 {
            return Err(CoreError::ClusterVersionLowered {
                current,
                asked: version,
            });
        }
        let raised = version > current;
        if raised {
            self.cluster_version = Some(version);
        }
        Ok(Applied::ClusterVersion { version, raised })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Entry};

    fn set(state: &mut StreamsState, version: u32) -> Result<Applied, CoreError> {
        state.apply(
            &Entry {
                now_ms: 1,
                command: Command::SetClusterVersion { version },
            },
            0,
            0,
        )
    }

    #[test]
    fn the_cluster_version_only_rises_and_survives_a_checkpoint() {
        let mut state = StreamsState::new();
        assert_eq!(state.cluster_version(), 1);
        // Version 1 is where every cluster starts: nothing is recorded.
        assert_eq!(
            set(&mut state, 1).unwrap(),
            Applied::ClusterVersion {
                version: 1,
                raised: false
            }
        );
        assert_eq!(
            state.encode_checkpoint()[0],
            10,
            "written as 0.1.0 wrote it"
        );
        assert_eq!(
            set(&mut state, 2).unwrap(),
            Applied::ClusterVersion {
                version: 2,
                raised: true
            }
        );
        let before = state.digest();
        assert!(matches!(
            set(&mut state, 1),
            Err(CoreError::ClusterVersionLowered {
                current: 2,
                asked: 1
            })
        ));
        assert_eq!(state.digest(), before);
        // A version above this build's is applied like any other: every
        // replica must reach the same state.
        set(&mut state, 7).unwrap();
        let bytes = state.encode_checkpoint();
        assert_eq!(bytes[0], 12);
        let decoded = StreamsState::decode_checkpoint(&bytes).unwrap();
        assert_eq!(decoded.cluster_version(), 7);
        assert_eq!(decoded.digest(), state.digest());
    }

    #[test]
    fn a_restored_group_keeps_its_source_across_checkpoint_versions() {
        let mut state = StreamsState::new();
        state
            .apply(
                &Entry {
                    now_ms: 1,
                    command: Command::RestoreGroup {
                        source: "old".into(),
                        checkpoint: None,
                    },
                },
                0,
                0,
            )
            .unwrap();
        assert_eq!(state.encode_checkpoint()[0], 11);
        set(&mut state, 2).unwrap();
        let decoded = StreamsState::decode_checkpoint(&state.encode_checkpoint()).unwrap();
        assert_eq!(decoded.restored_from(), Some("old"));
        assert_eq!(decoded.cluster_version(), 2);
    }

    #[test]
    fn a_cluster_version_entry_round_trips_through_the_log_encoding() {
        let entry = Entry {
            now_ms: 7,
            command: Command::SetClusterVersion { version: 2 },
        };
        assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
    }
}
