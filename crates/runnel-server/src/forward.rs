//! Forwarding to a group's leader. In a cluster any node accepts any
//! request; one for a stream whose group another node leads is relayed to
//! that node over a pooled HTTP/1.1 connection and its answer (SSE and
//! long-poll included) streamed back as it comes.
//!
//! A forwarded request carries `Runnel-Forwarded-By`; a node receiving one
//! for a group it does not lead answers 503 + Retry-After instead of
//! forwarding again, so leadership changes never make a request loop.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::{HeaderName, HOST};
use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::error::ApiError;

/// Marks a request another node forwarded (its value: that node's id).
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("runnel-forwarded-by");

/// The HTTP client that relays requests to leaders.
#[derive(Clone)]
pub struct Forwarder {
    client: Client<HttpConnector, Body>,
}

impl Default for Forwarder {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(std::time::Duration::from_secs(1)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build(connector);
        Forwarder { client }
    }
}

impl Forwarder {
    /// Relays `request` to the node at `addr` (`HOST:PORT`), as `me`.
    pub async fn forward(&self, me: &str, leader: u64, addr: &str, request: Request) -> Response {
        if request.headers().contains_key(&FORWARDED_BY) {
            return ApiError::Unavailable(format!(
                "request forwarded here, but node {leader} now leads the stream's group; retry"
            ))
            .into_response();
        }
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let uri = match format!("http://{addr}{path}").parse::<Uri>() {
            Ok(uri) => uri,
            Err(e) => {
                return ApiError::Unavailable(format!("leader address {addr:?}: {e}"))
                    .into_response()
            }
        };
        parts.uri = uri;
        if let Ok(host) = HeaderValue::from_str(addr) {
            parts.headers.insert(HOST, host);
        }
        if let Ok(me) = HeaderValue::from_str(me) {
            parts.headers.insert(FORWARDED_BY, me);
        }
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(mut response) => {
                // This node adds its own, once.
                crate::routes::remove_protocol_headers(response.headers_mut());
                response.map(Body::new)
            }
            Err(e) => {
                tracing::warn!(leader, addr, error = %e, "forwarding to the leader failed");
                ApiError::Unavailable(format!(
                    "the leader of this stream's group (node {leader}) is unreachable; retry"
                ))
                .into_response()
            }
        }
    }
}
