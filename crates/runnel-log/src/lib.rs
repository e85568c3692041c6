//! Runnel's append log: segment files of CRC32C-framed records, written by
//! one committer thread that makes many appends durable with one fsync
//! (group commit), recovered after a crash by truncating the torn tail.
//!
//! The log knows nothing of streams. A record is an opaque payload at a
//! global byte position; [`Log::append`] buffers it and returns where its
//! payload lands, and the record is durable once [`Log::durable_position`]
//! (or the durability listener) reaches the returned end position.
//!
//! Failure policy: a failed write or fsync is fatal for the log. It stops
//! accepting appends, reports the error to the listener, and never retries
//! (after a failed fsync the kernel may have dropped the dirty pages, so a
//! retry could report success for data that is gone).

mod active;
mod frame;
mod segment;
mod spare;
mod sync_stats;

use active::ActiveSegment;
use segment::Segment;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use frame::HEADER_LEN;
pub use segment::{create_dir_durable, write_back};
pub use sync_stats::SyncStats;

/// When appends are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Never fsync: acknowledged appends survive a process crash but not
    /// a power loss. For benchmarks.
    Never,
    /// Group commit: one fsync covers every record buffered since the last.
    #[default]
    Batch,
    /// One fsync per record. For comparison with per-write-fsync systems.
    Always,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "never" => Ok(SyncMode::Never),
            "batch" => Ok(SyncMode::Batch),
            "always" => Ok(SyncMode::Always),
            other => Err(format!(
                "unknown sync mode {other:?} (never, batch, always)"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A segment is closed for appends once it holds this many bytes.
    pub segment_bytes: u64,
    pub sync: SyncMode,
    /// Largest payload accepted; larger frames on disk are corruption.
    pub max_record_bytes: u32,
    /// Records before this position are already reflected in a checkpoint:
    /// recovery does not scan segments that end at or before it, and
    /// segments missing below it were deleted on purpose (garbage
    /// collected), not lost.
    pub replay_from: u64,
    /// Segments missing at or below this position were deleted on purpose
    /// too (when above `replay_from`): a recovery that scans from before
    /// its checkpoint, for records the checkpoint does not cover, names
    /// the checkpoint here.
    pub collected_below: u64,
    /// No committer thread: buffered records are written and synced only
    /// when [`Log::commit`] is called. For deterministic simulations, which
    /// decide when IO completes.
    pub manual_commit: bool,
    /// Prepare each next segment ahead of time as a synced file of zeros
    /// (see `spare.rs`), so syncs overwrite allocated blocks instead of
    /// growing the file. A log that has written a few MiB keeps one spare
    /// segment on disk. Ignored with `manual_commit`.
    pub preallocate: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 256 << 20,
            sync: SyncMode::Batch,
            max_record_bytes: 128 << 20,
            replay_from: 0,
            collected_below: 0,
            manual_commit: false,
            preallocate: true,
        }
    }
}

/// The one error type of the log.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    #[error("log IO failed while {context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("the log stopped after an earlier write or sync failure: {0}")]
    Failed(Arc<LogError>),
    #[error("record of {0} bytes exceeds the log's record limit")]
    RecordTooLarge(usize),
    #[error("position {0} is not in the log")]
    OutOfRange(u64),
    #[error("the log is shut down")]
    Closed,
}

impl LogError {
    pub(crate) fn io(context: &'static str, source: io::Error) -> LogError {
        LogError::Io {
            context,
            source: Arc::new(source),
        }
    }

    /// True when the underlying cause is a full disk or quota.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            LogError::Io { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                )
            }
            LogError::Failed(inner) => inner.is_out_of_space(),
            _ => false,
        }
    }
}

/// Called by the committer after each batch: the new durable position, or
/// the error that stopped the log.
pub type DurabilityListener = Box<dyn Fn(Result<u64, LogError>) + Send + Sync>;

/// A record found during recovery: where its payload starts, and the
/// payload.
pub struct RecoveredRecord<'a> {
    pub payload_pos: u64,
    pub payload: &'a [u8],
}

/// Where an appended record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Position of the payload's first byte (for reads).
    pub payload_pos: u64,
    /// Position after the record: durable once the durable position
    /// reaches it.
    pub end: u64,
}

struct Pending {
    /// Framed records not yet handed to the committer.
    buf: Vec<u8>,
    /// Frame end offsets within `buf` (for `SyncMode::Always`).
    record_ends: Vec<usize>,
    /// Position the next record will start at.
    next_pos: u64,
    failed: Option<Arc<LogError>>,
    shutdown: bool,
    /// While the committer gathers a batch: the record count at which an
    /// append wakes it (0 otherwise).
    gather_target: usize,
}

struct Shared {
    dir: PathBuf,
    options: LogOptions,
    pending: Mutex<Pending>,
    wake_committer: Condvar,
    /// Segment base -> read handle.
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    durable: AtomicU64,
    listener: DurabilityListener,
    /// Syncs done since the log opened, and the time spent in them.
    syncs: sync_stats::SyncRecorder,
    /// Prepares the next segment ahead of time (absent with
    /// `manual_commit` or without `preallocate`).
    spare: Option<spare::Preparer>,
    /// With [`SyncMode::Never`]: everything before this position was
    /// synced by [`Log::sync_written`].
    synced: AtomicU64,
}

/// An open log. Dropping it stops the committer after it has written what
/// was already appended.
pub struct Log {
    shared: Arc<Shared>,
    committer: Option<JoinHandle<()>>,
    /// With `manual_commit`: the committer's state, driven by `commit`.
    manual: Option<Mutex<Committer>>,
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering it: every whole,
    /// checksummed record is passed to `on_record` in log order; the first
    /// bad frame and everything after it is removed.
    pub fn open(
        dir: &Path,
        options: LogOptions,
        listener: DurabilityListener,
        mut on_record: impl FnMut(RecoveredRecord<'_>) -> Result<(), LogError>,
    ) -> Result<Log, LogError> {
        segment::create_dir_durable(dir)
            .map_err(|e| LogError::io("creating the log directory", e))?;
        let bases = segment::list(dir)?;
        spare::remove_leftover(dir)?;
        let mut segments = BTreeMap::new();
        let mut end = bases.first().copied().unwrap_or(0);
        let mut cut = false;
        let last = bases.last().copied();
        for base in bases {
            let path = segment::path_for(dir, base);
            // Garbage collection leaves gaps, but only below the checkpoint.
            let checkpoint = options.replay_from.max(options.collected_below);
            let collected_gap = base != end && base <= checkpoint;
            if cut || (base != end && !collected_gap) {
                // After a torn segment, or past a gap: not part of the log.
                tracing::warn!(segment = %path.display(), "removing segment past the end of the valid log");
                std::fs::remove_file(&path).map_err(|e| LogError::io("removing a segment", e))?;
                cut = true;
                continue;
            }
            let file_len = std::fs::metadata(&path)
                .map_err(|e| LogError::io("reading segment metadata", e))?
                .len();
            let sealed_and_checkpointed =
                Some(base) != last && base + file_len <= options.replay_from;
            let scan = if sealed_and_checkpointed {
                // Whole, synced before the next segment began, and already
                // in the checkpoint: nothing to validate or replay.
                segment::Scan {
                    valid_len: file_len,
                    torn: false,
                    zeros_follow: false,
                }
            } else {
                segment::scan(&path, options.max_record_bytes, |offset, payload| {
                    on_record(RecoveredRecord {
                        payload_pos: base + offset,
                        payload,
                    })
                })?
            };
            if scan.torn {
                if scan.zeros_follow {
                    tracing::info!(segment = %path.display(), valid_bytes = scan.valid_len, "cutting the zeros after the last record (preallocated space or an unsynced write)");
                } else {
                    tracing::warn!(segment = %path.display(), valid_bytes = scan.valid_len, "truncating torn log tail");
                }
                let file = segment::open_rw(&path, false)?;
                file.set_len(scan.valid_len)
                    .and_then(|_| file.sync_all())
                    .map_err(|e| LogError::io("truncating a torn segment", e))?;
                cut = true;
            }
            let file = segment::open_rw(&path, false)?;
            let segment = Segment::sealed(file, map_len(&options), scan.valid_len);
            segments.insert(base, Arc::new(segment));
            end = base + scan.valid_len;
        }
        // The last segment is the one appends continue in.
        if let Some(last) = segments.values_mut().next_back() {
            Arc::get_mut(last).expect("not shared yet").unseal();
        }
        if segments.is_empty() {
            let file = segment::open_rw(&segment::path_for(dir, end), true)?;
            segment::sync_dir(dir)?;
            segments.insert(end, Arc::new(Segment::new(file, map_len(&options))));
        } else if cut {
            segment::sync_dir(dir)?;
        }

        let spare = if options.preallocate && !options.manual_commit {
            Some(spare::Preparer::start(dir, options.segment_bytes)?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            options,
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                record_ends: Vec::new(),
                next_pos: end,
                failed: None,
                shutdown: false,
                gather_target: 0,
            }),
            wake_committer: Condvar::new(),
            segments: RwLock::new(segments),
            durable: AtomicU64::new(end),
            syncs: sync_stats::SyncRecorder::new(),
            spare,
            listener,
            // Records found at open may sit in the page cache unsynced
            // (a process that never synced was killed): the first
            // `sync_written` syncs every segment.
            synced: AtomicU64::new(0),
        });
        if shared.options.manual_commit {
            let committer = Committer::new(&shared)?;
            return Ok(Log {
                shared,
                committer: None,
                manual: Some(Mutex::new(committer)),
            });
        }
        let committer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("runnel-log-commit".into())
                .spawn(move || commit_loop(&shared))
                .map_err(|e| LogError::io("starting the committer thread", e))?
        };
        Ok(Log {
            shared,
            committer: Some(committer),
            manual: None,
        })
    }

    /// Buffers a record for the committer. It is durable once the durable
    /// position reaches the returned `end`.
    pub fn append(&self, payload: &[u8]) -> Result<Appended, LogError> {
        if payload.is_empty() || payload.len() > self.shared.options.max_record_bytes as usize {
            return Err(LogError::RecordTooLarge(payload.len()));
        }
        let mut pending = self.shared.pending.lock().expect("log mutex");
        if let Some(err) = &pending.failed {
            return Err(LogError::Failed(Arc::clone(err)));
        }
        if pending.shutdown {
            return Err(LogError::Closed);
        }
        let start = pending.next_pos;
        // The committer sleeps on an empty buffer, or while it gathers a
        // batch: wake it only then (a notify is a syscall; under load most
        // appends skip it).
        let mut wake = pending.buf.is_empty();
        frame::encode_into(&mut pending.buf, payload);
        let buffered = pending.buf.len();
        pending.record_ends.push(buffered);
        if pending.gather_target != 0 && pending.record_ends.len() >= pending.gather_target {
            pending.gather_target = 0;
            wake = true;
        }
        let end = start + HEADER_LEN + payload.len() as u64;
        pending.next_pos = end;
        drop(pending);
        if wake {
            self.shared.wake_committer.notify_one();
        }
        Ok(Appended {
            payload_pos: start + HEADER_LEN,
            end,
        })
    }

    /// The position the next record will start at: every record appended
    /// so far, durable or not, lies before it.
    pub fn end_position(&self) -> u64 {
        self.shared.pending.lock().expect("log mutex").next_pos
    }

    /// Blocks while more than `limit` bytes are appended and not yet
    /// taken by the committer: a bulk writer (copy-forward moving a
    /// segment's live bytes) paces itself by it, so the log's buffer stays
    /// small rather than holding everything the writer copied. Returns at
    /// once with manual commits, or once the log has failed or shut down.
    pub fn wait_for_room(&self, limit: usize) {
        if self.shared.options.manual_commit {
            return;
        }
        loop {
            {
                let pending = self.shared.pending.lock().expect("log mutex");
                if pending.buf.len() <= limit || pending.failed.is_some() || pending.shutdown {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Bytes appended and not yet taken by the committer.
    pub fn buffered_bytes(&self) -> usize {
        self.shared.pending.lock().expect("log mutex").buf.len()
    }

    /// Everything before this position is durable (per the sync mode).
    pub fn durable_position(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// Whether a prepared spare segment is waiting for the next roll.
    pub fn spare_ready(&self) -> bool {
        self.shared
            .spare
            .as_ref()
            .is_some_and(spare::Preparer::is_ready)
    }

    /// Makes every record written so far durable, whatever the sync
    /// mode: a checkpoint or snapshot that refers to log positions calls
    /// it before it is written, so that no durable file ever points at
    /// log bytes a power cut could take (with [`SyncMode::Never`] nothing
    /// else syncs the log). With the other modes every written record is
    /// synced already, and this does nothing. A failed sync stops the log,
    /// as any failed sync does.
    pub fn sync_written(&self) -> Result<(), LogError> {
        if self.shared.options.sync != SyncMode::Never {
            return Ok(());
        }
        let written = self.durable_position();
        let from = self.shared.synced.load(Ordering::Acquire);
        if written <= from {
            return Ok(());
        }
        let files: Vec<Arc<std::fs::File>> = {
            let segments = self.shared.segments.read().expect("segments lock");
            // The segment holding `from`, and every later one.
            let first = segments
                .range(..=from)
                .next_back()
                .map_or(0, |(base, _)| *base);
            segments
                .range(first..)
                .map(|(_, s)| Arc::clone(&s.file))
                .collect()
        };
        let started = Instant::now();
        for file in files {
            if let Err(e) = file.sync_data() {
                let err = LogError::io("syncing records for a checkpoint", e);
                fail(&self.shared, err.clone());
                return Err(err);
            }
        }
        self.shared.syncs.record(started.elapsed());
        self.shared.synced.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    /// Syncs so far and the time they took.
    pub fn sync_stats(&self) -> SyncStats {
        self.shared.syncs.snapshot()
    }

    /// Reads `buf.len()` bytes at a durable position. A read never spans
    /// segments, because records never do.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let (base, segment) = self.segment_at(pos, buf.len())?;
        segment
            .read_exact_at(buf, pos - base)
            .map_err(|e| LogError::io("reading a record", e))
    }

    /// [`Log::read_at`] with a system call rather than through the
    /// segment's mapping: for bulk reads of old bytes (tiering them),
    /// whose pages should not stay in the process's resident memory.
    pub fn read_unmapped_at(&self, pos: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let (base, segment) = self.segment_at(pos, buf.len())?;
        segment
            .pread_exact_at(buf, pos - base)
            .map_err(|e| LogError::io("reading a record", e))
    }

    /// The segment holding `len` durable bytes at `pos`, and its base.
    fn segment_at(&self, pos: u64, len: usize) -> Result<(u64, Arc<Segment>), LogError> {
        if pos + len as u64 > self.durable_position() {
            return Err(LogError::OutOfRange(pos));
        }
        let (base, segment) = {
            let segments = self.shared.segments.read().expect("segments lock");
            let (base, segment) = segments
                .range(..=pos)
                .next_back()
                .ok_or(LogError::OutOfRange(pos))?;
            (*base, Arc::clone(segment))
        };
        Ok((base, segment))
    }

    /// Deletes the segments that end at or before `before` and that `keep`
    /// does not claim (`keep(base, end)` is true when the segment still
    /// holds live bytes). The segment being written is never deleted.
    /// Returns the bytes reclaimed.
    pub fn collect_segments(
        &self,
        before: u64,
        keep: impl Fn(u64, u64) -> bool,
    ) -> Result<u64, LogError> {
        let doomed: Vec<(u64, u64)> = {
            let segments = self.shared.segments.read().expect("segments lock");
            let bases: Vec<u64> = segments.keys().copied().collect();
            bases
                .windows(2)
                .map(|w| (w[0], w[1]))
                .filter(|&(base, end)| end <= before && !keep(base, end))
                .collect()
        };
        if doomed.is_empty() {
            return Ok(0);
        }
        let mut reclaimed = 0;
        for (base, end) in &doomed {
            self.shared
                .segments
                .write()
                .expect("segments lock")
                .remove(base);
            std::fs::remove_file(segment::path_for(&self.shared.dir, *base))
                .map_err(|e| LogError::io("removing a collected segment", e))?;
            reclaimed += end - base;
        }
        segment::sync_dir(&self.shared.dir)?;
        Ok(reclaimed)
    }

    /// The failure that stopped the log, if it stopped.
    pub fn failure(&self) -> Option<Arc<LogError>> {
        self.shared
            .pending
            .lock()
            .expect("log mutex")
            .failed
            .clone()
    }

    /// `(base, end)` of every segment but the one being written.
    pub fn sealed_segments(&self) -> Vec<(u64, u64)> {
        let segments = self.shared.segments.read().expect("segments lock");
        let bases: Vec<u64> = segments.keys().copied().collect();
        bases.windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// Number of segment files.
    /// Hands the pages reads mapped in back to the kernel's page cache.
    ///
    /// Reads copy bytes out of each segment's mapping, and every page a
    /// read touched stays mapped, counted in the process's resident
    /// memory, until the segment is deleted: after a catch-up storm over
    /// old data, that is every page it read. The page cache keeps them
    /// either way (as it does for a server that reads with `pread`); this
    /// only unmaps them from the process, so resident memory says what the
    /// process holds. The engine calls it every few seconds; a read after
    /// it takes a minor fault per page, as a `pread` would take a copy.
    pub fn release_mapped_pages(&self) {
        let segments: Vec<Arc<Segment>> = self
            .shared
            .segments
            .read()
            .expect("segments lock")
            .values()
            .cloned()
            .collect();
        for segment in segments {
            segment.release_mapped_pages();
        }
    }

    pub fn segment_count(&self) -> usize {
        self.shared.segments.read().expect("segments lock").len()
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// With `manual_commit`: writes and syncs everything buffered, as the
    /// committer thread would, and publishes the new durable position.
    /// Returns whether there was anything to write.
    pub fn commit(&self) -> Result<bool, LogError> {
        let manual = self
            .manual
            .as_ref()
            .expect("Log::commit needs LogOptions::manual_commit");
        let mut committer = manual.lock().expect("committer lock");
        {
            let mut pending = self.shared.pending.lock().expect("log mutex");
            if let Some(err) = &pending.failed {
                return Err(LogError::Failed(Arc::clone(err)));
            }
            if pending.buf.is_empty() {
                return Ok(false);
            }
            let committer = &mut *committer;
            std::mem::swap(&mut committer.batch, &mut pending.buf);
            std::mem::swap(&mut committer.record_ends, &mut pending.record_ends);
        }
        match committer.write_batch(&self.shared) {
            Ok(()) => Ok(true),
            Err(err) => {
                fail(&self.shared, err.clone());
                Err(err)
            }
        }
    }

    /// Stops the log as a killed process would: what is buffered and not
    /// yet committed is lost.
    pub fn crash(&self) {
        {
            let mut pending = self.shared.pending.lock().expect("log mutex");
            pending.buf.clear();
            pending.record_ends.clear();
            pending.shutdown = true;
        }
        // Whoever waits for the lost records hears that they never will be.
        fail(&self.shared, LogError::Closed);
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.shared.pending.lock().expect("log mutex").shutdown = true;
        self.shared.wake_committer.notify_one();
        if let Some(handle) = self.committer.take() {
            let _ = handle.join();
        }
    }
}

/// The committer thread: takes everything buffered, writes it, syncs
/// once, and publishes the new durable position.
///
/// Batching adapts to load. A lone writer's record is written at once.
/// When the previous batch held several records, writers are waiting in
/// step with the syncs, and the first of them to append after a sync
/// would otherwise be synced alone while the rest queue behind it for
/// another sync: so the committer waits for as many records as last time,
/// for at most half a sync time, and syncs them together.
fn commit_loop(shared: &Shared) {
    let mut committer = match Committer::new(shared) {
        Ok(committer) => committer,
        Err(err) => return fail(shared, err),
    };
    let gathers = shared.options.sync != SyncMode::Never;
    loop {
        {
            let mut pending = shared.pending.lock().expect("log mutex");
            while pending.buf.is_empty() && !pending.shutdown {
                pending = shared.wake_committer.wait(pending).expect("log mutex");
            }
            if pending.buf.is_empty() {
                drop(pending);
                if let Err(err) = committer.active.seal() {
                    fail(shared, err);
                }
                return;
            }
            let target = committer.last_batch_records;
            if gathers && target > 1 && pending.record_ends.len() < target {
                let deadline = Instant::now() + committer.sync_time / 2;
                while pending.record_ends.len() < target && !pending.shutdown {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    pending.gather_target = target;
                    pending = shared
                        .wake_committer
                        .wait_timeout(pending, left)
                        .expect("log mutex")
                        .0;
                }
                pending.gather_target = 0;
            }
            std::mem::swap(&mut committer.batch, &mut pending.buf);
            std::mem::swap(&mut committer.record_ends, &mut pending.record_ends);
        }
        if let Err(err) = committer.write_batch(shared) {
            return fail(shared, err);
        }
    }
}

/// The committer's state: the segment it writes and its batch buffers.
struct Committer {
    active: ActiveSegment,
    batch: Vec<u8>,
    record_ends: Vec<usize>,
    /// Records in the last batch written.
    last_batch_records: usize,
    /// Recent time of a write and sync (a moving average), which bounds
    /// how long a batch is gathered.
    sync_time: Duration,
}

impl Committer {
    fn new(shared: &Shared) -> Result<Committer, LogError> {
        Ok(Committer {
            active: ActiveSegment::open_last(shared)?,
            batch: Vec::new(),
            record_ends: Vec::new(),
            last_batch_records: 0,
            sync_time: Duration::from_micros(200),
        })
    }

    /// Writes the taken batch per the sync mode, then empties it.
    fn write_batch(&mut self, shared: &Shared) -> Result<(), LogError> {
        let started = Instant::now();
        let (active, batch, spare) = (&mut self.active, &self.batch, shared.spare.as_ref());
        match shared.options.sync {
            SyncMode::Always => {
                let mut from = 0;
                self.record_ends.iter().try_for_each(|&to| {
                    let r = active.write_and_sync(shared, spare, &batch[from..to], true);
                    from = to;
                    r
                })?
            }
            SyncMode::Batch => active.write_and_sync(shared, spare, batch, true)?,
            SyncMode::Never => active.write_and_sync(shared, spare, batch, false)?,
        }
        // Capped so one stalled sync cannot make gathering slow for long.
        let took = started.elapsed().min(Duration::from_millis(5));
        self.sync_time = (self.sync_time * 7 + took) / 8;
        self.last_batch_records = self.record_ends.len();
        shared.syncs.count_records(self.record_ends.len() as u64);
        shared.syncs.committer_cpu(thread_cpu_time());
        self.batch.clear();
        self.record_ends.clear();
        // A burst (a large record, a bulk copy) grew the buffers; they are
        // swapped with the appenders' and would keep that size for good.
        if self.batch.capacity() > KEEP_BATCH_BYTES {
            self.batch.shrink_to(KEEP_BATCH_BYTES);
        }
        if self.record_ends.capacity() > KEEP_BATCH_BYTES / 64 {
            self.record_ends.shrink_to(KEEP_BATCH_BYTES / 64);
        }
        Ok(())
    }
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`;
/// zero where the clock cannot be read). A system call: read it per batch
/// of work, not per record.
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `now`, which outlives the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Room a write batch's buffer keeps after a larger batch.
const KEEP_BATCH_BYTES: usize = 4 << 20;

/// Address space mapped per segment: room for the segment to fill past
/// its roll size with the batch that crosses it. Reads past the mapping
/// fall back to `pread`.
fn map_len(options: &LogOptions) -> u64 {
    options
        .segment_bytes
        .saturating_mul(2)
        .saturating_add(u64::from(options.max_record_bytes))
}

fn fail(shared: &Shared, err: LogError) {
    tracing::error!(error = %err, "log failed; it accepts no more appends until the process restarts");
    let err = Arc::new(err);
    shared.pending.lock().expect("log mutex").failed = Some(Arc::clone(&err));
    (shared.listener)(Err(LogError::Failed(err)));
}

#[cfg(test)]
mod tests;
