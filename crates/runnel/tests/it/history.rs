//! Snapshots, bootstrap, trimming and State Protocol compaction, end to
//! end through HTTP, including restart.

use crate::common;

use std::time::{Duration, Instant};

use common::Server;
use runnel_core::state_protocol::MaterializedState;

/// Splits a multipart/mixed bootstrap into (part headers, part body).
fn parts(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type
        .split("boundary=")
        .nth(1)
        .expect("multipart boundary")
        .to_string();
    let delimiter = format!("--{boundary}");
    let text = body.to_vec();
    let mut out = Vec::new();
    let mut rest = &text[..];
    while let Some(at) = find(rest, delimiter.as_bytes()) {
        rest = &rest[at + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        rest = &rest[2..]; // CRLF after the delimiter
        let head_end = find(rest, b"\r\n\r\n").expect("part headers end");
        let head = String::from_utf8(rest[..head_end].to_vec()).unwrap();
        rest = &rest[head_end + 4..];
        let next = find(rest, delimiter.as_bytes()).expect("closing delimiter");
        out.push((head, rest[..next - 2].to_vec())); // drop the CRLF before it
        rest = &rest[next..];
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn snapshots_bootstrap_and_trim_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let (snapshot_offset, url_path);
    {
        let server = Server::start(dir.path(), &[]).await;
        let url = server.stream_url("doc/1");
        url_path = "doc/1";
        client
            .put(&url)
            .header("content-type", "application/json")
            .body(r#"[{"op":1},{"op":2}]"#)
            .send()
            .await
            .unwrap();
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body(r#"{"op":3}"#)
            .send()
            .await
            .unwrap();
        snapshot_offset = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        client
            .post(&url)
            .header("content-type", "application/json")
            .body(r#"{"op":4}"#)
            .send()
            .await
            .unwrap();

        let snap_url = format!("{url}/$snapshot/{snapshot_offset}");
        let put = |body: &'static str| {
            client
                .put(&snap_url)
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        assert_eq!(put(r#"{"state":"1-3"}"#).await.unwrap().status(), 201);
        assert_eq!(
            put(r#"{"state":"1-3"}"#).await.unwrap().status(),
            200,
            "identical retry"
        );
        assert_eq!(
            put(r#"{"state":"other"}"#).await.unwrap().status(),
            409,
            "different bytes"
        );
        let bad = client
            .put(format!("{url}/$snapshot/0000000000000000_0000000000000003"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400, "not a message boundary");
        // Names may not use the reserved segments.
        let reserved = client
            .put(server.stream_url("a/$weird/b"))
            .send()
            .await
            .unwrap();
        assert_eq!(reserved.status(), 400);
    }
    let server = Server::start(dir.path(), &[]).await;
    let url = server.stream_url(url_path);

    let latest = client.get(format!("{url}/$snapshot")).send().await.unwrap();
    assert_eq!(latest.status(), 200);
    assert_eq!(
        latest.headers()["stream-snapshot-offset"],
        snapshot_offset.as_str()
    );
    assert_eq!(latest.text().await.unwrap(), r#"{"state":"1-3"}"#);

    let boot = client
        .get(format!("{url}/$bootstrap"))
        .send()
        .await
        .unwrap();
    assert_eq!(boot.status(), 200);
    assert_eq!(
        boot.headers()["stream-snapshot-offset"],
        snapshot_offset.as_str()
    );
    assert_eq!(boot.headers()["stream-up-to-date"], "true");
    let next = boot.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    let content_type = boot.headers()["content-type"].to_str().unwrap().to_string();
    let body = boot.bytes().await.unwrap();
    let p = parts(&content_type, &body);
    assert_eq!(p.len(), 2);
    assert!(p[0].0.contains("application/json"));
    assert_eq!(p[0].1, br#"{"state":"1-3"}"#);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&p[1].1).unwrap(),
        serde_json::json!([{"op":4}])
    );
    // A live read continues from Stream-Next-Offset.
    let r = client
        .get(format!("{url}?offset={next}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "[]");

    // Trim before the snapshot: older reads are gone, the snapshot stays.
    let trim = client
        .put(format!("{url}/$retention/{snapshot_offset}"))
        .send()
        .await
        .unwrap();
    assert_eq!(trim.status(), 204);
    assert_eq!(
        trim.headers()["stream-earliest-offset"],
        snapshot_offset.as_str()
    );
    let old = client
        .get(format!("{url}?offset=0000000000000000_0000000000000000"))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 410);
    assert_eq!(
        old.headers()["stream-earliest-offset"],
        snapshot_offset.as_str()
    );
    let from_start = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(from_start.text().await.unwrap(), r#"[{"op":4}]"#);
    drop(server);

    let server = Server::start(dir.path(), &[]).await;
    let url = server.stream_url(url_path);
    let old = client
        .get(format!("{url}?offset=0000000000000000_0000000000000000"))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 410, "the trim survives restart");
    let del = client
        .delete(format!("{url}/$snapshot/{snapshot_offset}"))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    assert_eq!(
        client
            .get(format!("{url}/$snapshot"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_protocol_streams_bootstrap_from_a_compacted_snapshot() {
    const KEYS: usize = 1_000;
    const UPDATES: usize = 100_000;
    const BATCH: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("state/items");
    let r = client
        .put(&url)
        .header("content-type", "application/json")
        .header("stream-compaction", "state")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let mut log_bytes = 0;
    for batch in 0..UPDATES / BATCH {
        let messages: Vec<String> = (0..BATCH)
            .map(|i| {
                let n = batch * BATCH + i;
                let key = n % KEYS;
                let op = if n < KEYS { "insert" } else if n.is_multiple_of(97) { "delete" } else { "update" };
                format!(
                    r#"{{"type":"item","key":"k{key}","value":{{"n":{n},"label":"item number {key}"}},"headers":{{"operation":"{op}"}}}}"#
                )
            })
            .collect();
        let body = format!("[{}]", messages.join(","));
        log_bytes += body.len();
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }

    // The compactor runs in the background; wait until it covers the tail.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (content_type, body) = loop {
        let boot = client
            .get(format!("{url}/$bootstrap"))
            .send()
            .await
            .unwrap();
        let content_type = boot.headers()["content-type"].to_str().unwrap().to_string();
        let body = boot.bytes().await.unwrap().to_vec();
        let p = parts(&content_type, &body);
        if p[1].1 == b"[]" {
            break (content_type, body);
        }
        assert!(Instant::now() < deadline, "compaction never caught up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "bootstrap {} bytes for a {} byte log ({:.2}%)",
        body.len(),
        log_bytes,
        body.len() as f64 * 100.0 / log_bytes as f64
    );
    assert!(
        body.len() * 50 < log_bytes,
        "bootstrap must be under 2% of the log"
    );

    let mut from_bootstrap = MaterializedState::default();
    for (_, part) in parts(&content_type, &body) {
        from_bootstrap.apply_array(&part).unwrap();
    }
    // Full replay, page by page (each page is one JSON array).
    let mut from_replay = MaterializedState::default();
    let mut offset = "-1".to_string();
    loop {
        let r = client
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .unwrap();
        let done = r.headers().contains_key("stream-up-to-date");
        offset = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        from_replay.apply_array(&r.bytes().await.unwrap()).unwrap();
        if done {
            break;
        }
    }
    assert_eq!(from_bootstrap, from_replay);
    assert!(from_replay.len() < KEYS && from_replay.len() > KEYS / 2);
}
