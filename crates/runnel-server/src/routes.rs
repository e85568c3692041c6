//! The one entry point of every request, whether hyper or the direct path
//! ([`crate::direct_connection`]) read it: the CORS preflight, the fixed
//! paths, stream requests, and the headers every response carries.
//!
//! Routing is a match on the path rather than a router: there are four
//! fixed paths and one prefix, and a router's matching, boxing and layers
//! cost a good part of what serving a small append costs.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::HOST;
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ALLOW,
    X_CONTENT_TYPE_OPTIONS,
};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Version};

use crate::error::ApiError;
use crate::headers::{names, STREAM_PREFIX};
use crate::{handlers, metrics, subscriptions, AppState};

const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

/// Answers `request`: the whole application.
pub async fn handle(app: AppState, request: Request<Body>) -> Response {
    let mut response = respond(app, request).await;
    add_protocol_headers(response.headers_mut());
    response
}

/// Answers `request` without the headers every response carries: the
/// direct path writes those from [`protocol_head`], rendered once.
pub async fn respond(app: AppState, request: Request<Body>) -> Response {
    let started = std::time::Instant::now();
    let kind = metrics::Route::of(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let metrics = std::sync::Arc::clone(&app.metrics);
    let response = if let Err(refusal) = check_host(&request) {
        refusal.into_response()
    } else if request.method() == Method::OPTIONS {
        preflight(&request)
    } else {
        route(app, request).await
    };
    metrics.request(kind, response.status(), started.elapsed());
    response
}

/// Routes a request to its handler. Handlers other than a stream's
/// (which serve most requests) are boxed: a future holds room for the
/// largest future it awaits for its whole life, and a long-poll waits
/// for seconds (a request's future held 7,536 bytes with them inline;
/// 4,616 with these and the rarer stream handlers boxed).
async fn route(app: AppState, request: Request<Body>) -> Response {
    let path = request.uri().path();
    if let Some(name) = path.strip_prefix(STREAM_PREFIX).filter(|n| !n.is_empty()) {
        // The reserved namespace comes before streams (an encoded
        // `__ds` is the same name).
        let reserved = subscriptions::is_reserved(name)
            || (name.contains('%')
                && crate::headers::percent_decode(name)
                    .is_ok_and(|n| subscriptions::is_reserved(&n)));
        if reserved {
            return Box::pin(subscriptions::handle(app, request)).await;
        }
        return handlers::stream(app, request).await;
    }
    if app.config.console && crate::console::serves(path) {
        return crate::console::handle(request.method(), path);
    }
    if path == handlers::list::PATH {
        return Box::pin(handlers::list::list(&app, request))
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    if path.starts_with(handlers::members::PREFIX) {
        return Box::pin(handlers::members::change(app, request)).await;
    }
    if path == subscriptions::ROTATE_KEY_PATH {
        return Box::pin(subscriptions::rotate_key(app, request)).await;
    }
    if path == handlers::read_token::PATH {
        return handlers::read_token::mint(&app, &request)
            .unwrap_or_else(IntoResponse::into_response);
    }
    // Health and readiness stay open: load balancers probe them.
    let (fixed, admin): (fn(&AppState) -> Response, bool) = match path {
        "/health" => (handlers::health, false),
        "/ready" => (handlers::ready, false),
        "/_runnel/status" => (handlers::status, true),
        "/metrics" => (handlers::metrics, true),
        _ => return ApiError::NotFound.into_response(),
    };
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        if admin {
            if let Err(e) = handlers::check_admin(&app, &request) {
                return e.into_response();
            }
        }
        fixed(&app)
    } else {
        let mut response = ApiError::MethodNotAllowed.into_response();
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET,HEAD"));
        response
    }
}

/// An HTTP/1.1 request carries exactly one Host header (RFC 9112 3.2): a
/// missing or repeated one is refused with 400, as the RFC requires, so
/// that no proxy in front and this server disagree on the request's
/// authority. (HTTP/1.0 has no such rule.)
fn check_host(request: &Request<Body>) -> Result<(), ApiError> {
    if request.version() != Version::HTTP_11 {
        return Ok(());
    }
    match request.headers().get_all(HOST).iter().count() {
        1 => Ok(()),
        0 => Err(ApiError::bad("an HTTP/1.1 request needs a Host header")),
        _ => Err(ApiError::bad("a request may carry only one Host header")),
    }
}

/// Browser security and CORS headers, on every response.
const PROTOCOL_HEADERS: [(HeaderName, &str); 4] = [
    (X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (CROSS_ORIGIN_RESOURCE_POLICY, "cross-origin"),
    (ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
    (ACCESS_CONTROL_EXPOSE_HEADERS, names::EXPOSED),
];

fn add_protocol_headers(h: &mut http::HeaderMap) {
    for (name, value) in PROTOCOL_HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
}

/// Removes the headers every response carries (from a response relayed
/// from another node, which added its own).
pub fn remove_protocol_headers(h: &mut http::HeaderMap) {
    for (name, _) in PROTOCOL_HEADERS {
        h.remove(name);
    }
}

/// The headers every response carries as HTTP/1.1 header lines.
pub fn protocol_head() -> &'static [u8] {
    static RENDERED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| {
        let mut out = Vec::new();
        for (name, value) in PROTOCOL_HEADERS {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out
    })
}

/// The CORS preflight answer: every method the protocol uses, and whatever
/// headers the browser asks to send.
fn preflight(request: &Request<Body>) -> Response {
    let allow_headers = request
        .headers()
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("*"));
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
    );
    h.insert(ACCESS_CONTROL_ALLOW_HEADERS, allow_headers);
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
    response
}
