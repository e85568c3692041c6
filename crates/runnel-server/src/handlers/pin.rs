//! Forks across groups (`runnel_core::fork_copy`), on both sides.
//!
//! Source side, `{source}/$pin` (an internal sub-resource; requests carry
//! `Runnel-Pin-Token`):
//! - `POST` pins the source for one fork creation and answers the fork
//!   material (the source's metadata and bytes up to the fork point,
//!   `Stream-Fork-Offset` / `Stream-Fork-Sub-Offset` as on a fork PUT);
//! - `DELETE` releases the pin (idempotent).
//!
//! Fork side: [`request_pin`] and [`send_unpins`] make those requests
//! through [`super::stream`], so they reach the source group's leader
//! wherever it is, as a client request would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use runnel_core::offset::parse_offset;
use runnel_core::{Applied, Command, ForkFrom, ForkMaterial, RemotePin};

use crate::error::ApiError;
use crate::headers::{self, names, STREAM_PREFIX};
use crate::AppState;

/// The pin a request is about.
pub const PIN_TOKEN: HeaderName = HeaderName::from_static("runnel-pin-token");
const MATERIAL_TYPE: &str = "application/vnd.runnel.fork-material";

/// `POST {source}/$pin`: pins and answers the fork material.
pub async fn pin(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let h = request.headers();
    let token = pin_token(h)?;
    let offset = headers::text(h, &names::STREAM_FORK_OFFSET)?
        .map(|o| parse_offset(o).map_err(|e| ApiError::bad(format!("Stream-Fork-Offset: {e}"))))
        .transpose()?
        .map(|o| o.position());
    let sub_offset = headers::text(h, &names::STREAM_FORK_SUB_OFFSET)?
        .map(|s| headers::strict_integer(s, "Stream-Fork-Sub-Offset"))
        .transpose()?
        .unwrap_or(0);
    let command = Command::Pin {
        name: name.clone(),
        token: token.clone(),
        offset,
        sub_offset,
    };
    let Applied::Pinned { point } = app.node.propose(command).await? else {
        unreachable!("a pin answers Pinned");
    };
    let material = app.node.engine_for(&name).fork_material(&name, point).await;
    let limit = app.config.max_fork_copy_bytes;
    let too_large = matches!(&material, Ok((m, _)) if m.data_len() > limit);
    if material.is_err() || too_large {
        let _ = app.node.propose(Command::Unpin { name, token }).await;
    }
    let (material, data) = material?;
    if too_large {
        return Err(ApiError::ForkCopyTooLarge {
            bytes: material.data_len(),
            limit,
        });
    }
    let body = material.encode(&data);
    Ok((
        [(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(MATERIAL_TYPE),
        )],
        body,
    )
        .into_response())
}

/// `DELETE {source}/$pin`: releases a pin, then whatever pins that
/// released in turn (a soft-deleted source that was itself a copy).
pub async fn unpin(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let token = pin_token(request.headers())?;
    let Applied::Unpinned { released } = app.node.propose(Command::Unpin { name, token }).await?
    else {
        unreachable!("an unpin answers Unpinned");
    };
    send_unpins(&app, released).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn pin_token(h: &http::HeaderMap) -> Result<String, ApiError> {
    headers::text(h, &PIN_TOKEN)?
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ApiError::bad("$pin requests need a Runnel-Pin-Token header"))
}

/// Marks a request this process made itself (see [`internal_request`]).
#[derive(Clone, Copy)]
struct Internal;

/// Whether this process made `request` itself.
pub(super) fn made_here(request: &Request) -> bool {
    request.extensions().get::<Internal>().is_some()
}

/// `$pin` is for nodes, not clients: a request made in this process, or
/// forwarded by a peer (which made it), is let through. (With access
/// control on, the cluster key decides instead: see `check_access`.)
pub(super) fn check_internal(request: &Request) -> Result<(), ApiError> {
    let internal = request.extensions().get::<Internal>().is_some()
        || request
            .headers()
            .contains_key(&crate::forward::FORWARDED_BY);
    if internal {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "$pin is internal: nodes use it to fork a stream into another group".into(),
        ))
    }
}

/// A token no other fork creation uses: this node's label, the time and
/// a counter.
pub(super) fn new_token(app: &AppState) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        app.node.node_label(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Fork side: pins `fork.source` under `token` and fetches what the fork
/// copies. A refusal comes back as the source group's response (404 for
/// a missing source, 409 for a deleted one, 400 for a bad offset...).
pub(super) async fn request_pin(
    app: &AppState,
    fork: &ForkFrom,
    token: &str,
) -> Result<(ForkMaterial, Bytes), Response> {
    let mut request = node_request(app, Method::POST, &fork.source, token);
    let h = request.headers_mut();
    if let Some(offset) = fork.offset {
        let offset = runnel_core::Offset(offset).to_string();
        h.insert(
            names::STREAM_FORK_OFFSET,
            HeaderValue::from_str(&offset).expect("offsets are header-safe"),
        );
    }
    h.insert(
        names::STREAM_FORK_SUB_OFFSET,
        HeaderValue::from(fork.sub_offset),
    );
    let response = Box::pin(super::stream(app.clone(), request)).await;
    if response.status() != StatusCode::OK {
        return Err(response);
    }
    let limit = usize::try_from(app.config.max_fork_copy_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    let body = axum::body::to_bytes(response.into_body(), limit)
        .await
        .map_err(|e| {
            ApiError::Unavailable(format!("reading the fork source's copy: {e}")).into_response()
        })?;
    let (material, data) = ForkMaterial::decode(&body).map_err(|e| {
        ApiError::Unavailable(format!("the fork source's copy is malformed: {e}")).into_response()
    })?;
    let data = body.slice_ref(data);
    Ok((material, data))
}

/// Sends each released pin back to its source's group. A pin that cannot
/// be released now is logged: the source then stays soft-deleted (410)
/// instead of going away.
pub(crate) async fn send_unpins(app: &AppState, pins: Vec<RemotePin>) {
    for pin in pins {
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=5 {
            let request = node_request(app, Method::DELETE, &pin.source, &pin.token);
            let response = Box::pin(super::stream(app.clone(), request)).await;
            if response.status().is_success() {
                break;
            }
            if attempt == 5 || response.status() != StatusCode::SERVICE_UNAVAILABLE {
                tracing::warn!(
                    source = %pin.source,
                    token = %pin.token,
                    status = %response.status(),
                    "could not release a fork's pin on its source"
                );
                break;
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
}

/// Releases, every second, the pins that expiries on this node released;
/// ends once the application is gone.
pub async fn release_expired_pins(app: std::sync::Weak<crate::App>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(app) = AppState::upgrade(&app) else {
            return;
        };
        let pins = app.node.take_released_pins();
        if !pins.is_empty() {
            send_unpins(&app, pins).await;
        }
    }
}

fn internal_request(method: Method, source: &str, token: &str) -> Request {
    let path = format!("{STREAM_PREFIX}{}/$pin", headers::encode_path(source));
    let mut request = Request::new(Body::empty());
    request.extensions_mut().insert(Internal);
    *request.method_mut() = method;
    *request.uri_mut() = path.parse().expect("encoded paths are valid URIs");
    if let Ok(token) = HeaderValue::from_str(token) {
        request.headers_mut().insert(PIN_TOKEN, token);
    }
    request
}

/// A `$pin` request as `internal_request` makes it, with the cluster key
/// when access control is on, for when it is forwarded to another node.
fn node_request(app: &AppState, method: Method, source: &str, token: &str) -> Request {
    let mut request = internal_request(method, source, token);
    if let Some(key) = app.auth.as_ref().and_then(|auth| auth.cluster_key()) {
        request.headers_mut().insert(crate::auth::CLUSTER_KEY, key);
    }
    request
}
