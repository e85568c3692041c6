//! Runnel's object storage: what lies behind the log once history is
//! tiered. This crate owns the chunk object format ([`chunk`]), object
//! names ([`names`]), the object store client with its timeouts and
//! retries ([`store`]), and the block cache ([`cache`]). It knows nothing
//! of HTTP or Raft, and not what a stream is beyond a range of bytes with
//! boundaries: the engine decides what to tier and when, and commits the
//! references through its groups' logs.
//!
//! [`fault`] is a fault-injecting store for tests.

pub mod cache;
pub mod chunk;
pub mod fault;
mod mapped;
pub mod names;
pub mod store;

pub use cache::BlockCache;
pub use chunk::{BuiltChunk, ChunkBuilder, Footer, Layout};
pub use names::{CheckpointId, ObjectId, ObjectKind, Writer};
pub use object_store::path::Path as ObjectPath;
pub use store::{StoreConfig, TierStore};

/// The one error type of the tier.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TierError {
    /// The store could not be reached, answered with an error, or did not
    /// answer in time (after the client's retries).
    #[error("object store unavailable: {0}")]
    Unavailable(String),
    #[error("object not found: {0}")]
    NotFound(String),
    /// A create-only put met an existing object.
    #[error("object already exists: {0}")]
    AlreadyExists(String),
    /// Bytes read back fail their checksum or do not parse.
    #[error("object is corrupt: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Config(String),
}

impl TierError {
    /// The same error, naming the object it concerns.
    pub fn within(self, path: &object_store::path::Path) -> TierError {
        match self {
            TierError::Corrupt(what) => TierError::Corrupt(format!("{path}: {what}")),
            other => other,
        }
    }
}
