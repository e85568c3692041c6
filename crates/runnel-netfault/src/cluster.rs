//! The cluster under test: one `runnel serve` per namespace, its output in
//! a log file of its own, each node's state (in reserve, up, crashed,
//! removed), and what the harness asks the nodes (health, who leads which
//! group, each group's voters).
//!
//! Nodes are 0-based indexes here (the namespace's), node ids one more.
//! The founders form the cluster with `--peers` naming them; a node in
//! reserve is started later with `--peers` naming the founders and
//! itself, and joins by `runnel ctl node add` ([`crate::membership`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::error::{NetfaultError, Result};
use crate::net::Network;

/// The HTTP port every node listens on, in its own namespace (Raft uses
/// the next one).
const HTTP_PORT: u16 = 7400;

/// Where a node is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Not started yet.
    Reserve,
    Up,
    /// Killed by the nemesis, to be restarted.
    Down,
    /// Removed from the cluster (and stopped).
    Removed,
}

struct Node {
    state: NodeState,
    /// A member of the cluster: a founder, or a newcomer once added (and
    /// until removed).
    joined: bool,
    child: Option<Child>,
    log: PathBuf,
    data_dir: PathBuf,
    namespace: String,
}

pub struct Cluster {
    nodes: Vec<Node>,
    binary: PathBuf,
    flags: Vec<String>,
    founders: usize,
    /// `IP:PORT` of each node.
    addrs: Vec<String>,
    /// The nodes clients send requests to: the members, once a newcomer
    /// is added and until a leaving node is removed.
    pub client_bases: Arc<RwLock<Vec<String>>>,
}

/// The cluster, shared by the nemesis, the operator and the run.
pub type Shared = Arc<tokio::sync::Mutex<Cluster>>;

impl Cluster {
    /// The cluster's nodes, none started: `founders` of them form it, the
    /// rest are in reserve.
    pub fn new(
        network: &Network,
        nodes: usize,
        founders: usize,
        binary: &Path,
        workdir: &Path,
        flags: &[String],
    ) -> Cluster {
        let addrs: Vec<String> = (0..nodes)
            .map(|i| format!("{}:{HTTP_PORT}", network.node_ip(i)))
            .collect();
        Cluster {
            nodes: (0..nodes)
                .map(|i| Node {
                    state: NodeState::Reserve,
                    joined: i < founders,
                    child: None,
                    log: workdir.join(format!("n{}.log", i + 1)),
                    data_dir: workdir.join(format!("n{}", i + 1)),
                    namespace: network.namespace(i),
                })
                .collect(),
            binary: binary.to_path_buf(),
            flags: flags.to_vec(),
            founders,
            client_bases: Arc::new(RwLock::new(
                addrs[..founders]
                    .iter()
                    .map(|a| format!("http://{a}"))
                    .collect(),
            )),
            addrs,
        }
    }

    pub fn addr(&self, node: usize) -> &str {
        &self.addrs[node]
    }

    pub fn base(&self, node: usize) -> String {
        format!("http://{}", self.addrs[node])
    }

    pub fn log(&self, node: usize) -> &Path {
        &self.nodes[node].log
    }

    pub fn state(&self, node: usize) -> NodeState {
        self.nodes[node].state
    }

    /// Nodes that are members now: founders and added newcomers, not
    /// removed ones (up or crashed).
    pub fn members(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].joined && self.nodes[i].state != NodeState::Removed)
            .collect()
    }

    /// Members that are running.
    pub fn up(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].joined && self.nodes[i].state == NodeState::Up)
            .collect()
    }

    /// Nodes that run, members or not (faults may strike a newcomer
    /// before it is added).
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == NodeState::Up)
            .collect()
    }

    /// `node` was added: it is a member, and clients use it.
    pub fn joined(&mut self, node: usize) {
        self.nodes[node].joined = true;
        let base = self.base(node);
        let mut bases = self.client_bases.write().unwrap();
        if !bases.contains(&base) {
            bases.push(base);
        }
    }

    /// `node` was removed: clients stop using it, and it is stopped.
    pub async fn removed(&mut self, node: usize) {
        let base = self.base(node);
        self.client_bases.write().unwrap().retain(|b| *b != base);
        self.kill(node, NodeState::Removed).await;
    }

    /// `--peers` for `node`: the founders, and itself if it is not one.
    fn peers(&self, node: usize) -> String {
        let mut ids: Vec<usize> = (0..self.founders).collect();
        if node >= self.founders {
            ids.push(node);
        }
        ids.iter()
            .map(|&i| format!("{}={}", i + 1, self.addrs[i]))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts `node`'s process (first start or restart); `Up`.
    pub fn spawn(&mut self, node: usize) -> Result<()> {
        let peers = self.peers(node);
        let n = &mut self.nodes[node];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .map_err(|e| NetfaultError::io(n.log.display().to_string(), e))?;
        let err = log
            .try_clone()
            .map_err(|e| NetfaultError::io(n.log.display().to_string(), e))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &n.namespace])
            .arg(&self.binary)
            .arg("serve")
            .args(["--node-id", &(node + 1).to_string(), "--peers", &peers])
            .args(["--listen", &self.addrs[node]])
            .arg("--data-dir")
            .arg(&n.data_dir)
            .args(&self.flags)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| NetfaultError::io(format!("starting node {}", node + 1), e))?;
        n.child = Some(child);
        n.state = NodeState::Up;
        Ok(())
    }

    /// SIGKILLs `node` (the `ip netns exec` process execs the server, so
    /// the child is the server) and marks it `state`.
    pub async fn kill(&mut self, node: usize, state: NodeState) {
        let n = &mut self.nodes[node];
        if let Some(mut child) = n.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
        n.state = state;
    }

    /// A node the harness left running that exited by itself: its id and
    /// how it exited.
    pub fn exited(&mut self) -> Option<String> {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.state != NodeState::Up {
                continue;
            }
            if let Some(Ok(Some(status))) = n.child.as_mut().map(Child::try_wait) {
                return Some(format!(
                    "node {} exited ({status}); see {}",
                    i + 1,
                    n.log.display()
                ));
            }
        }
        None
    }

    /// Whether `node`'s process has exited (for a start being waited on).
    fn start_failed(&mut self, node: usize) -> Option<String> {
        let child = self.nodes[node].child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    pub async fn stop(&mut self) {
        for node in 0..self.nodes.len() {
            if self.nodes[node].child.is_some() {
                let state = self.nodes[node].state;
                self.kill(node, state).await;
            }
        }
    }
}

/// Waits until `node` answers `/health` (the lock is not held meanwhile).
pub async fn wait_healthy(
    cluster: &Shared,
    node: usize,
    client: &Client,
    within: Duration,
) -> Result<()> {
    let deadline = Instant::now() + within;
    let (url, log) = {
        let c = cluster.lock().await;
        (
            format!("{}/health", c.base(node)),
            c.log(node).to_path_buf(),
        )
    };
    while Instant::now() < deadline {
        if let Some(status) = cluster.lock().await.start_failed(node) {
            return Err(NetfaultError::ExitedAtStart {
                node: node as u64 + 1,
                status,
                log,
            });
        }
        let healthy = client
            .get(&url)
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if healthy {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(NetfaultError::NoHealth {
        node: node as u64 + 1,
        url,
        within,
        log,
    })
}

/// `/_runnel/status` of the node at `base`, if it answers.
pub async fn status(client: &Client, base: &str) -> Option<Value> {
    let response = client
        .get(format!("{base}/_runnel/status"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&response.bytes().await.ok()?).ok()
}

/// Each group's leader as the node at `base` tells it (`None` where it
/// knows none), or `None` if it does not answer.
pub async fn leaders(client: &Client, base: &str) -> Option<Vec<Option<u64>>> {
    let status = status(client, base).await?;
    let groups = status.get("groups")?.as_array()?;
    Some(groups.iter().map(|g| g["leader"].as_u64()).collect())
}

/// The node id leading the most groups, as the node at `base` sees it.
pub async fn busiest_leader(client: &Client, base: &str) -> Option<u64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for id in leaders(client, base).await?.into_iter().flatten() {
        *counts.entry(id).or_default() += 1;
    }
    counts.into_iter().max_by_key(|&(_, c)| c).map(|(id, _)| id)
}

/// One group's voters and leader.
#[derive(Clone, Debug, Default)]
pub struct GroupView {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub leader: Option<u64>,
}

/// Each group's voters, learners and leader, from the node that leads it
/// where one answers, else from any that holds a copy.
pub async fn layout(client: &Client, bases: &[String]) -> BTreeMap<u32, GroupView> {
    let mut out: BTreeMap<u32, (bool, GroupView)> = BTreeMap::new();
    for base in bases {
        let Some(status) = status(client, base).await else {
            continue;
        };
        for g in status["groups"].as_array().into_iter().flatten() {
            let Some(group) = g["group"].as_u64() else {
                continue;
            };
            let ids = |key: &str| -> Vec<u64> {
                g[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .collect()
            };
            let view = GroupView {
                voters: ids("voters"),
                learners: ids("learners"),
                leader: g["leader"].as_u64(),
            };
            let leads = g["state"] == "Leader";
            let entry = out.entry(group as u32).or_default();
            let better = leads && !entry.0 || entry.1.voters.is_empty();
            if better && !view.voters.is_empty() {
                *entry = (leads, view);
            }
        }
    }
    out.into_iter().map(|(g, (_, v))| (g, v)).collect()
}

/// Waits until every node at `bases` answers and all agree on one leader
/// for every group.
pub async fn wait_for_leaders(client: &Client, bases: &[String], within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut views = Vec::new();
        for base in bases {
            views.push(leaders(client, base).await);
        }
        let first = views.first().cloned().flatten();
        if first
            .as_ref()
            .is_some_and(|g| !g.is_empty() && g.iter().all(Option::is_some))
            && views.iter().all(|v| *v == first)
        {
            return Ok(());
        }
        last = format!("{views:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(NetfaultError::NoLeaders { within, last })
}
