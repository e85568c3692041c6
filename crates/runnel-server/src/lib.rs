//! Runnel's HTTP front: the Durable Streams protocol over the engine.
//!
//! This crate maps requests to engine commands and reads, and renders
//! answers: status codes and headers ([`error`], [`headers`]), catch-up and
//! long-poll reads and SSE ([`handlers`]), cursors ([`cursor`]), and the
//! headers every response carries ([`middleware`]). It holds no stream
//! state of its own.

pub mod cursor;
pub mod error;
pub mod handlers;
pub mod headers;
pub mod middleware;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{any, get};
use axum::Router;
use runnel_engine::Node;

/// Limits and timings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// How long a long-poll waits for data before answering 204.
    pub long_poll_timeout: Duration,
    /// Largest request body (PUT or POST); larger bodies get 413.
    pub max_append_bytes: u64,
    /// Most bytes one read response (or one SSE data event) carries.
    pub max_read_bytes: u64,
    /// Interval of SSE keepalive comments.
    pub sse_keepalive: Duration,
    /// An SSE connection is closed after this long; clients resume from
    /// their last control offset.
    pub sse_max_duration: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            long_poll_timeout: Duration::from_secs(30),
            max_append_bytes: 64 << 20,
            max_read_bytes: 1 << 20,
            sse_keepalive: Duration::from_secs(15),
            sse_max_duration: Duration::from_secs(60),
        }
    }
}

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    pub node: Arc<Node>,
    pub config: Arc<ServerConfig>,
}

/// The application: stream routes, health, and the protocol headers.
pub fn router(node: Arc<Node>, config: ServerConfig) -> Router {
    let state = AppState {
        node,
        config: Arc::new(config),
    };
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/v1/stream/{*name}", any(handlers::stream))
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn(middleware::protocol_headers))
        .with_state(state)
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
