//! Access control and cluster membership: a node joins a cluster with
//! access control only with a join token that may administer, and such a
//! cluster needs a cluster key for its nodes' own requests.

use crate::auth::{write_auth_file, Caller};
use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use reqwest::Client;

/// `--join` to a cluster with access control needs `--join-token` (or
/// `RUNNEL_JOIN_TOKEN`) holding admin: without one, or with a token that
/// may not administer, the newcomer is refused before it writes anything;
/// with the admin token it becomes a member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_a_guarded_cluster_only_with_an_admin_join_token() {
    use common::membership::serve_joining;
    let dir = tempfile::tempdir().unwrap();
    let auth = write_auth_file(dir.path(), "");
    let auth = auth.to_str().unwrap();
    let admin = Caller::Admin.token().unwrap();
    let mut cluster = Cluster::start_as(
        &dir.path().join("cluster"),
        3,
        &["--auth-file", auth, "--groups", "3"],
        Some(admin),
    )
    .await;

    let refused = dir.path().join("refused");
    let (ok, stderr) = serve_joining(4, &cluster.base(0), &refused, &["--auth-file", auth]).await;
    assert!(!ok && stderr.contains("answered 401"), "no token: {stderr}");
    let reader = Caller::Reader.token().unwrap();
    let (ok, stderr) = serve_joining(
        4,
        &cluster.base(0),
        &refused,
        &["--auth-file", auth, "--join-token", reader],
    )
    .await;
    assert!(
        !ok && stderr.contains("answered 403"),
        "a reader's token: {stderr}"
    );
    let written: Vec<_> = std::fs::read_dir(&refused)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "refused joins wrote {written:?}");

    let joined = cluster
        .start_joining_with_env(1, &[("RUNNEL_JOIN_TOKEN", admin)])
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = cluster.status(0).await;
        let voters = status.as_ref().map(|s| s["groups"][0]["voters"].clone());
        if voters
            .as_ref()
            .and_then(|v| v.as_array())
            .is_some_and(|v| v.iter().any(|id| id == 4))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 4 did not become a voter of group 0: {voters:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A member now: it serves the streams of every group, with the same
    // access rules.
    let client = Client::new();
    let r = client
        .put(cluster.stream_url(joined, "t/joined"))
        .bearer_auth(admin)
        .header("content-type", "text/plain")
        .body("via 4")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = client
        .get(format!(
            "{}?offset=-1",
            cluster.stream_url(joined, "t/joined")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn a_cluster_with_access_control_needs_a_cluster_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, "anonymous_grants = []\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["serve", "--node-id", "1", "--peers"])
        .arg("1=127.0.0.1:1,2=127.0.0.1:3")
        .arg("--auth-file")
        .arg(&path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster_key"), "{err}");
}
