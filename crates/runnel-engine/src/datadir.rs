//! A node's data directory: its meta file (the format it was written
//! with, which a restart must agree with), the shared log's opening and
//! recovery, and files written whole or not at all. Both engines open
//! their directories through these.
//!
//! ```text
//! DATA_DIR/runnel.meta   format, group count (and a member's node id)
//! DATA_DIR/log/          segment files of the shared log
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runnel_log::{Log, LogError, LogOptions};

use crate::config::EngineConfig;

/// A node's metadata file in its data directory: format, group count
/// and, for a cluster member, its node id.
pub const META_FILE: &str = "runnel.meta";

/// A failure of another layer that an [`OpenError`] carries: its source,
/// which keeps its text and its type (the data directory's errors are
/// the base layer's and cannot name the cluster's or the Raft engine's).
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a node could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen for Raft peers on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(
        "data directory was written with {found}, but this node is configured with {configured}"
    )]
    MetaMismatch { found: String, configured: String },
    #[error(transparent)]
    Log(#[from] LogError),
    /// A recovered record that the engine could not replay.
    #[error("log record at {position} cannot be decoded: {source}")]
    CorruptEntry { position: u64, source: Cause },
    /// A checkpoint or a snapshot file could not be read: the log before
    /// it may be gone, so the node does not start without it.
    #[error("checkpoint: {0}")]
    Checkpoint(Cause),
    /// The log's first segments were collected, but no checkpoint covers
    /// what they held.
    #[error("checkpoint: the log starts at {base} but the checkpoint that covers what came before is missing")]
    MissingCheckpoint { base: u64 },
    /// The configuration cannot be served (addresses, the object store,
    /// the cluster id, ...).
    #[error("configuration: {0}")]
    Config(Cause),
}

/// Why a recovered record does not belong to this node's groups.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("record shorter than its group prefix")]
    ShortPrefix,
    #[error("record names group {0}, which this node does not have")]
    NoSuchGroup(usize),
}

/// Opens the shared log in `config`'s data directory, passing every
/// recovered record to `replay`; the first record it refuses makes the
/// whole open fail (a log this node cannot read is not served).
pub(crate) fn open_log(
    config: &EngineConfig,
    replay_from: u64,
    collected_below: u64,
    manual_commit: bool,
    listener: runnel_log::DurabilityListener,
    mut replay: impl FnMut(u64, &[u8]) -> Result<(), Cause>,
) -> Result<Arc<Log>, OpenError> {
    let options = LogOptions {
        segment_bytes: config.segment_bytes,
        sync: config.sync,
        max_record_bytes: config.max_record_bytes,
        replay_from,
        collected_below,
        manual_commit,
        preallocate: config.preallocate_segments,
    };
    let mut decode_failure = None;
    let log = Log::open(&config.data_dir.join("log"), options, listener, |record| {
        if let Err(source) = replay(record.payload_pos, record.payload) {
            decode_failure.get_or_insert(OpenError::CorruptEntry {
                position: record.payload_pos,
                source,
            });
        }
        Ok(())
    })?;
    match decode_failure {
        Some(err) => Err(err),
        None => Ok(Arc::new(log)),
    }
}

/// Without a checkpoint the log must start at position 0: a log whose
/// first segments were collected can only be recovered from the
/// checkpoint that allowed it, and opening it without one would discard
/// the rest as corruption.
pub(crate) fn refuse_collected_log_without_checkpoint(log_dir: &Path) -> Result<(), OpenError> {
    let first = std::fs::read_dir(log_dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse::<u64>()
                .ok()
        })
        .min();
    match first {
        Some(base) if base > 0 => Err(OpenError::MissingCheckpoint { base }),
        _ => Ok(()),
    }
}

/// Checks that the data directory was made for this configuration (its
/// meta file holds `expected`), writing the file in a new directory.
/// The group count a single node's data directory was created with (its
/// `runnel.meta`), if it has one: a node keeps that count for good, since
/// streams are placed in groups by a hash of their name modulo the count.
pub fn stored_groups(dir: &Path) -> Option<u32> {
    let meta = std::fs::read_to_string(dir.join(META_FILE)).ok()?;
    meta.lines()
        .find_map(|line| line.strip_prefix("groups = "))
        .and_then(|n| n.trim().parse().ok())
}

/// How many groups a new single node runs on `cores` cores: one up to two
/// cores (a second group buys nothing there, `bench/cores.sh`), then one
/// per two cores, so that each group's commit task (the part of an append
/// that is serial per group) has cores to spread over.
pub fn single_node_groups(cores: usize) -> u32 {
    if cores <= 2 {
        1
    } else {
        (cores / 2).min(runnel_core::cluster_meta::MAX_GROUPS as usize) as u32
    }
}

pub(crate) fn check_meta(dir: &Path, expected: &str) -> Result<(), OpenError> {
    let io = |source| OpenError::Io {
        path: dir.to_path_buf(),
        source,
    };
    runnel_log::create_dir_durable(dir).map_err(io)?;
    let path = dir.join(META_FILE);
    match std::fs::read_to_string(&path) {
        Ok(found) if found == expected => Ok(()),
        Ok(found) => Err(OpenError::MetaMismatch {
            found: found.trim().replace('\n', ", "),
            configured: expected.trim().replace('\n', ", "),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_file_durably(dir, META_FILE, expected).map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

/// Writes `dir/name` whole or not at all, and durably: a temporary file,
/// synced, renamed into place, and the directory synced.
pub(crate) fn write_file_durably(dir: &Path, name: &str, contents: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, contents)?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all())?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_per_core_on_a_single_node() {
        let counts: Vec<u32> = [1, 2, 3, 4, 8, 16, 64].map(single_node_groups).to_vec();
        assert_eq!(counts, [1, 1, 1, 2, 4, 8, 32]);
        assert_eq!(
            single_node_groups(1 << 20),
            runnel_core::cluster_meta::MAX_GROUPS
        );
    }

    #[test]
    fn the_stored_group_count_is_read_from_the_meta_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(stored_groups(dir.path()), None, "no meta file yet");
        check_meta(dir.path(), "format = 1\ngroups = 6\n").unwrap();
        assert_eq!(stored_groups(dir.path()), Some(6));
        std::fs::write(dir.path().join(META_FILE), "format = 1\ngroups = x\n").unwrap();
        assert_eq!(
            stored_groups(dir.path()),
            None,
            "an unreadable count is no count"
        );
    }
}
