//! A stream's history: snapshots (published by the application or made by
//! the compactor), trimming before an offset, automatic retention, and the
//! plan of a bootstrap (latest snapshot plus everything after it).

use crate::command::{PutSnapshot, StreamId};
use crate::error::CoreError;
use crate::offset::Offset;
use crate::read::ReadPlan;
use crate::state::{Applied, StreamsState};
use crate::stream::{SnapshotRef, StreamState};
use crate::tier::Placement;

/// The answer to a bootstrap, before its bytes are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapPlan {
    /// The snapshot the client starts from, if the stream has one.
    pub snapshot: Option<SnapshotRef>,
    /// Messages after the snapshot (or from the earliest offset).
    pub tail: ReadPlan,
}

impl BootstrapPlan {
    /// Offset the snapshot stands for: the tail read starts here.
    pub fn snapshot_offset(&self) -> Offset {
        self.tail.start
    }
}

impl StreamsState {
    pub(crate) fn put_snapshot(
        &mut self,
        p: &PutSnapshot,
        data_len: u64,
        loc: u64,
    ) -> Result<Applied, CoreError> {
        let id = self.live_id(&p.name)?;
        let valid = {
            let s = &self.streams[&id];
            p.offset >= s.earliest && self.is_boundary(id, p.offset)
        };
        if !valid {
            return Err(CoreError::SnapshotOffsetInvalid);
        }
        let s = self.streams.get_mut(&id).expect("live stream");
        let incarnation = s.incarnation();
        let snapshot = SnapshotRef {
            offset: p.offset,
            placement: Placement::Log(loc),
            len: data_len,
            digest: p.digest,
            content_type: p.content_type.clone(),
            server_made: p.server_made,
        };
        if p.server_made {
            // Only the newest server snapshot is kept; an older one (a
            // compaction that raced a newer) is dropped.
            let x = s.x_mut();
            if x.server_snapshot
                .as_ref()
                .is_none_or(|old| old.offset < p.offset)
            {
                if let Some(old) = x.server_snapshot.replace(snapshot) {
                    self.doom_snapshot(id, old.offset, &old.placement);
                }
            }
            return Ok(Applied::SnapshotStored {
                offset: Offset(p.offset),
                incarnation,
                created: true,
            });
        }
        match s.x().snapshots.get(&p.offset) {
            Some(existing) if existing.digest == p.digest => Ok(Applied::SnapshotStored {
                offset: Offset(p.offset),
                incarnation,
                created: false,
            }),
            Some(_) => Err(CoreError::SnapshotConflict),
            None => {
                s.x_mut().snapshots.insert(p.offset, snapshot);
                Ok(Applied::SnapshotStored {
                    offset: Offset(p.offset),
                    incarnation,
                    created: true,
                })
            }
        }
    }

    pub(crate) fn delete_snapshot(
        &mut self,
        name: &str,
        offset: u64,
    ) -> Result<Applied, CoreError> {
        let id = self.live_id(name)?;
        let s = self.streams.get_mut(&id).expect("live stream");
        let removed = s
            .x_mut()
            .snapshots
            .remove(&offset)
            .ok_or(CoreError::SnapshotNotFound)?;
        self.doom_snapshot(id, offset, &removed.placement);
        Ok(Applied::SnapshotDeleted)
    }

    /// Drops history before `before`: reads there get 410, snapshots
    /// before it go, and (when no fork reads them) so does the index of
    /// the dropped appends.
    pub(crate) fn trim(&mut self, name: &str, before: u64) -> Result<Applied, CoreError> {
        let id = self.live_id(name)?;
        if !self.is_boundary(id, before) {
            return Err(CoreError::TrimOffsetInvalid);
        }
        let s = self.streams.get_mut(&id).expect("live stream");
        if before > s.earliest {
            s.earliest = before;
            let mut dropped = Vec::new();
            if let Some(x) = s.extras.as_deref_mut() {
                let kept = x.snapshots.split_off(&before);
                dropped.extend(
                    std::mem::replace(&mut x.snapshots, kept)
                        .into_values()
                        .map(|snap| (Some(snap.offset), snap.placement)),
                );
                if x.server_snapshot
                    .as_ref()
                    .is_some_and(|snap| snap.offset < before)
                {
                    let snap = x.server_snapshot.take().expect("checked");
                    dropped.push((Some(snap.offset), snap.placement));
                }
            }
            let (mut hot_freed, mut cold_freed) = (0, 0);
            if s.fork_refs == 0 {
                let dead = s.chunks.partition_point(|c| c.end() <= before);
                hot_freed = s.chunks.remove_front(dead);
                let cold = s.extras.as_deref_mut().map_or(Vec::new(), |x| {
                    let dead = x.cold.partition_point(|c| c.end <= before);
                    x.cold.drain_front(dead)
                });
                for chunk in cold {
                    cold_freed += chunk.len();
                    dropped.push((None, Placement::Object(chunk)));
                }
            }
            self.hot_bytes -= hot_freed;
            self.cold_bytes -= cold_freed;
            for (offset, placement) in dropped {
                match (offset, placement) {
                    (Some(offset), placement) => self.doom_snapshot(id, offset, &placement),
                    (None, Placement::Object(chunk)) => self.doom(id, None, chunk),
                    (None, Placement::Log(_)) => {}
                }
            }
            self.changed.push(id);
        }
        let s = &self.streams[&id];
        Ok(Applied::Trimmed {
            earliest: Offset(s.earliest),
            incarnation: s.incarnation(),
        })
    }

    /// Streams whose retention wants trimming now, with the trim point:
    /// the first append kept is the first one within both the byte and
    /// the age limit.
    pub fn retention_trims(&self, now_ms: i64) -> Vec<(String, u64)> {
        let mut trims = Vec::new();
        for s in self.streams.values() {
            if s.soft_deleted
                || (s.retention().max_bytes.is_none() && s.retention().max_age_secs.is_none())
            {
                continue;
            }
            let cutoff = s.retention().max_age_secs.map(|age| {
                now_ms.saturating_sub(
                    i64::try_from(age)
                        .unwrap_or(i64::MAX / 1000)
                        .saturating_mul(1000),
                )
            });
            let too_far = |start: u64| {
                s.retention()
                    .max_bytes
                    .is_some_and(|max| s.tail - start > max)
            };
            // Tiered history goes a whole chunk at a time, and only once
            // all of it is past a limit: a stream keeps up to one chunk
            // more than its byte limit rather than lose bytes within it.
            let cold = s.cold_chunks();
            let cold_dead = cold.partition_point(|c| {
                cutoff.is_some_and(|cut| c.newest_at_ms < cut)
                    || s.retention()
                        .max_bytes
                        .is_some_and(|max| s.tail - c.end >= max)
            });
            let point = if let Some(kept) = cold.get(cold_dead) {
                if cold_dead == 0 {
                    continue;
                }
                kept.start
            } else {
                let own = &s.chunks;
                let first_kept = own.partition_point(|c| {
                    cutoff.is_some_and(|cut| c.at_ms < cut) || too_far(c.start)
                });
                if cold_dead == 0 && first_kept == 0 {
                    continue;
                }
                own.get(first_kept).map_or(s.tail, |c| c.start)
            };
            if point > s.earliest {
                trims.push((s.name.to_string(), point));
            }
        }
        trims
    }

    /// A stored snapshot of `name`: at `offset`, or the latest.
    pub fn snapshot(
        &self,
        name: &str,
        offset: Option<u64>,
        now_ms: i64,
    ) -> Result<SnapshotRef, CoreError> {
        let s = self.live_stream(name, now_ms)?;
        let found = match offset {
            Some(o) => s.x().snapshots.get(&o).or(s
                .x()
                .server_snapshot
                .as_ref()
                .filter(|snap| snap.offset == o)),
            None => s.latest_snapshot(),
        };
        found.cloned().ok_or(CoreError::SnapshotNotFound)
    }

    /// Plans a bootstrap: the latest snapshot and the messages after it
    /// (at most `max_bytes`; the plan says whether it reached the tail).
    pub fn plan_bootstrap(
        &self,
        name: &str,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<BootstrapPlan, CoreError> {
        let s = self.live_stream(name, now_ms)?;
        s.touch(now_ms);
        let snapshot = s.latest_snapshot().cloned();
        let start = snapshot.as_ref().map_or(s.earliest, |snap| snap.offset);
        let tail = self.plan_read_by_id(s.id, start, max_bytes, now_ms)?;
        Ok(BootstrapPlan { snapshot, tail })
    }

    /// Compacting streams whose history since their last server snapshot
    /// is at least `min_bytes` and at least the snapshot's own size, or is
    /// non-empty and idle for `idle_ms`: (id, name, snapshot, tail).
    pub fn compaction_candidates(
        &self,
        min_bytes: u64,
        idle_ms: i64,
        now_ms: i64,
    ) -> Vec<CompactionWork> {
        self.streams
            .values()
            .filter(|s| s.compaction && !s.soft_deleted && s.is_json())
            .filter_map(|s| {
                let server_snapshot = s.x().server_snapshot.as_ref();
                let from = server_snapshot.map_or(s.earliest, |snap| snap.offset);
                let pending = s.tail - from;
                let snapshot_len = server_snapshot.map_or(0, |snap| snap.len);
                let last_append = s.last_append_ms().unwrap_or(s.created_at_ms);
                let due = pending >= min_bytes.max(snapshot_len)
                    || (pending > 0 && now_ms - last_append >= idle_ms);
                due.then(|| CompactionWork {
                    id: s.id,
                    name: s.name.to_string(),
                    snapshot: server_snapshot.cloned(),
                    from,
                    tail: s.tail,
                })
            })
            .collect()
    }

    fn live_id(&self, name: &str) -> Result<StreamId, CoreError> {
        let s: &StreamState = self.stream_by_name(name).ok_or(CoreError::NotFound)?;
        if s.soft_deleted {
            return Err(CoreError::Gone);
        }
        Ok(s.id)
    }
}

/// One stream's compaction to do: fold `snapshot` (if any) with the
/// messages in `[from, tail)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionWork {
    pub id: StreamId,
    pub name: String,
    pub snapshot: Option<SnapshotRef>,
    pub from: u64,
    pub tail: u64,
}
