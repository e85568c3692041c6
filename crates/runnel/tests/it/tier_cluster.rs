//! Tiering in a 3-node cluster sharing one S3 bucket (moto): a leader that
//! dies between uploading a chunk and committing its reference leaves
//! exactly one reference per range, the same on every replica, and its
//! orphaned object is swept.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::read_all;
use common::s3::Moto;

const BUCKET: &str = "runnel-cluster";
const GROUPS: usize = 4;

/// Tiering status of node `i`, counted now.
async fn tiering(cluster: &Cluster, i: usize) -> Option<serde_json::Value> {
    Some(cluster.status(i).await?["tiering"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_upload_leaves_one_reference_per_range_on_every_replica() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let mut flags = moto.flags(BUCKET, "cluster");
    flags.extend(
        [
            "--groups",
            &GROUPS.to_string(),
            // Streams tier once they hold 4,000 bytes.
            "--tier-chunk-bytes",
            "4000",
            "--tier-max-age-secs",
            "3600",
            "--tier-interval-ms",
            "100",
            "--tier-orphan-grace-secs",
            "1",
            "--tier-sweep-interval-secs",
            "1",
        ]
        .map(String::from),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(dir.path(), 3, &flags).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // A stream whose group node 1 leads, created while nothing tiers.
    let leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
    let name = (0..)
        .map(|i| format!("tiered-{i}"))
        .find(|n| leaders[runnel_engine::placement::stream_group(n, GROUPS)] == 0)
        .unwrap();
    common::create_text(&client, &cluster.stream_url(1, &name), "").await;
    // 100-byte records numbered in order.
    let record = |i: u32| format!("[{i:05}:{}]", "c".repeat(92));
    let mut acked = Vec::new();
    for i in 0..30 {
        common::append_text(&client, &cluster.stream_url(1, &name), &record(i)).await;
        acked.push(i);
    }

    // Node 1 comes back armed: it dies after its first upload's put,
    // before the reference is proposed.
    cluster.kill(0);
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    cluster.set_env(0, &[("RUNNEL_FAILPOINT", "tier-after-put")]);
    cluster.restart(0).await;
    // The group goes back to its preferred leader once node 1 caught up.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
        if leaders[runnel_engine::placement::stream_group(&name, GROUPS)] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 never led the stream's group again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past 4,000 bytes: node 1 uploads and dies.
    for i in 30..50 {
        let r = client
            .post(cluster.stream_url(1, &name))
            .header("content-type", "text/plain")
            .body(record(i))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 204) {
            acked.push(i);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.exited(0) {
        assert!(
            Instant::now() < deadline,
            "node 1 did not reach the failpoint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another node leads now and tiers the range itself.
    cluster.set_env(0, &[]);
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = tiering(&cluster, 1).await;
        if t.is_some_and(|t| t["tiered_chunks"].as_u64() > Some(0)) {
            break;
        }
        assert!(Instant::now() < deadline, "the new leader did not tier");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.restart(0).await;
    cluster.wait_for_convergence(Duration::from_secs(60)).await;

    // Every replica holds the same references (the applied digests, which
    // cover them, agreed) and reads the same bytes.
    let mut counts = Vec::new();
    for i in 0..3 {
        let t = tiering(&cluster, i).await.unwrap();
        counts.push(t["tiered_chunks"].as_u64().unwrap());
        let stored = read_all(&client, &cluster.stream_url(i, &name)).await;
        assert_eq!(stored.len() % 100, 0);
        let numbers: Vec<u32> = stored
            .chunks(100)
            .map(|r| {
                assert_eq!(
                    r,
                    record(String::from_utf8_lossy(&r[1..6]).parse().unwrap()).as_bytes()
                );
                String::from_utf8_lossy(&r[1..6]).parse().unwrap()
            })
            .collect();
        // In order, each once; every acknowledged one there (an append
        // whose answer was lost in the failover may be there too).
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "node {}: {numbers:?}",
            i + 1
        );
        assert!(
            acked.iter().all(|a| numbers.contains(a)),
            "node {}: {numbers:?}",
            i + 1
        );
    }
    assert!(
        counts.iter().all(|c| *c == counts[0] && *c > 0),
        "{counts:?}"
    );
    // The abandoned upload's object is swept; what stays is referenced.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let keys = moto.keys(BUCKET, "cluster/chunks/").await;
        if keys.len() as u64 == counts[0] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} chunk objects, {} referenced: {keys:?}",
            keys.len(),
            counts[0]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
