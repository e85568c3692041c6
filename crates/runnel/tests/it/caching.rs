//! What shared caches may keep of each read answer (docs/caching.md): the
//! `Cache-Control` and `Vary` of every kind of answer, with and without
//! access control and under each `--cache-control` mode; offsets that carry
//! the stream's incarnation across delete and re-create; cursors that
//! readers at one position share. `scripts/cache-proxy.sh` runs the same
//! guarantees through a real caching proxy.

use crate::common;

use common::Server;
use reqwest::{Client, Method, Response, StatusCode};

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Sends `method` to `url` with an optional bearer token.
async fn send(client: &Client, method: Method, url: &str, token: Option<&str>) -> Response {
    let mut request = client.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

fn cache(response: &Response) -> String {
    header(response, "cache-control").unwrap_or_else(|| panic!("no Cache-Control: {response:?}"))
}

fn next_offset(response: &Response) -> String {
    header(response, "stream-next-offset").expect("Stream-Next-Offset")
}

/// Creates `url` as a text stream holding `body`; answers its tail.
async fn create(client: &Client, url: &str, body: &str, token: Option<&str>) -> String {
    let mut request = client
        .put(url)
        .header("content-type", "text/plain")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    assert!(r.status().is_success(), "create {url}: {}", r.status());
    next_offset(&r)
}

#[tokio::test]
async fn every_read_answer_says_what_a_cache_may_keep() {
    let dir = tempfile::tempdir().unwrap();
    // Pages of 4 bytes, so that a read can end below the tail.
    let server = Server::start(
        dir.path(),
        &["--max-read-bytes", "4", "--long-poll-timeout-ms", "300"],
    )
    .await;
    let c = Client::new();
    let s = format!("{}/v1/stream/cache-kinds", server.base);
    let tail = create(&c, &s, "abcdefgh", None).await;

    // From -1: the one URL every incarnation shares, and the start moves
    // with trims. Never kept.
    let first = send(&c, Method::GET, &format!("{s}?offset=-1"), None).await;
    assert_eq!(cache(&first), "no-store");
    assert_eq!(header(&first, "vary"), None);
    assert!(header(&first, "etag").is_some());
    // A page from a minted offset that ends below the tail never changes.
    let page = next_offset(&first);
    let r = send(&c, Method::GET, &format!("{s}?offset={page}"), None).await;
    assert_eq!(r.text().await.unwrap(), "efgh");
    let r = send(&c, Method::GET, &format!("{s}?offset={page}"), None).await;
    assert_eq!(next_offset(&r), tail);
    // This one reaches the open tail: it may grow.
    assert_eq!(cache(&r), "public, max-age=1");
    // An offset of zeros names no incarnation: never kept either.
    let zero = format!("{s}?offset={}", tail.replace(|c: char| c != '_', "0"));
    let r = send(&c, Method::GET, &zero, None).await;
    assert_eq!(r.text().await.unwrap(), "abcd");
    let r = send(&c, Method::GET, &zero, None).await;
    assert_eq!(cache(&r), "no-store", "a page from an offset of zeros");
    let minted_zero = format!(
        "{s}?offset={}",
        tail.split_once('_').unwrap().0.to_string() + "_0000000000000000"
    );
    let r = send(&c, Method::GET, &minted_zero, None).await;
    assert_eq!(
        cache(&r),
        IMMUTABLE,
        "a page from a minted offset below the tail"
    );
    // offset=now, HEAD, a long-poll that times out: never kept.
    let r = send(&c, Method::GET, &format!("{s}?offset=now"), None).await;
    assert_eq!(cache(&r), "no-store");
    let r = send(&c, Method::HEAD, &s, None).await;
    assert_eq!(cache(&r), "no-store");
    let waited = format!("{s}?offset={tail}&live=long-poll");
    let r = send(&c, Method::GET, &waited, None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(cache(&r), "no-store");
    // A long-poll that finds data: short, shared by the readers waiting.
    let r = send(
        &c,
        Method::GET,
        &format!("{s}?offset={page}&live=long-poll"),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(cache(&r), "public, max-age=20");
    // SSE is revalidated (the protocol asks for no-cache).
    let r = send(&c, Method::GET, &format!("{s}?offset=now&live=sse"), None).await;
    assert_eq!(cache(&r), "public, no-cache");
    drop(r);

    // Snapshots: one at an offset never changes; the latest does.
    let r = c
        .put(format!("{s}/$snapshot/{page}"))
        .body("state")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(header(&r, "stream-snapshot-offset").unwrap(), page);
    let r = send(&c, Method::GET, &format!("{s}/$snapshot/{page}"), None).await;
    assert_eq!(cache(&r), IMMUTABLE);
    let r = send(&c, Method::GET, &format!("{s}/$snapshot"), None).await;
    assert_eq!(cache(&r), "public, no-cache");
    let r = send(&c, Method::GET, &format!("{s}/$bootstrap"), None).await;
    assert_eq!(cache(&r), "public, no-cache");

    // The last page of a closed stream never changes either.
    let r = c
        .post(&s)
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("ij")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = send(&c, Method::GET, &format!("{s}?offset={tail}"), None).await;
    assert_eq!(header(&r, "stream-closed").as_deref(), Some("true"));
    assert_eq!(cache(&r), IMMUTABLE);

    // Errors, and everything after a delete, are never kept.
    let r = send(&c, Method::GET, &format!("{s}?offset=junk"), None).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(cache(&r), "no-store");
    assert!(send(&c, Method::DELETE, &s, None)
        .await
        .status()
        .is_success());
    for url in [format!("{s}?offset=-1"), format!("{s}?offset={page}")] {
        let r = send(&c, Method::GET, &url, None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(cache(&r), "no-store");
    }
}

#[tokio::test]
async fn cache_control_modes_and_lifetimes_are_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let off = Server::start(&dir.path().join("off"), &["--cache-control", "off"]).await;
    let private = Server::start(
        &dir.path().join("private"),
        &[
            "--cache-control",
            "private",
            "--cache-tail-max-age-secs",
            "7",
        ],
    )
    .await;
    let c = Client::new();
    for (server, expect) in [(&off, "no-store"), (&private, "private, max-age=7")] {
        let s = format!("{}/v1/stream/modes", server.base);
        let tail = create(&c, &s, "x", None).await;
        let r = send(&c, Method::GET, &format!("{s}?offset={tail}"), None).await;
        assert_eq!(cache(&r), expect);
    }
}

/// The first page from -1 is small while caching is on: it is never
/// cached, and a storm of readers starting there must cost the origin
/// little. The rest comes from minted offsets, which caches keep.
#[tokio::test]
async fn the_first_page_from_the_start_is_small() {
    let dir = tempfile::tempdir().unwrap();
    let cdn = Server::start(&dir.path().join("cdn"), &[]).await;
    let off = Server::start(&dir.path().join("off"), &["--cache-control", "off"]).await;
    let c = Client::new();
    let body = "x".repeat(10_000);
    for (server, first) in [(&cdn, 4096), (&off, 10_000)] {
        let s = format!("{}/v1/stream/big", server.base);
        create(&c, &s, &body, None).await;
        let r = send(&c, Method::GET, &format!("{s}?offset=-1"), None).await;
        let next = next_offset(&r);
        assert_eq!(r.text().await.unwrap().len(), first);
        let r = send(&c, Method::GET, &format!("{s}?offset={next}"), None).await;
        assert_eq!(r.text().await.unwrap().len(), 10_000 - first);
    }
}

/// With access control, `public` only for streams anyone may read.
#[tokio::test]
async fn only_streams_anyone_may_read_are_public() {
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.toml");
    let admin = "cache-admin-token";
    let sha = {
        use sha2::{Digest, Sha256};
        Sha256::digest(admin.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    std::fs::write(
        &auth,
        format!(
            "anonymous_grants = [{{ prefix = \"pub/\", allow = [\"read\"] }}]\n\
             [[tokens]]\nname = \"admin\"\nsha256 = \"{sha}\"\n\
             grants = [{{ prefix = \"\", allow = [\"admin\"] }}]\n"
        ),
    )
    .unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--auth-file", auth.to_str().unwrap()],
    )
    .await;
    let c = Client::new();
    let public = format!("{}/v1/stream/pub/news", server.base);
    let private = format!("{}/v1/stream/team/plans", server.base);
    let public_tail = create(&c, &public, "hello", Some(admin)).await;
    let private_tail = create(&c, &private, "secret", Some(admin)).await;

    for token in [None, Some(admin)] {
        let r = send(
            &c,
            Method::GET,
            &format!("{public}?offset={public_tail}"),
            token,
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(cache(&r), "public, max-age=1", "token {token:?}");
        assert_eq!(header(&r, "vary"), None);
    }
    let start = format!(
        "{}_0000000000000000",
        private_tail.split_once('_').unwrap().0
    );
    for url in [
        format!("{private}?offset={start}"),
        format!("{private}?offset={start}&live=long-poll"),
        format!("{private}?offset=now&live=sse"),
        format!("{private}/$bootstrap"),
    ] {
        let r = send(&c, Method::GET, &url, Some(admin)).await;
        assert_eq!(r.status(), StatusCode::OK, "{url}");
        assert!(cache(&r).starts_with("private,"), "{url}: {}", cache(&r));
        assert_eq!(
            header(&r, "vary").as_deref(),
            Some("Authorization"),
            "{url}"
        );
    }
    let r = send(&c, Method::GET, &format!("{private}?offset=-1"), None).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(cache(&r), "no-store");
}

/// The incarnation before the `_` of a token.
fn incarnation(token: &str) -> u64 {
    token.split_once('_').unwrap().0.parse().unwrap()
}

#[tokio::test]
async fn offsets_carry_the_stream_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let c = Client::new();
    let s = format!("{}/v1/stream/reborn", server.base);
    let old_tail = create(&c, &s, "old bytes", None).await;
    let old = incarnation(&old_tail);
    assert_ne!(old, 0, "minted offsets name their stream: {old_tail}");
    let r = send(&c, Method::GET, &format!("{s}?offset=-1"), None).await;
    assert_eq!(next_offset(&r), old_tail);

    assert!(send(&c, Method::DELETE, &s, None)
        .await
        .status()
        .is_success());
    let new_tail = create(&c, &s, "new bytes", None).await;
    let new = incarnation(&new_tail);
    assert!(new > old, "a later incarnation sorts after: {old} {new}");
    assert!(new_tail > old_tail);
    // The old stream's offsets are refused, whatever position they name
    // (past the new stream's tail too).
    let start = format!("{:016}_{:016}", old, 0);
    let past = format!("{:016}_{:016}", old, 1000);
    for token in [&start, &old_tail, &past] {
        for live in ["", "&live=long-poll", "&live=sse"] {
            let r = send(&c, Method::GET, &format!("{s}?offset={token}{live}"), None).await;
            assert_eq!(r.status(), StatusCode::GONE, "{token}{live}");
            assert_eq!(cache(&r), "no-store");
        }
    }
    let r = c
        .get(format!("{s}?offset=-1&live=sse"))
        .header("last-event-id", &old_tail)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::GONE,
        "Last-Event-ID of the old stream"
    );
    // Its own offsets, and offsets of zeros, read it.
    let r = send(
        &c,
        Method::GET,
        &format!("{s}?offset={:016}_{:016}", new, 4),
        None,
    )
    .await;
    assert_eq!(r.text().await.unwrap(), "bytes");
    let r = send(
        &c,
        Method::GET,
        &format!("{s}?offset={:016}_{:016}", 0, 4),
        None,
    )
    .await;
    assert_eq!(r.text().await.unwrap(), "bytes");

    // A fork reads with its source's offsets (forks share them), and
    // mints its own.
    let fork = format!("{}/v1/stream/reborn-fork", server.base);
    let r = c
        .put(&fork)
        .header("content-type", "text/plain")
        .header("stream-forked-from", "/v1/stream/reborn")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let fork_tail = next_offset(&r);
    assert!(incarnation(&fork_tail) > new);
    let r = send(
        &c,
        Method::GET,
        &format!("{fork}?offset={:016}_{:016}", new, 4),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "bytes");
    // Appends, closes and the listing mint the same incarnation.
    let r = c
        .post(&s)
        .header("content-type", "text/plain")
        .body("!")
        .send()
        .await
        .unwrap();
    assert_eq!(incarnation(&next_offset(&r)), new);
    let listing = c
        .get(format!("{}/v1/streams?prefix=reborn", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let listed = listing["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "reborn")
        .unwrap();
    assert_eq!(
        incarnation(listed["next_offset"].as_str().unwrap()),
        new,
        "{listing}"
    );
}

#[tokio::test]
async fn readers_at_one_position_share_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let c = Client::new();
    let s = format!("{}/v1/stream/cursors", server.base);
    create(&c, &s, "abc", None).await;
    let first = send(&c, Method::GET, &format!("{s}?offset=-1"), None).await;
    let shared: u64 = header(&first, "stream-cursor").unwrap().parse().unwrap();
    // Readers arriving with no cursor, or one behind, get the same cursor
    // for the same position: a cache holds them in one wait.
    for cursor in ["", "&cursor=1", "&cursor=garbage"] {
        let url = format!("{s}?offset=-1&live=long-poll{cursor}");
        let r = send(&c, Method::GET, &url, None).await;
        let got: u64 = header(&r, "stream-cursor").unwrap().parse().unwrap();
        // The interval may have turned in between; never backwards.
        assert!(
            got == shared || got >= shared + 100_000_000,
            "{cursor}: {got} {shared}"
        );
    }
    // A cursor not behind always moves on.
    let ahead = shared + 5_000_000_000;
    let url = format!("{s}?offset=-1&live=long-poll&cursor={ahead}");
    let r = send(&c, Method::GET, &url, None).await;
    let got: u64 = header(&r, "stream-cursor").unwrap().parse().unwrap();
    assert_eq!(got, ahead + 1);
}

/// A long catch-up that reaches the open tail is cut at a 64 KiB boundary
/// below it: the long part is kept for good, only the short rest is
/// fetched again while readers keep coming.
#[tokio::test]
async fn long_reads_at_the_tail_are_cut_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let c = Client::new();
    let s = format!("{}/v1/stream/long", server.base);
    let tail = create(&c, &s, &"y".repeat(200 * 1024), None).await;
    let start = format!("{}_0000000000000000", tail.split_once('_').unwrap().0);
    let r = send(&c, Method::GET, &format!("{s}?offset={start}"), None).await;
    assert_eq!(cache(&r), IMMUTABLE);
    assert_eq!(header(&r, "stream-up-to-date"), None);
    let next = next_offset(&r);
    assert_eq!(r.text().await.unwrap().len(), 3 * 64 * 1024);
    let r = send(&c, Method::GET, &format!("{s}?offset={next}"), None).await;
    assert_eq!(cache(&r), "public, max-age=1");
    assert_eq!(next_offset(&r), tail);
    assert_eq!(r.text().await.unwrap().len(), 200 * 1024 - 3 * 64 * 1024);
}

/// The origin's own `(hits, misses)` of pages read from the log.
async fn page_reads(c: &Client, base: &str) -> (u64, u64) {
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |result: &str| -> u64 {
        let prefix = format!("runnel_read_pages_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
            .parse()
            .unwrap()
    };
    (count("hit"), count("miss"))
}

/// A storm of identical catch-ups, and the long-pollers an append wakes
/// at one position, cost the origin about one read from the log.
#[tokio::test]
async fn readers_of_the_same_bytes_share_one_read_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let c = Client::new();
    let s = format!("{}/v1/stream/storm", server.base);
    let tail = create(&c, &s, &"z".repeat(32 * 1024), None).await;
    let start = format!("{}_0000000000000000", tail.split_once('_').unwrap().0);

    let (hits, misses) = page_reads(&c, &server.base).await;
    let reads = (0..100).map(|_| {
        let (c, url) = (c.clone(), format!("{s}?offset={start}"));
        async move {
            c.get(url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .len()
        }
    });
    let got = futures::future::join_all(reads).await;
    assert!(got.iter().all(|len| *len == 32 * 1024));
    let (hits_after, misses_after) = page_reads(&c, &server.base).await;
    assert!(
        misses_after - misses <= 2,
        "{} reads from the log",
        misses_after - misses
    );
    assert!(hits_after - hits >= 98, "{} shared", hits_after - hits);

    // Long-pollers at the tail, woken by one append.
    let waiting: Vec<_> = (0..50)
        .map(|_| {
            let (c, url) = (c.clone(), format!("{s}?live=long-poll&offset={tail}"));
            tokio::spawn(async move { c.get(url).send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (hits, misses) = page_reads(&c, &server.base).await;
    let r = c
        .post(&s)
        .header("content-type", "text/plain")
        .body("wake")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    for w in waiting {
        assert_eq!(w.await.unwrap(), "wake");
    }
    let (hits_after, misses_after) = page_reads(&c, &server.base).await;
    assert!(
        misses_after - misses <= 3,
        "{} reads from the log",
        misses_after - misses
    );
    assert!(hits_after - hits >= 47, "{} shared", hits_after - hits);
}
