//! Starts a cluster of real `runnel` processes on loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Cluster {
    dir: PathBuf,
    pub ports: Vec<u16>,
    peers: String,
    /// A node's own `--peers` where it differs (a node that joined).
    own_peers: Vec<Option<String>>,
    /// The member URL a node started with `--join` joins through.
    join: Vec<Option<String>>,
    extra: Vec<String>,
    children: Vec<Option<Child>>,
    /// Extra environment of each node's next start.
    env: Vec<Vec<(String, String)>>,
    /// Sent as a bearer token with status requests (clusters with access
    /// control).
    admin_token: Option<String>,
}

/// Where node `i` of the cluster with data in `dir` logs:
/// `$CLUSTER_TEST_LOG_DIR/<dir's name>-n{i+1}.log` when set (with
/// `CLUSTER_TEST_LOG` as the filter, to debug a run), else the test's
/// stderr.
fn node_log(dir: &Path, i: usize) -> Stdio {
    let cluster = dir.file_name().unwrap_or_default().to_string_lossy();
    match std::env::var_os("CLUSTER_TEST_LOG_DIR") {
        Some(dir) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Path::new(&dir).join(format!("{cluster}-n{}.log", i + 1)))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::inherit()),
        None => Stdio::inherit(),
    }
}

fn owned(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Cluster {
    /// Starts `nodes` nodes (ids 1..=nodes) with data under `dir` and
    /// waits until every node sees a leader for every group.
    pub async fn start(dir: &Path, nodes: usize, extra: &[&str]) -> Cluster {
        Cluster::start_as(dir, nodes, extra, None).await
    }

    /// [`Cluster::start`] for a cluster with access control: status
    /// requests carry `admin_token`.
    pub async fn start_as(
        dir: &Path,
        nodes: usize,
        extra: &[&str],
        admin_token: Option<&str>,
    ) -> Cluster {
        Cluster::start_placed(dir, nodes, extra, admin_token, &[], &[]).await
    }

    /// [`Cluster::start`] with every node started with `env`.
    pub async fn start_with_env(
        dir: &Path,
        nodes: usize,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let env = owned(env);
        Cluster::start_placed(dir, nodes, extra, None, &[], &env).await
    }

    /// [`Cluster::start_with_env`] with node `i` on HTTP port `ports[i]`
    /// (Raft on the next): a cluster whose data directories name their
    /// peers' addresses (a golden fixture) starts where they were.
    pub async fn start_on_ports(
        dir: &Path,
        ports: &[u16],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let env = owned(env);
        match Cluster::start_at(dir, ports.to_vec(), extra, None, &[], &env).await {
            Ok(cluster) => cluster,
            Err(exited) => panic!("{exited}"),
        }
    }

    /// [`Cluster::start`] with node `i` in zone `zones[i]` (named in
    /// every node's `--peers`).
    pub async fn start_in_zones(dir: &Path, zones: &[&str], extra: &[&str]) -> Cluster {
        Cluster::start_placed(dir, zones.len(), extra, None, zones, &[]).await
    }

    async fn start_placed(
        dir: &Path,
        nodes: usize,
        extra: &[&str],
        admin_token: Option<&str>,
        zones: &[&str],
        env: &[(String, String)],
    ) -> Cluster {
        // A process outside this test binary (another CI lane's server)
        // can bind a port between its reservation here and the node's
        // bind; the node then exits at once, and the cluster is started
        // again, from empty data directories, on other ports.
        for _ in 0..3 {
            // Each node's HTTP port and, next to it, its Raft port.
            let ports: Vec<u16> = (0..nodes).map(|_| super::reserve_ports(2)).collect();
            match Cluster::start_at(dir, ports, extra, admin_token, zones, env).await {
                Ok(cluster) => return cluster,
                Err(exited) => {
                    eprintln!("{exited}; starting the cluster again on other ports");
                    for i in 0..nodes {
                        let _ = std::fs::remove_dir_all(dir.join(format!("n{}", i + 1)));
                    }
                }
            }
        }
        panic!("a node exited before the cluster formed, on three sets of ports in a row");
    }

    /// Starts the nodes on `ports` and waits until they agree on leaders;
    /// the error names a node that exited first.
    async fn start_at(
        dir: &Path,
        ports: Vec<u16>,
        extra: &[&str],
        admin_token: Option<&str>,
        zones: &[&str],
        env: &[(String, String)],
    ) -> Result<Cluster, String> {
        let nodes = ports.len();
        let peers = ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let zone = zones.get(i).map_or(String::new(), |z| format!("@{z}"));
                format!("{}=127.0.0.1:{p}{zone}", i + 1)
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            ports,
            peers,
            own_peers: vec![None; nodes],
            join: vec![None; nodes],
            extra: extra.iter().map(|s| s.to_string()).collect(),
            children: (0..nodes).map(|_| None).collect(),
            env: vec![env.to_vec(); nodes],
            admin_token: admin_token.map(str::to_string),
        };
        for i in 0..nodes {
            cluster.spawn(i);
        }
        cluster.wait_for_formation(Duration::from_secs(30)).await?;
        // A node that came up after its peers elected a leader holds its
        // vote until it has caught up; tests that kill a leader at once
        // need every node a voter first.
        cluster.wait_until_every_node_votes().await;
        Ok(cluster)
    }

    /// [`Cluster::wait_for_leaders`] for a cluster just started: a node
    /// that exits meanwhile ends the wait at once, with its exit status
    /// and ports (a taken port is the usual cause), rather than after
    /// the timeout as a node that never answers.
    async fn wait_for_formation(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            for (i, child) in self.children.iter_mut().enumerate() {
                if let Some(Some(status)) = child.as_mut().map(|c| c.try_wait().ok().flatten()) {
                    let port = self.ports[i];
                    return Err(format!(
                        "node {} (HTTP port {port}, Raft port {}) exited at start: {status}",
                        i + 1,
                        port + 1
                    ));
                }
            }
            let views = self.leader_views().await;
            if self.agreed_leaders(&views).is_some() {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "no agreed leaders: {views:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running node votes in every group (a node that
    /// joined a running group empty gets its vote once it has caught up).
    pub async fn wait_until_every_node_votes(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut all = true;
            for n in self.running() {
                let status = self.status(n).await;
                let groups = status.as_ref().and_then(|s| s["groups"].as_array());
                // A group held elsewhere has no vote here to wait for.
                all &= groups.is_some_and(|groups| {
                    groups
                        .iter()
                        .all(|g| g["votes"] == true || g["state"] == "elsewhere")
                });
            }
            if all {
                return;
            }
            assert!(Instant::now() < deadline, "a node never got its vote");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `runnel serve` as node `i` starts, with `extra` flags after its
    /// own: run to its exit, for starts that must be refused.
    pub fn serve_until_exit(&self, i: usize, extra: &[&str]) -> std::process::Output {
        self.command(i)
            .args(extra)
            .output()
            .expect("runnel binary runs")
    }

    fn spawn(&mut self, i: usize) {
        let child = self
            .command(i)
            .stdout(Stdio::null())
            .stderr(node_log(&self.dir, i))
            .spawn()
            .expect("runnel binary starts");
        self.children[i] = Some(child);
    }

    /// The command that starts node `i`.
    fn command(&self, i: usize) -> Command {
        let membership = match &self.join[i] {
            Some(url) => vec![
                "--join".to_string(),
                url.clone(),
                "--listen".to_string(),
                format!("127.0.0.1:{}", self.ports[i]),
            ],
            None => vec![
                "--peers".to_string(),
                self.own_peers[i].clone().unwrap_or(self.peers.clone()),
            ],
        };
        let mut command = Command::new(super::server_binary(&self.env[i]));
        command
            .arg("serve")
            .arg("--node-id")
            .arg((i + 1).to_string())
            .args(membership)
            .arg("--data-dir")
            .arg(self.dir.join(format!("n{}", i + 1)))
            .args(&self.extra)
            .env(
                "RUNNEL_LOG",
                std::env::var("CLUSTER_TEST_LOG").unwrap_or("error,openraft=off".into()),
            )
            .envs(self.env[i].iter().map(|(k, v)| (k, v)));
        command
    }

    /// Starts one more node (its index is returned) whose `--peers` name
    /// the others and itself; the others' do not name it. It holds no
    /// group until `runnel ctl node add` makes it a member.
    pub async fn start_joiner(&mut self) -> usize {
        let i = self.ports.len();
        let port = super::reserve_ports(2);
        self.ports.push(port);
        self.own_peers
            .push(Some(format!("{},{}=127.0.0.1:{port}", self.peers, i + 1)));
        self.join.push(None);
        self.children.push(None);
        self.env.push(Vec::new());
        self.restart(i).await;
        i
    }

    /// Starts one more node (its index is returned) with `--join` and
    /// node `via`'s URL: it makes itself a member of every group.
    pub async fn start_joining(&mut self, via: usize) -> usize {
        self.start_joining_with_env(via, &[]).await
    }

    /// [`Cluster::start_joining`], the new node started with `env` (its
    /// join token, say).
    pub async fn start_joining_with_env(&mut self, via: usize, env: &[(&str, &str)]) -> usize {
        let i = self.ports.len();
        self.ports.push(super::reserve_ports(2));
        self.own_peers.push(None);
        self.join.push(Some(self.base(via)));
        self.children.push(None);
        self.env.push(Vec::new());
        self.set_env(i, env);
        self.restart(i).await;
        i
    }

    /// Sets environment variables of node `i`'s next start.
    pub fn set_env(&mut self, i: usize, env: &[(&str, &str)]) {
        self.env[i] = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Whether node `i` ended by itself (it is then no longer running).
    pub fn exited(&mut self, i: usize) -> bool {
        let gone = self.children[i]
            .as_mut()
            .is_some_and(|c| c.try_wait().expect("try_wait").is_some());
        if gone {
            self.children[i] = None;
        }
        gone
    }

    pub fn base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    pub fn stream_url(&self, i: usize, name: &str) -> String {
        format!("{}/v1/stream/{name}", self.base(i))
    }

    /// `/_runnel/status` of node `i`, if it answers.
    pub async fn status(&self, i: usize) -> Option<serde_json::Value> {
        let mut request = reqwest::Client::new()
            .get(format!("{}/_runnel/status", self.base(i)))
            .timeout(Duration::from_secs(2));
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.ok()?;
        serde_json::from_slice(&r.bytes().await.ok()?).ok()
    }

    /// `POST /_runnel/cluster/groups/{group}/members?{query}` to node
    /// `via`: the status and the JSON or text answer.
    pub async fn change_members(&self, via: usize, group: usize, query: &str) -> (u16, String) {
        let url = format!(
            "{}/_runnel/cluster/groups/{group}/members?{query}",
            self.base(via)
        );
        let mut request = reqwest::Client::new().post(url);
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The leader (node index, 0-based) of each group as node `i` sees it.
    pub async fn leaders(&self, i: usize) -> Option<Vec<Option<usize>>> {
        let status = self.status(i).await?;
        Some(
            status["groups"]
                .as_array()?
                .iter()
                .map(|g| g["leader"].as_u64().map(|id| id as usize - 1))
                .collect(),
        )
    }

    /// Waits until every running node sees the same leader, among the
    /// running nodes, for every group.
    pub async fn wait_for_leaders(&self, timeout: Duration) -> Vec<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let views = self.leader_views().await;
            if let Some(leaders) = self.agreed_leaders(&views) {
                return leaders;
            }
            assert!(Instant::now() < deadline, "no agreed leaders: {views:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Each running node's view of the groups' leaders (`None`: it did
    /// not answer).
    async fn leader_views(&self) -> Vec<Option<Vec<Option<usize>>>> {
        let mut views = Vec::new();
        for i in self.running() {
            views.push(self.leaders(i).await);
        }
        views
    }

    /// The leaders every view names, if they agree and every leader is
    /// running.
    fn agreed_leaders(&self, views: &[Option<Vec<Option<usize>>>]) -> Option<Vec<usize>> {
        let first = views.first()?.as_ref()?;
        let agreed = views.iter().all(|v| v.as_ref() == Some(first));
        let live = first
            .iter()
            .all(|l| l.is_some_and(|l| self.children[l].is_some()));
        (agreed && live).then(|| first.iter().map(|l| l.unwrap()).collect())
    }

    /// Waits until every running node that holds a group applied the same
    /// entries in it (equal applied indexes and state digests).
    pub async fn wait_for_convergence(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut views = Vec::new();
            for i in self.running() {
                let groups = self.status(i).await.map(|s| {
                    s["groups"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|g| {
                            (g["state"] != "elsewhere").then(|| {
                                (
                                    g["last_applied_index"].as_u64(),
                                    g["applied_digest"].as_str().unwrap().to_string(),
                                )
                            })
                        })
                        .collect::<Vec<_>>()
                });
                views.push(groups);
            }
            let answered = views.iter().all(Option::is_some);
            let groups = views.first().and_then(|v| v.as_ref()).map_or(0, Vec::len);
            let agreed = (0..groups).all(|g| {
                let copies: Vec<_> = views
                    .iter()
                    .flatten()
                    .filter_map(|v| v[g].as_ref())
                    .collect();
                !copies.is_empty() && copies.iter().all(|c| *c == copies[0])
            });
            if answered && agreed {
                return;
            }
            assert!(Instant::now() < deadline, "replicas differ: {views:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|i| self.children[*i].is_some())
            .collect()
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            child.kill().expect("kill");
            child.wait().expect("reap");
        }
    }

    /// Stops node `i` as an operator would (SIGTERM), waiting for it to
    /// exit.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            // SAFETY: signalling a child process this struct owns.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            child.wait().expect("reap");
        }
    }

    /// `runnel ctl upgrade finalize` through node `i`: success, and what
    /// it printed (stdout, or stderr on failure).
    pub fn upgrade_finalize(&self, i: usize) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["ctl", "upgrade", "finalize", "--target", &self.base(i)])
            .env("RUNNEL_LOG", "off")
            .output()
            .expect("runnel binary runs");
        let text = if out.status.success() {
            out.stdout
        } else {
            out.stderr
        };
        (
            out.status.success(),
            String::from_utf8_lossy(&text).into_owned(),
        )
    }

    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.status(i).await.is_none() {
            assert!(Instant::now() < deadline, "node {} did not restart", i + 1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
