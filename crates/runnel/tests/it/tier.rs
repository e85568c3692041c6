//! Tiered storage end to end, against a real S3-compatible server (moto):
//! reads across the hot/tiered boundary and restarts, a crash at every
//! step of an upload, an outage of the store under write load, deletion
//! of what nothing needs, and a restore from the bucket alone.

use crate::common;

use std::time::{Duration, Instant};

use common::s3::Moto;
use common::{read_all, Server};
use serde_json::Value;

const BUCKET: &str = "runnel-test";

/// Serve flags: tier to `prefix` of the test bucket, plus `extra`.
fn flags(moto: &Moto, prefix: &str, extra: &[&str]) -> Vec<String> {
    let mut flags = moto.flags(BUCKET, prefix);
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

/// Waits until the server's tiering status satisfies `done`.
async fn wait_tiering(
    server: &Server,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let status = server.status().await;
        let tiering = status["tiering"].clone();
        if done(&tiering) {
            return tiering;
        }
        assert!(Instant::now() < deadline, "{what}: {tiering}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Chunk and snapshot objects under `prefix` (not checkpoint backups).
async fn data_objects(moto: &Moto, prefix: &str) -> (usize, usize) {
    let keys = moto.keys(BUCKET, prefix).await;
    let count = |area: &str| {
        keys.iter()
            .filter(|k| k.starts_with(&format!("{prefix}/{area}/")))
            .count()
    };
    (count("chunks"), count("snapshots"))
}

/// Every object the server's state names is in the bucket and nothing
/// else is (after the sweep).
async fn bucket_matches_state(server: &Server, moto: &Moto, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = server.status().await["tiering"].clone();
        let named = (
            n(&status, "tiered_chunks") as usize,
            n(&status, "tiered_snapshots") as usize,
        );
        let queued = n(&status, "objects_queued_for_deletion") as usize;
        let stored = data_objects(moto, prefix).await;
        if stored == named && queued == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "bucket holds {stored:?} (chunks, snapshots), state names {named:?} with {queued} queued"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn append(
    client: &reqwest::Client,
    url: &str,
    ct: &str,
    body: Vec<u8>,
) -> reqwest::StatusCode {
    client
        .post(url)
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .map(|r| r.status())
        .unwrap_or(reqwest::StatusCode::BAD_GATEWAY)
}

/// Reads a JSON stream page by page: every message, in order.
async fn read_json(client: &reqwest::Client, url: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let r = client
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "reading {url} at {offset}");
        let next = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let done = r.headers().get("stream-up-to-date").is_some();
        let page: Vec<Value> = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        out.extend(page);
        if done {
            return out;
        }
        offset = next;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiered_history_reads_back_identically_across_the_boundary_and_restarts() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(
        &moto,
        "reads",
        &[
            "--tier-chunk-bytes",
            "1000",
            "--tier-max-age-secs",
            "0",
            "--tier-interval-ms",
            "100",
            "--max-read-bytes",
            "1000",
        ],
    );
    let client = reqwest::Client::new();
    let mut server = Server::start_with(dir.path(), &flags, &[]).await;
    let (text, json) = (server.stream_url("text"), server.stream_url("json"));
    common::create_text(&client, &text, "").await;
    let r = client
        .put(&json)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut text_expected = Vec::new();
    let mut json_expected = Vec::new();
    for i in 0..300u32 {
        let line = format!("{i}:{}\n", "t".repeat((i % 37) as usize)).into_bytes();
        assert_eq!(
            append(&client, &text, "text/plain", line.clone()).await,
            204
        );
        text_expected.extend(line);
        let messages: Vec<Value> = (0..1 + i % 3)
            .map(|k| serde_json::json!({"i": i, "k": k, "pad": "j".repeat((i % 11) as usize)}))
            .collect();
        let body = serde_json::to_vec(&messages).unwrap();
        assert_eq!(append(&client, &json, "application/json", body).await, 204);
        json_expected.extend(messages);
    }
    // A snapshot in the middle of the JSON stream, at a message boundary.
    let r = client
        .get(format!("{json}?offset=-1"))
        .send()
        .await
        .unwrap();
    let middle = r.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    let r = client
        .put(format!("{json}/$snapshot/{middle}"))
        .header("content-type", "application/json")
        .body(r#"{"state":"at the middle"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let tiering = wait_tiering(&server, "everything tiered", Duration::from_secs(60), |t| {
        t["untiered_bytes"] == 0 && t["tiered_snapshots"] == 1
    })
    .await;
    // Chunks hold at most 1,000 bytes: reads cross many of them.
    assert!(n(&tiering, "tiered_chunks") >= 20, "{tiering}");

    for round in ["tiered", "after a restart"] {
        let (text, json) = (server.stream_url("text"), server.stream_url("json"));
        assert_eq!(read_all(&client, &text).await, text_expected, "{round}");
        assert_eq!(read_json(&client, &json).await, json_expected, "{round}");
        // An offset inside a tiered JSON message is refused, as in the log.
        let inside = format!("0000000000000000_{:016}", 5);
        let r = client
            .get(format!("{json}?offset={inside}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{round}");
        // Bootstrap: the tiered snapshot, then the tail after it.
        let r = client
            .get(format!("{json}/$bootstrap"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{round}");
        assert_eq!(
            r.headers()["stream-snapshot-offset"].to_str().unwrap(),
            middle
        );
        let body = r.bytes().await.unwrap();
        let text_body = String::from_utf8_lossy(&body);
        assert!(
            text_body.contains(r#"{"state":"at the middle"}"#),
            "{round}"
        );
        // A long-poll from the start of tiered history answers at once.
        let r = client
            .get(format!("{text}?offset=-1&live=long-poll"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{round}");
        assert_eq!(&r.bytes().await.unwrap()[..], &text_expected[..1000]);
        if round == "tiered" {
            server.kill();
            server = Server::start_with(dir.path(), &flags, &[]).await;
        }
    }
    bucket_matches_state(&server, &moto, "reads").await;
}

/// Writes appends of `size` bytes to `url` until one fails (the server
/// died); returns what was acknowledged and what was in flight.
async fn write_until_death(
    client: &reqwest::Client,
    url: &str,
    size: usize,
    limit: usize,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut acked = Vec::new();
    for i in 0..limit {
        let mut payload = format!("<{i:08}>").into_bytes();
        payload.resize(size, b'a' + (i % 26) as u8);
        match append(client, url, "text/plain", payload.clone())
            .await
            .as_u16()
        {
            204 => acked.extend(payload),
            _ => return (acked, Some(payload)),
        }
    }
    (acked, None)
}

/// SIGKILL at step `point` of the first upload: after a restart nothing
/// acknowledged is missing, every reference resolves, and objects of the
/// abandoned upload are swept.
async fn crash_during_upload(point: &str, multipart: bool) {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let mut extra = vec![
        "--tier-interval-ms",
        "100",
        "--tier-orphan-grace-secs",
        "1",
        "--tier-sweep-interval-secs",
        "1",
    ];
    if multipart {
        // One 12 MiB chunk, uploaded in 5 MiB parts.
        extra.extend([
            "--tier-chunk-bytes",
            "12582912",
            "--tier-part-bytes",
            "5242880",
            "--tier-max-age-secs",
            "3600",
        ]);
    } else {
        extra.extend(["--tier-chunk-bytes", "2000", "--tier-max-age-secs", "0"]);
    }
    let flags = flags(&moto, point, &extra);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut server = Server::start_with(dir.path(), &flags, &[("RUNNEL_FAILPOINT", point)]).await;
    let url = server.stream_url("s");
    common::create_text(&client, &url, "").await;
    let (size, limit) = if multipart {
        (256 << 10, 200)
    } else {
        (300, 2000)
    };
    let (acked, in_flight) = write_until_death(&client, &url, size, limit).await;
    assert!(
        server.exits_within(Duration::from_secs(30)).await,
        "the server did not reach failpoint {point}"
    );
    assert!(
        !acked.is_empty(),
        "{point}: something was acknowledged first"
    );

    let server = Server::start_with(dir.path(), &flags, &[]).await;
    let url = server.stream_url("s");
    let stored = read_all(&client, &url).await;
    let with_in_flight = [acked.clone(), in_flight.unwrap_or_default()].concat();
    assert!(
        stored == acked || stored == with_in_flight,
        "{point}: {} bytes stored, {} acknowledged",
        stored.len(),
        acked.len()
    );
    wait_tiering(
        &server,
        "tiered after the restart",
        Duration::from_secs(60),
        |t| t["untiered_bytes"].as_u64() < Some(12 << 20) && t["tiered_chunks"].as_u64() > Some(0),
    )
    .await;
    // Everything referenced reads back: no reference to a missing object.
    assert_eq!(
        read_all(&client, &url).await,
        stored,
        "{point}: after tiering"
    );
    bucket_matches_state(&server, &moto, point).await;
    let tiering = server.status().await["tiering"].clone();
    if point == "tier-after-put" {
        assert!(n(&tiering, "orphans_swept") >= 1, "{point}: {tiering}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_put_loses_nothing() {
    crash_during_upload("tier-before-put", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_a_multipart_upload_loses_nothing() {
    crash_during_upload("tier-mid-multipart", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_put_leaves_an_orphan_that_is_swept() {
    crash_during_upload("tier-after-put", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_reference_commits_loses_nothing() {
    crash_during_upload("tier-after-commit", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outlast_a_store_outage_until_the_cap_then_the_backlog_drains() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(
        &moto,
        "outage",
        &[
            "--tier-chunk-bytes",
            "65536",
            "--tier-max-age-secs",
            "0",
            "--tier-interval-ms",
            "100",
            "--max-untiered-bytes",
            "2000000",
            "--object-store-timeout-ms",
            "2000",
            "--cache-bytes",
            "0",
        ],
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let server = Server::start_with(dir.path(), &flags, &[]).await;
    let url = server.stream_url("w");
    common::create_text(&client, &url, "").await;
    let mut acked = Vec::new();
    let mut i = 0u64;
    let payload = |i: u64| format!("<{i:08}:{}>", "p".repeat(990)).into_bytes();
    for _ in 0..100 {
        let p = payload(i);
        assert_eq!(append(&client, &url, "text/plain", p.clone()).await, 204);
        acked.extend(p);
        i += 1;
    }
    wait_tiering(
        &server,
        "tiered before the outage",
        Duration::from_secs(30),
        |t| t["untiered_bytes"] == 0,
    )
    .await;

    moto.pause();
    let paused = Instant::now();
    // Appends go on being acknowledged from the local log, up to the cap
    // (2,000,000 untiered bytes) and no further: bounded by bytes, not by
    // time, so a slow machine only takes longer.
    let before_outage = acked.len();
    let refused = loop {
        let p = payload(i);
        let status = append(&client, &url, "text/plain", p.clone()).await;
        match status.as_u16() {
            204 => {
                acked.extend(p);
                i += 1;
            }
            503 => break paused.elapsed(),
            other => panic!("append during the outage answered {other}"),
        }
        assert!(
            acked.len() - before_outage < 3_000_000,
            "3 MB acknowledged during the outage: the 2 MB backlog cap was not enforced"
        );
    };
    assert!(
        acked.len() - before_outage > 1_900_000,
        "refused after only {} bytes of backlog",
        acked.len() - before_outage
    );
    // ...and the refusal says when to come back.
    let r = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_some());
    // Tiered history cannot be read: 503, never other bytes.
    let r = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let health = server.status().await;
    assert_eq!(health["tiering"]["backlog_full"], true, "{health}");
    // The store stays down for 20 s at least: many rounds of the
    // uploader's 2 s attempts, which must neither give up nor lose a byte.
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(paused.elapsed())).await;
    moto.resume();
    wait_tiering(
        &server,
        "the backlog drains",
        Duration::from_secs(90),
        |t| t["untiered_bytes"] == 0,
    )
    .await;
    assert_eq!(append(&client, &url, "text/plain", payload(i)).await, 204);
    acked.extend(payload(i));
    assert_eq!(read_all(&client, &url).await, acked);
    eprintln!(
        "outage: refused after {refused:?}, {} bytes acknowledged",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_history_leaves_the_bucket_after_the_grace_period() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(
        &moto,
        "gc",
        &[
            "--tier-chunk-bytes",
            "1000",
            "--tier-max-age-secs",
            "0",
            "--tier-interval-ms",
            "100",
            "--tier-gc-grace-secs",
            "1",
        ],
    );
    // The waits below can leave the client idle for as long as the
    // server keeps idle connections (30 s): a pooled connection reused
    // just as the server closes it is reset, so none is kept that long.
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let server = Server::start_with(dir.path(), &flags, &[]).await;
    let (gone, trimmed) = (server.stream_url("gone"), server.stream_url("trimmed"));
    for url in [&gone, &trimmed] {
        common::create_text(&client, url, "").await;
        for i in 0..20 {
            assert_eq!(
                append(&client, url, "text/plain", vec![b'0' + i; 500]).await,
                204
            );
        }
    }
    wait_tiering(&server, "tiered", Duration::from_secs(30), |t| {
        t["untiered_bytes"] == 0
    })
    .await;
    let before = data_objects(&moto, "gc").await.0;
    assert!(before >= 10, "{before} chunks");
    assert_eq!(client.delete(&gone).send().await.unwrap().status(), 204);
    let r = client
        .put(format!(
            "{trimmed}/$retention/0000000000000000_{:016}",
            5000
        ))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "trim: {}", r.status());
    bucket_matches_state(&server, &moto, "gc").await;
    let after = data_objects(&moto, "gc").await.0;
    assert!(
        after < before / 2 + 1,
        "{before} chunks before, {after} after"
    );
    let kept = read_all(&client, &trimmed).await;
    assert_eq!(kept.len(), 5000);
    assert!(kept.iter().all(|b| *b >= b'0' + 10));
    assert_eq!(client.get(&gone).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restored_from_the_bucket_alone_serves_its_tiered_history() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    // Streams tier once they hold 2,000 bytes: the tails below stay local.
    let flags = flags(
        &moto,
        "restore",
        &[
            "--tier-chunk-bytes",
            "2000",
            "--tier-max-age-secs",
            "3600",
            "--tier-interval-ms",
            "100",
            "--tier-backup-interval-secs",
            "1",
        ],
    );
    let client = reqwest::Client::new();
    // Three groups, which is not this machine's default: the restored node
    // must take the backup's count.
    let three_groups = [flags.clone(), vec!["--groups".into(), "3".into()]].concat();
    let mut server = Server::start_with(dir.path(), &three_groups, &[]).await;
    // Eight appends of 250 bytes make one 2,000-byte chunk per stream.
    let mut tiered = Vec::new();
    for s in 0..5 {
        let url = server.stream_url(&format!("r/{s}"));
        common::create_text(&client, &url, "").await;
        let mut content = Vec::new();
        for i in 0..8 {
            let mut p = format!("[{s}:{i}:").into_bytes();
            p.resize(250, b'x');
            assert_eq!(append(&client, &url, "text/plain", p.clone()).await, 204);
            content.extend(p);
        }
        tiered.push(content);
    }
    wait_tiering(&server, "tiered", Duration::from_secs(60), |t| {
        t["untiered_bytes"] == 0 && t["tiered_chunks"] == 5
    })
    .await;
    // A backup that shows every upload.
    wait_tiering(&server, "a current backup", Duration::from_secs(30), |t| {
        t["backup_current"] == true
    })
    .await;
    // Untiered tails, then the disk is lost.
    for s in 0..5 {
        let url = server.stream_url(&format!("r/{s}"));
        assert_eq!(
            append(&client, &url, "text/plain", b"lost tail".to_vec()).await,
            204
        );
    }
    server.kill();
    std::fs::remove_dir_all(dir.path()).unwrap();

    // A restore told another group count is refused, and writes nothing.
    let err = failed_restore(dir.path(), &flags, &["--groups", "2"]);
    assert!(err.contains("has 3 groups"), "{err}");
    assert!(!dir.path().join("checkpoint").exists());

    // An empty data directory with a backup in the bucket restores itself,
    // with the backup's group count.
    let server = Server::start_with(dir.path(), &flags, &[]).await;
    let meta = std::fs::read_to_string(dir.path().join("runnel.meta")).unwrap();
    assert!(meta.contains("groups = 3"), "{meta}");
    for (s, content) in tiered.iter().enumerate() {
        let url = server.stream_url(&format!("r/{s}"));
        assert_eq!(&read_all(&client, &url).await, content, "stream {s}");
        // The stream takes appends again where its history ends.
        assert_eq!(
            append(&client, &url, "text/plain", b"after".to_vec()).await,
            204
        );
        assert!(read_all(&client, &url).await.ends_with(b"after"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_data_directory_that_holds_data() {
    let moto = Moto::start().await;
    moto.bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(&moto, "refuse", &[]);
    drop(Server::start_with(dir.path(), &flags, &[]).await);
    let err = failed_restore(dir.path(), &flags, &[]);
    assert!(err.contains("already holds data"), "{err}");
}

/// Runs `runnel serve --restore` over `dir` with `flags` and `extra`,
/// which must fail; returns what it printed on stderr.
fn failed_restore(dir: &std::path::Path, flags: &[String], extra: &[&str]) -> String {
    let listen = format!("127.0.0.1:{}", common::reserve_ports(1));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["serve", "--restore", "--listen", &listen])
        .args(extra)
        .arg("--data-dir")
        .arg(dir)
        .args(flags)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the restore succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
