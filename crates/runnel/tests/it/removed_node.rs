//! A node removed for good stays out: `runnel ctl node remove` retires
//! its id once no group has it, so when it is brought back on its old
//! data directory (which still lists it a voter of every group) its
//! peers refuse it. Told so, it marks the data directory, reports itself
//! not ready, and does not start on it again; its id is not given to a
//! node again; the cluster serves throughout.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::membership::{ctl_node, ctl_node_add};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_node_brought_back_on_its_old_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--groups", "3"]).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let stream = cluster.stream_url(0, "kept");
    common::create_text(&client, &stream, "a").await;

    let (ok, stdout, stderr) =
        ctl_node(&["remove", "--node-id", "3", "--target", &cluster.base(0)]).await;
    assert!(ok, "node remove failed: {stderr}");
    assert!(stdout.contains("node 3 retired"), "{stdout}");
    let status = cluster.status(1).await.expect("node 2 answers");
    assert_eq!(status["retired_nodes"], serde_json::json!([3]), "{status}");
    cluster.kill(2);

    // Back on its old data directory, with its old flags.
    cluster.restart(2).await;
    let marker = dir.path().join("n3").join("removed");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = client
            .get(format!("{}/ready", cluster.base(2)))
            .send()
            .await
            .unwrap();
        let unready = ready.status() == 503;
        let body = ready.text().await.unwrap();
        if marker.exists() && unready && body.contains("removed from the cluster") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 3 was not refused: ready says {body:?}, marker {}",
            marker.exists()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Its id is not given out again, even to a running node 3.
    let node3 = format!("127.0.0.1:{}", cluster.ports[2]);
    let (ok, _, stderr) = ctl_node_add(3, &node3, &cluster.base(0)).await;
    assert!(!ok, "a retired id was added again");
    assert!(
        stderr.contains("removed from this cluster for good"),
        "{stderr}"
    );

    // The others served all along.
    for (i, body) in ["b", "c", "d", "e"].iter().enumerate() {
        common::append_text(&client, &cluster.stream_url(i % 2, "kept"), body).await;
    }
    assert_eq!(
        common::get_text(&client, &cluster.stream_url(1, "kept")).await,
        "abcde"
    );

    // Started again on that data directory, it does not start.
    cluster.kill(2);
    let out = cluster.serve_until_exit(2, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {stderr}");
    assert!(
        stderr.contains("node 3 was removed from cluster"),
        "{stderr}"
    );
}
