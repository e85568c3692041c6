//! Creating a stream: a new stream, an idempotent re-create of an
//! existing one, or a fork (of a stream in the same group, or from a
//! copy of one in another group, see [`crate::fork_copy`]), and where a
//! fork begins.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use crate::command::{CreateStream, ForkFrom, Retention, StreamId};
use crate::error::CoreError;
use crate::fork_copy::RemotePin;
use crate::offset::MAX_POSITION;
use crate::state::{push_chunk, Applied, StreamInfo, StreamsState};
use crate::stream::{same_media_type, ContentKind, Extras, ForkBase, StreamState};

impl StreamsState {
    pub(crate) fn create(
        &mut self,
        c: &CreateStream,
        now: i64,
        data_len: u64,
        loc: u64,
    ) -> Result<Applied, CoreError> {
        if let Some(existing) = self.stream_by_name(&c.name) {
            if existing.soft_deleted {
                return Err(CoreError::NameHeldBySoftDeleted);
            }
            if !same_config(existing, c) || !self.same_fork(existing, c) {
                return Err(CoreError::ConfigMismatch);
            }
            return Ok(Applied::Created {
                stream: StreamInfo::of(existing),
                created: false,
            });
        }

        let (base, content_type, ttl_secs, expires_at_ms) = match (&c.fork, &c.inherit) {
            (Some(_), Some(inherit)) => {
                let source = &inherit.material;
                let (content_type, ttl, expires) = fork_config(
                    c,
                    &source.content_type,
                    source.ttl_secs,
                    source.expires_at_ms,
                )?;
                (None, content_type, ttl, expires)
            }
            (Some(fork), None) => {
                let source_id = *self
                    .names
                    .get(fork.source.as_str())
                    .ok_or(CoreError::ForkSourceNotFound)?;
                let source = &self.streams[&source_id];
                if source.soft_deleted {
                    return Err(CoreError::ForkSourceGone);
                }
                let (content_type, ttl, expires) = fork_config(
                    c,
                    &source.content_type,
                    source.ttl_secs(),
                    source.expires_at_ms(),
                )?;
                let point = self.resolve_fork_point(source_id, fork)?;
                (
                    Some(ForkBase {
                        source: source_id,
                        point,
                    }),
                    content_type,
                    ttl,
                    expires,
                )
            }
            (None, _) => (
                None,
                c.content_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".to_string()),
                c.ttl_secs,
                c.expires_at_ms,
            ),
        };

        let material = c.inherit.as_ref().map(|i| &i.material);
        let start = match (&base, material) {
            (Some(b), _) => b.point,
            (None, Some(m)) => m.point,
            (None, None) => 0,
        };
        // A fork cannot read what its source had already trimmed.
        let earliest = match (&base, material) {
            (Some(b), _) => self.streams[&b.source].earliest.min(b.point),
            (None, Some(m)) => m.earliest,
            (None, None) => 0,
        };
        // The copied bytes lead the entry's data.
        let inherited_len = material.map_or(0, |m| m.data_len());
        if inherited_len > data_len {
            return Err(CoreError::InheritedDataMissing);
        }
        if start.saturating_add(data_len - inherited_len) > MAX_POSITION {
            return Err(CoreError::StreamFull);
        }
        if let Some(b) = &base {
            self.streams
                .get_mut(&b.source)
                .expect("source exists")
                .fork_refs += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        let remote_source = c.inherit.as_ref().map(|i| RemotePin {
            source: c
                .fork
                .as_ref()
                .map_or_else(String::new, |f| f.source.clone()),
            token: i.token.clone(),
        });
        let extras = Extras {
            ttl_secs,
            expires_at_ms,
            base,
            fork_spec: c.fork.clone(),
            retention: c.retention,
            remote_source,
            ..Extras::default()
        };
        let plain = extras.ttl_secs.is_none()
            && extras.expires_at_ms.is_none()
            && extras.base.is_none()
            && extras.fork_spec.is_none()
            && extras.retention == Retention::default()
            && extras.remote_source.is_none();
        let name: Arc<str> = Arc::from(c.name.as_str());
        let mut stream = StreamState {
            id,
            name: Arc::clone(&name),
            kind: ContentKind::of(&content_type),
            content_type: self.intern_content_type(&content_type),
            created_at_ms: now,
            last_access_ms: AtomicI64::new(now),
            closed: c.closed,
            tail: start,
            chunks: Default::default(),
            fork_refs: 0,
            soft_deleted: false,
            earliest,
            compaction: c.compaction,
            extras: (!plain).then(|| Box::new(extras)),
        };
        if let Some(m) = material {
            stream.chunks = m.stored_chunks(loc).into();
        }
        self.hot_bytes += inherited_len;
        self.hot_bytes += push_chunk(
            &mut stream,
            data_len - inherited_len,
            loc + inherited_len,
            &c.body.message_ends,
            now,
        );
        let info = StreamInfo::of(&stream);
        self.names.insert(name, id);
        self.streams.insert(id, Box::new(stream));
        self.changed.push(id);
        Ok(Applied::Created {
            stream: info,
            created: true,
        })
    }

    /// Whether a create names the fork point `existing` was created at:
    /// the same request, or (in the same group) the same source and the
    /// same resolved position (the engine resolves sub-offsets into
    /// tiered history before proposing).
    fn same_fork(&self, existing: &StreamState, c: &CreateStream) -> bool {
        let x = existing.x();
        if c.fork == x.fork_spec {
            return true;
        }
        match (&c.fork, &x.fork_spec, &x.base, &c.inherit) {
            (Some(asked), Some(spec), Some(base), None) if asked.source == spec.source => {
                self.names.get(asked.source.as_str()) == Some(&base.source)
                    && self.resolve_fork_point(base.source, asked).ok() == Some(base.point)
            }
            _ => false,
        }
    }

    /// Where a fork of `source_id` begins, from its offset and sub-offset.
    pub(crate) fn resolve_fork_point(
        &self,
        source_id: StreamId,
        fork: &ForkFrom,
    ) -> Result<u64, CoreError> {
        let source = &self.streams[&source_id];
        let base_point = match fork.offset {
            Some(o) if o > source.tail => return Err(CoreError::ForkOffsetBeyondTail),
            Some(o) => o,
            None => source.tail,
        };
        if !self.is_boundary(source_id, base_point) {
            return Err(CoreError::ForkOffsetNotOnBoundary);
        }
        if fork.sub_offset == 0 {
            return Ok(base_point);
        }
        let view = self
            .chunk_view(source_id, base_point)
            .ok_or(CoreError::SubOffsetOutOfRange)?;
        if view.tiered {
            // The append's extent is in the object; the engine resolves
            // such sub-offsets to a position before proposing.
            return Err(CoreError::SubOffsetInTieredHistory);
        }
        let point = if view.json {
            let after: Vec<u64> = view
                .boundaries()
                .into_iter()
                .filter(|b| *b > base_point)
                .collect();
            let index = usize::try_from(fork.sub_offset - 1).unwrap_or(usize::MAX);
            *after.get(index).ok_or(CoreError::SubOffsetOutOfRange)?
        } else {
            let point = base_point.saturating_add(fork.sub_offset);
            if point > view.end {
                return Err(CoreError::SubOffsetOutOfRange);
            }
            point
        };
        Ok(point)
    }
}

/// A fork's content type and expiry: its own if given (the content type
/// must match the source's), else the source's.
fn fork_config(
    c: &CreateStream,
    source_content_type: &str,
    source_ttl: Option<u64>,
    source_expires: Option<i64>,
) -> Result<(String, Option<u64>, Option<i64>), CoreError> {
    let content_type = match &c.content_type {
        Some(ct) if !same_media_type(ct, source_content_type) => {
            return Err(CoreError::ContentTypeMismatch)
        }
        Some(ct) => ct.clone(),
        None => source_content_type.to_string(),
    };
    if c.ttl_secs.is_none() && c.expires_at_ms.is_none() {
        Ok((content_type, source_ttl, source_expires))
    } else {
        Ok((content_type, c.ttl_secs, c.expires_at_ms))
    }
}

/// Whether an existing stream answers an idempotent create.
fn same_config(existing: &StreamState, c: &CreateStream) -> bool {
    let content_type_ok = match &c.content_type {
        Some(ct) => same_media_type(ct, &existing.content_type),
        None => {
            c.fork.is_some() || same_media_type(&existing.content_type, "application/octet-stream")
        }
    };
    let inherits_expiry = c.fork.is_some() && c.ttl_secs.is_none() && c.expires_at_ms.is_none();
    let expiry_ok = inherits_expiry
        || (c.ttl_secs == existing.ttl_secs() && c.expires_at_ms == existing.expires_at_ms());
    content_type_ok
        && expiry_ok
        && c.compaction == existing.compaction
        && c.retention == existing.retention()
}
