//! JSON mode framing: how a POSTed JSON body becomes stored messages, and
//! how stored messages become a JSON array again on read.
//!
//! Each message is stored as its original JSON text followed by a comma,
//! so a run of whole messages is `m1,m2,m3,`. A read wraps such a run as
//! `[` + run-without-its-last-comma + `]`: no parsing or re-encoding on the
//! read path. Offsets of JSON streams are byte positions in this stored
//! form; message boundaries are kept as `message_ends` so that forks can
//! cut a batch by message count.

use serde_json::value::RawValue;

/// A body validated and framed for storage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FramedMessages {
    /// `m1,m2,...,` — every message followed by one comma.
    pub data: Vec<u8>,
    /// End position (exclusive, relative to `data`) of each message,
    /// including its trailing comma.
    pub message_ends: Vec<u32>,
}

/// Why a JSON body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("body is not valid JSON: {0}")]
    Invalid(String),
    #[error("an empty JSON array appends nothing")]
    EmptyArray,
    #[error("a single JSON message may not exceed 4 GiB")]
    TooLarge,
}

/// Validates a JSON body and flattens one level of array into messages.
///
/// `allow_empty_array` is true for PUT (an empty array creates an empty
/// stream) and false for POST (an empty append is a client error).
pub fn frame_json_body(body: &[u8], allow_empty_array: bool) -> Result<FramedMessages, JsonError> {
    let text = std::str::from_utf8(body).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let value: &RawValue =
        serde_json::from_str(text).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let raw = value.get();
    let mut framed = FramedMessages::default();
    if raw.starts_with('[') {
        let items: Vec<&RawValue> =
            serde_json::from_str(raw).map_err(|e| JsonError::Invalid(e.to_string()))?;
        if items.is_empty() && !allow_empty_array {
            return Err(JsonError::EmptyArray);
        }
        framed.data.reserve(raw.len());
        for item in items {
            push_message(&mut framed, item.get())?;
        }
    } else {
        push_message(&mut framed, raw)?;
    }
    Ok(framed)
}

fn push_message(framed: &mut FramedMessages, message: &str) -> Result<(), JsonError> {
    framed.data.extend_from_slice(message.as_bytes());
    framed.data.push(b',');
    let end = u32::try_from(framed.data.len()).map_err(|_| JsonError::TooLarge)?;
    framed.message_ends.push(end);
    Ok(())
}

/// Renders a run of stored messages (`m1,m2,`) as a JSON array.
pub fn render_json_array(stored: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(stored.len() + 2);
    out.push(b'[');
    if let Some((_, without_last_comma)) = stored.split_last() {
        out.extend_from_slice(without_last_comma);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn messages(body: &str) -> Vec<serde_json::Value> {
        let framed = frame_json_body(body.as_bytes(), true).unwrap();
        serde_json::from_slice(&render_json_array(&framed.data)).unwrap()
    }

    #[test]
    fn single_value_is_one_message() {
        assert_eq!(messages(r#"{"a":1}"#), vec![serde_json::json!({"a":1})]);
    }

    #[test]
    fn arrays_flatten_exactly_one_level() {
        assert_eq!(
            messages("[[1,2],[3,4]]"),
            vec![serde_json::json!([1, 2]), serde_json::json!([3, 4])]
        );
        assert_eq!(
            messages("[[[1,2,3]]]"),
            vec![serde_json::json!([[1, 2, 3]])]
        );
    }

    #[test]
    fn empty_array_rules() {
        assert_eq!(frame_json_body(b"[]", false), Err(JsonError::EmptyArray));
        let framed = frame_json_body(b"[]", true).unwrap();
        assert!(framed.data.is_empty());
        assert_eq!(render_json_array(&framed.data), b"[]");
    }

    #[test]
    fn invalid_json_is_rejected() {
        for bad in ["{ invalid json }", "", "   ", "[1,", "1 2", "\u{0}"] {
            assert!(
                matches!(
                    frame_json_body(bad.as_bytes(), true),
                    Err(JsonError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn message_ends_mark_each_comma() {
        let framed = frame_json_body(br#"[{"a":1},{"b":2}]"#, false).unwrap();
        assert_eq!(framed.data, br#"{"a":1},{"b":2},"#);
        assert_eq!(framed.message_ends, vec![8, 16]);
    }

    proptest! {
        #[test]
        fn framing_round_trips_any_array(values in proptest::collection::vec(any::<i64>(), 1..20)) {
            let body = serde_json::to_string(&values).unwrap();
            let framed = frame_json_body(body.as_bytes(), false).unwrap();
            let back: Vec<i64> = serde_json::from_slice(&render_json_array(&framed.data)).unwrap();
            prop_assert_eq!(back, values);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = frame_json_body(&bytes, false);
        }
    }
}
