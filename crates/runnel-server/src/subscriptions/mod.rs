//! The protocol's reserved subscription APIs (`/v1/stream/__ds/...`):
//! routing, the handlers, and delivery by webhook and pull-wake. The state
//! itself (configurations, cursors, wakes, leases, keys) is the control
//! group's, replicated like streams (`runnel_core::subscription`, see
//! `docs/subscriptions.md`); this module proposes its commands and acts on
//! what they applied.
//!
//! Every request goes to the control group's leader, like a stream request
//! to its group's leader; the leader alone delivers ([`delivery`]). In a
//! cluster that places groups on some of its nodes, the leader follows
//! streams in groups it holds no copy of by asking their leaders
//! ([`remote`]).

mod delivery;
mod handlers;
pub mod keys;
mod remote;
mod render;
mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::HOST;
use http::{HeaderName, HeaderValue};
pub use runnel_core::subscription::UrlPolicy;
use runnel_engine::Route;

pub use delivery::{deliver, INTERNAL_APPEND};

/// `POST` here (with `admin`) replaces the key that signs webhooks.
pub const ROTATE_KEY_PATH: &str = "/_runnel/rotate-webhook-key";

use crate::error::ApiError;
use crate::forward::FORWARDED_BY;
use crate::AppState;

/// The first segment of every subscription path; streams may not use it.
pub const RESERVED_SEGMENT: &str = "__ds";

/// The server's URL as the client named it, carried along when a request
/// is forwarded to the control leader (which sees its own address in
/// `Host`).
const FORWARDED_BASE: HeaderName = HeaderName::from_static("runnel-forwarded-base");

/// Whether `name` (a decoded stream path) is in the reserved namespace.
pub fn is_reserved(name: &str) -> bool {
    name.trim_start_matches('/').split('/').next() == Some(RESERVED_SEGMENT)
}

/// What the server keeps for subscriptions besides their replicated
/// state: the signing keys in usable form and the webhook client.
pub struct Service {
    webhooks: webhook::WebhookClient,
    /// The keys last read from the control group, in usable form.
    signer: Mutex<Option<(runnel_core::subscription::Keys, Arc<keys::Signer>)>>,
    /// The generation of each pull-wake subscription's wake whose event
    /// this leader appended.
    announced: Mutex<HashMap<String, u64>>,
    /// Heads of the streams followed in groups this node holds no copy of.
    remote: remote::RemoteHeads,
}

impl Service {
    pub fn new(policy: &UrlPolicy, webhook_timeout: std::time::Duration) -> Service {
        Service {
            webhooks: webhook::WebhookClient::new(policy, webhook_timeout),
            signer: Mutex::default(),
            announced: Mutex::default(),
            remote: remote::RemoteHeads::default(),
        }
    }
}

/// Answers a request under `/v1/stream/__ds/`: here when this node leads
/// the control group, else at its leader.
pub async fn handle(app: AppState, request: Request) -> Response {
    at_control_leader(app, request, |app, request| async move {
        handlers::dispatch(&app, request).await
    })
    .await
}

/// `POST /_runnel/rotate-webhook-key?keep_secs=N`, for `admin`.
pub async fn rotate_key(app: AppState, request: Request) -> Response {
    if let Err(e) = crate::handlers::check_admin(&app, &request) {
        return e.into_response();
    }
    if request.method() != http::Method::POST {
        return ApiError::MethodNotAllowed.into_response();
    }
    at_control_leader(app, request, |app, request| async move {
        let keep_secs = request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("keep_secs=")))
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad("keep_secs is a number of seconds"))
            })
            .transpose()?
            .unwrap_or(3600);
        handlers::rotate_key(&app, keep_secs).await
    })
    .await
}

/// Runs `serve` here when this node leads the control group, else
/// forwards the request to its leader.
async fn at_control_leader<F, Fut>(app: AppState, mut request: Request, serve: F) -> Response
where
    F: FnOnce(AppState, Request) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    match app.node.control_route() {
        Route::Local => serve(app, request)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Route::Forward { node, addr } => {
            if let Ok(base) = HeaderValue::from_str(&base_url(&app, &request)) {
                request.headers_mut().insert(FORWARDED_BASE, base);
            }
            crate::handlers::forward(&app, node, &addr, request).await
        }
        Route::NoLeader => ApiError::Unavailable(
            "the control group (subscriptions) has no leader at the moment; retry".into(),
        )
        .into_response(),
    }
}

/// The server's base URL for absolute URLs in answers: the configured
/// public URL, else the one the client used (as the node it reached
/// forwarded it, or from `Host`).
fn base_url(app: &AppState, request: &Request<Body>) -> String {
    if let Some(url) = &app.config.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let headers = request.headers();
    if headers.contains_key(FORWARDED_BY) {
        if let Some(base) = headers.get(FORWARDED_BASE).and_then(|v| v.to_str().ok()) {
            return base.to_string();
        }
    }
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_else(|| "localhost".into());
    let scheme = if app.config.https { "https" } else { "http" };
    format!("{scheme}://{host}")
}
