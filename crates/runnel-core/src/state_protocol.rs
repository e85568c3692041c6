//! The Durable Streams State Protocol as the compactor understands it:
//! change messages (`insert`/`update`/`delete` of a `type` and `key`) fold
//! into the latest value per type and key; a `reset` control message
//! clears everything. A folded state renders as a snapshot: a JSON array
//! of `insert` messages between `snapshot-start` and `snapshot-end`
//! control messages, which folds back into the same state.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::json::JsonError;

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(rename = "type")]
    entity_type: Option<String>,
    key: Option<String>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    headers: Option<Headers>,
}

#[derive(Deserialize)]
struct Headers {
    operation: Option<String>,
    control: Option<String>,
}

/// Latest value per (type, key), as raw JSON text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MaterializedState {
    entries: BTreeMap<(String, String), String>,
}

impl MaterializedState {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value stored for a type and key.
    pub fn get(&self, entity_type: &str, key: &str) -> Option<&str> {
        self.entries
            .get(&(entity_type.to_string(), key.to_string()))
            .map(String::as_str)
    }

    /// Applies one message. Messages that are not State Protocol change or
    /// control messages are ignored, as a client would ignore them.
    pub fn apply_message(&mut self, message: &str) {
        let Ok(m) = serde_json::from_str::<Message<'_>>(message) else {
            return;
        };
        let Some(headers) = m.headers else { return };
        if headers.control.as_deref() == Some("reset") {
            self.entries.clear();
            return;
        }
        let (Some(entity_type), Some(key)) = (m.entity_type, m.key) else {
            return;
        };
        match headers.operation.as_deref() {
            Some("insert") | Some("update") => {
                let value = m.value.map_or("null", RawValue::get).to_string();
                self.entries.insert((entity_type, key), value);
            }
            Some("delete") => {
                self.entries.remove(&(entity_type, key));
            }
            _ => {}
        }
    }

    /// Applies every message of a JSON array (a read of a JSON stream, or a
    /// snapshot).
    pub fn apply_array(&mut self, array: &[u8]) -> Result<(), JsonError> {
        let messages: Vec<&RawValue> =
            serde_json::from_slice(array).map_err(|e| JsonError::Invalid(e.to_string()))?;
        for m in messages {
            self.apply_message(m.get());
        }
        Ok(())
    }

    /// The state as a snapshot: a JSON array of `insert` messages framed by
    /// `snapshot-start` and `snapshot-end` at `offset`.
    pub fn render_snapshot(&self, offset: &str) -> Vec<u8> {
        let offset = serde_json::to_string(offset).expect("strings serialize");
        let mut out =
            Vec::with_capacity(self.entries.values().map(|v| v.len() + 64).sum::<usize>() + 128);
        out.extend_from_slice(br#"[{"headers":{"control":"snapshot-start","offset":"#);
        out.extend_from_slice(offset.as_bytes());
        out.extend_from_slice(b"}}");
        for ((entity_type, key), value) in &self.entries {
            out.extend_from_slice(br#",{"type":"#);
            out.extend_from_slice(
                serde_json::to_string(entity_type)
                    .expect("strings serialize")
                    .as_bytes(),
            );
            out.extend_from_slice(br#","key":"#);
            out.extend_from_slice(
                serde_json::to_string(key)
                    .expect("strings serialize")
                    .as_bytes(),
            );
            out.extend_from_slice(br#","value":"#);
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(br#","headers":{"operation":"insert"}}"#);
        }
        out.extend_from_slice(br#",{"headers":{"control":"snapshot-end","offset":"#);
        out.extend_from_slice(offset.as_bytes());
        out.extend_from_slice(b"}}]");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change(op: &str, t: &str, k: &str, v: i64) -> String {
        format!(
            r#"{{"type":"{t}","key":"{k}","value":{{"v":{v}}},"headers":{{"operation":"{op}"}}}}"#
        )
    }

    #[test]
    fn folds_to_the_latest_value_and_drops_deletes() {
        let mut s = MaterializedState::default();
        s.apply_message(&change("insert", "user", "1", 1));
        s.apply_message(&change("update", "user", "1", 2));
        s.apply_message(&change("insert", "user", "2", 3));
        s.apply_message(&change("delete", "user", "2", 0));
        s.apply_message(r#"{"not":"a state message"}"#);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get("user", "1"), Some(r#"{"v":2}"#));
        s.apply_message(r#"{"headers":{"control":"reset"}}"#);
        assert!(s.is_empty());
    }

    proptest! {
        /// Folding a snapshot gives back the state it was made from.
        #[test]
        fn a_snapshot_folds_back_to_its_state(ops in proptest::collection::vec((0..3u8, 0..20u8, any::<i64>()), 0..200)) {
            let mut direct = MaterializedState::default();
            for (op, key, v) in &ops {
                let op = ["insert", "update", "delete"][*op as usize];
                direct.apply_message(&change(op, "t", &key.to_string(), *v));
            }
            let snapshot = direct.render_snapshot("0000000000000000_0000000000000042");
            let mut rebuilt = MaterializedState::default();
            rebuilt.apply_array(&snapshot).unwrap();
            prop_assert_eq!(rebuilt, direct);
        }
    }
}
