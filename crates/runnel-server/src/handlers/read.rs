//! GET: catch-up reads and long-polls (SSE lives in [`super::sse`]).

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use runnel_core::json::render_json_array;
use runnel_core::offset::parse_read_from;
use runnel_core::{ContentKind, ReadFrom, ReadPlan};
use runnel_engine::{now_ms, GroupEngine, ReadResult};

use super::{head::metadata_headers, header_value, offset_header, response, response_headers, sse};
use crate::cursor::next_cursor;
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    No,
    LongPoll,
    Sse,
}

pub async fn get(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let query = headers::read_query(request.uri().query())?;
    let live = match query.live.as_deref() {
        None => Live::No,
        Some("long-poll") => Live::LongPoll,
        Some("sse") => Live::Sse,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "live must be long-poll or sse; got {other:?}"
            )))
        }
    };
    if live != Live::No && query.offset.is_none() {
        return Err(ApiError::bad("live reads need an offset parameter"));
    }
    let from = match &query.offset {
        None => ReadFrom::Start,
        Some(token) => parse_read_from(token).map_err(|e| ApiError::bad(format!("offset: {e}")))?,
    };
    if live == Live::Sse {
        // EventSource reconnects with the URL it started with; the last
        // event id it saw says where it really is.
        let resume = headers::text(request.headers(), &names::LAST_EVENT_ID)?
            .filter(|id| !id.is_empty())
            .map(|id| parse_read_from(id).map_err(|e| ApiError::bad(format!("Last-Event-ID: {e}"))))
            .transpose()?;
        return sse::serve(app, name, resume.unwrap_or(from), query.cursor).await;
    }

    let if_none_match =
        headers::text(request.headers(), &http::header::IF_NONE_MATCH)?.map(str::to_string);
    // A long-poll may wait for many seconds: the request (whose headers
    // share the buffer it was read into) goes first.
    drop(request);
    let engine = app.node.engine_for(&name);
    let mut result = engine.read(&name, from, app.config.max_read_bytes).await?;
    if live == Live::LongPoll && result.body.is_empty() {
        match wait_for_data(engine, result.plan, &app).await? {
            Waited::Data(newer) => result = newer,
            Waited::Nothing(plan) => return Ok(no_new_data(&plan, query.cursor.as_deref())),
        }
    }

    Ok(data_response(
        result,
        from == ReadFrom::Now,
        live == Live::LongPoll,
        query.cursor.as_deref(),
        if_none_match.as_deref(),
    ))
}

/// What a long-poll found.
enum Waited {
    Data(ReadResult),
    /// No new bytes before the timeout, or the stream closed: the latest
    /// plan, for the 204's headers.
    Nothing(ReadPlan),
}

/// Waits until the stream has bytes past the plan, closes, or the
/// long-poll timeout passes.
async fn wait_for_data(
    engine: &dyn GroupEngine,
    plan: ReadPlan,
    app: &AppState,
) -> Result<Waited, ApiError> {
    if plan.reached_close() {
        return Ok(Waited::Nothing(plan));
    }
    let _reader = super::admit_live_reader(app, crate::metrics::LiveMode::LongPoll)?;
    let (id, position) = (plan.info.id, plan.next.position());
    let deadline = tokio::time::Instant::now() + app.config.long_poll_timeout;
    // Subscribe first, then look: a commit in between still wakes us.
    let mut changes = engine.subscribe(id);
    loop {
        let result = engine
            .read_by_id(id, position, app.config.max_read_bytes)
            .await?;
        if !result.body.is_empty() {
            return Ok(Waited::Data(result));
        }
        if result.plan.reached_close() {
            return Ok(Waited::Nothing(result.plan));
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            // Timed out (the notifier cannot go away while we hold it).
            Ok(Err(_)) | Err(_) => return Ok(Waited::Nothing(result.plan)),
        }
    }
}

/// 204 for a long-poll that found nothing new.
fn no_new_data(plan: &ReadPlan, client_cursor: Option<&str>) -> Response {
    let mut headers = response_headers();
    headers.insert(
        names::STREAM_NEXT_OFFSET,
        offset_header(plan.info.next_offset),
    );
    headers.insert(names::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    headers.insert(
        names::STREAM_CURSOR,
        header_value(&next_cursor(now_ms(), client_cursor)),
    );
    if plan.info.closed {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    response(StatusCode::NO_CONTENT, headers, Body::empty())
}

fn data_response(
    result: ReadResult,
    from_now: bool,
    long_poll: bool,
    client_cursor: Option<&str>,
    if_none_match: Option<&str>,
) -> Response {
    let plan = &result.plan;
    let mut headers = response_headers();
    metadata_headers(&plan.info, &mut headers);
    // The read's own position, not the stream's tail.
    headers.insert(names::STREAM_NEXT_OFFSET, offset_header(plan.next));
    headers.remove(names::STREAM_CLOSED);
    if plan.up_to_date() {
        headers.insert(names::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    }
    if plan.reached_close() {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    headers.insert(
        names::STREAM_CURSOR,
        header_value(&next_cursor(now_ms(), client_cursor)),
    );
    let cache = if from_now {
        "no-store"
    } else if plan.up_to_date() || long_poll {
        // The tail moves: let caches keep it only with revalidation.
        "no-cache"
    } else {
        // A full page below the tail never changes.
        "public, max-age=60, stale-while-revalidate=300"
    };
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if !from_now {
        let etag = format!(
            "\"{}:{}:{}{}\"",
            plan.info.id,
            plan.start,
            plan.next,
            if plan.reached_close() { ":c" } else { "" }
        );
        let matched = if_none_match
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        headers.insert(http::header::ETAG, header_value(&etag));
        if matched {
            return response(StatusCode::NOT_MODIFIED, headers, Body::empty());
        }
    }
    let body = if plan.info.kind == ContentKind::Json {
        render_json_array(&result.body).into()
    } else {
        result.body
    };
    response(StatusCode::OK, headers, body)
}
