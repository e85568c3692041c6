//! The console: a small web page for people (`GET /console`), embedded in
//! the binary and served as three static files, so it works offline with
//! nothing else installed. It uses the public API only (listing, reads,
//! SSE, appends, status and metrics), with the bearer token the user
//! types in. Stream content is always shown as text; the page's Content
//! Security Policy allows no script but its own, so markup in a stream
//! stays inert even if it ever reached the DOM as HTML.

use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, StatusCode};

use crate::error::ApiError;

pub const PREFIX: &str = "/console";

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                      form-action 'self'; frame-ancestors 'none'";

/// Whether `path` is one of the console's.
pub fn serves(path: &str) -> bool {
    path == PREFIX || path.starts_with("/console/")
}

/// Answers a console path.
pub fn handle(method: &Method, path: &str) -> Response {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return ApiError::MethodNotAllowed.into_response();
    }
    let (body, content_type) = match path {
        "/console" | "/console/" | "/console/index.html" => (INDEX, "text/html; charset=utf-8"),
        "/console/app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/console/app.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return ApiError::NotFound.into_response(),
    };
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
