//! Snapshots (`{stream}/$snapshot[/{offset}]`) and explicit trimming
//! (`{stream}/$retention/{offset}`).
//!
//! - `PUT .../$snapshot/{offset}` stores the body as the stream's state at
//!   that offset: 201, or 200 for an identical retry, 409 for different
//!   bytes at the same offset.
//! - `GET .../$snapshot` (latest) or `.../$snapshot/{offset}`: the bytes,
//!   their `Content-Type` and `Stream-Snapshot-Offset`.
//! - `DELETE .../$snapshot/{offset}`: 204.
//! - `PUT .../$retention/{offset}`: drop history before the offset; reads
//!   there answer 410 with `Stream-Earliest-Offset`.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode};
use runnel_core::offset::parse_offset;
use runnel_core::{Applied, Body, Command, PutSnapshot};
use sha2::{Digest, Sha256};

use super::{body_bytes_up_to, header_value, offset_header};
use crate::cache::Answer;
use crate::error::ApiError;
use crate::headers::{self, names};
use crate::AppState;

pub async fn handle(
    app: AppState,
    name: String,
    offset: Option<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let offset = offset
        .map(|o| parse_offset(&o).map_err(|e| ApiError::bad(format!("snapshot offset: {e}"))))
        .transpose()?;
    match (request.method().clone(), offset) {
        (Method::GET, offset) => get(&app, &name, offset.map(|o| o.position())).await,
        (Method::PUT, Some(offset)) => put(app, name, offset.position(), request).await,
        (Method::DELETE, Some(offset)) => {
            app.node
                .propose(Command::DeleteSnapshot {
                    name,
                    offset: offset.position(),
                })
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Method::PUT | Method::DELETE, None) => Err(ApiError::bad(
            "name the snapshot's offset: .../$snapshot/{offset}",
        )),
        _ => Err(ApiError::MethodNotAllowed),
    }
}

async fn get(app: &AppState, name: &str, offset: Option<u64>) -> Result<Response, ApiError> {
    let (snapshot, bytes, incarnation) = app.node.engine_for(name).snapshot(name, offset).await?;
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        header_value(&snapshot.content_type),
    );
    headers.insert(
        names::STREAM_SNAPSHOT_OFFSET,
        offset_header(runnel_core::Offset(snapshot.offset), incarnation),
    );
    // A snapshot at an offset never changes; the latest one does.
    let answer = if offset.is_some() {
        Answer::Page
    } else {
        Answer::Revalidate
    };
    app.cache_headers(&mut headers, answer, name);
    Ok((StatusCode::OK, headers, bytes).into_response())
}

async fn put(
    app: AppState,
    name: String,
    offset: u64,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let content_type = headers::text(&parts.headers, &http::header::CONTENT_TYPE)?
        .filter(|ct| !ct.is_empty())
        .unwrap_or("application/octet-stream")
        .to_string();
    let data = body_bytes_up_to(&app, app.config.max_snapshot_bytes, body).await?;
    let digest: [u8; 32] = Sha256::digest(&data).into();
    let command = Command::PutSnapshot(PutSnapshot {
        name,
        offset,
        content_type,
        digest,
        server_made: false,
        body: Body {
            data: data.to_vec(),
            message_ends: Vec::new(),
        },
    });
    let Applied::SnapshotStored {
        offset,
        incarnation,
        created,
    } = app.node.propose(command).await?
    else {
        unreachable!("a snapshot answers SnapshotStored");
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        names::STREAM_SNAPSHOT_OFFSET,
        offset_header(offset, incarnation),
    );
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, headers).into_response())
}

pub async fn trim(app: AppState, name: String, offset: String) -> Result<Response, ApiError> {
    let before = parse_offset(&offset)
        .map_err(|e| ApiError::bad(format!("retention offset: {e}")))?
        .position();
    let Applied::Trimmed {
        earliest,
        incarnation,
    } = app.node.propose(Command::Trim { name, before }).await?
    else {
        unreachable!("a trim answers Trimmed");
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        names::STREAM_EARLIEST_OFFSET,
        offset_header(earliest, incarnation),
    );
    Ok((StatusCode::NO_CONTENT, headers).into_response())
}
