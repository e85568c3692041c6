//! A stream's tiered history, held compactly: its references to chunk
//! objects ([`ColdChunk`]), in stream order.
//!
//! A reference decoded is seven words and two halves (56 bytes), and a
//! stream that tiers often (every minute, with the defaults) gains one a
//! minute for as long as it keeps its history. Most of a reference follows
//! from the one before it: a chunk starts where the one before ended, its
//! newest append came a little later, the same leader on the same node
//! uploaded it with the same block size. So the list keeps references in
//! blocks of [`BLOCK`] as variable-length numbers: the length, and the
//! differences from the reference before (zigzag-encoded, so any value
//! round-trips; the first of a block is taken against zeros), with the
//! object's random nonce as is. About 15-20 bytes a reference.
//!
//! Appends go to the last block. Lookups search the blocks by their first
//! reference (each decoded on its own), then decode at most a block's worth ([`ColdList::get`],
//! [`ColdList::partition_point`]); iteration decodes front to back.

use crate::tier::ColdChunk;
use crate::varint::{get_varint, put_varint, unzigzag, zigzag};

/// References per block.
pub(crate) const BLOCK: usize = 32;

/// A stream's tiered chunk references, in order, packed. As large as
/// the plain vector it replaces (every stream that has tiered, or has
/// other rare state, holds one): the length and the last reference are
/// worked out from the blocks, each full but the first and the last.
#[derive(Default)]
pub struct ColdList {
    blocks: Vec<Block>,
}

struct Block {
    count: usize,
    bytes: Vec<u8>,
}

const ZERO: ColdChunk = ColdChunk {
    start: 0,
    end: 0,
    newest_at_ms: 0,
    term: 0,
    node: 0,
    nonce: 0,
    block_size: 0,
    footer_len: 0,
};

fn diff(now: u64, before: u64) -> u64 {
    zigzag(now.wrapping_sub(before))
}

fn undiff(before: u64, delta: u64) -> u64 {
    before.wrapping_add(unzigzag(delta))
}

fn encode(out: &mut Vec<u8>, c: &ColdChunk, before: &ColdChunk) {
    put_varint(out, diff(c.start, before.end));
    put_varint(out, c.end.wrapping_sub(c.start));
    put_varint(out, diff(c.newest_at_ms as u64, before.newest_at_ms as u64));
    put_varint(out, diff(c.term, before.term));
    put_varint(out, diff(c.node, before.node));
    out.extend_from_slice(&c.nonce.to_le_bytes());
    put_varint(
        out,
        diff(u64::from(c.block_size), u64::from(before.block_size)),
    );
    put_varint(
        out,
        diff(u64::from(c.footer_len), u64::from(before.footer_len)),
    );
}

fn decode(bytes: &[u8], at: &mut usize, before: &ColdChunk) -> ColdChunk {
    let start = undiff(before.end, get_varint(bytes, at));
    let end = start.wrapping_add(get_varint(bytes, at));
    let newest_at_ms = undiff(before.newest_at_ms as u64, get_varint(bytes, at)) as i64;
    let term = undiff(before.term, get_varint(bytes, at));
    let node = undiff(before.node, get_varint(bytes, at));
    let nonce = u64::from_le_bytes(bytes[*at..*at + 8].try_into().expect("8 bytes"));
    *at += 8;
    let block_size = undiff(u64::from(before.block_size), get_varint(bytes, at)) as u32;
    let footer_len = undiff(u64::from(before.footer_len), get_varint(bytes, at)) as u32;
    ColdChunk {
        start,
        end,
        newest_at_ms,
        term,
        node,
        nonce,
        block_size,
        footer_len,
    }
}

impl Block {
    fn of(first: &ColdChunk) -> Block {
        let mut bytes = Vec::new();
        encode(&mut bytes, first, &ZERO);
        Block { count: 1, bytes }
    }

    /// The block's first reference (encoded against zeros).
    fn first(&self) -> ColdChunk {
        decode(&self.bytes, &mut 0, &ZERO)
    }

    fn iter(&self) -> BlockIter<'_> {
        BlockIter {
            bytes: &self.bytes,
            at: 0,
            before: ZERO,
        }
    }
}

struct BlockIter<'a> {
    bytes: &'a [u8],
    at: usize,
    before: ColdChunk,
}

impl Iterator for BlockIter<'_> {
    type Item = ColdChunk;

    fn next(&mut self) -> Option<ColdChunk> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let c = decode(self.bytes, &mut self.at, &self.before);
        self.before = c.clone();
        Some(c)
    }
}

impl ColdList {
    pub fn len(&self) -> usize {
        match self.blocks.as_slice() {
            [] => 0,
            [only] => only.count,
            [first, middle @ .., last] => first.count + middle.len() * BLOCK + last.count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The last reference (decodes the last block).
    pub fn last(&self) -> Option<ColdChunk> {
        self.blocks.last()?.iter().last()
    }

    pub fn first(&self) -> Option<ColdChunk> {
        self.blocks.first().map(Block::first)
    }

    /// Adds a reference after the last.
    pub fn push(&mut self, chunk: ColdChunk) {
        match self.blocks.last_mut() {
            Some(block) if block.count < BLOCK => {
                let last = block.iter().last().expect("blocks are never empty");
                encode(&mut block.bytes, &chunk, &last);
                block.count += 1;
                if block.count == BLOCK {
                    block.bytes.shrink_to_fit();
                }
            }
            _ => {
                crate::state::grow_gently(&mut self.blocks);
                self.blocks.push(Block::of(&chunk));
            }
        }
        self.check();
    }

    /// Every block but the first and the last is full, and none is empty:
    /// what [`ColdList::len`] and [`ColdList::locate`] count on.
    fn check(&self) {
        let n = self.blocks.len();
        debug_assert!(self.blocks.iter().enumerate().all(|(i, b)| b.count > 0
            && b.count <= BLOCK
            && (i == 0 || i + 1 == n || b.count == BLOCK)));
    }

    /// The reference at index `i`.
    pub fn get(&self, i: usize) -> Option<ColdChunk> {
        if i >= self.len() {
            return None;
        }
        let (block, within) = self.locate(i);
        self.blocks[block].iter().nth(within)
    }

    /// The block holding index `i` and its place in it (`i < len`).
    fn locate(&self, i: usize) -> (usize, usize) {
        // Every block is full but the last and, after a front drain, the
        // first.
        let first = self.blocks[0].count;
        if i < first {
            (0, i)
        } else {
            (1 + (i - first) / BLOCK, (i - first) % BLOCK)
        }
    }

    /// Every reference, in order.
    pub fn iter(&self) -> impl Iterator<Item = ColdChunk> + '_ {
        self.iter_from(0)
    }

    /// The references from index `i` on.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = ColdChunk> + '_ {
        let (block, within) = if i < self.len() {
            self.locate(i)
        } else {
            (self.blocks.len(), 0)
        };
        self.blocks[block..]
            .iter()
            .flat_map(Block::iter)
            .skip(within)
    }

    /// The number of references for which `pred` holds, when it holds
    /// for a prefix of the list (as [`slice::partition_point`]).
    pub fn partition_point(&self, mut pred: impl FnMut(&ColdChunk) -> bool) -> usize {
        let blocks = self.blocks.partition_point(|b| pred(&b.first()));
        let Some(block) = blocks.checked_sub(1) else {
            return 0;
        };
        let before: usize = if block == 0 {
            0
        } else {
            self.blocks[0].count + (block - 1) * BLOCK
        };
        before + self.blocks[block].iter().take_while(|c| pred(c)).count()
    }

    /// Removes the first `n` references and returns them.
    pub fn drain_front(&mut self, n: usize) -> Vec<ColdChunk> {
        let n = n.min(self.len());
        if n == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(n);
        let mut whole = 0;
        while whole < self.blocks.len() && out.len() + self.blocks[whole].count <= n {
            out.extend(self.blocks[whole].iter());
            whole += 1;
        }
        self.blocks.drain(..whole);
        if out.len() < n {
            // Part of the next block goes: the rest becomes a block of its
            // own, encoded from its new first reference.
            let rest: Vec<ColdChunk> = self.blocks[0].iter().collect();
            let (gone, kept) = rest.split_at(n - out.len());
            out.extend_from_slice(gone);
            let mut block = Block::of(&kept[0]);
            for pair in kept.windows(2) {
                encode(&mut block.bytes, &pair[1], &pair[0]);
                block.count += 1;
            }
            self.blocks[0] = block;
        }
        self.blocks.shrink_to_fit();
        self.check();
        out
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
            + self
                .blocks
                .iter()
                .map(|b| b.bytes.capacity())
                .sum::<usize>()
    }
}

impl std::fmt::Debug for ColdList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<ColdChunk> for ColdList {
    fn from_iter<I: IntoIterator<Item = ColdChunk>>(chunks: I) -> ColdList {
        let mut list = ColdList::default();
        for c in chunks {
            list.push(c);
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn typical(n: usize) -> Vec<ColdChunk> {
        let mut at = 0;
        (0..n as u64)
            .map(|i| {
                let c = ColdChunk {
                    start: at,
                    end: at + 7_000 + (i * 37) % 900,
                    newest_at_ms: 1_795_000_000_000 + i as i64 * 60_000 + (i as i64 * 13) % 500,
                    term: 3 + i / 1000,
                    node: 1,
                    nonce: 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1),
                    block_size: 64 << 10,
                    footer_len: 40 + (i % 7) as u32,
                };
                at = c.end;
                c
            })
            .collect()
    }

    fn arbitrary() -> impl Strategy<Value = ColdChunk> {
        (
            any::<u64>(),
            any::<u64>(),
            any::<i64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(
                |(start, len, at, term, node, nonce, block_size, footer_len)| ColdChunk {
                    start,
                    end: start.saturating_add(len),
                    newest_at_ms: at,
                    term,
                    node,
                    nonce,
                    block_size,
                    footer_len,
                },
            )
    }

    proptest! {
        /// Any references round-trip, whatever is drained from the front,
        /// and lookups agree with a plain vector's.
        #[test]
        fn the_list_behaves_as_a_vector(
            chunks in prop::collection::vec(arbitrary(), 0..150),
            drained in 0usize..160,
            probe in 0usize..160,
        ) {
            let mut list: ColdList = chunks.iter().cloned().collect();
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), chunks.clone());
            let gone = list.drain_front(drained);
            let cut = drained.min(chunks.len());
            prop_assert_eq!(&gone[..], &chunks[..cut]);
            let kept = &chunks[cut..];
            prop_assert_eq!(list.len(), kept.len());
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), kept.to_vec());
            prop_assert_eq!(list.get(probe), kept.get(probe).cloned());
            prop_assert_eq!(list.iter_from(probe).collect::<Vec<_>>(), kept.get(probe..).unwrap_or(&[]).to_vec());
            prop_assert_eq!(list.last(), kept.last().cloned());
            prop_assert_eq!(list.first(), kept.first().cloned());
            // Appends after a drain.
            let more = typical(40);
            for c in &more {
                list.push(c.clone());
            }
            let all: Vec<ColdChunk> = kept.iter().chain(&more).cloned().collect();
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), all.clone());
            prop_assert_eq!(list.get(probe), all.get(probe).cloned());
        }
    }

    #[test]
    fn searches_agree_with_a_vectors() {
        let chunks = typical(500);
        let mut list: ColdList = chunks.iter().cloned().collect();
        list.drain_front(45);
        let kept = &chunks[45..];
        for pos in (0..kept.last().unwrap().end + 10).step_by(997) {
            assert_eq!(
                list.partition_point(|c| c.end <= pos),
                kept.partition_point(|c| c.end <= pos),
                "at {pos}"
            );
            assert_eq!(
                list.partition_point(|c| c.start <= pos),
                kept.partition_point(|c| c.start <= pos)
            );
        }
        assert_eq!(list.partition_point(|_| true), kept.len());
        assert_eq!(list.partition_point(|_| false), 0);
        assert_eq!(ColdList::default().partition_point(|_| true), 0);
    }

    #[test]
    fn a_typical_reference_takes_about_20_bytes() {
        let list: ColdList = typical(10_000).into_iter().collect();
        let per = list.heap_bytes() as f64 / 10_000.0;
        // README states this figure (the decoded reference is 56 bytes).
        assert_eq!(std::mem::size_of::<ColdChunk>(), 56);
        // Every stream with rare state holds a list: no larger than the
        // vector it replaced.
        assert_eq!(
            std::mem::size_of::<ColdList>(),
            std::mem::size_of::<Vec<ColdChunk>>()
        );
        assert!(per < 20.0, "{per} bytes a reference");
    }
}
