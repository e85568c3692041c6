//! The three nodes of the cluster power-loss test, on loopback: each a
//! `runnel serve --node-id N --peers ...` process with its own log, the
//! faulty one with its data directory on the fault file system; and what
//! the test asks them (health, each group's voters and leader).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::Value;

use crate::harness::error::{HarnessError, Result};
use crate::harness::server::{free_port_pair, Server, ServerSpec};

/// One group as the cluster reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupView {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub leader: Option<u64>,
}

/// The cluster's nodes (ids 1, 2, 3) and their processes.
pub struct Nodes {
    /// Each node's spec, by id.
    specs: BTreeMap<u64, ServerSpec>,
    /// The running processes (a node being power-cycled is absent).
    running: BTreeMap<u64, Server>,
    /// `HOST:PORT` of each node.
    pub addrs: BTreeMap<u64, String>,
}

impl Nodes {
    /// Starts three nodes: node `faulty`'s data directory is `faulty_dir`
    /// (on the fault file system), the others' under `workdir`. Waits until
    /// every node answers `/health` and agrees on every group's leader.
    pub async fn start(
        binary: &Path,
        workdir: &Path,
        faulty: u64,
        faulty_dir: PathBuf,
        flags: &[String],
        client: &Client,
    ) -> Result<Nodes> {
        let mut addrs = BTreeMap::new();
        for id in 1..=3u64 {
            let port = free_port_pair().map_err(|e| HarnessError::io("finding free ports", e))?;
            addrs.insert(id, format!("127.0.0.1:{port}"));
        }
        let peers = addrs
            .iter()
            .map(|(id, addr)| format!("{id}={addr}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut specs = BTreeMap::new();
        for (&id, addr) in &addrs {
            let data_dir = if id == faulty {
                faulty_dir.clone()
            } else {
                workdir.join(format!("n{id}"))
            };
            let mut node_flags = vec![
                "--node-id".to_string(),
                id.to_string(),
                "--peers".to_string(),
                peers.clone(),
            ];
            node_flags.extend(flags.iter().cloned());
            specs.insert(
                id,
                ServerSpec {
                    binary: binary.to_path_buf(),
                    data_dir,
                    listen: Some(addr.clone()),
                    flags: node_flags,
                    log: workdir.join(format!("n{id}.log")),
                },
            );
        }
        let mut nodes = Nodes {
            specs,
            running: BTreeMap::new(),
            addrs,
        };
        for id in 1..=3 {
            let server = Server::spawn(&nodes.specs[&id], &format!("node {id} first start"))?;
            nodes.running.insert(id, server);
        }
        for id in 1..=3 {
            nodes.wait_healthy(id, client, "first start").await?;
        }
        Ok(nodes)
    }

    pub fn base(&self, id: u64) -> String {
        format!("http://{}", self.addrs[&id])
    }

    pub fn bases(&self) -> Vec<String> {
        self.addrs.keys().map(|&id| self.base(id)).collect()
    }

    pub fn log(&self, id: u64) -> &Path {
        &self.specs[&id].log
    }

    async fn wait_healthy(&mut self, id: u64, client: &Client, label: &str) -> Result<()> {
        let log = self.specs[&id].log.clone();
        let server = self
            .running
            .get_mut(&id)
            .ok_or_else(|| HarnessError::Setup(format!("node {id} is not running")))?;
        server
            .wait_healthy(client, &log, &format!("node {id} {label}"))
            .await
    }

    /// SIGKILLs node `id`.
    pub async fn kill(&mut self, id: u64) {
        if let Some(server) = self.running.remove(&id) {
            server.kill().await;
        }
    }

    /// Starts node `id` again and waits for its `/health`.
    pub async fn restart(&mut self, id: u64, client: &Client, label: &str) -> Result<()> {
        self.kill(id).await;
        let server = Server::spawn(&self.specs[&id], &format!("node {id} {label}"))?;
        self.running.insert(id, server);
        self.wait_healthy(id, client, label).await
    }

    /// The first node that exited by itself, and how.
    pub fn exited(&mut self) -> Option<(u64, String)> {
        self.running
            .iter_mut()
            .find_map(|(id, s)| s.exited().map(|status| (*id, status)))
    }

    pub async fn stop(&mut self) {
        for (_, server) in std::mem::take(&mut self.running) {
            server.kill().await;
        }
    }

    /// `/_runnel/status` of node `id`, if it answers.
    pub async fn status(&self, id: u64, client: &Client) -> Option<Value> {
        let url = format!("{}/_runnel/status", self.base(id));
        let response = client
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        serde_json::from_slice(&response.bytes().await.ok()?).ok()
    }

    /// Each group's voters, learners and leader: from the node that leads
    /// it where one says so, else from a node that holds a copy.
    pub async fn layout(&self, client: &Client) -> BTreeMap<u32, GroupView> {
        let mut out: BTreeMap<u32, (bool, GroupView)> = BTreeMap::new();
        for &id in self.addrs.keys() {
            let Some(status) = self.status(id, client).await else {
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

    /// Waits until every node answers and all agree on one leader for
    /// every group; `Err` with the last views if they do not within
    /// `within`.
    pub async fn wait_for_leaders(&self, client: &Client, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            let mut views = Vec::new();
            for &id in self.addrs.keys() {
                let leaders: Option<Vec<Option<u64>>> = self.status(id, client).await.map(|s| {
                    s["groups"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|g| g["leader"].as_u64())
                        .collect()
                });
                views.push(leaders);
            }
            let first = views[0].clone();
            if first
                .as_ref()
                .is_some_and(|g| !g.is_empty() && g.iter().all(Option::is_some))
                && views.iter().all(|v| *v == first)
            {
                return Ok(());
            }
            last = format!("{views:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(HarnessError::NoLeaders { within, last })
    }
}
