//! A full block of the chunk index, encoded compactly.
//!
//! A chunk in memory is five words (40 bytes); most of it follows from
//! the chunk before. A stream's chunks are consecutive (each starts where
//! the one before ended), its appends lie in the log in order with other
//! streams' records between, and they arrive milliseconds apart. So a
//! sealed block keeps its first chunk's start, log location and time, and
//! then per chunk four variable-length numbers: its length, and the
//! differences from what the chunk before predicts (zigzag-encoded, so
//! any value round-trips): start minus the previous end (0), location
//! minus the previous location plus length (the bytes of other records
//! between), time minus the previous time. About 6-8 bytes a chunk.
//!
//! A sealed block is read front to back ([`SealedIter`]): a lookup
//! decodes up to [`super::BLOCK`] chunks, a fraction of a microsecond. The few
//! chunks with message ends (JSON appends of several messages) keep them
//! beside the bytes, by position.

use super::ChunkRef;
use crate::stream::{Chunk, MessageEnds};

/// One chunk's fields, without message ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    start: u64,
    len: u64,
    loc: u64,
    at_ms: i64,
}

impl Fields {
    fn of(chunk: &Chunk) -> Fields {
        Fields {
            start: chunk.start,
            len: chunk.len,
            loc: chunk.loc,
            at_ms: chunk.at_ms,
        }
    }
}

#[derive(Debug)]
pub(super) struct Sealed {
    len: u32,
    first: Fields,
    /// The last chunk decoded, so that a search over blocks decodes none.
    last: Fields,
    /// Per chunk: length; then, after the first, start, location and time
    /// as differences from the prediction.
    bytes: Box<[u8]>,
    /// Message ends, by position in the block (ascending).
    ends: Box<[(u32, MessageEnds)]>,
}

impl Sealed {
    /// Encodes `chunks` (at least one).
    pub fn encode(chunks: Vec<Chunk>) -> Sealed {
        assert!(!chunks.is_empty(), "sealing an empty block");
        let len = u32::try_from(chunks.len()).expect("a block holds few chunks");
        let first = Fields::of(&chunks[0]);
        let last = Fields::of(chunks.last().expect("not empty"));
        let mut bytes = Vec::with_capacity(chunks.len() * 8);
        let mut ends = Vec::new();
        let mut prev: Option<Fields> = None;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let fields = Fields::of(&chunk);
            put_varint(&mut bytes, fields.len);
            if let Some(p) = prev {
                put_varint(
                    &mut bytes,
                    zigzag(fields.start.wrapping_sub(p.start.wrapping_add(p.len))),
                );
                put_varint(
                    &mut bytes,
                    zigzag(fields.loc.wrapping_sub(p.loc.wrapping_add(p.len))),
                );
                put_varint(
                    &mut bytes,
                    zigzag(fields.at_ms.wrapping_sub(p.at_ms) as u64),
                );
            }
            if let Some(e) = chunk.message_ends {
                ends.push((i as u32, e));
            }
            prev = Some(fields);
        }
        let sealed = Sealed {
            len,
            first,
            last,
            bytes: bytes.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
        };
        debug_assert_eq!(sealed.iter().count(), len as usize);
        debug_assert_eq!(sealed.iter().last().map(|c| c.loc), Some(last.loc));
        sealed
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn last(&self) -> ChunkRef<'_> {
        let Fields {
            start,
            len,
            loc,
            at_ms,
        } = self.last;
        ChunkRef {
            start,
            len,
            loc,
            at_ms,
            ends: self.ends_of(self.len - 1),
        }
    }

    fn ends_of(&self, position: u32) -> Option<&[u32]> {
        self.ends
            .binary_search_by_key(&position, |(p, _)| *p)
            .ok()
            .map(|i| self.ends[i].1.as_slice())
    }

    pub fn iter(&self) -> SealedIter<'_> {
        SealedIter {
            sealed: self,
            at: 0,
            next: 0,
            prev: None,
            next_ends: 0,
        }
    }

    /// The chunks back in their plain form.
    pub fn decode(&self) -> Vec<Chunk> {
        self.iter().map(|c| c.to_chunk()).collect()
    }

    /// Heap bytes besides the block itself: the encoding and the ends'
    /// table (not the ends).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.len() + self.ends.len() * std::mem::size_of::<(u32, MessageEnds)>()
    }
}

/// A sealed block's chunks, front to back.
pub(super) struct SealedIter<'a> {
    sealed: &'a Sealed,
    /// Byte position of the next chunk's fields.
    at: usize,
    /// Position of the next chunk in the block.
    next: u32,
    prev: Option<Fields>,
    /// The first entry of `ends` at or after `next`.
    next_ends: usize,
}

impl<'a> Iterator for SealedIter<'a> {
    type Item = ChunkRef<'a>;

    fn next(&mut self) -> Option<ChunkRef<'a>> {
        if self.next == self.sealed.len {
            return None;
        }
        let bytes = &self.sealed.bytes;
        let len = get_varint(bytes, &mut self.at);
        let fields = match self.prev {
            None => Fields {
                len,
                ..self.sealed.first
            },
            Some(p) => {
                let start = p
                    .start
                    .wrapping_add(p.len)
                    .wrapping_add(unzigzag(get_varint(bytes, &mut self.at)));
                let loc = p
                    .loc
                    .wrapping_add(p.len)
                    .wrapping_add(unzigzag(get_varint(bytes, &mut self.at)));
                let at_ms = p
                    .at_ms
                    .wrapping_add(unzigzag(get_varint(bytes, &mut self.at)) as i64);
                Fields {
                    start,
                    len,
                    loc,
                    at_ms,
                }
            }
        };
        let ends = match self.sealed.ends.get(self.next_ends) {
            Some((position, ends)) if *position == self.next => {
                self.next_ends += 1;
                Some(ends.as_slice())
            }
            _ => None,
        };
        self.prev = Some(fields);
        self.next += 1;
        Some(ChunkRef {
            start: fields.start,
            len: fields.len,
            loc: fields.loc,
            at_ms: fields.at_ms,
            ends,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.sealed.len - self.next) as usize;
        (left, Some(left))
    }
}

fn zigzag(v: u64) -> u64 {
    let v = v as i64;
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint this module wrote (the bytes are never from outside).
fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any chunks round-trip, whatever their fields.
        #[test]
        fn round_trips(raw in prop::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), any::<i64>(), prop::option::of(prop::collection::vec(any::<u32>(), 1..4))), 1..300)) {
            let chunks: Vec<Chunk> = raw.into_iter().map(|(start, len, loc, at_ms, ends)| Chunk {
                start, len, loc, at_ms,
                message_ends: ends.and_then(MessageEnds::stored),
            }).collect();
            let sealed = Sealed::encode(chunks.clone());
            prop_assert_eq!(sealed.len(), chunks.len());
            prop_assert_eq!(sealed.decode(), chunks.clone());
            prop_assert_eq!(sealed.last().to_chunk(), chunks.last().unwrap().clone());
        }
    }

    #[test]
    fn a_typical_block_takes_a_few_bytes_a_chunk() {
        let chunks: Vec<Chunk> = (0..64u64)
            .map(|i| Chunk {
                start: i * 300,
                len: 300,
                loc: (1 << 30) + i * 40_000,
                at_ms: 1_800_000_000_000 + (i as i64) * 3,
                message_ends: None,
            })
            .collect();
        let sealed = Sealed::encode(chunks);
        assert!(
            sealed.heap_bytes() <= 64 * 7,
            "{} bytes",
            sealed.heap_bytes()
        );
    }
}
