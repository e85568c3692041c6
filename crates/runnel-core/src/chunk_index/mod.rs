//! A stream's hot chunk index: compact, and shareable in O(blocks).
//!
//! The index holds one chunk per append in fixed-size blocks behind
//! `Arc`s. Cloning it copies the block pointers, not the chunks, so a
//! checkpoint can take the index under the group's state lock in
//! microseconds and encode its chunks after the lock is released (see
//! [`crate::checkpoint`]).
//!
//! Only the last block takes appends, as plain [`Chunk`]s; once it holds
//! [`BLOCK`] chunks it is sealed: encoded in about 8 bytes a chunk rather
//! than 40 ([`sealed`]), and never changed again except by a front
//! removal or a relocation, which re-encode it. A block still shared with
//! a capture is copied once on its next change, so a checkpoint costs
//! each busy stream at most one open block's copy.
//!
//! The index hands out [`ChunkRef`]s (copies of a chunk's fields that
//! borrow its message ends) rather than references: a sealed chunk exists
//! only as it is decoded.
//!
//! Invariant: every block holds at least one chunk, and every block but
//! the first and the last holds exactly [`BLOCK`] chunks, so position `i`
//! maps to its block by arithmetic; every block but the last is sealed.

mod sealed;

use std::sync::Arc;

use crate::stream::{Chunk, MessageEnds};
use sealed::{Sealed, SealedIter};

/// Chunks per block: small, because every stream's last block is open
/// (40 bytes a chunk; 10,000 streams with half-full blocks of 64 hold
/// 13 MB) and a lookup in a sealed one decodes up to a block; large
/// enough that a sealed block's fixed part (about 120 bytes) is 2 bytes
/// a chunk and a capture copies few pointers.
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

impl Chunk {
    pub(crate) fn as_ref(&self) -> ChunkRef<'_> {
        ChunkRef {
            start: self.start,
            len: self.len,
            loc: self.loc,
            at_ms: self.at_ms,
            ends: self.ends(),
        }
    }
}

#[derive(Debug, Clone)]
enum Block {
    /// The last block, taking appends.
    Open(Arc<Vec<Chunk>>),
    Sealed(Arc<Sealed>),
}

impl Block {
    fn len(&self) -> usize {
        match self {
            Block::Open(chunks) => chunks.len(),
            Block::Sealed(sealed) => sealed.len(),
        }
    }

    fn last(&self) -> ChunkRef<'_> {
        match self {
            Block::Open(chunks) => chunks.last().expect("blocks are never empty").as_ref(),
            Block::Sealed(sealed) => sealed.last(),
        }
    }

    fn iter(&self) -> BlockIter<'_> {
        match self {
            Block::Open(chunks) => BlockIter::Open(chunks.iter()),
            Block::Sealed(sealed) => BlockIter::Sealed(sealed.iter()),
        }
    }
}

enum BlockIter<'a> {
    Open(std::slice::Iter<'a, Chunk>),
    Sealed(SealedIter<'a>),
}

impl<'a> Iterator for BlockIter<'a> {
    type Item = ChunkRef<'a>;

    fn next(&mut self) -> Option<ChunkRef<'a>> {
        match self {
            BlockIter::Open(chunks) => chunks.next().map(Chunk::as_ref),
            BlockIter::Sealed(sealed) => sealed.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            BlockIter::Open(chunks) => chunks.size_hint(),
            BlockIter::Sealed(sealed) => sealed.size_hint(),
        }
    }

    fn nth(&mut self, n: usize) -> Option<ChunkRef<'a>> {
        match self {
            BlockIter::Open(chunks) => chunks.nth(n).map(Chunk::as_ref),
            BlockIter::Sealed(sealed) => sealed.nth(n),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkIndex {
    /// A plain vector (24 bytes in every stream, against a deque's 32):
    /// dropping whole blocks from the front moves only pointers.
    blocks: Vec<Block>,
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
        self.blocks.last().map(Block::last)
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
        self.blocks.iter().flat_map(Block::iter)
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
    /// `relocate(loc)` (re-encodes the sealed blocks).
    pub fn relocate(&mut self, relocate: impl Fn(u64) -> u64) {
        for block in &mut self.blocks {
            match block {
                Block::Open(chunks) => {
                    for chunk in Arc::make_mut(chunks) {
                        chunk.loc = relocate(chunk.loc);
                    }
                }
                Block::Sealed(sealed) => {
                    let mut chunks = sealed.decode();
                    for chunk in &mut chunks {
                        chunk.loc = relocate(chunk.loc);
                    }
                    *block = Block::Sealed(Arc::new(Sealed::encode(chunks)));
                }
            }
        }
    }

    pub fn push(&mut self, chunk: Chunk) {
        match self.blocks.last_mut() {
            Some(Block::Open(last)) => {
                let last = Arc::make_mut(last);
                if last.len() == last.capacity() {
                    // Small streams stay small: grow by an eighth, up to
                    // a block.
                    let room = (last.len() / 8).max(4).min(BLOCK - last.len());
                    last.reserve_exact(room);
                }
                last.push(chunk);
            }
            _ => {
                let mut block = Vec::with_capacity(if self.blocks.is_empty() { 4 } else { BLOCK });
                block.push(chunk);
                self.blocks.push(Block::Open(Arc::new(block)));
            }
        }
        self.seal_full_last();
    }

    /// Seals the last block once it is full.
    fn seal_full_last(&mut self) {
        let Some(last) = self.blocks.last_mut() else {
            return;
        };
        if let Block::Open(chunks) = last {
            if chunks.len() == BLOCK {
                let chunks = std::mem::take(chunks);
                *last = Block::Sealed(Arc::new(Sealed::encode(Arc::unwrap_or_clone(chunks))));
            }
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
            let first = &mut self.blocks[0];
            match first {
                Block::Open(chunks) => {
                    let chunks = Arc::make_mut(chunks);
                    bytes += chunks.drain(..left).map(|c| c.len).sum::<u64>();
                    if chunks.capacity() > 2 * chunks.len() + 8 {
                        chunks.shrink_to_fit();
                    }
                }
                Block::Sealed(sealed) => {
                    let mut chunks = sealed.decode();
                    bytes += chunks.drain(..left).map(|c| c.len).sum::<u64>();
                    *first = Block::Sealed(Arc::new(Sealed::encode(chunks)));
                }
            }
        }
        bytes
    }

    /// Heap bytes of the index: the block pointers, and each block with
    /// its reference counts and its contents (message ends not counted).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let counts = 2 * std::mem::size_of::<usize>();
        let pointers = self.blocks.capacity() * std::mem::size_of::<Block>();
        let blocks: usize = self
            .blocks
            .iter()
            .map(|block| match block {
                Block::Open(chunks) => {
                    counts
                        + std::mem::size_of::<Vec<Chunk>>()
                        + chunks.capacity() * std::mem::size_of::<Chunk>()
                }
                Block::Sealed(sealed) => {
                    counts + std::mem::size_of::<Sealed>() + sealed.heap_bytes()
                }
            })
            .sum();
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
            if i != last || b.len() == BLOCK {
                assert!(matches!(b, Block::Sealed(_)), "block {i} is not sealed");
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
