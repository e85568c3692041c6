//! The engine's seams as the HTTP layer and the engines see them: a
//! [`NodeEngine`] (a single node or a cluster member), each group's
//! [`GroupEngine`], where a request is served ([`Route`]), what reads
//! answer, and the vocabulary every layer shares (node ids, their Raft
//! and HTTP addresses, the routing hash, membership changes).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use runnel_core::listing::Listed;
use runnel_core::subscription::{SubCommand, SubOutcome, Subscriptions};
use runnel_core::{
    Applied, BootstrapPlan, Command, ForkMaterial, ReadFrom, ReadPlan, RemotePin, SnapshotRef,
    StreamId, StreamInfo,
};
use serde::Serialize;
use tokio::sync::watch;

use crate::error::EngineError;
use crate::metrics::NodeMetrics;
use crate::{activity, control};

/// A node's id in a cluster.
pub type NodeId = u64;

/// A boxed future, as the object-safe trait methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a request for a stream is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// By this node.
    Local,
    /// By another node, the leader of the stream's group, at this HTTP
    /// address.
    Forward { node: u64, addr: String },
    /// The stream's group has no leader at the moment (an election is
    /// under way, or no quorum is reachable).
    NoLeader,
}

/// A node as the HTTP layer sees it, on the data path: a single node or a
/// cluster member. What only a cluster does (membership, which node
/// holds which group) is [`ClusterOps`], reached through
/// [`NodeEngine::cluster`]; the inherent methods on `dyn NodeEngine`
/// answer the questions the server asks of either.
pub trait NodeEngine: Send + Sync + 'static {
    /// Proposes a command to the group of the streams it names.
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>>;

    /// The group engine that owns `name`.
    fn engine_for(&self, name: &str) -> &dyn GroupEngine;

    fn head(&self, name: &str) -> Result<StreamInfo, EngineError> {
        self.engine_for(name).head(name)
    }

    /// Why the node cannot take writes, if it cannot (its log failed).
    fn write_failure(&self) -> Option<String>;

    /// Why this node cannot serve writes and reads now (`/ready` answers
    /// 503 with it), or `None` when it can.
    fn unready(&self) -> Option<String> {
        self.write_failure()
            .map(|reason| format!("storage failed: {reason}"))
    }

    /// Which node serves requests for `name`.
    fn route(&self, _name: &str) -> Route {
        Route::Local
    }

    /// Before a read served by the leader of `name`'s group: waits until
    /// its state holds every write acknowledged before the call (in a
    /// cluster, leadership is confirmed by a quorum first).
    fn read_barrier<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether this node, though not the leader of `name`'s group, may
    /// serve a live read (SSE, long-poll) of it from its own applied
    /// state; waits until that state is current enough to.
    fn prepare_live_read<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }

    /// A page of the streams listing: up to `limit` live streams whose
    /// names start with `prefix` and sort after `after`, in name order, and
    /// whether more may follow. In a cluster, every write acknowledged
    /// before the call is in it, whichever node answers.
    fn list_streams<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Listed>, bool), EngineError>>;

    /// The live streams among `names`, with every write acknowledged
    /// before the call (in a cluster, a group this node holds no copy of
    /// is asked of its leader; the names of a group that could not be
    /// read are said so).
    fn live_named<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, LiveNamed> {
        Box::pin(async move {
            LiveNamed {
                live: self.control().live_named(names),
                unread: Vec::new(),
            }
        })
    }

    /// Whether two streams belong to the same group (a fork of a stream in
    /// another group copies its source instead of sharing it).
    fn same_group(&self, a: &str, b: &str) -> bool;

    /// Pins on other groups' streams that expiries on this node released,
    /// for the server to send there as unpins.
    fn take_released_pins(&self) -> Vec<RemotePin>;

    /// The node, its groups and their leaders, for `runnel ctl status`.
    fn status(&self) -> serde_json::Value;

    /// Figures for `/metrics`, read now.
    fn metrics(&self) -> NodeMetrics;

    /// The control group and the activity feed (subscriptions).
    fn control(&self) -> &control::Control;

    /// Which node serves subscription requests: the control group's
    /// leader.
    fn control_route(&self) -> Route {
        Route::Local
    }

    /// While this node leads the control group, the term it leads in (0
    /// on a single node): a new term means a new leader took over.
    fn control_term(&self) -> Option<u64> {
        Some(0)
    }

    /// The cluster operations of a cluster member; `None` on a single
    /// node, which has no membership to change.
    fn cluster(&self) -> Option<&dyn ClusterOps> {
        None
    }
}

/// What only a cluster member does: changes of membership, and which
/// node holds which group.
pub trait ClusterOps: Send + Sync {
    /// This node's id.
    fn node_id(&self) -> NodeId;

    /// Which node serves requests for group `group` (membership changes).
    /// A group that does not exist is answered here, where
    /// [`ClusterOps::change_member`] refuses it.
    fn group_route(&self, group: u32) -> Route;

    /// Applies a membership change to group `group`, at its leader (this
    /// node: see [`ClusterOps::group_route`]).
    fn change_member(
        &self,
        group: u32,
        change: MemberChange,
    ) -> BoxFuture<'_, Result<MemberReport, EngineError>>;

    /// Whether this node holds a copy of the group `name` lives in (in a
    /// cluster placing groups on fewer nodes than it has, not every node
    /// holds every group).
    fn holds_group_of(&self, name: &str) -> bool;

    /// Whether every node holds a copy of every group, as far as this
    /// node can tell (false in a cluster placing groups on fewer nodes
    /// than it has: see `cluster::hosting`).
    fn every_node_holds_every_group(&self) -> bool;
}

/// What the server asks of any node, answered through
/// [`NodeEngine::cluster`] and [`NodeEngine::control`].
impl dyn NodeEngine {
    /// Whether groups are replicated across nodes (a cluster), so that
    /// leadership can move under a request.
    pub fn replicated(&self) -> bool {
        self.cluster().is_some()
    }

    /// How this node names itself to others: its node id in a cluster,
    /// `single` otherwise.
    pub fn node_label(&self) -> String {
        self.cluster()
            .map_or_else(|| "single".into(), |c| c.node_id().to_string())
    }

    /// Whether this node holds a copy of the group `name` lives in (a
    /// single node holds every group).
    pub fn holds_group_of(&self, name: &str) -> bool {
        self.cluster().is_none_or(|c| c.holds_group_of(name))
    }

    /// Whether every node holds a copy of every group (see
    /// [`ClusterOps::every_node_holds_every_group`]).
    pub fn every_node_holds_every_group(&self) -> bool {
        self.cluster()
            .is_none_or(|c| c.every_node_holds_every_group())
    }

    /// Proposes a subscription command to the control group (which only
    /// its leader may do: see [`NodeEngine::control_route`]).
    pub async fn propose_control(&self, command: SubCommand) -> Result<SubOutcome, EngineError> {
        self.control().propose(command).await
    }

    /// Runs `f` over the subscriptions this node applied.
    pub fn with_subscriptions(&self, f: &mut dyn FnMut(&Subscriptions)) {
        self.control().with_subscriptions(f)
    }

    /// Live streams whose names `keep` accepts, with their tails, from
    /// this node's applied state.
    pub fn streams_where(&self, keep: &dyn Fn(&str) -> bool) -> Vec<(String, u64)> {
        self.control().streams_where(keep)
    }

    /// The feed of streams that changed on this node.
    pub fn activity(&self) -> &std::sync::Arc<activity::Activity> {
        self.control().activity()
    }
}

/// What [`NodeEngine::live_named`] found.
#[derive(Debug, Default)]
pub struct LiveNamed {
    /// The live streams among the names asked about.
    pub live: Vec<runnel_core::listing::Listed>,
    /// Names whose group could not be read (no leader, or it did not
    /// answer): whether they are live is not known.
    pub unread: Vec<String>,
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

    /// Reads from applied state, renewing the stream's TTL. Tiered bytes
    /// come from the object store.
    fn read<'a>(
        &'a self,
        name: &'a str,
        from: ReadFrom,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<ReadResult, EngineError>>;

    /// Reads a stream by id (live tails follow one incarnation).
    fn read_by_id(
        &self,
        id: StreamId,
        position: u64,
        max_bytes: u64,
    ) -> BoxFuture<'_, Result<ReadResult, EngineError>>;

    /// A receiver that changes whenever stream `id` changes (append, close,
    /// delete). Subscribe before reading to never miss a wake-up.
    fn subscribe(&self, id: StreamId) -> watch::Receiver<u64>;

    /// A snapshot of `name` (at `offset`, or the latest) with its bytes
    /// and the stream's incarnation (to mint its offset with).
    fn snapshot<'a>(
        &'a self,
        name: &'a str,
        offset: Option<u64>,
    ) -> BoxFuture<'a, Result<(SnapshotRef, Bytes, u64), EngineError>>;

    /// The latest snapshot and the messages after it (at most `max_bytes`).
    fn bootstrap<'a>(
        &'a self,
        name: &'a str,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Bootstrap, EngineError>>;

    /// What a fork in another group copies from stream `name` up to
    /// `point` (from a pin), with the bytes (see `runnel_core::fork_copy`).
    fn fork_material<'a>(
        &'a self,
        name: &'a str,
        point: u64,
    ) -> BoxFuture<'a, Result<(ForkMaterial, Bytes), EngineError>>;
}

/// A bootstrap with its bytes: the snapshot (if any) and the tail after it
/// as stored (JSON streams: `m1,m2,`).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub plan: BootstrapPlan,
    pub snapshot: Option<Bytes>,
    pub tail: Bytes,
}

/// Why an address is not a node's address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    #[error("{0:?} is not HOST:PORT")]
    NotHostPort(String),
    #[error("{0:?} has no valid port")]
    BadPort(String),
    #[error("{addr:?}: port {port} leaves no room for the Raft port")]
    LastPort { addr: String, port: u16 },
    #[error("{0:?} has no valid Raft port")]
    BadRaftPort(String),
}

/// The Raft address of a node whose HTTP listener is `http_addr`: the
/// same host, the port plus one.
pub fn raft_addr(http_addr: &str) -> Result<String, AddrError> {
    let (host, port) = http_addr
        .rsplit_once(':')
        .ok_or_else(|| AddrError::NotHostPort(http_addr.to_string()))?;
    let port: u16 = port
        .parse()
        .map_err(|_| AddrError::BadPort(http_addr.to_string()))?;
    let raft_port = port.checked_add(1).ok_or_else(|| AddrError::LastPort {
        addr: http_addr.to_string(),
        port,
    })?;
    Ok(format!("{host}:{raft_port}"))
}

/// The HTTP address of a node whose Raft address is `raft_addr` (the
/// inverse of [`raft_addr`]).
pub fn http_addr(raft_addr: &str) -> Result<String, AddrError> {
    let (host, port) = raft_addr
        .rsplit_once(':')
        .ok_or_else(|| AddrError::NotHostPort(raft_addr.to_string()))?;
    let http_port = port
        .parse::<u16>()
        .ok()
        .and_then(|p| p.checked_sub(1))
        .ok_or_else(|| AddrError::BadRaftPort(raft_addr.to_string()))?;
    Ok(format!("{host}:{http_port}"))
}

/// FNV-1a of the name, so routing is stable across processes and builds.
pub fn group_index(name: &str, groups: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % groups.max(1) as u64) as usize
}

/// A change to one group's membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// `node`, serving HTTP at `http_addr` (Raft on the next port),
    /// becomes a voter.
    Add { node: NodeId, http_addr: String },
    /// `node` leaves the group.
    Remove { node: NodeId },
    /// `node`, serving HTTP at `http_addr`, follows the group as a
    /// learner: it applies the group's entries without voting (a change
    /// to the control group only, whose voters are five at most).
    Learn { node: NodeId, http_addr: String },
    /// `node`, a voter, becomes a learner (a change to the control group
    /// only).
    Demote { node: NodeId },
    /// `node`, a member of no group any more, is removed from the cluster
    /// for good (a change to the control group only).
    Retire { node: NodeId },
    /// The cluster's data groups are to have `factor` replicas each (a
    /// change to the control group only; the replicas move after).
    SetReplication { factor: u32 },
    /// `node`, a voter, is to lead the group (a leadership transfer:
    /// see `raft::transfer`).
    Lead { node: NodeId },
    /// If `node` leads the group, another voter is to (before `node`'s
    /// replica moves away).
    LeadAway { node: NodeId },
    /// Each listed group `(group, node)` should be led by `node` (a
    /// change to the control group only; see `cluster::leaders`).
    PreferLeaders { leaders: Vec<(u32, NodeId)> },
    /// `node` is in zone `zone` (a change to the control group only; see
    /// `cluster::zones`).
    SetZone { node: NodeId, zone: String },
    /// The cluster's self-healing is to pause (or resume: a change to the
    /// control group only; see `cluster::healing`).
    PauseHealing { paused: bool },
    /// `node` is (or is no longer) draining: nothing is placed on it (a
    /// change to the control group only; see `cluster::balancing`).
    Drain { node: NodeId, draining: bool },
    /// The cluster version is to rise to what this build supports, once
    /// every member's build does (a change to the control group only;
    /// see `cluster::upgrade`).
    FinalizeUpgrade,
}

/// A group's membership after a change.
#[derive(Debug, Clone, Serialize)]
pub struct MemberReport {
    pub group: u32,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// The group's leader as this node knows it after the change.
    pub leader: Option<NodeId>,
    /// False when the group already was as asked.
    pub changed: bool,
}
