//! The read side of a group, shared by the local and the Raft engines:
//! the applied [`StreamsState`], the log its chunks point into, and the
//! tail notifier. Reads plan against the state under a shared lock and
//! copy bytes from the log without it.

use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use runnel_core::{
    Applied, ForkMaterial, ReadFrom, ReadPlan, RemotePin, Slice, SnapshotRef, StreamId, StreamInfo,
    StreamsState,
};
use runnel_log::Log;
use tokio::sync::watch;

use crate::tail::TailNotifier;
use crate::{now_ms, Bootstrap, EngineError, ReadResult};

/// A group's applied state and the log it reads from.
#[derive(Clone)]
pub(crate) struct GroupView {
    pub state: Arc<RwLock<StreamsState>>,
    pub log: Arc<Log>,
    pub tails: Arc<TailNotifier>,
    /// Pins on other groups' streams that expiries proposed here released
    /// (deletes hand theirs to the caller); the server sends them on.
    pub released: Arc<Mutex<Vec<RemotePin>>>,
}

impl GroupView {
    pub fn new(state: StreamsState, log: Arc<Log>) -> GroupView {
        GroupView {
            state: Arc::new(RwLock::new(state)),
            log,
            tails: Arc::new(TailNotifier::default()),
            released: Arc::default(),
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
            (result, state.take_changed())
        };
        self.tails.notify(&changed);
        result
    }

    pub fn head(&self, name: &str) -> Result<StreamInfo, EngineError> {
        Ok(self.with_state(|s| s.head(name, now_ms()))?)
    }

    pub fn read(
        &self,
        name: &str,
        from: ReadFrom,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError> {
        let plan = self.with_state(|s| s.plan_read(name, from, max_bytes, now_ms()))?;
        self.fetch(plan)
    }

    pub fn read_by_id(
        &self,
        id: StreamId,
        position: u64,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError> {
        let plan = self.with_state(|s| s.plan_read_by_id(id, position, max_bytes, now_ms()))?;
        self.fetch(plan)
    }

    pub fn subscribe(&self, id: StreamId) -> watch::Receiver<u64> {
        self.tails.subscribe(id)
    }

    pub fn snapshot(
        &self,
        name: &str,
        offset: Option<u64>,
    ) -> Result<(SnapshotRef, Bytes), EngineError> {
        let snapshot = self.with_state(|s| s.snapshot(name, offset, now_ms()))?;
        let bytes = self.snapshot_bytes(&snapshot)?;
        Ok((snapshot, bytes))
    }

    pub fn bootstrap(&self, name: &str, max_bytes: u64) -> Result<Bootstrap, EngineError> {
        let plan = self.with_state(|s| s.plan_bootstrap(name, max_bytes, now_ms()))?;
        let snapshot = plan
            .snapshot
            .as_ref()
            .map(|s| self.snapshot_bytes(s))
            .transpose()?;
        let tail = self.copy_slices(&plan.tail.slices)?;
        Ok(Bootstrap {
            plan,
            snapshot,
            tail,
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
    pub fn fork_material(
        &self,
        name: &str,
        point: u64,
    ) -> Result<(ForkMaterial, Bytes), EngineError> {
        let (material, slices) = self.with_state(|s| s.fork_material(name, point))?;
        Ok((material, self.copy_slices(&slices)?))
    }

    fn fetch(&self, plan: ReadPlan) -> Result<ReadResult, EngineError> {
        let body = self.copy_slices(&plan.slices)?;
        Ok(ReadResult { plan, body })
    }

    fn copy_slices(&self, slices: &[Slice]) -> Result<Bytes, EngineError> {
        let total: u64 = slices.iter().map(|s| s.len).sum();
        let mut body = vec![0u8; total as usize];
        let mut at = 0;
        for slice in slices {
            let end = at + slice.len as usize;
            self.log
                .read_at(slice.loc, &mut body[at..end])
                .map_err(EngineError::Storage)?;
            at = end;
        }
        Ok(Bytes::from(body))
    }

    fn snapshot_bytes(&self, snapshot: &SnapshotRef) -> Result<Bytes, EngineError> {
        self.copy_slices(&[Slice {
            loc: snapshot.loc,
            len: snapshot.len,
        }])
    }
}

/// Implements the read half of [`crate::GroupEngine`] by delegating to a
/// `view` field.
macro_rules! delegate_reads_to_view {
    () => {
        fn head(&self, name: &str) -> Result<runnel_core::StreamInfo, $crate::EngineError> {
            self.view.head(name)
        }

        fn read(
            &self,
            name: &str,
            from: runnel_core::ReadFrom,
            max_bytes: u64,
        ) -> Result<$crate::ReadResult, $crate::EngineError> {
            self.view.read(name, from, max_bytes)
        }

        fn read_by_id(
            &self,
            id: runnel_core::StreamId,
            position: u64,
            max_bytes: u64,
        ) -> Result<$crate::ReadResult, $crate::EngineError> {
            self.view.read_by_id(id, position, max_bytes)
        }

        fn subscribe(&self, id: runnel_core::StreamId) -> tokio::sync::watch::Receiver<u64> {
            self.view.subscribe(id)
        }

        fn snapshot(
            &self,
            name: &str,
            offset: Option<u64>,
        ) -> Result<(runnel_core::SnapshotRef, bytes::Bytes), $crate::EngineError> {
            self.view.snapshot(name, offset)
        }

        fn bootstrap(
            &self,
            name: &str,
            max_bytes: u64,
        ) -> Result<$crate::Bootstrap, $crate::EngineError> {
            self.view.bootstrap(name, max_bytes)
        }

        fn fork_material(
            &self,
            name: &str,
            point: u64,
        ) -> Result<(runnel_core::ForkMaterial, bytes::Bytes), $crate::EngineError> {
            self.view.fork_material(name, point)
        }
    };
}
pub(crate) use delegate_reads_to_view;
