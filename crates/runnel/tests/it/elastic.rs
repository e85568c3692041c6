//! Groups on three of N nodes, while idempotent producers write through
//! every node in service: five nodes form with `--replication-factor 3`
//! (group 0 on all five, each other group on three, three per node); a
//! sixth node is added and takes its share of the replicas; node 2 is
//! drained and removed; node 3 dies with its disk and node 7 replaces it.
//! After each step every group but group 0 has three replicas, spread
//! evenly. No acknowledged append is lost, the writers see no error,
//! and every replica of every group ends identical. A `ctl node add`
//! killed in the middle of a replica move is finished by running it
//! again, also after the moving group's leader and the new node crash
//! and restart under writes.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::membership::{
    assert_placed, ctl_node, ctl_node_add, ctl_node_killed_after, is_membership_change,
    replace_dead_node,
};
use common::writers::{stop_and_check, Writers};

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
    // Group 0 (as a learner: it has five voters) and two or three of
    // the five others.
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

    stop_and_check(writers, &client, &cluster, &running).await;
}

/// Starts node 5 and runs `runnel ctl node add` for it through node
/// `via`, killed (SIGKILL) after its second membership change: the first
/// adds node 5 to group 0, the second to a data group. Answers node 5's
/// index, its address, the target and what ctl printed.
async fn add_a_fifth_node_cut_mid_move(
    cluster: &mut Cluster,
    via: usize,
) -> (usize, String, String, String) {
    let fifth = cluster.start_joiner().await;
    let addr = format!("127.0.0.1:{}", cluster.ports[fifth]);
    let target = cluster.base(via);
    let add = [
        "add",
        "--node-id",
        "5",
        "--addr",
        &addr,
        "--target",
        &target,
    ];
    let printed = ctl_node_killed_after(&add, 2).await;
    eprint!("{printed}");
    (fifth, addr, target, printed)
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
    let (fifth, addr, target, printed) = add_a_fifth_node_cut_mid_move(&mut cluster, 0).await;
    let changes = printed.lines().filter(|l| is_membership_change(l)).count();
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

/// Node `i` crashes (SIGKILL) and comes back on its data directory; the
/// writers leave it alone meanwhile (a request in flight to a node that
/// dies fails at the client).
async fn crash_and_restart(cluster: &mut Cluster, writers: &Writers, i: usize) {
    writers.drop_target(&cluster.base(i));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(i);
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(i).await;
    cluster.wait_until_every_node_votes().await;
    writers.add_target(cluster.base(i));
}

/// Nodes crash in the middle of a replica move, with writers running: a
/// `ctl node add` is cut after node 5 joined a data group (which then
/// has four voters, the replica it replaces not yet removed, unless the
/// removal got out before the cut); that group's leader crashes and
/// restarts, then node 5 itself. Running the
/// command again finishes the move: the placement is balanced, nothing
/// acknowledged is lost, the writers saw no error, and every replica of
/// every group is identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_crashing_in_the_middle_of_a_move_lose_nothing_and_the_move_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--groups", "6", "--replication-factor", "3"];
    let mut cluster = Cluster::start(dir.path(), 4, &flags).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let targets = (0..4).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "crash-mid-move", 6, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (fifth, addr, target, _) = add_a_fifth_node_cut_mid_move(&mut cluster, 1).await;
    // The data group node 5 joined, and who leads it (once node 5 has
    // heard from its leader).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (moving, group) = loop {
        let status = cluster.status(fifth).await.unwrap();
        let joined = status["groups"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, g)| g["state"] != "elsewhere")
            .map(|(g, group)| (g, group.clone()));
        match joined {
            Some((g, group)) if group["leader"].is_u64() => break (g, group),
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "node 5 holds no data group with a leader: {status}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // (Four voters, unless the removal that follows got out before ctl
    // was killed.)
    let leader = group["leader"].as_u64().unwrap() as usize;
    eprintln!("group {moving} mid-move, led by node {leader}: {group}");
    if leader != 5 {
        crash_and_restart(&mut cluster, &writers, leader - 1).await;
    }
    crash_and_restart(&mut cluster, &writers, fifth).await;

    let (ok, stdout, stderr) = ctl_node_add(5, &addr, &target).await;
    assert!(ok, "the second run failed: {stderr}");
    eprint!("{stderr}{stdout}");
    let (ok, _, stderr) = ctl_node_add(5, &addr, &target).await;
    assert!(ok && stderr.contains("nothing to move"), "{stderr}");
    let running = [0, 1, 2, 3, fifth];
    assert_placed(&cluster, &running, &[1, 2, 3, 4, 5], 3).await;
    writers.add_target(cluster.base(fifth));
    tokio::time::sleep(Duration::from_secs(1)).await;

    stop_and_check(writers, &client, &cluster, &running).await;
}
