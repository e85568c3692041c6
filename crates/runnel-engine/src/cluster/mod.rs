//! Cluster policy: a cluster member, whose groups are Raft groups
//! ([`crate::raft`]) with their logs in this node's shared log, and what
//! the cluster decides about them: who forms and joins ([`formation`],
//! [`membership`], [`identity`]), who holds which group ([`hosting`],
//! `placement`), who should lead ([`leaders`], `rebalance`, the control
//! group's voters: `control_voters`), and how it checkpoints (`collect`).
//! What it answers the HTTP layer is `serving`. It imports the consensus
//! and base layers, never the single node (`tests/layers.rs`).
//!
//! The cluster forms on first start without any manual step: each node
//! initializes every group with the same membership (the full peer list),
//! which openraft accepts on every node, and the node that should lead a
//! group (balanced by the placement planner, recorded in group 0:
//! [`leaders`]) calls its election first, so leadership starts out
//! balanced. After a restart each node recovers its
//! groups' logs and votes from the shared log and rejoins. Members are
//! added and removed later, one group at a time, while the cluster serves
//! ([`membership`]); a node that a group no longer has drops its copy and
//! routes that group's requests to its leader ([`hosting`]).
//!
//! Data directory layout (meta `format = 2`, cluster):
//!
//! ```text
//! DATA_DIR/runnel.meta   format, group count and node id
//! DATA_DIR/cluster-id    the cluster's id, once known ([`identity`])
//! DATA_DIR/left-groups   groups this node dropped its copy of ([`hosting`])
//! DATA_DIR/restoring     the cluster being restored from, while restoring ([`restore`])
//! DATA_DIR/log/          the shared log: Raft records of every group
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::BasicNode;
use runnel_core::{Applied, Command, StreamsState};
use runnel_log::Log;

use crate::activity::Activity;
use crate::api::{GroupEngine, Route};
use crate::config::EngineConfig;
use crate::control::{self, Control};
use crate::datadir::{
    check_meta, open_log, refuse_collected_log_without_checkpoint, OpenError, RecordError,
};
use crate::error::EngineError;
use crate::history;
use crate::metrics::PeerMetrics;
use crate::placement;
use crate::raft::group::RaftGroup;
use crate::raft::journal::{Durability, GroupLog};
use crate::raft::starter::RaftStarter;
use crate::raft::state_machine::{AppliedPoint, GroupShared, Persisted};
use crate::raft::transport::{
    raft_addr, Links, PeerIdentity, PeerQueries, Served, TcpTransport, Transport,
};
use crate::raft::vote_guard::VoteGuard;
use crate::raft::{snapshot, NodeId};
use crate::tier::{self, GroupTier, Tiering};
use crate::upkeep::MaintainedGroup;
use crate::view::GroupView;
pub use collect::CollectError;
use collect::Collector;
use hosting::Hosting;
use identity::Identity;

mod backup;
mod balancing;
mod collect;
mod control_voters;
mod formation;
mod healing;
pub mod hosting;
pub mod identity;
mod joint;
mod leaders;
pub mod membership;
mod reads;
mod rebalance;
mod recovery;
mod replication;
mod report;
pub mod restore;
mod serving;
pub mod upgrade;
pub mod zones;

/// The data directory's format: 3 keeps streams out of group 0
/// ([`placement::stream_group`]); a format 2 directory, whose streams
/// hash over every group, is refused.
const FORMAT: u32 = 3;
/// A group snapshots (and its log before the snapshot can go) after this
/// many Raft entries, besides the periodic checkpoint.
const SNAPSHOT_EVERY: u64 = 5000;
/// Entries kept before a snapshot: none, so that a snapshot frees the log
/// before it at once (an idle group's few entries would otherwise pin the
/// first segment forever); a follower behind it is sent the snapshot.
const KEEP_AFTER_SNAPSHOT: u64 = 0;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Data directory, groups, sync mode, log and queue limits, upkeep.
    pub engine: EngineConfig,
    pub node_id: NodeId,
    /// Every node's HTTP address (this node's included), by node id.
    pub peers: BTreeMap<NodeId, String>,
    /// Leader heartbeat interval.
    pub heartbeat: Duration,
    /// A follower that hears no leader for a random time in this range
    /// calls an election.
    pub election_timeout: (Duration, Duration),
    /// Simulations: the shared log has no committer thread; the caller
    /// commits it (see [`runnel_log::LogOptions::manual_commit`]).
    pub manual_commit: bool,
    /// Mutual TLS on the Raft port (each peer known by its certificate).
    pub tls: Option<Arc<runnel_tls::ClusterTls>>,
    /// The cluster id this node must belong to (`--cluster-id`), and the
    /// one a new cluster takes when this node names it ([`identity`]).
    pub cluster_id: Option<String>,
    /// Replicas of each data group (`--replication-factor`) when this
    /// node forms a new cluster; the cluster keeps its own factor after
    /// (see [`replication`]). Group 0 is on every node.
    pub replication: usize,
    /// Zones (failure domains) of the founding nodes, as `--peers` names
    /// them (the same on every founder): a new cluster is placed by them
    /// and its control group records them ([`zones`]).
    pub zones: placement::Zones,
    /// This node's zone (`--zone`, or its `--peers` entry): kept in the
    /// data directory, reported in the status.
    pub zone: Option<String>,
    /// Replicas on a member that has not answered for this long move to
    /// live nodes ([`healing`]); `None`: never.
    pub dead_node_after: Option<Duration>,
    /// Who finalises an upgrade ([`upgrade`]).
    pub finalize_upgrade: upgrade::FinalizeUpgrade,
    /// A member that has held no data group for this long takes replicas
    /// ([`balancing`]); `None`: never.
    pub rebalance_after: Option<Duration>,
}

/// A member whose `--peers` do not name it.
#[derive(Debug, thiserror::Error)]
#[error("--peers does not list this node ({0})")]
pub struct NotInPeers(pub NodeId);

/// How long a member may be silent before its replicas move, unless
/// `--dead-node-after` says.
pub const DEFAULT_DEAD_NODE_AFTER: Duration = Duration::from_secs(300);
/// `--rebalance-after`'s default: how long a member holds no data group
/// before replicas move onto it ([`balancing`]).
pub const DEFAULT_REBALANCE_AFTER: Duration = Duration::from_secs(30);

/// Replicas of each data group unless `--replication-factor` says.
pub const DEFAULT_REPLICATION: usize = 3;
pub use runnel_core::cluster_meta::MAX_REPLICATION;

impl ClusterConfig {
    pub fn new(engine: EngineConfig, node_id: NodeId, peers: BTreeMap<NodeId, String>) -> Self {
        ClusterConfig {
            engine,
            node_id,
            peers,
            heartbeat: Duration::from_millis(60),
            election_timeout: (Duration::from_millis(350), Duration::from_millis(700)),
            manual_commit: false,
            tls: None,
            cluster_id: None,
            replication: DEFAULT_REPLICATION,
            zones: placement::Zones::new(),
            zone: None,
            dead_node_after: Some(DEFAULT_DEAD_NODE_AFTER),
            finalize_upgrade: upgrade::FinalizeUpgrade::default(),
            rebalance_after: Some(DEFAULT_REBALANCE_AFTER),
        }
    }
}

pub struct ClusterNode {
    node_id: NodeId,
    groups: Vec<Arc<RaftGroup>>,
    tiering: Option<Arc<Tiering>>,
    /// HTTP address of every node.
    peers: BTreeMap<NodeId, String>,
    log: Arc<Log>,
    collector: Arc<Collector>,
    /// Read indexes from group leaders, for live reads served here, and
    /// who leads the groups this node holds no copy of.
    peers_asked: Arc<dyn PeerQueries>,
    /// The groups as peers are answered, with this node's vote guard.
    served: Arc<Served>,
    /// The cluster this node belongs to ([`identity`]).
    identity: Arc<Identity>,
    /// A leader that has heard from no quorum for this long may be cut
    /// off: the node is not ready (`/ready`).
    quorum_silence: Duration,
    /// Raft RPC figures per peer, for `/metrics`.
    peer_metrics: Box<dyn Fn() -> Vec<PeerMetrics> + Send + Sync>,
    data_dir: std::path::PathBuf,
    /// The groups this node left, and their leaders when it holds none.
    hosting: Arc<Hosting>,
    control: Control,
    /// Replicas of each data group (`--replication-factor`), until the
    /// control group holds the cluster's factor.
    replication: usize,
    /// This node's zone (`--zone`, or its `--peers` entry).
    own_zone: Option<String>,
    /// `--dead-node-after`, and what self-healing did ([`healing`]).
    dead_node_after: Option<Duration>,
    healing: healing::HealingState,
    /// What this node backed up of the groups it leads ([`backup`]).
    backups: backup::BackupState,
    /// Set while this node restores its groups from the bucket
    /// ([`restore`]), with the cluster it restores from.
    restoring: Arc<std::sync::atomic::AtomicBool>,
    restore_source: Option<String>,
    /// `--upgrade-finalize` ([`upgrade`]).
    finalize_mode: upgrade::FinalizeUpgrade,
    /// `--rebalance-after`, and what continuous rebalancing did
    /// ([`balancing`]).
    fill_after: Option<Duration>,
    balancing: balancing::BalancingState,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a follower waits to apply up to a leader's read index before
/// sending a live read to the leader instead.
const FOLLOWER_CATCH_UP: Duration = Duration::from_secs(2);

impl ClusterNode {
    /// Opens the data directory, recovers every group's Raft log, starts
    /// the groups and the Raft listener (HTTP port + 1), and forms the
    /// cluster if it is new.
    ///
    /// The future is boxed here so that the whole member over TCP (every
    /// group's Raft core, the transport, the state machines) is compiled
    /// once, in this crate: the body of an async function is otherwise
    /// compiled again in every crate that awaits it.
    pub fn open(config: &ClusterConfig) -> BoxFuture<'_, Result<Arc<ClusterNode>, OpenError>> {
        Box::pin(Self::open_over_tcp(config))
    }

    async fn open_over_tcp(config: &ClusterConfig) -> Result<Arc<ClusterNode>, OpenError> {
        let mut peers = Vec::new();
        for (id, http) in &config.peers {
            if *id != config.node_id {
                let addr = raft_addr(http).map_err(|e| OpenError::Config(Box::new(e)))?;
                peers.push((*id, addr));
            }
        }
        let own_addr = config
            .peers
            .get(&config.node_id)
            .ok_or(OpenError::Config(Box::new(NotInPeers(config.node_id))))?;
        let identity = Identity::load(
            &config.engine.data_dir,
            config.node_id,
            config.cluster_id.as_deref(),
        )?;
        zones::keep_own(&config.engine.data_dir, config.zone.as_deref())?;
        let transport = TcpTransport {
            links: Arc::new(Links::new(
                peers,
                config.tls.clone(),
                Arc::clone(&identity) as Arc<dyn PeerIdentity>,
            )),
            listen: raft_addr(own_addr).map_err(|e| OpenError::Config(Box::new(e)))?,
            tls: config.tls.clone(),
        };
        ClusterNode::open_with(config, transport, identity).await
    }

    /// Opens a member that reaches its peers through `transport`, and
    /// belongs to the cluster `identity` names.
    pub async fn open_with<T: Transport>(
        config: &ClusterConfig,
        transport: T,
        identity: Arc<Identity>,
    ) -> Result<Arc<ClusterNode>, OpenError> {
        let engine = &config.engine;
        let group_count = engine.groups.max(1);
        check_meta(
            &engine.data_dir,
            &format!(
                "format = {FORMAT}\ngroups = {group_count}\nnode_id = {}\n",
                config.node_id
            ),
        )?;

        let hosting = Arc::new(Hosting::load(&engine.data_dir)?);
        let left: Vec<Option<u64>> = (0..group_count).map(|g| hosting.left_at(g)).collect();
        let files = (0..group_count)
            .map(|g| snapshot::load(&engine.data_dir, g))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OpenError::Checkpoint(Box::new(e)))?;
        // The snapshot of a copy this node dropped is not this group's.
        let files: Vec<_> = files
            .into_iter()
            .zip(&left)
            .map(|(file, left)| file.filter(|f| left.is_none_or(|at| f.header.replay_from >= at)))
            .collect();
        let (replay_from, collected_below) = recovery::replay_points(&files, &left);
        let covered_below = recovery::covered_below(&files, &left);
        if replay_from == 0 {
            refuse_collected_log_without_checkpoint(&engine.data_dir.join("log"))?;
        }

        let durability = Durability::new();
        let listener_durability = Arc::clone(&durability);
        let listener = Box::new(move |status| listener_durability.on_status(status));
        let mut indexes: Vec<GroupLog> = (0..group_count).map(|_| GroupLog::default()).collect();
        let log = open_log(
            engine,
            replay_from,
            collected_below,
            config.manual_commit,
            listener,
            |pos, payload| {
                let group = payload
                    .first_chunk::<4>()
                    .map(|g| u32::from_le_bytes(*g) as usize)
                    .filter(|_| payload.len() >= crate::raft::RECORD_PREFIX)
                    .ok_or(RecordError::ShortPrefix)?;
                if covered_below.get(group).is_some_and(|below| pos < *below) {
                    // Covered by the group's snapshot, or of a copy this
                    // node dropped (and may lie among collected segments).
                    return Ok(());
                }
                let index = indexes
                    .get_mut(group)
                    .ok_or(RecordError::NoSuchGroup(group))?;
                Ok(index.replay(pos, payload)?)
            },
        )?;
        durability.on_status(Ok(log.durable_position()));

        let raft_config = openraft::Config {
            heartbeat_interval: config.heartbeat.as_millis() as u64,
            election_timeout_min: config.election_timeout.0.as_millis() as u64,
            election_timeout_max: config.election_timeout.1.as_millis() as u64,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
            max_in_snapshot_log_to_keep: KEEP_AFTER_SNAPSHOT,
            // A snapshot travels in 1 MiB chunks; the last one waits
            // for the receiver to copy the bytes into its log.
            snapshot_max_chunk_size: 1 << 20,
            install_snapshot_timeout: 10_000,
            max_payload_entries: 1024,
            ..Default::default()
        }
        .validate()
        .map_err(|e| OpenError::Config(Box::new(e)))?;
        let activity = Arc::new(Activity::default());
        let mut members = BTreeMap::new();
        for (id, http) in &config.peers {
            let addr = raft_addr(http).map_err(|e| OpenError::Config(Box::new(e)))?;
            members.insert(*id, BasicNode { addr });
        }
        let transport = Arc::new(transport);
        let peers_asked: Arc<dyn PeerQueries> = transport.clone();

        // A member that loses its disk recovers from its peers; the
        // groups' backups are for a cluster that lost every disk.
        let tiering = engine
            .tier
            .clone()
            .map(|tc| Tiering::open(tc, config.node_id, group_count as usize))
            .transpose()
            .map_err(|e| OpenError::Config(Box::new(e)))?;
        let restore_source =
            restore::pending_source(&engine.data_dir).map_err(|source| OpenError::Io {
                path: engine.data_dir.join(restore::RESTORING_FILE),
                source,
            })?;
        let restoring = Arc::new(std::sync::atomic::AtomicBool::new(restore_source.is_some()));
        if let (Some(tiering), Some(_)) = (&tiering, &restore_source) {
            tiering.hold_sweeps(true);
        }
        let starter = Arc::new(RaftStarter {
            node_id: config.node_id,
            config: raft_config,
            log: Arc::clone(&log),
            durability: Arc::clone(&durability),
            transport: Arc::clone(&transport),
        });
        let mut groups = Vec::new();
        let mut shares = Vec::new();
        for (g, (mut index, file)) in indexes.into_iter().zip(files).enumerate() {
            let (state, applied, persisted) = match file {
                None => (StreamsState::new(), AppliedPoint::default(), None),
                Some(file) => {
                    let state = snapshot::decode_state(&file.state)
                        .map_err(|e| OpenError::Checkpoint(Box::new(e)))?;
                    if let Some(last) = file.last_log_id() {
                        index.start_after_snapshot(last, file.header.vote);
                    }
                    let applied = AppliedPoint {
                        last: file.last_log_id(),
                        membership: file.header.meta.last_membership.clone(),
                    };
                    let live = state.live_ranges();
                    (state, applied, Some(Persisted { file, live }))
                }
            };
            let shared = GroupShared {
                group: g as u32,
                data_dir: engine.data_dir.clone(),
                view: GroupView::new(
                    state,
                    Arc::clone(&log),
                    tiering.as_ref().map(|t| GroupTier {
                        tiering: Arc::clone(t),
                        group: g as u32,
                    }),
                    Arc::clone(&activity),
                    engine.read_pages_bytes,
                ),
                index: Arc::new(Mutex::new(index)),
                durability: Arc::clone(&durability),
                applied: Arc::new(Mutex::new(applied)),
                persisted: Arc::new(Mutex::new(persisted)),
                file_gate: Arc::default(),
                inline_io: config.manual_commit,
                muted: Arc::default(),
            };
            let raft = starter
                .start(&shared)
                .await
                .map_err(|e| OpenError::Config(Box::new(e)))?;
            groups.push(Arc::new(RaftGroup::new(
                g as u32,
                config.node_id,
                raft,
                shared.view.clone(),
                Arc::clone(&shared.muted),
                engine.max_pending_proposals,
            )));
            shares.push(shared);
        }

        let served = Arc::new(Served::new(
            groups.iter().map(|g| g.raft_slot().clone()).collect(),
            groups.iter().map(|g| g.view().clone()).collect(),
            VoteGuard::new(groups.len()),
            Arc::clone(&identity) as Arc<dyn PeerIdentity>,
            {
                let control = Arc::clone(&groups[control::CONTROL_GROUP]);
                Box::new(move |node| control.view().with_state(|s| s.is_retired(node)))
            },
        ));
        let mut tasks = transport.serve(Arc::clone(&served)).await?;

        let ids: Vec<NodeId> = members.keys().copied().collect();
        let mut placement = placement::cluster_target(
            &placement::Placement::default(),
            &ids,
            &config.zones,
            groups.len(),
            config.replication,
        );
        // Every founder votes in group 0 (a group forms with voters only);
        // past five, its leader makes the others learners (`control_voters`).
        let learners = placement::control_learners(&placement, &ids);
        placement.groups[control::CONTROL_GROUP].extend(learners);
        tasks.push(tokio::spawn(leaders::record_initial(
            Arc::clone(&groups[control::CONTROL_GROUP]),
            placement.clone(),
        )));
        tasks.push(tokio::spawn(zones::record_known(
            Arc::clone(&groups[control::CONTROL_GROUP]),
            config.zones.clone(),
        )));
        tasks.push(tokio::spawn(formation::form_and_balance(
            groups.clone(),
            config.node_id,
            members,
            placement,
            Arc::clone(&transport),
            Arc::clone(&served),
            config.election_timeout.1 * 3,
        )));
        tasks.push(tokio::spawn(identity::name_the_cluster(
            Arc::clone(&groups[control::CONTROL_GROUP]),
            Arc::clone(&identity),
        )));
        tasks.push(tokio::spawn(replication::record_initial(
            Arc::clone(&groups[control::CONTROL_GROUP]),
            config.replication,
        )));
        tasks.push(tokio::spawn(membership::link_members(
            groups.clone(),
            config.node_id,
            Arc::clone(&transport),
            Arc::clone(&hosting),
        )));
        tasks.push(tokio::spawn(hosting::follow_groups(
            groups.clone(),
            shares.clone(),
            Arc::clone(&starter),
            Arc::clone(&hosting),
        )));
        tasks.push(tokio::spawn(joint::finish_joint_changes(
            groups.clone(),
            config.node_id,
            Arc::clone(&hosting),
        )));
        tasks.push(tokio::spawn(control_voters::trim(
            Arc::clone(&groups[control::CONTROL_GROUP]),
            config.node_id,
            Arc::clone(&peers_asked),
        )));
        let control_group = Arc::clone(&groups[control::CONTROL_GROUP]);
        tasks.push(tokio::spawn(rebalance::rebalance(
            groups.clone(),
            move |g, voters| leaders::preferred_leader(&control_group, g, voters),
            config.node_id,
            Arc::clone(&transport),
            config.election_timeout.1 * 6,
        )));
        tasks.push(tokio::spawn(history::upkeep(
            groups.clone(),
            engine.sweep_interval,
            engine.compaction,
        )));
        let collector = Arc::new(Collector::new(
            groups.clone(),
            shares,
            Arc::clone(&log),
            config.manual_commit,
            Arc::clone(&hosting),
        ));
        tasks.push(tokio::spawn(Arc::clone(&collector).run(
            engine.checkpoint_interval,
            engine.checkpoint_bytes,
            tiering.clone(),
        )));
        if let Some(tiering) = &tiering {
            tasks.push(tokio::spawn(tier::uploader::run(
                groups.clone(),
                Arc::clone(tiering),
                Arc::clone(&log),
                engine.segment_bytes,
            )));
            tasks.push(tokio::spawn(tier::gc::run(
                groups.clone(),
                Arc::clone(tiering),
            )));
        }
        tracing::info!(
            node_id = config.node_id,
            groups = groups.len(),
            log_bytes = log.durable_position(),
            "cluster member started"
        );
        Ok(Arc::new_cyclic(|me: &std::sync::Weak<ClusterNode>| {
            if let Some(after) = config.dead_node_after {
                tasks.push(tokio::spawn(healing::heal(me.clone(), after)));
            }
            if tiering.as_ref().is_some_and(|t| t.config.backup) {
                tasks.push(tokio::spawn(backup::back_up(me.clone())));
            }
            if restore_source.is_some() {
                tasks.push(tokio::spawn(restore::restore(me.clone())));
            }
            if let Some(after) = config.rebalance_after {
                tasks.push(tokio::spawn(balancing::balance(me.clone(), after)));
            }
            tasks.push(tokio::spawn(upgrade::finalize_when_ready(
                me.clone(),
                config.finalize_upgrade,
            )));
            ClusterNode {
                control: Control::new(&groups, activity).held_while(Arc::clone(&restoring)),
                node_id: config.node_id,
                tiering,
                groups,
                peers: config.peers.clone(),
                log,
                collector,
                peers_asked,
                served,
                identity,
                quorum_silence: config.election_timeout.1 * 2,
                peer_metrics: {
                    let transport = Arc::clone(&transport);
                    Box::new(move || transport.peer_metrics())
                },
                data_dir: engine.data_dir.clone(),
                hosting,
                replication: config.replication,
                own_zone: config.zone.clone(),
                dead_node_after: config.dead_node_after,
                healing: healing::HealingState::default(),
                backups: backup::BackupState::default(),
                restoring,
                restore_source,
                finalize_mode: config.finalize_upgrade,
                fill_after: config.rebalance_after,
                balancing: balancing::BalancingState::default(),
                tasks,
            }
        }))
    }

    /// Whether this node votes in every group: false while it catches up
    /// with a group it lost its copy of (see [`VoteGuard`]).
    /// (The simulation loses a disk only while every node votes.)
    pub fn votes_in_every_group(&self) -> bool {
        self.groups
            .iter()
            .all(|g| !self.served.votes().refuses(g.index(), &g.raft()))
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The cluster's id, once this node knows it ([`identity`]).
    pub fn cluster_id(&self) -> Option<&str> {
        self.identity.get()
    }

    pub fn groups(&self) -> &[Arc<RaftGroup>] {
        &self.groups
    }

    fn group_for(&self, name: &str) -> &Arc<RaftGroup> {
        &self.groups[placement::stream_group(name, self.groups.len())]
    }

    /// Which groups this node left, and where their leaders are.
    pub fn hosting(&self) -> &Hosting {
        &self.hosting
    }

    /// Whether this node holds a copy of `group` ([`hosting`]).
    pub fn holds(&self, group: &RaftGroup) -> bool {
        hosting::holds(group, self.node_id, &self.hosting)
    }

    /// Whether `group` is served by other nodes, this one not among its
    /// members: it left the group, its copy's membership leaves it out,
    /// or the group's leader says it is no member. (An empty copy of a
    /// group whose leader counts this node, one that lost its disk, is
    /// not: it is catching up.)
    pub fn held_elsewhere(&self, group: &RaftGroup) -> bool {
        let index = group.index();
        !self.holds(group)
            && (self.hosting.has_left(index)
                || self.hosting.elsewhere(index)
                || !group.members().is_empty())
    }

    /// Where requests for `group` are served: here, at its leader, or
    /// nowhere for now. A group this node holds no copy of is served at
    /// the leader its peers name.
    fn route_to(&self, group: &RaftGroup) -> Route {
        // Not a member (any more): whatever this node's copy says of the
        // leader is stale; a removed leader may still name itself.
        if !self.holds(group) {
            return match self.hosting.hint(group.index()) {
                Some((node, addr)) if node != self.node_id => Route::Forward { node, addr },
                _ => Route::NoLeader,
            };
        }
        match group.leader() {
            Some(leader) if leader == self.node_id => Route::Local,
            Some(leader) => match self
                .peers
                .get(&leader)
                .cloned()
                .or_else(|| group.member_http_addr(leader))
            {
                Some(addr) => Route::Forward { node: leader, addr },
                None => Route::NoLeader,
            },
            None => Route::NoLeader,
        }
    }

    async fn propose(&self, command: Command) -> Result<Applied, EngineError> {
        let mut names = command.names();
        let group = self.group_for(names.clone().next().unwrap_or(""));
        if names.any(|n| !Arc::ptr_eq(self.group_for(n), group)) {
            return Err(EngineError::CrossGroupFork);
        }
        self.refuse_unrestored(group)?;
        group.propose(command).await
    }

    /// Waits until every group has a leader (at most `timeout`).
    pub async fn wait_for_leaders(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.groups.iter().all(|g| g.leader().is_some()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Snapshots every group that applied entries since its last snapshot,
    /// then deletes the log segments no group needs any more; returns the
    /// bytes reclaimed.
    pub async fn checkpoint(&self) -> Result<u64, CollectError> {
        self.collector.checkpoint().await
    }

    /// The node's tiering, when it tiers.
    pub fn tiering(&self) -> Option<&Arc<Tiering>> {
        self.tiering.as_ref()
    }

    /// Segment files of the shared log.
    pub fn log_segments(&self) -> usize {
        self.log.segment_count()
    }

    /// With `manual_commit`: writes and syncs what the shared log buffered.
    pub fn commit_log(&self) -> Result<bool, runnel_log::LogError> {
        self.log.commit()
    }

    /// Simulates the process being killed: the shared log drops what it
    /// has not committed and takes no more appends, and every group stops.
    pub async fn crash(&self) {
        self.log.crash();
        for task in &self.tasks {
            task.abort();
        }
        self.shutdown().await;
    }

    pub async fn shutdown(&self) {
        for group in &self.groups {
            let _ = group.raft().shutdown().await;
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
