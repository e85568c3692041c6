//! The cluster id: a cluster names itself once formed, the same on every
//! node, and nodes of another cluster are refused: added with `runnel
//! ctl node add`, joining with `--join` (a `--cluster-id` other than the
//! cluster's, or a data directory of another cluster), or restarted with
//! a `--cluster-id` other than the one their data directory keeps.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::membership::{ctl_node_add, serve_joining};

/// The cluster id every running node of `cluster` reports, once they
/// all report the same one.
async fn agreed_id(cluster: &Cluster) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut ids = Vec::new();
        for i in cluster.running() {
            let status = cluster.status(i).await;
            ids.push(status.and_then(|s| s["cluster_id"].as_str().map(str::to_string)));
        }
        if let Some(Some(id)) = ids.first() {
            if ids.iter().all(|other| other.as_ref() == Some(id)) {
                return id.clone();
            }
        }
        assert!(Instant::now() < deadline, "no agreed cluster id: {ids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_another_cluster_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut prod = Cluster::start(&dir.path().join("prod"), 3, &["--groups", "3"]).await;
    let prod_id = agreed_id(&prod).await;
    assert!(prod_id.starts_with("rc-"), "a random id: {prod_id}");
    let mut staging = Cluster::start(
        &dir.path().join("staging"),
        1,
        &["--groups", "3", "--cluster-id", "staging"],
    )
    .await;
    assert_eq!(agreed_id(&staging).await, "staging");

    // A running node of another cluster is not added.
    let staging_addr = format!("127.0.0.1:{}", staging.ports[0]);
    let (ok, _, stderr) = ctl_node_add(1, &staging_addr, &prod.base(0)).await;
    assert!(!ok, "a node of another cluster was added");
    assert!(
        stderr.contains("belongs to cluster \"staging\""),
        "{stderr}"
    );

    // A join that names another cluster is refused before it writes.
    let fresh = dir.path().join("fresh");
    let (ok, stderr) = serve_joining(4, &prod.base(1), &fresh, &["--cluster-id", "staging"]).await;
    assert!(!ok, "a join under another --cluster-id was not refused");
    assert!(
        stderr.contains(&format!(
            "is a member of cluster \"{prod_id}\", not --cluster-id \"staging\""
        )),
        "{stderr}"
    );
    assert!(
        !fresh.exists(),
        "the refused node created its data directory"
    );

    // So is a join over a data directory of another cluster.
    staging.kill(0);
    let staging_dir = dir.path().join("staging").join("n1");
    let (ok, stderr) = serve_joining(4, &prod.base(1), &staging_dir, &[]).await;
    assert!(
        !ok,
        "a join over another cluster's data directory was not refused"
    );
    assert!(
        stderr.contains("the data directory belongs to cluster \"staging\""),
        "{stderr}"
    );

    // A member restarted with another --cluster-id does not start.
    prod.kill(0);
    let out = prod.serve_until_exit(0, &["--cluster-id", "staging"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "belongs to cluster \"{prod_id}\", not --cluster-id \"staging\""
        )),
        "{stderr}"
    );

    // Restarted as it was, it is a member of its cluster again.
    prod.restart(0).await;
    prod.wait_for_leaders(Duration::from_secs(20)).await;
    assert_eq!(agreed_id(&prod).await, prod_id);
}
