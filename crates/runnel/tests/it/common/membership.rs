//! `runnel ctl node` and `runnel serve --join` run as processes, for the
//! membership tests.

use std::collections::BTreeMap;
use std::time::Duration;

use super::cluster::Cluster;

/// Each group's voters, from the statuses of `nodes`: as the group's
/// leader reports them (a replica removed from a group may not have
/// learned it yet), else as any node holding it does.
pub async fn placement(cluster: &Cluster, nodes: &[usize]) -> Vec<Vec<u64>> {
    let mut groups: Vec<(bool, Vec<u64>)> = Vec::new();
    for &node in nodes {
        let status = cluster.status(node).await.expect("status answers");
        let reported = status["groups"].as_array().unwrap();
        groups.resize(reported.len(), (false, Vec::new()));
        for (g, group) in reported.iter().enumerate() {
            let voters: Vec<u64> = group["voters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let leads = group["leader"] == status["node_id"] && group["state"] != "elsewhere";
            if leads || (!groups[g].0 && !voters.is_empty()) {
                groups[g] = (leads, voters);
            }
        }
    }
    groups.into_iter().map(|(_, voters)| voters).collect()
}

/// Asserts the placement the running `nodes` (indexes) report: group 0
/// voted on by five of `members` (ids) at most and learned by the rest of
/// them, every other group on `replicas` of them,
/// data replicas per node differing by at most one, and leaderships
/// balanced (see [`assert_leaders_balanced`]).
pub async fn assert_placed(cluster: &Cluster, nodes: &[usize], members: &[u64], replicas: usize) {
    let placed = placement(cluster, nodes).await;
    // Group 0: five voters at most, among the members; the rest learn it.
    let mut voters = placed[0].clone();
    voters.sort_unstable();
    assert_eq!(voters.len(), members.len().min(5), "group 0: {placed:?}");
    assert!(
        voters.iter().all(|v| members.contains(v)),
        "group 0: {placed:?}"
    );
    let learners: Vec<u64> = members
        .iter()
        .filter(|m| !voters.contains(m))
        .copied()
        .collect();
    assert_eq!(
        control_learners(cluster, nodes).await,
        learners,
        "group 0's learners, with voters {voters:?}"
    );
    let mut load: BTreeMap<u64, usize> = members.iter().map(|m| (*m, 0)).collect();
    for (g, voters) in placed.iter().enumerate().skip(1) {
        assert_eq!(voters.len(), replicas, "group {g}: {placed:?}");
        for v in voters {
            *load
                .get_mut(v)
                .unwrap_or_else(|| panic!("group {g} on {v}: {placed:?}")) += 1;
        }
    }
    let (low, high) = (load.values().min().unwrap(), load.values().max().unwrap());
    assert!(high - low <= 1, "replicas per node {load:?}: {placed:?}");
    eprintln!("placed: {placed:?}");
    assert_leaders_balanced(cluster, nodes, members, &placed).await;
}

/// Asserts that each data group's preferred leader (cluster state, as
/// node `nodes[0]` reports it) is one of its voters in `placed`, that no
/// member prefers to lead more than `ceil(data groups / members)`, and
/// that every data group comes to be led by its preferred node.
pub async fn assert_leaders_balanced(
    cluster: &Cluster,
    nodes: &[usize],
    members: &[u64],
    placed: &[Vec<u64>],
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // A forming cluster records them a moment after its groups have
    // leaders.
    let preferred = loop {
        let status = cluster.status(nodes[0]).await.expect("status answers");
        let preferred: Vec<Option<u64>> = status["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["preferred_leader"].as_u64())
            .collect();
        if preferred.iter().all(Option::is_some) {
            break preferred;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no preferred leaders recorded: {preferred:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cap = (placed.len() - 1).div_ceil(members.len());
    let mut leads: BTreeMap<u64, usize> = BTreeMap::new();
    for (g, voters) in placed.iter().enumerate().skip(1) {
        let node = preferred[g].expect("recorded");
        assert!(
            voters.contains(&node),
            "group {g} prefers node {node}, not a voter of {voters:?}"
        );
        *leads.entry(node).or_default() += 1;
    }
    assert!(
        leads.values().all(|l| *l <= cap),
        "preferred leaders per node {leads:?}, more than {cap}: {preferred:?}"
    );
    loop {
        let leaders = leaders(cluster, nodes).await;
        let settled = (1..placed.len()).all(|g| leaders[g] == preferred[g]);
        if settled {
            eprintln!("leaders: {leaders:?}, per node {leads:?}");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the data groups are led by {leaders:?}, not by their preferred nodes {preferred:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Group 0's learners, as its leader among `nodes` reports them.
pub async fn control_learners(cluster: &Cluster, nodes: &[usize]) -> Vec<u64> {
    for &node in nodes {
        let Some(status) = cluster.status(node).await else {
            continue;
        };
        let zero = &status["groups"][0];
        if zero["leader"] == status["node_id"] && zero["state"] == "Leader" {
            let mut learners: Vec<u64> = zero["learners"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            learners.sort_unstable();
            return learners;
        }
    }
    panic!("no node of {nodes:?} leads group 0");
}

/// Each group's leader, as the node that leads it reports (`None` where
/// none of `nodes` says it leads).
pub async fn leaders(cluster: &Cluster, nodes: &[usize]) -> Vec<Option<u64>> {
    let mut leaders = Vec::new();
    for &node in nodes {
        let Some(status) = cluster.status(node).await else {
            continue;
        };
        let reported = status["groups"].as_array().unwrap();
        leaders.resize(reported.len(), None);
        for (g, group) in reported.iter().enumerate() {
            if group["leader"] == status["node_id"] && group["state"] == "Leader" {
                leaders[g] = status["node_id"].as_u64();
            }
        }
    }
    leaders
}

/// Runs `runnel ctl node ARGS...`; answers (success, stdout, stderr).
pub async fn ctl_node(args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["ctl", "node"])
            .args(&args)
            .output()
            .expect("runnel ctl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Whether a line `runnel ctl node` printed reports a membership change
/// ("group G: voters ..."; not a leadership transfer before a move).
pub fn is_membership_change(line: &str) -> bool {
    line.starts_with("group ") && line.contains(": voters ")
}

/// Runs `runnel ctl node ARGS...` and kills it (SIGKILL) once it has
/// printed `changes` membership changes ("group G: voters ..." lines);
/// answers what it printed on stderr.
pub async fn ctl_node_killed_after(args: &[&str], changes: usize) -> String {
    use std::io::{BufRead, BufReader};
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["ctl", "node"])
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runnel ctl runs");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut printed = String::new();
        let mut seen = 0;
        for line in BufReader::new(stderr).lines() {
            let line = line.expect("ctl's stderr");
            printed.push_str(&line);
            printed.push('\n');
            if is_membership_change(&line) {
                seen += 1;
                if seen == changes {
                    let _ = child.kill();
                    break;
                }
            }
        }
        let _ = child.wait();
        printed
    })
    .await
    .unwrap()
}

/// Runs `runnel ctl node add --node-id NODE_ID --addr ADDR --target
/// TARGET`; answers (success, stdout, stderr).
pub async fn ctl_node_add(node_id: u64, addr: &str, target: &str) -> (bool, String, String) {
    let node_id = node_id.to_string();
    let args = [
        "add",
        "--node-id",
        &node_id,
        "--addr",
        addr,
        "--target",
        target,
    ];
    ctl_node(&args).await
}

/// Runs `runnel serve --node-id ID --join URL EXTRA...` with a fresh
/// port and `data_dir`, expecting it to exit (it is killed after 20 s);
/// answers (whether it exited successfully, stderr).
pub async fn serve_joining(
    node_id: u64,
    url: &str,
    data_dir: &std::path::Path,
    extra: &[&str],
) -> (bool, String) {
    use std::process::{Command, Stdio};
    let port = super::reserve_ports(2);
    let (url, data_dir) = (url.to_string(), data_dir.to_path_buf());
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["serve", "--node-id", &node_id.to_string(), "--join", &url])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--groups", "3"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runnel serve runs");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while child.try_wait().expect("try_wait").is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("the child's output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Node `dead` (index) of `cluster` dies with its disk: the writers stop
/// sending to it first (a request in flight to a machine that dies fails
/// at the client), then it is killed, its data directory under `dir`
/// wiped, and a new node (index returned) replaces it as `new_id`
/// through `runnel ctl node replace` at node `via`; answers the
/// command's stdout too.
pub async fn replace_dead_node(
    cluster: &mut super::cluster::Cluster,
    writers: &super::writers::Writers,
    dir: &std::path::Path,
    dead: usize,
    new_id: u64,
    via: usize,
) -> (usize, String) {
    writers.drop_target(&cluster.base(dead));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(dead);
    std::fs::remove_dir_all(dir.join(format!("n{}", dead + 1))).unwrap();
    let replacement = cluster.start_joiner().await;
    let (dead_id, new_id) = ((dead + 1).to_string(), new_id.to_string());
    let addr = format!("127.0.0.1:{}", cluster.ports[replacement]);
    let target = cluster.base(via);
    let args = [
        "replace",
        "--node-id",
        &dead_id,
        "--new-node-id",
        &new_id,
        "--addr",
        &addr,
        "--target",
        &target,
    ];
    let (ok, stdout, stderr) = ctl_node(&args).await;
    assert!(ok, "node replace failed: {stderr}");
    eprint!("{stderr}{stdout}");
    writers.add_target(cluster.base(replacement));
    (replacement, stdout)
}
