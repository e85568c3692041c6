//! Malformed and ambiguous requests: the request-smuggling and
//! parser-confusion cases, sent to both request paths (the direct path
//! that serves ordinary requests without hyper, and hyper), which must
//! answer alike: a clean 4xx and a closed (or still consistent)
//! connection for what is ambiguous, the RFC's answer for what is merely
//! unusual, and never a smuggled request served.

use crate::common;

use std::time::Duration;

use common::{read_all, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A first request answered on the direct path: the next request on the
/// connection is read there too.
const DIRECT_FIRST: &[u8] = b"POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 1\r\n\r\nd";
/// A first request with a chunked body: the direct path hands the whole
/// connection to hyper, which reads the next request.
const HYPER_FIRST: &[u8] = b"POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n1\r\nh\r\n0\r\n\r\n";

/// A request that must never be served: if it is, the stream shows it.
const SMUGGLED: &str =
    "POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 8\r\n\r\nSMUGGLED";

/// What a case must get (after the first request's 204).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// This 4xx, then the server closes the connection.
    RefusedAndClosed(u16),
    /// This 4xx; the connection may stay open (its framing is intact).
    Refused(u16),
    /// Served with this status, as the RFC allows.
    Served(u16),
}

/// The status lines a connection received, and whether the server closed
/// it (`false`: still open after the wait).
async fn exchange(addr: &str, bytes: &[u8]) -> (Vec<u16>, bool) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(bytes).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 65536];
    let closed = loop {
        match tokio::time::timeout(Duration::from_millis(1500), conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    let text = String::from_utf8_lossy(&received);
    let statuses = text
        .split("\r\n")
        .filter_map(|line| line.strip_prefix("HTTP/1.").and_then(|rest| rest.get(2..5)))
        .map(|code| code.parse().unwrap())
        .collect();
    (statuses, closed)
}

fn post(headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\n{headers}\r\n{body}"
    )
    .into_bytes()
}

fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    use Expect::*;
    let smuggle_chunked = format!("0\r\n\r\n{SMUGGLED}");
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: 1\r\n")).collect();
    vec![
        // Two framings: which one wins is where smuggling lives.
        ("content-length with transfer-encoding", post("content-length: 5\r\ntransfer-encoding: chunked\r\n", &smuggle_chunked), RefusedAndClosed(400)),
        ("transfer-encoding with content-length", post("transfer-encoding: chunked\r\ncontent-length: 5\r\n", &smuggle_chunked), RefusedAndClosed(400)),
        ("two different lengths", post("content-length: 1\r\ncontent-length: 2\r\n", &format!("zz{SMUGGLED}")), RefusedAndClosed(400)),
        ("a list of lengths", post("content-length: 1, 1\r\n", "z"), RefusedAndClosed(400)),
        ("a signed length", post("content-length: +1\r\n", "z"), RefusedAndClosed(400)),
        ("a negative length", post("content-length: -1\r\n", "z"), RefusedAndClosed(400)),
        ("a hexadecimal length", post("content-length: 0x1\r\n", "z"), RefusedAndClosed(400)),
        ("a length with a space inside", post("content-length: 1 1\r\n", "z"), RefusedAndClosed(400)),
        ("a length past u64", post("content-length: 99999999999999999999999\r\n", "z"), RefusedAndClosed(400)),
        ("a chunk size that is not hex", post("transfer-encoding: chunked\r\n", &format!("zz\r\nab\r\n0\r\n\r\n{SMUGGLED}")), RefusedAndClosed(400)),
        ("a negative chunk size", post("transfer-encoding: chunked\r\n", "-1\r\nab\r\n0\r\n\r\n"), RefusedAndClosed(400)),
        ("transfer-encoding identity", post("transfer-encoding: identity\r\ncontent-length: 1\r\n", "z"), RefusedAndClosed(400)),
        // Chunked last: the body is framed, the coding is refused.
        ("an unsupported transfer coding", post("transfer-encoding: gzip, chunked\r\n", "0\r\n\r\n"), Refused(400)),
        // Broken heads.
        ("obs-fold", post("x-a: b\r\n c\r\ncontent-length: 1\r\n", "z"), RefusedAndClosed(400)),
        ("a bare CR", b"POST /v1/stream/x HTTP/1.1\rhost: a\r\ncontent-length: 1\r\n\r\nz".to_vec(), RefusedAndClosed(400)),
        ("a NUL in a header value", post("x-a: b\0c\r\ncontent-length: 1\r\n", "z"), RefusedAndClosed(400)),
        ("a NUL in the target", b"GET /v1/stream/x\0y HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("a non-ASCII header name", b"GET /v1/stream/x HTTP/1.1\r\nhost: a\r\nx-\xc3\xa9: 1\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("a space before the colon", b"GET /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-length : 0\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("whitespace before the first header", b"GET /v1/stream/x HTTP/1.1\r\n host: a\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("an unknown HTTP version", b"GET /v1/stream/x HTTP/1.2\r\nhost: a\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("an HTTP/0.9 request line", b"GET /v1/stream/x\r\n\r\n".to_vec(), RefusedAndClosed(400)),
        ("a 70 KB header", format!("GET /v1/stream/x HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n", "a".repeat(70_000)).into_bytes(), RefusedAndClosed(431)),
        ("150 headers", format!("GET /v1/stream/x HTTP/1.1\r\nhost: a\r\n{many_headers}\r\n").into_bytes(), RefusedAndClosed(431)),
        // Nothing after a refused request is read.
        ("a request pipelined after a bad one", format!("GET /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-length: x\r\n\r\n{SMUGGLED}").into_bytes(), RefusedAndClosed(400)),
        // RFC 9112 3.2: exactly one Host.
        ("no Host", b"GET /v1/stream/x HTTP/1.1\r\n\r\n".to_vec(), Refused(400)),
        ("two Hosts", b"GET /v1/stream/x HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n".to_vec(), Refused(400)),
        // Targets: no normalisation reaches another stream or a reserved
        // sub-resource.
        ("a percent-encoded slash", b"GET /v1/stream/a%2Fb HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(404)),
        ("a dot-dot segment", b"GET /v1/stream/y/../x HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(404)),
        ("a percent-encoded dot-dot", b"GET /v1/stream/y/%2e%2e/x HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(404)),
        ("a percent-encoded $ segment", b"GET /v1/stream/x/%24snapshot HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(404)),
        ("a non-ASCII target", b"GET /v1/stream/\xc3\xa9 HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(404)),
        ("a lower-case method", b"get /v1/stream/x HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Refused(405)),
        // Unusual but allowed: served as the RFC says.
        ("the same length twice", post("content-length: 1\r\ncontent-length: 1\r\n", "z"), Served(204)),
        ("bare LF line ends", b"POST /v1/stream/x HTTP/1.1\nhost: a\ncontent-type: text/plain\ncontent-length: 1\n\nz".to_vec(), Served(204)),
        ("an absolute-form target", b"GET http://a/v1/stream/x HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(), Served(200)),
        ("a tab inside a value", b"GET /v1/stream/x HTTP/1.1\r\nhost: a\r\nx-a: b\tc\r\n\r\n".to_vec(), Served(200)),
        ("HTTP/1.0 keep-alive", b"GET /health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n".to_vec(), Served(200)),
    ]
}

#[tokio::test]
async fn malformed_requests_get_the_same_clean_answer_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("x");
    common::create_text(&client, &url, "").await;
    let addr = server.addr();
    let mut firsts = String::new();
    for (name, bytes, expect) in cases() {
        let mut answers = Vec::new();
        for (path, first, mark) in [("direct", DIRECT_FIRST, "d"), ("hyper", HYPER_FIRST, "h")] {
            let (statuses, closed) = exchange(&addr, &[first, &bytes[..]].concat()).await;
            assert_eq!(
                statuses.first(),
                Some(&204),
                "{name} ({path}): the first request"
            );
            firsts.push_str(mark);
            if expect == Expect::Served(204) {
                firsts.push('z'); // the case's own append
            }
            let answer = (statuses[1..].to_vec(), closed);
            let ok = match expect {
                Expect::RefusedAndClosed(code) => answer == (vec![code], true),
                Expect::Refused(code) => answer.0 == [code],
                Expect::Served(code) => answer.0 == [code],
            };
            assert!(ok, "{name} ({path}): got {answer:?}, expected {expect:?}");
            answers.push(answer);
        }
        assert_eq!(
            answers[0], answers[1],
            "{name}: the direct path and hyper answer differently"
        );
    }
    // Exactly the appends that were answered 204 are in the stream, in
    // order: no smuggled request was served and no body was misread.
    let held = String::from_utf8(read_all(&client, &url).await).unwrap();
    assert!(
        !held.contains("SMUGGLED"),
        "a smuggled request was served: {held}"
    );
    assert_eq!(held, firsts);
    // And the server still serves.
    let r = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_writer_that_stalls_mid_body_is_cut_off_on_either_path() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--request-read-timeout-ms", "1000"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("x");
    common::create_text(&client, &url, "").await;
    let addr = server.addr();
    for (path, stalled) in [
        // A sized body that never arrives whole: the direct path waits
        // for it.
        ("direct", &b"POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\nabc"[..]),
        // A chunked body that stops after its first chunk: hyper reads it.
        ("hyper", b"POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"),
    ] {
        let started = std::time::Instant::now();
        let (statuses, closed) = tokio::time::timeout(Duration::from_secs(10), async {
            let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
            conn.write_all(stalled).await.unwrap();
            let mut received = Vec::new();
            let _ = conn.read_to_end(&mut received).await;
            let text = String::from_utf8_lossy(&received).to_string();
            (text.lines().next().unwrap_or("").to_string(), true)
        })
        .await
        .unwrap_or_else(|_| panic!("{path}: a stalled body held its connection for 10 s"));
        assert!(closed);
        assert!(
            statuses.is_empty() || statuses.starts_with("HTTP/1.1 408"),
            "{path}: {statuses:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(900), "{path}: cut off early");
    }
    // Nothing of the stalled bodies was appended, and others are served.
    assert_eq!(read_all(&client, &url).await, b"");
}
