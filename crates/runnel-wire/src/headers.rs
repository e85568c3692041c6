//! Protocol header names and the parsing of request headers, query
//! strings and stream paths. Every parse failure is a [`ProtocolError`]:
//! a one-line reason for a 400.

use http::{HeaderMap, HeaderName};
use runnel_core::Producer;

use crate::error::ProtocolError;

/// Header names (lower case, as HTTP/2 and `http` want them), made once:
/// looking a header up by name as text would parse the name every time.
pub mod names {
    use http::HeaderName;

    pub const STREAM_NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
    pub const STREAM_UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
    pub const STREAM_CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
    pub const STREAM_CLOSED: HeaderName = HeaderName::from_static("stream-closed");
    pub const STREAM_SEQ: HeaderName = HeaderName::from_static("stream-seq");
    pub const STREAM_TTL: HeaderName = HeaderName::from_static("stream-ttl");
    pub const STREAM_EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
    pub const STREAM_FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
    pub const STREAM_FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
    pub const STREAM_FORK_SUB_OFFSET: HeaderName =
        HeaderName::from_static("stream-fork-sub-offset");
    pub const STREAM_SSE_DATA_ENCODING: HeaderName =
        HeaderName::from_static("stream-sse-data-encoding");
    pub const STREAM_SNAPSHOT_OFFSET: HeaderName =
        HeaderName::from_static("stream-snapshot-offset");
    pub const STREAM_EARLIEST_OFFSET: HeaderName =
        HeaderName::from_static("stream-earliest-offset");
    pub const STREAM_COMPACTION: HeaderName = HeaderName::from_static("stream-compaction");
    pub const STREAM_RETENTION_BYTES: HeaderName =
        HeaderName::from_static("stream-retention-bytes");
    pub const STREAM_RETENTION_AGE: HeaderName = HeaderName::from_static("stream-retention-age");
    pub const PRODUCER_ID: HeaderName = HeaderName::from_static("producer-id");
    pub const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
    pub const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
    pub const PRODUCER_EXPECTED_SEQ: HeaderName = HeaderName::from_static("producer-expected-seq");
    pub const PRODUCER_RECEIVED_SEQ: HeaderName = HeaderName::from_static("producer-received-seq");
    pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

    /// Response headers a browser client may read (CORS expose list).
    pub const EXPOSED: &str =
        "stream-next-offset, stream-up-to-date, stream-cursor, stream-closed, \
        stream-ttl, stream-expires-at, stream-sse-data-encoding, stream-snapshot-offset, \
        stream-earliest-offset, producer-epoch, producer-seq, \
        producer-expected-seq, producer-received-seq, etag, location, content-type, retry-after";
}

/// The path prefix streams live under.
pub const STREAM_PREFIX: &str = "/v1/stream/";
/// Longest stream name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;
/// Largest integer a JavaScript client can hold exactly (2^53 - 1).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Request headers to read: an `http` header map, or a request the
/// direct path read and did not make into an `http::Request`.
pub trait Lookup {
    /// The first value of the header `name`, as sent.
    fn value(&self, name: &HeaderName) -> Option<&[u8]>;
}

impl Lookup for HeaderMap {
    fn value(&self, name: &HeaderName) -> Option<&[u8]> {
        self.get(name).map(http::HeaderValue::as_bytes)
    }
}

/// A header as text, if present: visible ASCII (and tabs) only, as
/// `HeaderValue::to_str` takes it, trimmed.
pub fn text<'a>(
    headers: &'a (impl Lookup + ?Sized),
    name: &HeaderName,
) -> Result<Option<&'a str>, ProtocolError> {
    let Some(value) = headers.value(name) else {
        return Ok(None);
    };
    let visible = |b: &u8| *b == b'\t' || (0x20..0x7f).contains(b);
    match std::str::from_utf8(value) {
        Ok(text) if value.iter().all(visible) => Ok(Some(text.trim())),
        _ => Err(ProtocolError::NotVisibleAscii(name.clone())),
    }
}

/// A non-negative decimal integer without sign, leading zeros, fraction or
/// exponent, at most 2^53 - 1.
pub fn strict_integer(value: &str, what: &'static str) -> Result<u64, ProtocolError> {
    let canonical = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
        && (value == "0" || !value.starts_with('0'));
    let parsed = canonical.then(|| value.parse::<u64>().ok()).flatten();
    match parsed {
        Some(n) if n <= MAX_SAFE_INTEGER => Ok(n),
        _ => Err(ProtocolError::NotAnInteger {
            what,
            value: value.to_string(),
        }),
    }
}

/// `Stream-TTL` in seconds.
pub fn ttl(headers: &(impl Lookup + ?Sized)) -> Result<Option<u64>, ProtocolError> {
    text(headers, &names::STREAM_TTL)?
        .map(|v| strict_integer(v, "Stream-TTL"))
        .transpose()
}

/// `Stream-Expires-At` as Unix milliseconds. A time whose UTC form falls
/// outside the years 0000 to 9999 is refused: RFC 3339 cannot write it,
/// so the server could not echo it (found by fuzzing: a leap second at
/// the end of 9999 was taken, and rendered as year +10000).
pub fn expires_at(headers: &(impl Lookup + ?Sized)) -> Result<Option<i64>, ProtocolError> {
    text(headers, &names::STREAM_EXPIRES_AT)?
        .map(|v| {
            let at =
                chrono::DateTime::parse_from_rfc3339(v).map_err(ProtocolError::NotATimestamp)?;
            let ms = at.timestamp_millis();
            // The year of the instant in milliseconds, where a leap
            // second has rolled over into the next one.
            let year =
                chrono::DateTime::from_timestamp_millis(ms).map(|t| chrono::Datelike::year(&t));
            if !year.is_some_and(|y| (0..=9999).contains(&y)) {
                return Err(ProtocolError::TimestampOutOfRange(v.to_string()));
            }
            Ok(ms)
        })
        .transpose()
}

/// `Stream-Expires-At` as the server writes it (RFC 3339 in UTC, to the
/// millisecond): what [`expires_at`] reads back as `ms`. `None` for a
/// time outside what a timestamp can say.
pub fn render_expires_at(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// `Stream-Closed: true` (any other value but `false` is refused).
pub fn closed(headers: &(impl Lookup + ?Sized)) -> Result<bool, ProtocolError> {
    match text(headers, &names::STREAM_CLOSED)? {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ProtocolError::NotABoolean(v.to_string())),
    }
}

/// The three producer headers: all or none.
pub fn producer(headers: &(impl Lookup + ?Sized)) -> Result<Option<Producer>, ProtocolError> {
    let id = text(headers, &names::PRODUCER_ID)?;
    let epoch = text(headers, &names::PRODUCER_EPOCH)?;
    let seq = text(headers, &names::PRODUCER_SEQ)?;
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ProtocolError::EmptyProducerId);
            }
            Ok(Some(Producer {
                id: id.to_string(),
                epoch: strict_integer(epoch, "Producer-Epoch")?,
                seq: strict_integer(seq, "Producer-Seq")?,
            }))
        }
        _ => Err(ProtocolError::PartialProducer),
    }
}

/// Decodes `%XX` escapes; refuses malformed escapes and non-UTF-8 results.
pub fn percent_decode(raw: &str) -> Result<String, ProtocolError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(ProtocolError::MalformedEscape)?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ProtocolError::EscapesNotUtf8)
}

/// Encodes a stream name for a request path: what [`percent_decode`]
/// reads back as the same name.
pub fn encode_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The stream name from a request path or a `Stream-Forked-From` value.
pub fn stream_name(path: &str) -> Result<String, ProtocolError> {
    let raw = path
        .strip_prefix(STREAM_PREFIX)
        .ok_or(ProtocolError::NotAStreamPath(STREAM_PREFIX))?;
    // Most names have no escapes: then there is nothing to decode.
    let name = if raw.contains('%') {
        percent_decode(raw)?
    } else {
        raw.to_string()
    };
    if name.is_empty() {
        return Err(ProtocolError::EmptyName);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(ProtocolError::NameTooLong(MAX_NAME_BYTES));
    }
    if name.chars().any(char::is_control) {
        return Err(ProtocolError::ControlCharacters);
    }
    Ok(name)
}

/// Query parameters a read understands.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadQuery {
    pub offset: Option<String>,
    pub live: Option<String>,
    pub cursor: Option<String>,
}

/// Parses the query string; unknown parameters are ignored, repeated
/// known ones refused.
pub fn read_query(query: Option<&str>) -> Result<ReadQuery, ProtocolError> {
    let mut q = ReadQuery::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match key {
            "offset" => &mut q.offset,
            "live" => &mut q.live,
            "cursor" => &mut q.cursor,
            _ => continue,
        };
        if slot.is_some() {
            return Err(ProtocolError::RepeatedParameter(key.to_string()));
        }
        *slot = Some(percent_decode(&value.replace('+', " "))?);
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_integers() {
        assert_eq!(strict_integer("0", "x").unwrap(), 0);
        assert_eq!(strict_integer("3600", "x").unwrap(), 3600);
        for bad in [
            "",
            "-1",
            "+1",
            "05",
            "1.5",
            "1e3",
            "abc",
            "9007199254740992",
            "99999999999999999999",
        ] {
            assert!(strict_integer(bad, "x").is_err(), "{bad}");
        }
    }

    #[test]
    fn names_decode_and_are_bounded() {
        assert_eq!(stream_name("/v1/stream/a/b%20c").unwrap(), "a/b c");
        assert!(stream_name("/v1/stream/").is_err());
        assert!(stream_name("/v1/stream/%zz").is_err());
        assert!(stream_name(&format!("/v1/stream/{}", "n".repeat(1025))).is_err());
        assert!(stream_name("/v1/stream/a%0Ab").is_err());
    }

    #[test]
    fn query_rejects_repeats_and_keeps_empty_values() {
        assert!(read_query(Some("offset=a&offset=b")).is_err());
        assert_eq!(
            read_query(Some("offset=")).unwrap().offset.as_deref(),
            Some("")
        );
        let q = read_query(Some("offset=0%201&foo=bar&live=sse")).unwrap();
        assert_eq!(q.offset.as_deref(), Some("0 1"));
        assert_eq!(q.live.as_deref(), Some("sse"));
    }

    #[test]
    fn expiry_times_render_back_or_are_refused() {
        let mut h = HeaderMap::new();
        for (sent, ok) in [
            ("2030-01-01T00:00:00Z", true),
            ("9999-12-31T23:59:59.999Z", true),
            ("9999-12-31T23:59:60.099Z", false),
            ("9999-12-31T23:00:00-01:00", false),
            ("0000-01-01T00:00:00+01:00", false),
        ] {
            h.insert(names::STREAM_EXPIRES_AT, sent.parse().unwrap());
            let parsed = expires_at(&h);
            assert_eq!(parsed.is_ok(), ok, "{sent}: {parsed:?}");
            if let Ok(Some(ms)) = parsed {
                let rendered = render_expires_at(ms).unwrap();
                h.insert(names::STREAM_EXPIRES_AT, rendered.parse().unwrap());
                assert_eq!(expires_at(&h), Ok(Some(ms)), "{sent} as {rendered}");
            }
        }
    }

    #[test]
    fn producer_headers_come_together() {
        let mut h = HeaderMap::new();
        h.insert(names::PRODUCER_ID, "p".parse().unwrap());
        assert!(producer(&h).is_err());
        h.insert(names::PRODUCER_EPOCH, "1".parse().unwrap());
        h.insert(names::PRODUCER_SEQ, "2".parse().unwrap());
        assert_eq!(producer(&h).unwrap().unwrap().seq, 2);
        h.insert(names::PRODUCER_ID, "".parse().unwrap());
        assert!(producer(&h).is_err());
    }
}
