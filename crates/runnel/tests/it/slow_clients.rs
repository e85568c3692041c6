//! Clients that hold connections without making progress are cut off
//! within the configured timeouts while others are served: heads sent a
//! byte at a time (on the direct path and on hyper's), connections that
//! send nothing, and a flood of HTTP/2 streams reset as soon as they are
//! opened (the "rapid reset" attack). Stalled bodies and stuck SSE readers
//! are covered in hostile.rs and live.rs.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use runnel_tls::rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a connection that drips `prefix` (a request complete or not)
/// and then the head of another, one byte every 100 ms, never finishing;
/// answers how long until the server closed it.
async fn drip(addr: String, prefix: &'static [u8]) -> Duration {
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    conn.write_all(prefix).await.unwrap();
    let head = b"GET /v1/stream/x?offset=-1 HTTP/1.1\r\nhost: a\r\nx-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut sink = vec![0u8; 4096];
    for byte in head.iter().cycle() {
        if conn.write_all(&[*byte]).await.is_err() {
            break;
        }
        // Drain whatever the server answered to `prefix`; end on close.
        match tokio::time::timeout(Duration::from_millis(100), conn.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            _ => {}
        }
    }
    started.elapsed()
}

/// A connection that sends nothing; answers how long until it was closed.
async fn idle(addr: String) -> Duration {
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let _ = conn.read(&mut byte).await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_idle_connections_are_cut_off_while_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--request-read-timeout-ms", "1000"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("x");
    common::create_text(&client, &url, "").await;
    let mut held = Vec::new();
    for _ in 0..20 {
        // The direct path reads this head.
        held.push(tokio::spawn(drip(server.addr(), b"")));
        // A chunked request first: the connection is hyper's from then on.
        held.push(tokio::spawn(drip(
            server.addr(),
            b"POST /v1/stream/x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n1\r\nc\r\n0\r\n\r\n",
        )));
        held.push(tokio::spawn(idle(server.addr())));
    }
    // Meanwhile an ordinary client is served.
    for n in 0..20 {
        common::append_text(&client, &url, &format!("{n},")).await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Each is closed by the server (a dripping connection is never idle,
    // so only the read timeout ends it), never before its timeout. How
    // soon after is not asserted: load only makes it later.
    for (n, conn) in held.into_iter().enumerate() {
        let lasted = tokio::time::timeout(Duration::from_secs(60), conn)
            .await
            .unwrap_or_else(|_| panic!("connection {n} still open after 60 s (the timeout is 1 s)"))
            .unwrap();
        assert!(
            lasted >= Duration::from_millis(900),
            "connection {n} was cut after {lasted:?}, before its 1 s timeout"
        );
    }
    let read = common::read_all(&client, &url).await;
    assert!(String::from_utf8(read).unwrap().ends_with("19,"));
}

/// An HTTP/2 connection over TLS to `addr`.
async fn h2_connect(
    addr: &str,
    ca: &Path,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let connector = common::tls_connector(ca, &[b"h2"]);
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, connection) = h2::client::handshake(tls).await.unwrap();
    (send, tokio::spawn(connection))
}

/// Floods one HTTP/2 connection with long-polls reset as soon as they
/// are sent, pausing `pause` after each, against a server started with
/// `extra` flags; asserts the server closes that connection before
/// `cut_before` streams and still serves others.
async fn reset_flood_is_cut_off(pause: Option<Duration>, extra: &[&str], cut_before: usize) {
    let ca = common::test_ca(1);
    let dir = tempfile::tempdir().unwrap();
    let mut flags = vec![
        "--tls-cert".to_string(),
        ca.path().join("server.pem").to_str().unwrap().to_string(),
        "--tls-key".to_string(),
        ca.path().join("server.key").to_str().unwrap().to_string(),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let ca_pem = ca.path().join("ca.pem");
    let server = Server::start_tls(dir.path(), &flags, &ca_pem).await;
    let addr = server.base.trim_start_matches("https://").to_string();
    let url = format!("{}?offset=-1&live=long-poll", server.stream_url("flooded"));
    let http = {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&ca_pem).unwrap()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .unwrap()
    };
    let r = http
        .put(server.stream_url("flooded"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let (mut send, connection) = h2_connect(&addr, &ca_pem).await;
    let mut opened = 0;
    let started = Instant::now();
    while opened < 100_000 && started.elapsed() < Duration::from_secs(30) {
        send = match send.ready().await {
            Ok(send) => send,
            Err(_) => break,
        };
        let request = http::Request::get(&url).body(()).unwrap();
        match send.send_request(request, false) {
            Ok((_response, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(_) => break,
        }
        opened += 1;
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the server closed the flooding connection")
        .unwrap();
    // The server says GOAWAY (ENHANCE_YOUR_CALM) or closes the socket;
    // the client may meet the closed socket before it reads the GOAWAY.
    let error = ended.expect_err("the connection ended in an error");
    assert!(
        error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) || error.is_io(),
        "after {opened} streams: {error:?}"
    );
    assert!(
        opened < cut_before,
        "cut off early in the flood, not after {opened} streams"
    );
    // Others are served, over HTTP/2 too.
    let r = http
        .post(server.stream_url("flooded"))
        .header("content-type", "text/plain")
        .body("still here")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (204, reqwest::Version::HTTP_2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_http2_stream_resets_is_cut_off() {
    reset_flood_is_cut_off(None, &[], 10_000).await;
}

/// Paced so that the server accepts every stream before its reset
/// arrives, the flood never trips hyper's limit on streams reset before
/// they are accepted; the budget of cancelled requests cuts it off. The
/// budget is made small and slow to refill, so that the cut does not
/// depend on how fast a loaded machine lets the client go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_flood_of_http2_stream_resets_is_cut_off() {
    let budget = [
        "--http2-cancel-burst",
        "100",
        "--http2-cancels-per-sec",
        "1",
    ];
    reset_flood_is_cut_off(Some(Duration::from_millis(1)), &budget, 1_000).await;
}
