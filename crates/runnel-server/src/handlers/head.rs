//! HEAD: stream metadata, never cached, never renewing the TTL.

use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};
use runnel_core::StreamInfo;

use super::{header_value, offset_header};
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

pub fn head(app: AppState, name: String) -> Result<Response, ApiError> {
    let info = app.node.head(&name)?;
    let mut headers = super::response_headers();
    metadata_headers(&info, &mut headers);
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    Ok(super::response(
        StatusCode::OK,
        headers,
        axum::body::Body::empty(),
    ))
}

/// Headers describing a stream: content type, tail, closure, expiry.
pub(super) fn metadata_headers(info: &StreamInfo, headers: &mut HeaderMap) {
    headers.insert(http::header::CONTENT_TYPE, header_value(&info.content_type));
    headers.insert(
        names::STREAM_NEXT_OFFSET,
        offset_header(info.next_offset, info.incarnation),
    );
    if info.closed {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    if let Some(ttl) = info.ttl_secs {
        headers.insert(names::STREAM_TTL, HeaderValue::from(ttl));
    }
    if let Some(text) = info.expires_at_ms.and_then(headers::render_expires_at) {
        headers.insert(names::STREAM_EXPIRES_AT, header_value(&text));
    }
}
