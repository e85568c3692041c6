//! Read planning: which log slices hold the bytes a read returns, and what
//! the response says about the stream (next offset, up to date, closed).
//! Planning is pure; the engine copies the slices out of its log.

use crate::command::StreamId;
use crate::error::CoreError;
use crate::offset::{Offset, ReadFrom};
use crate::state::{Slice, StreamInfo, StreamsState};
use crate::stream::StreamState;

/// The answer to a read, before its bytes are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlan {
    /// The stream as of the plan (its tail is `info.next_offset`).
    pub info: StreamInfo,
    pub start: Offset,
    /// Where the next read continues.
    pub next: Offset,
    /// Slices, in stream order, whose bytes make up the body.
    pub slices: Vec<Slice>,
    /// The byte budget the plan was made for. A JSON read whose last
    /// slice is a tiered one going past it is ended by the engine on the
    /// last message boundary within it (or after one message), which
    /// moves `next` back.
    pub budget: u64,
}

impl ReadPlan {
    pub fn byte_len(&self) -> u64 {
        self.slices.iter().map(Slice::len).sum()
    }

    /// Ends the read at stream position `end` (inside its last slice, a
    /// tiered one): the engine found a message boundary there.
    pub fn end_at(&mut self, end: u64) {
        if let Some(Slice::Object { from, to, .. }) = self.slices.last_mut() {
            debug_assert!(*from < end && end <= *to, "the end lies in the last slice");
            *to = end;
        }
        self.next = Offset(end);
    }

    /// Whether the read starts strictly inside a tiered chunk of a JSON
    /// stream, where only the object's footer knows the boundaries.
    pub fn starts_inside_tiered_json(&self) -> bool {
        self.info.kind == crate::ContentKind::Json
            && matches!(self.slices.first(), Some(Slice::Object { chunk, from, .. }) if *from != chunk.start)
    }

    /// The read reached the tail: nothing more exists right now.
    pub fn up_to_date(&self) -> bool {
        self.next == self.info.next_offset
    }

    /// The stream is closed and this read reached its final byte.
    pub fn reached_close(&self) -> bool {
        self.info.closed && self.up_to_date()
    }
}

impl StreamsState {
    /// A stream that reads and HEAD may see: not deleted, not expired.
    pub fn live_stream(&self, name: &str, now_ms: i64) -> Result<&StreamState, CoreError> {
        let s = self.stream_by_name(name).ok_or(CoreError::NotFound)?;
        check_live(s, now_ms)?;
        Ok(s)
    }

    /// Metadata for HEAD (does not renew the TTL).
    pub fn head(&self, name: &str, now_ms: i64) -> Result<StreamInfo, CoreError> {
        self.live_stream(name, now_ms).map(StreamInfo::of)
    }

    /// Plans a read of `name` and renews its sliding TTL.
    pub fn plan_read(
        &self,
        name: &str,
        from: ReadFrom,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<ReadPlan, CoreError> {
        let s = self.live_stream(name, now_ms)?;
        s.touch(now_ms);
        let start = match from {
            ReadFrom::Start => s.earliest,
            ReadFrom::Now => s.tail,
            ReadFrom::At(offset) => offset.position(),
        };
        self.plan_at(s, start, max_bytes)
    }

    /// Plans a read of stream `id` from `position`: live tails follow a
    /// stream by id so a deleted and re-created name ends them.
    pub fn plan_read_by_id(
        &self,
        id: StreamId,
        position: u64,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<ReadPlan, CoreError> {
        let s = self.stream(id).ok_or(CoreError::NotFound)?;
        check_live(s, now_ms)?;
        s.touch(now_ms);
        self.plan_at(s, position, max_bytes)
    }

    fn plan_at(&self, s: &StreamState, start: u64, max_bytes: u64) -> Result<ReadPlan, CoreError> {
        if start > s.tail {
            return Err(CoreError::OffsetBeyondTail);
        }
        if start < s.earliest {
            return Err(CoreError::Trimmed {
                earliest: Offset(s.earliest),
                incarnation: s.incarnation(),
            });
        }
        if !self.is_boundary(s.id, start) {
            return Err(CoreError::OffsetNotOnBoundary);
        }
        let budget = max_bytes.max(1);
        let (slices, next) = self.collect(s, start, budget);
        Ok(ReadPlan {
            info: StreamInfo::of(s),
            start: Offset(start),
            next: Offset(next),
            slices,
            budget,
        })
    }

    /// Gathers slices from `from` towards the tail until `budget` bytes.
    /// Byte streams stop exactly at the budget; JSON streams stop at the
    /// end of a slice, which always ends on a message boundary.
    fn collect(&self, top: &StreamState, from: u64, budget: u64) -> (Vec<Slice>, u64) {
        // The fork chain as ranges [lo, hi) per stream, lowest first.
        let mut ranges = Vec::new();
        let (mut cur, mut hi) = (top, top.tail);
        loop {
            let lo = from.max(cur.own_start());
            if lo < hi {
                ranges.push((cur, lo, hi));
            }
            match &cur.x().base {
                Some(base) if from < base.point => {
                    hi = hi.min(base.point);
                    cur = &self.streams[&base.source];
                }
                _ => break,
            }
        }
        ranges.reverse();

        let json = top.is_json();
        let mut slices = Vec::new();
        let (mut taken, mut next) = (0u64, from);
        'streams: for (stream, lo, hi) in ranges {
            // Tiered chunks come before hot ones.
            let cold = stream.cold_chunks();
            let first_cold = cold.partition_point(|c| c.end <= lo);
            for chunk in cold.iter_from(first_cold) {
                if chunk.start >= hi {
                    break;
                }
                if taken >= budget {
                    break 'streams;
                }
                let slice_lo = lo.max(chunk.start);
                let mut slice_hi = hi.min(chunk.end);
                if !json {
                    slice_hi = slice_hi.min(slice_lo.saturating_add(budget - taken));
                }
                slices.push(Slice::Object {
                    stream: stream.id,
                    chunk: chunk.clone(),
                    from: slice_lo,
                    to: slice_hi,
                });
                taken += slice_hi - slice_lo;
                next = slice_hi;
                if taken > budget {
                    // A JSON slice past the budget: the engine ends it on
                    // a message boundary; nothing may follow it.
                    break 'streams;
                }
            }
            let first = stream.chunks.partition_point(|c| c.end() <= lo);
            for chunk in stream.chunks.iter_from(first) {
                if chunk.start >= hi || taken >= budget {
                    break;
                }
                let slice_lo = lo.max(chunk.start);
                let mut slice_hi = hi.min(chunk.end());
                if !json {
                    slice_hi = slice_hi.min(slice_lo.saturating_add(budget - taken));
                }
                slices.push(Slice::Log {
                    loc: chunk.loc + (slice_lo - chunk.start),
                    len: slice_hi - slice_lo,
                });
                taken += slice_hi - slice_lo;
                next = slice_hi;
            }
            if taken >= budget {
                break;
            }
        }
        (slices, next)
    }
}

fn check_live(s: &StreamState, now_ms: i64) -> Result<(), CoreError> {
    if s.soft_deleted {
        return Err(CoreError::Gone);
    }
    if s.is_expired(now_ms) {
        // An expired stream that forks still read is as good as deleted.
        return Err(if s.fork_refs > 0 {
            CoreError::Gone
        } else {
            CoreError::NotFound
        });
    }
    Ok(())
}
