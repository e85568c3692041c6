//! The block cache: verified chunk blocks and decoded footers in memory,
//! within a byte budget, least recently used first out.
//!
//! One fetch per block however many readers ask at once (single-flight):
//! the first asker starts a task that fetches, verifies and inserts the
//! block; everyone else awaits the same result. The task runs to the end
//! even if every asker gave up, so a slot never stays "loading" forever.
//! A failed fetch leaves nothing behind; the next asker tries again.
//! Prefetches (read-ahead) start the same tasks without waiting for them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use object_store::path::Path;

use crate::chunk::{self, Footer, Layout, TRAILER_LEN};
use crate::store::TierStore;
use crate::TierError;

/// The block index that stands for a chunk's footer.
const FOOTER: u64 = u64::MAX;

type Key = (Arc<str>, u64);

#[derive(Clone)]
enum Cached {
    Block(Bytes),
    Footer(Arc<Footer>),
}

impl Cached {
    fn weight(&self) -> u64 {
        match self {
            Cached::Block(b) => b.len() as u64 + 64,
            Cached::Footer(f) => f.weight(),
        }
    }
}

type Loading = Shared<BoxFuture<'static, Result<Cached, TierError>>>;

enum Slot {
    Loading(Loading),
    Ready { value: Cached, tick: u64 },
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Key, Slot>,
    /// Ready slots by last use.
    by_use: BTreeMap<u64, Key>,
    tick: u64,
    used: u64,
}

/// Hits, misses and evictions so far, and the bytes held now.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    pub bytes: AtomicU64,
}

pub struct BlockCache {
    store: Arc<TierStore>,
    budget: u64,
    inner: Mutex<Inner>,
    pub stats: CacheStats,
}

impl BlockCache {
    pub fn new(store: Arc<TierStore>, budget: u64) -> Arc<BlockCache> {
        Arc::new(BlockCache {
            store,
            budget,
            inner: Mutex::default(),
            stats: CacheStats::default(),
        })
    }

    pub fn store(&self) -> &Arc<TierStore> {
        &self.store
    }

    /// Stream bytes of block `i` of the chunk at `path`, verified.
    pub async fn block(
        self: &Arc<Self>,
        path: &Path,
        layout: Layout,
        i: u64,
    ) -> Result<Bytes, TierError> {
        match self.get(path, i, Fetch::Block(layout)).await? {
            Cached::Block(bytes) => Ok(bytes),
            Cached::Footer(_) => unreachable!("block slots hold blocks"),
        }
    }

    /// The footer of the chunk at `path`, whose footer starts at
    /// `footer_pos` of an object of `size` bytes.
    pub async fn footer(
        self: &Arc<Self>,
        path: &Path,
        footer_pos: u64,
        size: u64,
    ) -> Result<Arc<Footer>, TierError> {
        match self
            .get(path, FOOTER, Fetch::Footer(footer_pos, size))
            .await?
        {
            Cached::Footer(footer) => Ok(footer),
            Cached::Block(_) => unreachable!("footer slots hold footers"),
        }
    }

    /// Starts fetching block `i` unless it is cached or on its way.
    pub fn prefetch(self: &Arc<Self>, path: &Path, layout: Layout, i: u64) {
        let key: Key = (Arc::from(path.as_ref()), i);
        let mut inner = self.inner.lock().expect("cache lock");
        if !inner.slots.contains_key(&key) {
            let loading = self.start(&mut inner, key, path.clone(), Fetch::Block(layout));
            drop(inner);
            // Keep it running: the task inserts the block when done.
            tokio::spawn(loading.map(drop));
        }
    }

    /// Whether block `i` of `path` is cached (or being fetched).
    pub fn holds(&self, path: &Path, i: u64) -> bool {
        let key: Key = (Arc::from(path.as_ref()), i);
        self.inner
            .lock()
            .expect("cache lock")
            .slots
            .contains_key(&key)
    }

    async fn get(
        self: &Arc<Self>,
        path: &Path,
        index: u64,
        fetch: Fetch,
    ) -> Result<Cached, TierError> {
        let key: Key = (Arc::from(path.as_ref()), index);
        let loading = {
            let mut inner = self.inner.lock().expect("cache lock");
            inner.tick += 1;
            let tick = inner.tick;
            match inner.slots.get_mut(&key) {
                Some(Slot::Ready { value, tick: used }) => {
                    let value = value.clone();
                    let old = std::mem::replace(used, tick);
                    inner.by_use.remove(&old);
                    inner.by_use.insert(tick, key);
                    self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(value);
                }
                Some(Slot::Loading(loading)) => loading.clone(),
                None => {
                    self.stats.misses.fetch_add(1, Ordering::Relaxed);
                    self.start(&mut inner, key, path.clone(), fetch)
                }
            }
        };
        loading.await
    }

    /// Registers a fetch of `key` and returns it; the fetch runs as its
    /// own task, which fills (or clears) the slot when it ends.
    fn start(self: &Arc<Self>, inner: &mut Inner, key: Key, path: Path, fetch: Fetch) -> Loading {
        let cache = Arc::clone(self);
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let result = fetch.run(&cache.store, &path, task_key.1).await;
            cache.finish(task_key, &result);
            result
        });
        let loading = async move {
            task.await
                .unwrap_or_else(|e| Err(TierError::Unavailable(format!("fetch task: {e}"))))
        }
        .boxed()
        .shared();
        inner.slots.insert(key, Slot::Loading(loading.clone()));
        loading
    }

    fn finish(&self, key: Key, result: &Result<Cached, TierError>) {
        let mut inner = self.inner.lock().expect("cache lock");
        match result {
            Err(_) => {
                inner.slots.remove(&key);
            }
            Ok(value) => {
                inner.tick += 1;
                let tick = inner.tick;
                inner.used += value.weight();
                inner.by_use.insert(tick, key.clone());
                inner.slots.insert(
                    key,
                    Slot::Ready {
                        value: value.clone(),
                        tick,
                    },
                );
                while inner.used > self.budget {
                    let Some((_, victim)) = inner.by_use.pop_first() else {
                        break;
                    };
                    if let Some(Slot::Ready { value, .. }) = inner.slots.remove(&victim) {
                        inner.used -= value.weight();
                        self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        self.stats.bytes.store(inner.used, Ordering::Relaxed);
    }
}

/// What a slot's fetch reads.
#[derive(Clone, Copy)]
enum Fetch {
    Block(Layout),
    /// Footer position and object size.
    Footer(u64, u64),
}

impl Fetch {
    async fn run(self, store: &TierStore, path: &Path, index: u64) -> Result<Cached, TierError> {
        let in_path = |e: TierError| e.within(path);
        match self {
            Fetch::Block(layout) => {
                let framed = store.get_range(path, layout.block_bytes(index)).await?;
                chunk::verify_block(&layout, index, &framed)
                    .map(Cached::Block)
                    .map_err(in_path)
            }
            Fetch::Footer(pos, size) => {
                if size < pos + TRAILER_LEN {
                    return Err(in_path(TierError::Corrupt(
                        "object smaller than its footer position".into(),
                    )));
                }
                let tail = store.get_range(path, pos..size).await?;
                chunk::decode_footer(&tail)
                    .map(|f| Cached::Footer(Arc::new(f)))
                    .map_err(in_path)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkBuilder;
    use crate::fault::{Fault, FaultStore};
    use std::time::Duration;

    async fn setup(budget: u64) -> (Arc<BlockCache>, Arc<FaultStore>, Path, Layout, u64, u64) {
        let faults = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let store = Arc::new(TierStore::from_store(
            faults.clone(),
            Path::from("t"),
            Duration::from_secs(5),
        ));
        let mut b = ChunkBuilder::new(1, 0, false, 10);
        let data: Vec<u8> = (0..95u8).collect();
        b.push_append(95, &[], 0, |off, buf| {
            buf.copy_from_slice(&data[off as usize..off as usize + buf.len()]);
            Ok::<(), ()>(())
        })
        .unwrap();
        let built = b.finish();
        let path = Path::from("c.rnc");
        let size = built.bytes.len() as u64;
        store
            .put_new(&path, Bytes::from(built.bytes), |_| {})
            .await
            .unwrap();
        (
            BlockCache::new(store, budget),
            faults,
            path,
            built.layout,
            built.footer_pos,
            size,
        )
    }

    #[tokio::test]
    async fn concurrent_readers_share_one_fetch() {
        let (cache, faults, path, layout, _, _) = setup(1 << 20).await;
        faults.set(Fault::Delay(Duration::from_millis(50)));
        let reads = (0..20).map(|_| cache.block(&path, layout, 3));
        let results = futures::future::join_all(reads).await;
        for r in results {
            assert_eq!(r.unwrap().as_ref(), &(30..40u8).collect::<Vec<_>>()[..]);
        }
        assert_eq!(faults.gets(), 1);
        assert_eq!(cache.stats.misses.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_budget_evicts_least_recently_used_blocks() {
        let (cache, faults, path, layout, _, _) = setup(3 * (10 + 64)).await;
        for i in 0..3 {
            cache.block(&path, layout, i).await.unwrap();
        }
        cache.block(&path, layout, 0).await.unwrap();
        cache.block(&path, layout, 5).await.unwrap();
        assert!(cache.holds(&path, 0), "recently used");
        assert!(!cache.holds(&path, 1), "least recently used goes first");
        assert_eq!(faults.gets(), 4);
    }

    #[tokio::test]
    async fn failures_are_not_cached_and_corruption_is_refused() {
        let (cache, faults, path, layout, footer_pos, size) = setup(1 << 20).await;
        faults.set(Fault::Fail);
        assert!(matches!(
            cache.block(&path, layout, 0).await,
            Err(TierError::Unavailable(_))
        ));
        faults.set(Fault::Corrupt);
        assert!(matches!(
            cache.block(&path, layout, 0).await,
            Err(TierError::Corrupt(_))
        ));
        faults.set(Fault::None);
        assert_eq!(cache.block(&path, layout, 9).await.unwrap().len(), 5);
        let footer = cache.footer(&path, footer_pos, size).await.unwrap();
        assert_eq!(footer.append_ends, vec![95]);
    }

    #[tokio::test]
    async fn prefetched_blocks_are_served_without_another_fetch() {
        let (cache, faults, path, layout, _, _) = setup(1 << 20).await;
        for i in 0..4 {
            cache.prefetch(&path, layout, i);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(faults.gets(), 4);
        for i in 0..4 {
            cache.block(&path, layout, i).await.unwrap();
        }
        assert_eq!(faults.gets(), 4);
    }
}
