//! The replication factor is cluster state, not a flag: four nodes form
//! with `--replication-factor 2` and the control group records it;
//! `runnel ctl node rebalance --replication-factor 3` raises it and gives
//! every data group a third replica, a restart with the old flag does
//! not undo it, a factor out of range is refused with the reason, and
//! lowering it back to 2 takes the extra replicas away (their nodes drop
//! their copies). Idempotent producers write through every node all
//! along; nothing acknowledged is lost and no request fails.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::membership::{assert_placed, ctl_node};
use common::writers::{stop_and_check, Writers};

/// `runnel ctl node rebalance ARGS... --target TARGET`.
async fn rebalance(args: &[&str], target: &str) -> (bool, String, String) {
    let mut all = vec!["rebalance", "--target", target];
    all.extend_from_slice(args);
    ctl_node(&all).await
}

/// How many replica moves `rebalance` said it made.
fn moves(stdout: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_suffix(" of the 4 nodes"))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of moves: {stdout}"))
}

/// The replication factor node `node` reports.
async fn factor(cluster: &Cluster, node: usize) -> serde_json::Value {
    cluster.status(node).await.expect("status")["replication_factor"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replication_factor_is_cluster_state_changed_by_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--groups", "5", "--replication-factor", "2"];
    let mut cluster = Cluster::start(dir.path(), 4, &flags).await;
    let (nodes, ids) = ([0, 1, 2, 3], [1, 2, 3, 4]);
    assert_placed(&cluster, &nodes, &ids, 2).await;
    for node in nodes {
        assert_eq!(factor(&cluster, node).await, 2);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let targets = nodes.iter().map(|n| cluster.base(*n)).collect();
    let writers = Writers::start(&client, "factor", 6, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Nothing to move at the factor the cluster formed with.
    let (ok, stdout, stderr) = rebalance(&[], &cluster.base(0)).await;
    assert!(ok && stderr.contains("nothing to move"), "{stderr}");
    assert_eq!(moves(&stdout), 0, "{stdout}");

    // Raised to 3, through node 2: every data group gains a replica.
    let (ok, stdout, stderr) = rebalance(&["--replication-factor", "3"], &cluster.base(1)).await;
    assert!(ok, "rebalance failed: {stderr}");
    eprint!("{stderr}{stdout}");
    assert!(
        stdout.contains("the cluster's replication factor is 3\n"),
        "{stdout}"
    );
    // One added replica per group, and maybe some to even out the load.
    assert!(moves(&stdout) >= 4, "{stdout}");
    assert_placed(&cluster, &nodes, &ids, 3).await;

    // A node restarted with its old flag keeps the cluster's factor.
    // (The writers leave it alone meanwhile: a request in flight to a
    // node that is killed fails at the client.)
    writers.drop_target(&cluster.base(3));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(3);
    cluster.restart(3).await;
    cluster.wait_until_every_node_votes().await;
    writers.add_target(cluster.base(3));
    for node in nodes {
        assert_eq!(factor(&cluster, node).await, 3, "node {}", node + 1);
    }
    let (ok, stdout, stderr) = rebalance(&["--replication-factor", "3"], &cluster.base(3)).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("is 3 (already so)"), "{stdout}");
    assert!(stderr.contains("nothing to move"), "{stderr}");

    // Out of range: refused by the cluster, with the range.
    for bad in ["0", "16"] {
        let (ok, _, stderr) = rebalance(&["--replication-factor", bad], &cluster.base(0)).await;
        assert!(!ok, "factor {bad} accepted");
        assert!(
            stderr.contains(&format!("a replication factor is 1 to 15, not {bad}")),
            "{stderr}"
        );
    }
    assert_eq!(factor(&cluster, 0).await, 3);

    // Lowered back to 2: each data group loses a replica, and the node
    // that gave one up no longer holds that group.
    let (ok, stdout, stderr) = rebalance(&["--replication-factor", "2"], &cluster.base(2)).await;
    assert!(ok, "rebalance failed: {stderr}");
    eprint!("{stderr}{stdout}");
    assert!(moves(&stdout) >= 4, "{stdout}");
    assert_placed(&cluster, &nodes, &ids, 2).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut held = 0;
        for node in nodes {
            let status = cluster.status(node).await.unwrap();
            let groups = status["groups"].as_array().unwrap();
            held += groups
                .iter()
                .skip(1)
                .filter(|g| g["state"] != "elsewhere")
                .count();
        }
        if held == 8 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{held} copies of the 4 data groups are held, not 8"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_and_check(writers, &client, &cluster, &nodes).await;
}
