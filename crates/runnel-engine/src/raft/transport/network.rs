//! openraft's side of the transport: each group's clients, one per
//! target node, sending through the link to that node.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use runnel_wire::raft::frame::PeerRequest;

use super::{Links, PeerLink};
use crate::raft::{NodeId, TypeConfig};

/// Creates the per-target clients of one group.
#[derive(Clone)]
pub struct NetworkFactory {
    pub group: u32,
    pub peers: Arc<Links>,
}

pub struct GroupNetwork {
    group: u32,
    target: NodeId,
    link: Option<Arc<PeerLink>>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = GroupNetwork;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> GroupNetwork {
        GroupNetwork {
            group: self.group,
            target,
            link: Some(self.peers.link(target, &node.addr)),
        }
    }
}

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl GroupNetwork {
    async fn rpc<Resp, E>(&self, request: PeerRequest, option: &RPCOption) -> RpcResult<Resp, E>
    where
        Resp: serde::de::DeserializeOwned,
        E: std::error::Error + serde::de::DeserializeOwned,
    {
        let unreachable = |reason: String| RPCError::Unreachable(Unreachable::new(&io(reason)));
        let link = self
            .link
            .as_ref()
            .ok_or_else(|| unreachable(format!("node {} is not among the peers", self.target)))?;
        let body = request
            .encode()
            .map_err(|e| RPCError::Network(NetworkError::new(&io(e.to_string()))))?;
        let reply = link
            .call(request.kind(), self.group, &body, option.hard_ttl())
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let answer: Result<Resp, E> = bincode::deserialize(&reply)
            .map_err(|e| RPCError::Network(NetworkError::new(&io(e.to_string()))))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

fn io(reason: String) -> std::io::Error {
    std::io::Error::other(reason)
}

impl RaftNetwork<TypeConfig> for GroupNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.rpc(PeerRequest::Append(rpc), &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.rpc(PeerRequest::Snapshot(rpc), &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.rpc(PeerRequest::Vote(rpc), &option).await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
