//! Raft RPCs between nodes: one TCP connection per ordered peer pair
//! carries the requests of every group, multiplexed by request id.
//!
//! Frames (little endian), each preceded by its length as a `u32`:
//!
//! ```text
//! request:  [id: u64][kind: u8][group: u32][bincode body]
//! response: [id: u64][ok: u8][bincode body | error text]
//! ```
//!
//! The frames, the request kinds and their bodies' codec live in
//! `runnel_wire::raft::frame` (with the hello's codec), so that what a
//! peer sends is decoded, and fuzzed, without the engine.
//!
//! A node listens for Raft traffic on its HTTP port plus one (see
//! [`raft_addr`]). Requests are answered as they complete, so a slow
//! append of one group does not hold up the votes of another.
//!
//! With the cluster's mutual TLS ([`runnel_tls::ClusterTls`]) every
//! connection is TLS both ways: a node dialing peer N accepts only N's
//! certificate, and a node accepts only connections whose certificate
//! names a node. Every connection opens with a [`hello`]: nodes of
//! different clusters refuse each other.
//!
//! Module map: this file holds the frames and the [`Transport`] trait (TCP
//! here, an in-memory network in the simulator); [`link`] dials the peers
//! ([`PeerLink`], [`Links`]); [`listener`] answers them, with what
//! [`served`] says ([`Served`]: the same answers over any transport);
//! [`tcp`] is the production [`Transport`]; [`network`] is openraft's
//! side; [`queries`] what a node asks its peers while it serves.

use std::sync::Arc;
use std::time::Duration;

use openraft::network::RaftNetworkFactory;
use runnel_core::listing::Listed;
use runnel_wire::raft::frame::status_frame;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use super::{NodeId, TypeConfig};
use crate::api::BoxFuture;
use crate::datadir::OpenError;
use crate::metrics::PeerMetrics;

mod hello;
mod link;
mod listener;
mod network;
mod queries;
mod served;
mod tcp;

pub use crate::api::{http_addr, raft_addr, AddrError};
pub use crate::error::{HelloError, PeerError};
pub use link::{Links, PeerLink};
pub(crate) use listener::serve;
pub use network::{GroupNetwork, NetworkFactory};
pub(crate) use queries::{leader_listing, leader_read_index, PeerQueries};
pub use queries::{LeaderMembers, LeaderView, MAX_LISTED};
pub use runnel_wire::raft::frame::{decode_request, ListRequest, PeerRequest, RequestError};
pub use runnel_wire::raft::hello::Hello;
pub use served::{PeerGroup, PeerIdentity, ServeError, Served};
pub(crate) use tcp::TcpTransport;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes queued frames, flushing once the queue is empty (frames queued
/// together leave in one write), until the queue closes or a write fails.
async fn write_frames(
    writer: impl AsyncWriteExt + Unpin,
    mut outgoing: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut writer = BufWriter::new(writer);
    while let Some(frame) = outgoing.recv().await {
        let mut result = writer.write_all(&frame).await;
        while let (Ok(()), Ok(frame)) = (&result, outgoing.try_recv()) {
            result = writer.write_all(&frame).await;
        }
        if result.and(writer.flush().await).is_err() {
            return;
        }
    }
}

/// A response frame to request `id`, its length prefix included: the
/// answer's body, or the reason it failed.
fn response_frame(id: u64, answer: Result<Vec<u8>, ServeError>) -> Vec<u8> {
    match answer {
        Ok(body) => status_frame(id, 1, &body),
        Err(reason) => status_frame(id, 0, reason.to_string().as_bytes()),
    }
}

/// How a cluster member reaches its peers: [`TcpTransport`] in
/// production, an in-memory network in simulations.
pub trait Transport: Send + Sync + 'static {
    type Network: RaftNetworkFactory<TypeConfig>;

    /// RPC figures per peer (none where the transport keeps none).
    fn peer_metrics(&self) -> Vec<PeerMetrics> {
        Vec::new()
    }

    /// The clients of group `group`.
    fn network(&self, group: u32) -> Self::Network;

    /// Starts answering peers' RPCs for these groups; returns the tasks
    /// doing it.
    fn serve(
        &self,
        served: Arc<Served>,
    ) -> BoxFuture<'_, Result<Vec<tokio::task::JoinHandle<()>>, OpenError>>;

    /// How the peers' copies of `group` stand, together.
    fn probe_peers(&self, group: u32) -> BoxFuture<'_, PeerGroup>;

    /// How `node`'s copy of `group` stands, if it answers.
    fn probe(&self, node: NodeId, group: u32) -> BoxFuture<'_, Option<PeerGroup>>;

    /// `node`, at Raft address `addr`, is a member of some group (it may
    /// have joined after this node started): link to it.
    fn learn(&self, _node: NodeId, _addr: &str) {}

    /// Every group's membership is known and `members` are all the nodes
    /// in them: forget the others (removed nodes).
    fn forget_all_but(&self, _members: &std::collections::BTreeSet<NodeId>) {}

    /// The read index of `group` from `leader` (see [`PeerQueries`]).
    fn read_index(
        &self,
        leader: NodeId,
        group: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, PeerError>>;

    /// The peers this node links to.
    fn peer_ids(&self) -> Vec<NodeId>;

    /// Who leads `group`, as `node` knows it.
    fn leader_view(&self, node: NodeId, group: u32)
        -> BoxFuture<'_, Result<LeaderView, PeerError>>;

    /// A page of `group`'s streams from `leader`.
    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> BoxFuture<'a, Result<Vec<Listed>, PeerError>>;

    /// Asks `node` to play `role` in a leadership transfer of `group`.
    fn handoff(&self, node: NodeId, group: u32, role: u8) -> BoxFuture<'_, Result<(), PeerError>>;
}
