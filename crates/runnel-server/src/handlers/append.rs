//! POST: append to a stream, with Stream-Seq, idempotent producers, and
//! closing (with a final body or without one).
//!
//! An append arrives two ways. Through [`post`], as an `http::Request`
//! (from hyper, or from the direct path for a request it routes in
//! general). Or, the common case, through [`direct`]: a plain append the
//! direct path read whole, to a stream this node leads, is answered from
//! the request's bytes with a head rendered by hand, without building a
//! request, a header map or a response. Both read the same headers with
//! the same rules ([`AppendHeaders`]) and append with the same code
//! ([`append`]), so they answer alike.

use std::future::Future;
use std::pin::Pin;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use runnel_core::{AppendToStream, Applied, Body, Command, ContentKind, Offset, Producer};
use runnel_engine::Route;

use super::{body_bytes, framed_body, leader_retry, response, response_headers, SERVED_BY};
use crate::connection::RawRequest;
use crate::direct_connection::{push_header, start_head, Answer};
use crate::error::ApiError;
use crate::headers::{self, names, Lookup, STREAM_PREFIX};
use crate::metrics;
use crate::AppState;

pub async fn post(app: AppState, name: String, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let appending = AppendHeaders::of(&parts.headers)?;
    let data = body_bytes(&app, body).await?;
    let done = append(&app, name, appending, data).await?;
    let mut headers = response_headers();
    done.each_header(|name, value| {
        let value = HeaderValue::from_bytes(value).expect("offsets and numbers are header-safe");
        headers.insert(name.clone(), value);
    });
    Ok(response(done.status, headers, axum::body::Body::empty()))
}

/// The direct path's append: `Ok` with the answer to come when `request`
/// is a plain append (`POST` to a stream path without a query, fragment
/// or reserved `$` segment) to a stream whose group this node leads; the
/// request back otherwise, for the general path (which forwards it, or
/// answers what is unusual about it).
///
/// The answer comes boxed: held inline, it would make every connection's
/// task larger for its whole life, idle SSE readers included.
pub fn direct(
    app: &AppState,
    request: Box<RawRequest>,
    peer: crate::auth::PeerAddr,
) -> Result<Pin<Box<dyn Future<Output = Answer> + Send>>, Box<RawRequest>> {
    let target = request.target();
    let plain = request.method() == Method::POST
        && target.starts_with(STREAM_PREFIX)
        // A query, a fragment (which the `http` types cut off) or a
        // reserved segment: the general path sorts those out.
        && !target.contains(['?', '#', '$'])
        // The `http` types' rules for a path, which the general path
        // applies when it builds the request.
        && http::uri::PathAndQuery::from_maybe_shared(request.target_bytes()).is_ok();
    let name = match plain.then(|| headers::stream_name(target)) {
        // A `$` may also arrive percent-encoded: the general path decides
        // what such a name means.
        Some(Ok(name))
            if !name.contains('$')
                && !crate::subscriptions::is_reserved(&name)
                && request
                    .header(crate::subscriptions::INTERNAL_APPEND.as_str())
                    .is_none()
                && matches!(app.node.route(&name), Route::Local) =>
        {
            name
        }
        _ => return Err(request),
    };
    let app = app.clone();
    Ok(Box::pin(async move {
        let started = std::time::Instant::now();
        let allowed = match &app.auth {
            None => Ok(()),
            Some(auth) => {
                let credentials = crate::auth::Credentials {
                    method: Some(&Method::POST),
                    authorization: request.header("authorization"),
                    query: None,
                    cluster_key: request.header(crate::auth::CLUSTER_KEY.as_str()),
                    peer: Some(peer.0),
                };
                let needs = [(crate::auth::Operation::Append, name.as_str())];
                auth.check(&credentials, crate::auth::Access::Streams(&needs))
                    .map(drop)
                    .map_err(ApiError::from)
            }
        };
        let done = match allowed.and_then(|()| AppendHeaders::of(&*request)) {
            Ok(appending) => {
                let data = request.body();
                if data.len() as u64 > app.config.max_append_bytes {
                    Err(ApiError::PayloadTooLarge(app.config.max_append_bytes))
                } else {
                    append(&app, name, appending, data).await
                }
            }
            Err(e) => Err(e),
        };
        let answered = |status| {
            app.metrics
                .request(metrics::Route::Append, status, started.elapsed())
        };
        match done {
            Ok(done) => {
                answered(done.status);
                let mut head = start_head(done.status);
                done.each_header(|name, value| push_header(&mut head, name.as_str(), value));
                push_header(&mut head, SERVED_BY.as_str(), app.served_by.as_bytes());
                Answer::Rendered {
                    status: done.status,
                    head,
                }
            }
            Err(e) => {
                let mut response = e.into_response();
                if let Some(retry) = leader_retry::Retry::of(&response) {
                    response.headers_mut().remove(&leader_retry::RETRY);
                    // Leadership moved under the append: when repeating it
                    // is harmless, the general path waits for the group's
                    // new leader and tries again.
                    if let Ok(mut general) = crate::connection::into_request(*request) {
                        if retry.allows_append(general.headers()) {
                            general.extensions_mut().insert(peer);
                            // Boxed: the rare path keeps the append's future small.
                            let general = Box::pin(crate::routes::respond(app.clone(), general));
                            return Answer::Response(general.await);
                        }
                    }
                }
                answered(response.status());
                response
                    .headers_mut()
                    .insert(SERVED_BY, app.served_by.clone());
                Answer::Response(response)
            }
        }
    }))
}

/// The request headers an append reads.
struct AppendHeaders {
    content_type: Option<String>,
    close: bool,
    producer: Option<Producer>,
    stream_seq: Option<String>,
}

impl AppendHeaders {
    fn of(h: &(impl Lookup + ?Sized)) -> Result<AppendHeaders, ApiError> {
        Ok(AppendHeaders {
            content_type: headers::text(h, &http::header::CONTENT_TYPE)?
                .filter(|ct| !ct.is_empty())
                .map(str::to_string),
            close: headers::closed(h)?,
            producer: headers::producer(h)?,
            stream_seq: headers::text(h, &names::STREAM_SEQ)?.map(str::to_string),
        })
    }
}

/// What an append did, for the answer.
struct Done {
    status: StatusCode,
    next_offset: Offset,
    incarnation: u64,
    closed: bool,
    /// A producer's epoch and sequence number, echoed.
    producer: Option<(u64, u64)>,
}

impl Done {
    /// Calls `header` with each header of the answer (`Runnel-Served-By`
    /// and the headers every response gets aside): one definition for
    /// both paths.
    fn each_header(&self, mut header: impl FnMut(&HeaderName, &[u8])) {
        header(
            &names::STREAM_NEXT_OFFSET,
            self.next_offset
                .token_in(self.incarnation)
                .as_str()
                .as_bytes(),
        );
        if self.closed {
            header(&names::STREAM_CLOSED, b"true");
        }
        if let Some((epoch, seq)) = self.producer {
            header(&names::PRODUCER_EPOCH, epoch.to_string().as_bytes());
            header(&names::PRODUCER_SEQ, seq.to_string().as_bytes());
        }
    }
}

/// Appends the JSON message `data` to the stream `name` (which this node
/// leads), as the server itself: subscriptions' wake events.
pub(crate) async fn append_json(app: &AppState, name: String, data: Bytes) -> Result<(), ApiError> {
    let appending = AppendHeaders {
        content_type: Some("application/json".into()),
        close: false,
        producer: None,
        stream_seq: None,
    };
    append(app, name, appending, data).await.map(drop)
}

/// Appends `data` to the stream `name` (validated and framed per its
/// content type) and waits until the append is durable.
async fn append(
    app: &AppState,
    name: String,
    appending: AppendHeaders,
    data: Bytes,
) -> Result<Done, ApiError> {
    let AppendHeaders {
        content_type,
        close,
        producer,
        stream_seq,
    } = appending;
    if data.is_empty() && !close {
        return Err(ApiError::bad(
            "an append needs a body (or Stream-Closed: true)",
        ));
    }
    let body = if data.is_empty() {
        Body::default()
    } else {
        let ct = content_type
            .as_deref()
            .ok_or_else(|| ApiError::bad("an append with a body needs a Content-Type"))?;
        framed_body(ContentKind::of(ct), &data, false)?
    };
    let has_data = !body.data.is_empty();

    let command = Command::Append(AppendToStream {
        name,
        content_type,
        body,
        producer,
        stream_seq,
        close,
    });
    let started = std::time::Instant::now();
    let applied = app.node.propose(command).await;
    app.metrics.append_ack.observe(started.elapsed());
    let Applied::Appended {
        next_offset,
        incarnation,
        closed,
        producer,
        duplicate,
    } = applied?
    else {
        unreachable!("an append answers Appended");
    };
    // A producer's new data is 200; duplicates, plain appends and closes 204.
    let status = if producer.is_some() && has_data && !duplicate {
        StatusCode::OK
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(Done {
        status,
        next_offset,
        incarnation,
        closed,
        producer,
    })
}
