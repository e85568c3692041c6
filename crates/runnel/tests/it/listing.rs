//! `GET /v1/streams`: pages in name order under a prefix, deleted and
//! expired streams left out, and in a cluster every acknowledged create
//! listed by whichever node answers. And the console's files, which use
//! the listing (the console itself is driven in a browser by
//! scripts/console-test.sh).

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::Server;
use serde_json::Value;

async fn page(client: &reqwest::Client, base: &str, query: &str) -> (u16, Value) {
    let r = client
        .get(format!("{base}/v1/streams?{query}"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn names(page: &Value) -> Vec<String> {
    page["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// Follows `next_cursor` from the first page to the last.
async fn all_pages(
    client: &reqwest::Client,
    base: &str,
    prefix: &str,
    limit: usize,
) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let query = format!("prefix={prefix}&limit={limit}&cursor={cursor}");
        let (status, body) = page(client, base, &query).await;
        assert_eq!(status, 200, "{body}");
        let names = names(&body);
        assert!(names.len() <= limit);
        all.extend(names);
        match body["next_cursor"].as_str() {
            Some(next) => cursor = next.replace('/', "%2F"),
            None => return all,
        }
    }
}

#[tokio::test]
async fn pages_list_live_streams_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let mut expected = Vec::new();
    for i in 0..25 {
        let name = format!("room/{i:02}");
        common::create_text(&client, &server.stream_url(&name), "hello").await;
        expected.push(name);
    }
    common::create_text(&client, &server.stream_url("other"), "").await;
    common::create_text(&client, &server.stream_url("room/gone"), "").await;
    let r = client
        .delete(server.stream_url("room/gone"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = client
        .put(server.stream_url("room/expired"))
        .header("stream-ttl", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    assert_eq!(
        all_pages(&client, &server.base, "room%2F", 7).await,
        expected
    );
    let (_, first) = page(&client, &server.base, "prefix=room/&limit=1").await;
    let listed = &first["streams"][0];
    assert_eq!(listed["name"], "room/00");
    assert_eq!(listed["content_type"], "text/plain");
    assert_eq!(listed["size_bytes"], 5);
    assert_eq!(listed["closed"], false);
    assert_eq!(first["next_cursor"], "room/00");
    let (_, everything) = page(&client, &server.base, "limit=1000").await;
    assert_eq!(names(&everything).len(), 26);
    assert_eq!(everything["next_cursor"], Value::Null);
    for bad in ["limit=0", "limit=1001", "limit=x", "nope=1"] {
        assert_eq!(page(&client, &server.base, bad).await.0, 400, "{bad}");
    }
    let r = client
        .post(format!("{}/v1/streams", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test]
async fn any_cluster_node_lists_every_acknowledged_create() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &[]).await;
    let client = reqwest::Client::new();
    let mut expected: Vec<String> = (0..30).map(|i| format!("s/{i:02}")).collect();
    expected.sort();
    for (i, name) in expected.iter().enumerate() {
        common::create_text(&client, &cluster.stream_url(i % 3, name), "x").await;
        // Listed at once by the next node, which may follow the stream's
        // group.
        let listed = all_pages(&client, &cluster.base((i + 1) % 3), "s%2F", 50).await;
        assert_eq!(listed, expected[..=i].to_vec());
    }
}

/// The console's three files come with a policy that runs no script but
/// their own; `--no-console` turns them off.
#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a"), &[]).await;
    let client = reqwest::Client::new();
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let r = client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with(kind));
        let policy = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("script-src 'self'") && policy.contains("default-src 'none'"));
    }
    let r = client
        .get(format!("{}/console/nope.js", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let off = Server::start(&dir.path().join("b"), &["--no-console"]).await;
    let r = client
        .get(format!("{}/console", off.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
