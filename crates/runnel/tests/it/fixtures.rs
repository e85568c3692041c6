//! A golden data directory: one that release 0.1.0's server wrote
//! (`tests/fixtures/0.1.0/single-node/`: log segments, a checkpoint,
//! tiered chunk objects, producer state), which every later build must
//! serve as it was: the same bytes, content types, next offsets and
//! closed flags (`expected.json`, read back from 0.1.0 while it ran), and
//! it must go on taking writes. `RUNNEL_WRITE_FIXTURES=1` writes the
//! fixture afresh with the current build (for a new release only; keep
//! the old one and its test).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Server;

const RELEASE: &str = "0.1.0";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(RELEASE)
        .join("single-node")
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
    let url = server.stream_url(name);
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

/// Writes the fixture with this build: streams of each kind, a checkpoint
/// and tiered chunks (tiny thresholds), then more appends in the log
/// after the checkpoint; a graceful stop.
async fn write_fixture(client: &reqwest::Client) {
    let dir = fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let flags = [
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
    let mut server = Server::start(&data, &flags).await;
    let url = |name: &str| server.stream_url(name);
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
