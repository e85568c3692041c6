//! A stream's hot chunk index: compact, and shareable in O(blocks).
//!
//! The index holds one chunk per append in blocks of [`BLOCK`] behind
//! `Arc`s, each encoded in about 7 bytes a chunk rather than 40
//! ([`packed`]); appends add to the last block. Cloning the index copies
//! the block pointers, not the chunks, so a checkpoint can take it under
//! the group's state lock in microseconds and encode its chunks after the
//! lock is released (see [`crate::checkpoint`]). A block still shared
//! with a capture is copied once on its next change, so a checkpoint
//! costs each busy stream at most one block's copy (a few hundred bytes).
//!
//! The index hands out [`ChunkRef`]s (copies of a chunk's fields that
//! borrow its message ends) rather than references: a chunk exists only
//! as it is decoded.
//!
//! Invariant: every block holds at least one chunk, and every block but
//! the first and the last holds exactly [`BLOCK`] chunks, so position `i`
//! maps to its block by arithmetic.

mod packed;

use std::sync::Arc;

use crate::stream::{Chunk, MessageEnds};
use packed::Packed;

/// Chunks per block: a lookup decodes up to a block, and a block's fixed
/// part (about 100 bytes) is under 2 bytes a chunk once it is full.
const BLOCK: usize = 64;

/// One chunk as the index gives it out: its fields, and its message ends
/// borrowed from the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRef<'a> {
    pub start: u64,
    pub len: u64,
    pub loc: u64,
    pub at_ms: i64,
    ends: Option<&'a [u32]>,
}

impl<'a> ChunkRef<'a> {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// The chunk's message ends (none for a chunk of one message).
    pub fn ends(&self) -> Option<&'a [u32]> {
        self.ends
    }

    pub fn to_chunk(self) -> Chunk {
        Chunk {
            start: self.start,
            len: self.len,
            loc: self.loc,
            at_ms: self.at_ms,
            message_ends: self.ends.and_then(|e| MessageEnds::stored(e.to_vec())),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkIndex {
    /// A plain vector (24 bytes in every stream, against a deque's 32):
    /// dropping whole blocks from the front moves only pointers.
    blocks: Vec<Arc<Packed>>,
}

impl PartialEq for ChunkIndex {
    fn eq(&self, other: &ChunkIndex) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ChunkIndex {}

impl ChunkIndex {
    pub fn len(&self) -> usize {
        match self.blocks.as_slice() {
            [] => 0,
            [only] => only.len(),
            [first, inner @ .., last] => first.len() + inner.len() * BLOCK + last.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn first(&self) -> Option<ChunkRef<'_>> {
        self.blocks.first().and_then(|b| b.iter().next())
    }

    pub fn last(&self) -> Option<ChunkRef<'_>> {
        self.blocks.last().map(|b| b.last())
    }

    pub fn get(&self, i: usize) -> Option<ChunkRef<'_>> {
        if i >= self.len() {
            return None;
        }
        let (block, at) = self.locate(i);
        self.blocks[block].iter().nth(at)
    }

    /// The block and the position in it of chunk `i` (which must exist).
    fn locate(&self, i: usize) -> (usize, usize) {
        let first = self.blocks[0].len();
        if i < first {
            (0, i)
        } else {
            let rest = i - first;
            (1 + rest / BLOCK, rest % BLOCK)
        }
    }

    /// The number of leading chunks for which `pred` holds (`pred` must
    /// hold for a prefix of the chunks, as with `slice::partition_point`).
    pub fn partition_point(&self, mut pred: impl FnMut(ChunkRef<'_>) -> bool) -> usize {
        // Blocks whose last chunk satisfies `pred` lie wholly in the prefix.
        let whole = self.blocks.partition_point(|b| pred(b.last()));
        match self.blocks.get(whole) {
            None => self.len(),
            Some(block) => {
                let before = match whole {
                    0 => 0,
                    n => self.blocks[0].len() + (n - 1) * BLOCK,
                };
                before + block.iter().take_while(|c| pred(*c)).count()
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = ChunkRef<'_>> + '_ {
        self.blocks.iter().flat_map(|b| b.iter())
    }

    /// The chunks from position `i` on.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = ChunkRef<'_>> + '_ {
        let (block, at) = if i < self.len() {
            self.locate(i)
        } else {
            (self.blocks.len(), 0)
        };
        self.blocks
            .iter()
            .skip(block)
            .enumerate()
            .flat_map(move |(n, b)| {
                let mut chunks = b.iter();
                if n == 0 && at > 0 {
                    chunks.nth(at - 1);
                }
                chunks
            })
    }

    /// Moves every chunk's log location: the byte at `loc` now lies at
    /// `relocate(loc)` (re-encodes every block).
    pub fn relocate(&mut self, relocate: impl Fn(u64) -> u64) {
        for block in &mut self.blocks {
            let mut chunks = block.decode();
            for chunk in &mut chunks {
                chunk.loc = relocate(chunk.loc);
            }
            *block = Arc::new(Packed::from_chunks(chunks));
        }
    }

    pub fn push(&mut self, chunk: Chunk) {
        match self.blocks.last_mut() {
            Some(last) if last.len() < BLOCK => Arc::make_mut(last).push(chunk),
            _ => self.blocks.push(Arc::new(Packed::of(chunk))),
        }
    }

    /// Removes the first `n` chunks; returns their byte count.
    pub fn remove_front(&mut self, n: usize) -> u64 {
        assert!(n <= self.len(), "removing {n} of {} chunks", self.len());
        let mut left = n;
        let mut bytes = 0;
        let mut whole = 0;
        for block in &self.blocks {
            if block.len() > left {
                break;
            }
            left -= block.len();
            bytes += block.iter().map(|c| c.len).sum::<u64>();
            whole += 1;
        }
        self.blocks.drain(..whole);
        if left > 0 {
            let mut chunks = self.blocks[0].decode();
            bytes += chunks.drain(..left).map(|c| c.len).sum::<u64>();
            self.blocks[0] = Arc::new(Packed::from_chunks(chunks));
        }
        bytes
    }

    /// Heap bytes of the index: the block pointers, and each block with
    /// its reference counts and its contents (message ends not counted).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let per_block = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Packed>();
        let pointers = self.blocks.capacity() * std::mem::size_of::<Arc<Packed>>();
        let blocks: usize = self.blocks.iter().map(|b| per_block + b.heap_bytes()).sum();
        (pointers + blocks) as u64
    }

    pub fn clear(&mut self) {
        *self = ChunkIndex::default();
    }

    /// Checks the block invariant.
    #[cfg(test)]
    pub fn assert_invariants(&self) {
        let last = self.blocks.len().saturating_sub(1);
        for (i, b) in self.blocks.iter().enumerate() {
            assert!(b.len() > 0, "block {i} is empty");
            if i != 0 && i != last {
                assert_eq!(b.len(), BLOCK, "inner block {i} is not full");
            }
        }
    }
}

impl From<Vec<Chunk>> for ChunkIndex {
    fn from(chunks: Vec<Chunk>) -> ChunkIndex {
        let mut index = ChunkIndex::default();
        for chunk in chunks {
            index.push(chunk);
        }
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk(start: u64) -> Chunk {
        Chunk {
            start,
            len: 1,
            loc: start * 10,
            // Some chunks carry message ends, which must travel too.
            message_ends: MessageEnds::stored(if start.is_multiple_of(5) {
                vec![1, 1]
            } else {
                vec![]
            }),
            at_ms: start as i64,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(usize),
        RemoveFront(usize),
        Capture,
        Relocate,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1..700usize).prop_map(Op::Push),
            2 => (0..800usize).prop_map(Op::RemoveFront),
            1 => Just(Op::Capture),
            1 => Just(Op::Relocate),
        ]
    }

    proptest! {
        /// The index behaves as a plain vector under every mix of
        /// appends, front removals and relocations, and a clone taken at
        /// any point keeps the chunks it saw.
        #[test]
        fn behaves_as_a_vector_and_clones_stay_frozen(ops in prop::collection::vec(op(), 1..40)) {
            let (mut index, mut model) = (ChunkIndex::default(), Vec::<Chunk>::new());
            let mut captures = Vec::new();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Push(n) => for _ in 0..n {
                        index.push(chunk(next));
                        model.push(chunk(next));
                        next += 1;
                    },
                    Op::RemoveFront(n) => {
                        let n = n.min(model.len());
                        let bytes = index.remove_front(n);
                        prop_assert_eq!(bytes, model.drain(..n).map(|c| c.len).sum::<u64>());
                    }
                    Op::Capture => captures.push((index.clone(), model.clone())),
                    Op::Relocate => {
                        index.relocate(|loc| loc + 1);
                        model.iter_mut().for_each(|c| c.loc += 1);
                    }
                }
                index.assert_invariants();
                prop_assert_eq!(index.len(), model.len());
                prop_assert_eq!(index.iter().map(ChunkRef::to_chunk).collect::<Vec<_>>(), model.clone());
                prop_assert_eq!(index.first().map(ChunkRef::to_chunk), model.first().cloned());
                prop_assert_eq!(index.last().map(ChunkRef::to_chunk), model.last().cloned());
                for probe in [0, model.len() / 3, model.len() / 2, model.len().saturating_sub(1), model.len()] {
                    prop_assert_eq!(index.get(probe).map(ChunkRef::to_chunk), model.get(probe).cloned());
                    prop_assert_eq!(
                        index.iter_from(probe).map(ChunkRef::to_chunk).collect::<Vec<_>>(),
                        model.get(probe..).unwrap_or(&[]).to_vec()
                    );
                    let key = model.get(probe).map_or(next, |c| c.start);
                    prop_assert_eq!(
                        index.partition_point(|c| c.start < key),
                        model.partition_point(|c| c.start < key)
                    );
                }
            }
            for (captured, seen) in captures {
                prop_assert_eq!(captured.iter().map(ChunkRef::to_chunk).collect::<Vec<_>>(), seen);
            }
        }
    }
}
