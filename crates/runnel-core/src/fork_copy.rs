//! Forks whose source lives in another group.
//!
//! A fork normally reads its inherited bytes from its source in the same
//! state. When the source belongs to another group (another Raft log, in
//! a cluster) that is impossible, so the fork's group stores a copy:
//!
//! 1. the source's group applies [`Command::Pin`](crate::Command::Pin):
//!    it checks the fork request as a local fork would, resolves the fork
//!    point, and records a pin token, which counts like a local fork
//!    (deleting the source then only soft-deletes it);
//! 2. it answers with [`ForkMaterial`]: the source's metadata and its
//!    chunks up to the fork point, bytes included;
//! 3. the fork's group applies a create carrying that copy
//!    ([`Inherited`]), so the fork reads the same bytes at the same
//!    offsets with the same message boundaries;
//! 4. when the fork goes (delete, expiry, or a failed create), its
//!    [`RemotePin`] is handed back and the source's group applies
//!    [`Command::Unpin`](crate::Command::Unpin), which may complete the
//!    deletion of a soft-deleted source.
//!
//! Pins are keyed by a token unique to one fork creation, so every step
//! can be retried and a failed create can release its pin without
//! touching the pin of an existing fork of the same name.

use crate::chunk_index::ChunkRef;
use crate::codec::{CodecError, Reader, Writer};
use crate::command::StreamId;
use crate::error::CoreError;
use crate::state::{Applied, Slice, StreamsState};
use crate::stream::{Chunk, MessageEnds};
use crate::tier::ColdChunk;

/// One append of the source as the fork inherits it (clipped at the fork
/// point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InheritedChunk {
    pub start: u64,
    pub len: u64,
    /// JSON message ends relative to `start`, when more than one.
    pub message_ends: Vec<u32>,
    pub at_ms: i64,
}

/// What a fork copies from a source in another group: the source's
/// metadata and its chunks below the fork point. The chunks' bytes travel
/// alongside, concatenated in chunk order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkMaterial {
    pub content_type: String,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
    /// The source's earliest readable offset (history before it trimmed).
    pub earliest: u64,
    /// The fork point: the fork's own appends start here.
    pub point: u64,
    pub chunks: Vec<InheritedChunk>,
}

/// A fork creation's copy of its source, with the pin it holds there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inherited {
    pub token: String,
    pub material: ForkMaterial,
}

/// A pin held on a stream of another group, released when the fork
/// holding it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePin {
    pub source: String,
    pub token: String,
}

impl ForkMaterial {
    /// Bytes of all chunks together.
    pub fn data_len(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// The wire form: the material, then `data`.
    pub fn encode(&self, data: &[u8]) -> Vec<u8> {
        let mut w = Writer::wrap(Vec::with_capacity(64 + data.len()));
        self.write(&mut w);
        w.raw(data);
        w.finish()
    }

    /// Reads the wire form; returns the material and its data.
    pub fn decode(bytes: &[u8]) -> Result<(ForkMaterial, &[u8]), CodecError> {
        let mut r = Reader::new(bytes);
        let material = ForkMaterial::read(&mut r)?;
        let data = &bytes[r.data_start()..];
        if data.len() as u64 != material.data_len() {
            return Err(CodecError::Truncated);
        }
        Ok((material, data))
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        w.str(&self.content_type);
        w.opt_u64(self.ttl_secs);
        w.opt_i64(self.expires_at_ms);
        w.u64(self.earliest);
        w.u64(self.point);
        w.u64(self.chunks.len() as u64);
        for c in &self.chunks {
            w.u64(c.start);
            w.u64(c.len);
            w.u32_list(&c.message_ends);
            w.i64(c.at_ms);
        }
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<ForkMaterial, CodecError> {
        let content_type = r.string()?;
        let ttl_secs = r.opt_u64()?;
        let expires_at_ms = r.opt_i64()?;
        let earliest = r.u64()?;
        let point = r.u64()?;
        let count = r.u64()?;
        let mut chunks = Vec::new();
        // The total must fit: `data_len` sums it (found by fuzzing).
        let mut total = 0u64;
        for _ in 0..count {
            let chunk = InheritedChunk {
                start: r.u64()?,
                len: r.u64()?,
                message_ends: r.u32_list()?,
                at_ms: r.i64()?,
            };
            total = total
                .checked_add(chunk.len)
                .ok_or(CodecError::Invalid("fork material longer than 2^64 bytes"))?;
            chunks.push(chunk);
        }
        Ok(ForkMaterial {
            content_type,
            ttl_secs,
            expires_at_ms,
            earliest,
            point,
            chunks,
        })
    }

    /// The chunks as a stream stores them, the bytes stored from `loc` on.
    pub(crate) fn stored_chunks(&self, mut loc: u64) -> Vec<Chunk> {
        self.chunks
            .iter()
            .map(|c| {
                let chunk = Chunk {
                    start: c.start,
                    len: c.len,
                    loc,
                    message_ends: MessageEnds::of(&c.message_ends),
                    at_ms: c.at_ms,
                };
                loc += c.len;
                chunk
            })
            .collect()
    }
}

impl StreamsState {
    /// Applies a pin: checks a fork of `name` at `offset`/`sub_offset` as
    /// a local fork would be checked and holds the source for it.
    pub(crate) fn pin(
        &mut self,
        name: &str,
        token: &str,
        offset: Option<u64>,
        sub_offset: u64,
    ) -> Result<Applied, CoreError> {
        let id = *self.names.get(name).ok_or(CoreError::ForkSourceNotFound)?;
        let source = &self.streams[&id];
        if source.soft_deleted {
            return Err(CoreError::ForkSourceGone);
        }
        let fork = crate::ForkFrom {
            source: name.to_string(),
            offset,
            sub_offset,
        };
        let point = self.resolve_fork_point(id, &fork)?;
        let source = self.streams.get_mut(&id).expect("named streams exist");
        if source.x_mut().pins.insert(token.to_string()) {
            source.fork_refs += 1;
        }
        Ok(Applied::Pinned { point })
    }

    /// Applies an unpin: releases `token` if `name` holds it (a retry or
    /// an unknown token changes nothing). A soft-deleted source whose last
    /// reader this was goes for good.
    pub(crate) fn unpin(&mut self, name: &str, token: &str) -> Applied {
        let Some(&id) = self.names.get(name) else {
            return Applied::Unpinned {
                released: Vec::new(),
            };
        };
        let s = self.streams.get_mut(&id).expect("named streams exist");
        if s.extras
            .as_deref_mut()
            .is_some_and(|x| x.pins.remove(token))
        {
            s.fork_refs -= 1;
            if s.soft_deleted && s.fork_refs == 0 {
                self.remove_chain(id);
            }
        }
        Applied::Unpinned {
            released: std::mem::take(&mut self.released),
        }
    }

    /// What a fork of `name` at `point` (from [`Applied::Pinned`]) copies:
    /// the source's metadata (with no chunks yet) and the pieces its
    /// bytes come from, in order. The engine turns log pieces into their
    /// chunk and bytes, and tiered ones into the appends the object's
    /// footer lists.
    pub fn fork_material(
        &self,
        name: &str,
        point: u64,
    ) -> Result<(ForkMaterial, Vec<MaterialPiece>), CoreError> {
        let id: StreamId = *self.names.get(name).ok_or(CoreError::ForkSourceNotFound)?;
        let source = &self.streams[&id];
        let mut pieces = Vec::new();
        let mut pos = source.earliest.min(point);
        while pos < point {
            match self.stored_at(id, pos) {
                Some((Stored::Log(chunk), end)) => {
                    let end = end.min(point);
                    let len = end - chunk.start;
                    let ends: Vec<u32> = chunk
                        .ends()
                        .unwrap_or(&[])
                        .iter()
                        .copied()
                        .filter(|e| u64::from(*e) <= len)
                        .collect();
                    pieces.push(MaterialPiece::Log {
                        chunk: InheritedChunk {
                            start: chunk.start,
                            len,
                            message_ends: if ends.len() > 1 { ends } else { Vec::new() },
                            at_ms: chunk.at_ms,
                        },
                        loc: chunk.loc,
                    });
                    pos = end;
                }
                Some((Stored::Object(owner, chunk), end)) => {
                    let end = end.min(point);
                    pieces.push(MaterialPiece::Object(Slice::Object {
                        stream: owner,
                        chunk,
                        from: pos,
                        to: end,
                    }));
                    pos = end;
                }
                None => return Err(CoreError::ForkOffsetBeyondTail),
            }
        }
        Ok((
            ForkMaterial {
                content_type: source.content_type.to_string(),
                ttl_secs: source.ttl_secs(),
                expires_at_ms: source.expires_at_ms(),
                earliest: source.earliest.min(point),
                point,
                chunks: Vec::new(),
            },
            pieces,
        ))
    }

    /// Where the byte at `pos` of stream `id`'s view is stored, through
    /// its fork chain, and where that view of its chunk ends.
    fn stored_at(&self, id: StreamId, pos: u64) -> Option<(Stored<'_>, u64)> {
        let mut s = self.streams.get(&id)?;
        let mut limit = s.tail;
        loop {
            if pos >= s.own_start() {
                if let Some(i) = s.cold_index(pos) {
                    let chunk = s.cold_chunks().get(i).expect("cold_index is in range");
                    let end = chunk.end.min(limit);
                    return (pos < end).then_some((Stored::Object(s.id, chunk), end));
                }
                let chunk = s.chunks.get(s.own_chunk_index(pos)?)?;
                let end = chunk.end().min(limit);
                return (pos < end).then_some((Stored::Log(chunk), end));
            }
            let base = s.x().base.as_ref()?;
            limit = limit.min(base.point);
            s = self.streams.get(&base.source)?;
        }
    }
}

/// The appends of the tiered range `from..to` of a chunk starting at
/// `chunk_start`, as a fork inherits them: the object's footer gives the
/// append and message ends (relative to `chunk_start`), the chunk its
/// newest append time. The last append is clipped at `to`.
pub fn inherited_from_object(
    chunk_start: u64,
    from: u64,
    to: u64,
    append_ends: &[u32],
    message_ends: &[u32],
    at_ms: i64,
) -> Vec<InheritedChunk> {
    let abs = |e: &u32| chunk_start + u64::from(*e);
    let mut chunks = Vec::new();
    let mut start = from;
    for end in append_ends.iter().map(abs).filter(|e| *e > from) {
        let end = end.min(to);
        let ends: Vec<u32> = message_ends
            .iter()
            .map(abs)
            .filter(|e| *e > start && *e <= end)
            .map(|e| (e - start) as u32)
            .collect();
        chunks.push(InheritedChunk {
            start,
            len: end - start,
            message_ends: if ends.len() > 1 { ends } else { Vec::new() },
            at_ms,
        });
        start = end;
        if start >= to {
            break;
        }
    }
    chunks
}

/// Where a byte of a stream is stored.
enum Stored<'a> {
    Log(ChunkRef<'a>),
    Object(StreamId, ColdChunk),
}

/// Where part of a fork's copy of its source comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaterialPiece {
    /// One append, whole or clipped at the fork point, in the log at `loc`.
    Log { chunk: InheritedChunk, loc: u64 },
    /// A range of a tiered chunk, as a [`Slice::Object`].
    Object(Slice),
}
