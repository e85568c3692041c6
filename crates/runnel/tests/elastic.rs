//! Groups on three of N nodes, while idempotent producers write through
//! every node in service: five nodes form with `--replication-factor 3`
//! (group 0 on all five, each other group on three, three per node); a
//! sixth node is added and takes its share of the replicas; node 2 is
//! drained and removed; node 3 dies with its disk and node 7 replaces it.
//! After each step every group but group 0 has three replicas, spread
//! evenly. No acknowledged append is lost, the writers see no error,
//! and every replica of every group ends identical. A `ctl node add`
//! killed in the middle of a replica move is finished by running it again.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::membership::{
    assert_placed, ctl_node, ctl_node_add, ctl_node_killed_after, replace_dead_node,
};
use common::writers::{assert_read_back, Writers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_on_three_of_n_nodes_while_nodes_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--groups", "6", "--replication-factor", "3"];
    let mut cluster = Cluster::start(dir.path(), 5, &flags).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    assert_placed(&cluster, &[0, 1, 2, 3, 4], &[1, 2, 3, 4, 5], 3).await;
    let status = cluster.status(0).await.unwrap();
    assert_eq!(status["replication_factor"], 3, "{status}");
    let targets = (0..5).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "elastic", 8, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A sixth node takes its share.
    let sixth = cluster.start_joiner().await;
    let addr = format!("127.0.0.1:{}", cluster.ports[sixth]);
    let (ok, stdout, stderr) = ctl_node_add(6, &addr, &cluster.base(0)).await;
    assert!(ok, "node add failed: {stderr}");
    eprint!("{stderr}{stdout}");
    // Group 0 and two or three of the five others.
    assert!(
        stdout.contains("it holds 3 of the 6 groups") || stdout.contains("it holds 4 of the 6"),
        "{stdout}"
    );
    writers.add_target(cluster.base(sixth));
    assert_placed(&cluster, &[0, 1, 2, 3, 4, sixth], &[1, 2, 3, 4, 5, 6], 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 2 is drained, removed and stopped.
    writers.drop_target(&cluster.base(1));
    let (ok, stdout, stderr) =
        ctl_node(&["remove", "--node-id", "2", "--target", &cluster.base(0)]).await;
    assert!(ok, "node remove failed: {stderr}");
    eprint!("{stderr}{stdout}");
    assert!(stdout.contains("node 2 retired"), "{stdout}");
    cluster.kill(1);
    assert_placed(&cluster, &[0, 2, 3, 4, sixth], &[1, 3, 4, 5, 6], 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 3's machine dies with its disk; node 7 replaces it.
    let (seventh, _) = replace_dead_node(&mut cluster, &writers, dir.path(), 2, 7, 3).await;
    let running = [0, 3, 4, sixth, seventh];
    assert_placed(&cluster, &running, &[1, 4, 5, 6, 7], 3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let errors = writers.errors.clone();
    let written = writers.stop().await;
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    assert_read_back(&client, &cluster, &running, &written).await;
}

/// `runnel ctl node add` killed halfway through a replica move (a data
/// group has gained the new node and not yet lost the replica it moves
/// from) is finished by running it again; a third run has nothing to
/// move, and no group keeps a learner or an extra voter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_add_killed_mid_move_is_finished_by_running_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--groups", "6", "--replication-factor", "3"];
    let mut cluster = Cluster::start(dir.path(), 4, &flags).await;
    assert_placed(&cluster, &[0, 1, 2, 3], &[1, 2, 3, 4], 3).await;
    let fifth = cluster.start_joiner().await;
    let addr = format!("127.0.0.1:{}", cluster.ports[fifth]);
    let target = cluster.base(0);
    let add = [
        "add",
        "--node-id",
        "5",
        "--addr",
        &addr,
        "--target",
        &target,
    ];
    // The first change adds node 5 to group 0, the second to a data group.
    let printed = ctl_node_killed_after(&add, 2).await;
    eprint!("{printed}");
    let changes = printed.lines().filter(|l| l.starts_with("group ")).count();
    assert_eq!(changes, 2, "{printed}");

    let (ok, stdout, stderr) = ctl_node_add(5, &addr, &target).await;
    assert!(ok, "the second run failed: {stderr}");
    eprint!("{stderr}{stdout}");
    let (ok, _, stderr) = ctl_node_add(5, &addr, &target).await;
    assert!(ok && stderr.contains("nothing to move"), "{stderr}");
    let running = [0, 1, 2, 3, fifth];
    assert_placed(&cluster, &running, &[1, 2, 3, 4, 5], 3).await;
    for node in running {
        let status = cluster.status(node).await.unwrap();
        for group in status["groups"].as_array().unwrap() {
            assert_eq!(group["learners"], serde_json::json!([]), "{group}");
        }
    }

    // Every node serves every group.
    let client = reqwest::Client::new();
    for (i, node) in running.iter().enumerate() {
        let name = format!("after-the-cut-{i}");
        common::create_text(&client, &cluster.stream_url(*node, &name), "a").await;
        for other in running {
            let url = cluster.stream_url(other, &name);
            assert_eq!(common::get_text(&client, &url).await, "a");
        }
    }
    cluster.wait_for_convergence(Duration::from_secs(20)).await;
}
