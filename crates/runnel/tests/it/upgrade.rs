//! A rolling upgrade: a 3-node cluster of an older build (the previous
//! release, `RUNNEL_UPGRADE_FROM`) under idempotent writers has its
//! nodes stopped and started on this build one at a time, then one node
//! rolled back to the older build: no writer sees an error, every copy
//! converges, and every acknowledged append reads back through every
//! node. `scripts/upgrade.sh OLD_REV` builds the older binary from its
//! commit and runs this test; without the older build it cannot run, so
//! it is ignored (reported as such, never as passed) in the ordinary
//! test run.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::writers::{stop_and_check, Writers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the previous release's binary: run scripts/upgrade.sh OLD_REV"]
async fn a_cluster_upgrades_one_node_at_a_time_under_writes_and_rolls_back() {
    let old = std::env::var("RUNNEL_UPGRADE_FROM")
        .expect("RUNNEL_UPGRADE_FROM names the older build's runnel binary");
    assert!(std::path::Path::new(&old).exists(), "{old} is missing");
    let dir = tempfile::tempdir().unwrap();
    let older = [("RUNNEL_TEST_BINARY", old.as_str())];
    let mut cluster = Cluster::start_with_env(dir.path(), 3, &["--groups", "4"], &older).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let targets = (0..3).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "upgraded", 6, targets).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Each node in turn: clients leave it, it stops, starts on this build
    // over its data directory, catches up, and clients come back.
    let steps = [(0, None), (1, None), (2, None), (0, Some(old.as_str()))];
    for (i, binary) in steps {
        writers.drop_target(&cluster.base(i));
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.stop(i);
        match binary {
            Some(old) => cluster.set_env(i, &[("RUNNEL_TEST_BINARY", old)]),
            None => cluster.set_env(i, &[]),
        }
        cluster.restart(i).await;
        cluster.wait_for_leaders(Duration::from_secs(20)).await;
        cluster.wait_until_every_node_votes().await;
        writers.add_target(cluster.base(i));
        let build = if binary.is_some() {
            "the older"
        } else {
            "this"
        };
        eprintln!("node {} runs {build} build", i + 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop_and_check(writers, &client, &cluster, &[0, 1, 2]).await;
}
