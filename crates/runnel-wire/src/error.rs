//! Why a request's headers, query or path are refused. Every variant is a
//! malformed request: the server answers it 400 with this text as the
//! one-line reason (`runnel-server`'s `error.rs` is where that mapping
//! lives).

use http::HeaderName;

/// A request the protocol refuses as malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A header holds bytes other than visible ASCII and tabs.
    #[error("{0} header is not visible ASCII")]
    NotVisibleAscii(HeaderName),
    /// An integer header or parameter is not a canonical decimal
    /// integer in range; `what` names it.
    #[error(
        "{what} must be a non-negative integer without sign or leading zeros, at most 2^53-1; got {value:?}"
    )]
    NotAnInteger { what: &'static str, value: String },
    /// `Stream-Expires-At` is not an RFC 3339 timestamp.
    #[error("Stream-Expires-At is not an RFC 3339 timestamp: {0}")]
    NotATimestamp(chrono::ParseError),
    /// `Stream-Expires-At` names a time RFC 3339 cannot write in UTC.
    #[error("Stream-Expires-At is outside the years 0000 to 9999 in UTC: {0:?}")]
    TimestampOutOfRange(String),
    #[error("Stream-Closed must be true or false; got {0:?}")]
    NotABoolean(String),
    #[error("Producer-Id must not be empty")]
    EmptyProducerId,
    #[error("Producer-Id, Producer-Epoch and Producer-Seq must be sent together")]
    PartialProducer,
    #[error("malformed percent-escape")]
    MalformedEscape,
    #[error("percent-escapes do not decode to UTF-8")]
    EscapesNotUtf8,
    #[error("stream paths start with {0}")]
    NotAStreamPath(&'static str),
    #[error("stream name is empty")]
    EmptyName,
    #[error("stream name exceeds {0} bytes")]
    NameTooLong(usize),
    #[error("stream name contains control characters")]
    ControlCharacters,
    /// A query parameter the request reads appears twice.
    #[error("query parameter {0} appears more than once")]
    RepeatedParameter(String),
}
