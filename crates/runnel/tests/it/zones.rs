//! Zones: six nodes in three zones of two, replication factor 3. Every
//! group's replicas span the three zones (and group 0's five voters
//! too), so killing both nodes of one zone at once leaves every group a
//! quorum: writers through the other zones see no error, and every
//! acknowledged append reads back through every survivor. (That a
//! placement blind to zones puts quorums in one zone is shown by
//! `placement::tests::six_nodes_in_three_zones_put_every_group_in_three_zones`.)

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::writers::{assert_read_back, Writers};
use runnel_engine::placement::stream_group;

const ZONES: [&str; 6] = ["zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c"];

/// Each group's voters, from every running node's status.
async fn voters_by_group(cluster: &Cluster) -> Vec<Vec<u64>> {
    common::membership::placement(cluster, &cluster.running()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_a_whole_zone_loses_no_quorum_and_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--replication-factor", "3", "--groups", "7"];
    let mut cluster = Cluster::start_in_zones(dir.path(), &ZONES, &flags).await;

    // The cluster records every node's zone (within moments of forming),
    // and each node reports its own.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = cluster.status(3).await.unwrap();
        if status["zones"].as_object().is_some_and(|z| z.len() == 6) {
            break status;
        }
        assert!(Instant::now() < deadline, "zones not recorded: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (i, zone) in ZONES.iter().enumerate() {
        assert_eq!(status["zones"][(i + 1).to_string()], *zone, "{status}");
    }
    assert_eq!(status["zone"], "zone-b");
    assert_eq!(status["quorum_in_one_zone"], serde_json::json!([]));
    // Every group spans the three zones; group 0's five voters hold at
    // most two in a zone.
    let zone_of = |node: u64| ZONES[node as usize - 1];
    for (g, voters) in voters_by_group(&cluster).await.iter().enumerate() {
        let zones: BTreeSet<&str> = voters.iter().map(|v| zone_of(*v)).collect();
        assert_eq!(zones.len(), 3, "group {g}: voters {voters:?}");
        for zone in &zones {
            let here = voters.iter().filter(|v| zone_of(**v) == *zone).count();
            assert!(here <= 2, "group {g}: voters {voters:?}");
        }
    }

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let targets = (0..6).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "zoned", 12, targets).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Zone a goes: its nodes stop taking requests, then die together.
    writers.drop_target(&cluster.base(0));
    writers.drop_target(&cluster.base(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let errors_before = writers.errors.lock().unwrap().len();
    cluster.kill(0);
    cluster.kill(1);
    tokio::time::sleep(Duration::from_secs(4)).await;

    let errors = writers.errors.clone();
    let written = writers.stop().await;
    assert_eq!(
        errors.lock().unwrap()[errors_before..],
        [] as [String; 0],
        "writers through the surviving zones saw errors"
    );
    assert_eq!(errors_before, 0, "writers saw errors before the zone went");
    // Every group has a leader among the survivors.
    cluster.wait_for_leaders(Duration::from_secs(15)).await;
    assert_read_back(&client, &cluster, &[2, 3, 4, 5], &written).await;
}

/// The same six nodes placed without zones: some data group keeps two of
/// its three replicas in "zone a" (nodes 1 and 2), and losing both stops
/// its writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_zones_the_same_loss_takes_groups_down() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--replication-factor", "3", "--groups", "7"];
    let mut cluster = Cluster::start(dir.path(), 6, &flags).await;
    let zone_of = |node: u64| ZONES[node as usize - 1];
    let exposed = voters_by_group(&cluster)
        .await
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, voters)| {
            let in_a = voters.iter().filter(|v| zone_of(**v) == "zone-a").count();
            in_a > voters.len() / 2
        })
        .map(|(g, _)| g)
        .expect("a data group with a quorum in zone a");
    let name = (0..)
        .map(|i| format!("exposed-{i}"))
        .find(|n| stream_group(n, 7) == exposed)
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let url = cluster.stream_url(2, &name);
    common::create_text(&client, &url, "before").await;
    common::append_text(&client, &url, "while zone a is up").await;
    cluster.kill(0);
    cluster.kill(1);
    let answer = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("after")
        .send()
        .await;
    assert!(
        answer.as_ref().map_or(true, |r| !r.status().is_success()),
        "group {exposed} took a write without a quorum: {answer:?}"
    );
}
