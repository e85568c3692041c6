//! A single node: its data directory, its shared log, its groups (each a
//! [`LocalGroup`]), the routing of stream names to groups, checkpoints
//! and the background upkeep (expiry, retention, compaction; see
//! [`crate::history`]).
//!
//! Data directory layout (see [`crate::datadir`]):
//!
//! ```text
//! DATA_DIR/runnel.meta   format and group count (a restart must agree)
//! DATA_DIR/checkpoint    every group's state and the log position it reflects
//! DATA_DIR/log/          segment files of the shared log
//! ```
//!
//! Each log record is `[group: u32 LE][encoded entry]`; recovery replays
//! every record into its group's state before the node serves. A
//! checkpoint ([`crate::checkpoint`]) lets the log before it go, and moves
//! the live bytes of sparse segments forward ([`crate::copy_forward`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use runnel_core::listing::Listed;
use runnel_core::{Applied, Command, Entry, ReadFrom, StreamInfo, StreamsState};
use runnel_log::{Log, LogError};
use tokio::sync::watch;

use crate::activity::Activity;
use crate::api::{group_index, BoxFuture, GroupEngine, NodeEngine, ReadResult};
use crate::checkpoint::{self, CheckpointError, SegmentLive};
use crate::clock::now_ms;
use crate::control::Control;
use crate::copy_forward::{self, Copied, CopyError, Moved, Relocation, RELOCATED};
use crate::datadir::{
    check_meta, open_log, refuse_collected_log_without_checkpoint, Cause, RecordError,
};
use crate::error::EngineError;
use crate::history;
use crate::local::{DurableState, GroupCheckpoint, GroupLimits, LocalGroup};
use crate::metrics::{DiskSpace, NodeMetrics};
use crate::tier::{self, GroupTier, Tiering};
use crate::upkeep;
use crate::view::GroupView;

// The public paths these had before the data directory and the
// configuration got modules of their own.
pub use crate::config::EngineConfig;
pub use crate::datadir::{OpenError, META_FILE};

/// The data directory format of a single node.
const FORMAT: u32 = 1;

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
            .map_err(|e| OpenError::Checkpoint(Box::new(e)))?;
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
            .map_err(|e| OpenError::Config(Box::new(e)))?;
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
                let view = GroupView::new(
                    state,
                    Arc::clone(&log),
                    tier,
                    Arc::clone(&activity),
                    config.read_pages_bytes,
                );
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
    pub async fn checkpoint(&self) -> Result<u64, CheckpointError> {
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

    fn metrics(&self) -> NodeMetrics {
        if let Some(tiering) = &self.tiering {
            tier::uploader::count_totals(&self.groups, tiering);
        }
        NodeMetrics {
            log_bytes: self.log_position(),
            log_failed: self.write_failure().is_some(),
            syncs: self.log.sync_stats(),
            streams: self.groups.iter().map(|g| g.stream_count() as u64).sum(),
            groups: Vec::new(),
            commit_busy: self.groups.iter().map(|g| g.commit_busy()).collect(),
            peers: Vec::new(),
            tiering: self.tiering.as_ref().map(|t| t.metrics()),
            disk: DiskSpace::of(&self.data_dir),
            memory: upkeep::memory_of(&self.groups),
            healing: None,
        }
    }

    fn same_group(&self, a: &str, b: &str) -> bool {
        upkeep::same_group(a, b, self.groups.len())
    }

    fn take_released_pins(&self) -> Vec<runnel_core::RemotePin> {
        upkeep::take_released_pins(&self.groups)
    }

    fn list_streams<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Listed>, bool), EngineError>> {
        let page = upkeep::list_groups(&self.groups, prefix, after, limit);
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

fn replay(
    states: &mut [StreamsState],
    applied: &mut [u64],
    payload_pos: u64,
    payload: &[u8],
) -> Result<(), Cause> {
    let (group, entry_bytes) = payload
        .split_first_chunk::<4>()
        .ok_or(RecordError::ShortPrefix)?;
    let group = u32::from_le_bytes(*group) as usize;
    // Bytes moved forward: only a later checkpoint points into them.
    if entry_bytes.first() == Some(&RELOCATED) {
        return Ok(());
    }
    let state = states
        .get_mut(group)
        .ok_or(RecordError::NoSuchGroup(group))?;
    // Records this group's checkpoint already reflects are skipped.
    let record_end = payload_pos + payload.len() as u64;
    if record_end <= applied[group] {
        return Ok(());
    }
    applied[group] = record_end;
    let (entry, data_len): (Entry, u64) = Entry::decode_header(entry_bytes)?;
    let data_loc = payload_pos + payload.len() as u64 - data_len;
    // Refusals were answered when the entry was first applied; replay
    // reaches the same refusals and needs no answer.
    let _ = state.apply(&entry, data_len, data_loc);
    Ok(())
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
) -> Result<u64, CheckpointError> {
    // Progress as of before the checkpoint: what the backup shows at least.
    let progress = tiering.map(tier::progress);
    let (dir_owned, groups_owned, log_owned) =
        (dir.to_path_buf(), groups.to_vec(), Arc::clone(log));
    let done = tokio::task::spawn_blocking(move || {
        checkpoint_and_collect(&dir_owned, &groups_owned, &log_owned)
    })
    .await??;
    if let (Some(tiering), Some(progress)) = (tiering.filter(|t| t.config.backup), progress) {
        tier::backup::upload(tiering, done.file, done.doomed_next, progress).await?;
    }
    Ok(done.reclaimed)
}

/// What a checkpoint did: the bytes it freed, and the file it wrote with
/// each group's next deletion sequence number (for a backup of it).
struct Checkpointed {
    pub reclaimed: u64,
    pub file: Vec<u8>,
    pub doomed_next: Vec<u64>,
}

/// Writes a checkpoint of every group, then deletes the log segments it
/// made unnecessary.
fn checkpoint_and_collect(
    dir: &Path,
    groups: &[Arc<LocalGroup>],
    log: &Log,
) -> Result<Checkpointed, CheckpointError> {
    // A little more than the file that is there now.
    let last = std::fs::metadata(checkpoint::path(dir)).map_or(0, |m| m.len() as usize);
    let mut writer = checkpoint::FileWriter::with_capacity(groups.len(), last + last / 16);
    let started = std::time::Instant::now();
    let captured: Vec<GroupCheckpoint> = groups.iter().map(|g| g.checkpoint(&mut writer)).collect();
    let file = writer.finish();
    let encoded = started.elapsed();
    // The checkpoint points into the log: the log's bytes must be durable
    // before it is (with `--sync never` nothing else syncs them).
    log.sync_written().map_err(CheckpointError::Collect)?;
    checkpoint::store(dir, &file).map_err(CheckpointError::Write)?;
    tracing::debug!(
        bytes = file.len(),
        encode_ms = encoded.as_millis() as u64,
        store_ms = (started.elapsed() - encoded).as_millis() as u64,
        "checkpoint stored"
    );
    let before = captured.iter().map(|g| g.applied_end).min().unwrap_or(0);
    let live = SegmentLive::count(&log.sealed_segments(), before, |f| {
        for g in &captured {
            g.capture.for_each_live_range(&mut *f);
        }
    });
    let reclaimed = log
        .collect_segments(before, |base, end| live.touches(base, end))
        .map_err(CheckpointError::Collect)?;
    let moved = copy_forward_round(groups, &captured, log, &live)?;
    if moved.segments > 0 {
        tracing::info!(
            segments = moved.segments,
            bytes = moved.bytes,
            "moved the live bytes of sparse segments forward; the next checkpoint deletes them"
        );
    }
    Ok(Checkpointed {
        reclaimed,
        file,
        doomed_next: captured.iter().map(|g| g.doomed_next).collect(),
    })
}

/// The local engine's copy-forward round: moves the planned bytes and relocates the
/// groups' states onto the copies. `captured` is the checkpoint just
/// written: its live ranges say what is live in each group (`live` counts
/// them per segment).
fn copy_forward_round(
    groups: &[Arc<LocalGroup>],
    captured: &[GroupCheckpoint],
    log: &Log,
    live: &SegmentLive,
) -> Result<Moved, CopyError> {
    let plan = copy_forward::plan(live);
    if plan.moved.segments == 0 {
        return Ok(plan.moved);
    }
    let mut last_end = 0;
    for (g, (group, checkpoint)) in groups.iter().zip(captured).enumerate() {
        let mut prefix = (g as u32).to_le_bytes().to_vec();
        prefix.push(RELOCATED);
        let ranges = plan.ranges(|f| checkpoint.capture.for_each_live_range(f));
        let Copied { moved, end } = copy_forward::copy_ranges(log, &prefix, ranges)?;
        if moved.is_empty() {
            continue;
        }
        last_end = last_end.max(end);
        wait_durable(log, last_end)?;
        let relocation = Relocation::new(moved);
        // Chunks only ever gain new positions by this, so the ranges read
        // from the checkpoint are still the state's (or were dropped).
        group.view.apply(|state| {
            state.relocate(|loc| relocation.moved_to(loc).unwrap_or(loc));
        });
    }
    Ok(plan.moved)
}

/// How long a copy-forward round waits for its copies to become durable.
const DURABLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the log's durable position reaches `end` (a copy-forward
/// round's last record).
fn wait_durable(log: &Log, end: u64) -> Result<(), CopyError> {
    let deadline = Instant::now() + DURABLE_TIMEOUT;
    while log.durable_position() < end {
        if let Some(failure) = log.failure() {
            return Err(CopyError::LogFailed(failure));
        }
        if Instant::now() > deadline {
            return Err(CopyError::NotDurable);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
