//! A node: its data directory, its shared log, its groups, the routing of
//! stream names to groups, and the background upkeep (expiry, retention,
//! compaction; see [`crate::history`]).
//!
//! Data directory layout:
//!
//! ```text
//! DATA_DIR/runnel.meta   format and group count (a restart must agree)
//! DATA_DIR/log/          segment files of the shared log
//! ```
//!
//! Each log record is `[group: u32 LE][encoded entry]`; recovery replays
//! every record into its group's state before the node serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use runnel_core::listing::Listed;
use runnel_core::{Applied, Command, Entry, ReadFrom, StreamInfo, StreamsState};
use runnel_log::{Log, LogError, LogOptions, SyncMode};
use tokio::sync::watch;

use crate::activity::Activity;
use crate::checkpoint;
use crate::control::Control;
use crate::history::{self, CompactionPolicy};
use crate::local::{DurableState, GroupLimits, LocalGroup};
use crate::tier::{self, GroupTier, Tiering};
use crate::view::GroupView;
use crate::{now_ms, BoxFuture, EngineError, GroupEngine, NodeEngine, ReadResult};

/// A node's metadata file in its data directory: format, group count
/// and, for a cluster member, its node id.
pub const META_FILE: &str = "runnel.meta";
const FORMAT: u32 = 1;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Groups the node's streams are spread over.
    pub groups: u32,
    pub sync: SyncMode,
    pub segment_bytes: u64,
    /// Prepare each next log segment ahead of time as a synced file of
    /// zeros, which makes syncs cheaper (see `runnel_log::LogOptions`).
    pub preallocate_segments: bool,
    /// Largest log record (one command, body included).
    pub max_record_bytes: u32,
    pub max_pending_proposals: usize,
    pub max_inflight_bytes: u64,
    /// How often expiry, retention and compaction run.
    pub sweep_interval: Duration,
    /// A checkpoint (and log garbage collection) runs this often...
    pub checkpoint_interval: Duration,
    /// ...or after this many new log bytes, whichever comes first.
    pub checkpoint_bytes: u64,
    pub compaction: CompactionPolicy,
    /// Tiering to an object store; `None` keeps every byte in the log.
    pub tier: Option<crate::TierConfig>,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            groups: 1,
            sync: SyncMode::Batch,
            segment_bytes: 256 << 20,
            preallocate_segments: true,
            max_record_bytes: 128 << 20,
            max_pending_proposals: 65_536,
            max_inflight_bytes: 512 << 20,
            sweep_interval: Duration::from_millis(500),
            checkpoint_interval: Duration::from_secs(300),
            checkpoint_bytes: 256 << 20,
            compaction: CompactionPolicy {
                min_bytes: 64 << 10,
                idle: Duration::from_secs(1),
                max_snapshot_bytes: 128 << 20,
            },
            tier: None,
        }
    }
}

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
    #[error("log record at {position} cannot be decoded: {reason}")]
    CorruptEntry { position: u64, reason: String },
    #[error("checkpoint: {reason}")]
    Checkpoint { reason: String },
    #[error("configuration: {reason}")]
    Config { reason: String },
}

pub struct Node {
    groups: Vec<Arc<LocalGroup>>,
    log: Arc<Log>,
    tiering: Option<Arc<Tiering>>,
    data_dir: PathBuf,
    control: Control,
    /// Background upkeep and checkpointing, aborted on drop.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Node {
    /// Opens the data directory, recovers every group, and starts serving.
    /// Must be called inside a Tokio runtime.
    pub fn open(config: &EngineConfig) -> Result<Arc<Node>, OpenError> {
        let groups = config.groups.max(1);
        check_meta(
            &config.data_dir,
            &format!("format = {FORMAT}\ngroups = {groups}\n"),
        )?;

        let checkpoint = checkpoint::load(&config.data_dir, groups as usize)
            .map_err(|reason| OpenError::Checkpoint { reason })?;
        let replay_from = checkpoint.as_ref().map_or(0, |c| c.replay_from());
        let (mut states, mut applied): (Vec<StreamsState>, Vec<u64>) = match checkpoint {
            Some(c) => c.groups.into_iter().unzip(),
            None => (
                (0..groups).map(|_| StreamsState::new()).collect(),
                vec![0; groups as usize],
            ),
        };
        if replay_from == 0 {
            refuse_collected_log_without_checkpoint(&config.data_dir.join("log"))?;
        }
        let (durable_tx, durable_rx) = watch::channel::<DurableState>(Ok(0));
        let listener = Box::new(move |status: Result<u64, LogError>| {
            let _ = durable_tx.send_replace(status);
        });
        let mut records = 0u64;
        let log = open_log(
            config,
            replay_from,
            replay_from,
            false,
            listener,
            |pos, payload| {
                records += 1;
                replay(&mut states, &mut applied, pos, payload)
            },
        )?;
        // Until the first commit the channel holds 0: entries proposed from
        // now on all end past the recovered log, so none applies early.
        let recovered_end = log.durable_position();

        let tiering = config
            .tier
            .clone()
            .map(|tc| Tiering::open(tc, 0, groups as usize))
            .transpose()
            .map_err(|reason| OpenError::Config { reason })?;
        let now = now_ms();
        let limits = GroupLimits {
            max_pending_proposals: config.max_pending_proposals,
            max_inflight_bytes: config.max_inflight_bytes,
        };
        let activity = Arc::new(Activity::default());
        let groups: Vec<Arc<LocalGroup>> = states
            .into_iter()
            .zip(applied)
            .enumerate()
            .map(|(i, (mut state, applied_end))| {
                state.renew_all_ttls(now);
                state.take_changed();
                let tier = tiering.as_ref().map(|t| GroupTier {
                    tiering: Arc::clone(t),
                    group: i as u32,
                });
                let view = GroupView::new(state, Arc::clone(&log), tier, Arc::clone(&activity));
                LocalGroup::start(i as u32, view, applied_end, durable_rx.clone(), limits)
            })
            .collect();
        tracing::info!(
            data_dir = %config.data_dir.display(),
            records,
            log_bytes = recovered_end,
            groups = groups.len(),
            "recovered"
        );
        let sweeper = tokio::spawn(history::upkeep(
            groups.clone(),
            config.sweep_interval,
            config.compaction,
        ));
        let checkpointer = tokio::spawn(checkpoint_loop(
            config.data_dir.clone(),
            groups.clone(),
            Arc::clone(&log),
            tiering.clone(),
            config.checkpoint_interval,
            config.checkpoint_bytes,
        ));
        let mut tasks = vec![sweeper, checkpointer];
        if let Some(tiering) = &tiering {
            tasks.push(tokio::spawn(tier::uploader::run(
                groups.clone(),
                Arc::clone(tiering),
                Arc::clone(&log),
                config.segment_bytes,
            )));
            tasks.push(tokio::spawn(tier::gc::run(
                groups.clone(),
                Arc::clone(tiering),
            )));
        }
        Ok(Arc::new(Node {
            control: Control::new(&groups, activity),
            groups,
            log,
            tiering,
            data_dir: config.data_dir.clone(),
            tasks,
        }))
    }

    /// The group that owns `name`.
    pub fn group_for(&self, name: &str) -> &Arc<LocalGroup> {
        &self.groups[group_index(name, self.groups.len())]
    }

    /// The group engine that owns `name`, for reads that follow a stream.
    pub fn engine_for(&self, name: &str) -> &dyn GroupEngine {
        self.group_for(name).as_ref()
    }

    pub fn groups(&self) -> &[Arc<LocalGroup>] {
        &self.groups
    }

    /// Proposes a command to the group of the stream it names.
    pub async fn propose(&self, command: Command) -> Result<Applied, EngineError> {
        let mut names = command.names();
        let group = self.group_for(names.clone().next().unwrap_or(""));
        if names.any(|n| !Arc::ptr_eq(self.group_for(n), group)) {
            return Err(EngineError::CrossGroupFork);
        }
        group.propose(command).await
    }

    pub fn head(&self, name: &str) -> Result<StreamInfo, EngineError> {
        self.group_for(name).head(name)
    }

    pub async fn read(
        &self,
        name: &str,
        from: ReadFrom,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError> {
        self.group_for(name).read(name, from, max_bytes).await
    }

    /// Log bytes written since the log began.
    pub fn log_position(&self) -> u64 {
        self.log.durable_position()
    }

    /// Why the node cannot take writes, if it cannot (its log failed).
    pub fn write_failure(&self) -> Option<String> {
        self.log.failure().map(|e| e.to_string())
    }

    /// Segment files of the log.
    pub fn log_segments(&self) -> usize {
        self.log.segment_count()
    }

    /// Writes a checkpoint now (and backs it up when tiering does) and
    /// deletes the log segments it made unnecessary; returns the bytes
    /// reclaimed.
    pub async fn checkpoint(&self) -> Result<u64, String> {
        checkpoint_once(
            &self.data_dir,
            &self.groups,
            &self.log,
            self.tiering.as_deref(),
        )
        .await
    }

    /// The node's tiering, when it tiers.
    pub fn tiering(&self) -> Option<&Arc<Tiering>> {
        self.tiering.as_ref()
    }
}

impl NodeEngine for Node {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(Node::propose(self, command))
    }

    fn engine_for(&self, name: &str) -> &dyn GroupEngine {
        Node::engine_for(self, name)
    }

    fn write_failure(&self) -> Option<String> {
        Node::write_failure(self)
    }

    fn status(&self) -> serde_json::Value {
        if let Some(tiering) = &self.tiering {
            tier::uploader::count_totals(&self.groups, tiering);
        }
        serde_json::json!({
            "mode": "single",
            "groups": self.groups.len(),
            "tiering": self.tiering.as_ref().map(|t| t.status()),
            "log_position": self.log_position(),
            "log_segments": self.log_segments(),
            "log_syncs": self.log.sync_stats().syncs,
            "log_sync_seconds": self.log.sync_stats().sync_time.as_secs_f64(),
            "write_failure": self.write_failure(),
        })
    }

    fn metrics(&self) -> crate::NodeMetrics {
        if let Some(tiering) = &self.tiering {
            tier::uploader::count_totals(&self.groups, tiering);
        }
        crate::NodeMetrics {
            log_bytes: self.log_position(),
            log_failed: self.write_failure().is_some(),
            syncs: self.log.sync_stats(),
            streams: self.groups.iter().map(|g| g.stream_count() as u64).sum(),
            groups: Vec::new(),
            peers: Vec::new(),
            tiering: self.tiering.as_ref().map(|t| t.metrics()),
            disk: crate::metrics::DiskSpace::of(&self.data_dir),
        }
    }

    fn same_group(&self, a: &str, b: &str) -> bool {
        crate::same_group(a, b, self.groups.len())
    }

    fn take_released_pins(&self) -> Vec<runnel_core::RemotePin> {
        crate::take_released_pins(&self.groups)
    }

    fn list_streams<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Listed>, bool), EngineError>> {
        let page = crate::list_groups(&self.groups, prefix, after, limit);
        Box::pin(async move { Ok(page) })
    }

    fn control(&self) -> &Control {
        &self.control
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// FNV-1a of the name, so routing is stable across processes and builds.
pub fn group_index(name: &str, groups: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % groups.max(1) as u64) as usize
}

fn replay(
    states: &mut [StreamsState],
    applied: &mut [u64],
    payload_pos: u64,
    payload: &[u8],
) -> Result<(), String> {
    let (group, entry_bytes) = payload
        .split_first_chunk::<4>()
        .ok_or_else(|| "record shorter than its group prefix".to_string())?;
    let group = u32::from_le_bytes(*group) as usize;
    // Bytes moved forward: only a later checkpoint points into them.
    if entry_bytes.first() == Some(&crate::copy_forward::RELOCATED) {
        return Ok(());
    }
    let state = states
        .get_mut(group)
        .ok_or_else(|| format!("record names group {group}, which this node does not have"))?;
    // Records this group's checkpoint already reflects are skipped.
    let record_end = payload_pos + payload.len() as u64;
    if record_end <= applied[group] {
        return Ok(());
    }
    applied[group] = record_end;
    let (entry, data_len): (Entry, u64) =
        Entry::decode_header(entry_bytes).map_err(|e| e.to_string())?;
    let data_loc = payload_pos + payload.len() as u64 - data_len;
    // Refusals were answered when the entry was first applied; replay
    // reaches the same refusals and needs no answer.
    let _ = state.apply(&entry, data_len, data_loc);
    Ok(())
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
    mut replay: impl FnMut(u64, &[u8]) -> Result<(), String>,
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
        if let Err(reason) = replay(record.payload_pos, record.payload) {
            decode_failure.get_or_insert(OpenError::CorruptEntry {
                position: record.payload_pos,
                reason,
            });
        }
        Ok(())
    })?;
    match decode_failure {
        Some(err) => Err(err),
        None => Ok(Arc::new(log)),
    }
}

/// Checkpoints every `interval`, or sooner once `bytes` of log were
/// written since the last one, once the tierer asks (it freed log bytes),
/// or once tiering made progress that the last backup does not show.
async fn checkpoint_loop(
    dir: PathBuf,
    groups: Vec<Arc<LocalGroup>>,
    log: Arc<Log>,
    tiering: Option<Arc<Tiering>>,
    interval: Duration,
    bytes: u64,
) {
    let mut last = (tokio::time::Instant::now(), log.durable_position());
    let mut backed_up_progress = None;
    loop {
        let reclaim = async {
            match &tiering {
                Some(t) => t.reclaim.notified().await,
                None => std::future::pending().await,
            }
        };
        let asked = tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1).min(interval)) => false,
            _ = reclaim => true,
        };
        let position = log.durable_position();
        let progress = tiering.as_ref().map(|t| tier::progress(t));
        let backup_due = tiering.as_ref().is_some_and(|t| {
            t.config.backup
                && progress != backed_up_progress
                && last.0.elapsed() >= t.config.backup_interval
        });
        if !asked
            && !backup_due
            && last.0.elapsed() < interval
            && position.saturating_sub(last.1) < bytes
        {
            continue;
        }
        last = (tokio::time::Instant::now(), position);
        match checkpoint_once(&dir, &groups, &log, tiering.as_deref()).await {
            Ok(reclaimed) => {
                backed_up_progress = progress;
                tracing::debug!(reclaimed, "checkpoint written")
            }
            Err(err) => tracing::error!(error = %err, "checkpoint failed"),
        }
    }
}

/// Writes a checkpoint, collects the log behind it, and backs the
/// checkpoint up when the node tiers with backups on.
async fn checkpoint_once(
    dir: &Path,
    groups: &[Arc<LocalGroup>],
    log: &Arc<Log>,
    tiering: Option<&Tiering>,
) -> Result<u64, String> {
    // Progress as of before the checkpoint: what the backup shows at least.
    let progress = tiering.map(tier::progress);
    let (dir_owned, groups_owned, log_owned) =
        (dir.to_path_buf(), groups.to_vec(), Arc::clone(log));
    let done = tokio::task::spawn_blocking(move || {
        checkpoint::checkpoint_and_collect(&dir_owned, &groups_owned, &log_owned)
    })
    .await
    .map_err(|e| e.to_string())??;
    if let (Some(tiering), Some(progress)) = (tiering.filter(|t| t.config.backup), progress) {
        tier::backup::upload(tiering, done.file, done.doomed_next, progress)
            .await
            .map_err(|e| format!("backing up the checkpoint: {e}"))?;
    }
    Ok(done.reclaimed)
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
        Some(base) if base > 0 => Err(OpenError::Checkpoint {
            reason: format!("the log starts at {base} but the checkpoint that covers what came before is missing"),
        }),
        _ => Ok(()),
    }
}

/// Checks that the data directory was made for this configuration (its
/// meta file holds `expected`), writing the file in a new directory.
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
