//! Continuous rebalancing: four nodes, replication factor 3, eight data
//! groups, idempotent writers through every node. Node 4 dies and
//! self-healing moves its replicas to the other three; node 4 is marked
//! draining and restarted: it comes back empty and is given nothing.
//! Undrained, it takes its share again by itself (the groups' leaders
//! move one replica each at a time, counted in the status and
//! `/metrics`), the mark that it is filling is cleared once it holds its
//! share, and no writer sees an error.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::membership::placement;
use common::writers::{assert_read_back, Writers};

/// Data groups (not group 0) whose voters include node `id`, and whether
/// every data group has three voters.
async fn held_by(cluster: &Cluster, id: u64) -> (usize, bool) {
    let placed = placement(cluster, &cluster.running()).await;
    let held = placed.iter().skip(1).filter(|v| v.contains(&id)).count();
    (held, placed.iter().skip(1).all(|v| v.len() == 3))
}

/// Waits until `done` holds of node `id`'s data replicas and all groups
/// having three voters.
async fn wait_held(cluster: &Cluster, id: u64, what: &str, done: impl Fn(usize) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (held, full) = held_by(cluster, id).await;
        if full && done(held) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: node {id} holds {held} data groups; placement {:?}",
            placement(cluster, &cluster.running()).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_after_healing_takes_its_share_again_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--replication-factor",
        "3",
        "--groups",
        "9",
        "--dead-node-after",
        "2",
        "--rebalance-after",
        "2",
    ];
    let mut cluster = Cluster::start(dir.path(), 4, &flags).await;
    // Rebalancing records members' states, a format of cluster version 2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.status(0).await.unwrap()["cluster_version"]["current"] != 2 {
        assert!(
            Instant::now() < deadline,
            "the cluster never reached version 2"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 24 replicas over 4 nodes.
    assert_eq!(held_by(&cluster, 4).await.0, 6);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let targets = (0..4).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "rebalanced", 8, targets).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    writers.drop_target(&cluster.base(3));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill(3);
    wait_held(&cluster, 4, "healing", |held| held == 0).await;

    // Draining, it comes back empty and is given nothing.
    let (status, body) = cluster.change_members(0, 0, "drain=4").await;
    assert_eq!(status, 200, "{body}");
    cluster.restart(3).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        held_by(&cluster, 4).await.0,
        0,
        "a draining node was given replicas"
    );
    let status = cluster.status(1).await.unwrap();
    assert_eq!(
        status["rebalancing"]["members"]["4"], "draining",
        "{status:#}"
    );

    // Undrained, it takes its share by itself.
    let (status, body) = cluster.change_members(2, 0, "undrain=4").await;
    assert_eq!(status, 200, "{body}");
    let started = Instant::now();
    wait_held(&cluster, 4, "rebalancing", |held| held == 6).await;
    eprintln!(
        "node 4 held its 6 data groups again {:?} after it was undrained",
        started.elapsed()
    );
    writers.add_target(cluster.base(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = cluster.status(0).await.unwrap();
        if status["rebalancing"]["members"]
            .as_object()
            .is_some_and(|m| m.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 stayed marked: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut moves = 0;
    for i in 0..4 {
        let counted = cluster.status(i).await.unwrap()["rebalancing"]["moves"]
            .as_u64()
            .unwrap();
        let metrics = reqwest::get(format!("{}/metrics", cluster.base(i)))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = format!("runnel_rebalance_moves_total {counted}\n");
        assert!(metrics.contains(&line), "node {}: no {line:?}", i + 1);
        moves += counted;
    }
    assert!(moves >= 6, "{moves} moves counted for 6 replicas");

    tokio::time::sleep(Duration::from_secs(1)).await;
    let errors = writers.errors.clone();
    let written = writers.stop().await;
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert_read_back(&client, &cluster, &[0, 1, 2, 3], &written).await;
}
