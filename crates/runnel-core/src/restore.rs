//! A group of a cluster restored from its bucket takes its streams from
//! the old cluster's newest backup of it through one log entry,
//! [`Command::RestoreGroup`](crate::Command::RestoreGroup): every replica
//! applies the same bytes the same way, and a replica that joins later is
//! sent the result in a snapshot like any other state.
//!
//! Applied to a group that holds nothing, it installs the backed-up state
//! reduced to what the object store holds ([`StreamsState::keep_only_tiered`]:
//! each stream ends where its tiered history ends) and records the cluster
//! it came from. What describes the new cluster itself (its id, retired
//! nodes, replication factor, preferred leaders and zones) stays as the
//! new cluster set it; the subscriptions and the healing pause come back.
//! Applied again it changes nothing, and a group that already holds
//! streams or subscriptions refuses it, so no restore overwrites writes.

use crate::codec::CodecError;
use crate::error::CoreError;
use crate::state::{Applied, StreamsState};

/// The largest group checkpoint one restore entry carries: one log entry
/// and one Raft message hold it whole.
pub const MAX_CHECKPOINT: usize = 64 << 20;

impl StreamsState {
    /// The cluster this group was restored from, once restored.
    pub fn restored_from(&self) -> Option<&str> {
        self.restored_from.as_deref()
    }

    /// Whether the group holds anything a restore would overwrite.
    pub fn holds_data(&self) -> bool {
        !self.streams.is_empty() || self.subscriptions.has_state()
    }

    pub(crate) fn restore_group(
        &mut self,
        source: &str,
        checkpoint: Option<&[u8]>,
    ) -> Result<Applied, CoreError> {
        crate::cluster_meta::validate(source).map_err(CoreError::InvalidClusterId)?;
        if let Some(done) = &self.restored_from {
            return Ok(Applied::Restored {
                source: done.clone(),
                streams: self.streams.len(),
                lost_bytes: 0,
                newly: false,
            });
        }
        if self.holds_data() {
            return Err(CoreError::RestoreOverData {
                streams: self.streams.len(),
            });
        }
        if checkpoint.is_some_and(|c| c.len() > MAX_CHECKPOINT) {
            return Err(CoreError::RestoreDamaged(CodecError::Invalid(
                "restored checkpoint size",
            )));
        }
        let mut restored = match checkpoint {
            Some(bytes) => {
                StreamsState::decode_checkpoint(bytes).map_err(CoreError::RestoreDamaged)?
            }
            None => StreamsState::new(),
        };
        let lost_bytes = restored.keep_only_tiered();
        // Counters (hot and cold bytes) are rebuilt as a checkpoint loads.
        let mut restored = StreamsState::decode_checkpoint(&restored.encode_checkpoint())
            .expect("a state's own checkpoint decodes");
        restored.cluster_id = self.cluster_id.take();
        restored.retired_nodes = std::mem::take(&mut self.retired_nodes);
        restored.replication = self.replication;
        restored.preferred_leaders = std::mem::take(&mut self.preferred_leaders);
        restored.zones = std::mem::take(&mut self.zones);
        restored.cluster_version = self.cluster_version;
        restored.member_states = std::mem::take(&mut self.member_states);
        restored.now_ms = self.now_ms;
        restored.restored_from = Some(source.to_string());
        restored.changed = restored.streams.keys().copied().collect();
        *self = restored;
        Ok(Applied::Restored {
            source: source.to_string(),
            streams: self.streams.len(),
            lost_bytes,
            newly: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Body, Command, CreateStream, Entry};

    fn run(state: &mut StreamsState, command: Command) -> Result<Applied, CoreError> {
        state.apply(
            &Entry {
                now_ms: 1_000,
                command,
            },
            0,
            0,
        )
    }

    /// A group of the old cluster: one stream of 5 bytes, all still in
    /// the log, the cluster's own metadata, and self-healing paused.
    fn old_group() -> StreamsState {
        let mut old = StreamsState::new();
        let create = Command::Create(CreateStream {
            name: "s".into(),
            content_type: Some("text/plain".into()),
            body: Body {
                data: b"hello".to_vec(),
                message_ends: Vec::new(),
            },
            ..Default::default()
        });
        let entry = Entry {
            now_ms: 1_000,
            command: create,
        };
        old.apply(&entry, 5, 100).unwrap();
        run(&mut old, Command::SetClusterId { id: "old".into() }).unwrap();
        run(
            &mut old,
            Command::SetZones {
                zones: vec![(1, "z-old".into())],
            },
        )
        .unwrap();
        run(&mut old, Command::PauseHealing { paused: true }).unwrap();
        old
    }

    fn restore(source: &str, checkpoint: Option<Vec<u8>>) -> Command {
        Command::RestoreGroup {
            source: source.into(),
            checkpoint,
        }
    }

    #[test]
    fn a_restore_installs_the_tiered_state_and_keeps_the_new_clusters_metadata() {
        let backup = old_group().encode_checkpoint();
        let mut new = StreamsState::new();
        run(&mut new, Command::SetClusterId { id: "new".into() }).unwrap();
        run(
            &mut new,
            Command::SetZones {
                zones: vec![(1, "z-new".into())],
            },
        )
        .unwrap();
        let applied = run(&mut new, restore("old", Some(backup.clone()))).unwrap();
        // The stream's 5 untiered bytes are what a restore loses.
        assert_eq!(
            applied,
            Applied::Restored {
                source: "old".into(),
                streams: 1,
                lost_bytes: 5,
                newly: true
            }
        );
        assert_eq!(new.restored_from(), Some("old"));
        assert_eq!(new.cluster_id(), Some("new"));
        assert_eq!(new.zone_of(1), Some("z-new"));
        assert!(new.healing_paused());
        assert_eq!(new.hot_bytes(), 0);
        assert_eq!(new.stream_by_name("s").map(|s| s.tail), Some(0));

        // Every replica applying the same entry reaches the same state.
        let mut other = StreamsState::new();
        run(&mut other, Command::SetClusterId { id: "new".into() }).unwrap();
        run(
            &mut other,
            Command::SetZones {
                zones: vec![(1, "z-new".into())],
            },
        )
        .unwrap();
        run(&mut other, restore("old", Some(backup))).unwrap();
        assert_eq!(other.digest(), new.digest());

        // Applied again, nothing changes.
        let again = run(&mut new, restore("other", None)).unwrap();
        assert!(
            matches!(again, Applied::Restored { newly: false, ref source, .. } if source == "old")
        );
        assert_eq!(other.digest(), new.digest());

        // The restored state survives a checkpoint (version 11).
        let decoded = StreamsState::decode_checkpoint(&new.encode_checkpoint()).unwrap();
        assert_eq!(decoded.restored_from(), Some("old"));
        assert_eq!(decoded.digest(), new.digest());
    }

    #[test]
    fn a_group_that_holds_streams_refuses_a_restore_and_stays_as_it_was() {
        let mut group = old_group();
        let before = group.digest();
        let refused = run(&mut group, restore("old", None));
        assert!(matches!(
            refused,
            Err(CoreError::RestoreOverData { streams: 1 })
        ));
        assert_eq!(group.digest(), before);
        assert_eq!(group.restored_from(), None);
    }

    #[test]
    fn a_damaged_backup_or_bad_source_is_refused_and_changes_nothing() {
        let mut group = StreamsState::new();
        let mut damaged = old_group().encode_checkpoint();
        damaged.truncate(damaged.len() / 2);
        assert!(matches!(
            run(&mut group, restore("old", Some(damaged))),
            Err(CoreError::RestoreDamaged(_))
        ));
        assert!(matches!(
            run(&mut group, restore("", None)),
            Err(CoreError::InvalidClusterId(_))
        ));
        assert_eq!(group.restored_from(), None);
        // A group the old cluster never backed up comes back empty.
        run(&mut group, restore("old", None)).unwrap();
        assert_eq!(group.restored_from(), Some("old"));
        assert_eq!(group.stream_count(), 0);
    }

    #[test]
    fn a_restore_entry_round_trips_through_the_log_encoding() {
        for checkpoint in [None, Some(old_group().encode_checkpoint())] {
            let entry = Entry {
                now_ms: 7,
                command: restore("old", checkpoint),
            };
            assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
        }
    }
}
