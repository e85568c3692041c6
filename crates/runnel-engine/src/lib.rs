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
//! State Protocol compaction in the background; [`metrics`] gathers the
//! figures `/metrics` shows.

pub mod activity;
mod checkpoint;
mod clock;
pub mod cluster;
pub mod control;
pub(crate) mod copy_forward;
pub mod history;
pub mod hooks;
pub mod local;
pub mod metrics;
pub mod node;
pub mod placement;
pub mod raft;
pub mod tail;
pub mod tier;
mod view;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use runnel_core::listing::Listed;
use runnel_core::subscription::{SubCommand, SubOutcome, Subscriptions};
use runnel_core::{
    Applied, BootstrapPlan, Command, CoreError, Entry, ForkMaterial, ReadFrom, ReadPlan, RemotePin,
    SnapshotRef, StreamId, StreamInfo,
};
pub use tier::{TierConfig, Tiering};
use tokio::sync::watch;

pub use clock::now_ms;
pub use metrics::{GroupMetrics, NodeMetrics, TierMetrics};
pub use node::{EngineConfig, Node};
pub use runnel_core::cluster_meta::MAX_GROUPS;
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

/// A node as the HTTP layer sees it: a single node or a cluster member.
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

    /// Which node serves requests for group `group` (membership changes).
    fn group_route(&self, _group: u32) -> Route {
        Route::Local
    }

    /// Applies a membership change to group `group`, at its leader (this
    /// node: see [`NodeEngine::group_route`]).
    fn change_member(
        &self,
        _group: u32,
        _change: cluster::membership::MemberChange,
    ) -> BoxFuture<'_, Result<cluster::membership::MemberReport, EngineError>> {
        Box::pin(async {
            Err(EngineError::Membership(
                "this server is a single node: it has no cluster membership to change".into(),
            ))
        })
    }

    /// Whether groups are replicated across nodes (a cluster), so that
    /// leadership can move under a request.
    fn replicated(&self) -> bool {
        false
    }

    /// Whether every node holds a copy of every group, as far as this
    /// node can tell (false in a cluster placing groups on fewer nodes
    /// than it has: see `cluster::hosting`).
    fn every_node_holds_every_group(&self) -> bool {
        true
    }

    /// How this node names itself to others (its node id in a cluster).
    fn node_label(&self) -> String {
        "single".into()
    }

    /// Whether this node, though not the leader of `name`'s group, may
    /// serve a live read (SSE, long-poll) of it from its own applied
    /// state; waits until that state is current enough to.
    fn prepare_live_read<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }

    /// Before a read served by the leader of `name`'s group: waits until
    /// its state holds every write acknowledged before the call (in a
    /// cluster, leadership is confirmed by a quorum first).
    fn read_barrier<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
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

    /// The node, its groups and their leaders, for `runnel ctl status`.
    fn status(&self) -> serde_json::Value;

    /// Figures for `/metrics`, read now.
    fn metrics(&self) -> NodeMetrics;

    /// Whether two streams belong to the same group (a fork of a stream in
    /// another group copies its source instead of sharing it).
    fn same_group(&self, a: &str, b: &str) -> bool;

    /// Pins on other groups' streams that expiries on this node released,
    /// for the server to send there as unpins.
    fn take_released_pins(&self) -> Vec<RemotePin>;

    /// The control group and the activity feed (subscriptions).
    fn control(&self) -> &control::Control;

    /// Proposes a subscription command to the control group (which only
    /// its leader may do: see [`NodeEngine::control_route`]).
    fn propose_control(
        &self,
        command: SubCommand,
    ) -> BoxFuture<'_, Result<SubOutcome, EngineError>> {
        Box::pin(self.control().propose(command))
    }

    /// Runs `f` over the subscriptions this node applied.
    fn with_subscriptions(&self, f: &mut dyn FnMut(&Subscriptions)) {
        self.control().with_subscriptions(f)
    }

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

    /// Live streams whose names `keep` accepts, with their tails, from
    /// this node's applied state.
    fn streams_where(&self, keep: &dyn Fn(&str) -> bool) -> Vec<(String, u64)> {
        self.control().streams_where(keep)
    }

    /// Whether this node holds a copy of the group `name` lives in (in a
    /// cluster placing groups on fewer nodes than it has, not every node
    /// holds every group).
    fn holds_group_of(&self, _name: &str) -> bool {
        true
    }

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

    /// The feed of streams that changed on this node.
    fn activity(&self) -> &std::sync::Arc<activity::Activity> {
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

    /// A snapshot of `name` (at `offset`, or the latest) with its bytes.
    fn snapshot<'a>(
        &'a self,
        name: &'a str,
        offset: Option<u64>,
    ) -> BoxFuture<'a, Result<(SnapshotRef, Bytes), EngineError>>;

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

/// A group as the node's background upkeep sees it.
pub(crate) trait MaintainedGroup: GroupEngine {
    fn index(&self) -> u32;
    fn view(&self) -> &view::GroupView;
    /// Whether this node proposes the group's upkeep (expiry, retention,
    /// compaction): in a cluster only the group's leader does.
    fn leads(&self) -> bool {
        true
    }
    /// Proposes an entry as it is (its clock reading included).
    fn submit_entry(&self, entry: Entry) -> BoxFuture<'_, Result<Applied, EngineError>>;
    /// The term this node leads the group in (0 for the local engine):
    /// what tiering commands are fenced to.
    fn term(&self) -> u64 {
        0
    }
}

/// A page of the streams of all `groups` (see
/// [`NodeEngine::list_streams`]): each group's first `limit`, merged.
pub(crate) fn list_groups<G: MaintainedGroup>(
    groups: &[std::sync::Arc<G>],
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> (Vec<Listed>, bool) {
    let now = now_ms();
    // One more than asked: whether another page follows.
    let page: Vec<Listed> = groups
        .iter()
        .flat_map(|g| {
            g.view()
                .with_state(|s| s.list(prefix, after, limit + 1, now))
        })
        .collect();
    merge_listing(page, limit)
}

/// The first `limit` of the groups' pages (each of up to `limit + 1`
/// streams) in name order, and whether more follow.
pub(crate) fn merge_listing(mut page: Vec<Listed>, limit: usize) -> (Vec<Listed>, bool) {
    page.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let more = page.len() > limit;
    page.truncate(limit);
    (page, more)
}

/// Whether two names fall in the same of `groups` groups.
pub(crate) fn same_group(a: &str, b: &str, groups: usize) -> bool {
    node::group_index(a, groups) == node::group_index(b, groups)
}

/// Takes the pins that expiries released in any of `groups`.
pub(crate) fn take_released_pins<G: MaintainedGroup>(
    groups: &[std::sync::Arc<G>],
) -> Vec<RemotePin> {
    groups
        .iter()
        .flat_map(|g| g.view().take_released())
        .collect()
}

/// Proposes `command`, preceded by the expiry of any stream it names whose
/// TTL passed. A write that stores bytes is refused while the node's
/// tiering backlog is full; positions the command names inside tiered
/// history are checked first (see [`tier::prepare`]). Expiry is decided here, by the proposer, and logged;
/// applying never consults the sliding TTL (reads renew it unlogged).
pub(crate) async fn propose_with_expiry<G: MaintainedGroup + ?Sized>(
    group: &G,
    command: Command,
) -> Result<Applied, EngineError> {
    if let Some(tier) = &group.view().tier {
        let stores_bytes = command.body().is_some_and(|b| !b.data.is_empty());
        if let Some(full) = tier.tiering.over_backlog().filter(|_| stores_bytes) {
            return Err(full);
        }
    }
    let command = tier::prepare::prepare(group.view(), command).await?;
    let now = now_ms();
    let expired: Vec<StreamId> = group.view().with_state(|state| {
        command
            .names()
            .filter_map(|name| state.expired_id(name, now))
            .collect()
    });
    if !expired.is_empty() {
        let applied = group
            .submit_entry(Entry {
                now_ms: now,
                command: Command::Expire { ids: expired },
            })
            .await?;
        group.view().keep_released(&applied);
    }
    group
        .submit_entry(Entry {
            now_ms: now,
            command,
        })
        .await
}
