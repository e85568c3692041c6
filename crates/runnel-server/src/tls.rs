//! HTTP/2 inside TLS: the connections that negotiate `h2` through ALPN.
//! (HTTP/1.1 inside TLS takes the same way as plain HTTP/1.1; the TLS
//! configurations themselves come from `runnel-tls`.)
//!
//! Browsers open at most six HTTP/1.1 connections per origin, so a page
//! with more SSE streams needs HTTP/2. Its server is hyper's, with limits
//! against the known floods: concurrent streams per connection, streams
//! a client resets before they are accepted (the "rapid reset" attack;
//! [`cancel_budget`] bounds the ones reset after), and streams it makes
//! fail.

use std::time::{Duration, Instant};

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;

use crate::cancel_budget::CancelBudget;
use crate::{auth, AppState, ServerConfig};

/// Streams one HTTP/2 connection may have open at once.
const MAX_CONCURRENT_STREAMS: u32 = 256;
/// Streams a client may reset before they are accepted, at once.
const MAX_PENDING_RESETS: usize = 20;
/// Streams a connection may make fail (errors, resets) before it is closed.
const MAX_ERROR_RESETS: usize = 1024;

pub(crate) fn http2_builder(config: &ServerConfig) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_ERROR_RESETS)
        // A peer that answers no ping within the stall timeout is gone.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(config.write_stall_timeout);
    builder
}

pub(crate) async fn serve_http2<I>(
    io: I,
    peer: auth::PeerAddr,
    app: AppState,
    builder: http2::Builder<TokioExecutor>,
    watcher: Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (burst, per_sec) = (
        app.config.http2_cancel_burst,
        app.config.http2_cancels_per_sec,
    );
    let budget = CancelBudget::new(Instant::now(), burst, per_sec);
    let inner = crate::hyper_service(app, peer);
    let service = {
        let budget = budget.clone();
        hyper::service::service_fn(move |request| {
            let answer = hyper::service::Service::call(&inner, request);
            let watched = budget.watch();
            async move {
                let response = answer.await;
                watched.answered();
                response
            }
        })
    };
    let served = watcher.watch(builder.serve_connection(TokioIo::new(io), service));
    tokio::select! {
        served = served => {
            if let Err(e) = served {
                tracing::debug!(error = %e, "HTTP/2 connection ended with an error");
            }
        }
        () = budget.exhausted() => {
            // Dropping the connection closes the socket; the handlers of
            // its open streams see their streams end.
            tracing::warn!(
                peer = %peer.0,
                "HTTP/2 connection closed: the client cancelled more requests than allowed ({burst} at once, {per_sec} a second)",
            );
        }
    }
}
