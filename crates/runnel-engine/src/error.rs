//! The engine's one error type, [`EngineError`]: what a proposal, a read
//! or a membership change answers when it fails. The HTTP layer maps each
//! to a status in one place (`runnel_server::error`).

use runnel_core::CoreError;

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
    /// This node does not lead the stream's group (leadership moved while
    /// the request was on its way); the client should retry. The command
    /// is not in the log, nor will it be: openraft answers this when it
    /// was not the leader at the write, or when a new leader truncated
    /// the uncommitted entry that held it.
    #[error("this node is not the leader of the stream's group (leader: {})", .0.map_or("unknown".to_string(), |n| format!("node {n}")))]
    NotLeader(Option<u64>),
    /// Replication failed (no quorum, or the group stopped).
    #[error("replication failed: {0}")]
    Replication(String),
    /// Tiered bytes could not be read from the object store (unreachable,
    /// too slow, or what came back failed its checksum).
    #[error("{0}")]
    Tier(String),
    /// A membership change was refused (it would cost a group its
    /// quorum, the node id is taken, the group does not exist, ...).
    #[error("{0}")]
    Membership(String),
    /// Too many bytes wait to be tiered (the object store is down or
    /// slow): writes wait until the tierer catches up.
    #[error("{untiered} bytes wait to be moved to the object store, more than the {cap} allowed; retry later")]
    TierBacklog { untiered: u64, cap: u64 },
}

impl EngineError {
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, EngineError::Storage(e) if e.is_out_of_space())
    }
}
