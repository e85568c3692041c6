//! `POST /_runnel/read-token?prefix=P&ttl_secs=N`: a short-lived
//! read-only token for the streams under `P`, for a caller who may read
//! them all. Browsers' `EventSource` cannot send an `Authorization`
//! header; it sends this token as `?access_token=` instead. Needs access
//! control on and a `[jwt] hs256_secret` to sign with.

use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};

use crate::auth::{Access, Credentials};
use crate::error::ApiError;
use crate::headers::{percent_decode, strict_integer};
use crate::AppState;

pub const PATH: &str = "/_runnel/read-token";

/// Lifetime of a token when the request names none.
const DEFAULT_TTL_SECS: u64 = 300;

pub fn mint(app: &AppState, request: &Request) -> Result<Response, ApiError> {
    if request.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let Some(auth) = &app.auth else {
        return Err(ApiError::NotFound);
    };
    let mut prefix = None;
    let mut ttl_secs = DEFAULT_TTL_SECS;
    for pair in request.uri().query().unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("prefix", value)) => prefix = Some(percent_decode(value)?),
            Some(("ttl_secs", value)) => ttl_secs = strict_integer(value, "ttl_secs")?,
            _ => {}
        }
    }
    let prefix = prefix.ok_or_else(|| ApiError::bad("a read token needs ?prefix="))?;
    let principal = auth.check(&Credentials::of(request), Access::ReadTokenFor(&prefix))?;
    let Some((token, expires_at)) =
        auth.mint_read_token(&principal.name, &prefix, Duration::from_secs(ttl_secs))
    else {
        return Ok((
            StatusCode::NOT_IMPLEMENTED,
            "this server mints no tokens: the auth file has no [jwt] hs256_secret\n",
        )
            .into_response());
    };
    let body = serde_json::json!({
        "token": token,
        "prefix": prefix,
        "expires_at": expires_at,
    });
    Ok((
        [
            (http::header::CACHE_CONTROL, "no-store"),
            (http::header::CONTENT_TYPE, "application/json"),
        ],
        body.to_string(),
    )
        .into_response())
}
