//! Golden data directories: what release 0.1.0's server wrote, which
//! every later build must serve as it was: the same bytes, content types,
//! next offsets and closed flags (`expected.json`, read back from 0.1.0
//! while it ran), going on taking writes.
//!
//! - `tests/fixtures/0.1.0/single-node/`: log segments, a checkpoint,
//!   tiered chunk objects, checkpoint backups, producer state.
//!   `RUNNEL_WRITE_FIXTURES=1` writes it afresh with the current build
//!   (for a new release only; keep the old one and its test).
//! - `tests/fixtures/0.1.0/cluster/`: the data directories of a 3-node
//!   cluster (Raft logs of two groups in each node's shared log, Raft
//!   snapshots, votes, the cluster id) and their shared store of tiered
//!   chunks. The nodes start on the ports they had (their groups'
//!   memberships name them). `RUNNEL_WRITE_FIXTURES=1` with
//!   `RUNNEL_UPGRADE_FROM` naming release 0.1.0's binary (built by
//!   `scripts/upgrade.sh`) writes it afresh with that binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::Cluster;
use common::Server;

const RELEASE: &str = "0.1.0";

fn fixture_dir() -> PathBuf {
    fixtures().join("single-node")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(RELEASE)
}

/// What a stream held when its release wrote it.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct Recorded {
    name: String,
    content_type: String,
    body: String,
    next_offset: String,
    closed: bool,
}

async fn record(client: &reqwest::Client, server: &Server, name: &str) -> Recorded {
    record_at(client, &server.stream_url(name), name).await
}

async fn record_at(client: &reqwest::Client, url: &str, name: &str) -> Recorded {
    let url = url.to_string();
    let body = String::from_utf8(common::read_all(client, &url).await).unwrap();
    let head = client.head(&url).send().await.unwrap();
    let header = |h: &str| {
        head.headers()
            .get(h)
            .map(|v| v.to_str().unwrap().to_string())
    };
    Recorded {
        name: name.to_string(),
        content_type: header("content-type").unwrap_or_default(),
        body,
        next_offset: header("stream-next-offset").expect("a next offset"),
        closed: header("stream-closed").as_deref() == Some("true"),
    }
}

const NAMES: [&str; 4] = ["text", "events", "closed", "produced"];

/// Small segments, frequent checkpoints, every append tiered at once.
const WRITE_FLAGS: [&str; 12] = [
    "--segment-bytes",
    "1048576",
    "--preallocate-segments",
    "false",
    "--checkpoint-interval-secs",
    "1",
    "--tier-chunk-bytes",
    "1",
    "--tier-max-age-secs",
    "0",
    "--tier-interval-ms",
    "20",
];

/// Writes the streams of [`NAMES`] through `url`: a checkpoint and tiered
/// chunks, then more appends in the log after the checkpoint.
async fn write_streams(client: &reqwest::Client, url: &dyn Fn(&str) -> String) {
    common::create_text(client, &url("text"), "first;").await;
    for word in ["second;", "third;"] {
        common::append_text(client, &url("text"), word).await;
    }
    let json = client
        .put(url("events"))
        .header("content-type", "application/json")
        .body(r#"[{"n":1},{"n":2}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 201);
    common::create_text(client, &url("closed"), "the end").await;
    let close = client
        .post(url("closed"))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert!(close.status().is_success(), "{close:?}");
    common::create_text(client, &url("produced"), "").await;
    for seq in 0..3 {
        common::idempotent_append(client, &url("produced"), 1, seq, &format!("<{seq}>"))
            .await
            .unwrap();
    }
    // A checkpoint and the tiering of what is there, then a log tail.
    tokio::time::sleep(Duration::from_secs(3)).await;
    common::append_text(client, &url("text"), "after the checkpoint;").await;
}

/// Writes the single-node fixture with this build (a graceful stop).
async fn write_fixture(client: &reqwest::Client) {
    let dir = fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let mut server = Server::start(&data, &WRITE_FLAGS).await;
    write_streams(client, &|name| server.stream_url(name)).await;
    let mut recorded = Vec::new();
    for name in NAMES {
        recorded.push(record(client, &server, name).await);
    }
    server.terminate();
    assert!(
        server.exits_within(Duration::from_secs(15)).await,
        "no clean stop"
    );
    let json = serde_json::to_string_pretty(&recorded).unwrap();
    std::fs::write(dir.join("expected.json"), json + "\n").unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_written_by_0_1_0_serves_the_same_streams() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    if std::env::var_os("RUNNEL_WRITE_FIXTURES").is_some() {
        write_fixture(&client).await;
    }
    let fixture = fixture_dir();
    let expected: Vec<Recorded> =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    assert_eq!(expected.len(), NAMES.len());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture.join("data"), &data);
    let server = Server::start(&data, &[]).await;
    for old in &expected {
        assert_eq!(&record(&client, &server, &old.name).await, old);
    }
    // It takes writes, and the producer's sequence goes on where it was.
    common::append_text(&client, &server.stream_url("text"), "and more;").await;
    let text = common::read_all(&client, &server.stream_url("text")).await;
    assert_eq!(
        String::from_utf8(text).unwrap(),
        format!("{}and more;", expected[0].body)
    );
    let repeated =
        common::idempotent_append(&client, &server.stream_url("produced"), 1, 2, "<2>").await;
    assert!(repeated.is_ok(), "{repeated:?}");
    let produced = common::read_all(&client, &server.stream_url("produced")).await;
    assert_eq!(String::from_utf8(produced).unwrap(), "<0><1><2>");
}

/// The HTTP ports of the cluster fixture's nodes (Raft on the next),
/// outside the range tests reserve from and below the kernel's
/// ephemeral ports.
const CLUSTER_PORTS: [u16; 3] = [19_401, 19_403, 19_405];

fn cluster_dir() -> PathBuf {
    fixtures().join("cluster")
}

/// The flags of the cluster fixture's nodes, over the shared store in
/// `dir/objects`.
fn cluster_flags(dir: &Path) -> Vec<String> {
    let store = format!("file://{}", dir.join("objects").display());
    let mut flags: Vec<String> = ["--groups", "2", "--object-store", &store]
        .map(String::from)
        .to_vec();
    flags.extend(WRITE_FLAGS.map(String::from));
    flags
}

/// Writes the cluster fixture with release 0.1.0's binary (`old`): the
/// streams of [`NAMES`] through node 1, what every node serves recorded
/// from node 2, a graceful stop of each node.
async fn write_cluster_fixture(client: &reqwest::Client, old: &str) {
    let dir = cluster_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flags = cluster_flags(&dir);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env = [("RUNNEL_TEST_BINARY", old)];
    let mut cluster = Cluster::start_on_ports(&dir, &CLUSTER_PORTS, &flags, &env).await;
    write_streams(client, &|name| cluster.stream_url(0, name)).await;
    let mut recorded = Vec::new();
    for name in NAMES {
        recorded.push(record_at(client, &cluster.stream_url(1, name), name).await);
    }
    for i in 0..3 {
        cluster.stop(i);
    }
    let json = serde_json::to_string_pretty(&recorded).unwrap();
    std::fs::write(dir.join("expected.json"), json + "\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_written_by_0_1_0_serves_the_same_streams_and_finalises() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    if std::env::var_os("RUNNEL_WRITE_FIXTURES").is_some() {
        let old = std::env::var("RUNNEL_UPGRADE_FROM").expect(
            "the cluster fixture is written by release 0.1.0's binary (RUNNEL_UPGRADE_FROM)",
        );
        write_cluster_fixture(&client, &old).await;
    }
    let fixture = cluster_dir();
    let expected: Vec<Recorded> =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    assert_eq!(expected.len(), NAMES.len());
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    let flags = cluster_flags(dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let cluster = Cluster::start_on_ports(dir.path(), &CLUSTER_PORTS, &flags, &[]).await;
    for i in 0..3 {
        for old in &expected {
            let url = cluster.stream_url(i, &old.name);
            assert_eq!(
                &record_at(&client, &url, &old.name).await,
                old,
                "node {}",
                i + 1
            );
        }
    }
    // It takes writes, and the producer's sequence goes on where it was.
    let text = cluster.stream_url(2, "text");
    common::append_text(&client, &text, "and more;").await;
    assert_eq!(
        String::from_utf8(common::read_all(&client, &text).await).unwrap(),
        format!("{}and more;", expected[0].body)
    );
    let produced = cluster.stream_url(1, "produced");
    let repeated = common::idempotent_append(&client, &produced, 1, 2, "<2>").await;
    assert!(repeated.is_ok(), "{repeated:?}");
    assert_eq!(common::read_all(&client, &produced).await, b"<0><1><2>");
    // Every member runs this build: the cluster, formed by 0.1.0 at
    // version 1, finalises to this build's version by itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for i in 0..3 {
        while cluster.status(i).await.unwrap()["cluster_version"]["current"] != 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "node {} stayed at version 1",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
