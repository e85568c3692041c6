//! The cluster version gates new formats: a cluster with
//! `--upgrade-finalize manual` stays at version 1 (release 0.1.0's
//! formats) until `runnel ctl upgrade finalize`, which is refused, naming
//! the member, while one says its build supports only version 1 (the
//! test binary's hook, as a member on the older build would); a cluster
//! left to finalise by itself reaches this build's version on its own.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;

/// Waits until every node's status shows cluster version `version`.
async fn wait_for_version(cluster: &Cluster, version: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in cluster.running() {
        loop {
            let status = cluster.status(i).await;
            let current = status
                .as_ref()
                .and_then(|s| s["cluster_version"]["current"].as_u64());
            if current == Some(version) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} stayed at cluster version {current:?}, not {version}",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_finalised_only_once_every_member_supports_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--upgrade-finalize", "manual"]).await;
    let client = reqwest::Client::new();
    // Node 3 is "still on the older build".
    cluster.kill(2);
    cluster.set_env(2, &[("RUNNEL_ANNOUNCE_CLUSTER_VERSION", "1")]);
    cluster.restart(2).await;
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    wait_for_version(&cluster, 1).await;
    let status = cluster.status(0).await.unwrap();
    assert_eq!(status["cluster_version"]["this_build"], 2, "{status:#}");
    assert_eq!(status["cluster_version"]["finalize"], "manual");

    // Refused, naming the member, through any node; nothing changes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, text) = cluster.upgrade_finalize(1);
        assert!(!ok, "finalised with node 3 behind: {text}");
        if text.contains("node 3 runs a build that supports cluster version 1, not 2") {
            assert_eq!(text.trim().lines().count(), 1, "one line: {text}");
            break;
        }
        // The control group's leader may not have heard node 3 yet.
        assert!(
            text.contains("has not been heard from") && Instant::now() < deadline,
            "{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_version(&cluster, 1).await;
    // The cluster serves throughout.
    let url = cluster.stream_url(2, "upgrading");
    common::create_text(&client, &url, "before").await;

    // Node 3 "upgraded": finalising now raises the version everywhere.
    cluster.kill(2);
    cluster.set_env(2, &[]);
    cluster.restart(2).await;
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, text) = cluster.upgrade_finalize(0);
        if ok {
            assert!(text.contains("upgrade finalised"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_version(&cluster, 2).await;
    let (ok, text) = cluster.upgrade_finalize(2);
    assert!(ok && text.contains("already"), "{text}");
    common::append_text(&client, &url, " after").await;
    assert_eq!(common::read_all(&client, &url).await, b"before after");
    // The version is in group 0's state: it survives a restart of all.
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i).await;
    }
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    wait_for_version(&cluster, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_one_build_finalises_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &[]).await;
    wait_for_version(&cluster, 2).await;
    assert_eq!(
        cluster.status(1).await.unwrap()["cluster_version"]["finalize"],
        "auto"
    );
}
