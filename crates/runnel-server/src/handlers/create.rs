//! PUT: create a stream (idempotently), optionally as a fork, closed, or
//! with an initial body.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use runnel_core::offset::parse_offset;
use runnel_core::{
    Applied, Command, ContentKind, CreateStream, ForkFrom, Inherited, RemotePin, Retention,
};

use super::{body_bytes, framed_body, head::metadata_headers, header_value, pin};
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

pub async fn put(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let h = &parts.headers;
    let content_type = headers::text(h, &http::header::CONTENT_TYPE)?.map(str::to_string);
    let ttl_secs = headers::ttl(h)?;
    let expires_at_ms = headers::expires_at(h)?;
    if ttl_secs.is_some() && expires_at_ms.is_some() {
        return Err(ApiError::bad(
            "send Stream-TTL or Stream-Expires-At, not both",
        ));
    }
    let closed = headers::closed(h)?;
    let fork = fork_request(h)?;
    let compaction = match headers::text(h, &names::STREAM_COMPACTION)? {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("state") => true,
        Some(v) => {
            return Err(ApiError::bad(format!(
                "Stream-Compaction must be \"state\" (State Protocol compaction); got {v:?}"
            )))
        }
    };
    let retention = Retention {
        max_bytes: headers::text(h, &names::STREAM_RETENTION_BYTES)?
            .map(|v| headers::strict_integer(v, "Stream-Retention-Bytes"))
            .transpose()?,
        max_age_secs: headers::text(h, &names::STREAM_RETENTION_AGE)?
            .map(|v| headers::strict_integer(v, "Stream-Retention-Age"))
            .transpose()?,
    };
    let data = body_bytes(&app, body).await?;

    // A fork of a stream in another group copies its source: pin the
    // source there and fetch the copy first.
    let cross_group = fork
        .as_ref()
        .filter(|f| !app.node.same_group(&name, &f.source));
    let pinned = match cross_group {
        Some(f) => {
            let token = pin::new_token(&app);
            match pin::request_pin(&app, f, &token).await {
                Ok((material, bytes)) => Some((token, material, bytes)),
                Err(refusal) => return Ok(refusal),
            }
        }
        None => None,
    };

    // The body is framed by the stream's content type: the request's, or
    // for a fork without one, the source's.
    let kind = match (&content_type, &fork, &pinned) {
        (Some(ct), _, _) => ContentKind::of(ct),
        (None, _, Some((_, material, _))) => ContentKind::of(&material.content_type),
        (None, Some(f), None) => app
            .node
            .head(&f.source)
            .map(|i| i.kind)
            .unwrap_or(ContentKind::Binary),
        (None, None, _) => ContentKind::Binary,
    };
    // An empty JSON array creates an empty stream.
    let mut body = framed_body(kind, &data, true)?;

    let mut inherit = None;
    let mut pin_held = None;
    if let Some((token, material, bytes)) = pinned {
        let mut data = Vec::with_capacity(bytes.len() + body.data.len());
        data.extend_from_slice(&bytes);
        data.extend_from_slice(&body.data);
        body.data = data;
        pin_held = fork.as_ref().map(|f| RemotePin {
            source: f.source.clone(),
            token: token.clone(),
        });
        inherit = Some(Inherited { token, material });
    }

    let command = Command::Create(CreateStream {
        name,
        content_type,
        ttl_secs,
        expires_at_ms,
        closed,
        fork,
        body,
        compaction,
        retention,
        inherit,
    });
    let applied = app.node.propose(command).await;
    // The pin stays only with a fork this request created.
    let created = matches!(applied, Ok(Applied::Created { created: true, .. }));
    if let (Some(pin), false) = (pin_held, created) {
        pin::send_unpins(&app, vec![pin]).await;
    }
    let Applied::Created { stream, created } = applied? else {
        unreachable!("a create answers Created");
    };
    let mut headers = HeaderMap::new();
    metadata_headers(&stream, &mut headers);
    let status = if created {
        let host = headers::text(&parts.headers, &http::header::HOST)?.unwrap_or("localhost");
        let location = format!("http://{host}{}", parts.uri.path());
        headers.insert(http::header::LOCATION, header_value(&location));
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, headers).into_response())
}

/// The fork headers, validated together.
fn fork_request(h: &HeaderMap) -> Result<Option<ForkFrom>, ApiError> {
    let source = headers::text(h, &names::STREAM_FORKED_FROM)?;
    let offset = headers::text(h, &names::STREAM_FORK_OFFSET)?;
    let sub_offset = headers::text(h, &names::STREAM_FORK_SUB_OFFSET)?;
    let Some(source) = source else {
        if offset.is_some() || sub_offset.is_some() {
            return Err(ApiError::bad(
                "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
            ));
        }
        return Ok(None);
    };
    let source = headers::stream_name(source)?;
    let offset = offset
        .map(|o| parse_offset(o).map_err(|e| ApiError::bad(format!("Stream-Fork-Offset: {e}"))))
        .transpose()?;
    let sub_offset = sub_offset
        .map(|s| headers::strict_integer(s, "Stream-Fork-Sub-Offset"))
        .transpose()?
        .unwrap_or(0);
    if sub_offset > 0 && offset.is_none() {
        return Err(ApiError::bad(
            "Stream-Fork-Sub-Offset needs Stream-Fork-Offset",
        ));
    }
    Ok(Some(ForkFrom {
        source,
        offset: offset.map(|o| o.position()),
        sub_offset,
    }))
}
