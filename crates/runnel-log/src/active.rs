//! The segment the committer writes to: appending batches, rolling to a
//! new segment by size, and using a prepared spare (see [`crate::spare`])
//! so that most syncs overwrite zeros instead of growing the file.
//!
//! A preallocated segment is longer than its records until it is sealed,
//! when the log closes (so a clean restart finds no zeros to cut) or when
//! it rolls. It rolls only once full, when its records already reach past
//! the zeros; sealing there anyway keeps the rule that every segment but
//! the last ends with its records, since recovery takes a segment whose
//! records end before its file does as torn and drops every segment after.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::segment::{self, Segment};
use crate::spare::Preparer;
use crate::{map_len, LogError, Shared};

/// A growing segment asks for a spare once it holds this much (or half a
/// segment, if less): a log that sees real traffic gets one, a log that
/// holds a few records does not write a segment of zeros.
const SPARE_AFTER_BYTES: u64 = 4 << 20;

pub(crate) struct ActiveSegment {
    base: u64,
    file: Arc<File>,
    /// Bytes of records in the segment.
    len: u64,
    /// The file began as a spare: past `len` it holds zeros, to be cut
    /// off when the segment is sealed.
    preallocated: bool,
    /// A spare was asked for on behalf of this segment.
    spare_requested: bool,
}

impl ActiveSegment {
    /// The last segment of a recovered log. Recovery cut it to its
    /// records, so it is not preallocated.
    pub(crate) fn open_last(shared: &Shared) -> Result<ActiveSegment, LogError> {
        let segments = shared.segments.read().expect("segments lock");
        let (base, segment) = segments.iter().next_back().expect("a log has a segment");
        let len = segment
            .file
            .metadata()
            .map_err(|e| LogError::io("reading segment metadata", e))?
            .len();
        Ok(ActiveSegment {
            base: *base,
            file: Arc::clone(&segment.file),
            len,
            preallocated: false,
            spare_requested: false,
        })
    }

    /// Writes bytes (whole records) at the end of the log, rolling to a new
    /// segment first when this one is full (or, when it grows without a
    /// spare, as soon as a spare is ready), then syncs if asked.
    pub(crate) fn write_and_sync(
        &mut self,
        shared: &Shared,
        spare: Option<&Preparer>,
        bytes: &[u8],
        sync: bool,
    ) -> Result<(), LogError> {
        let segment_bytes = shared.options.segment_bytes;
        if let Some(spare) = spare {
            if !self.preallocated
                && !self.spare_requested
                && self.len >= SPARE_AFTER_BYTES.min(segment_bytes / 2)
            {
                spare.request();
                self.spare_requested = true;
            }
        }
        let spare_waits =
            !self.preallocated && self.len > 0 && spare.is_some_and(Preparer::is_ready);
        if self.len >= segment_bytes || spare_waits {
            self.roll(shared, spare)?;
        }
        self.file
            .write_all_at(bytes, self.len)
            .map_err(|e| LogError::io("writing records", e))?;
        if sync {
            let started = Instant::now();
            self.file
                .sync_data()
                .map_err(|e| LogError::io("syncing records", e))?;
            shared.syncs.record(started.elapsed());
        }
        self.len += bytes.len() as u64;
        let end = self.base + self.len;
        shared.durable.store(end, Ordering::Release);
        (shared.listener)(Ok(end));
        Ok(())
    }

    /// Cuts a preallocated segment to its records, durably. Called before
    /// a roll, and when the log closes so a clean restart finds no tail.
    pub(crate) fn seal(&mut self) -> Result<(), LogError> {
        if self.preallocated {
            self.file
                .set_len(self.len)
                .and_then(|()| self.file.sync_all())
                .map_err(|e| LogError::io("sealing a preallocated segment", e))?;
            self.preallocated = false;
        }
        Ok(())
    }

    fn roll(&mut self, shared: &Shared, spare: Option<&Preparer>) -> Result<(), LogError> {
        self.seal()?;
        let base = self.base + self.len;
        let path = segment::path_for(&shared.dir, base);
        let preallocated = match spare {
            Some(spare) => spare.take_into(&path)?,
            None => false,
        };
        let file = segment::open_rw(&path, !preallocated)?;
        segment::sync_dir(&shared.dir)?;
        if let Some(spare) = spare {
            // A log that rolls is busy: have the next spare ready.
            spare.request();
        }
        let segment = Arc::new(Segment::new(file, map_len(&shared.options)));
        let file = Arc::clone(&segment.file);
        shared
            .segments
            .write()
            .expect("segments lock")
            .insert(base, segment);
        *self = ActiveSegment {
            base,
            file,
            len: 0,
            preallocated,
            spare_requested: true,
        };
        Ok(())
    }
}
