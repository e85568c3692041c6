//! Headers every response carries (browser security, CORS) and the CORS
//! preflight answer.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};

use crate::headers::names;

/// Adds the security and CORS headers to every response; answers OPTIONS.
pub async fn protocol_headers(request: Request, next: Next) -> Response {
    let mut response = if request.method() == Method::OPTIONS {
        preflight(&request)
    } else {
        next.run(request).await
    };
    let h = response.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    h.insert(
        "access-control-expose-headers",
        HeaderValue::from_static(names::EXPOSED),
    );
    response
}

fn preflight(request: &Request) -> Response {
    let allow_headers = request
        .headers()
        .get("access-control-request-headers")
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("*"));
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
    );
    h.insert("access-control-allow-headers", allow_headers);
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    response
}
