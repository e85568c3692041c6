//! The simulated network: every node's Raft groups on one thread, each
//! message leg delayed, dropped or cut off as the seeded fault schedule
//! says.

// openraft's network traits return its `RPCError` (over 128 bytes); the
// simulated network answers what they do.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use runnel_core::listing::Listed;
use runnel_engine::datadir::OpenError;
use runnel_engine::metrics::PeerMetrics;
use runnel_engine::raft::transport::{PeerError, ServeError};
use runnel_engine::raft::{NodeId, Raft, TypeConfig};
use runnel_engine::sim_support::{
    LeaderView, ListRequest, PeerGroup, Served, Transport, VOTE_REFUSAL,
};
use runnel_engine::BoxFuture;

pub struct SimNet {
    state: Mutex<NetState>,
}

struct NetState {
    rng: StdRng,
    /// The groups of every running node.
    nodes: BTreeMap<NodeId, Arc<Served>>,
    /// Nodes cut off from all others.
    isolated: BTreeSet<NodeId>,
    drop_per_mille: u32,
    max_delay_ms: u64,
}

impl SimNet {
    pub fn new(seed: u64) -> Arc<SimNet> {
        Arc::new(SimNet {
            state: Mutex::new(NetState {
                rng: StdRng::seed_from_u64(seed),
                nodes: BTreeMap::new(),
                isolated: BTreeSet::new(),
                drop_per_mille: 0,
                max_delay_ms: 1,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().expect("net lock")
    }

    pub fn unregister(&self, node: NodeId) {
        self.lock().nodes.remove(&node);
    }

    pub fn isolate(&self, node: NodeId, isolated: bool) {
        let mut state = self.lock();
        if isolated {
            state.isolated.insert(node);
        } else {
            state.isolated.remove(&node);
        }
    }

    pub fn set_faults(&self, drop_per_mille: u32, max_delay_ms: u64) {
        let mut state = self.lock();
        state.drop_per_mille = drop_per_mille;
        state.max_delay_ms = max_delay_ms.max(1);
    }

    /// The delay of one message leg, or `None` if it is lost.
    fn leg(&self, from: NodeId, to: NodeId) -> Option<Duration> {
        let mut state = self.lock();
        if state.isolated.contains(&from) || state.isolated.contains(&to) {
            return None;
        }
        if !state.nodes.contains_key(&to) {
            return None;
        }
        let drop = state.drop_per_mille;
        if drop > 0 && state.rng.gen_range(0..1000) < drop {
            return None;
        }
        let max = state.max_delay_ms;
        Some(Duration::from_micros(state.rng.gen_range(100..=max * 1000)))
    }

    /// What `node` answers its peers with, while it runs.
    fn served(&self, node: NodeId) -> Option<Arc<Served>> {
        self.lock().nodes.get(&node).cloned()
    }

    fn raft(&self, node: NodeId, group: u32) -> Option<Raft> {
        self.served(node)?.raft(group)
    }

    /// Whether `node` would refuse a vote in `group` now (see
    /// `runnel_engine::raft::vote_guard`).
    fn refuses_vote(&self, node: NodeId, group: u32) -> bool {
        self.served(node).is_some_and(|s| s.refuses_vote(group))
    }

    /// A request and its answer across the network, within `ttl`.
    async fn exchange<T, E, F>(
        &self,
        from: NodeId,
        to: NodeId,
        group: u32,
        ttl: Duration,
        call: impl FnOnce(Raft) -> F,
    ) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
        F: Future<Output = Result<T, E>>,
    {
        let unreachable = || {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
                "lost in the simulated network",
            )))
        };
        let trip = async {
            let Some(delay) = self.leg(from, to) else {
                tokio::time::sleep(Duration::from_millis(1)).await;
                return Err(unreachable());
            };
            tokio::time::sleep(delay).await;
            let raft = self.raft(to, group).ok_or_else(unreachable)?;
            let answer = call(raft).await;
            let delay = self.leg(to, from).ok_or_else(unreachable)?;
            tokio::time::sleep(delay).await;
            answer.map_err(|e| RPCError::RemoteError(RemoteError::new(to, e)))
        };
        tokio::time::timeout(ttl, trip)
            .await
            .unwrap_or_else(|_| Err(unreachable()))
    }
}

/// One node's view of the simulated network.
pub struct SimTransport {
    pub net: Arc<SimNet>,
    pub me: NodeId,
}

impl SimTransport {
    /// What `node` answers with, if the network lets this node reach it.
    fn reach(&self, node: NodeId) -> Result<Arc<Served>, PeerError> {
        if self.net.leg(self.me, node).is_none() {
            return Err(PeerError::Unreachable(node));
        }
        self.net.served(node).ok_or(PeerError::Down(node))
    }
}

impl Transport for SimTransport {
    type Network = SimNetworkFactory;

    /// Reachability only: a peer is reachable while it runs and neither
    /// side is cut off. Asking draws nothing from the fault schedule, so
    /// it changes no run.
    fn peer_metrics(&self) -> Vec<PeerMetrics> {
        let state = self.net.lock();
        let cut_off = |node: NodeId| state.isolated.contains(&node);
        state
            .nodes
            .keys()
            .filter(|node| **node != self.me)
            .map(|&node| PeerMetrics {
                node,
                failures: 0,
                latency: Default::default(),
                reachable: !cut_off(node) && !cut_off(self.me),
            })
            .collect()
    }

    fn network(&self, group: u32) -> SimNetworkFactory {
        SimNetworkFactory {
            net: Arc::clone(&self.net),
            me: self.me,
            group,
        }
    }

    fn serve(
        &self,
        served: Arc<Served>,
    ) -> BoxFuture<'_, Result<Vec<tokio::task::JoinHandle<()>>, OpenError>> {
        self.net.lock().nodes.insert(self.me, served);
        Box::pin(async { Ok(Vec::new()) })
    }

    fn read_index(
        &self,
        leader: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, PeerError>> {
        Box::pin(async move { self.reach(leader)?.read_index(group).await.map_err(remote) })
    }

    fn peer_ids(&self) -> Vec<NodeId> {
        let state = self.net.lock();
        state
            .nodes
            .keys()
            .copied()
            .filter(|n| *n != self.me)
            .collect()
    }

    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> BoxFuture<'a, Result<Vec<Listed>, PeerError>> {
        Box::pin(async move {
            self.reach(leader)?
                .list(group, request)
                .await
                .map_err(remote)
        })
    }

    fn leader_view(
        &self,
        node: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<LeaderView, PeerError>> {
        Box::pin(async move { self.reach(node)?.leader_view(group).map_err(remote) })
    }

    fn handoff(&self, node: NodeId, group: u32, role: u8) -> BoxFuture<'_, Result<(), PeerError>> {
        Box::pin(async move { self.reach(node)?.handoff(group, role).map_err(remote) })
    }

    fn probe(&self, node: NodeId, group: u32) -> BoxFuture<'_, Option<PeerGroup>> {
        Box::pin(async move { self.reach(node).ok()?.probe(group).await.ok() })
    }

    fn probe_peers(&self, group: u32) -> BoxFuture<'_, PeerGroup> {
        Box::pin(async move {
            let peers: Vec<NodeId> = self.net.lock().nodes.keys().copied().collect();
            let mut all = PeerGroup::default();
            for peer in peers.into_iter().filter(|p| *p != self.me) {
                if self.net.leg(self.me, peer).is_none() {
                    continue;
                }
                if let Some(served) = self.net.served(peer) {
                    if let Ok(copy) = served.probe(group).await {
                        all = all.any(copy);
                    }
                }
            }
            all
        })
    }
}

/// A peer's refusal as the caller sees it: the text the wire would carry.
fn remote(refusal: ServeError) -> PeerError {
    PeerError::Remote(refusal.to_string())
}

pub struct SimNetworkFactory {
    net: Arc<SimNet>,
    me: NodeId,
    group: u32,
}

pub struct SimNetwork {
    net: Arc<SimNet>,
    me: NodeId,
    target: NodeId,
    group: u32,
}

impl RaftNetworkFactory<TypeConfig> for SimNetworkFactory {
    type Network = SimNetwork;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> SimNetwork {
        SimNetwork {
            net: Arc::clone(&self.net),
            me: self.me,
            target,
            group: self.group,
        }
    }
}

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl RaftNetwork<TypeConfig> for SimNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.net
            .exchange(
                self.me,
                self.target,
                self.group,
                option.hard_ttl(),
                |raft| async move { raft.append_entries(rpc).await },
            )
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.net
            .exchange(
                self.me,
                self.target,
                self.group,
                option.hard_ttl(),
                |raft| async move { raft.install_snapshot(rpc).await },
            )
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        // The receiver's guard, as its transport would apply it.
        if self.net.refuses_vote(self.target, self.group) {
            tokio::time::sleep(Duration::from_millis(1)).await;
            return Err(RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other(VOTE_REFUSAL),
            )));
        }
        self.net
            .exchange(
                self.me,
                self.target,
                self.group,
                option.hard_ttl(),
                |raft| async move { raft.vote(rpc).await },
            )
            .await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
