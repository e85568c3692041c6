//! A group's replica moves from one node to another while the cluster
//! serves (`runnel ctl node move`): a fourth node that holds no group
//! serves every request by forwarding, receives group 1's replica from
//! node 1, and node 1, which the group no longer has, drops its copy
//! (`DATA_DIR/left-groups`), routes the group's requests to its leader,
//! stays ready, and keeps doing so after a SIGKILL and restart. Then the
//! group moves back to node 1 (which holds it again after that restart)
//! and on from node 3 to node 4, which dropped its copy a move before
//! and takes the group back while it runs.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::membership::ctl_node;
use runnel_engine::placement::stream_group;

const GROUPS: usize = 3;

/// A stream name that lands in `group`.
fn name_in(group: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| stream_group(n, GROUPS) == group)
        .unwrap()
}

/// Appends `body` through `url` until it is acknowledged (a leader change
/// may answer 503 for a moment), at most 15 s.
async fn append_until_acked(client: &reqwest::Client, url: &str, body: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = client
            .post(url)
            .header("content-type", "text/plain")
            .body(body.to_string())
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => return,
            Ok(r) if r.status() == 503 && Instant::now() < deadline => {}
            Ok(r) => panic!(
                "append through {url}: {} {}",
                r.status(),
                r.text().await.unwrap()
            ),
            Err(e) => assert!(Instant::now() < deadline, "append through {url}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `node`'s view of group `group` in its status.
async fn group_status(cluster: &Cluster, node: usize, group: usize) -> serde_json::Value {
    let status = cluster.status(node).await.expect("the node answers");
    status["groups"][group].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moves_to_a_new_node_and_the_old_one_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--groups", "3"]).await;
    cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let moved = name_in(1, "moved");
    let stayed = name_in(2, "stayed");
    for name in [&moved, &stayed] {
        common::create_text(&client, &cluster.stream_url(0, name), "a").await;
    }

    // Node 4 holds no group: it serves by forwarding.
    let newcomer = cluster.start_joiner().await;
    for name in [&moved, &stayed] {
        append_until_acked(&client, &cluster.stream_url(newcomer, name), "b").await;
    }
    let status = group_status(&cluster, newcomer, 1).await;
    assert_eq!(status["state"], "elsewhere", "{status}");

    // Group 0 stays on every node.
    let addr = format!("127.0.0.1:{}", cluster.ports[newcomer]);
    let target = cluster.base(1);
    let (ok, _, stderr) = ctl_node(&[
        "move",
        "--group",
        "0",
        "--node-id",
        "1",
        "--to",
        "4",
        "--addr",
        &addr,
        "--target",
        &target,
    ])
    .await;
    assert!(!ok && stderr.contains("followed by every node"), "{stderr}");

    let (ok, stdout, stderr) = ctl_node(&[
        "move",
        "--group",
        "1",
        "--node-id",
        "1",
        "--to",
        "4",
        "--addr",
        &addr,
        "--target",
        &target,
    ])
    .await;
    assert!(ok, "node move failed: {stderr}");
    assert!(stdout.contains("moved from node 1 to node 4"), "{stdout}");

    // Node 1 finds out it left, and drops its copy.
    wait_until_dropped(&cluster, &dir, 0).await;
    let left = std::fs::read_to_string(dir.path().join("n1").join("left-groups")).unwrap();
    assert!(left.starts_with("1 "), "{left:?}");
    let status = group_status(&cluster, 1, 1).await;
    assert_eq!(status["voters"], serde_json::json!([2, 3, 4]), "{status}");
    let status = group_status(&cluster, newcomer, 0).await;
    assert_eq!(status["state"], "elsewhere", "{status}");

    for node in [0, 1, 2, newcomer] {
        append_until_acked(&client, &cluster.stream_url(node, &moved), "c").await;
    }
    append_until_acked(&client, &cluster.stream_url(0, &stayed), "c").await;
    let expected_moved = "abcccc";
    for node in [0, 1, 2, newcomer] {
        let url = cluster.stream_url(node, &moved);
        assert_eq!(common::get_text(&client, &url).await, expected_moved);
        let url = cluster.stream_url(node, &stayed);
        assert_eq!(common::get_text(&client, &url).await, "abc");
        // A listing takes the groups a node holds no copy of from their
        // leaders, one name at a time across the pages.
        let mut names = listed(&client, &cluster, node, "").await;
        names.sort();
        let mut expected = vec![moved.clone(), stayed.clone()];
        expected.sort();
        assert_eq!(names, expected, "node {} lists", node + 1);
    }

    // After a SIGKILL node 1 starts without the copy it dropped, and
    // still serves the group through its leader, and is ready; so is
    // node 4, which holds group 1 only.
    cluster.kill(0);
    cluster.restart(0).await;
    wait_ready(&client, &cluster, 0).await;
    let status = group_status(&cluster, 0, 1).await;
    assert_eq!(status["state"], "elsewhere", "{status}");
    append_until_acked(&client, &cluster.stream_url(0, &moved), "d").await;
    let url = cluster.stream_url(0, &moved);
    assert_eq!(common::get_text(&client, &url).await, "abccccd");
    wait_ready(&client, &cluster, newcomer).await;

    // Back to node 1, which left the group before its restart: it holds
    // the group again, and node 4 drops its copy.
    move_group_1(&cluster, 4, 1).await;
    wait_until_held(&cluster, 0, &[1, 2, 3]).await;
    wait_until_dropped(&cluster, &dir, newcomer).await;
    // On to node 4, which dropped its copy a moment ago and has not
    // restarted since: it takes the group back.
    move_group_1(&cluster, 3, 4).await;
    wait_until_held(&cluster, newcomer, &[1, 2, 4]).await;
    wait_until_dropped(&cluster, &dir, 2).await;

    for node in [0, 1, 2, newcomer] {
        append_until_acked(&client, &cluster.stream_url(node, &moved), "e").await;
    }
    cluster.wait_for_convergence(Duration::from_secs(20)).await;
    for node in [0, 1, 2, newcomer] {
        let url = cluster.stream_url(node, &moved);
        assert_eq!(common::get_text(&client, &url).await, "abccccdeeee");
    }
    for node in [0, 1, newcomer] {
        let status = group_status(&cluster, node, 1).await;
        assert_eq!(status["voters"], serde_json::json!([1, 2, 4]), "{status}");
    }
}

/// Moves group 1's replica from node `from` to node `to` with
/// `runnel ctl node move`.
async fn move_group_1(cluster: &Cluster, from: usize, to: usize) {
    let addr = format!("127.0.0.1:{}", cluster.ports[to - 1]);
    let (from_id, to_id) = (from.to_string(), to.to_string());
    let target = cluster.base(1);
    let (ok, stdout, stderr) = ctl_node(&[
        "move",
        "--group",
        "1",
        "--node-id",
        &from_id,
        "--to",
        &to_id,
        "--addr",
        &addr,
        "--target",
        &target,
    ])
    .await;
    assert!(ok, "moving group 1 from {from} to {to}: {stderr}");
    let said = format!("moved from node {from} to node {to}");
    assert!(stdout.contains(&said), "{stdout}");
}

/// Waits, at most `secs`, until node `node`'s view of group 1 passes
/// `done`; else fails, saying the node `fails_as` with its view.
async fn wait_for_group_1(
    cluster: &Cluster,
    node: usize,
    secs: u64,
    fails_as: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let status = group_status(cluster, node, 1).await;
        if done(&status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} {fails_as}: {status}",
            node + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until node `node` holds group 1 as a voter, among `voters`.
async fn wait_until_held(cluster: &Cluster, node: usize, voters: &[u64]) {
    let voters = serde_json::json!(voters);
    wait_for_group_1(cluster, node, 30, "does not hold group 1", |status| {
        let member = matches!(status["state"].as_str(), Some("Leader" | "Follower"));
        member && status["voters"] == voters
    })
    .await;
}

/// Waits until node `node` (an index) dropped its copy of group 1: it
/// serves the group elsewhere, at a leader it knows, and `left-groups`
/// notes it.
async fn wait_until_dropped(cluster: &Cluster, dir: &tempfile::TempDir, node: usize) {
    let left = dir
        .path()
        .join(format!("n{}", node + 1))
        .join("left-groups");
    wait_for_group_1(cluster, node, 20, "kept group 1", |status| {
        let noted =
            std::fs::read_to_string(&left).is_ok_and(|l| l.lines().any(|l| l.starts_with("1 ")));
        status["state"] == "elsewhere" && status["leader"].as_u64().is_some() && noted
    })
    .await;
}

/// Every stream name node `node` lists, a page of one at a time.
async fn listed(
    client: &reqwest::Client,
    cluster: &Cluster,
    node: usize,
    prefix: &str,
) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/v1/streams?prefix={prefix}&limit=1", cluster.base(node));
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let body = client
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
        for stream in page["streams"].as_array().unwrap() {
            names.push(stream["name"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return names,
        }
    }
}

async fn wait_ready(client: &reqwest::Client, cluster: &Cluster, node: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = client
            .get(format!("{}/ready", cluster.base(node)))
            .send()
            .await
            .unwrap();
        let code = ready.status();
        let body = ready.text().await.unwrap();
        if code == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} not ready: {body}",
            node + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
