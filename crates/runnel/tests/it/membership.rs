//! Cluster membership changed while serving, with `runnel ctl node`, on a
//! cluster whose every node holds every group (a replication factor above
//! the node count; `elastic.rs` places groups on three of five): a
//! fourth node joins a running 3-node cluster while idempotent producers
//! write through every node, the first node is then removed and stopped,
//! the third dies with its disk and a fifth replaces it, and a sixth
//! joins by itself (`runnel serve --join`), then restarts while the
//! member it joined by is down. A removal that would leave
//! the groups without a reachable quorum is refused, as are a node added
//! under another id than its own and a node joining under an id the
//! cluster has. A removed node drops out of the others' status and peer
//! metrics, and every member ends knowing the cluster's id. No acknowledged append is lost, the writers see no error,
//! and every remaining replica ends identical. A voter of group 0 becomes
//! a learner of it and a voter again.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::membership::{
    assert_placed, control_learners, ctl_node, ctl_node_add, replace_dead_node, serve_joining,
};
use common::writers::{assert_read_back, stop_and_check, Writers};

/// Each group's voters as node `i` sees them.
async fn voters(cluster: &Cluster, i: usize) -> Vec<Vec<u64>> {
    let status = cluster.status(i).await.expect("status answers");
    status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g["voters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_and_another_leaves_while_writers_run() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--groups", "3", "--replication-factor", "9"];
    let mut cluster = Cluster::start(dir.path(), 3, &flags).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();

    // With node 3 down, removing node 2 would leave each group {1, 3}
    // with only node 1 reachable: refused, and nothing changes.
    // It is refused before anything moves: node 2 keeps the leaderships
    // it has.
    cluster.kill(2);
    let leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let (ok, _, stderr) =
        ctl_node(&["remove", "--node-id", "2", "--target", &cluster.base(0)]).await;
    assert!(!ok, "a removal that costs the quorum was not refused");
    assert!(stderr.contains("without a quorum"), "{stderr}");
    eprint!("refused: {stderr}");
    assert_eq!(voters(&cluster, 0).await, vec![vec![1, 2, 3]; 3]);
    assert_eq!(
        cluster.wait_for_leaders(Duration::from_secs(10)).await,
        leaders,
        "a refused removal moved leaderships"
    );
    cluster.restart(2).await;
    cluster.wait_until_every_node_votes().await;

    // Writers: idempotent producers, each on its own stream, sending each
    // append to the next node in service.
    let targets = (0..3).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "member", 6, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 4 joins: started knowing the others, made a member of every
    // group through node 2.
    let joiner = cluster.start_joiner().await;
    let joiner_addr = format!("127.0.0.1:{}", cluster.ports[joiner]);
    // Under another id than the one it was started with: refused.
    let (ok, _, stderr) = ctl_node_add(9, &joiner_addr, &cluster.base(1)).await;
    assert!(!ok && stderr.contains("is node 4, not node 9"), "{stderr}");
    let (ok, stdout, stderr) = ctl_node_add(4, &joiner_addr, &cluster.base(1)).await;
    assert!(ok, "node add failed: {stderr}");
    eprint!("{stderr}{stdout}");
    assert!(
        stdout.contains("node 4 added: it holds 3 of the 3 groups"),
        "{stdout}"
    );
    for node in 0..4 {
        assert_eq!(
            voters(&cluster, node).await,
            vec![vec![1, 2, 3, 4]; 3],
            "voters as node {} sees them",
            node + 1
        );
    }
    // Running it again changes nothing and succeeds.
    let (ok, _, stderr) = ctl_node_add(4, &joiner_addr, &cluster.base(0)).await;
    assert!(ok && stderr.contains("nothing to move"), "{stderr}");
    writers.add_target(cluster.base(joiner));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 1 leaves: out of the writers' rotation, out of every group,
    // then stopped.
    writers.drop_target(&cluster.base(0));
    let (ok, stdout, stderr) = ctl_node(&[
        "remove",
        "--node-id",
        "1",
        "--target",
        &cluster.base(joiner),
    ])
    .await;
    assert!(ok, "node remove failed: {stderr}");
    eprint!("{stderr}{stdout}");
    assert!(
        stdout.contains("node 1 removed in all 3 groups") && stdout.contains("node 1 retired"),
        "{stdout}"
    );
    cluster.kill(0);
    // The others forget it: out of their status and their peer metrics.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = cluster.status(1).await.expect("node 2 answers");
        let metrics = common::get_text(&client, &format!("{}/metrics", cluster.base(1))).await;
        let listed = status["nodes"].get("1").is_some();
        let linked = metrics.contains("peer=\"1\"");
        if !listed && !linked {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 2 still knows node 1: listed {listed}, linked {linked}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The groups node 1 led elect new leaders; writes meanwhile wait.
    cluster.wait_for_leaders(Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Node 3's machine dies with its disk; node 5 replaces it.
    let (_, stdout) = replace_dead_node(&mut cluster, &writers, dir.path(), 2, 5, 1).await;
    assert!(
        stdout.contains("node 3 replaced by node 5 in all 3 groups"),
        "{stdout}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A node joining under an id the cluster has is refused before it
    // writes anything.
    let taken = dir.path().join("taken-id");
    let (ok, stderr) = serve_joining(2, &cluster.base(1), &taken, &[]).await;
    assert!(!ok, "a join under a taken id was not refused");
    assert!(stderr.contains("node 2 is already a member at"), "{stderr}");
    assert!(
        !taken.exists(),
        "the refused node created its data directory"
    );

    // Node 6 joins by itself through node 2, with nothing but its URL.
    let joined = cluster.start_joining(1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while voters(&cluster, joined).await != vec![vec![2, 4, 5, 6]; 3] {
        assert!(
            std::time::Instant::now() < deadline,
            "node 6 did not become a voter of every group: {:?}",
            voters(&cluster, joined).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    writers.add_target(cluster.base(joined));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let errors = writers.errors.clone();
    let written = writers.stop().await;

    // Node 6 restarts while node 2, the member it joined by, is down: it
    // starts from its data directory and rejoins its groups.
    cluster.kill(1);
    cluster.kill(joined);
    cluster.restart(joined).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = cluster.status(joined).await.expect("node 6 answers");
        let leaders = status["groups"].as_array().unwrap();
        if leaders.iter().all(|g| g["leader"].is_u64()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 6 found no leaders after its restart: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(voters(&cluster, joined).await, vec![vec![2, 4, 5, 6]; 3]);
    cluster.restart(1).await;

    cluster.wait_for_convergence(Duration::from_secs(20)).await;
    let remaining = [1, 3, 4, 5];
    for node in remaining {
        assert_eq!(
            voters(&cluster, node).await,
            vec![vec![2, 4, 5, 6]; 3],
            "voters as node {} sees them",
            node + 1
        );
    }
    // Every member, the joined ones included, knows the cluster's id.
    let mut ids = Vec::new();
    for node in remaining {
        ids.push(cluster.status(node).await.expect("status")["cluster_id"].clone());
    }
    assert!(
        ids[0].is_string() && ids.iter().all(|id| *id == ids[0]),
        "cluster ids: {ids:?}"
    );
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    assert_read_back(&client, &cluster, &remaining, &written).await;
}

/// Group 0 has five voters at most; the other members follow it as
/// learners. A voter is turned into a learner (`?demote=N`) and back
/// (`?add=N`) while writers run through every node: the learner goes on
/// applying group 0's entries and serving, the changes are idempotent,
/// and they are refused on a data group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_group_voter_becomes_a_learner_and_a_voter_again() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &["--groups", "2"]).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let targets = (0..3).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "learner", 6, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A node that does not lead group 0, asked through itself.
    let learner = (leaders[0] + 1) % 3;
    let id = learner as u64 + 1;
    let (status, body) = cluster
        .change_members(learner, 1, &format!("demote={id}"))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("through group 0"), "{body}");
    for again in [true, false] {
        let (status, body) = cluster
            .change_members(learner, 0, &format!("demote={id}"))
            .await;
        assert_eq!(status, 200, "{body}");
        let report: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(report["changed"], again, "{body}");
        assert_eq!(report["learners"], serde_json::json!([id]), "{body}");
        assert!(
            !report["voters"].as_array().unwrap().contains(&id.into()),
            "{body}"
        );
    }
    let addr = format!("127.0.0.1:{}", cluster.ports[learner]);
    let (status, body) = cluster
        .change_members(0, 0, &format!("learn={id}&addr={addr}"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""changed":false"#), "{body}");

    // The learner applies what group 0 commits: a new preferred leader
    // of group 1 shows in its status (and group 1's leadership moves
    // there, the writers writing).
    let status = cluster.status(0).await.expect("node 1 answers");
    let before = status["groups"][1]["preferred_leader"].as_u64().unwrap();
    let data_leader = before % 3 + 1;
    let (status, body) = cluster
        .change_members(0, 0, &format!("prefer=1:{data_leader}"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""changed":true"#), "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = cluster.status(learner).await.expect("the learner answers");
        let zero = &status["groups"][0];
        let preferred = &status["groups"][1]["preferred_leader"];
        if zero["state"] == "Learner" && *preferred == data_leader {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the learner's status: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A voter again.
    let (status, body) = cluster
        .change_members(learner, 0, &format!("add={id}&addr={addr}"))
        .await;
    assert_eq!(status, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["changed"], true, "{body}");
    assert_eq!(report["voters"], serde_json::json!([1, 2, 3]), "{body}");
    assert_eq!(report["learners"], serde_json::json!([]), "{body}");
    stop_and_check(writers, &client, &cluster, &[0, 1, 2]).await;
}

/// A cluster formed by six founders (every one a voter of group 0 as it
/// forms) ends with five voters there and the sixth a learner, its data
/// groups on three nodes each and leaderships balanced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_founders_leave_five_voters_in_group_0() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 6, &["--groups", "7"]).await;
    cluster.wait_for_leaders(Duration::from_secs(20)).await;
    let nodes: Vec<usize> = (0..6).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while control_learners(&cluster, &nodes).await.len() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "group 0 kept its voters: {:?}",
            voters(&cluster, 0).await[0]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_placed(&cluster, &nodes, &[1, 2, 3, 4, 5, 6], 3).await;
}
