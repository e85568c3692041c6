//! Silencing a leader's replication to some followers of one group for
//! the length of a leadership transfer (see [`super`]): the group's
//! network clients are wrapped so that, while a follower is muted, append
//! and snapshot requests to it fail at once as unreachable (openraft
//! backs off and tries again) instead of reaching it and renewing its
//! leader lease. Requests already on their way are counted, so the
//! transfer knows from when the muted followers heard nothing more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use crate::raft::{NodeId, TypeConfig};

/// One group's muted followers and the requests in flight to each.
#[derive(Default)]
pub struct MutedPeers {
    state: Mutex<MuteState>,
}

#[derive(Default)]
struct MuteState {
    muted: BTreeSet<NodeId>,
    in_flight: BTreeMap<NodeId, usize>,
}

impl MutedPeers {
    /// Stops replication to `nodes` until [`MutedPeers::unmute_all`].
    pub(crate) fn mute(&self, nodes: impl IntoIterator<Item = NodeId>) {
        self.lock().muted.extend(nodes);
    }

    pub(crate) fn unmute_all(&self) {
        self.lock().muted.clear();
    }

    /// Whether no request to any of `nodes` is on its way.
    pub(crate) fn idle(&self, nodes: &[NodeId]) -> bool {
        let state = self.lock();
        nodes
            .iter()
            .all(|n| state.in_flight.get(n).copied().unwrap_or(0) == 0)
    }

    /// Waits until no request to `nodes` is on its way, at most `limit`;
    /// answers whether they are idle.
    pub(crate) async fn wait_idle(&self, nodes: &[NodeId], limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.idle(nodes) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    /// Counts a request to `node` as on its way until the guard drops;
    /// `None` while `node` is muted.
    fn start(self: &Arc<Self>, node: NodeId) -> Option<InFlight> {
        let mut state = self.lock();
        if state.muted.contains(&node) {
            return None;
        }
        *state.in_flight.entry(node).or_default() += 1;
        Some(InFlight {
            peers: Arc::clone(self),
            node,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MuteState> {
        self.state.lock().expect("muted peers lock")
    }
}

struct InFlight {
    peers: Arc<MutedPeers>,
    node: NodeId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.peers.lock();
        if let Some(count) = state.in_flight.get_mut(&self.node) {
            *count = count.saturating_sub(1);
        }
    }
}

/// A group's network factory whose clients honour the group's mutes.
pub struct MutingFactory<F> {
    pub inner: F,
    pub muted: Arc<MutedPeers>,
}

pub struct MutingNetwork<N> {
    inner: N,
    target: NodeId,
    muted: Arc<MutedPeers>,
}

impl<F: RaftNetworkFactory<TypeConfig>> RaftNetworkFactory<TypeConfig> for MutingFactory<F> {
    type Network = MutingNetwork<F::Network>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        MutingNetwork {
            inner: self.inner.new_client(target, node).await,
            target,
            muted: Arc::clone(&self.muted),
        }
    }
}

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl<N> MutingNetwork<N> {
    fn admit<E: std::error::Error>(&self) -> Result<InFlight, RPCError<NodeId, BasicNode, E>> {
        self.muted.start(self.target).ok_or_else(|| {
            let reason = format!(
                "replication to node {} is held for a leadership transfer",
                self.target
            );
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(reason)))
        })
    }
}

impl<N: RaftNetwork<TypeConfig>> RaftNetwork<TypeConfig> for MutingNetwork<N> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let _in_flight = self.admit()?;
        self.inner.append_entries(rpc, option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let _in_flight = self.admit()?;
        self.inner.install_snapshot(rpc, option).await
    }

    /// Votes pass: muting holds back a leader's lease renewals, and a
    /// leader sends no votes.
    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.inner.vote(rpc, option).await
    }

    fn backoff(&self) -> Backoff {
        self.inner.backoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_muted_peer_admits_nothing_and_requests_on_their_way_are_counted() {
        let peers = Arc::new(MutedPeers::default());
        let first = peers.start(2).expect("not muted yet");
        let second = peers.start(2).expect("not muted yet");
        peers.mute([2]);
        assert!(peers.start(2).is_none(), "muted");
        assert!(peers.start(3).is_some(), "another peer is not");
        assert!(!peers.idle(&[2]), "two requests still on their way");
        drop(first);
        assert!(!peers.idle(&[2]));
        drop(second);
        assert!(peers.idle(&[2, 3]));
        peers.unmute_all();
        assert!(peers.start(2).is_some());
    }
}
