//! The production transport: TCP (with the cluster's mutual TLS when
//! configured) links to every peer and a listener for theirs.

use std::sync::Arc;

use runnel_core::listing::Listed;
use tokio::net::TcpListener;

use super::{serve, LeaderView, Links, ListRequest, NetworkFactory, PeerGroup, Served, Transport};
use crate::api::BoxFuture;
use crate::datadir::OpenError;
use crate::error::PeerError;
use crate::metrics::PeerMetrics;
use crate::raft::NodeId;

/// TCP links to every peer and a listener for theirs.
pub(crate) struct TcpTransport {
    pub links: Arc<Links>,
    /// This node's Raft address.
    pub listen: String,
    pub tls: Option<Arc<runnel_tls::ClusterTls>>,
}

impl Transport for TcpTransport {
    type Network = NetworkFactory;

    fn peer_metrics(&self) -> Vec<PeerMetrics> {
        let mut peers: Vec<PeerMetrics> = self.links.all().iter().map(|l| l.metrics()).collect();
        peers.sort_by_key(|p| p.node);
        peers
    }

    fn network(&self, group: u32) -> NetworkFactory {
        NetworkFactory {
            group,
            peers: Arc::clone(&self.links),
        }
    }

    fn serve(
        &self,
        served: Arc<Served>,
    ) -> BoxFuture<'_, Result<Vec<tokio::task::JoinHandle<()>>, OpenError>> {
        Box::pin(async move {
            let listener =
                TcpListener::bind(&self.listen)
                    .await
                    .map_err(|source| OpenError::Listen {
                        addr: self.listen.to_string(),
                        source,
                    })?;
            Ok(vec![tokio::spawn(serve(
                listener,
                served,
                self.tls.clone(),
            ))])
        })
    }

    fn read_index(
        &self,
        leader: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, PeerError>> {
        Box::pin(async move {
            let link = self.links.get(leader).ok_or(PeerError::NotAPeer(leader))?;
            link.read_index(group).await
        })
    }

    fn peer_ids(&self) -> Vec<NodeId> {
        self.links.all().iter().map(|link| link.peer).collect()
    }

    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> BoxFuture<'a, Result<Vec<Listed>, PeerError>> {
        Box::pin(async move {
            let link = self.links.get(leader).ok_or(PeerError::NotAPeer(leader))?;
            link.list(group, request).await
        })
    }

    fn leader_view(
        &self,
        node: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<LeaderView, PeerError>> {
        Box::pin(async move {
            let link = self.links.get(node).ok_or(PeerError::NotAPeer(node))?;
            link.leader_view(group).await
        })
    }

    fn handoff(&self, node: NodeId, group: u32, role: u8) -> BoxFuture<'_, Result<(), PeerError>> {
        Box::pin(async move {
            let link = self.links.get(node).ok_or(PeerError::NotAPeer(node))?;
            link.handoff(group, role).await
        })
    }

    fn probe_peers(&self, group: u32) -> BoxFuture<'_, PeerGroup> {
        Box::pin(async move {
            let mut all = PeerGroup::default();
            for link in self.links.all() {
                all = all.any(link.probe(group).await.unwrap_or_default());
            }
            all
        })
    }

    fn probe(&self, node: NodeId, group: u32) -> BoxFuture<'_, Option<PeerGroup>> {
        Box::pin(async move { self.links.get(node)?.probe(group).await })
    }

    fn learn(&self, node: NodeId, addr: &str) {
        self.links.link(node, addr);
    }

    fn forget_all_but(&self, members: &std::collections::BTreeSet<NodeId>) {
        self.links.retain(members);
    }
}
