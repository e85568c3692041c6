//! `GET /v1/streams?prefix=P&limit=N&cursor=C`: the streams, a page at a
//! time in name order (an extension of Runnel's; the protocol has no
//! listing). `cursor` is the `next_cursor` of the page before.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::Method;
use serde_json::json;

use crate::auth::{Access, Credentials, Operation};
use crate::error::ApiError;
use crate::headers::percent_decode;
use crate::AppState;

pub const PATH: &str = "/v1/streams";
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

pub async fn list(app: &AppState, request: Request) -> Result<Response, ApiError> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return Err(ApiError::MethodNotAllowed);
    }
    let (mut prefix, mut cursor, mut limit) = (String::new(), None, DEFAULT_LIMIT);
    for pair in request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(&value.replace('+', " "))?;
        match key {
            "prefix" => prefix = value,
            "cursor" if !value.is_empty() => cursor = Some(value),
            "cursor" => {}
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| ApiError::bad(format!("limit is 1 to {MAX_LIMIT}")))?
            }
            other => return Err(ApiError::bad(format!("unknown parameter {other:?}"))),
        }
    }
    if let Some(auth) = &app.auth {
        let needs = [(Operation::Read, prefix.as_str())];
        auth.check(&Credentials::of(&request), Access::Streams(&needs))?;
    }
    drop(request);
    let (page, more) = app
        .node
        .list_streams(&prefix, cursor.as_deref(), limit)
        .await?;
    let next_cursor = more.then(|| page.last().map(|l| l.name.clone())).flatten();
    let streams: Vec<_> = page
        .iter()
        .map(|l| {
            let at = |ms: i64| {
                chrono::DateTime::from_timestamp_millis(ms)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            };
            let incarnation = runnel_core::offset::incarnation(l.id, l.created_at_ms);
            let token = |o: runnel_core::Offset| o.token_in(incarnation).as_str().to_string();
            json!({
                "name": l.name,
                "content_type": l.content_type,
                "next_offset": token(l.next_offset),
                "earliest_offset": token(l.earliest),
                "size_bytes": l.next_offset.0 - l.earliest.0,
                "closed": l.closed,
                "ttl_secs": l.ttl_secs,
                "expires_at": l.expires_at_ms.and_then(at),
                "created_at": at(l.created_at_ms),
            })
        })
        .collect();
    let body = json!({ "streams": streams, "next_cursor": next_cursor });
    Ok((
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response())
}
