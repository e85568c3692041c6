//! The engine's errors: [`EngineError`], what a proposal, a read or a
//! membership change answers when it fails, and the enums it carries
//! ([`ReplicationError`], [`TierReadError`], [`MembershipError`]). The HTTP
//! layer maps each to a status in one place (`runnel_server::error`).
//!
//! The errors of the peers and of leadership transfers ([`PeerError`],
//! [`HelloError`], [`TransferError`], [`PlanRefusal`]) are the consensus
//! layer's (`raft::transport`, `raft::transfer` re-export them), but they
//! are defined here, in the base layer, because an [`EngineError`] carries
//! them (a failed transfer, a listing its leader could not answer).
//!
//! Text that crosses the wire between nodes (a peer's refusal) stays
//! text: [`PeerError::Remote`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, Fatal, QuorumNotEnough};
use openraft::BasicNode;
use runnel_core::CoreError;

use crate::api::{AddrError, NodeId};
use crate::control::CONTROL_GROUP;

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
    /// A write to a group of a cluster being restored from its bucket
    /// before the group is restored.
    #[error("group {group} is being restored from the object store; retry shortly")]
    Restoring { group: u32 },
    /// This node does not lead the stream's group (leadership moved while
    /// the request was on its way); the client should retry. The command
    /// is not in the log, nor will it be: openraft answers this when it
    /// was not the leader at the write, or when a new leader truncated
    /// the uncommitted entry that held it.
    #[error("this node is not the leader of the stream's group (leader: {})", .0.map_or("unknown".to_string(), |n| format!("node {n}")))]
    NotLeader(Option<u64>),
    /// Replication failed (no quorum, or the group stopped).
    #[error("replication failed: {0}")]
    Replication(#[from] ReplicationError),
    /// Tiered bytes could not be read from the object store (unreachable,
    /// too slow, or what came back failed its checksum).
    #[error(transparent)]
    Tier(#[from] TierReadError),
    /// A membership change was refused (it would cost a group its
    /// quorum, the node id is taken, the group does not exist, ...).
    #[error(transparent)]
    Membership(#[from] MembershipError),
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

/// Why a command may not have been replicated, or a read could not be
/// made consistent: the group has no quorum, or stopped. A client may
/// retry (the server does, at the group's leader, when a second
/// application is harmless).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReplicationError {
    /// The group's Raft stopped (shut down, or a storage failure).
    #[error(transparent)]
    Fatal(Box<Fatal<NodeId>>),
    /// openraft refused the write.
    #[error(transparent)]
    Write(Box<ClientWriteError<NodeId, BasicNode>>),
    /// A batch was applied with another number of results than it had
    /// proposals (a bug): what became of each is not known.
    #[error("the batch was applied, but its outcome is unknown")]
    OutcomeUnknown,
    /// The leader could not confirm its leadership with a quorum.
    #[error("leadership not confirmed by a quorum: {0}")]
    NoQuorum(QuorumNotEnough<NodeId>),
    /// A group's streams could not be read with every acknowledged write.
    #[error("group {group} cannot be read consistently at the moment ({why}); retry")]
    Unreadable { group: u32, why: Unreadable },
    /// A leadership transfer asked for did not happen.
    #[error("the leadership transfer failed: {0}")]
    Transfer(#[from] TransferError),
}

/// Why a group could not be read consistently here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreadable {
    /// This node's copy lags, and no leader is known to ask.
    #[error("no leader, or this node lags")]
    NoLeader,
    /// Its leader did not answer.
    #[error("its leader, node {leader}: {error}")]
    Leader { leader: NodeId, error: PeerError },
}

/// Why tiered bytes could not be served: the client gets a 503, never
/// bytes that might be wrong.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TierReadError {
    /// The stream's history is tiered, but this node has no object store.
    #[error("this stream's history is tiered, but no object store is configured (--object-store)")]
    NoStore,
    /// A chunk's footer does not describe its bytes.
    #[error("chunk {start}..{end} lists no message end after {from}")]
    Corrupt { start: u64, end: u64, from: u64 },
    /// The object store failed, was too slow, or answered bytes that
    /// failed their checksum.
    #[error(transparent)]
    Store(#[from] runnel_tier::TierError),
}

/// Why a membership change (or a leadership move asked for) was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MembershipError {
    /// A single node has no membership to change.
    #[error("this server is a single node: it has no cluster membership to change")]
    SingleNode,
    #[error("there is no group {group}: this cluster has {groups}")]
    NoSuchGroup { group: u32, groups: u32 },
    /// Some groups' leaders did not answer whether `node` is still a
    /// member: the retirement may be retried.
    #[error(
        "the leaders of groups {groups:?} did not say whether node {node} is still a member; retry"
    )]
    Unknown { node: NodeId, groups: Vec<u32> },
    /// `node` was removed from the cluster for good.
    #[error("node {node} was removed from this cluster for good; give the new node another id")]
    Retired { node: NodeId },
    /// Only a voter can lead a group.
    #[error("node {node} is not a voter of group {group}: only a voter can lead it")]
    NotAVoter { node: NodeId, group: u32 },
    /// An upgrade is finalised only once every member's build supports
    /// the new cluster version (see `cluster::upgrade`).
    #[error("node {node} runs a build that supports cluster version {supports}, not {wanted}: upgrade it first, then finalize")]
    MemberBehind {
        node: NodeId,
        supports: u32,
        wanted: u32,
    },
    /// A change whose format needs a later cluster version.
    #[error("{what} needs cluster version {needed}; the cluster is at {current} (runnel ctl upgrade finalize, once every node runs this build)")]
    NeedsVersion {
        what: &'static str,
        needed: u32,
        current: u32,
    },
    /// A member this node has not heard from since it started.
    #[error("node {node} has not been heard from since this node started: its build is unknown; finalize once it answers")]
    MemberUnheard { node: NodeId },
    /// A preferred leader must be a member of the cluster.
    #[error("node {node} is not a member of this cluster: it cannot lead group {group}")]
    NotAMember { node: NodeId, group: u32 },
    /// A change of cluster state sent to a data group.
    #[error("{what} through group {}, not group {group}", CONTROL_GROUP)]
    WrongGroup { what: &'static str, group: u32 },
    /// A node is retired only once no group has it.
    #[error("node {node} is still a member of {}: remove it from every group first (runnel ctl node remove)", groups_text(.groups))]
    StillMember { node: NodeId, groups: Vec<u32> },
    /// The group knows `node` at another address.
    #[error("node {node} is already a member of group {group}, at {known}: remove it first (or give the new node another id)")]
    AddressTaken {
        node: NodeId,
        group: u32,
        known: String,
    },
    #[error(transparent)]
    BadAddress(#[from] AddrError),
    /// A new member did not catch up in time; running the command again
    /// goes on waiting.
    #[error("node {node} did not catch up with group {group} within {} s; run the command again to go on waiting", .within.as_secs())]
    CatchUpTimeout {
        node: NodeId,
        group: u32,
        within: Duration,
    },
    /// The remaining voters would have no quorum among the nodes that
    /// answer (a retry does not help until they do).
    #[error("removing node {node} would leave group {group} without a quorum: {up} of its remaining voters {remaining:?} are reachable, {quorum} are needed")]
    NoQuorum {
        node: NodeId,
        group: u32,
        up: usize,
        remaining: BTreeSet<NodeId>,
        quorum: usize,
    },
    /// openraft refused the change (another is under way, ...).
    #[error(transparent)]
    Refused(#[from] ChangeMembershipError<NodeId>),
}

impl MembershipError {
    /// Whether the same change may succeed if sent again shortly: a
    /// retirement whose groups' leaders did not answer, or a change that
    /// met another one under way (a joint membership is finished within
    /// seconds). A refusal for lack of quorum is not one: it lasts until
    /// the down voters answer.
    pub fn passes_by_itself(&self) -> bool {
        matches!(
            self,
            MembershipError::Unknown { .. }
                | MembershipError::Refused(ChangeMembershipError::InProgress(_))
        )
    }
}

/// "group 3", or "groups [1, 3]".
fn groups_text(groups: &[u32]) -> String {
    match groups {
        [one] => format!("group {one}"),
        many => format!("groups {many:?}"),
    }
}

/// Why a request to a peer failed (the Raft transport's, or the
/// simulated network's).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// No link to this node: it is not a member of any group known here.
    #[error("node {0} is not among the peers")]
    NotAPeer(NodeId),
    #[error("connecting to {addr} timed out")]
    ConnectTimeout { addr: String },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: Arc<std::io::Error>,
    },
    #[error("TLS with {addr} timed out")]
    TlsTimeout { addr: String },
    #[error("TLS with {addr}: {source}")]
    Tls {
        addr: String,
        source: Arc<std::io::Error>,
    },
    /// The connection's opening exchange failed (see [`HelloError`]).
    #[error("{addr}: {source}")]
    Hello { addr: String, source: HelloError },
    #[error("connection to {addr} closed")]
    Closed { addr: String },
    #[error("no answer from {addr} within {timeout:?}")]
    NoAnswer { addr: String, timeout: Duration },
    /// The peer answered with an error: its text, as it sent it.
    #[error("{0}")]
    Remote(String),
    /// The peer's answer could not be decoded.
    #[error("undecodable {what}: {reason}")]
    Undecodable { what: &'static str, reason: String },
    /// The request could not be encoded.
    #[error("encoding a {what}: {reason}")]
    Encode { what: &'static str, reason: String },
    /// The simulated network lost the request, or cut the peer off.
    #[error("node {0} is unreachable")]
    Unreachable(NodeId),
    /// The simulated peer is not running.
    #[error("node {0} is down")]
    Down(NodeId),
}

/// Why a hello (the first exchange on a Raft connection: see
/// `raft::transport::hello`) failed, on either side. The answering side
/// sends its refusal's text to the dialer, which reports it as
/// [`HelloError::Refused`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelloError {
    /// The hello's bytes do not decode.
    #[error(transparent)]
    Decode(#[from] runnel_wire::raft::hello::HelloDecodeError),
    /// The two nodes know different cluster ids.
    #[error("this node belongs to cluster {mine:?}, the peer to cluster {theirs:?}")]
    OtherCluster { mine: String, theirs: String },
    /// The first frame of a connection was not a hello.
    #[error("a connection must open with a hello (is the peer an older version?)")]
    NotAHello,
    /// The peer dialing was removed from the cluster for good.
    #[error("node {0} was removed from this cluster for good; it cannot serve again")]
    RetiredNode(NodeId),
    #[error("no answer to the hello")]
    NoAnswer,
    #[error("hello: {0}")]
    Io(Arc<std::io::Error>),
    /// The node reached is not the one dialed.
    #[error("{addr} is node {found}, not node {dialed} (was the address given to another node?)")]
    WrongNode {
        addr: String,
        found: NodeId,
        dialed: NodeId,
    },
    /// The peer refused this node, for the reason it gave.
    #[error("refused: {0}")]
    Refused(String),
    #[error("a short answer to the hello")]
    ShortAnswer,
}

/// Why a leadership transfer (`raft::transfer`) did not happen. The
/// leader leads on (or, if the target had campaigned, an ordinary
/// election follows).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransferError {
    #[error("node {node} has not caught up with group {group}")]
    Behind { node: NodeId, group: u32 },
    #[error("node {node} does not lead group {group}")]
    NotLeading { node: NodeId, group: u32 },
    #[error("group {group} is changing its membership")]
    Changing { group: u32 },
    #[error("group {group}: {refusal}")]
    NoPlan { group: u32, refusal: PlanRefusal },
    #[error("node {node} would not hold its election timer: {error}")]
    WouldNotHold { node: NodeId, error: PeerError },
    #[error("requests to the muted followers are still on their way")]
    MutedBusy,
    #[error("no time left for the muted followers' lease to run out")]
    NoTimeForLease,
    #[error("group {group}'s batches in flight were not answered in time")]
    BatchesInFlight { group: u32 },
    #[error("node {node} did not catch up with group {group} in time")]
    CatchUpTimeout { node: NodeId, group: u32 },
    #[error("node {node} did not campaign: {error}")]
    DidNotCampaign { node: NodeId, error: PeerError },
    #[error("node {node} did not take over group {group}")]
    NotTakenOver { node: NodeId, group: u32 },
    #[error("group {group} is led by {leader:?}, not by node {node}")]
    LedByAnother {
        group: u32,
        leader: Option<NodeId>,
        node: NodeId,
    },
    /// There is no other voter to hand the leadership to.
    #[error("node {node} is group {group}'s only voter")]
    OnlyVoter { node: NodeId, group: u32 },
}

/// Why no transfer plan exists (`raft::transfer::plan`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefusal {
    #[error("node {to} is not another voter of the group")]
    NotAnotherVoter { to: NodeId },
    #[error("node {to} cannot be reached")]
    Unreachable { to: NodeId },
    #[error("node {to} could not win an election: {up} of the group's {voters} voters are up")]
    CannotWin {
        to: NodeId,
        up: usize,
        voters: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::error::{EmptyMembership, InProgress};

    #[test]
    fn only_refusals_that_pass_by_themselves_are_retried() {
        let in_progress = MembershipError::Refused(ChangeMembershipError::InProgress(InProgress {
            committed: None,
            membership_log_id: None,
        }));
        assert!(in_progress.passes_by_itself());
        let unknown = MembershipError::Unknown {
            node: 2,
            groups: vec![1],
        };
        assert!(unknown.passes_by_itself());
        let empty =
            MembershipError::Refused(ChangeMembershipError::EmptyMembership(EmptyMembership {}));
        assert!(!empty.passes_by_itself());
        let no_quorum = MembershipError::NoQuorum {
            node: 2,
            group: 1,
            up: 1,
            remaining: [1, 3].into(),
            quorum: 2,
        };
        assert!(!no_quorum.passes_by_itself());
    }
}
