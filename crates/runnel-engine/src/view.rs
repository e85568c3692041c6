//! The read side of a group, shared by the local and the Raft engines:
//! the applied [`StreamsState`], the log its hot chunks point into, the
//! object store its tiered ones are in, and the tail notifier. Reads plan
//! against the state under a shared lock and fetch bytes without it.

use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use runnel_core::{
    Applied, BootstrapPlan, ForkMaterial, Placement, ReadFrom, RemotePin, Slice, SnapshotRef,
    StreamId, StreamInfo, StreamsState,
};
use runnel_log::Log;
use tokio::sync::watch;

use crate::activity::Activity;
use crate::api::{Bootstrap, ReadResult};
use crate::clock::now_ms;
use crate::error::EngineError;
use crate::recent_pages::RecentPages;
use crate::tail::TailNotifier;
use crate::tier::{reader, GroupTier};

/// A group's applied state and the log it reads from.
#[derive(Clone)]
pub(crate) struct GroupView {
    pub state: Arc<RwLock<StreamsState>>,
    pub log: Arc<Log>,
    pub tails: Arc<TailNotifier>,
    /// Pins on other groups' streams that expiries proposed here released
    /// (deletes hand theirs to the caller); the server sends them on.
    pub released: Arc<Mutex<Vec<RemotePin>>>,
    /// The node's tiering, if it tiers: where tiered bytes are read from.
    pub tier: Option<GroupTier>,
    /// The node's feed of changed streams (for subscriptions).
    pub activity: Arc<Activity>,
    /// Pages read lately, shared by readers of the same bytes.
    pub pages: Arc<RecentPages>,
}

impl GroupView {
    pub fn new(
        state: StreamsState,
        log: Arc<Log>,
        tier: Option<GroupTier>,
        activity: Arc<Activity>,
        read_pages_bytes: u64,
    ) -> GroupView {
        GroupView {
            state: Arc::new(RwLock::new(state)),
            log,
            tails: Arc::new(TailNotifier::default()),
            released: Arc::default(),
            tier,
            activity,
            pages: Arc::new(RecentPages::new(read_pages_bytes)),
        }
    }

    /// State under a shared lock.
    pub fn with_state<T>(&self, f: impl FnOnce(&StreamsState) -> T) -> T {
        f(&self.state.read().expect("state lock"))
    }

    /// Applies `f` under the write lock, then wakes the readers of every
    /// stream it changed.
    pub fn apply<T>(&self, f: impl FnOnce(&mut StreamsState) -> T) -> T {
        let (result, changed) = {
            let mut state = self.state.write().expect("state lock");
            let result = f(&mut state);
            if self.activity.watching() {
                let names = state.take_changed_names();
                if !names.is_empty() {
                    self.activity.record(names);
                }
            } else {
                state.clear_removed();
            }
            (result, state.take_changed())
        };
        self.tails.notify(&changed);
        result
    }

    pub fn head(&self, name: &str) -> Result<StreamInfo, EngineError> {
        Ok(self.with_state(|s| s.head(name, now_ms()))?)
    }

    pub async fn read(
        &self,
        name: &str,
        from: ReadFrom,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError> {
        let plan = self.with_state(|s| s.plan_read(name, from, max_bytes, now_ms()))?;
        reader::fetch(self, plan).await
    }

    pub async fn read_by_id(
        &self,
        id: StreamId,
        position: u64,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError> {
        let plan = self.with_state(|s| s.plan_read_by_id(id, position, max_bytes, now_ms()))?;
        reader::fetch(self, plan).await
    }

    pub fn subscribe(&self, id: StreamId) -> watch::Receiver<u64> {
        self.tails.subscribe(id)
    }

    pub async fn snapshot(
        &self,
        name: &str,
        offset: Option<u64>,
    ) -> Result<(SnapshotRef, Bytes, u64), EngineError> {
        let (snapshot, id, incarnation) = self.with_state(|s| {
            let snapshot = s.snapshot(name, offset, now_ms())?;
            let stream = s.stream_by_name(name);
            let (id, incarnation) = stream.map_or((0, 0), |s| (s.id, s.incarnation()));
            Ok::<_, runnel_core::CoreError>((snapshot, id, incarnation))
        })?;
        let bytes = self.snapshot_bytes(id, &snapshot).await?;
        Ok((snapshot, bytes, incarnation))
    }

    pub async fn bootstrap(&self, name: &str, max_bytes: u64) -> Result<Bootstrap, EngineError> {
        let (plan, id) = self.with_state(|s| {
            let plan = s.plan_bootstrap(name, max_bytes, now_ms())?;
            Ok::<_, runnel_core::CoreError>((plan.clone(), plan.tail.info.id))
        })?;
        let snapshot = match &plan.snapshot {
            Some(snap) => Some(self.snapshot_bytes(id, snap).await?),
            None => None,
        };
        let BootstrapPlan {
            snapshot: snap,
            tail,
        } = plan;
        let tail = reader::fetch(self, tail).await?;
        Ok(Bootstrap {
            plan: BootstrapPlan {
                snapshot: snap,
                tail: tail.plan,
            },
            snapshot,
            tail: tail.body,
        })
    }

    /// Keeps the pins an expiry released, for [`crate::NodeEngine::take_released_pins`].
    pub fn keep_released(&self, applied: &Applied) {
        if let Applied::Expired { released, .. } = applied {
            if !released.is_empty() {
                let mut kept = self.released.lock().expect("released pins lock");
                kept.extend(released.iter().cloned());
            }
        }
    }

    pub fn take_released(&self) -> Vec<RemotePin> {
        std::mem::take(&mut *self.released.lock().expect("released pins lock"))
    }

    /// What a fork at `point` copies from stream `name`, bytes included.
    pub async fn fork_material(
        &self,
        name: &str,
        point: u64,
    ) -> Result<(ForkMaterial, Bytes), EngineError> {
        let (material, pieces) = self.with_state(|s| s.fork_material(name, point))?;
        reader::material(self, material, pieces).await
    }

    /// Copies log slices out of the log.
    pub(crate) fn copy_log(&self, slices: &[Slice]) -> Result<Bytes, EngineError> {
        let total: u64 = slices.iter().map(Slice::len).sum();
        let mut body = vec![0u8; total as usize];
        let mut at = 0;
        for slice in slices {
            let Slice::Log { loc, len } = slice else {
                unreachable!("only log slices are copied here")
            };
            let end = at + *len as usize;
            self.log
                .read_at(*loc, &mut body[at..end])
                .map_err(EngineError::Storage)?;
            at = end;
        }
        Ok(Bytes::from(body))
    }

    async fn snapshot_bytes(
        &self,
        stream: StreamId,
        snapshot: &SnapshotRef,
    ) -> Result<Bytes, EngineError> {
        match &snapshot.placement {
            Placement::Log(loc) => self.copy_log(&[Slice::Log {
                loc: *loc,
                len: snapshot.len,
            }]),
            Placement::Object(object) => {
                reader::snapshot_object(self, stream, snapshot.offset, object).await
            }
        }
    }
}

/// Implements the read half of [`crate::GroupEngine`] by delegating to a
/// `view` field.
macro_rules! delegate_reads_to_view {
    () => {
        fn head(&self, name: &str) -> Result<runnel_core::StreamInfo, $crate::EngineError> {
            self.view.head(name)
        }

        fn read<'a>(
            &'a self,
            name: &'a str,
            from: runnel_core::ReadFrom,
            max_bytes: u64,
        ) -> $crate::BoxFuture<'a, Result<$crate::ReadResult, $crate::EngineError>> {
            Box::pin(self.view.read(name, from, max_bytes))
        }

        fn read_by_id(
            &self,
            id: runnel_core::StreamId,
            position: u64,
            max_bytes: u64,
        ) -> $crate::BoxFuture<'_, Result<$crate::ReadResult, $crate::EngineError>> {
            Box::pin(self.view.read_by_id(id, position, max_bytes))
        }

        fn subscribe(&self, id: runnel_core::StreamId) -> tokio::sync::watch::Receiver<u64> {
            self.view.subscribe(id)
        }

        fn snapshot<'a>(
            &'a self,
            name: &'a str,
            offset: Option<u64>,
        ) -> $crate::BoxFuture<
            'a,
            Result<(runnel_core::SnapshotRef, bytes::Bytes, u64), $crate::EngineError>,
        > {
            Box::pin(self.view.snapshot(name, offset))
        }

        fn bootstrap<'a>(
            &'a self,
            name: &'a str,
            max_bytes: u64,
        ) -> $crate::BoxFuture<'a, Result<$crate::Bootstrap, $crate::EngineError>> {
            Box::pin(self.view.bootstrap(name, max_bytes))
        }

        fn fork_material<'a>(
            &'a self,
            name: &'a str,
            point: u64,
        ) -> $crate::BoxFuture<
            'a,
            Result<(runnel_core::ForkMaterial, bytes::Bytes), $crate::EngineError>,
        > {
            Box::pin(self.view.fork_material(name, point))
        }
    };
}
pub(crate) use delegate_reads_to_view;
