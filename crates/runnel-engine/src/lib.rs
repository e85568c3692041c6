//! Runnel's engine: the [`GroupEngine`] seam between the HTTP front and the
//! replicated (or local) log.
//!
//! A *group* owns a set of streams (by hash of the stream name) and turns
//! proposed [`Command`]s into committed, applied state: propose, log
//! durably, apply to the group's [`StreamsState`], answer, wake readers.
//! This crate ships the local engine: every group of the node shares one
//! [`runnel_log::Log`], so one fsync covers the entries of all groups. A
//! Raft engine implements the same trait; the HTTP layer cannot tell them
//! apart.
//!
//! Module map: [`node`] opens the data directory, recovers, and routes
//! names to groups; [`local`] is the local group (its commit task and
//! state); [`tail`] wakes live readers; [`history`] runs retention and
//! State Protocol compaction in the background.

mod checkpoint;
mod clock;
pub mod history;
pub mod local;
pub mod node;
pub mod tail;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use runnel_core::{
    Applied, BootstrapPlan, Command, CoreError, ReadFrom, ReadPlan, SnapshotRef, StreamId,
    StreamInfo,
};
use tokio::sync::watch;

pub use clock::now_ms;
pub use node::{EngineConfig, Node};
pub use runnel_log::SyncMode;

/// A boxed future, as the object-safe trait methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The one error type of the engine.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The command was applied and refused by the protocol rules.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Too much work is queued; the client should retry later.
    #[error("server is overloaded; retry later")]
    Overloaded,
    /// The log failed (full disk, IO error): no more writes on this node.
    #[error("storage failed: {0}")]
    Storage(runnel_log::LogError),
    /// A fork must live in the same group as its source.
    #[error("fork source lives in another group of this node")]
    CrossGroupFork,
    #[error("the engine is shutting down")]
    ShuttingDown,
}

impl EngineError {
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, EngineError::Storage(e) if e.is_out_of_space())
    }
}

/// A read's plan and its bytes as stored (JSON streams: `m1,m2,`).
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub plan: ReadPlan,
    pub body: Bytes,
}

/// One group's engine: the seam replication slots into.
pub trait GroupEngine: Send + Sync + 'static {
    /// Proposes a command; resolves once it is durable and applied.
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>>;

    /// Stream metadata without renewing its TTL (HEAD).
    fn head(&self, name: &str) -> Result<StreamInfo, EngineError>;

    /// Reads from applied state, renewing the stream's TTL.
    fn read(&self, name: &str, from: ReadFrom, max_bytes: u64) -> Result<ReadResult, EngineError>;

    /// Reads a stream by id (live tails follow one incarnation).
    fn read_by_id(
        &self,
        id: StreamId,
        position: u64,
        max_bytes: u64,
    ) -> Result<ReadResult, EngineError>;

    /// A receiver that changes whenever stream `id` changes (append, close,
    /// delete). Subscribe before reading to never miss a wake-up.
    fn subscribe(&self, id: StreamId) -> watch::Receiver<u64>;

    /// A snapshot of `name` (at `offset`, or the latest) with its bytes.
    fn snapshot(
        &self,
        name: &str,
        offset: Option<u64>,
    ) -> Result<(SnapshotRef, Bytes), EngineError>;

    /// The latest snapshot and the messages after it (at most `max_bytes`).
    fn bootstrap(&self, name: &str, max_bytes: u64) -> Result<Bootstrap, EngineError>;
}

/// A bootstrap with its bytes: the snapshot (if any) and the tail after it
/// as stored (JSON streams: `m1,m2,`).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub plan: BootstrapPlan,
    pub snapshot: Option<Bytes>,
    pub tail: Bytes,
}
