//! The HTTP layer's one error type, and the one place where every error
//! of the stack becomes a status, headers and a one-line reason.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};
use runnel_core::subscription::SubError;
use runnel_core::CoreError;
use runnel_engine::error::MembershipError;
use runnel_engine::EngineError;
use runnel_wire::ProtocolError;

use crate::handlers::leader_retry::Retry;
use crate::headers::names;

#[derive(Debug)]
pub enum ApiError {
    /// Malformed request: 400 with the reason.
    BadRequest(String),
    /// Headers, query or path the protocol's parsers refuse
    /// (`runnel_wire`): 400 with the reason.
    Malformed(ProtocolError),
    /// Body over the configured limit.
    PayloadTooLarge(u64),
    /// The client sent no part of the body for this long: 408, and the
    /// connection is closed (its framing is lost).
    BodyStalled(std::time::Duration),
    NotFound,
    /// No valid credentials where some are needed: 401 with the reason
    /// and a `WWW-Authenticate` challenge.
    Unauthenticated(String),
    /// A request clients may not make, or credentials without the grant:
    /// 403 with the reason.
    Forbidden(String),
    /// Over a rate limit: 429 with Retry-After.
    RateLimited(std::time::Duration),
    MethodNotAllowed,
    /// The live-reader limit is reached: 503 with Retry-After.
    TooManyLiveReaders,
    /// The node is over its memory limit: new live readers get 503 with
    /// Retry-After.
    OverMemoryLimit,
    /// The stream's group has no reachable leader: 503 with Retry-After.
    Unavailable(String),
    /// A fork across groups would copy more than the limit.
    ForkCopyTooLarge {
        bytes: u64,
        limit: u64,
    },
    Engine(EngineError),
    /// A read from an offset minted for an earlier stream of the same
    /// name: 410 (the position it names is not in this stream).
    OtherIncarnation,
    /// A subscription request refused: the protocol's JSON error body.
    Subscription(SubError),
}

impl ApiError {
    pub fn bad(reason: impl Into<String>) -> ApiError {
        ApiError::BadRequest(reason.into())
    }
}

impl From<ProtocolError> for ApiError {
    fn from(e: ProtocolError) -> Self {
        ApiError::Malformed(e)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        ApiError::Engine(e)
    }
}

impl From<crate::auth::Refusal> for ApiError {
    fn from(refusal: crate::auth::Refusal) -> Self {
        use crate::auth::Refusal;
        match refusal {
            Refusal::Unauthenticated(reason) => ApiError::Unauthenticated(reason),
            Refusal::Forbidden(reason) => ApiError::Forbidden(reason),
            Refusal::RateLimited(wait) => ApiError::RateLimited(wait),
        }
    }
}

impl From<SubError> for ApiError {
    fn from(e: SubError) -> Self {
        ApiError::Subscription(e)
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        ApiError::Engine(EngineError::Core(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut headers = HeaderMap::new();
        let (status, reason) = match self {
            ApiError::Subscription(e)
            | ApiError::Engine(EngineError::Core(CoreError::Subscription(e))) => {
                return subscription_error(&e)
            }
            ApiError::BadRequest(reason) => (StatusCode::BAD_REQUEST, reason),
            ApiError::Malformed(e) => (StatusCode::BAD_REQUEST, e.to_string()),
            ApiError::BodyStalled(after) => {
                headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                (
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "no part of the request body arrived for {} s",
                        after.as_secs()
                    ),
                )
            }
            ApiError::PayloadTooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body exceeds the {limit}-byte limit"),
            ),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not found".into()),
            ApiError::ForkCopyTooLarge { bytes, limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the fork source lives in another group, so the fork copies its {bytes} \
                     bytes before the fork point; at most {limit} can be copied"
                ),
            ),
            ApiError::Unauthenticated(reason) => {
                headers.insert(
                    http::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"runnel\""),
                );
                (StatusCode::UNAUTHORIZED, reason)
            }
            ApiError::Forbidden(reason) => (StatusCode::FORBIDDEN, reason),
            ApiError::RateLimited(wait) => {
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    "over the rate limit; retry later".into(),
                )
            }
            ApiError::MethodNotAllowed => {
                headers.insert(
                    http::header::ALLOW,
                    HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
                );
                (StatusCode::METHOD_NOT_ALLOWED, "method not allowed".into())
            }
            ApiError::TooManyLiveReaders => {
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("2"));
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many live readers on this node; retry later".into(),
                )
            }
            ApiError::OverMemoryLimit => {
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("5"));
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this node is over its memory limit and takes no new live readers; retry later"
                        .into(),
                )
            }
            ApiError::Unavailable(reason) => {
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
                (StatusCode::SERVICE_UNAVAILABLE, reason)
            }
            ApiError::OtherIncarnation => (
                StatusCode::GONE,
                "this offset was minted for an earlier stream of this name, since deleted; \
                 read this stream from -1"
                    .into(),
            ),
            ApiError::Engine(e) => engine_status(e, &mut headers),
        };
        let mut response = (status, headers, format!("{reason}\n")).into_response();
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        // No cache may keep an error: the next request must reach a
        // server (after a delete, a re-created stream answers it).
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        response
    }
}

/// `{"error": {"code", "message"}}` with the status the code calls for;
/// a lost claim race names the holder.
fn subscription_error(e: &SubError) -> Response {
    let status = match e {
        SubError::Invalid(_) | SubError::UrlRejected(_) => StatusCode::BAD_REQUEST,
        SubError::NotFound(_) => StatusCode::NOT_FOUND,
        SubError::TokenInvalid(_) | SubError::TokenExpired => StatusCode::UNAUTHORIZED,
        SubError::ConfigMismatch
        | SubError::Fenced
        | SubError::AlreadyClaimed { .. }
        | SubError::NoPendingWork
        | SubError::InvalidOffset(_) => StatusCode::CONFLICT,
    };
    let mut error = serde_json::json!({ "code": e.code(), "message": e.to_string() });
    if let SubError::AlreadyClaimed { holder, generation } = e {
        error["current_holder"] = holder.as_str().into();
        error["generation"] = (*generation).into();
    }
    let body = serde_json::json!({ "error": error }).to_string();
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn engine_status(e: EngineError, headers: &mut HeaderMap) -> (StatusCode, String) {
    let reason = e.to_string();
    let status = match e {
        EngineError::Core(core) => core_status(&core, headers),
        EngineError::NotLeader(_) | EngineError::ShuttingDown | EngineError::Replication(_) => {
            // Another node retries the request at the group's new leader
            // (see `handlers::leader_retry`): always after "not leader"
            // (the command is not and never will be in the log), only if
            // a second application is harmless when the leader shut down
            // or lost its quorum with the command possibly in its log.
            let retry = match e {
                EngineError::NotLeader(_) => Retry::Safe,
                _ => Retry::IfIdempotent,
            };
            headers.insert(crate::handlers::leader_retry::RETRY, retry.value());
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            StatusCode::SERVICE_UNAVAILABLE
        }
        EngineError::Overloaded | EngineError::Tier(_) | EngineError::Restoring { .. } => {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            StatusCode::SERVICE_UNAVAILABLE
        }
        EngineError::Membership(ref refusal) => membership_status(refusal, headers),
        EngineError::TierBacklog { .. } => {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("5"));
            StatusCode::SERVICE_UNAVAILABLE
        }
        EngineError::Storage(ref err) => {
            tracing::error!(error = %err, "write refused: storage failed");
            if err.is_out_of_space() {
                StatusCode::INSUFFICIENT_STORAGE
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
        EngineError::CrossGroupFork => StatusCode::NOT_IMPLEMENTED,
    };
    (status, reason)
}

/// A refused membership change is a conflict with the cluster's state
/// (409: `runnel ctl` reports it and stops), but for a group that does not
/// exist (404), and two refusals that pass by themselves (503, which
/// `runnel ctl` retries): a retirement whose groups' leaders did not
/// answer, and a change that met another one under way (the cluster's own
/// trim of group 0's voters, say; a joint membership is finished within
/// seconds). A refusal for lack of quorum stays 409: retrying does not
/// help until the down voters answer.
fn membership_status(refusal: &MembershipError, headers: &mut HeaderMap) -> StatusCode {
    match refusal {
        MembershipError::NoSuchGroup { .. } => StatusCode::NOT_FOUND,
        MembershipError::Unknown { .. } | MembershipError::Refused(_)
            if refusal.passes_by_itself() =>
        {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            StatusCode::SERVICE_UNAVAILABLE
        }
        MembershipError::SingleNode
        | MembershipError::Retired { .. }
        | MembershipError::NotAVoter { .. }
        | MembershipError::NotAMember { .. }
        | MembershipError::MemberBehind { .. }
        | MembershipError::NeedsVersion { .. }
        | MembershipError::MemberUnheard { .. }
        | MembershipError::WrongGroup { .. }
        | MembershipError::StillMember { .. }
        | MembershipError::AddressTaken { .. }
        | MembershipError::BadAddress(_)
        | MembershipError::CatchUpTimeout { .. }
        | MembershipError::NoQuorum { .. }
        | MembershipError::Unknown { .. }
        | MembershipError::Refused(_) => StatusCode::CONFLICT,
    }
}

fn core_status(e: &CoreError, headers: &mut HeaderMap) -> StatusCode {
    let number = |n: u64| HeaderValue::from(n);
    match e {
        CoreError::NotFound | CoreError::ForkSourceNotFound => StatusCode::NOT_FOUND,
        CoreError::Gone => StatusCode::GONE,
        CoreError::ConfigMismatch
        | CoreError::NameHeldBySoftDeleted
        | CoreError::ContentTypeMismatch
        | CoreError::ForkSourceGone
        | CoreError::StreamSeqRegression { .. } => StatusCode::CONFLICT,
        CoreError::Closed {
            next_offset,
            incarnation,
        } => {
            headers.insert(names::STREAM_CLOSED, HeaderValue::from_static("true"));
            headers.insert(
                names::STREAM_NEXT_OFFSET,
                HeaderValue::from_str(next_offset.token_in(*incarnation).as_str())
                    .expect("offsets are header-safe"),
            );
            StatusCode::CONFLICT
        }
        CoreError::ProducerStaleEpoch { current } => {
            headers.insert(names::PRODUCER_EPOCH, number(*current));
            StatusCode::FORBIDDEN
        }
        CoreError::ProducerSeqGap { expected, received } => {
            headers.insert(names::PRODUCER_EXPECTED_SEQ, number(*expected));
            headers.insert(names::PRODUCER_RECEIVED_SEQ, number(*received));
            StatusCode::CONFLICT
        }
        CoreError::ProducerEpochSeqNotZero
        | CoreError::ForkOffsetBeyondTail
        | CoreError::ForkOffsetNotOnBoundary
        | CoreError::InheritedDataMissing
        | CoreError::SubOffsetOutOfRange
        | CoreError::OffsetBeyondTail
        | CoreError::OffsetNotOnBoundary => StatusCode::BAD_REQUEST,
        CoreError::StreamFull => StatusCode::INSUFFICIENT_STORAGE,
        CoreError::Trimmed {
            earliest,
            incarnation,
        } => {
            headers.insert(
                names::STREAM_EARLIEST_OFFSET,
                HeaderValue::from_str(earliest.token_in(*incarnation).as_str())
                    .expect("offsets are header-safe"),
            );
            StatusCode::GONE
        }
        CoreError::SnapshotConflict => StatusCode::CONFLICT,
        CoreError::SnapshotNotFound => StatusCode::NOT_FOUND,
        CoreError::SnapshotOffsetInvalid
        | CoreError::TrimOffsetInvalid
        | CoreError::InvalidClusterId(_)
        | CoreError::InvalidReplication { .. }
        | CoreError::InvalidGroup { .. }
        | CoreError::InvalidZone(_)
        | CoreError::TooManyZones { .. } => StatusCode::BAD_REQUEST,
        CoreError::ZoneChanged { .. }
        | CoreError::ClusterVersionLowered { .. }
        | CoreError::RetiredMember { .. } => StatusCode::CONFLICT,
        // Internal: the engine resolves these before proposing, and
        // tiering and restore commands never come from a client.
        CoreError::SubOffsetInTieredHistory
        | CoreError::TierRefused { .. }
        | CoreError::RestoreOverData { .. }
        | CoreError::RestoreDamaged(_) => StatusCode::INTERNAL_SERVER_ERROR,
        // Answered as JSON before this (see `subscription_error`).
        CoreError::Subscription(_) => StatusCode::CONFLICT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_core::Offset;

    #[test]
    fn closed_conflicts_carry_the_final_offset() {
        let r = ApiError::from(CoreError::Closed {
            next_offset: Offset(5),
            incarnation: 77,
        })
        .into_response();
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert_eq!(r.headers()[names::STREAM_CLOSED], "true");
        assert_eq!(
            r.headers()[names::STREAM_NEXT_OFFSET],
            "0000000000000077_0000000000000005"
        );
        assert_eq!(r.headers()[http::header::CACHE_CONTROL], "no-store");
    }

    #[test]
    fn membership_refusals_are_conflicts_but_a_missing_group_and_unknown_members() {
        let status =
            |e: MembershipError| ApiError::from(EngineError::Membership(e)).into_response();
        let no_quorum = status(MembershipError::NoQuorum {
            node: 2,
            group: 1,
            up: 1,
            remaining: [1, 3].into(),
            quorum: 2,
        });
        assert_eq!(
            no_quorum.status(),
            StatusCode::CONFLICT,
            "ctl must not retry it"
        );
        assert_eq!(
            status(MembershipError::SingleNode).status(),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(MembershipError::NoSuchGroup {
                group: 9,
                groups: 3
            })
            .status(),
            StatusCode::NOT_FOUND
        );
        let unknown = status(MembershipError::Unknown {
            node: 4,
            groups: vec![2],
        });
        assert_eq!(unknown.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(unknown.headers()[http::header::RETRY_AFTER], "1");
    }

    #[test]
    fn overload_asks_to_retry() {
        let r = ApiError::from(EngineError::Overloaded).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[http::header::RETRY_AFTER], "1");
    }

    #[test]
    fn producer_errors_carry_their_numbers() {
        let r = ApiError::from(CoreError::ProducerStaleEpoch { current: 3 }).into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(r.headers()[names::PRODUCER_EPOCH], "3");
        let r = ApiError::from(CoreError::ProducerSeqGap {
            expected: 1,
            received: 4,
        })
        .into_response();
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert_eq!(r.headers()[names::PRODUCER_EXPECTED_SEQ], "1");
        assert_eq!(r.headers()[names::PRODUCER_RECEIVED_SEQ], "4");
    }
}
