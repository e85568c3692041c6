//! The cluster under test: one `runnel serve` per namespace, its output in
//! a log file of its own, and what the harness asks the nodes (health,
//! who leads which group).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::Client;
use tokio::process::{Child, Command};

use crate::net::Network;

/// The HTTP port every node listens on, in its own namespace (Raft uses
/// the next one).
const HTTP_PORT: u16 = 7400;

pub struct Cluster {
    children: Vec<Child>,
    /// `http://IP:PORT` of each node.
    pub bases: Vec<String>,
    pub logs: Vec<PathBuf>,
}

impl Cluster {
    /// Starts every node and waits until each answers `/health` and every
    /// group has a leader.
    pub async fn start(
        network: &Network,
        nodes: usize,
        binary: &Path,
        workdir: &Path,
        flags: &[String],
        client: &Client,
    ) -> Result<Cluster, String> {
        let addr = |i: usize| format!("{}:{HTTP_PORT}", network.node_ip(i));
        let peers: Vec<String> = (0..nodes)
            .map(|i| format!("{}={}", i + 1, addr(i)))
            .collect();
        let mut cluster = Cluster {
            children: Vec::new(),
            bases: (0..nodes).map(|i| format!("http://{}", addr(i))).collect(),
            logs: Vec::new(),
        };
        for i in 0..nodes {
            let log_path = workdir.join(format!("n{}.log", i + 1));
            let log = std::fs::File::create(&log_path)
                .map_err(|e| format!("{}: {e}", log_path.display()))?;
            let err = log.try_clone().map_err(|e| e.to_string())?;
            let data_dir = workdir.join(format!("n{}", i + 1));
            let child = Command::new("ip")
                .args(["netns", "exec", &network.namespace(i)])
                .arg(binary)
                .arg("serve")
                .args([
                    "--node-id",
                    &(i + 1).to_string(),
                    "--peers",
                    &peers.join(","),
                ])
                .arg("--data-dir")
                .arg(&data_dir)
                .args(flags)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("starting node {}: {e}", i + 1))?;
            cluster.children.push(child);
            cluster.logs.push(log_path);
        }
        for i in 0..nodes {
            cluster.wait_healthy(i, client).await?;
        }
        cluster
            .wait_for_leaders(client, Duration::from_secs(30))
            .await?;
        Ok(cluster)
    }

    async fn wait_healthy(&mut self, node: usize, client: &Client) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("{}/health", self.bases[node]);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.children[node].try_wait() {
                return Err(format!(
                    "node {} exited at start ({status}); see {}",
                    node + 1,
                    self.logs[node].display()
                ));
            }
            if client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "node {} did not answer {url} within 30 s",
            node + 1
        ))
    }

    /// Each group's leader as `node`'s status tells it (`None` where it
    /// knows none), or `None` if the node does not answer.
    pub async fn leaders(&self, node: usize, client: &Client) -> Option<Vec<Option<u64>>> {
        let url = format!("{}/_runnel/status", self.bases[node]);
        let response = client
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        let status: serde_json::Value =
            serde_json::from_slice(&response.bytes().await.ok()?).ok()?;
        let groups = status.get("groups")?.as_array()?;
        Some(
            groups
                .iter()
                .map(|g| g.get("leader").and_then(|l| l.as_u64()))
                .collect(),
        )
    }

    /// The node (0-based) that leads the most groups, as node `asked` sees it.
    pub async fn busiest_leader(&self, asked: usize, client: &Client) -> Option<usize> {
        let leaders = self.leaders(asked, client).await?;
        let mut counts = vec![0usize; self.bases.len()];
        for id in leaders.into_iter().flatten() {
            if let Some(count) = counts.get_mut(id as usize - 1) {
                *count += 1;
            }
        }
        let (node, &most) = counts.iter().enumerate().max_by_key(|(_, &c)| c)?;
        (most > 0).then_some(node)
    }

    /// Waits until every node answers and agrees that every group has the
    /// same leader.
    pub async fn wait_for_leaders(&self, client: &Client, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            let mut views = Vec::new();
            for node in 0..self.bases.len() {
                views.push(self.leaders(node, client).await);
            }
            let first = views[0].clone();
            if first
                .as_ref()
                .is_some_and(|g| g.iter().all(Option::is_some))
                && views.iter().all(|v| *v == first)
            {
                return Ok(());
            }
            last = format!("{views:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "the nodes did not agree on a leader for every group within {within:?} (last: {last})"
        ))
    }

    /// Whether every node is still running; the first that exited if not.
    pub fn exited(&mut self) -> Option<String> {
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(format!(
                    "node {} exited ({status}); see {}",
                    i + 1,
                    self.logs[i].display()
                ));
            }
        }
        None
    }

    pub async fn stop(&mut self) {
        for child in &mut self.children {
            let _ = child.start_kill();
        }
        for child in &mut self.children {
            let _ = child.wait().await;
        }
    }
}
