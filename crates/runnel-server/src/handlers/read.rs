//! GET: catch-up reads and long-polls (SSE lives in [`super::sse`]).

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use runnel_core::json::render_json_array;
use runnel_core::offset::parse_read;
use runnel_core::{ContentKind, ReadFrom, ReadPlan};
use runnel_engine::{now_ms, GroupEngine, ReadResult};

use super::{head::metadata_headers, header_value, response, response_headers, sse};
use crate::cache::{Answer, CacheMode};
use crate::cursor::next_cursor;
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

/// Most bytes of the first page from `-1` while caching is on: that
/// answer is never cached, so it is kept small; the reader continues from
/// a minted offset, whose pages caches keep.
const START_PAGE_BYTES: u64 = 4096;

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
    let (from, incarnation) = match &query.offset {
        None => (ReadFrom::Start, 0),
        Some(token) => parse_read(token).map_err(|e| ApiError::bad(format!("offset: {e}")))?,
    };
    if live == Live::Sse {
        // EventSource reconnects with the URL it started with; the last
        // event id it saw says where it really is.
        let resume = headers::text(request.headers(), &names::LAST_EVENT_ID)?
            .filter(|id| !id.is_empty())
            .map(|id| parse_read(id).map_err(|e| ApiError::bad(format!("Last-Event-ID: {e}"))))
            .transpose()?;
        let (from, incarnation) = resume.unwrap_or((from, incarnation));
        return sse::serve(app, name, from, incarnation, query.cursor).await;
    }

    let if_none_match =
        headers::text(request.headers(), &http::header::IF_NONE_MATCH)?.map(str::to_string);
    // A long-poll may wait for many seconds: the request (whose headers
    // share the buffer it was read into) goes first.
    drop(request);
    let engine = app.node.engine_for(&name);
    // Only a URL that names the stream's incarnation may be cached (see
    // docs/caching.md): `-1`, `now` and offsets of zeros are answered
    // `no-store`, and the first page from `-1` is kept small so that a
    // storm of readers starting there costs the origin little.
    let cacheable = incarnation != 0 && from != ReadFrom::Now;
    let max_bytes = if from == ReadFrom::Start && app.config.cache.mode != CacheMode::Off {
        app.config.max_read_bytes.min(START_PAGE_BYTES)
    } else {
        app.config.max_read_bytes
    };
    let mut result = match engine.read(&name, from, max_bytes).await {
        Ok(result) => result,
        Err(e) => return Err(other_incarnation_or(&app, &name, incarnation, e.into())),
    };
    if !result.plan.info.accepts_incarnation(incarnation) {
        return Err(ApiError::OtherIncarnation);
    }
    if let Some(cut) = immutable_cut(&result.plan, cacheable && live == Live::No, &app) {
        result = engine.read(&name, from, cut).await?;
    }
    if live == Live::LongPoll && result.body.is_empty() {
        match wait_for_data(engine, result.plan, &app).await? {
            Waited::Data(newer) => result = newer,
            Waited::Nothing(plan) => return Ok(no_new_data(&plan, query.cursor.as_deref())),
        }
    }

    let answer = if !cacheable {
        Answer::Never
    } else if live == Live::LongPoll {
        Answer::LongPoll
    } else if matches!(from, ReadFrom::At(_))
        && (!result.plan.up_to_date() || result.plan.reached_close())
    {
        // Bytes at a minted position never change, and this page holds no
        // tail that may grow.
        Answer::Page
    } else {
        Answer::Tail
    };
    let mut response = data_response(
        result,
        from == ReadFrom::Now,
        query.cursor.as_deref(),
        if_none_match.as_deref(),
    );
    app.cache_headers(response.headers_mut(), answer, &name);
    if let Some(len) = axum::body::HttpBody::size_hint(response.body()).exact() {
        app.metrics
            .read_bytes
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(response)
}

/// `error`, unless the offset read from was minted for an earlier stream of
/// this name: its position may be past this stream's tail or before its
/// start, and the reader should hear that its stream is gone (410), not
/// that its offset is wrong.
pub(super) fn other_incarnation_or(
    app: &AppState,
    name: &str,
    incarnation: u64,
    error: ApiError,
) -> ApiError {
    let other = incarnation != 0
        && app
            .node
            .head(name)
            .is_ok_and(|info| !info.accepts_incarnation(incarnation));
    if other {
        ApiError::OtherIncarnation
    } else {
        error
    }
}

/// A catch-up that reaches the open tail may be cached only briefly, and
/// a cache then fetches it again and again while readers keep coming. When
/// it carries more than [`TAIL_PAGE_BYTES`], it is cut at the last
/// multiple of that below the tail (the same cut for every reader, so the
/// same URLs follow): the long part becomes a page below the tail, kept for
/// good, and only the short rest is fetched again. Answers the byte budget
/// of the shorter read.
fn immutable_cut(plan: &ReadPlan, cacheable: bool, app: &AppState) -> Option<u64> {
    if !cacheable || app.config.cache.mode == CacheMode::Off || !plan.up_to_date() {
        return None;
    }
    if plan.reached_close() {
        return None;
    }
    let (start, tail) = (plan.start.position(), plan.info.next_offset.position());
    let cut = tail.checked_sub(1)? / TAIL_PAGE_BYTES * TAIL_PAGE_BYTES;
    (tail - start > TAIL_PAGE_BYTES && cut > start).then(|| cut - start)
}

/// Most bytes an answer at the open tail carries when a longer one can be
/// cut below it (see [`immutable_cut`]).
const TAIL_PAGE_BYTES: u64 = 64 * 1024;

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
    let next = plan.info.next_offset;
    headers.insert(
        names::STREAM_NEXT_OFFSET,
        header_value(plan.info.token(next).as_str()),
    );
    headers.insert(names::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    headers.insert(
        names::STREAM_CURSOR,
        header_value(&next_cursor(now_ms(), client_cursor, next.position())),
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

/// A 200 (or 304) with the read's bytes; its cache headers are set by the
/// caller.
fn data_response(
    result: ReadResult,
    from_now: bool,
    client_cursor: Option<&str>,
    if_none_match: Option<&str>,
) -> Response {
    let plan = &result.plan;
    let mut headers = response_headers();
    metadata_headers(&plan.info, &mut headers);
    // The read's own position, not the stream's tail.
    headers.insert(
        names::STREAM_NEXT_OFFSET,
        header_value(plan.info.token(plan.next).as_str()),
    );
    headers.remove(names::STREAM_CLOSED);
    if plan.up_to_date() {
        headers.insert(names::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    }
    if plan.reached_close() {
        headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    headers.insert(
        names::STREAM_CURSOR,
        header_value(&next_cursor(now_ms(), client_cursor, plan.next.position())),
    );
    if !from_now {
        // The incarnation tells a re-created stream's bytes from the
        // deleted one's at the same positions.
        let etag = format!(
            "\"{}:{}:{}{}\"",
            plan.info.incarnation,
            plan.start.position(),
            plan.next.position(),
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
