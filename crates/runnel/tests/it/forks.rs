//! Forks whose source lives in another group, end to end through HTTP on
//! one node with several groups: the fork copies its source, the source
//! is held (410) while the fork lives, and released when the fork is
//! deleted or expires. (The conformance suite runs every fork test through
//! a 3-node cluster with 3 groups too: `scripts/conformance.sh --cluster`.)

use crate::common;

use std::time::{Duration, Instant};

use common::{read_all, Server};

/// With 4 groups, FNV-1a puts `src` in group 1, `fork-a` in 3, `fork-b`
/// in 2: every fork below crosses groups.
const GROUPS: [&str; 2] = ["--groups", "4"];

async fn put(client: &reqwest::Client, url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut request = client.put(url).body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status().as_u16()
}

async fn status_of(client: &reqwest::Client, url: &str) -> u16 {
    client.head(url).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_across_groups_copies_its_source_and_holds_it_while_it_lives() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &GROUPS).await;
    let client = reqwest::Client::new();
    let (src, fork_a, fork_b) = (
        server.stream_url("src"),
        server.stream_url("fork-a"),
        server.stream_url("fork-b"),
    );
    let text = [("content-type", "text/plain")];
    assert_eq!(put(&client, &src, &text, "hello world").await, 201);
    // The pin sub-resource is for nodes only.
    let pin = client
        .post(format!("{src}/$pin"))
        .header("runnel-pin-token", "mine")
        .send()
        .await
        .unwrap();
    assert_eq!(pin.status(), 403);

    // Fork at offset 5 (after "hello"), then both sides go their own way.
    let at_5 = "0000000000000000_0000000000000005";
    let fork_headers = [
        ("stream-forked-from", "/v1/stream/src"),
        ("stream-fork-offset", at_5),
    ];
    assert_eq!(put(&client, &fork_a, &fork_headers, "").await, 201);
    // An identical re-create is idempotent and takes no second pin.
    assert_eq!(put(&client, &fork_a, &fork_headers, "").await, 200);
    common::append_text(&client, &fork_a, ", fork").await;
    common::append_text(&client, &src, "!").await;
    assert_eq!(read_all(&client, &fork_a).await, b"hello, fork");
    assert_eq!(read_all(&client, &src).await, b"hello world!");
    // Reads from an inherited offset work on the copy.
    let r = client
        .get(format!("{fork_a}?offset=0000000000000000_0000000000000002"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "llo, fork");

    // Refusals come from the source's group as a local fork's would.
    let missing = [("stream-forked-from", "/v1/stream/nothing-here")];
    assert_eq!(put(&client, &fork_b, &missing, "").await, 404);
    let beyond = [
        ("stream-forked-from", "/v1/stream/src"),
        ("stream-fork-offset", "0000000000000000_0000000000000099"),
    ];
    assert_eq!(put(&client, &fork_b, &beyond, "").await, 400);
    let wrong_type = [
        ("stream-forked-from", "/v1/stream/src"),
        ("content-type", "application/json"),
    ];
    assert_eq!(put(&client, &fork_b, &wrong_type, "").await, 409);

    // Deleting the source only soft-deletes it while fork-a holds it.
    assert_eq!(client.delete(&src).send().await.unwrap().status(), 204);
    assert_eq!(status_of(&client, &src).await, 410);
    assert_eq!(put(&client, &src, &text, "").await, 409, "name still held");
    assert_eq!(read_all(&client, &fork_a).await, b"hello, fork");
    // The refused forks above released their pins: deleting fork-a, the
    // last holder, completes the source's deletion before it answers.
    assert_eq!(client.delete(&fork_a).send().await.unwrap().status(), 204);
    assert_eq!(status_of(&client, &src).await, 404);
    assert_eq!(put(&client, &src, &text, "again").await, 201);

    // A fork that expires releases its pin too (by the expiry sweep and
    // the release task, within a few seconds).
    let ttl_fork = [
        ("stream-forked-from", "/v1/stream/src"),
        ("stream-ttl", "1"),
    ];
    assert_eq!(put(&client, &fork_b, &ttl_fork, "").await, 201);
    assert_eq!(client.delete(&src).send().await.unwrap().status(), 204);
    assert_eq!(status_of(&client, &src).await, 410);
    let deadline = Instant::now() + Duration::from_secs(15);
    while status_of(&client, &src).await != 404 {
        assert!(
            Instant::now() < deadline,
            "the expired fork's pin was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status_of(&client, &fork_b).await, 404);
}

#[tokio::test]
async fn a_fork_across_groups_copying_more_than_the_limit_gets_413() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--groups", "4", "--max-fork-copy-bytes", "10"],
    )
    .await;
    let client = reqwest::Client::new();
    let (src, fork_a, fork_b) = (
        server.stream_url("src"),
        server.stream_url("fork-a"),
        server.stream_url("fork-b"),
    );
    let text = [("content-type", "text/plain")];
    assert_eq!(put(&client, &src, &text, "hello world").await, 201); // 11 bytes
    let r = client
        .put(&fork_a)
        .header("stream-forked-from", "/v1/stream/src")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "an 11-byte copy over a 10-byte limit");
    assert!(
        r.text().await.unwrap().contains("10"),
        "the answer names the limit"
    );
    assert_eq!(status_of(&client, &fork_a).await, 404, "no fork was made");
    // A copy within the limit is made.
    let at_10 = [
        ("stream-forked-from", "/v1/stream/src"),
        ("stream-fork-offset", "0000000000000000_0000000000000010"),
    ];
    assert_eq!(put(&client, &fork_b, &at_10, "").await, 201);
    assert_eq!(read_all(&client, &fork_b).await, b"hello worl");
    assert_eq!(client.delete(&fork_b).send().await.unwrap().status(), 204);
    assert_eq!(client.delete(&src).send().await.unwrap().status(), 204);
    // Neither the refused fork nor the deleted one left a pin: the source
    // goes at once instead of staying soft-deleted (410).
    assert_eq!(
        status_of(&client, &src).await,
        404,
        "a pin outlived its fork"
    );
}
