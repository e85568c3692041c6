//! What applying a command did ([`Applied`]): the answer a state machine
//! gives for each logged entry, with what the HTTP response needs.

use crate::fork_copy::RemotePin;
use crate::offset::Offset;
use crate::state::StreamInfo;
use crate::subscription::SubOutcome;

/// What a successful command did, with what the response needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Created {
        stream: StreamInfo,
        /// False when the stream already existed with the same
        /// configuration (idempotent create).
        created: bool,
    },
    Appended {
        next_offset: Offset,
        /// The stream's incarnation, to mint `next_offset` with.
        incarnation: u64,
        closed: bool,
        /// Producer epoch and highest accepted sequence, when the append
        /// carried producer headers.
        producer: Option<(u64, u64)>,
        /// The producer had already appended this sequence: nothing stored.
        duplicate: bool,
    },
    /// `released`: pins that forks removed by this held on streams of
    /// other groups (to be sent there as unpins).
    Deleted {
        released: Vec<RemotePin>,
    },
    Expired {
        count: usize,
        released: Vec<RemotePin>,
    },
    /// A fork in another group may copy the stream up to `point`.
    Pinned {
        point: u64,
    },
    Unpinned {
        released: Vec<RemotePin>,
    },
    SnapshotStored {
        offset: Offset,
        /// The stream's incarnation, to mint `offset` with.
        incarnation: u64,
        /// False when an identical snapshot was already stored.
        created: bool,
    },
    SnapshotDeleted,
    Trimmed {
        earliest: Offset,
        /// The stream's incarnation, to mint `earliest` with.
        incarnation: u64,
    },
    /// Bytes moved to the object store (a chunk or a snapshot).
    Tiered {
        bytes: u64,
    },
    ObjectsDeleted {
        count: usize,
    },
    Subscription(SubOutcome),
    /// The cluster's id (see [`crate::cluster_meta`]); `set`: this
    /// command gave it.
    ClusterId {
        id: String,
        set: bool,
    },
    /// `newly`: the node was not retired before.
    NodeRetired {
        newly: bool,
    },
    /// The replication factor that stands after the command; `set`: this
    /// command changed it.
    Replication {
        factor: u32,
        set: bool,
    },
    /// Preferred leaders set; `changed`: this command changed one.
    PreferredLeaders {
        changed: bool,
    },
    /// Zones recorded; `changed`: this command recorded a new one.
    Zones {
        changed: bool,
    },
    /// Self-healing paused or resumed; `changed`: it was not so before.
    Healing {
        paused: bool,
        changed: bool,
    },
    /// The group restored from cluster `source`'s backup (`newly`: by
    /// this entry) with `streams` streams; `lost_bytes`: the untiered
    /// bytes the backup named but the object store does not hold.
    Restored {
        source: String,
        streams: usize,
        lost_bytes: u64,
        newly: bool,
    },
    /// The cluster version that stands after the command; `raised`: this
    /// command raised it.
    ClusterVersion {
        version: u32,
        raised: bool,
    },
    /// A member's state set or cleared; `changed`: it was not so before.
    MemberState {
        node: u64,
        state: Option<crate::member_state::MemberState>,
        changed: bool,
    },
}
