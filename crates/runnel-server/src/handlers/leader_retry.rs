//! Leadership changes kept from clients.
//!
//! In a cluster, a request for a stream may meet no leader (an election
//! is under way), a leader that has just stepped down, or a leader that
//! died. Rather than answer 503, the node the client reached waits for
//! the group's new leader and tries again, until a deadline
//! (`--leader-wait-ms`): clients see latency, not errors, unless no
//! quorum forms in time.
//!
//! A retry must never apply a write twice. Each refusal says, in the
//! [`RETRY`] header set where it is made, whether the request can have
//! taken effect:
//! - [`Retry::Safe`]: it cannot (no leader; forwarded to a node that no
//!   longer leads; no connection to the leader; the group's Raft answered
//!   "not leader", which it does only for a command it did not append or
//!   whose entry a new leader truncated);
//! - [`Retry::IfIdempotent`]: it may have (the leader shut down or lost
//!   its quorum with the command in its log; the connection broke after
//!   the request was sent). Retried only when a second application is
//!   harmless: reads, creates (the same configuration answers 200 the
//!   second time), and appends by an idempotent producer (the log's
//!   deduplication answers the retry as a duplicate, with the offsets of
//!   the first).
//!
//! A request forwarded here is answered once, header included: the node
//! that forwarded it runs the retries. The header never leaves the
//! cluster.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use super::{body_bytes_up_to, Target};
use crate::headers::names;
use crate::AppState;

/// On a 503 between nodes: whether the request may be retried at the
/// group's leader (`safe`, `if-idempotent`).
pub const RETRY: HeaderName = HeaderName::from_static("runnel-retry");

/// First pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const MAX_PAUSE: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The request did not take effect.
    Safe,
    /// The request may have taken effect.
    IfIdempotent,
}

impl Retry {
    pub fn value(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Retry::Safe => "safe",
            Retry::IfIdempotent => "if-idempotent",
        })
    }

    pub(crate) fn of(response: &Response) -> Option<Retry> {
        match response.headers().get(&RETRY)?.as_bytes() {
            b"safe" => Some(Retry::Safe),
            b"if-idempotent" => Some(Retry::IfIdempotent),
            _ => None,
        }
    }

    /// Whether a plain append with `headers`, refused with this class,
    /// may be sent again.
    pub(super) fn allows_append(self, headers: &http::HeaderMap) -> bool {
        self == Retry::Safe || by_idempotent_producer(headers)
    }

    /// Marks `response` (a 503) with this class.
    pub fn mark(self, mut response: Response) -> Response {
        response.headers_mut().insert(RETRY, self.value());
        response
    }
}

/// Serves `request` with `attempt`, retrying while the group's leadership
/// is changing (see the module docs).
pub(super) async fn serve<F, Fut>(
    app: &AppState,
    target: &Target,
    request: Request,
    attempt: F,
) -> Response
where
    F: Fn(Request) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let deadline = Instant::now() + app.config.leader_wait;
    let idempotent = is_idempotent(target, &request);
    let (parts, body) = request.into_parts();
    // Every attempt sends the same bytes: read the body once (bounded by
    // the limit its handler applies anyway).
    let body = if matches!(parts.method, Method::GET | Method::HEAD) {
        Bytes::new()
    } else {
        let limit = match target {
            Target::Snapshot(..) => app.config.max_snapshot_bytes,
            _ => app.config.max_append_bytes,
        };
        match body_bytes_up_to(app, limit, body).await {
            Ok(bytes) => bytes,
            Err(e) => return e.into_response(),
        }
    };
    let mut pause = FIRST_PAUSE;
    let mut attempts = 0u32;
    loop {
        let mut request = Request::new(Body::from(body.clone()));
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = parts.uri.clone();
        *request.version_mut() = parts.version;
        *request.headers_mut() = parts.headers.clone();
        *request.extensions_mut() = parts.extensions.clone();
        let mut response = attempt(request).await;
        attempts += 1;
        // Whether sending it again is harmless (see `Retry::allows`).
        let retry = Retry::of(&response).is_some_and(|r| r == Retry::Safe || idempotent);
        if !retry || Instant::now() + pause > deadline {
            response.headers_mut().remove(&RETRY);
            if attempts > 1 {
                app.metrics.leader_retries(attempts - 1, retry);
            }
            return response;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Whether applying `request` twice answers as applying it once.
fn is_idempotent(target: &Target, request: &Request) -> bool {
    match (target, request.method()) {
        (_, &Method::GET | &Method::HEAD) => true,
        (Target::Stream(_), &Method::PUT) => true,
        (Target::Stream(_), &Method::POST) => by_idempotent_producer(request.headers()),
        _ => false,
    }
}

/// Whether an append carries an idempotent producer's headers.
fn by_idempotent_producer(h: &http::HeaderMap) -> bool {
    h.contains_key(&names::PRODUCER_ID)
        && h.contains_key(&names::PRODUCER_EPOCH)
        && h.contains_key(&names::PRODUCER_SEQ)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Body::empty());
        *r.method_mut() = method;
        for (name, value) in headers {
            r.headers_mut().insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        r
    }

    #[test]
    fn only_requests_a_second_application_leaves_alone_are_idempotent() {
        let stream = Target::Stream("s".into());
        let producer = [
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "3"),
        ];
        assert!(is_idempotent(&stream, &request(Method::GET, &[])));
        assert!(is_idempotent(&stream, &request(Method::HEAD, &[])));
        assert!(is_idempotent(&stream, &request(Method::PUT, &[])));
        assert!(is_idempotent(&stream, &request(Method::POST, &producer)));
        assert!(!is_idempotent(&stream, &request(Method::POST, &[])));
        assert!(!is_idempotent(
            &stream,
            &request(Method::POST, &producer[..2])
        ));
        assert!(!is_idempotent(&stream, &request(Method::DELETE, &[])));
        let snapshot = Target::Snapshot("s".into(), None);
        assert!(!is_idempotent(&snapshot, &request(Method::PUT, &[])));
    }

    #[test]
    fn the_class_survives_the_header() {
        for retry in [Retry::Safe, Retry::IfIdempotent] {
            let response = retry.mark(Response::new(Body::empty()));
            assert_eq!(Retry::of(&response), Some(retry));
        }
        assert_eq!(Retry::of(&Response::new(Body::empty())), None);
    }
}
