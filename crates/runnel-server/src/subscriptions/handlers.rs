//! The subscription endpoints, served by the control group's leader:
//! management (`PUT`/`GET`/`DELETE /subscriptions/{id}`, linking and
//! unlinking streams), the signing keys (`GET /jwks.json`), and the
//! answers of workers (`callback`, `claim`, `ack`, `release`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use runnel_core::offset::parse_offset;
use runnel_core::subscription::{
    Config, Delivery, Keys, Seen, SubCommand, SubError, SubOutcome, Subscription,
};
use runnel_engine::{now_ms, Route};
use serde::Deserialize;
use serde_json::json;

use super::{base_url, delivery, keys, render, Service};
use crate::auth::{Access, Credentials, Operation};
use crate::error::ApiError;
use crate::headers::{percent_decode, STREAM_PREFIX};
use crate::AppState;

/// Largest request body of a subscription endpoint.
const MAX_BODY_BYTES: usize = 1 << 20;
/// Callback and claim tokens are valid this long (and only for their
/// wake's generation, which fencing checks).
const TOKEN_TTL_SECS: u64 = 3600;
/// Longest subscription id.
const MAX_ID_BYTES: usize = 256;

/// Routes a request under `__ds/` by path and method.
pub async fn dispatch(app: &AppState, request: Request) -> Result<Response, ApiError> {
    let path = request.uri().path().to_string();
    let rest = path
        .strip_prefix(STREAM_PREFIX)
        .and_then(|p| p.strip_prefix(super::RESERVED_SEGMENT))
        .unwrap_or("")
        .trim_start_matches('/');
    let segments: Vec<&str> = rest.split('/').collect();
    let method = request.method().clone();
    match segments.as_slice() {
        ["jwks.json"] => {
            only(&method, &[Method::GET, Method::HEAD])?;
            jwks(app).await
        }
        ["subscriptions", id] => {
            let id = subscription_id(id)?;
            match method {
                Method::PUT => put(app, id, request).await,
                Method::GET | Method::HEAD => {
                    check_grant(app, &request, scope_of(app, &id)?.iter())?;
                    get(app, &id).await
                }
                Method::DELETE => {
                    check_grant(app, &request, scope_of(app, &id)?.iter())?;
                    let now_ms = now_ms() as u64;
                    app.node
                        .propose_control(SubCommand::Delete { id, now_ms })
                        .await?;
                    Ok(StatusCode::NO_CONTENT.into_response())
                }
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        ["subscriptions", id, "streams"] => {
            only(&method, &[Method::POST])?;
            add_streams(app, subscription_id(id)?, request).await
        }
        ["subscriptions", id, "streams", stream @ ..] if !stream.is_empty() => {
            only(&method, &[Method::DELETE])?;
            let id = subscription_id(id)?;
            let stream = percent_decode(&stream.join("/"))?
                .trim_matches('/')
                .to_string();
            check_grant(app, &request, scope_of(app, &id)?.iter())?;
            app.node
                .propose_control(SubCommand::RemoveStream { id, stream })
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ["subscriptions", id, action @ ("callback" | "ack" | "release" | "claim")] => {
            only(&method, &[Method::POST])?;
            let id = subscription_id(id)?;
            match *action {
                "claim" => claim(app, id, request).await,
                "release" => release(app, id, request).await,
                webhook_or_pull => {
                    acknowledge(app, id, webhook_or_pull == "callback", request).await
                }
            }
        }
        _ => Err(SubError::NotFound(rest.to_string()).into()),
    }
}

fn only(method: &Method, allowed: &[Method]) -> Result<(), ApiError> {
    if allowed.contains(method) {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed)
    }
}

fn subscription_id(raw: &str) -> Result<String, ApiError> {
    let id = percent_decode(raw)?;
    if id.is_empty()
        || id.len() > MAX_ID_BYTES
        || id.contains('/')
        || id.chars().any(char::is_control)
    {
        return Err(SubError::invalid(format!(
            "a subscription id is 1 to {MAX_ID_BYTES} bytes without '/' or control characters"
        ))
        .into());
    }
    Ok(id)
}

/// A request's body, and the request without it (for its headers).
async fn split(request: Request) -> Result<(Request, Bytes), ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(MAX_BODY_BYTES as u64))?;
    Ok((Request::from_parts(parts, Body::empty()), bytes))
}

async fn body_of(request: Request) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(MAX_BODY_BYTES as u64))
}

fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| SubError::invalid(format!("request body: {e}")).into())
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// What managing a subscription needs, for access control: `subscribe`
/// on its explicit streams and its pattern's literal prefix, and, for a
/// pull-wake subscription, `append` on its wake stream (the server
/// appends there on its behalf).
fn scope(config: &Config) -> Vec<(Operation, String)> {
    let mut scope: Vec<(Operation, String)> = config
        .streams
        .iter()
        .map(|s| (Operation::Subscribe, s.clone()))
        .collect();
    if let Some(pattern) = &config.pattern {
        scope.push((Operation::Subscribe, pattern.literal_prefix()));
    }
    if let Delivery::PullWake { wake_stream } = &config.delivery {
        scope.push((Operation::Append, wake_stream.clone()));
    }
    scope
}

fn scope_of(app: &AppState, id: &str) -> Result<Vec<(Operation, String)>, ApiError> {
    Ok(scope(&subscription(app, id)?.config))
}

/// With access control on: every grant `scope` names.
fn check_grant<'a>(
    app: &AppState,
    request: &Request,
    scope: impl Iterator<Item = &'a (Operation, String)>,
) -> Result<(), ApiError> {
    let Some(auth) = &app.auth else {
        return Ok(());
    };
    let needs: Vec<(Operation, &str)> = scope.map(|(op, s)| (*op, s.as_str())).collect();
    auth.check(&Credentials::of(request), Access::Streams(&needs))?;
    Ok(())
}

/// The subscription `id` as this node applied it.
pub(super) fn subscription(app: &AppState, id: &str) -> Result<Subscription, SubError> {
    let mut found = None;
    app.node
        .with_subscriptions(&mut |subs| found = subs.get(id).cloned());
    found.ok_or_else(|| SubError::NotFound(id.to_string()))
}

/// The keys the control group holds.
fn stored_keys(app: &AppState) -> Option<Keys> {
    let mut keys = None;
    app.node
        .with_subscriptions(&mut |subs| keys = subs.keys().cloned());
    keys
}

/// The signing keys, made and committed first if the control group has
/// none yet.
pub(super) async fn signer(app: &AppState) -> Result<Arc<keys::Signer>, ApiError> {
    let keys = match stored_keys(app) {
        Some(keys) => keys,
        None => {
            let keys = keys::generate();
            app.node
                .propose_control(SubCommand::SetKeys { keys })
                .await?;
            // The first keys committed win; these may be another's.
            stored_keys(app)
                .ok_or_else(|| ApiError::Unavailable("signing keys not applied yet".into()))?
        }
    };
    let service: &Service = &app.subscriptions;
    let mut cached = service.signer.lock().expect("signer lock");
    if let Some((known, signer)) = cached.as_ref() {
        if *known == keys {
            return Ok(Arc::clone(signer));
        }
    }
    let signer =
        Arc::new(keys::Signer::new(&keys).map_err(|e| ApiError::Unavailable(e.to_string()))?);
    *cached = Some((keys, Arc::clone(&signer)));
    Ok(signer)
}

/// A new signing key; the current one stays published `keep_secs`.
pub(super) async fn rotate_key(app: &AppState, keep_secs: u64) -> Result<Response, ApiError> {
    let current = signer(app).await?;
    let now = now_ms() as u64;
    app.node
        .propose_control(SubCommand::RotateKeys {
            signing_pkcs8: keys::generate().signing_pkcs8,
            current_public: current.public_key(),
            keep_until_ms: now + keep_secs.saturating_mul(1000),
            now_ms: now,
        })
        .await?;
    let signer = signer(app).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "kid": signer.kid(), "jwks": signer.jwks(now) }),
    ))
}

async fn jwks(app: &AppState) -> Result<Response, ApiError> {
    let signer = signer(app).await?;
    let mut response = json_response(StatusCode::OK, &signer.jwks(now_ms() as u64));
    let h = response.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/jwk-set+json"),
    );
    h.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    Ok(response)
}

async fn get(app: &AppState, id: &str) -> Result<Response, ApiError> {
    let sub = subscription(app, id)?;
    let kid = signer(app).await?;
    let base = effective_base(app, &sub);
    let body = render::subscription(&sub, &base, Some(kid.kid()), |s| minted(app, s));
    Ok(json_response(StatusCode::OK, &body))
}

/// The base URL of a subscription's URLs: the configured public URL, or
/// the one its creator used.
pub(super) fn effective_base(app: &AppState, sub: &Subscription) -> String {
    match &app.config.public_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => sub.base_url.clone(),
    }
}

/// Stream `stream` as this node applied it (in a group it holds no copy
/// of: as the group's leader last answered, see [`super::remote`]): its
/// incarnation and tail, `None` when it does not exist.
pub(super) fn seen(app: &AppState, stream: &str) -> Option<Seen> {
    minted(app, stream).map(|(seen, _)| seen)
}

/// [`seen`] with the incarnation the stream's offsets are minted with.
pub(super) fn minted(app: &AppState, stream: &str) -> Option<(Seen, u64)> {
    if !app.node.holds_group_of(stream) {
        return app.subscriptions.remote.get_minted(stream);
    }
    app.node.head(stream).ok().map(|info| {
        let seen = Seen {
            id: info.id,
            tail: info.next_offset.0,
        };
        (seen, info.incarnation)
    })
}

/// Each stream's tail on this node, `None` for streams that do not exist.
pub(super) fn tail_of(app: &AppState, stream: &str) -> Option<u64> {
    seen(app, stream).map(|s| s.tail)
}

/// [`seen`], including every write acknowledged before the call (this
/// node may follow the stream's group a little behind).
pub(super) async fn fresh_seen(app: &AppState, stream: &str) -> Option<Seen> {
    if !app.node.holds_group_of(stream) {
        super::remote::fetch(app, &[stream.to_string()]).await;
    } else if matches!(app.node.route(stream), Route::Local) {
        let _ = app.node.read_barrier(stream).await;
    } else {
        app.node.prepare_live_read(stream).await;
    }
    seen(app, stream)
}

async fn fresh_tail(app: &AppState, stream: &str) -> Option<u64> {
    fresh_seen(app, stream).await.map(|s| s.tail)
}

async fn put(app: &AppState, id: String, request: Request) -> Result<Response, ApiError> {
    let base = base_url(app, &request);
    let (request, bytes) = split(request).await?;
    let config = Config::parse(&bytes, &app.config.webhook_policy)?;
    check_grant(app, &request, scope(&config).iter())?;
    let signer = signer(app).await?;
    super::remote::fetch(app, &config.streams).await;
    let mut tails: Vec<(String, Option<Seen>)> = config
        .streams
        .iter()
        .map(|s| (s.clone(), seen(app, s)))
        .collect();
    if config.pattern.is_some() {
        let matching =
            super::remote::streams_where(app, &|name| config.watches_by_pattern(name)).await;
        tails.extend(
            matching
                .into_iter()
                .filter(|name| config.streams.binary_search(name).is_err())
                .map(|name| {
                    let seen = seen(app, &name);
                    (name, seen)
                }),
        );
    }
    let outcome = app
        .node
        .propose_control(SubCommand::Put {
            id: id.clone(),
            config,
            tails,
            now_ms: now_ms() as u64,
            base_url: base,
        })
        .await?;
    let status = match outcome {
        SubOutcome::Created => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    app.node.activity().kick();
    let sub = subscription(app, &id)?;
    let body = render::subscription(&sub, &effective_base(app, &sub), Some(signer.kid()), |s| {
        minted(app, s)
    });
    Ok(json_response(status, &body))
}

#[derive(Deserialize)]
struct StreamsBody {
    streams: Vec<String>,
}

async fn add_streams(app: &AppState, id: String, request: Request) -> Result<Response, ApiError> {
    let (request, bytes) = split(request).await?;
    let body: StreamsBody = json_body(&bytes)?;
    let streams: Vec<String> = body
        .streams
        .iter()
        .map(|s| s.trim_matches('/').to_string())
        .collect();
    if streams.iter().any(String::is_empty) {
        return Err(SubError::invalid("streams may not hold an empty name").into());
    }
    let linking: Vec<(Operation, String)> = streams
        .iter()
        .map(|s| (Operation::Subscribe, s.clone()))
        .collect();
    check_grant(app, &request, scope_of(app, &id)?.iter().chain(&linking))?;
    super::remote::fetch(app, &streams).await;
    let tails = streams
        .into_iter()
        .map(|s| {
            let seen = seen(app, &s);
            (s, seen)
        })
        .collect();
    app.node
        .propose_control(SubCommand::AddStreams { id, tails })
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The bearer token of a worker's request.
fn bearer(request: &Request) -> Result<String, SubError> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .ok_or_else(|| SubError::TokenInvalid("a bearer token is needed".into()))
}

/// Checks a worker's token for `id` and that it belongs to the wake
/// `generation` it names.
async fn check_token(
    app: &AppState,
    id: &str,
    token: &str,
    generation: u64,
) -> Result<(), ApiError> {
    let signer = signer(app).await?;
    let minted_for = signer.verify_token(token, id, now_ms() as u64 / 1000)?;
    if minted_for != generation {
        return Err(SubError::Fenced.into());
    }
    Ok(())
}

#[derive(Deserialize)]
struct AckBody {
    wake_id: String,
    generation: u64,
    #[serde(default)]
    acks: Vec<AckItem>,
    #[serde(default)]
    done: bool,
}

#[derive(Deserialize)]
struct AckItem {
    #[serde(alias = "path")]
    stream: String,
    offset: String,
}

/// `callback` (webhook) and `ack` (pull-wake): cursors move, the lease is
/// extended, and with `done` the wake ends (and another starts at once if
/// work arrived meanwhile).
async fn acknowledge(
    app: &AppState,
    id: String,
    webhook: bool,
    request: Request,
) -> Result<Response, ApiError> {
    let token = bearer(&request)?;
    let bytes = body_of(request).await?;
    let body: AckBody = json_body(&bytes)?;
    let sub = subscription(app, &id)?;
    let is_webhook = matches!(sub.config.delivery, Delivery::Webhook { .. });
    if webhook != is_webhook {
        return Err(SubError::invalid(if webhook {
            "callback is for webhook subscriptions; pull-wake workers ack"
        } else {
            "ack is for pull-wake subscriptions; webhooks answer at callback"
        })
        .into());
    }
    check_token(app, &id, &token, body.generation).await?;
    let mut acks = Vec::with_capacity(body.acks.len());
    for item in body.acks {
        let stream = item.stream.trim_matches('/').to_string();
        let offset = parse_offset(&item.offset)
            .map_err(|_| SubError::InvalidOffset(format!("{:?} is not an offset", item.offset)))?
            .0;
        let known = sub
            .wake
            .as_ref()
            .and_then(|w| w.snapshot.get(&stream).copied())
            .into_iter()
            .chain(tail_of(app, &stream))
            .max();
        let tail = match known {
            Some(tail) if tail >= offset => tail,
            _ => fresh_tail(app, &stream).await.unwrap_or(0),
        };
        if offset > tail {
            return Err(SubError::InvalidOffset(format!(
                "{stream:?}: {} is beyond the stream's tail",
                item.offset
            ))
            .into());
        }
        acks.push((stream, offset));
    }
    let lease_until_ms = now_ms() as u64 + sub.config.lease_ttl_ms;
    app.node
        .propose_control(SubCommand::Ack {
            id: id.clone(),
            generation: body.generation,
            wake_id: body.wake_id,
            acks,
            done: body.done,
            lease_until_ms,
        })
        .await?;
    let next_wake = if body.done {
        delivery::wake_if_pending(app, &id).await?
    } else {
        false
    };
    app.node.activity().kick();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "ok": true, "next_wake": next_wake }),
    ))
}

#[derive(Deserialize)]
struct ClaimBody {
    worker: String,
}

/// A pull-wake worker takes the wake in flight, or a new one made on the
/// spot if work is pending.
async fn claim(app: &AppState, id: String, request: Request) -> Result<Response, ApiError> {
    let (request, bytes) = split(request).await?;
    check_grant(app, &request, scope_of(app, &id)?.iter())?;
    let body: ClaimBody = json_body(&bytes)?;
    if body.worker.trim().is_empty() {
        return Err(SubError::invalid("claim needs a worker name").into());
    }
    let sub = subscription(app, &id)?;
    let mut snapshot = delivery::snapshot(app, &sub);
    if sub.wake.is_none() && sub.pending(|s| snapshot.get(s).copied()).is_empty() {
        // Work acknowledged to a writer may not have reached this node's
        // copy of its stream yet.
        let mut fresh = BTreeMap::new();
        for stream in sub.links.keys() {
            if let Some(tail) = fresh_tail(app, stream).await {
                fresh.insert(stream.clone(), tail);
            }
        }
        snapshot = fresh;
    }
    let pending = !sub.pending(|s| snapshot.get(s).copied()).is_empty();
    let new_wake = pending.then(|| (delivery::new_wake_id(), snapshot));
    let now = now_ms() as u64;
    let outcome = app
        .node
        .propose_control(SubCommand::Claim {
            id: id.clone(),
            worker: body.worker,
            new_wake,
            now_ms: now,
            lease_until_ms: now + sub.config.lease_ttl_ms,
        })
        .await?;
    let SubOutcome::Claimed {
        generation,
        wake_id,
    } = outcome
    else {
        unreachable!("a claim answers Claimed");
    };
    let claimed = subscription(app, &id)?;
    if sub.generation != claimed.generation {
        // A wake made by this claim: announce it like any other.
        delivery::announce(app, &claimed).await;
    }
    let signer = signer(app).await?;
    let token = signer.mint_token(&id, generation, now / 1000 + TOKEN_TTL_SECS);
    let streams = render::wake_streams(&claimed, |s| minted(app, s));
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "wake_id": wake_id,
            "generation": generation,
            "token": token,
            "streams": streams,
            "lease_ttl_ms": claimed.config.lease_ttl_ms,
        }),
    ))
}

#[derive(Deserialize)]
struct ReleaseBody {
    wake_id: String,
    generation: u64,
}

async fn release(app: &AppState, id: String, request: Request) -> Result<Response, ApiError> {
    let token = bearer(&request)?;
    let bytes = body_of(request).await?;
    let body: ReleaseBody = json_body(&bytes)?;
    if !matches!(
        subscription(app, &id)?.config.delivery,
        Delivery::PullWake { .. }
    ) {
        return Err(SubError::invalid("release is for pull-wake subscriptions").into());
    }
    check_token(app, &id, &token, body.generation).await?;
    app.node
        .propose_control(SubCommand::Release {
            id: id.clone(),
            generation: body.generation,
            wake_id: body.wake_id,
        })
        .await?;
    delivery::wake_if_pending(app, &id).await?;
    app.node.activity().kick();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A callback token for wake `generation` of `id`, for webhook bodies.
pub(super) fn mint_callback_token(signer: &keys::Signer, id: &str, generation: u64) -> String {
    signer.mint_token(id, generation, now_ms() as u64 / 1000 + TOKEN_TTL_SECS)
}
