//! One stream's state: configuration, tail, producer table, and the index
//! from stream positions to where the bytes live in the log.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::LazyLock;

use std::sync::Arc;

use crate::chunk_index::ChunkIndex;
use crate::command::{ForkFrom, Retention, StreamId};
use crate::fork_copy::RemotePin;
use crate::tier::Placement;

/// How a stream's bytes are framed and rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    /// `application/json`: message framing, array reads.
    Json,
    /// `text/*`: SSE carries the text as is.
    Text,
    /// Anything else: SSE carries base64.
    Binary,
}

/// The media type of a Content-Type value: before any `;`, trimmed,
/// lower-cased. Two content types match when their media types do.
pub fn media_type(content_type: &str) -> String {
    bare_media_type(content_type).to_ascii_lowercase()
}

/// A content type without its parameters, case as given.
fn bare_media_type(content_type: &str) -> &str {
    let end = content_type.find(';').unwrap_or(content_type.len());
    content_type[..end].trim()
}

/// Whether two content types name the same media type (case and
/// parameters aside), without allocating.
pub fn same_media_type(a: &str, b: &str) -> bool {
    bare_media_type(a).eq_ignore_ascii_case(bare_media_type(b))
}

impl ContentKind {
    pub fn of(content_type: &str) -> ContentKind {
        let media = bare_media_type(content_type).as_bytes();
        if media.eq_ignore_ascii_case(b"application/json") {
            ContentKind::Json
        } else if media
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"text/"))
        {
            ContentKind::Text
        } else {
            ContentKind::Binary
        }
    }
}

/// One append's bytes: where they sit in the stream and in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Stream position of the first byte.
    pub start: u64,
    pub len: u64,
    /// Log location of the first byte (opaque to the state machine).
    pub loc: u64,
    /// For JSON chunks of more than one message: end of each message,
    /// relative to `start`.
    pub message_ends: Option<MessageEnds>,
    /// When it was appended (for age retention).
    pub at_ms: i64,
}

// A chunk as it is built and decoded: five words. The index keeps chunks
// encoded (`chunk_index::packed`), a few bytes each.
const _: () = assert!(std::mem::size_of::<Chunk>() == 40);

/// A chunk's message ends, behind one thin pointer: few chunks have them,
/// and an `Option<Box<[u32]>>` would cost every chunk of the index 16
/// bytes rather than 8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageEnds(Box<Box<[u32]>>);

impl MessageEnds {
    /// The ends of a new chunk of `ends.len()` messages: none for one.
    pub fn of(ends: &[u32]) -> Option<MessageEnds> {
        (ends.len() > 1).then(|| MessageEnds(Box::new(ends.into())))
    }

    /// Ends as a checkpoint stored them (none stored: none).
    pub fn stored(ends: Vec<u32>) -> Option<MessageEnds> {
        (!ends.is_empty()).then(|| MessageEnds(Box::new(ends.into_boxed_slice())))
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }
}

/// Where a fork's inherited bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForkBase {
    pub source: StreamId,
    /// Positions below this are read from the source.
    pub point: u64,
}

/// A stored snapshot: where its bytes are and how to recognise a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRef {
    pub offset: u64,
    pub placement: Placement,
    pub len: u64,
    pub digest: [u8; 32],
    pub content_type: String,
    pub server_made: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
}

/// One stream. What every stream has is inline (about 140 bytes); what
/// few streams have lives in [`Extras`], allocated only when used, so an
/// idle stream costs a few hundred bytes in all.
#[derive(Debug)]
pub struct StreamState {
    pub id: StreamId,
    /// Shared with the group's name index.
    pub name: Arc<str>,
    /// The Content-Type as given at creation, returned on reads (shared
    /// by the streams that use the same one).
    pub content_type: Arc<str>,
    pub kind: ContentKind,
    pub closed: bool,
    /// Deleted, but kept because forks still read it (answers 410).
    pub soft_deleted: bool,
    /// Compact as State Protocol change events.
    pub compaction: bool,
    /// Live forks reading this stream's bytes.
    pub(crate) fork_refs: u32,
    pub created_at_ms: i64,
    /// Last read or write, for sliding TTL. Reads renew it without a log
    /// entry, hence atomic (it is touched under a shared lock).
    pub(crate) last_access_ms: AtomicI64,
    /// Position after the last byte.
    pub tail: u64,
    /// History before this position was trimmed (reads there get 410).
    pub earliest: u64,
    /// Hot history: one entry per append, in this node's log.
    pub(crate) chunks: ChunkIndex,
    pub(crate) extras: Option<Box<Extras>>,
}

/// What only some streams have.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    /// Tiered history: one reference per chunk object, in stream order,
    /// all before the hot chunks.
    pub(crate) cold: crate::cold_list::ColdList,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
    pub(crate) base: Option<ForkBase>,
    /// The fork request that created this stream, for idempotent re-creates.
    pub(crate) fork_spec: Option<ForkFrom>,
    pub(crate) producers: HashMap<String, ProducerState>,
    pub(crate) last_stream_seq: Option<String>,
    /// Application snapshots by offset.
    pub(crate) snapshots: BTreeMap<u64, SnapshotRef>,
    /// The compactor's latest snapshot.
    pub(crate) server_snapshot: Option<SnapshotRef>,
    pub retention: Retention,
    /// Pins held by forks in other groups (each counted in `fork_refs`).
    pub(crate) pins: BTreeSet<String>,
    /// For a fork of a stream in another group: the pin it holds there.
    pub(crate) remote_source: Option<RemotePin>,
}

static NO_EXTRAS: LazyLock<Extras> = LazyLock::new(Extras::default);

impl StreamState {
    /// See [`crate::offset::incarnation`].
    pub fn incarnation(&self) -> u64 {
        crate::offset::incarnation(self.id, self.created_at_ms)
    }

    /// Whether this stream was forked from another.
    pub fn is_fork(&self) -> bool {
        self.extras
            .as_ref()
            .is_some_and(|x| x.fork_spec.is_some() || x.base.is_some())
    }

    /// The parts only some streams have (all empty when it has none).
    pub(crate) fn x(&self) -> &Extras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// The parts only some streams have, allocated on first use.
    pub(crate) fn x_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    pub fn ttl_secs(&self) -> Option<u64> {
        self.x().ttl_secs
    }

    pub fn expires_at_ms(&self) -> Option<i64> {
        self.x().expires_at_ms
    }

    pub fn retention(&self) -> Retention {
        self.x().retention
    }

    pub fn is_json(&self) -> bool {
        self.kind == ContentKind::Json
    }

    /// First position owned by this stream (a fork's inherited range ends
    /// here).
    pub(crate) fn own_start(&self) -> u64 {
        self.x().base.as_ref().map_or(0, |b| b.point)
    }

    pub fn last_access_ms(&self) -> i64 {
        self.last_access_ms.load(Ordering::Relaxed)
    }

    /// Renews the sliding TTL (reads and writes, never HEAD).
    pub fn touch(&self, now_ms: i64) {
        self.last_access_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// When the stream expires, if it does: the earlier of its absolute
    /// expiry and its sliding TTL.
    pub fn expires_at(&self) -> Option<i64> {
        let by_ttl = self.ttl_secs().map(|ttl| {
            self.last_access_ms().saturating_add(
                i64::try_from(ttl)
                    .unwrap_or(i64::MAX / 1000)
                    .saturating_mul(1000),
            )
        });
        match (self.expires_at_ms(), by_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at().is_some_and(|at| at <= now_ms)
    }

    /// Index of the own chunk containing `pos`, if any.
    pub(crate) fn own_chunk_index(&self, pos: u64) -> Option<usize> {
        let idx = self.chunks.partition_point(|c| c.start <= pos);
        let idx = idx.checked_sub(1)?;
        (pos < self.chunks.get(idx)?.end()).then_some(idx)
    }

    /// The snapshot a bootstrap starts from: the newest by offset, the
    /// application's on a tie.
    pub fn latest_snapshot(&self) -> Option<&SnapshotRef> {
        let app = self.x().snapshots.values().next_back();
        match (app, self.x().server_snapshot.as_ref()) {
            (Some(a), Some(s)) if s.offset > a.offset => Some(s),
            (Some(a), _) => Some(a),
            (None, s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_compare_case_and_parameter_insensitively() {
        assert_eq!(
            media_type("Application/JSON; charset=utf-8"),
            "application/json"
        );
        assert_eq!(ContentKind::of("APPLICATION/JSON"), ContentKind::Json);
        assert_eq!(ContentKind::of("text/plain"), ContentKind::Text);
        assert_eq!(
            ContentKind::of("application/octet-stream"),
            ContentKind::Binary
        );
        assert_eq!(ContentKind::of("image/png"), ContentKind::Binary);
        assert_eq!(ContentKind::of(" Text/Plain ;q=1"), ContentKind::Text);
        assert_eq!(ContentKind::of("tex"), ContentKind::Binary);
        assert!(same_media_type(
            "Application/JSON; charset=utf-8",
            "application/json"
        ));
        assert!(!same_media_type("application/json", "application/jsonx"));
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn a_stream_without_extras_stays_small() {
        // What an idle stream costs (BENCHMARKS.md, the memory section).
        let size = std::mem::size_of::<StreamState>();
        assert!(size <= 112, "{size}");
    }
}
