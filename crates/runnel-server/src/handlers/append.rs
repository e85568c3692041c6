//! POST: append to a stream, with Stream-Seq, idempotent producers, and
//! closing (with a final body or without one).

use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use runnel_core::{AppendToStream, Applied, Body, Command, ContentKind};

use super::{body_bytes, framed_body, offset_header, response, response_headers};
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

pub async fn post(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let h = &parts.headers;
    let content_type = headers::text(h, &http::header::CONTENT_TYPE)?
        .filter(|ct| !ct.is_empty())
        .map(str::to_string);
    let close = headers::closed(h)?;
    let producer = headers::producer(h)?;
    let stream_seq = headers::text(h, &names::STREAM_SEQ)?.map(str::to_string);
    let data = body_bytes(&app, body).await?;

    if data.is_empty() && !close {
        return Err(ApiError::bad(
            "an append needs a body (or Stream-Closed: true)",
        ));
    }
    let body = if data.is_empty() {
        Body::default()
    } else {
        let ct = content_type
            .as_deref()
            .ok_or_else(|| ApiError::bad("an append with a body needs a Content-Type"))?;
        framed_body(ContentKind::of(ct), &data, false)?
    };
    let has_data = !body.data.is_empty();

    let command = Command::Append(AppendToStream {
        name,
        content_type,
        body,
        producer,
        stream_seq,
        close,
    });
    let Applied::Appended {
        next_offset,
        closed,
        producer,
        duplicate,
    } = app.node.propose(command).await?
    else {
        unreachable!("an append answers Appended");
    };

    let mut headers = response_headers();
    headers.insert(names::STREAM_NEXT_OFFSET, offset_header(next_offset));
    if closed {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    if let Some((epoch, seq)) = producer {
        headers.insert(names::PRODUCER_EPOCH, HeaderValue::from(epoch));
        headers.insert(names::PRODUCER_SEQ, HeaderValue::from(seq));
    }
    // A producer's new data is 200; duplicates, plain appends and closes 204.
    let status = if producer.is_some() && has_data && !duplicate {
        StatusCode::OK
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(response(status, headers, axum::body::Body::empty()))
}
