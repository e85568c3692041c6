//! The local group engine: proposals are logged in the node's shared log,
//! applied once durable, and answered.
//!
//! One task per group owns the order of its commands. It appends each
//! proposal to the log as it arrives (so proposals of all groups share the
//! committer's next fsync) and applies the queued entries, in order, as
//! the durable position passes them. Rejected commands are logged too:
//! whether a command is accepted is decided only when it is applied, the
//! same way on every replay.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use runnel_core::checkpoint::CheckpointCapture;
use runnel_core::{Applied, Command, Entry};
use runnel_log::LogError;
use tokio::sync::{mpsc, oneshot, watch};

use crate::api::{BoxFuture, GroupEngine};
use crate::checkpoint::FileWriter;
use crate::error::EngineError;
use crate::upkeep::{propose_with_expiry, MaintainedGroup};
use crate::view::{delegate_reads_to_view, GroupView};

/// The durable position of the shared log, or the error that stopped it.
pub type DurableState = Result<u64, LogError>;

/// Limits on work queued in one group.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    /// Proposals waiting for the commit task.
    pub max_pending_proposals: usize,
    /// Body bytes proposed but not yet applied.
    pub max_inflight_bytes: u64,
}

struct Proposal {
    entry: Entry,
    reply: oneshot::Sender<Result<Applied, EngineError>>,
    bytes: u64,
}

/// A logged entry waiting for the durable position to pass it.
struct InFlight {
    entry: Entry,
    data_len: u64,
    data_loc: u64,
    end: u64,
    reply: oneshot::Sender<Result<Applied, EngineError>>,
    bytes: u64,
}

pub struct LocalGroup {
    index: u32,
    pub(crate) view: GroupView,
    proposals: mpsc::Sender<Proposal>,
    inflight_bytes: Arc<AtomicU64>,
    /// End of the last applied log record of this group (changed only
    /// under the state's write lock, so a reader holding the read lock
    /// sees it match the state).
    applied_end: Arc<AtomicU64>,
    /// Nanoseconds the commit task has been busy (see [`LocalGroup::commit_busy`]).
    commit_busy_nanos: Arc<AtomicU64>,
    limits: GroupLimits,
}

/// What a checkpoint captured of a group besides its state (which went
/// straight into the file).
pub(crate) struct GroupCheckpoint {
    pub applied_end: u64,
    /// The state written, for its live ranges (it shares the state's
    /// chunk index blocks rather than copying them).
    pub capture: CheckpointCapture,
    /// The sequence number the group's next queued object deletion gets.
    pub doomed_next: u64,
}

impl LocalGroup {
    /// Starts the group's commit task over `view` (its recovered state).
    pub(crate) fn start(
        index: u32,
        view: GroupView,
        applied_end: u64,
        durable: watch::Receiver<DurableState>,
        limits: GroupLimits,
    ) -> Arc<LocalGroup> {
        let (tx, rx) = mpsc::channel(limits.max_pending_proposals.max(1));
        let group = Arc::new(LocalGroup {
            index,
            view,
            proposals: tx,
            inflight_bytes: Arc::new(AtomicU64::new(0)),
            applied_end: Arc::new(AtomicU64::new(applied_end)),
            commit_busy_nanos: Arc::new(AtomicU64::new(0)),
            limits,
        });
        let task = CommitTask {
            index,
            view: group.view.clone(),
            inflight_bytes: Arc::clone(&group.inflight_bytes),
            applied_end: Arc::clone(&group.applied_end),
            busy_nanos: Arc::clone(&group.commit_busy_nanos),
            pending: VecDeque::new(),
            payload: Vec::new(),
        };
        tokio::spawn(task.run(rx, durable));
        group
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    /// The group's state, its applied position and its live log ranges,
    /// captured together. The state lock is held only to capture the
    /// state; its chunks are encoded after (appends go on meanwhile).
    pub(crate) fn checkpoint(&self, file: &mut FileWriter) -> GroupCheckpoint {
        let locked = std::time::Instant::now();
        let (capture, applied_end, doomed_next) = {
            let state = self.view.state.read().expect("state lock");
            let applied_end = self.applied_end.load(Ordering::Acquire);
            (
                state.capture_checkpoint(),
                applied_end,
                state.doomed_next_seq(),
            )
        };
        tracing::debug!(
            group = self.index,
            held_us = locked.elapsed().as_micros() as u64,
            "checkpoint captured the group's state"
        );
        file.group(applied_end, &capture);
        GroupCheckpoint {
            applied_end,
            capture,
            doomed_next,
        }
    }

    /// Time the group's commit task has spent working (ordering, logging
    /// and applying commands, and answering them) since the node started:
    /// the work each of the group's appends passes through one task for.
    /// Wall time between the task's waits, which is its CPU time unless
    /// the machine preempts it.
    pub fn commit_busy(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.commit_busy_nanos.load(Ordering::Relaxed))
    }

    /// Streams in the group (live and soft-deleted).
    pub fn stream_count(&self) -> usize {
        self.view.with_state(|s| s.stream_count())
    }

    pub(crate) async fn submit(&self, entry: Entry) -> Result<Applied, EngineError> {
        let bytes = 64 + entry.command.body().map_or(0, |b| b.data.len() as u64);
        let before = self.inflight_bytes.fetch_add(bytes, Ordering::AcqRel);
        // One proposal always fits, so a single large body is never refused
        // on an idle node; past that the byte budget applies.
        if before > 0 && before + bytes > self.limits.max_inflight_bytes {
            self.inflight_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return Err(EngineError::Overloaded);
        }
        let (reply, answer) = oneshot::channel();
        if let Err(e) = self.proposals.try_send(Proposal {
            entry,
            reply,
            bytes,
        }) {
            self.inflight_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return Err(match e {
                mpsc::error::TrySendError::Full(_) => EngineError::Overloaded,
                mpsc::error::TrySendError::Closed(_) => EngineError::ShuttingDown,
            });
        }
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }
}

impl MaintainedGroup for LocalGroup {
    fn index(&self) -> u32 {
        self.index
    }

    fn view(&self) -> &GroupView {
        &self.view
    }

    fn submit_entry(&self, entry: Entry) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(self.submit(entry))
    }
}

impl GroupEngine for LocalGroup {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(propose_with_expiry(self, command))
    }

    delegate_reads_to_view!();
}

/// The task that orders, logs and applies one group's commands.
struct CommitTask {
    index: u32,
    view: GroupView,
    inflight_bytes: Arc<AtomicU64>,
    applied_end: Arc<AtomicU64>,
    busy_nanos: Arc<AtomicU64>,
    pending: VecDeque<InFlight>,
    /// Reused encoding buffer.
    payload: Vec<u8>,
}

/// Proposals taken from the queue per wake-up before applying.
const MAX_BATCH: usize = 4096;

impl CommitTask {
    async fn run(
        mut self,
        mut proposals: mpsc::Receiver<Proposal>,
        mut durable: watch::Receiver<DurableState>,
    ) {
        let mut open = true;
        loop {
            if !open && self.pending.is_empty() {
                return;
            }
            let woke;
            tokio::select! {
                biased;
                changed = durable.changed(), if !self.pending.is_empty() => {
                    woke = Instant::now();
                    if changed.is_err() {
                        self.fail_all(EngineError::ShuttingDown);
                        return;
                    }
                }
                proposal = proposals.recv(), if open => {
                    woke = Instant::now();
                    match proposal {
                        Some(p) => {
                            self.log_proposal(p);
                            for _ in 1..MAX_BATCH {
                                match proposals.try_recv() {
                                    Ok(p) => self.log_proposal(p),
                                    Err(_) => break,
                                }
                            }
                        }
                        None => open = false,
                    }
                }
            }
            let status = durable.borrow_and_update().clone();
            self.apply_durable(status);
            let busy = woke.elapsed().as_nanos() as u64;
            self.busy_nanos.fetch_add(busy, Ordering::Relaxed);
        }
    }

    fn log_proposal(&mut self, mut p: Proposal) {
        let data_len = p.entry.command.body().map_or(0, |b| b.data.len() as u64);
        self.payload.clear();
        self.payload.extend_from_slice(&self.index.to_le_bytes());
        p.entry.encode_into(&mut self.payload);
        match self.view.log.append(&self.payload) {
            Ok(at) => {
                p.entry.command.release_data();
                self.pending.push_back(InFlight {
                    entry: p.entry,
                    data_len,
                    data_loc: at.payload_pos + self.payload.len() as u64 - data_len,
                    end: at.end,
                    reply: p.reply,
                    bytes: p.bytes,
                });
            }
            Err(err) => {
                self.inflight_bytes.fetch_sub(p.bytes, Ordering::AcqRel);
                let _ = p.reply.send(Err(EngineError::Storage(err)));
            }
        }
    }

    /// Applies, in order, every queued entry the durable position covers.
    fn apply_durable(&mut self, status: DurableState) {
        let durable = match status {
            Ok(position) => position,
            Err(err) => return self.fail_all(EngineError::Storage(err)),
        };
        if self.pending.front().is_none_or(|f| f.end > durable) {
            return;
        }
        let mut answers = Vec::new();
        self.view.apply(|state| {
            while self.pending.front().is_some_and(|f| f.end <= durable) {
                let f = self.pending.pop_front().expect("front exists");
                let result = state.apply(&f.entry, f.data_len, f.data_loc);
                self.applied_end.store(f.end, Ordering::Release);
                answers.push((f.reply, result, f.bytes));
            }
        });
        for (reply, result, bytes) in answers {
            self.inflight_bytes.fetch_sub(bytes, Ordering::AcqRel);
            let _ = reply.send(result.map_err(EngineError::Core));
        }
    }

    fn fail_all(&mut self, err: EngineError) {
        for f in self.pending.drain(..) {
            self.inflight_bytes.fetch_sub(f.bytes, Ordering::AcqRel);
            let _ = f.reply.send(Err(err.clone()));
        }
    }
}
