//! Request handlers, one module per operation. [`stream`] routes a
//! request on `/v1/stream/...` to a stream or to one of its reserved
//! sub-resources (`$snapshot`, `$bootstrap`, `$retention`), then by method.

mod append;
mod bootstrap;
mod create;
mod delete;
mod head;
pub mod leader_retry;
pub mod list;
pub mod members;
mod pin;
mod read;
pub mod read_token;
mod snapshot;
pub mod sse;

pub(crate) use append::append_json;
pub use append::direct as append_directly;
pub use pin::release_expired_pins;
pub use sse::RenderCache as SseRenderCache;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, Method};
use runnel_core::ContentKind;
use runnel_engine::Route;

use crate::auth::{Access, Credentials, Operation};
use crate::error::ApiError;
use crate::headers;
use crate::metrics::{LiveMode, Refusal};
use crate::AppState;

/// Names the node that answered a stream request (`single` for a single
/// node): in a cluster, the leader it was forwarded to, or the follower
/// that served a live read itself.
pub const SERVED_BY: http::HeaderName = http::HeaderName::from_static("runnel-served-by");

pub async fn stream(app: AppState, request: Request) -> Response {
    let target = match headers::stream_name(request.uri().path())
        .map_err(ApiError::from)
        .and_then(Target::of)
    {
        Ok(target) => target,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_access(&app, &target, &request) {
        return e.into_response();
    }
    // A request forwarded here is answered once: the node that forwarded
    // it retries across leadership changes.
    if !app.node.replicated()
        || request
            .headers()
            .contains_key(&crate::forward::FORWARDED_BY)
    {
        return attempt(&app, &target, request).await;
    }
    // Boxed: held inline, its room (an attempt, the request's parts and
    // body) would be reserved in every request's future, on a single
    // node too, where it never runs.
    Box::pin(leader_retry::serve(&app, &target, request, |request| {
        attempt(&app, &target, request)
    }))
    .await
}

/// One try at serving a stream request: here, or at the group's leader.
async fn attempt(app: &AppState, target: &Target, request: Request) -> Response {
    let mut route = app.node.route(target.stream());
    let mut follower_read = false;
    if matches!(route, Route::Forward { .. })
        && is_live_read(target, &request)
        && app.node.prepare_live_read(target.stream()).await
    {
        route = Route::Local;
        follower_read = true;
    }
    match route {
        Route::Local => {
            let reads = matches!(*request.method(), Method::GET | Method::HEAD);
            if reads && !follower_read {
                if let Err(e) = app.node.read_barrier(target.stream()).await {
                    return ApiError::from(e).into_response();
                }
            }
            let served_by = app.served_by.clone();
            let mut response = dispatch(app.clone(), target.clone(), request)
                .await
                .unwrap_or_else(IntoResponse::into_response);
            response.headers_mut().insert(SERVED_BY, served_by);
            response
        }
        // Boxed, as the rarer handlers in `dispatch` are (see
        // `routes::route`).
        Route::Forward { node, addr } => Box::pin(forward(app, node, &addr, request)).await,
        Route::NoLeader => leader_retry::Retry::Safe.mark(
            ApiError::Unavailable(
                "this stream's group has no leader at the moment (election under way); retry"
                    .into(),
            )
            .into_response(),
        ),
    }
}

/// Relays `request` to node `node` at `addr` as this node (with the
/// cluster key when access control is on).
pub(crate) async fn forward(app: &AppState, node: u64, addr: &str, request: Request) -> Response {
    let me = app.node.node_label();
    let cluster_key = app.auth.as_ref().and_then(|auth| auth.cluster_key());
    app.forwarder
        .forward(&me, node, addr, cluster_key, request)
        .await
}

/// With access control on, whether the caller may do what `request`
/// does to `target`: the operation on the stream, and reading the source
/// of a fork. `$pin` is for nodes only.
fn check_access(app: &AppState, target: &Target, request: &Request) -> Result<(), ApiError> {
    let Some(auth) = &app.auth else {
        return Ok(());
    };
    let credentials = Credentials::of(request);
    if request
        .headers()
        .contains_key(crate::subscriptions::INTERNAL_APPEND)
    {
        // A wake event the control leader appends: nodes only.
        auth.check(&credentials, Access::Node)?;
        return Ok(());
    }
    let method = request.method();
    let operation = match (target, method) {
        (Target::Pin(_), _) if pin::made_here(request) => return Ok(()),
        (Target::Pin(_), _) => {
            auth.check(&credentials, Access::Node)?;
            return Ok(());
        }
        (Target::Stream(_), &Method::PUT) => Operation::Create,
        (Target::Stream(_), &Method::POST) => Operation::Append,
        (Target::Stream(_) | Target::Snapshot(..), &Method::DELETE) => Operation::Delete,
        (Target::Snapshot(..), &Method::PUT) => Operation::Append,
        (Target::Retention(..), _) => Operation::Delete,
        _ => Operation::Read,
    };
    let fork_source = match operation {
        Operation::Create => headers::text(request.headers(), &headers::names::STREAM_FORKED_FROM)
            .ok()
            .flatten()
            .and_then(|source| headers::stream_name(source).ok()),
        _ => None,
    };
    let stream = target.stream();
    let mut needs = vec![(operation, stream)];
    if let Some(source) = &fork_source {
        needs.push((Operation::Read, source.as_str()));
    }
    auth.check(&credentials, Access::Streams(&needs))?;
    Ok(())
}

/// Admits a live reader (SSE or long-poll): refused while the node is over
/// its memory limit or holds its most live readers. The permit is held as
/// long as the reader.
fn admit_live_reader(app: &AppState, mode: LiveMode) -> Result<LiveReaderSlot, ApiError> {
    if app.memory.over_limit() {
        app.metrics.refused(Refusal::Memory);
        return Err(ApiError::OverMemoryLimit);
    }
    let permit = std::sync::Arc::clone(&app.live_readers)
        .try_acquire_owned()
        .map_err(|_| {
            app.metrics.refused(Refusal::ReaderLimit);
            ApiError::TooManyLiveReaders
        })?;
    Ok(LiveReaderSlot {
        _permit: permit,
        _counted: app.metrics.live_reader(mode),
    })
}

/// A live reader's place: its permit, and its count in `/metrics`.
struct LiveReaderSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _counted: crate::metrics::LiveReader,
}

/// SSE and long-poll reads, which a follower may serve itself (see
/// `NodeEngine::prepare_live_read`); catch-up reads go to the leader.
fn is_live_read(target: &Target, request: &Request) -> bool {
    matches!(target, Target::Stream(_))
        && request.method() == Method::GET
        && request.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "live=sse" || p == "live=long-poll")
        })
}

/// What a request path names. Path segments starting with `$` are
/// reserved for sub-resources, so no stream name can collide with them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Stream(String),
    /// `{stream}/$snapshot` (latest) or `{stream}/$snapshot/{offset}`.
    Snapshot(String, Option<String>),
    /// `{stream}/$bootstrap`.
    Bootstrap(String),
    /// `{stream}/$retention/{offset}`.
    Retention(String, String),
    /// `{stream}/$pin`: a fork in another group holding this stream.
    Pin(String),
}

impl Target {
    fn of(name: String) -> Result<Target, ApiError> {
        if !name.contains('$') {
            return Ok(Target::Stream(name));
        }
        let segments: Vec<&str> = name.split('/').collect();
        let stream = |n: usize| segments[..segments.len() - n].join("/");
        let target = match segments.as_slice() {
            [.., "$bootstrap"] if segments.len() > 1 => Target::Bootstrap(stream(1)),
            [.., "$pin"] if segments.len() > 1 => Target::Pin(stream(1)),
            [.., "$snapshot"] if segments.len() > 1 => Target::Snapshot(stream(1), None),
            [.., "$snapshot", offset] if segments.len() > 2 => {
                Target::Snapshot(stream(2), Some(offset.to_string()))
            }
            [.., "$retention", offset] if segments.len() > 2 => {
                Target::Retention(stream(2), offset.to_string())
            }
            _ => Target::Stream(name.clone()),
        };
        if target.stream().split('/').any(|s| s.starts_with('$')) {
            return Err(ApiError::bad(
                "path segments starting with $ are reserved ($snapshot, $bootstrap, $retention, $pin)",
            ));
        }
        Ok(target)
    }

    /// The stream the request is about.
    fn stream(&self) -> &str {
        match self {
            Target::Stream(n)
            | Target::Snapshot(n, _)
            | Target::Bootstrap(n)
            | Target::Retention(n, _)
            | Target::Pin(n) => n,
        }
    }
}

async fn dispatch(app: AppState, target: Target, request: Request) -> Result<Response, ApiError> {
    let method = request.method().clone();
    match target {
        Target::Stream(name) => match method {
            Method::GET => read::get(app, name, request).await,
            Method::HEAD => head::head(app, name),
            Method::PUT => Box::pin(create::put(app, name, request)).await,
            Method::POST => append::post(app, name, request).await,
            Method::DELETE => Box::pin(delete::delete(app, name)).await,
            _ => Err(ApiError::MethodNotAllowed),
        },
        Target::Snapshot(name, offset) => {
            Box::pin(snapshot::handle(app, name, offset, request)).await
        }
        Target::Bootstrap(name) if method == Method::GET => {
            Box::pin(bootstrap::get(app, name)).await
        }
        Target::Retention(name, offset) if method == Method::PUT => {
            Box::pin(snapshot::trim(app, name, offset)).await
        }
        Target::Pin(name) => {
            if app.auth.is_none() {
                pin::check_internal(&request)?;
            }
            match method {
                Method::POST => Box::pin(pin::pin(app, name, request)).await,
                Method::DELETE => Box::pin(pin::unpin(app, name, request)).await,
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        Target::Bootstrap(_) | Target::Retention(..) => Err(ApiError::MethodNotAllowed),
    }
}

/// 200 while the node serves; 503 once its log failed (it takes no more
/// writes until restarted), so a load balancer routes elsewhere.
pub fn health(app: &AppState) -> Response {
    match app.node.write_failure() {
        None => "ok\n".into_response(),
        Some(reason) => (
            http::StatusCode::SERVICE_UNAVAILABLE,
            format!("storage failed: {reason}\n"),
        )
            .into_response(),
    }
}

/// Whether this node can serve writes and reads now: 200, or 503 with
/// the reason (no leader for a group, a leader cut off from its quorum,
/// catching up, a failed log). Load balancers take a node out on 503.
pub fn ready(app: &AppState) -> Response {
    match app.node.unready() {
        None => "ready\n".into_response(),
        Some(reason) => (
            http::StatusCode::SERVICE_UNAVAILABLE,
            [(http::header::RETRY_AFTER, "1")],
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

/// Every metric in the Prometheus text format, read now.
pub fn metrics(app: &AppState) -> Response {
    let body =
        crate::metrics::render::render(&app.metrics, &app.node.metrics(), app.auth.as_deref());
    (
        [(
            http::header::CONTENT_TYPE,
            crate::metrics::render::CONTENT_TYPE,
        )],
        body,
    )
        .into_response()
}

/// With access control on, 401 or 403 unless the caller has `admin` on
/// every stream (status and metrics).
pub fn check_admin(app: &AppState, request: &Request) -> Result<(), ApiError> {
    if let Some(auth) = &app.auth {
        auth.check(&Credentials::of(request), Access::ServerAdmin)?;
    }
    Ok(())
}

/// The node, its groups and their leaders, and where its memory goes, as
/// JSON (`runnel ctl status`).
pub fn status(app: &AppState) -> Response {
    let mut status = app.node.status();
    if let Some(fields) = status.as_object_mut() {
        fields.insert("memory".into(), crate::memory::status(&app.node.metrics()));
    }
    let body = serde_json::to_vec_pretty(&status).unwrap_or_default();
    ([(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Reads a request body up to the configured append limit.
async fn body_bytes(app: &AppState, body: Body) -> Result<Bytes, ApiError> {
    body_bytes_up_to(app, app.config.max_append_bytes, body).await
}

/// Reads a request body up to `limit` bytes (413 past it). A client that
/// sends no part of it for the request read timeout gets 408 and loses
/// the connection: a slow-loris writer holds no slot for long, whichever
/// path read the head.
async fn body_bytes_up_to(app: &AppState, limit: u64, body: Body) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let stall = app.config.request_read_timeout;
    let limit_bytes = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    let mut only: Option<Bytes> = None;
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Err(_) => return Err(ApiError::BodyStalled(stall)),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad(format!(
                    "could not read the request body: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let held = only.as_ref().map_or(out.len(), Bytes::len);
        if held + data.len() > limit_bytes {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        // A body in one frame (the usual case) is kept without a copy.
        match only.take() {
            None if out.is_empty() => only = Some(data),
            None => out.extend_from_slice(&data),
            Some(first) => {
                out.extend_from_slice(&first);
                out.extend_from_slice(&data);
            }
        }
    }
    Ok(only.unwrap_or_else(|| out.freeze()))
}

/// A request body as stored: JSON bodies validated and framed into
/// messages (one array level flattened), anything else as is.
fn framed_body(
    kind: ContentKind,
    data: &[u8],
    allow_empty_array: bool,
) -> Result<runnel_core::Body, ApiError> {
    if kind == ContentKind::Json && !data.is_empty() {
        let framed = runnel_core::json::frame_json_body(data, allow_empty_array)
            .map_err(|e| ApiError::bad(e.to_string()))?;
        Ok(runnel_core::Body {
            data: framed.data,
            message_ends: framed.message_ends,
        })
    } else {
        Ok(runnel_core::Body {
            data: data.to_vec(),
            message_ends: Vec::new(),
        })
    }
}

/// A header map for a response, with room for the headers every response
/// gets later (see `routes`), so adding them does not grow it.
fn response_headers() -> http::HeaderMap {
    http::HeaderMap::with_capacity(16)
}

/// A response of `status` with `headers` and `body`. The header map is
/// moved in whole: axum's tuple forms copy it entry by entry.
fn response(status: http::StatusCode, headers: http::HeaderMap, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// The token of `offset` in the stream of `incarnation`, as a header value.
fn offset_header(offset: runnel_core::Offset, incarnation: u64) -> HeaderValue {
    HeaderValue::from_str(offset.token_in(incarnation).as_str())
        .expect("offset tokens are header-safe")
}

/// A header value from a string the server produced (numbers,
/// content types already validated as header values).
fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"))
}
