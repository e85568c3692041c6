//! Request handlers, one module per operation. [`stream`] dispatches a
//! request on `/v1/stream/{name}` by method.

mod append;
mod create;
mod delete;
mod head;
mod read;
mod sse;

pub use sse::RenderCache as SseRenderCache;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, Method};

use crate::error::ApiError;
use crate::headers;
use crate::AppState;

pub async fn stream(State(app): State<AppState>, request: Request) -> Response {
    let result = match headers::stream_name(request.uri().path()) {
        Ok(name) => dispatch(app, name, request).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn dispatch(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    match request.method().clone() {
        Method::GET => read::get(app, name, request).await,
        Method::HEAD => head::head(app, name),
        Method::PUT => create::put(app, name, request).await,
        Method::POST => append::post(app, name, request).await,
        Method::DELETE => delete::delete(app, name).await,
        _ => Err(ApiError::MethodNotAllowed),
    }
}

pub async fn not_found() -> Response {
    ApiError::NotFound.into_response()
}

/// Reads a request body up to the configured limit.
async fn body_bytes(app: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let limit = app.config.max_append_bytes;
    axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::bad(format!("could not read the request body: {e}"))
            }
        })
}

/// A header value from a string the server produced (offsets, numbers,
/// content types already validated as header values).
fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"))
}
