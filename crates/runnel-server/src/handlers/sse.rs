//! Server-Sent Events: a catch-up followed by a live tail, as `data`
//! events each followed by one `control` event. Text streams are sent as
//! text, JSON streams as one array per data event, anything else base64.

use std::convert::Infallible;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use runnel_core::json::render_json_array;
use runnel_core::{ContentKind, ReadFrom, ReadPlan};
use runnel_engine::{now_ms, ReadResult};
use tokio::sync::mpsc;

use crate::cursor::next_cursor;
use crate::error::ApiError;
use crate::headers::names;
use crate::AppState;

/// Events buffered per connection before the writer waits for the client.
const CONNECTION_BUFFER: usize = 16;

pub async fn serve(
    app: AppState,
    name: String,
    from: ReadFrom,
    cursor: Option<String>,
) -> Result<Response, ApiError> {
    // Errors before the first byte are ordinary statuses.
    let first = app
        .node
        .engine_for(&name)
        .read(&name, from, app.config.max_read_bytes)?;
    let kind = first.plan.info.kind;
    let (tx, rx) = mpsc::channel::<Bytes>(CONNECTION_BUFFER);
    tokio::spawn(tail(app, name, first, cursor, tx));

    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if kind == ContentKind::Binary {
        headers.insert(
            names::STREAM_SSE_DATA_ENCODING,
            HeaderValue::from_static("base64"),
        );
    }
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    });
    Ok((StatusCode::OK, headers, Body::from_stream(events)).into_response())
}

/// Writes events until the stream closes, the client leaves, or the
/// connection's maximum duration passes.
async fn tail(
    app: AppState,
    name: String,
    first: ReadResult,
    cursor: Option<String>,
    tx: mpsc::Sender<Bytes>,
) {
    let engine = app.node.engine_for(&name);
    let id = first.plan.info.id;
    let kind = first.plan.info.kind;
    let mut changes = engine.subscribe(id);
    let deadline = tokio::time::Instant::now() + app.config.sse_max_duration;
    let mut result = first;
    // The first answer always ends in a control event, data or not.
    let mut send_control = true;
    loop {
        if !result.body.is_empty() || send_control {
            let mut out = Vec::new();
            if !result.body.is_empty() {
                data_event(&mut out, kind, &result.body);
            }
            control_event(&mut out, &result.plan, cursor.as_deref());
            if tx.send(Bytes::from(out)).await.is_err() || result.plan.reached_close() {
                return;
            }
        }
        let position = result.plan.next.position();
        // Wait for more, unless this read stopped short of the tail.
        while result.plan.up_to_date() {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                _ = tokio::time::sleep(app.config.sse_keepalive) => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
            }
        }
        result = match engine.read_by_id(id, position, app.config.max_read_bytes) {
            Ok(r) => r,
            // Deleted or expired: end the connection; a reconnect gets 404/410.
            Err(_) => return,
        };
        // A close without a final body still owes the reader its last control.
        send_control = result.plan.reached_close();
    }
}

/// `event: data`, one `data:` line per line of the payload.
fn data_event(out: &mut Vec<u8>, kind: ContentKind, body: &[u8]) {
    out.extend_from_slice(b"event: data\n");
    match kind {
        ContentKind::Binary => {
            out.extend_from_slice(b"data:");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .as_bytes(),
            );
            out.push(b'\n');
        }
        ContentKind::Json => data_lines(out, &render_json_array(body)),
        ContentKind::Text => data_lines(out, body),
    }
    out.push(b'\n');
}

/// Splits on CR, LF and CRLF so no payload byte can end an event early.
fn data_lines(out: &mut Vec<u8>, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let cut = rest.iter().position(|b| *b == b'\n' || *b == b'\r');
        let (line, next) = match cut {
            None => (rest, None),
            Some(i) => {
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..i], Some(&rest[i + skip..]))
            }
        };
        out.extend_from_slice(b"data:");
        out.extend_from_slice(line);
        out.push(b'\n');
        match next {
            Some(n) => rest = n,
            None => break,
        }
    }
}

/// `event: control` with the next offset, a cursor (while open), and the
/// up-to-date and closed flags.
fn control_event(out: &mut Vec<u8>, plan: &ReadPlan, client_cursor: Option<&str>) {
    let mut control = serde_json::Map::new();
    control.insert("streamNextOffset".into(), plan.next.to_string().into());
    if plan.reached_close() {
        control.insert("streamClosed".into(), true.into());
    } else {
        control.insert(
            "streamCursor".into(),
            next_cursor(now_ms(), client_cursor).into(),
        );
    }
    if plan.up_to_date() {
        control.insert("upToDate".into(), true.into());
    }
    out.extend_from_slice(b"event: control\ndata:");
    out.extend_from_slice(serde_json::Value::Object(control).to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_break_starts_a_new_data_line() {
        let mut out = Vec::new();
        data_lines(&mut out, b"a\r\n\r\nevent: control\rb\nc");
        assert_eq!(out, b"data:a\ndata:\ndata:event: control\ndata:b\ndata:c\n");
    }

    #[test]
    fn binary_data_is_base64() {
        let mut out = Vec::new();
        data_event(&mut out, ContentKind::Binary, b"Hello");
        assert_eq!(out, b"event: data\ndata:SGVsbG8=\n\n");
    }
}
