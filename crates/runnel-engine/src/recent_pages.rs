//! Pages a group read from its log lately, shared by every reader that
//! asks for the same bytes: a reconnect storm on one stream, or the
//! long-pollers that a commit wakes at one position, cost one copy out of
//! the log and one buffer, however many readers there are.
//!
//! A page is keyed by its stream and the range of stream positions it
//! holds. Bytes at a position never change and a stream id is never used
//! for another stream of the group, so a kept page is right for as long as
//! it is kept; reads still plan against the state themselves (which bytes,
//! up to which tail), so sharing the bytes never makes a read stale. Kept
//! first in, first out, within a byte budget, and for a while only: the
//! readers that share a page come together (a storm, a wave of woken
//! long-polls), so a page kept longer mostly holds memory
//! ([`RecentPages::drop_older_than`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use runnel_core::StreamId;

/// Bytes of pages one group keeps unless configured otherwise
/// (`EngineConfig::read_pages_bytes`, smaller under `--max-memory-bytes`).
pub const DEFAULT_BUDGET_BYTES: u64 = 8 << 20;
/// Pages one group keeps.
const MAX_PAGES: usize = 512;

/// Reads answered from a kept page, and reads that copied from the log, in
/// this process (for `/metrics`).
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);

/// `(hits, misses)` of every group in this process so far.
pub fn counts() -> (u64, u64) {
    (HITS.load(Ordering::Relaxed), MISSES.load(Ordering::Relaxed))
}

/// A stream and the positions `start..end` of a page of it.
type Key = (StreamId, u64, u64);

pub(crate) struct RecentPages {
    inner: Mutex<Pages>,
    /// Bytes kept at most.
    budget: u64,
}

impl Default for RecentPages {
    fn default() -> RecentPages {
        RecentPages::new(DEFAULT_BUDGET_BYTES)
    }
}

#[derive(Default)]
struct Pages {
    by_key: HashMap<Key, Bytes>,
    /// Keys in the order they were kept, with when.
    order: VecDeque<(Key, Instant)>,
    bytes: u64,
}

impl RecentPages {
    /// Pages kept within `budget` bytes (0 keeps none).
    pub fn new(budget: u64) -> RecentPages {
        RecentPages {
            inner: Mutex::default(),
            budget,
        }
    }

    /// Larger pages are not kept: a few of them would push out everything.
    fn max_page_bytes(&self) -> u64 {
        self.budget / 4
    }

    /// Bytes of the pages kept now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The page of `stream` at `start..end`: kept, or made by `read` (run
    /// without the lock) and kept.
    pub fn get_or_read<E>(
        &self,
        stream: StreamId,
        start: u64,
        end: u64,
        read: impl FnOnce() -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let key = (stream, start, end);
        if let Some(page) = self.lock().by_key.get(&key) {
            HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(page.clone());
        }
        MISSES.fetch_add(1, Ordering::Relaxed);
        let page = read()?;
        assert_eq!(page.len() as u64, end - start, "a page holds its range");
        if page.len() as u64 <= self.max_page_bytes() && !page.is_empty() {
            self.lock().keep(key, page.clone(), self.budget);
        }
        Ok(page)
    }

    /// Drops the pages kept at `now - age` or before.
    pub fn drop_older_than(&self, now: Instant, age: Duration) {
        let mut pages = self.lock();
        while pages
            .order
            .front()
            .is_some_and(|(_, kept)| now.saturating_duration_since(*kept) >= age)
        {
            pages.drop_oldest();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pages> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Pages {
    fn keep(&mut self, key: Key, page: Bytes, budget: u64) {
        if self.by_key.contains_key(&key) {
            // Another reader made it meanwhile.
            return;
        }
        self.bytes += page.len() as u64;
        self.by_key.insert(key, page);
        self.order.push_back((key, Instant::now()));
        while self.bytes > budget || self.order.len() > MAX_PAGES {
            self.drop_oldest();
        }
        debug_assert_eq!(self.order.len(), self.by_key.len());
    }

    fn drop_oldest(&mut self) {
        let (oldest, _) = self.order.pop_front().expect("kept pages are in order");
        let dropped = self.by_key.remove(&oldest).expect("ordered pages are kept");
        self.bytes -= dropped.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(len: usize) -> Result<Bytes, ()> {
        Ok(Bytes::from(vec![7u8; len]))
    }

    #[test]
    fn readers_of_one_range_share_one_read() {
        let pages = RecentPages::default();
        let mut reads = 0;
        for _ in 0..5 {
            let got = pages
                .get_or_read(1, 10, 20, || {
                    reads += 1;
                    page(10)
                })
                .unwrap();
            assert_eq!(got.len(), 10);
        }
        assert_eq!(reads, 1);
        // Another range, or another stream, is another page.
        pages.get_or_read(1, 10, 21, || page(11)).unwrap();
        pages.get_or_read(2, 10, 20, || page(10)).unwrap();
        assert_eq!(pages.lock().by_key.len(), 3);
        // A failed read keeps nothing.
        assert!(pages.get_or_read(3, 0, 5, || Err(())).is_err());
        assert_eq!(pages.lock().by_key.len(), 3);
    }

    #[test]
    fn the_budget_holds_and_the_oldest_go_first() {
        let pages = RecentPages::new(1 << 20);
        let len = (pages.max_page_bytes() / 2) as usize;
        for i in 0..20u64 {
            pages
                .get_or_read(1, i * 1000, i * 1000 + len as u64, || page(len))
                .unwrap();
            let kept = pages.lock();
            assert!(kept.bytes <= 1 << 20);
            assert_eq!(
                kept.bytes,
                kept.by_key.values().map(|p| p.len() as u64).sum::<u64>()
            );
        }
        let kept = pages.lock();
        assert!(kept.by_key.contains_key(&(1, 19_000, 19_000 + len as u64)));
        assert!(!kept.by_key.contains_key(&(1, 0, len as u64)));
        drop(kept);
        // Too large to keep, and nothing kept for an empty page.
        let big = pages.max_page_bytes() as usize + 1;
        pages.get_or_read(9, 0, big as u64, || page(big)).unwrap();
        pages.get_or_read(9, 5, 5, || page(0)).unwrap();
        assert!(!pages.lock().by_key.keys().any(|k| k.0 == 9));
    }

    #[test]
    fn a_budget_of_nothing_keeps_nothing() {
        let pages = RecentPages::new(0);
        let mut reads = 0;
        for _ in 0..3 {
            pages
                .get_or_read(1, 0, 10, || {
                    reads += 1;
                    page(10)
                })
                .unwrap();
        }
        assert_eq!((reads, pages.bytes()), (3, 0));
    }

    #[test]
    fn pages_go_once_they_are_old() {
        let pages = RecentPages::default();
        pages.get_or_read(1, 0, 10, || page(10)).unwrap();
        let kept_first = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        pages.get_or_read(1, 10, 30, || page(20)).unwrap();
        // Not old yet: both stay.
        pages.drop_older_than(kept_first, Duration::from_secs(1));
        assert_eq!(pages.bytes(), 30);
        // The first is 20 ms old, the second younger.
        pages.drop_older_than(
            kept_first + Duration::from_millis(15),
            Duration::from_millis(15),
        );
        assert_eq!(pages.bytes(), 20);
        assert!(pages.lock().by_key.contains_key(&(1, 10, 30)));
        pages.drop_older_than(Instant::now(), Duration::ZERO);
        assert_eq!((pages.bytes(), pages.lock().by_key.len()), (0, 0));
    }
}
