//! End-to-end behaviour beyond the conformance suite: limits, health,
//! and restart of every kind of state.

mod common;

use common::{read_all, Server};

#[tokio::test]
async fn limits_health_and_bad_input_get_clear_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--max-append-bytes", "1024"]).await;
    let client = reqwest::Client::new();

    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let url = server.stream_url("limits");
    common::create_text(&client, &url, "").await;
    let r = client
        .post(&url)
        .header("content-type", "text/plain")
        .body(vec![b'x'; 1025])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert!(r.text().await.unwrap().contains("1024"));
    common::append_text(&client, &url, &"x".repeat(1024)).await;

    let long = server.stream_url(&"n".repeat(1025));
    let r = client.put(&long).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let reason = r.text().await.unwrap();
    assert!(
        reason.contains("1024") && reason.lines().count() == 1,
        "{reason}"
    );

    let r = client
        .get(format!("{url}?offset=garbage"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client
        .put(&url)
        .header("stream-ttl", "1e3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client
        .get(format!("{}/elsewhere", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn closure_producers_forks_and_deletes_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    {
        let server = Server::start(dir.path(), &[]).await;
        let src = server.stream_url("restart/src");
        client
            .put(&src)
            .header("content-type", "text/plain")
            .body("abc")
            .send()
            .await
            .unwrap();
        let r = produce(&client, &src, ("p", 2, 0), "def").await;
        assert_eq!(r.status(), 200);
        let fork = server.stream_url("restart/fork");
        let r = client
            .put(&fork)
            .header("stream-forked-from", "/v1/stream/restart/src")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        client
            .post(&src)
            .header("stream-closed", "true")
            .send()
            .await
            .unwrap();
        assert_eq!(client.delete(&src).send().await.unwrap().status(), 204);
    }
    let server = Server::start(dir.path(), &[]).await;
    let src = server.stream_url("restart/src");
    let fork = server.stream_url("restart/fork");
    // Soft-deleted: its fork still reads its bytes.
    assert_eq!(client.head(&src).send().await.unwrap().status(), 410);
    assert_eq!(read_all(&client, &fork).await, b"abcdef");
    client.delete(&fork).send().await.unwrap();
    assert_eq!(client.head(&src).send().await.unwrap().status(), 404);

    // Producer state survived: a stale epoch is fenced after restart.
    let other = server.stream_url("restart/producer");
    client
        .put(&other)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(
        produce(&client, &other, ("q", 1, 0), "x").await.status(),
        200
    );
    drop(server);
    let server = Server::start(dir.path(), &[]).await;
    let other = server.stream_url("restart/producer");
    let r = produce(&client, &other, ("q", 0, 1), "zombie").await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["producer-epoch"], "1");
    let dup = produce(&client, &other, ("q", 1, 0), "x").await;
    assert_eq!(dup.status(), 204, "the retry is a duplicate after restart");
}

/// An append by an idempotent producer `(id, epoch, seq)`.
async fn produce(
    client: &reqwest::Client,
    url: &str,
    (id, epoch, seq): (&str, u64, u64),
    body: &'static str,
) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "text/plain")
        .header("producer-id", id)
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_full_disk_fails_writes_with_507_and_acknowledges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The log's first segment is /dev/full: every write fails with ENOSPC.
    std::fs::create_dir_all(dir.path().join("log")).unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.path().join("log/00000000000000000000.log"))
        .unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("doomed");
    let r = client
        .put(&url)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507, "the write could not be made durable");
    assert!(r.text().await.unwrap().contains("storage"));
    // Fail-stop: the log takes no more writes, and nothing was created.
    let r = client
        .put(&url)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    assert_eq!(client.head(&url).send().await.unwrap().status(), 404);
    // Health says why the node takes no writes.
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    assert!(health.text().await.unwrap().contains("storage failed"));
}
