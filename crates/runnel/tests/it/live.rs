//! Live tails under stress: SSE keepalives, forced reconnects, resumption
//! by Last-Event-ID, slow consumers cut off without slowing writers, the
//! live-reader limit, and no memory left behind by connection churn.

use crate::common;

use std::time::{Duration, Instant};

use common::Server;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

/// Reads an SSE response for `window`, returning everything received and
/// whether the server ended the stream.
async fn read_for(response: reqwest::Response, window: Duration) -> (String, bool) {
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + window;
    loop {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Some(Err(_))) | Ok(None) => return (text, true),
            Err(_) => return (text, false),
        }
    }
}

/// A new SSE read of `url` from its tail.
async fn sse_from_now(client: &reqwest::Client, url: &str) -> reqwest::Response {
    client
        .get(format!("{url}?offset=now&live=sse"))
        .send()
        .await
        .unwrap()
}

/// Sends a bare `GET target` head on a raw connection, whose reading the
/// test controls.
async fn send_get(stream: &mut tokio::net::TcpStream, addr: &str, target: &str) {
    let head = format!("GET {target} HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
}

#[tokio::test]
async fn sse_sends_keepalives_and_closes_after_its_maximum_duration() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--sse-keepalive-ms", "100", "--sse-max-duration-ms", "700"],
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.stream_url("keepalive");
    common::create_text(&client, &url, "").await;
    let r = sse_from_now(&client, &url).await;
    assert_eq!(r.status(), 200);
    // Nothing else ends this stream: the client reads until the server
    // closes it (a generous window, for a loaded machine).
    let (text, ended) = read_for(r, Duration::from_secs(30)).await;
    assert!(
        ended,
        "the server closes the connection after its maximum duration"
    );
    assert!(text.matches(": keepalive").count() >= 3, "{text}");
    assert!(text.contains("\"upToDate\":true"));
}

/// Streams in different groups can have the same id on one node (ids are
/// counted per group): SSE readers of each, at the same position, must
/// each get their own stream's events, never another's from the shared
/// render cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_of_streams_in_different_groups_get_only_their_own_events() {
    const STREAMS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--groups", "4"]).await;
    let client = reqwest::Client::new();
    let names: Vec<String> = (0..STREAMS).map(|i| format!("own-{i}")).collect();
    for name in &names {
        common::create_text(&client, &server.stream_url(name), "").await;
    }
    let mut readers = Vec::new();
    for name in &names {
        let r = client
            .get(format!("{}?offset=-1&live=sse", server.stream_url(name)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        readers.push(tokio::spawn(read_for(r, Duration::from_secs(3))));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in &names {
        common::append_text(&client, &server.stream_url(name), &format!("<{name}>")).await;
    }
    for (name, reader) in names.iter().zip(readers) {
        let (text, _) = reader.await.unwrap();
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|d| d.starts_with('<'))
            .collect();
        assert_eq!(
            data,
            [format!("<{name}>")],
            "the SSE reader of {name} got {text:?}"
        );
    }
}

#[tokio::test]
async fn sse_resumes_from_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("resume");
    common::create_text(&client, &url, "first-part").await;
    let first = client
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    let (text, _) = read_for(first, Duration::from_millis(300)).await;
    assert!(text.contains("data:first-part"));
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .expect("control events carry an id")
        .to_string();
    client
        .post(&url)
        .header("content-type", "text/plain")
        .body("second-part")
        .send()
        .await
        .unwrap();
    // The browser reconnects with its original URL and the last event id.
    let again = client
        .get(format!("{url}?offset=-1&live=sse"))
        .header("last-event-id", id)
        .send()
        .await
        .unwrap();
    let (text, _) = read_for(again, Duration::from_millis(300)).await;
    assert!(text.contains("data:second-part"), "{text}");
    assert!(!text.contains("first-part"), "{text}");
}

#[tokio::test]
async fn a_reader_that_never_reads_is_cut_off_and_writers_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--write-stall-timeout-ms", "300", "--max-live-readers", "1"],
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.stream_url("slow");
    common::create_text(&client, &url, "").await;

    // A client that sends the request and then never reads a byte.
    let addr = server.addr();
    let mut stuck = tokio::net::TcpStream::connect(&addr).await.unwrap();
    send_get(&mut stuck, &addr, "/v1/stream/slow?offset=now&live=sse").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The only live-reader slot is taken.
    let refused = sse_from_now(&client, &url).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));

    // The writer is never held back by the stuck reader.
    let chunk = "x".repeat(1 << 20);
    for _ in 0..40 {
        common::append_text(&client, &url, &chunk).await;
    }
    // Once the stuck reader's buffers are full it is cut off, and its slot
    // serves someone else.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = sse_from_now(&client, &url).await;
        if r.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stuck reader was never cut off"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(stuck);
}

#[tokio::test]
async fn connection_churn_leaves_no_memory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("churn");
    common::create_text(&client, &url, "hello").await;
    let cycle = |n: usize| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            for _ in 0..n {
                let r = client
                    .get(format!("{url}?offset=-1&live=sse"))
                    .send()
                    .await
                    .unwrap();
                let mut body = r.bytes_stream();
                // Wait for the first event, then hang up.
                let _ = body.next().await;
            }
        }
    };
    let churn = |n: usize| futures::future::join_all((0..8).map(|_| cycle(n / 8)));
    churn(1_000).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server.rss_bytes();
    churn(8_000).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = server.rss_bytes();
    let grown = after.saturating_sub(before);
    eprintln!("RSS before {before} after {after} bytes over 8000 SSE connect/disconnect cycles");
    // A leak of even 1 KiB per connection would show as 8 MB.
    assert!(
        grown < 4 << 20,
        "RSS grew by {grown} bytes over 8000 cycles"
    );
}

/// The budget is 16 KiB of server memory per idle SSE reader
/// (measured at 10,000 by `bench/idle-sse-memory.py`); 2,000 here. The
/// direct path keeps a reader near 3.5 KiB, and the bound is 6 KiB so that
/// a regression shows: holding the application's future inline in the
/// connection task once made it 8 KiB.
#[tokio::test]
async fn idle_sse_readers_cost_under_6_kib_each() {
    assert_idle_sse_readers_cost_under_6_kib(false).await;
}

/// Browsers reuse kept-alive connections: an SSE read that follows a
/// catch-up read on the same connection costs as little.
#[tokio::test]
async fn idle_sse_readers_after_a_read_on_their_connection_cost_under_6_kib_each() {
    assert_idle_sse_readers_cost_under_6_kib(true).await;
}

/// Growth of the server's resident memory per idle SSE reader, over 2,000
/// readers on raw connections, must stay under 6 KiB; with `read_first`,
/// each connection first carries a catch-up read of the (empty) stream.
async fn assert_idle_sse_readers_cost_under_6_kib(read_first: bool) {
    raise_open_file_limit();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("idle");
    common::create_text(&client, &url, "").await;
    let addr = server.addr();
    let open = |n: usize| {
        let addr = addr.clone();
        async move {
            let mut held = Vec::with_capacity(n);
            for _ in 0..n {
                let mut reader = tokio::net::TcpStream::connect(&addr).await.unwrap();
                if read_first {
                    send_get(&mut reader, &addr, "/v1/stream/idle?offset=-1").await;
                    // The stream is empty: the answer ends with its head.
                    let mut answer = Vec::new();
                    while !answer.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8; 256];
                        let n = tokio::io::AsyncReadExt::read(&mut reader, &mut byte)
                            .await
                            .unwrap();
                        assert!(n > 0, "connection closed after the catch-up read");
                        answer.extend_from_slice(&byte[..n]);
                    }
                    assert!(answer.starts_with(b"HTTP/1.1 200"));
                    assert!(!answer.windows(17).any(|w| w == b"connection: close"));
                }
                send_get(&mut reader, &addr, "/v1/stream/idle?offset=now&live=sse").await;
                let mut status = [0u8; 12];
                tokio::io::AsyncReadExt::read_exact(&mut reader, &mut status)
                    .await
                    .unwrap();
                assert_eq!(&status, b"HTTP/1.1 200");
                held.push(reader);
            }
            held
        }
    };
    let _warm = open(200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server.rss_bytes();
    let _idle = open(2_000).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let per_reader = server.rss_bytes().saturating_sub(before) / 2_000;
    eprintln!("{per_reader} bytes of RSS per idle SSE reader (read first: {read_first})");
    assert!(
        per_reader < 6 << 10,
        "{per_reader} bytes per idle SSE reader (read first: {read_first})"
    );
}

fn raise_open_file_limit() {
    // SAFETY: plain getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[tokio::test]
async fn a_long_poll_sees_the_stream_close_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    // A long-poll timeout far past the client's patience: an answer at all
    // means the close woke it.
    let server = Server::start(dir.path(), &["--long-poll-timeout-ms", "600000"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("closing");
    common::create_text(&client, &url, "data").await;
    let waiting = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .get(format!("{url}?offset=now&live=long-poll"))
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let close = client
        .post(&url)
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(close.status(), 204);
    let r = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the long-poll was woken by the close (its timeout is 10 minutes)")
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(r.headers()["stream-closed"], "true");
    assert_eq!(r.headers()["stream-up-to-date"], "true");
}

#[tokio::test]
async fn over_the_memory_limit_new_live_readers_get_503_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    // Any running server holds more than 1 MiB: the limit is exceeded from
    // the start.
    let server = Server::start(dir.path(), &["--max-memory-bytes", "1048576"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("limited");
    common::create_text(&client, &url, "kept").await;
    for live in ["sse", "long-poll"] {
        let r = client
            .get(format!("{url}?offset=now&live={live}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{live}");
        assert_eq!(r.headers()["retry-after"], "5", "{live}");
        assert!(r.text().await.unwrap().contains("memory limit"), "{live}");
    }
    // Catch-up reads and writes carry on.
    let r = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "kept");
    common::append_text(&client, &url, "more").await;

    // A limit the process is under admits them.
    let dir = tempfile::tempdir().unwrap();
    let roomy = Server::start(dir.path(), &["--max-memory-bytes", "1099511627776"]).await;
    let url = roomy.stream_url("roomy");
    common::create_text(&client, &url, "").await;
    let r = sse_from_now(&client, &url).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_long_poller_that_disconnects_frees_its_reader_slot_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--max-live-readers", "1", "--long-poll-timeout-ms", "20000"],
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.stream_url("churn");
    common::create_text(&client, &url, "").await;
    let addr = server.addr();
    for _ in 0..3 {
        let mut poller = tokio::net::TcpStream::connect(&addr).await.unwrap();
        send_get(
            &mut poller,
            &addr,
            "/v1/stream/churn?offset=now&live=long-poll",
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The only slot is taken while the long-poll waits...
        let r = sse_from_now(&client, &url).await;
        assert_eq!(r.status(), 503);
        // ...and free again as soon as its client goes.
        drop(poller);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = sse_from_now(&client, &url).await;
        assert_eq!(r.status(), 200, "the gone long-poller still holds its slot");
        drop(r);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
