//! End-to-end behaviour beyond the conformance suite: limits, health,
//! and restart of every kind of state.

use crate::common;

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
        // A closed stream that stays.
        let closed = server.stream_url("restart/closed");
        common::create_text(&client, &closed, "xyz").await;
        let r = client
            .post(&closed)
            .header("stream-closed", "true")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let server = Server::start(dir.path(), &[]).await;
    let src = server.stream_url("restart/src");
    let fork = server.stream_url("restart/fork");
    // Closure survived: HEAD says so, appends are refused, bytes remain.
    let closed = server.stream_url("restart/closed");
    let head = client.head(&closed).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["stream-closed"], "true");
    let r = client
        .post(&closed)
        .header("content-type", "text/plain")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.headers()["stream-closed"], "true");
    assert_eq!(read_all(&client, &closed).await, b"xyz");
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

/// Reads from `stream` until it closes or `within` passes; returns what
/// arrived and whether the server closed the connection.
async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    within: std::time::Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let reading = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    let closed = tokio::time::timeout(within, reading).await.unwrap_or(false);
    (String::from_utf8_lossy(&received).into_owned(), closed)
}

#[tokio::test]
async fn connections_that_send_no_whole_request_in_time_are_closed() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--request-read-timeout-ms", "300"]).await;
    let addr = server.addr();
    let within = std::time::Duration::from_secs(5);

    // Silent from the start.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (received, closed) = read_until_closed(&mut silent, within).await;
    assert!(closed && received.is_empty(), "{received:?}");

    // Idle after one answered request on a kept-alive connection.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(format!("GET /health HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (received, closed) = read_until_closed(&mut idle, within).await;
    assert!(closed, "still open: {received:?}");
    assert!(received.starts_with("HTTP/1.1 200"), "{received:?}");

    // Stopped in the middle of a request's body.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head =
        "POST /v1/stream/s HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\nabc";
    stalled.write_all(head.as_bytes()).await.unwrap();
    let (received, closed) = read_until_closed(&mut stalled, within).await;
    assert!(closed, "still open: {received:?}");
}

#[tokio::test]
async fn appends_on_one_connection_are_answered_in_turn_whichever_path_reads_them() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("turns");
    common::create_text(&client, &url, "").await;
    let addr = server.addr();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let sized = |body: &str| {
        format!(
            "POST /v1/stream/turns HTTP/1.1\r\nhost: {addr}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    // Two appends with a length (served without hyper), then a chunked one
    // (hyper from then on), then a sized one again, closing.
    let mut answers = String::new();
    for request in [
        sized("one,"),
        sized("two,"),
        format!("POST /v1/stream/turns HTTP/1.1\r\nhost: {addr}\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n6\r\nthree,\r\n0\r\n\r\n"),
        sized("four").replace("HTTP/1.1\r\n", "HTTP/1.1\r\nconnection: close\r\n"),
    ] {
        conn.write_all(request.as_bytes()).await.unwrap();
        // One answer at a time, so no request is pipelined.
        let mut answer = Vec::new();
        while !answer.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            let n = tokio::io::AsyncReadExt::read(&mut conn, &mut byte)
                .await
                .unwrap();
            assert_eq!(n, 1, "closed early after {answers}");
            answer.push(byte[0]);
        }
        answers.push_str(&String::from_utf8_lossy(&answer));
    }
    let (rest, closed) = read_until_closed(&mut conn, std::time::Duration::from_secs(5)).await;
    assert!(closed && rest.is_empty(), "{rest:?}");
    assert_eq!(
        answers.matches("HTTP/1.1 204 No Content").count(),
        4,
        "{answers}"
    );
    let offsets: Vec<&str> = answers
        .lines()
        .filter_map(|l| l.strip_prefix("stream-next-offset: "))
        .collect();
    assert_eq!(offsets.len(), 4, "{answers}");
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    let body = common::get_text(&client, &format!("{url}?offset=-1")).await;
    assert_eq!(body, "one,two,three,four");
}

/// Sends `request` on a connection of its own and returns the answer as
/// status line, header lines sorted (without `date`) and body: two
/// answers that say the same compare equal.
async fn exchange(addr: &str, request: Vec<u8>) -> String {
    use tokio::io::AsyncWriteExt;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(&request).await.unwrap();
    let (received, closed) = read_until_closed(&mut conn, std::time::Duration::from_secs(10)).await;
    assert!(closed, "connection: close was not honoured: {received:?}");
    let (head, body) = received.split_once("\r\n\r\n").expect("a whole head");
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("").to_string();
    let mut headers: Vec<String> = lines
        .map(str::to_ascii_lowercase)
        .filter(|l| !l.starts_with("date:"))
        .collect();
    headers.sort();
    format!("{status}\n{}\n\n{body}", headers.join("\n"))
}

/// `answer` with the incarnation half of every offset token zeroed.
fn without_incarnations(answer: &str) -> String {
    let mut out = answer.as_bytes().to_vec();
    let is_digit = |b: Option<&u8>| b.is_some_and(u8::is_ascii_digit);
    for i in 16..out.len().saturating_sub(16) {
        let token = out[i] == b'_'
            && out[i - 16..i].iter().all(u8::is_ascii_digit)
            && out[i + 1..i + 17].iter().all(u8::is_ascii_digit)
            && !is_digit(i.checked_sub(17).and_then(|j| out.get(j)))
            && !is_digit(out.get(i + 17));
        if token {
            out[i - 16..i].fill(b'0');
        }
    }
    String::from_utf8(out).expect("ASCII in, ASCII out")
}

#[tokio::test]
async fn appends_answer_alike_whether_or_not_hyper_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--max-append-bytes", "64"]).await;
    let client = reqwest::Client::new();
    let addr = server.addr();
    // (extra header lines, body) of each append, in order.
    let producer = |epoch: u64, seq: u64| {
        format!("producer-id: p\r\nproducer-epoch: {epoch}\r\nproducer-seq: {seq}\r\n")
    };
    let text = "content-type: text/plain\r\n".to_string();
    let cases: Vec<(String, Vec<u8>)> = vec![
        (text.clone(), b"plain,".to_vec()),
        (String::new(), b"no content type".to_vec()),
        ("content-type: application/json\r\n".into(), b"[1]".to_vec()),
        (
            "content-type: Text/Plain; charset=utf-8\r\n".into(),
            b"same type,".to_vec(),
        ),
        (text.clone(), Vec::new()),
        (text.clone(), vec![b'x'; 65]),
        (format!("{text}{}", producer(0, 0)), b"p0,".to_vec()),
        (format!("{text}{}", producer(0, 0)), b"p0,".to_vec()),
        (format!("{text}{}", producer(0, 5)), b"gap,".to_vec()),
        (format!("{text}{}", producer(1, 0)), b"p1,".to_vec()),
        (format!("{text}{}", producer(0, 1)), b"stale,".to_vec()),
        (format!("{text}producer-id: p\r\n"), b"partial,".to_vec()),
        (
            format!("{text}producer-id: p\r\nproducer-epoch: 01\r\nproducer-seq: 1\r\n"),
            b"x".to_vec(),
        ),
        (format!("{text}stream-seq: b\r\n"), b"seq b,".to_vec()),
        (format!("{text}stream-seq: a\r\n"), b"seq a,".to_vec()),
        (
            format!("{text}stream-seq: \u{80}\r\n"),
            b"obs-text,".to_vec(),
        ),
        (format!("{text}stream-closed: maybe\r\n"), b"x".to_vec()),
        (format!("{text}stream-closed: true\r\n"), b"last".to_vec()),
        (text.clone(), b"after close,".to_vec()),
        (format!("{text}stream-closed: true\r\n"), Vec::new()),
    ];
    for name in ["direct%20one", "hyper%20one"] {
        common::create_text(&client, &server.stream_url(name), "").await;
    }
    let mut statuses = std::collections::BTreeSet::new();
    for (index, (headers, body)) in cases.iter().enumerate() {
        let head = |name: &str, framing: &str| {
            let mut request =
                format!("POST /v1/stream/{name} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n")
                    .into_bytes();
            // Latin-1, so that a header can carry a byte past ASCII.
            request.extend(headers.chars().map(|c| c as u8));
            request.extend_from_slice(framing.as_bytes());
            request
        };
        // A sized body: read and answered without hyper.
        let mut sized = head(
            "direct%20one",
            &format!("content-length: {}\r\n\r\n", body.len()),
        );
        sized.extend_from_slice(body);
        // A chunked body: the connection goes to hyper.
        let mut chunked = head("hyper%20one", "transfer-encoding: chunked\r\n\r\n");
        if !body.is_empty() {
            chunked.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            chunked.extend_from_slice(body);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        // The two streams differ in their incarnation only.
        let direct = without_incarnations(&exchange(&addr, sized).await);
        let through_hyper = without_incarnations(&exchange(&addr, chunked).await);
        assert_eq!(direct, through_hyper, "case {index}: {headers:?}");
        statuses.insert(direct[9..12].to_string());
    }
    // Paths the direct path leaves to the general one (a reserved `$`
    // segment percent-encoded, a fragment, a query): the same answers
    // either way.
    for target in [
        "/v1/stream/direct%20one%2F%24snapshot",
        "/v1/stream/direct%20one#fragment",
        "/v1/stream/direct%20one?offset=-1",
    ] {
        let post = |framing: &str, body: &str| {
            format!(
                "POST {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: text/plain\r\n{framing}\r\n{body}"
            )
            .into_bytes()
        };
        let sized = exchange(&addr, post("content-length: 1\r\n", "x")).await;
        let chunked = post("transfer-encoding: chunked\r\n", "1\r\nx\r\n0\r\n\r\n");
        assert_eq!(sized, exchange(&addr, chunked).await, "{target}");
    }
    // The cases cover every kind of answer an append gets.
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        ["200", "204", "400", "403", "409", "413"]
    );
    for name in ["direct%20one", "hyper%20one"] {
        let body = read_all(&client, &server.stream_url(name)).await;
        assert_eq!(body, b"plain,same type,p0,p1,seq b,last", "{name}");
    }
}
