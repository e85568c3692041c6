//! The one entry point of every request, whether hyper or the direct path
//! ([`crate::direct_connection`]) read it: the CORS preflight, the fixed
//! paths, stream requests, and the headers every response carries.
//!
//! Routing is a match on the path rather than a router: there are two
//! fixed paths and one prefix, and a router's matching, boxing and layers
//! cost a good part of what serving a small append costs.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ALLOW,
    X_CONTENT_TYPE_OPTIONS,
};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};

use crate::error::ApiError;
use crate::headers::{names, STREAM_PREFIX};
use crate::{handlers, AppState};

const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

/// Answers `request`: the whole application.
pub async fn handle(app: AppState, request: Request<Body>) -> Response {
    let mut response = if request.method() == Method::OPTIONS {
        preflight(&request)
    } else {
        route(app, request).await
    };
    add_protocol_headers(response.headers_mut());
    response
}

async fn route(app: AppState, request: Request<Body>) -> Response {
    let path = request.uri().path();
    if path
        .strip_prefix(STREAM_PREFIX)
        .is_some_and(|name| !name.is_empty())
    {
        return handlers::stream(app, request).await;
    }
    let fixed = match path {
        "/health" => handlers::health,
        "/_runnel/status" => handlers::status,
        _ => return ApiError::NotFound.into_response(),
    };
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        fixed(&app)
    } else {
        let mut response = ApiError::MethodNotAllowed.into_response();
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET,HEAD"));
        response
    }
}

/// Browser security and CORS headers, on every response.
fn add_protocol_headers(h: &mut http::HeaderMap) {
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(
        CROSS_ORIGIN_RESOURCE_POLICY,
        HeaderValue::from_static("cross-origin"),
    );
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(names::EXPOSED),
    );
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
