//! Self-healing: five nodes, replication factor 3, `--dead-node-after 3`,
//! idempotent writers through every node. One node is killed and not
//! brought back: within the limit plus a bounded time every data group
//! again has three replicas, all on live nodes, moved there by the
//! groups' own leaders, with no client error. A second node is then
//! killed: every group still has a quorum and writes go on. The first
//! node, restarted, drops the copies it was moved off and takes the
//! second one's replicas. Paused, the cluster moves nothing.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::membership::placement;
use common::writers::{assert_read_back, Writers};

/// Waits until every data group has three voters, none of them in
/// `gone`; answers how long that took.
async fn wait_for_healed(cluster: &Cluster, gone: &[u64], within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let placed = placement(cluster, &cluster.running()).await;
        let healed = placed
            .iter()
            .skip(1)
            .all(|voters| voters.len() == 3 && voters.iter().all(|v| !gone.contains(v)));
        if healed {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "not healed in {within:?}: {placed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Replicas the running nodes moved, as their statuses count them; their
/// `/metrics` must say the same.
async fn moves_counted(cluster: &Cluster) -> u64 {
    let mut moves = 0;
    for i in cluster.running() {
        let status = cluster.status(i).await.unwrap();
        let counted = status["healing"]["moves"].as_u64().unwrap();
        let metrics = reqwest::get(format!("{}/metrics", cluster.base(i)))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = format!("runnel_healing_moves_total {counted}\n");
        assert!(metrics.contains(&line), "node {}: no {line:?}", i + 1);
        moves += counted;
    }
    moves
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_replaced_by_the_cluster_and_a_second_loss_keeps_every_quorum() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--replication-factor",
        "3",
        "--groups",
        "6",
        "--dead-node-after",
        "3",
    ];
    let mut cluster = Cluster::start(dir.path(), 5, &flags).await;
    let status = cluster.status(0).await.unwrap();
    assert_eq!(status["healing"]["dead_node_after_secs"], 3, "{status}");
    let held_by_5 = placement(&cluster, &cluster.running())
        .await
        .iter()
        .skip(1)
        .filter(|voters| voters.contains(&5))
        .count() as u64;
    assert!(held_by_5 > 0, "node 5 holds no data group");

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let targets = (0..5).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "healed", 10, targets).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    writers.drop_target(&cluster.base(4));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill(4);
    let took = wait_for_healed(&cluster, &[5], Duration::from_secs(45)).await;
    eprintln!("node 5's replicas moved {took:?} after it died (limit 3 s)");
    assert!(moves_counted(&cluster).await >= held_by_5);

    // A second node goes: every group still has a quorum of live voters.
    writers.drop_target(&cluster.base(3));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill(3);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let errors = writers.errors.clone();
    let written = writers.stop().await;
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    cluster.wait_for_leaders(Duration::from_secs(15)).await;
    assert_read_back(&client, &cluster, &[0, 1, 2], &written).await;

    // Node 5 comes back while node 4 is still dead: it rejoins, drops
    // the copies it no longer holds, and node 4's replicas move to it.
    cluster.restart(4).await;
    wait_for_healed(&cluster, &[4], Duration::from_secs(45)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let placed = placement(&cluster, &cluster.running()).await;
        let status = cluster.status(4).await.unwrap();
        let stale: Vec<usize> = (1..placed.len())
            .filter(|g| !placed[*g].contains(&5) && status["groups"][*g]["state"] != "elsewhere")
            .collect();
        if stale.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 5 still holds groups {stale:?} it was moved off"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_healing_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--replication-factor",
        "3",
        "--groups",
        "5",
        "--dead-node-after",
        "1",
    ];
    let mut cluster = Cluster::start(dir.path(), 4, &flags).await;
    let (status, body) = cluster.change_members(1, 0, "healing=pause").await;
    assert_eq!(status, 200, "{body}");
    let before = placement(&cluster, &cluster.running()).await;
    cluster.kill(3);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = cluster.status(0).await.unwrap();
    assert_eq!(status["healing"]["paused"], true, "{status}");
    assert_eq!(moves_counted(&cluster).await, 0);
    let after = placement(&cluster, &cluster.running()).await;
    assert_eq!(before[1..], after[1..], "replicas moved while paused");
    // Resumed, node 4's replicas move.
    let (status, body) = cluster.change_members(1, 0, "healing=resume").await;
    assert_eq!(status, 200, "{body}");
    wait_for_healed(&cluster, &[4], Duration::from_secs(45)).await;
}
