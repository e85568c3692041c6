//! A rolling upgrade: a 3-node cluster of an older build (the previous
//! release, `RUNNEL_UPGRADE_FROM`) under idempotent writers and live SSE
//! readers has its nodes stopped and started on this build one at a
//! time. Finalising is refused while a node still runs the older build;
//! once all run this one, a node is rolled back to the older build and
//! forward again, and the upgrade is finalised: every node then reports
//! the new cluster version, which group 0 logged in the new format (and
//! keeps over a restart). No writer or reader sees an error, every copy
//! converges, every acknowledged append reads back through every node and
//! reached every reader. `scripts/upgrade.sh OLD_REV` builds the older
//! binary from its commit and runs this test; without the older build it
//! cannot run, so it is ignored (reported as such, never as passed) in
//! the ordinary test run.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::readers::Readers;
use common::writers::{assert_read_back, Writers};

/// Finalising is left to the operator, so that the older build stays
/// possible until then. Through the environment: the older build does
/// not know the flag.
const MANUAL: (&str, &str) = ("RUNNEL_UPGRADE_FINALIZE", "manual");

/// Node `i` in turn: clients leave it, it stops, starts on the older
/// build `binary` (or this one) over its data directory, catches up, and
/// clients come back.
async fn step(
    cluster: &mut Cluster,
    writers: &Writers,
    readers: &Readers,
    i: usize,
    binary: Option<&str>,
) {
    let base = cluster.base(i);
    writers.drop_target(&base);
    readers.drop_target(&base);
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.stop(i);
    match binary {
        Some(old) => cluster.set_env(i, &[("RUNNEL_TEST_BINARY", old), MANUAL]),
        None => cluster.set_env(i, &[MANUAL]),
    }
    cluster.restart(i).await;
    cluster.wait_for_leaders(Duration::from_secs(20)).await;
    cluster.wait_until_every_node_votes().await;
    writers.add_target(base.clone());
    readers.add_target(base);
    let build = if binary.is_some() {
        "the older"
    } else {
        "this"
    };
    eprintln!("node {} runs {build} build", i + 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the previous release's binary: run scripts/upgrade.sh OLD_REV"]
async fn a_cluster_upgrades_one_node_at_a_time_under_writes_and_rolls_back() {
    let old = std::env::var("RUNNEL_UPGRADE_FROM")
        .expect("RUNNEL_UPGRADE_FROM names the older build's runnel binary");
    assert!(std::path::Path::new(&old).exists(), "{old} is missing");
    let dir = tempfile::tempdir().unwrap();
    let older = [("RUNNEL_TEST_BINARY", old.as_str()), MANUAL];
    let mut cluster = Cluster::start_with_env(dir.path(), 3, &["--groups", "4"], &older).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let targets: Vec<String> = (0..3).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "upgraded", 6, targets.clone()).await;
    let names: Vec<String> = writers
        .streams
        .iter()
        .map(|s| s.lock().unwrap().0.clone())
        .collect();
    let readers = Readers::start(&client, &names, targets);
    tokio::time::sleep(Duration::from_secs(1)).await;

    step(&mut cluster, &writers, &readers, 0, None).await;
    step(&mut cluster, &writers, &readers, 1, None).await;

    // Node 3 still runs the older build: finalising is refused. Group 0
    // is led from node 1 (this build) so that the refusal is this build's.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = cluster.change_members(0, 0, "lead=1").await;
        assert!(
            status == 200 || Instant::now() < deadline,
            "{status} {body}"
        );
        let (ok, text) = cluster.upgrade_finalize(0);
        assert!(!ok, "finalised with node 3 on the older build: {text}");
        if text.contains("node 3 runs a build that supports cluster version 1, not 2") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    step(&mut cluster, &writers, &readers, 2, None).await;
    // Every node on this build, not finalised: node 1 goes back to the
    // older build and forward again.
    step(&mut cluster, &writers, &readers, 0, Some(old.as_str())).await;
    step(&mut cluster, &writers, &readers, 0, None).await;
    for i in 0..3 {
        let status = cluster.status(i).await.unwrap();
        assert_eq!(status["cluster_version"]["current"], 1, "{status:#}");
    }

    // Finalised: every node reports the new version, logged in group 0 in
    // the new format, and read back after a restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, text) = cluster.upgrade_finalize(1);
        if ok {
            eprintln!("{}", text.trim());
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    step(&mut cluster, &writers, &readers, 2, None).await;
    for i in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster.status(i).await.unwrap()["cluster_version"]["current"] != 2 {
            assert!(Instant::now() < deadline, "node {} not at version 2", i + 1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let errors = writers.errors.clone();
    let written = writers.stop().await;
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    readers.check_and_stop(&written).await;
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert_read_back(&client, &cluster, &[0, 1, 2], &written).await;
}
