//! What a group's state holds in memory, by owner, for `/metrics` and
//! `runnel ctl status`.
//!
//! The figures are computed from the sizes and capacities of the state's
//! tables, not measured from the allocator: a scrape walks the streams and
//! their index blocks, never every chunk, so it costs microseconds per
//! thousand streams. What they leave out is said on each field.

use std::mem::size_of;
use std::sync::Arc;

use crate::command::StreamId;
use crate::stream::{Extras, StreamState};
use crate::StreamsState;

/// Bytes a group's state holds, by owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateMemory {
    /// The stream table: the name and id maps, every stream's record, its
    /// name, and its optional extras (TTL, producers, snapshots; the
    /// producers' and snapshots' own entries are not counted).
    pub streams: u64,
    /// The per-append index: hot chunks (where each append sits in the
    /// log) in their blocks, with the blocks' spare room, and tiered chunk
    /// references. JSON chunks' message boundaries are not counted.
    pub index: u64,
}

impl std::ops::AddAssign for StateMemory {
    fn add_assign(&mut self, other: StateMemory) {
        self.streams += other.streams;
        self.index += other.index;
    }
}

/// Heap bytes of a hash table of `capacity` entries of `entry` bytes: the
/// table keeps an eighth of its buckets free and a control byte each.
fn table_bytes(capacity: usize, entry: usize) -> u64 {
    let buckets = (capacity * 8).div_ceil(7).next_power_of_two();
    if capacity == 0 {
        0
    } else {
        (buckets * (entry + 1)) as u64
    }
}

/// Heap bytes of an `Arc<str>` of `len` bytes: two counts and the bytes.
fn arc_str_bytes(len: usize) -> u64 {
    (2 * size_of::<usize>() + len) as u64
}

impl StreamState {
    fn memory(&self) -> StateMemory {
        let mut streams = (size_of::<StreamState>() as u64) + arc_str_bytes(self.name.len());
        let mut index = self.chunks.heap_bytes();
        if let Some(extras) = &self.extras {
            streams += size_of::<Extras>() as u64;
            index += extras.cold.heap_bytes() as u64;
        }
        StateMemory { streams, index }
    }
}

impl StreamsState {
    /// What this state holds in memory, by owner (see [`StateMemory`]).
    pub fn memory(&self) -> StateMemory {
        let mut total = StateMemory {
            streams: table_bytes(self.names.capacity(), size_of::<(Arc<str>, StreamId)>())
                + table_bytes(
                    self.streams.capacity(),
                    size_of::<(StreamId, Box<StreamState>)>(),
                ),
            index: 0,
        };
        for stream in self.streams.values() {
            total += stream.memory();
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_index::ChunkIndex;
    use crate::stream::Chunk;

    #[test]
    fn tables_count_their_buckets_and_control_bytes() {
        assert_eq!(table_bytes(0, 16), 0);
        // 3 entries fit 4 buckets (7/8 of them used at most).
        assert_eq!(table_bytes(3, 16), 4 * 17);
        assert_eq!(table_bytes(7, 16), 8 * 17);
        assert_eq!(table_bytes(8, 16), 16 * 17);
    }

    #[test]
    fn the_index_grows_by_a_chunk_per_append_and_shrinks_when_trimmed() {
        let mut index = ChunkIndex::default();
        let empty = index.heap_bytes();
        assert_eq!(empty, 0);
        for i in 0..10_000u64 {
            index.push(Chunk {
                start: i,
                len: 1,
                loc: i,
                message_ends: None,
                at_ms: 0,
            });
        }
        // Four one-byte numbers a chunk here, with the blocks' fixed parts
        // and room: under 8 bytes a chunk all told, against 40 plain.
        let full = index.heap_bytes();
        assert!(
            (10_000 * 4..10_000 * 8).contains(&full),
            "10,000 chunks counted as {full}"
        );
        index.remove_front(9_000);
        assert!(
            index.heap_bytes() <= full - 9_000 * 4,
            "a trimmed index still counts {}",
            index.heap_bytes()
        );
    }
}
