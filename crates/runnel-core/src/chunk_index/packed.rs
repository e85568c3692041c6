//! One block of the chunk index, encoded compactly.
//!
//! A chunk in memory is five words (40 bytes); most of it follows from
//! the chunk before. A stream's chunks are consecutive (each starts where
//! the one before ended), its appends lie in the log in order with other
//! streams' records between, and they arrive milliseconds apart. So a
//! block keeps, per chunk, four variable-length numbers: its length, and
//! the differences from what the chunk before predicts (zigzag-encoded,
//! so any value round-trips): start minus the previous end (0), location
//! minus the previous location plus length (the bytes of other records
//! between), time minus the previous time. The first chunk's prediction
//! is zero. About 6-8 bytes a chunk.
//!
//! Appends add to the last block's bytes; the block keeps its last chunk
//! decoded, so a search over blocks decodes none. Anything else is read
//! front to back ([`PackedIter`]): a lookup decodes up to
//! [`super::BLOCK`] chunks, a fraction of a microsecond. The few chunks
//! with message ends (JSON appends of several messages) keep them beside
//! the bytes, by position.

use super::ChunkRef;
use crate::stream::{Chunk, MessageEnds};
use crate::varint::{get_varint, put_varint, unzigzag, zigzag};

/// One chunk's fields, without message ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

#[derive(Debug, Clone)]
pub(super) struct Packed {
    len: u32,
    /// The last chunk decoded.
    last: Fields,
    /// Per chunk: length, then start, location and time as differences
    /// from the prediction.
    bytes: Vec<u8>,
    /// Message ends, by position in the block (ascending).
    ends: Vec<(u32, MessageEnds)>,
}

impl Packed {
    /// A block of one chunk.
    pub fn of(chunk: Chunk) -> Packed {
        let mut block = Packed {
            len: 0,
            last: Fields::default(),
            bytes: Vec::with_capacity(16),
            ends: Vec::new(),
        };
        block.push(chunk);
        block
    }

    /// A block of `chunks` (at least one).
    pub fn from_chunks(chunks: Vec<Chunk>) -> Packed {
        let mut chunks = chunks.into_iter();
        let mut block = Packed::of(chunks.next().expect("a block is never empty"));
        block.bytes.reserve_exact(chunks.len() * 8);
        for chunk in chunks {
            block.push(chunk);
        }
        block.bytes.shrink_to_fit();
        block
    }

    pub fn push(&mut self, chunk: Chunk) {
        let (fields, p) = (Fields::of(&chunk), self.last);
        if self.bytes.len() + 4 * MAX_VARINT > self.bytes.capacity() {
            // Small streams stay small: grow by a quarter.
            let room = (self.bytes.capacity() / 4).max(4 * MAX_VARINT);
            self.bytes.reserve_exact(room);
        }
        put_varint(&mut self.bytes, fields.len);
        put_varint(
            &mut self.bytes,
            zigzag(fields.start.wrapping_sub(p.start.wrapping_add(p.len))),
        );
        put_varint(
            &mut self.bytes,
            zigzag(fields.loc.wrapping_sub(p.loc.wrapping_add(p.len))),
        );
        put_varint(
            &mut self.bytes,
            zigzag(fields.at_ms.wrapping_sub(p.at_ms) as u64),
        );
        if let Some(ends) = chunk.message_ends {
            self.ends.push((self.len, ends));
        }
        self.last = fields;
        self.len += 1;
        debug_assert_eq!(self.iter().last().map(|c| c.loc), Some(fields.loc));
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
        let ends = match self.ends.last() {
            Some((position, ends)) if *position + 1 == self.len => Some(ends.as_slice()),
            _ => None,
        };
        ChunkRef {
            start,
            len,
            loc,
            at_ms,
            ends,
        }
    }

    pub fn iter(&self) -> PackedIter<'_> {
        PackedIter {
            block: self,
            at: 0,
            next: 0,
            prev: Fields::default(),
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
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<(u32, MessageEnds)>()
    }
}

/// A block's chunks, front to back.
pub(super) struct PackedIter<'a> {
    block: &'a Packed,
    /// Byte position of the next chunk's fields.
    at: usize,
    /// Position of the next chunk in the block.
    next: u32,
    prev: Fields,
    /// The first entry of `ends` at or after `next`.
    next_ends: usize,
}

impl<'a> Iterator for PackedIter<'a> {
    type Item = ChunkRef<'a>;

    fn next(&mut self) -> Option<ChunkRef<'a>> {
        if self.next == self.block.len {
            return None;
        }
        let (bytes, p) = (&self.block.bytes, self.prev);
        let len = get_varint(bytes, &mut self.at);
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
        let ends = match self.block.ends.get(self.next_ends) {
            Some((position, ends)) if *position == self.next => {
                self.next_ends += 1;
                Some(ends.as_slice())
            }
            _ => None,
        };
        self.prev = Fields {
            start,
            len,
            loc,
            at_ms,
        };
        self.next += 1;
        Some(ChunkRef {
            start,
            len,
            loc,
            at_ms,
            ends,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.block.len - self.next) as usize;
        (left, Some(left))
    }
}

/// Bytes of the longest varint (a u64).
const MAX_VARINT: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any chunks round-trip, whatever their fields, whether added
        /// one at a time or packed at once.
        #[test]
        fn round_trips(raw in prop::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), any::<i64>(), prop::option::of(prop::collection::vec(any::<u32>(), 1..4))), 1..100)) {
            let chunks: Vec<Chunk> = raw.into_iter().map(|(start, len, loc, at_ms, ends)| Chunk {
                start, len, loc, at_ms,
                message_ends: ends.and_then(MessageEnds::stored),
            }).collect();
            let packed = Packed::from_chunks(chunks.clone());
            prop_assert_eq!(packed.len(), chunks.len());
            prop_assert_eq!(packed.decode(), chunks.clone());
            prop_assert_eq!(packed.last().to_chunk(), chunks.last().unwrap().clone());
            let mut pushed = Packed::of(chunks[0].clone());
            for (i, chunk) in chunks.iter().enumerate().skip(1) {
                pushed.push(chunk.clone());
                prop_assert_eq!(pushed.last().to_chunk(), chunk.clone());
                prop_assert_eq!(pushed.len(), i + 1);
            }
            prop_assert_eq!(pushed.decode(), chunks);
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
        // The first chunk's numbers are whole (about 15 bytes), the rest
        // differences: 2 + 1 + 3 + 1 bytes.
        let packed = Packed::from_chunks(chunks);
        assert!(
            packed.heap_bytes() <= 15 + 63 * 7,
            "{} bytes",
            packed.heap_bytes()
        );
    }
}
