//! Live fan-out through the streams' hubs (`docs/live-fan-out.md`): SSE
//! readers that join and leave while events flow get every event once and
//! in order; a reader too slow to take whole events is handed back to its
//! own task, catches up and loses nothing, while the others are written.

use crate::common;
use crate::metrics::{get, scrape};

use std::time::Duration;

use common::Server;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The SSE events of a response body as they arrive: the data payloads
/// concatenated, and the offset of the last control event.
#[derive(Default)]
struct SseText {
    pending: String,
    data: String,
    next_offset: Option<String>,
    controls: usize,
    /// The last whole event was a control event: a client may resume
    /// from `next_offset` without losing or repeating data.
    at_control: bool,
}

impl SseText {
    fn push(&mut self, bytes: &[u8]) {
        self.pending
            .push_str(std::str::from_utf8(bytes).expect("text events"));
        while let Some(end) = self.pending.find("\n\n") {
            let event: String = self.pending.drain(..end + 2).collect();
            let mut kind = None;
            let mut lines = Vec::new();
            for line in event.lines() {
                if let Some(k) = line.strip_prefix("event: ") {
                    kind = Some(k.to_string());
                } else if let Some(d) = line.strip_prefix("data:") {
                    lines.push(d.to_string());
                }
            }
            match kind.as_deref() {
                Some("data") => {
                    self.data.push_str(&lines.join("\n"));
                    self.at_control = false;
                }
                Some("control") => {
                    let control: serde_json::Value =
                        serde_json::from_str(&lines.join("\n")).unwrap();
                    self.next_offset = Some(control["streamNextOffset"].as_str().unwrap().into());
                    self.controls += 1;
                    self.at_control = true;
                }
                // Keepalive comments.
                _ => {}
            }
        }
    }
}

/// Reads `url` by SSE from `-1` until its data ends with `last`; with
/// `reconnect_every`, drops the connection after that many control events
/// and goes on from the last control event's offset, as clients do.
async fn read_until(url: String, last: String, reconnect_every: Option<usize>) -> String {
    let client = reqwest::Client::new();
    let mut events = SseText::default();
    let mut offset = "-1".to_string();
    loop {
        let r = client
            .get(format!("{url}?offset={offset}&live=sse"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut body = r.bytes_stream();
        let controls_at_start = events.controls;
        loop {
            let chunk = body.next().await.expect("the stream stays open").unwrap();
            events.push(&chunk);
            if events.data.ends_with(&last) {
                return events.data;
            }
            let resumable = events.at_control && events.pending.is_empty();
            if resumable
                && reconnect_every.is_some_and(|n| events.controls - controls_at_start >= n)
            {
                break;
            }
        }
        offset = events.next_offset.clone().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_joining_and_leaving_while_events_flow_get_every_event_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("flow");
    common::create_text(&client, &url, "").await;
    let before = get(
        &scrape(&client, &server.base).await,
        "runnel_sse_hub_deliveries_total",
    );

    const EVENTS: usize = 300;
    let expected: String = (0..EVENTS).map(|i| format!("e{i},")).collect();
    let writer = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            for i in 0..EVENTS {
                common::append_text(&client, &url, &format!("e{i},")).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    // Readers arrive while the stream grows; every third one leaves and
    // comes back every few events.
    let mut readers = Vec::new();
    for k in 0..30usize {
        let reconnect = (k % 3 == 0).then_some(5 + k % 7);
        readers.push(tokio::spawn(read_until(
            url.clone(),
            format!("e{},", EVENTS - 1),
            reconnect,
        )));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writer.await.unwrap();
    for (k, reader) in readers.into_iter().enumerate() {
        let data = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .unwrap_or_else(|_| panic!("reader {k} never got the last event"))
            .unwrap();
        assert!(data == expected, "reader {k} got {data:?}");
    }
    let after = get(
        &scrape(&client, &server.base).await,
        "runnel_sse_hub_deliveries_total",
    );
    assert!(
        after > before,
        "no event was written by a hub ({before} before, {after} after)"
    );
}

/// An HTTP/1.1 chunked body decoded as it arrives.
#[derive(Default)]
struct Dechunk {
    raw: Vec<u8>,
    head_done: bool,
}

impl Dechunk {
    /// Adds `bytes` and answers the body bytes now complete.
    fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.raw.extend_from_slice(bytes);
        if !self.head_done {
            let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Vec::new();
            };
            let head = String::from_utf8_lossy(&self.raw[..end]).to_string();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"));
            self.raw.drain(..end + 4);
            self.head_done = true;
        }
        let mut body = Vec::new();
        while let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&self.raw[..line_end]).unwrap(), 16)
                    .expect("a chunk size line");
            if self.raw.len() < line_end + 2 + size + 2 {
                break;
            }
            let start = line_end + 2;
            body.extend_from_slice(&self.raw[start..start + size]);
            assert_eq!(&self.raw[start + size..start + size + 2], b"\r\n");
            self.raw.drain(..start + size + 2);
        }
        body
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_too_slow_for_whole_events_catches_up_through_its_own_task() {
    let dir = tempfile::tempdir().unwrap();
    // The slow reader stops reading for as long as the writer takes.
    let server = Server::start(dir.path(), &["--write-stall-timeout-ms", "120000"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("wide");
    common::create_text(&client, &url, "").await;
    let slow_before = get(
        &scrape(&client, &server.base).await,
        "runnel_sse_hub_slow_handbacks_total",
    );

    // A reader with a small receive buffer (one that still takes a whole
    // segment: smaller ones stall TCP itself), which reads nothing while
    // the writer writes more than its socket can hold, then reads slowly.
    let addr: std::net::SocketAddr = server.addr().parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(128 * 1024).unwrap();
    let mut slow = socket.connect(addr).await.unwrap();
    let head = format!("GET /v1/stream/wide?offset=-1&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut chunks = Dechunk::default();
    let mut events = SseText::default();
    let mut buf = vec![0u8; 32 * 1024];
    // Its first answer (the empty stream's control event) read: it is at
    // the tail, in its stream's hub.
    while events.controls == 0 {
        let n = slow.read(&mut buf).await.unwrap();
        assert!(n > 0, "the server closed the slow reader");
        events.push(&chunks.push(&buf[..n]));
    }
    // Over twice a socket's largest send buffer (4 MiB by default).
    const EVENTS: usize = 300;
    let payload = |i: usize| format!("p{i:04}{}", "x".repeat(32 * 1024));
    let expected: String = (0..EVENTS).map(payload).collect();
    let last = payload(EVENTS - 1);
    // And a reader that keeps up.
    let fast = tokio::spawn(read_until(url.clone(), last.clone(), None));
    tokio::time::sleep(Duration::from_millis(200)).await;

    for i in 0..EVENTS {
        common::append_text(&client, &url, &payload(i)).await;
    }
    while !events.data.ends_with(&last) {
        let n = tokio::time::timeout(Duration::from_secs(60), slow.read(&mut buf))
            .await
            .expect("the slow reader gets every event")
            .unwrap();
        assert!(n > 0, "the server closed the slow reader");
        events.push(&chunks.push(&buf[..n]));
    }
    assert!(events.data == expected, "the slow reader's data differs");
    let fast = tokio::time::timeout(Duration::from_secs(60), fast)
        .await
        .expect("the fast reader got every event")
        .unwrap();
    assert!(fast == expected, "the fast reader's data differs");
    let slow_after = get(
        &scrape(&client, &server.base).await,
        "runnel_sse_hub_slow_handbacks_total",
    );
    let samples = scrape(&client, &server.base).await;
    assert!(
        slow_after > slow_before,
        "the slow reader was never handed back by a hub ({} hub deliveries)",
        get(&samples, "runnel_sse_hub_deliveries_total")
    );
}
