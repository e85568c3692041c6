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
//! A node listens for Raft traffic on its HTTP port plus one (see
//! [`raft_addr`]). Requests are answered as they complete, so a slow
//! append of one group does not hold up the votes of another.
//!
//! With the cluster's mutual TLS ([`runnel_tls::ClusterTls`]) every
//! connection is TLS both ways: a node dialing peer N accepts only N's
//! certificate, and a node accepts only connections whose certificate
//! names a node. Every connection opens with a [`hello`]: nodes of
//! different clusters refuse each other. The answering side is
//! [`listener`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::network::RaftNetworkFactory;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::vote_guard::VoteGuard;
use super::{NodeId, Raft, TypeConfig};
use crate::cluster::identity::Identity;
use runnel_core::listing::Listed;

mod hello;
mod listener;
mod network;
mod queries;
use crate::metrics::histogram::Histogram;
use crate::metrics::PeerMetrics;
pub use hello::Hello;
pub(crate) use listener::serve;
pub use listener::{decode_request, PeerRequest};
pub use network::{GroupNetwork, NetworkFactory};
pub(crate) use queries::{leader_listing, leader_read_index, PeerQueries};
pub use queries::{LeaderMembers, LeaderView, ListRequest, MAX_LISTED};

const KIND_APPEND: u8 = 1;
const KIND_VOTE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
/// How the receiver's copy of a group stands ([`PeerGroup`]): a node that
/// lost its disk must rejoin its groups, not found them anew.
const KIND_PROBE: u8 = 4;
/// The leader's read index: the log index a follower must apply before
/// serving a read (the leader confirms it still leads first).
const KIND_READ_INDEX: u8 = 5;
/// A part in a leadership transfer (see [`super::transfer`]); the body is
/// the role.
const KIND_HANDOFF: u8 = 6;
/// The first request on a connection (see [`hello`]).
const KIND_HELLO: u8 = 7;
/// Who leads a group, as the receiver knows it ([`LeaderView`]): asked by
/// a node that holds no copy of the group, to route to its leader.
const KIND_LEADER: u8 = 8;
/// A page of the streams of a group the receiver leads ([`ListRequest`]):
/// asked by a node listing streams of a group it holds no copy of.
const KIND_LIST: u8 = 9;
/// Largest frame accepted (a batch of entries of the largest record size).
const MAX_FRAME: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The Raft address of a node whose HTTP listener is `http_addr`: the
/// same host, the port plus one.
pub fn raft_addr(http_addr: &str) -> Result<String, String> {
    let (host, port) = http_addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{http_addr:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{http_addr:?} has no valid port"))?;
    let raft_port = port
        .checked_add(1)
        .ok_or_else(|| format!("{http_addr:?}: port {port} leaves no room for the Raft port"))?;
    Ok(format!("{host}:{raft_port}"))
}

/// The HTTP address of a node whose Raft address is `raft_addr` (the
/// inverse of [`raft_addr`]).
pub fn http_addr(raft_addr: &str) -> Result<String, String> {
    let (host, port) = raft_addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{raft_addr:?} is not HOST:PORT"))?;
    let http_port = port
        .parse::<u16>()
        .ok()
        .and_then(|p| p.checked_sub(1))
        .ok_or_else(|| format!("{raft_addr:?} has no valid Raft port"))?;
    Ok(format!("{host}:{http_port}"))
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Vec<u8>, String>>>>;

/// What a node answers peers with: its groups, and whether it may vote in
/// each (see [`VoteGuard`]).
pub(crate) struct Served {
    pub rafts: Vec<crate::raft::starter::RaftSlot>,
    /// Each group's applied state, for listings asked of its leader.
    pub views: Vec<crate::view::GroupView>,
    pub votes: VoteGuard,
    /// The cluster this node belongs to, checked in every hello.
    pub identity: Arc<Identity>,
    /// Whether a node was removed from the cluster for good (refused in
    /// its hello).
    pub retired: Box<dyn Fn(NodeId) -> bool + Send + Sync>,
}

/// A peer's copy of a group, as a starting node asks about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerGroup {
    pub initialized: bool,
    /// It knows a leader: the group is running, not being formed.
    pub led: bool,
    /// The index of the last entry in its log (0 for none, or for only
    /// the membership the cluster was formed with).
    pub last_log: u64,
    /// How many peers answered (1 from the answering peer itself).
    pub answered: u32,
}

impl PeerGroup {
    pub(crate) async fn of(raft: &Raft) -> PeerGroup {
        let (led, last_log) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            (
                metrics.current_leader.is_some(),
                metrics.last_log_index.unwrap_or(0),
            )
        };
        PeerGroup {
            initialized: raft.is_initialized().await.unwrap_or(false),
            led,
            last_log,
            answered: 1,
        }
    }

    /// What any of the answers says (and the longest log).
    pub(crate) fn any(self, other: PeerGroup) -> PeerGroup {
        PeerGroup {
            initialized: self.initialized || other.initialized,
            led: self.led || other.led,
            last_log: self.last_log.max(other.last_log),
            answered: self.answered + other.answered,
        }
    }
}

/// One open connection to a peer.
struct Connection {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Pending>,
    alive: Arc<AtomicBool>,
}

/// The link to one peer, shared by all groups; reconnects on demand.
pub struct PeerLink {
    peer: NodeId,
    addr: String,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
    identity: Arc<Identity>,
    next_id: AtomicU64,
    /// Whether the last connection attempt succeeded (logged on change).
    reachable: AtomicBool,
    connection: tokio::sync::Mutex<Option<Connection>>,
    /// Round trips of calls, for `/metrics`.
    latency: Histogram,
    failures: AtomicU64,
}

impl PeerLink {
    pub fn new(
        peer: NodeId,
        addr: String,
        tls: Option<Arc<runnel_tls::ClusterTls>>,
        identity: Arc<Identity>,
    ) -> PeerLink {
        PeerLink {
            peer,
            addr,
            tls,
            identity,
            next_id: AtomicU64::new(1),
            reachable: AtomicBool::new(true),
            connection: tokio::sync::Mutex::new(None),
            latency: Histogram::default(),
            failures: AtomicU64::new(0),
        }
    }

    /// Calls made to this peer so far, for `/metrics`.
    pub fn metrics(&self) -> PeerMetrics {
        PeerMetrics {
            node: self.peer,
            failures: self.failures.load(Ordering::Relaxed),
            latency: self.latency.snapshot(),
            reachable: self.reachable.load(Ordering::Relaxed),
        }
    }

    /// One RPC, counted in this peer's figures.
    async fn call(
        &self,
        kind: u8,
        group: u32,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        let started = std::time::Instant::now();
        let answer = self.exchange(kind, group, body, timeout).await;
        self.latency.observe(started.elapsed());
        if answer.is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    async fn exchange(
        &self,
        kind: u8,
        group: u32,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = request_frame(id, kind, group, body);
        let (tx, rx) = oneshot::channel();
        let pending = {
            let mut slot = self.connection.lock().await;
            if !slot
                .as_ref()
                .is_some_and(|c| c.alive.load(Ordering::Acquire))
            {
                let connected = self.connect().await;
                let was = self.reachable.swap(connected.is_ok(), Ordering::Relaxed);
                match &connected {
                    Err(reason) if was => {
                        tracing::warn!(peer = %self.addr, %reason, "raft peer unreachable")
                    }
                    Ok(_) if !was => tracing::info!(peer = %self.addr, "raft peer reachable again"),
                    _ => {}
                }
                *slot = Some(connected?);
            }
            let connection = slot.as_ref().expect("connected above");
            connection
                .pending
                .lock()
                .expect("pending lock")
                .insert(id, tx);
            if connection.frames.send(frame).is_err() {
                connection.alive.store(false, Ordering::Release);
            }
            Arc::clone(&connection.pending)
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(format!("connection to {} closed", self.addr)),
            Err(_) => {
                pending.lock().expect("pending lock").remove(&id);
                Err(format!("no answer from {} within {timeout:?}", self.addr))
            }
        }
    }

    /// How this peer's copy of `group` stands (`None`: no answer).
    pub async fn probe(&self, group: u32) -> Option<PeerGroup> {
        let reply = self
            .call(KIND_PROBE, group, &[], Duration::from_secs(1))
            .await
            .inspect_err(|reason| tracing::debug!(peer = %self.addr, %reason, "probe failed"))
            .ok()?;
        bincode::deserialize(&reply)
            .inspect_err(
                |e| tracing::warn!(peer = %self.addr, error = %e, "undecodable probe answer"),
            )
            .ok()
    }

    /// Asks this peer to play `role` in a leadership transfer of `group`.
    pub async fn handoff(&self, group: u32, role: u8) -> Result<(), String> {
        self.call(KIND_HANDOFF, group, &[role], Duration::from_secs(1))
            .await
            .map(drop)
    }

    /// A page of `group`'s streams from this peer, its leader.
    pub async fn list(&self, group: u32, request: &ListRequest) -> Result<Vec<Listed>, String> {
        let body = bincode::serialize(request).map_err(|e| e.to_string())?;
        let reply = self
            .call(KIND_LIST, group, &body, Duration::from_secs(5))
            .await?;
        bincode::deserialize(&reply).map_err(|e| format!("undecodable listing: {e}"))
    }

    /// Who leads `group`, as this peer knows.
    pub async fn leader_view(&self, group: u32) -> Result<LeaderView, String> {
        let reply = self
            .call(KIND_LEADER, group, &[], Duration::from_secs(1))
            .await?;
        bincode::deserialize(&reply).map_err(|e| format!("undecodable leader view: {e}"))
    }

    /// The read index of `group` from this peer, its leader.
    pub async fn read_index(&self, group: u32) -> Result<Option<u64>, String> {
        let reply = self
            .call(KIND_READ_INDEX, group, &[], Duration::from_secs(2))
            .await?;
        bincode::deserialize(&reply).map_err(|e| format!("undecodable read index: {e}"))
    }

    async fn connect(&self) -> Result<Connection, String> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| format!("connecting to {} timed out", self.addr))?
            .map_err(|e| format!("connecting to {}: {e}", self.addr))?;
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer): (
            Box<dyn AsyncRead + Send + Unpin>,
            Box<dyn AsyncWrite + Send + Unpin>,
        ) = match &self.tls {
            None => {
                let (reader, writer) = stream.into_split();
                (Box::new(reader), Box::new(writer))
            }
            Some(tls) => {
                let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(self.peer, stream))
                    .await
                    .map_err(|_| format!("TLS with {} timed out", self.addr))?
                    .map_err(|e| format!("TLS with {}: {e}", self.addr))?;
                let (reader, writer) = tokio::io::split(stream);
                (Box::new(reader), Box::new(writer))
            }
        };
        hello::greet(
            &mut reader,
            &mut writer,
            &self.identity,
            self.peer,
            &self.addr,
        )
        .await
        .map_err(|reason| format!("{}: {reason}", self.addr))?;
        let (frames, outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
        let pending: Arc<Pending> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));

        let writer_alive = Arc::clone(&alive);
        tokio::spawn(async move {
            write_frames(writer, outgoing).await;
            writer_alive.store(false, Ordering::Release);
        });

        let (reader_pending, reader_alive, addr) =
            (Arc::clone(&pending), Arc::clone(&alive), self.addr.clone());
        tokio::spawn(async move {
            loop {
                match read_frame(&mut reader).await {
                    Ok(frame) if frame.len() >= 9 => {
                        let id = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
                        let answer = if frame[8] == 1 {
                            Ok(frame[9..].to_vec())
                        } else {
                            Err(String::from_utf8_lossy(&frame[9..]).into_owned())
                        };
                        let waiter = reader_pending.lock().expect("pending lock").remove(&id);
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(answer);
                        }
                    }
                    Ok(_) => {
                        tracing::warn!(peer = %addr, "short raft response frame");
                        break;
                    }
                    Err(_) => break,
                }
            }
            reader_alive.store(false, Ordering::Release);
            // Dropping the waiters tells their callers the connection closed.
            reader_pending.lock().expect("pending lock").clear();
        });
        Ok(Connection {
            frames,
            pending,
            alive,
        })
    }
}

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

/// A request frame, its length prefix included.
fn request_frame(id: u64, kind: u8, group: u32, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(17 + body.len());
    frame.extend_from_slice(&((13 + body.len()) as u32).to_le_bytes());
    frame.extend_from_slice(&id.to_le_bytes());
    frame.push(kind);
    frame.extend_from_slice(&group.to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

/// A response frame to request `id`, its length prefix included: the
/// answer's body, or the reason it failed.
fn response_frame(id: u64, answer: Result<Vec<u8>, String>) -> Vec<u8> {
    match answer {
        Ok(body) => status_frame(id, 1, &body),
        Err(reason) => status_frame(id, 0, reason.as_bytes()),
    }
}

/// A response frame with the status byte given (1 for ok).
fn status_frame(id: u64, status: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(13 + body.len());
    frame.extend_from_slice(&((9 + body.len()) as u32).to_le_bytes());
    frame.extend_from_slice(&id.to_le_bytes());
    frame.push(status);
    frame.extend_from_slice(body);
    frame
}

async fn read_frame(reader: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Vec<u8>> {
    let len = reader.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "raft frame of {len} bytes exceeds the limit"
        )));
    }
    let mut frame = vec![0u8; len];
    reader.read_exact(&mut frame).await?;
    Ok(frame)
}

/// How a cluster member reaches its peers: [`TcpTransport`] in
/// production, an in-memory network in simulations.
pub(crate) trait Transport: Send + Sync + 'static {
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
    ) -> crate::BoxFuture<'_, Result<Vec<tokio::task::JoinHandle<()>>, crate::node::OpenError>>;

    /// How the peers' copies of `group` stand, together.
    fn probe_peers(&self, group: u32) -> crate::BoxFuture<'_, PeerGroup>;

    /// How `node`'s copy of `group` stands, if it answers.
    fn probe(&self, node: NodeId, group: u32) -> crate::BoxFuture<'_, Option<PeerGroup>>;

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
    ) -> crate::BoxFuture<'_, Result<Option<u64>, String>>;

    /// The peers this node links to.
    fn peer_ids(&self) -> Vec<NodeId>;

    /// Who leads `group`, as `node` knows it.
    fn leader_view(
        &self,
        node: NodeId,
        group: u32,
    ) -> crate::BoxFuture<'_, Result<LeaderView, String>>;

    /// A page of `group`'s streams from `leader`.
    fn list<'a>(
        &'a self,
        leader: NodeId,
        group: u32,
        request: &'a ListRequest,
    ) -> crate::BoxFuture<'a, Result<Vec<Listed>, String>>;

    /// Asks `node` to play `role` in a leadership transfer of `group`.
    fn handoff(
        &self,
        node: NodeId,
        group: u32,
        role: u8,
    ) -> crate::BoxFuture<'_, Result<(), String>>;
}

/// The links to the peers, by node id: those `--peers` named, and those
/// that joined later, linked on first use from the Raft address a
/// group's membership gives them.
pub struct Links {
    map: std::sync::RwLock<HashMap<NodeId, Arc<PeerLink>>>,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
    identity: Arc<Identity>,
}

impl Links {
    /// Links to `peers` (node id to Raft address).
    pub fn new(
        peers: impl IntoIterator<Item = (NodeId, String)>,
        tls: Option<Arc<runnel_tls::ClusterTls>>,
        identity: Arc<Identity>,
    ) -> Links {
        let map = peers
            .into_iter()
            .map(|(id, addr)| {
                let link = PeerLink::new(id, addr, tls.clone(), Arc::clone(&identity));
                (id, Arc::new(link))
            })
            .collect();
        Links {
            map: std::sync::RwLock::new(map),
            tls,
            identity,
        }
    }

    pub fn get(&self, node: NodeId) -> Option<Arc<PeerLink>> {
        self.map.read().expect("links lock").get(&node).cloned()
    }

    /// The link to `node` at `addr`: a new one for a node not linked yet,
    /// or linked at another address (a replaced machine).
    pub fn link(&self, node: NodeId, addr: &str) -> Arc<PeerLink> {
        if let Some(link) = self.get(node).filter(|l| l.addr == addr) {
            return link;
        }
        let link = Arc::new(PeerLink::new(
            node,
            addr.to_string(),
            self.tls.clone(),
            Arc::clone(&self.identity),
        ));
        tracing::info!(node, addr, "linking to a peer from a group's membership");
        self.map
            .write()
            .expect("links lock")
            .insert(node, Arc::clone(&link));
        link
    }

    /// Drops the links to nodes not in `members` (nodes removed from
    /// every group): no more probes or metrics for them.
    pub fn retain(&self, members: &std::collections::BTreeSet<NodeId>) {
        self.map.write().expect("links lock").retain(|node, link| {
            let keep = members.contains(node);
            if !keep {
                tracing::info!(node, addr = %link.addr, "unlinking a node no group has as a member");
            }
            keep
        });
    }

    pub fn all(&self) -> Vec<Arc<PeerLink>> {
        self.map
            .read()
            .expect("links lock")
            .values()
            .cloned()
            .collect()
    }
}

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
    ) -> crate::BoxFuture<'_, Result<Vec<tokio::task::JoinHandle<()>>, crate::node::OpenError>>
    {
        Box::pin(async move {
            let listener = TcpListener::bind(&self.listen).await.map_err(|source| {
                crate::node::OpenError::Listen {
                    addr: self.listen.to_string(),
                    source,
                }
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
    ) -> crate::BoxFuture<'_, Result<Option<u64>, String>> {
        Box::pin(async move {
            let link = self
                .links
                .get(leader)
                .ok_or_else(|| format!("node {leader} is not among the peers"))?;
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
    ) -> crate::BoxFuture<'a, Result<Vec<Listed>, String>> {
        Box::pin(async move {
            let link = self
                .links
                .get(leader)
                .ok_or_else(|| format!("node {leader} is not among the peers"))?;
            link.list(group, request).await
        })
    }

    fn leader_view(
        &self,
        node: NodeId,
        group: u32,
    ) -> crate::BoxFuture<'_, Result<LeaderView, String>> {
        Box::pin(async move {
            let link = self
                .links
                .get(node)
                .ok_or_else(|| format!("node {node} is not among the peers"))?;
            link.leader_view(group).await
        })
    }

    fn handoff(
        &self,
        node: NodeId,
        group: u32,
        role: u8,
    ) -> crate::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let link = self
                .links
                .get(node)
                .ok_or_else(|| format!("node {node} is not among the peers"))?;
            link.handoff(group, role).await
        })
    }

    fn probe_peers(&self, group: u32) -> crate::BoxFuture<'_, PeerGroup> {
        Box::pin(async move {
            let mut all = PeerGroup::default();
            for link in self.links.all() {
                all = all.any(link.probe(group).await.unwrap_or_default());
            }
            all
        })
    }

    fn probe(&self, node: NodeId, group: u32) -> crate::BoxFuture<'_, Option<PeerGroup>> {
        Box::pin(async move { self.links.get(node)?.probe(group).await })
    }

    fn learn(&self, node: NodeId, addr: &str) {
        self.links.link(node, addr);
    }

    fn forget_all_but(&self, members: &std::collections::BTreeSet<NodeId>) {
        self.links.retain(members);
    }
}
