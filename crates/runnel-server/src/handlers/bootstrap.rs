//! `GET {stream}/$bootstrap`: everything a reconnecting client needs in one
//! response. A `multipart/mixed` body with two parts: the latest snapshot
//! (empty when the stream has none) and the messages after it (a JSON
//! array for JSON streams). Headers: `Stream-Snapshot-Offset` (where the
//! snapshot stands), `Stream-Next-Offset` (where a live read continues)
//! and `Stream-Up-To-Date` when the second part reaches the tail.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};
use runnel_core::json::render_json_array;
use runnel_core::ContentKind;

use super::header_value;
use crate::cache::Answer;
use crate::error::ApiError;
use crate::headers::names;
use crate::AppState;

pub async fn get(app: AppState, name: String) -> Result<Response, ApiError> {
    let bootstrap = app
        .node
        .engine_for(&name)
        .bootstrap(&name, app.config.max_bootstrap_bytes)
        .await?;
    let plan = &bootstrap.plan;
    let info = &plan.tail.info;
    let snapshot_offset = info.token(plan.snapshot_offset()).as_str().to_string();
    let next_offset = info.token(plan.tail.next).as_str().to_string();
    let boundary = format!("runnel-{:016x}", rand::random::<u64>());

    let (snapshot_type, snapshot_bytes) = match (&plan.snapshot, &bootstrap.snapshot) {
        (Some(s), Some(bytes)) => (s.content_type.as_str(), bytes.as_ref()),
        _ => ("application/octet-stream", &[][..]),
    };
    let messages = if info.kind == ContentKind::Json {
        render_json_array(&bootstrap.tail)
    } else {
        bootstrap.tail.to_vec()
    };
    let mut body = Vec::with_capacity(snapshot_bytes.len() + messages.len() + 512);
    let mut part = |content_type: &str, offset_header: &str, offset: &str, bytes: &[u8]| {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        body.extend_from_slice(format!("Content-Type: {content_type}\r\n").as_bytes());
        body.extend_from_slice(format!("{offset_header}: {offset}\r\n\r\n").as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    };
    part(
        snapshot_type,
        "Stream-Snapshot-Offset",
        &snapshot_offset,
        snapshot_bytes,
    );
    part(
        &info.content_type,
        "Stream-Next-Offset",
        &next_offset,
        &messages,
    );
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());

    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        header_value(&format!("multipart/mixed; boundary={boundary}")),
    );
    headers.insert(
        names::STREAM_SNAPSHOT_OFFSET,
        header_value(&snapshot_offset),
    );
    headers.insert(names::STREAM_NEXT_OFFSET, header_value(&next_offset));
    if plan.tail.up_to_date() {
        headers.insert(names::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    }
    if plan.tail.reached_close() {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    app.cache_headers(&mut headers, Answer::Revalidate, &name);
    Ok((StatusCode::OK, headers, body).into_response())
}
