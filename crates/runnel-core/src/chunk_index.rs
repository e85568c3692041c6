//! A stream's hot chunk index, shareable in O(blocks).
//!
//! The index holds one [`Chunk`] per append in fixed-size blocks behind
//! `Arc`s. Cloning it copies the block pointers, not the chunks, so a
//! checkpoint can take the index under the group's state lock in
//! microseconds and encode its chunks after the lock is released (see
//! [`crate::checkpoint`]). A block still shared with a capture is copied
//! once on its next change (`Arc::make_mut`); only the last block takes
//! appends, so a checkpoint costs each busy stream one block copy.
//!
//! Invariant: every block holds at least one chunk, and every block but
//! the first and the last holds exactly [`BLOCK`] chunks, so position `i`
//! maps to its block by arithmetic.

use std::sync::Arc;

use crate::stream::Chunk;

/// Chunks per block: small enough that copying a shared last block is
/// cheap (12 KiB), large enough that a capture copies few pointers.
const BLOCK: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChunkIndex {
    /// A plain vector (24 bytes in every stream, against a deque's 32):
    /// dropping whole blocks from the front moves only pointers.
    blocks: Vec<Arc<Vec<Chunk>>>,
}

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

    pub fn first(&self) -> Option<&Chunk> {
        self.blocks.first().and_then(|b| b.first())
    }

    pub fn last(&self) -> Option<&Chunk> {
        self.blocks.last().and_then(|b| b.last())
    }

    pub fn get(&self, i: usize) -> Option<&Chunk> {
        (i < self.len()).then(|| {
            let (block, at) = self.locate(i);
            &self.blocks[block][at]
        })
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
    pub fn partition_point(&self, mut pred: impl FnMut(&Chunk) -> bool) -> usize {
        // Blocks whose last chunk satisfies `pred` lie wholly in the prefix.
        let whole = self
            .blocks
            .partition_point(|b| pred(b.last().expect("blocks are never empty")));
        match self.blocks.get(whole) {
            None => self.len(),
            Some(block) => {
                let before = match whole {
                    0 => 0,
                    n => self.blocks[0].len() + (n - 1) * BLOCK,
                };
                before + block.partition_point(pred)
            }
        }
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Chunk> + '_ {
        self.blocks.iter().flat_map(|b| b.iter())
    }

    /// The chunks from position `i` on.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = &Chunk> + '_ {
        let (block, at) = if i < self.len() {
            self.locate(i)
        } else {
            (self.blocks.len(), 0)
        };
        self.blocks
            .iter()
            .skip(block)
            .enumerate()
            .flat_map(move |(n, b)| b[if n == 0 { at } else { 0 }..].iter())
    }

    /// Every chunk, mutably (copies the blocks a capture still shares).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Chunk> + '_ {
        self.blocks
            .iter_mut()
            .flat_map(|b| Arc::make_mut(b).iter_mut())
    }

    pub fn push(&mut self, chunk: Chunk) {
        match self.blocks.last_mut() {
            Some(last) if last.len() < BLOCK => {
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
                self.blocks.push(Arc::new(block));
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
            let block = Arc::make_mut(&mut self.blocks[0]);
            bytes += block.drain(..left).map(|c| c.len).sum::<u64>();
            if block.capacity() > 2 * block.len() + 8 {
                block.shrink_to_fit();
            }
        }
        bytes
    }

    /// Room for block pointers (for [`ChunkIndex::heap_bytes`]).
    pub(crate) fn block_capacity(&self) -> usize {
        self.blocks.capacity()
    }

    /// Each block's room in chunks.
    pub(crate) fn block_capacities(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.iter().map(|b| b.capacity())
    }

    pub fn clear(&mut self) {
        *self = ChunkIndex::default();
    }

    /// Checks the block invariant.
    #[cfg(test)]
    pub fn assert_invariants(&self) {
        let last = self.blocks.len().saturating_sub(1);
        for (i, b) in self.blocks.iter().enumerate() {
            assert!(!b.is_empty(), "block {i} is empty");
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

impl std::ops::Index<usize> for ChunkIndex {
    type Output = Chunk;

    fn index(&self, i: usize) -> &Chunk {
        self.get(i)
            .unwrap_or_else(|| panic!("chunk {i} of {}", self.len()))
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
            message_ends: None,
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
                        index.iter_mut().for_each(|c| c.loc += 1);
                        model.iter_mut().for_each(|c| c.loc += 1);
                    }
                }
                index.assert_invariants();
                prop_assert_eq!(index.len(), model.len());
                prop_assert_eq!(index.iter().cloned().collect::<Vec<_>>(), model.clone());
                prop_assert_eq!(index.first(), model.first());
                prop_assert_eq!(index.last(), model.last());
                for probe in [0, model.len() / 3, model.len() / 2, model.len().saturating_sub(1), model.len()] {
                    prop_assert_eq!(index.get(probe), model.get(probe));
                    prop_assert_eq!(
                        index.iter_from(probe).cloned().collect::<Vec<_>>(),
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
                prop_assert_eq!(captured.iter().cloned().collect::<Vec<_>>(), seen);
            }
        }
    }
}
