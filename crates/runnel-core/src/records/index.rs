//! Where a record stream's batches start: one [`BatchStart`] per append
//! batch, so that a read from a sequence number or a timestamp finds the
//! batch that holds it by binary search and its record by walking at
//! most that batch's framing.
//!
//! A trim drops whole batches: the stream's history goes by whole
//! appends. Records of a batch below the trim point stay stored; the
//! stream's [`super::RecordTail::trim_point`] hides them.

use std::collections::VecDeque;

/// Where one batch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStart {
    /// Its first record's sequence number.
    pub seq: u64,
    /// The stream position of its first byte.
    pub position: u64,
    /// The stream's last timestamp before it: the batch's records show
    /// their stored timestamps, none below this
    /// ([`super::framing::timestamps`]).
    pub floor: u64,
    /// Its last record's timestamp as shown (the largest in it).
    pub last_timestamp: u64,
}

/// The batches of one record stream, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordIndex {
    batches: VecDeque<BatchStart>,
}

impl RecordIndex {
    /// Adds the stream's newest batch.
    ///
    /// # Panics
    ///
    /// If it does not follow the last: sequence numbers and positions
    /// rise, and no timestamp goes back.
    pub fn push(&mut self, batch: BatchStart) {
        assert!(batch.floor <= batch.last_timestamp, "{batch:?}");
        if let Some(last) = self.batches.back() {
            assert!(batch.seq > last.seq, "{last:?} then {batch:?}");
            assert!(batch.position > last.position, "{last:?} then {batch:?}");
            assert!(
                batch.floor >= last.last_timestamp,
                "{last:?} then {batch:?}"
            );
        }
        self.batches.push_back(batch);
    }

    pub fn len(&self) -> usize {
        self.batches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    pub fn first(&self) -> Option<&BatchStart> {
        self.batches.front()
    }

    pub fn iter(&self) -> impl Iterator<Item = &BatchStart> {
        self.batches.iter()
    }

    /// The batch that holds record `seq` of a stream whose next record
    /// gets `next_seq`: `None` past the tail or before the first batch
    /// kept.
    pub fn find_seq(&self, seq: u64, next_seq: u64) -> Option<&BatchStart> {
        if seq >= next_seq {
            return None;
        }
        let after = self.batches.partition_point(|b| b.seq <= seq);
        self.batches.get(after.checked_sub(1)?)
    }

    /// The first batch holding a record of timestamp `timestamp` or
    /// later (timestamps never go back, so every later record is at or
    /// after it): `None` if every record is older.
    pub fn find_timestamp(&self, timestamp: u64) -> Option<&BatchStart> {
        let at = self
            .batches
            .partition_point(|b| b.last_timestamp < timestamp);
        self.batches.get(at)
    }

    /// Drops the batches whose records all lie below `seq` (the next
    /// batch starts at or below it); returns the stream position the
    /// first batch kept starts at, if any was dropped.
    pub fn drop_below(&mut self, seq: u64) -> Option<u64> {
        let mut dropped = false;
        while self.batches.get(1).is_some_and(|next| next.seq <= seq) {
            self.batches.pop_front();
            dropped = true;
        }
        dropped.then(|| self.batches.front().expect("one batch is kept").position)
    }

    /// Drops every batch (all of the stream's history went).
    pub fn clear(&mut self) {
        self.batches.clear();
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.batches.capacity() * std::mem::size_of::<BatchStart>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of `sizes` records, each 100 bytes a record, timestamps
    /// rising by 10 a batch.
    fn index(sizes: &[u64]) -> (RecordIndex, u64) {
        let mut index = RecordIndex::default();
        let mut seq = 0;
        for (i, size) in sizes.iter().enumerate() {
            let t = 10 * i as u64;
            index.push(BatchStart {
                seq,
                position: seq * 100,
                floor: t,
                last_timestamp: t + 5,
            });
            seq += size;
        }
        (index, seq)
    }

    #[test]
    fn a_sequence_number_finds_its_batch() {
        let (index, next) = index(&[3, 1, 4]);
        let seq_of = |seq| index.find_seq(seq, next).map(|b| b.seq);
        assert_eq!(seq_of(0), Some(0));
        assert_eq!(seq_of(2), Some(0));
        assert_eq!(seq_of(3), Some(3));
        assert_eq!(seq_of(4), Some(4));
        assert_eq!(seq_of(7), Some(4));
        assert_eq!(seq_of(8), None, "past the tail");
        assert_eq!(RecordIndex::default().find_seq(0, 0), None);
    }

    #[test]
    fn a_timestamp_finds_the_first_batch_that_reaches_it() {
        let (index, _) = index(&[3, 1, 4]);
        let seq_at = |t| index.find_timestamp(t).map(|b| b.seq);
        assert_eq!(seq_at(0), Some(0));
        assert_eq!(seq_at(5), Some(0));
        assert_eq!(seq_at(6), Some(3));
        assert_eq!(seq_at(15), Some(3));
        assert_eq!(seq_at(25), Some(4));
        assert_eq!(seq_at(26), None, "every record is older");
    }

    #[test]
    fn trims_drop_whole_batches_only() {
        let (mut index, next) = index(&[3, 1, 4]);
        assert_eq!(
            index.drop_below(2),
            None,
            "record 2 shares its batch with 0 and 1"
        );
        assert_eq!(index.len(), 3);
        assert_eq!(index.drop_below(3), Some(300));
        assert_eq!(index.first().unwrap().seq, 3);
        assert_eq!(index.drop_below(7), Some(400));
        assert_eq!(
            index.len(),
            1,
            "the last batch stays while it holds a record"
        );
        assert_eq!(index.find_seq(3, next), None, "below the first batch kept");
        assert_eq!(index.find_seq(7, next).unwrap().seq, 4);
    }

    #[test]
    #[should_panic]
    fn a_batch_out_of_order_is_refused() {
        let (mut index, _) = index(&[3]);
        index.push(BatchStart {
            seq: 0,
            position: 500,
            floor: 10,
            last_timestamp: 10,
        });
    }
}
