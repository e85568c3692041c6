//! `runnel stream tail`: a live read over SSE that picks up from its last
//! offset after a disconnect (the server ends each SSE response after a
//! while, a node may restart), until the stream is closed.

use std::io::Write;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;

use super::client::{encode, header, CliError, StreamClient};
use super::{content_type, is_json, write_body};

/// The longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub async fn tail(client: &StreamClient, name: &str, offset: &str) -> Result<(), CliError> {
    let json = is_json(&content_type(client, name).await?);
    let path = StreamClient::stream_path(name);
    let mut offset = offset.to_string();
    let mut backoff = Duration::from_millis(250);
    let mut out = std::io::stdout().lock();
    loop {
        let query = format!("{path}?offset={}&live=sse", encode(&offset));
        let response = match client.send(Method::GET, &query, &[], Bytes::new()).await {
            Ok(response) => response,
            Err(e) => {
                eprintln!("runnel: {}; reconnecting", e.message);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let status = response.status();
        if !status.is_success() {
            let body = response.into_body().collect().await.map(|b| b.to_bytes());
            let reason = body
                .map(|b| String::from_utf8_lossy(&b).to_string())
                .unwrap_or_default();
            let error = CliError::of_status(status, name, &reason);
            if status.is_server_error() {
                eprintln!("runnel: {}; reconnecting", error.message);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            return Err(error);
        }
        let base64 = header(response.headers(), "stream-sse-data-encoding") == Some("base64");
        let mut body = response.into_body();
        let mut events = Events::default();
        loop {
            match body.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    for (kind, data) in events.feed(&data) {
                        backoff = Duration::from_millis(250);
                        match kind.as_str() {
                            "data" if base64 => {
                                let bytes = base64::engine::general_purpose::STANDARD
                                    .decode(data.replace('\n', ""))
                                    .map_err(|e| {
                                        CliError::failed(format!("{name}: bad base64 data: {e}"))
                                    })?;
                                write_body(&mut out, false, &bytes)?;
                            }
                            "data" => write_body(&mut out, json, data.as_bytes())?,
                            "control" => {
                                let control: serde_json::Value = serde_json::from_str(&data)
                                    .map_err(|e| {
                                        CliError::failed(format!("{name}: bad control event: {e}"))
                                    })?;
                                if let Some(next) = control["streamNextOffset"].as_str() {
                                    offset = next.to_string();
                                }
                                if control["streamClosed"] == true {
                                    return Ok(());
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Some(Err(e)) => {
                    eprintln!("runnel: {name}: connection lost ({e}); reconnecting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    break;
                }
                // The server ended this response; carry on from the offset.
                None => break,
            }
        }
        let _ = out.flush();
    }
}

/// Splits an SSE byte stream into `(event type, data)` pairs.
#[derive(Default)]
struct Events {
    buffer: Vec<u8>,
}

impl Events {
    fn feed(&mut self, bytes: &[u8]) -> Vec<(String, String)> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some((end, separator)) = find_blank_line(&self.buffer) {
            let block: Vec<u8> = self.buffer.drain(..end + separator).collect();
            let text = String::from_utf8_lossy(&block[..end]);
            let (mut kind, mut data) = ("message".to_string(), Vec::new());
            for line in text.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    kind = value.trim().to_string();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value).to_string());
                }
            }
            if !data.is_empty() {
                events.push((kind, data.join("\n")));
            }
        }
        events
    }
}

/// Where the first event ends: its length and the separator's.
fn find_blank_line(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_across_and_within_chunks() {
        let mut events = Events::default();
        assert!(events.feed(b"event: data\ndata: [1,").is_empty());
        let got = events.feed(b"2]\n\n: keepalive\n\nevent: control\ndata: {\"a\":1}\n\nevent: da");
        assert_eq!(
            got,
            [
                ("data".to_string(), "[1,2]".to_string()),
                ("control".to_string(), "{\"a\":1}".to_string())
            ]
        );
        let got = events.feed(b"ta\r\ndata: line one\r\ndata: line two\r\n\r\n");
        assert_eq!(
            got,
            [("data".to_string(), "line one\nline two".to_string())]
        );
    }
}
