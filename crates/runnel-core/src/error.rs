//! The one error type of the state machine. Each variant is a protocol
//! outcome the HTTP layer maps to a status; none is an internal failure.

use crate::offset::Offset;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("stream not found")]
    NotFound,
    #[error("stream was deleted and is retained only for its forks")]
    Gone,
    #[error("stream exists with a different configuration")]
    ConfigMismatch,
    #[error("stream name is held by a deleted stream that forks still read")]
    NameHeldBySoftDeleted,
    #[error("content type does not match the stream's")]
    ContentTypeMismatch,
    #[error("stream is closed")]
    Closed {
        next_offset: Offset,
        incarnation: u64,
    },
    #[error("Stream-Seq must be greater than the last one ({last})")]
    StreamSeqRegression { last: String },
    #[error("producer epoch is stale; current epoch is {current}")]
    ProducerStaleEpoch { current: u64 },
    #[error("a new producer epoch must start at Producer-Seq 0")]
    ProducerEpochSeqNotZero,
    #[error("producer sequence gap: expected {expected}, received {received}")]
    ProducerSeqGap { expected: u64, received: u64 },
    #[error("fork source stream not found")]
    ForkSourceNotFound,
    #[error("fork source stream was deleted")]
    ForkSourceGone,
    #[error("fork offset is beyond the source stream's tail")]
    ForkOffsetBeyondTail,
    #[error("fork offset does not fall on a message boundary")]
    ForkOffsetNotOnBoundary,
    #[error("a fork's copy of its source is shorter than it says")]
    InheritedDataMissing,
    #[error("Stream-Fork-Sub-Offset is beyond the append at the fork offset")]
    SubOffsetOutOfRange,
    #[error("offset is beyond the stream's tail")]
    OffsetBeyondTail,
    #[error("offset does not fall on a message boundary")]
    OffsetNotOnBoundary,
    #[error("stream would grow beyond the largest representable offset")]
    StreamFull,
    #[error("history before {earliest} was trimmed")]
    Trimmed { earliest: Offset, incarnation: u64 },
    #[error("a different snapshot is already stored at this offset")]
    SnapshotConflict,
    #[error("no snapshot at this offset")]
    SnapshotNotFound,
    #[error("snapshot offset must be a message boundary between the earliest offset and the tail")]
    SnapshotOffsetInvalid,
    #[error("trim offset must be a message boundary no later than the tail")]
    TrimOffsetInvalid,
    #[error("Stream-Fork-Sub-Offset into tiered history must be resolved by the engine")]
    SubOffsetInTieredHistory,
    /// A tiering command that no longer fits the stream (another upload
    /// or a trim got there first, or leadership moved): its object is
    /// not referenced.
    #[error("tiering refused: {reason}")]
    TierRefused { reason: String },
    /// A cluster id that [`crate::cluster_meta::validate`] refuses.
    #[error("invalid cluster id: {0}")]
    InvalidClusterId(crate::cluster_meta::ClusterIdError),
    /// A replication factor outside `1..=`[`crate::cluster_meta::MAX_REPLICATION`].
    #[error(
        "a replication factor is 1 to {max}, not {factor}",
        max = crate::cluster_meta::MAX_REPLICATION
    )]
    InvalidReplication { factor: u32 },
    /// A group number at or above [`crate::cluster_meta::MAX_GROUPS`].
    #[error(
        "a cluster has at most {max} groups: there is no group {group}",
        max = crate::cluster_meta::MAX_GROUPS
    )]
    InvalidGroup { group: u32 },
    /// A zone name that [`crate::zones::validate`] refuses.
    #[error("invalid zone: {0}")]
    InvalidZone(crate::zones::ZoneNameError),
    /// A node's zone, once recorded, does not change.
    #[error("node {node} is in zone {recorded:?}, not {asked:?}: a node's zone does not change (give a moved machine a new node id)")]
    ZoneChanged {
        node: u64,
        recorded: String,
        asked: String,
    },
    /// More nodes than [`crate::zones::MAX_NODES`] in one command.
    #[error("one command records the zones of at most {max} nodes, not {count}", max = crate::zones::MAX_NODES)]
    TooManyZones { count: usize },
    /// A cluster version below the one recorded (see [`crate::upgrade`]).
    #[error("the cluster is at version {current}: it cannot go back to {asked}")]
    ClusterVersionLowered { current: u32, asked: u32 },
    /// A state for a node retired for good.
    #[error("node {node} was removed from this cluster for good: it has no state to set")]
    RetiredMember { node: u64 },
    /// A restore entry for a group that already holds data (see
    /// [`crate::restore`]).
    #[error("this group already holds {streams} streams or subscriptions: a restore goes only into an empty group")]
    RestoreOverData { streams: usize },
    /// A restore entry whose backed-up checkpoint does not decode.
    #[error("the backed-up checkpoint does not decode: {0}")]
    RestoreDamaged(crate::codec::CodecError),
    /// A subscription command refused by the protocol's rules.
    #[error(transparent)]
    Subscription(#[from] crate::subscription::SubError),
}
