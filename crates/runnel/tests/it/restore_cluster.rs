//! A cluster rebuilt from its bucket alone: a 3-node cluster sharing one
//! S3 bucket (moto) is filled and tiered, every data directory is
//! deleted, and three fresh nodes started with `--restore` serve every
//! stream byte for byte up to its tiered history, with the subscription
//! and a new cluster id. Restores that cannot be done are refused with
//! one line and leave the data directory as it was.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::read_all;
use common::s3::Moto;
use serde_json::{json, Value};

const BUCKET: &str = "runnel-restore";
const GROUPS: usize = 4;
const STREAMS: usize = 6;
/// Each stream's tiered history: 8 appends of 250 bytes make one chunk.
const TIERED: usize = 2000;

fn flags(moto: &Moto, prefix: &str) -> Vec<String> {
    flags_with_groups(moto, prefix, GROUPS)
}

fn flags_with_groups(moto: &Moto, prefix: &str, groups: usize) -> Vec<String> {
    let mut flags = moto.flags(BUCKET, prefix);
    flags.extend(
        [
            "--groups",
            &groups.to_string(),
            "--tier-chunk-bytes",
            &TIERED.to_string(),
            "--tier-max-age-secs",
            "3600",
            "--tier-interval-ms",
            "100",
            "--tier-backup-interval-secs",
            "1",
        ]
        .map(String::from),
    );
    flags
}

/// Waits until `done` holds for node `i`'s status.
async fn wait_status(cluster: &Cluster, i: usize, what: &str, done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = cluster.status(i).await {
            if done(&status) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: {what} never happened: {status:#}",
                i + 1
            );
        }
        assert!(Instant::now() < deadline, "node {}: no status", i + 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_ready(client: &reqwest::Client, cluster: &Cluster, i: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = client
            .get(format!("{}/ready", cluster.base(i)))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} never became ready",
            i + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn record(s: usize, i: usize) -> Vec<u8> {
    let mut record = format!("[{s}:{i}:").into_bytes();
    record.resize(250, b'x');
    record
}

fn subscription_url(base: &str) -> String {
    format!("{base}/v1/stream/__ds/subscriptions/keep")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restored_from_its_bucket_alone_serves_every_tiered_byte() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let root = tempfile::tempdir().unwrap();
    let flags = flags(&moto, "cluster");
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let old_dir = root.path().join("old");
    let mut old = Cluster::start(&old_dir, 3, &flag_refs).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // Six streams through every node: a tiered chunk each, then an
    // untiered tail that the backup cannot hold.
    let mut tiered = Vec::new();
    for s in 0..STREAMS {
        let url = old.stream_url(s % 3, &format!("r/{s}"));
        common::create_text(&client, &url, "").await;
        let mut content = Vec::new();
        for i in 0..8 {
            common::append_text(&client, &url, std::str::from_utf8(&record(s, i)).unwrap()).await;
            content.extend(record(s, i));
        }
        common::append_text(&client, &url, "untiered tail").await;
        tiered.push(content);
    }
    common::create_text(&client, &old.stream_url(0, "wakes/r"), "").await;
    let r = client
        .put(subscription_url(&old.base(1)))
        .header("content-type", "application/json")
        .body(json!({"type": "pull-wake", "pattern": "r/*", "wake_stream": "wakes/r"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());

    // Every chunk tiered, then every group backed up as it stands.
    for i in 0..3 {
        wait_status(&old, i, "tiering", |s| {
            s["tiering"]["tiered_chunks"] == STREAMS as u64
        })
        .await;
    }
    for i in 0..3 {
        wait_status(&old, i, "a current backup", |s| {
            s["backups"]["current"] == true && s["backups"]["last_error"].is_null()
        })
        .await;
    }
    let old_id = old.status(0).await.unwrap()["cluster_id"]
        .as_str()
        .unwrap()
        .to_string();
    let backups = moto
        .keys(BUCKET, &format!("cluster/backups/c-{old_id}/"))
        .await;
    assert!(
        (0..GROUPS).all(|g| backups.iter().any(|k| k.contains(&format!("/g{g:04}/")))),
        "every group is backed up: {backups:?}"
    );

    // Every disk lost.
    for i in 0..3 {
        old.kill(i);
    }
    drop(old);
    std::fs::remove_dir_all(&old_dir).unwrap();

    // Three fresh nodes restore from the bucket alone.
    let mut restoring = flag_refs.clone();
    restoring.push("--restore");
    let new = Cluster::start(&root.path().join("new"), 3, &restoring).await;
    for i in 0..3 {
        wait_ready(&client, &new, i).await;
        wait_status(&new, i, "a cluster id", |s| s["cluster_id"].is_string()).await;
    }
    let new_id = new.status(0).await.unwrap()["cluster_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_id, old_id, "the restored cluster has a new id");
    for i in 0..3 {
        wait_status(&new, i, "the end of the restore", |s| {
            s["restore"].is_null()
        })
        .await;
        assert_eq!(new.status(i).await.unwrap()["cluster_id"], new_id.as_str());
    }
    // Every tiered byte, through every node; the untiered tails are gone.
    for (s, content) in tiered.iter().enumerate() {
        for i in 0..3 {
            let url = new.stream_url(i, &format!("r/{s}"));
            assert_eq!(
                &read_all(&client, &url).await,
                content,
                "stream {s} via node {}",
                i + 1
            );
        }
        let url = new.stream_url(s % 3, &format!("r/{s}"));
        common::append_text(&client, &url, "after").await;
        assert!(read_all(&client, &url).await.ends_with(b"after"));
    }
    let r = client
        .get(subscription_url(&new.base(2)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let subscription: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(subscription["pattern"], "r/*", "{subscription:#}");
    // The new cluster backs itself up under its own id.
    let deadline = Instant::now() + Duration::from_secs(30);
    while moto
        .keys(BUCKET, &format!("cluster/backups/c-{new_id}/"))
        .await
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the restored cluster never backed up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `runnel serve --restore` as a one-node cluster over `dir`, run to its
/// exit; its stderr.
fn restore_refused(dir: &Path, flags: &[String], extra: &[&str]) -> String {
    let port = common::reserve_ports(2);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["serve", "--restore", "--node-id", "1", "--peers"])
        .arg(format!("1=127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir)
        .args(flags)
        .args(extra)
        .env("RUNNEL_LOG", "off")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the restore started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_that_cannot_be_done_are_refused_and_change_nothing() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let root = tempfile::tempdir().unwrap();
    let fresh = root.path().join("fresh");

    // A bucket that holds no cluster backup.
    let err = restore_refused(&fresh, &flags(&moto, "empty"), &[]);
    assert!(err.contains("holds no cluster backup"), "{err}");
    assert!(
        !fresh.exists(),
        "the refused restore wrote {}",
        fresh.display()
    );

    // A one-node cluster backs up its groups.
    let flags = flags(&moto, "refusals");
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(&root.path().join("old"), 1, &flag_refs).await;
    let client = reqwest::Client::new();
    common::create_text(&client, &cluster.stream_url(0, "a"), "x").await;
    wait_status(&cluster, 0, "a current backup", |s| {
        s["backups"]["current"] == true && s["backups"]["uploaded"].as_u64() >= Some(GROUPS as u64)
    })
    .await;
    let id = cluster.status(0).await.unwrap()["cluster_id"]
        .as_str()
        .unwrap()
        .to_string();

    let eight_groups = flags_with_groups(&moto, "refusals", 8);
    let cases: [(&[String], &[&str], &str); 3] = [
        (
            &flags,
            &["--restore-from", "nope"],
            "holds no backup of that cluster",
        ),
        (
            &flags,
            &["--cluster-id", &id],
            "is the id of the cluster being restored",
        ),
        (&eight_groups, &[], "had 4 groups"),
    ];
    for (flags, extra, expected) in cases {
        let err = restore_refused(&fresh, flags, extra);
        assert!(err.contains(expected), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!fresh.exists(), "{extra:?} wrote {}", fresh.display());
    }

    // A data directory that holds data.
    cluster.kill(0);
    let err = cluster.serve_until_exit(0, &["--restore"]);
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(err.contains("already holds data"), "{err}");
}
