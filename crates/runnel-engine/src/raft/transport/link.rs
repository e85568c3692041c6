//! The dialing side of the transport: one [`PeerLink`] per peer, shared by
//! every group, opening (and reopening) its connection on demand, and the
//! [`Links`] to all peers by node id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runnel_core::listing::Listed;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use runnel_wire::raft::frame::{
    read_frame, request_frame, ListRequest, PeerRequest, KIND_HANDOFF, KIND_LEADER, KIND_PROBE,
    KIND_READ_INDEX,
};

use super::{hello, write_frames, LeaderView, PeerGroup, PeerIdentity, CONNECT_TIMEOUT};
use crate::error::PeerError;
use crate::metrics::histogram::Histogram;
use crate::metrics::PeerMetrics;
use crate::raft::NodeId;

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Vec<u8>, PeerError>>>>;

/// One open connection to a peer.
struct Connection {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Pending>,
    alive: Arc<AtomicBool>,
}

/// The link to one peer, shared by all groups; reconnects on demand.
pub struct PeerLink {
    pub(super) peer: NodeId,
    addr: String,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
    identity: Arc<dyn PeerIdentity>,
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
        identity: Arc<dyn PeerIdentity>,
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
    pub(super) async fn call(
        &self,
        kind: u8,
        group: u32,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, PeerError> {
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
    ) -> Result<Vec<u8>, PeerError> {
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
            Ok(Err(_)) => Err(PeerError::Closed {
                addr: self.addr.clone(),
            }),
            Err(_) => {
                pending.lock().expect("pending lock").remove(&id);
                Err(PeerError::NoAnswer {
                    addr: self.addr.clone(),
                    timeout,
                })
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
    pub async fn handoff(&self, group: u32, role: u8) -> Result<(), PeerError> {
        self.call(KIND_HANDOFF, group, &[role], Duration::from_secs(1))
            .await
            .map(drop)
    }

    /// A page of `group`'s streams from this peer, its leader.
    pub async fn list(&self, group: u32, request: &ListRequest) -> Result<Vec<Listed>, PeerError> {
        let request = PeerRequest::List(request.clone());
        let body = request.encode().map_err(|e| PeerError::Encode {
            what: "listing request",
            reason: e.to_string(),
        })?;
        let reply = self
            .call(request.kind(), group, &body, Duration::from_secs(5))
            .await?;
        bincode::deserialize(&reply).map_err(|e| undecodable("listing", e))
    }

    /// Who leads `group`, as this peer knows.
    pub async fn leader_view(&self, group: u32) -> Result<LeaderView, PeerError> {
        let reply = self
            .call(KIND_LEADER, group, &[], Duration::from_secs(1))
            .await?;
        bincode::deserialize(&reply).map_err(|e| undecodable("leader view", e))
    }

    /// The read index of `group` from this peer, its leader.
    pub async fn read_index(&self, group: u32) -> Result<Option<u64>, PeerError> {
        let reply = self
            .call(KIND_READ_INDEX, group, &[], Duration::from_secs(2))
            .await?;
        bincode::deserialize(&reply).map_err(|e| undecodable("read index", e))
    }

    async fn connect(&self) -> Result<Connection, PeerError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| PeerError::ConnectTimeout {
                addr: self.addr.clone(),
            })?
            .map_err(|e| PeerError::Connect {
                addr: self.addr.clone(),
                source: Arc::new(e),
            })?;
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
                    .map_err(|_| PeerError::TlsTimeout {
                        addr: self.addr.clone(),
                    })?
                    .map_err(|e| PeerError::Tls {
                        addr: self.addr.clone(),
                        source: Arc::new(e),
                    })?;
                let (reader, writer) = tokio::io::split(stream);
                (Box::new(reader), Box::new(writer))
            }
        };
        hello::greet(
            &mut reader,
            &mut writer,
            &*self.identity,
            self.peer,
            &self.addr,
        )
        .await
        .map_err(|source| PeerError::Hello {
            addr: self.addr.clone(),
            source,
        })?;
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
                            Err(PeerError::Remote(
                                String::from_utf8_lossy(&frame[9..]).into_owned(),
                            ))
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

/// The links to the peers, by node id: those `--peers` named, and those
/// that joined later, linked on first use from the Raft address a
/// group's membership gives them.
pub struct Links {
    map: std::sync::RwLock<HashMap<NodeId, Arc<PeerLink>>>,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
    identity: Arc<dyn PeerIdentity>,
}

impl Links {
    /// Links to `peers` (node id to Raft address).
    pub fn new(
        peers: impl IntoIterator<Item = (NodeId, String)>,
        tls: Option<Arc<runnel_tls::ClusterTls>>,
        identity: Arc<dyn PeerIdentity>,
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

/// A peer's answer that did not decode as `what`.
fn undecodable(what: &'static str, error: bincode::Error) -> PeerError {
    PeerError::Undecodable {
        what,
        reason: error.to_string(),
    }
}
