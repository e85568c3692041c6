//! Listing streams by name, a page at a time (`GET /v1/streams`): the
//! live streams of a group whose names start with a prefix and sort after
//! a cursor, the first few in name order. A page costs one pass over the
//! group's streams and memory for the page only; no ordered index is kept
//! beside the streams (it would cost every stream memory for a request
//! that operators and consoles make).

use std::collections::BinaryHeap;

use crate::offset::Offset;
use crate::state::StreamsState;
use crate::stream::StreamState;

/// A stream as a listing shows it (and as a group's leader sends it to a
/// node that holds no copy of the group).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    pub name: String,
    /// The stream's incarnation (a name deleted and created again is
    /// another stream).
    pub id: u64,
    pub content_type: String,
    pub next_offset: Offset,
    /// The first offset still held (history before it was trimmed).
    pub earliest: Offset,
    pub closed: bool,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
    pub created_at_ms: i64,
}

impl Listed {
    fn of(s: &StreamState) -> Listed {
        Listed {
            name: s.name.to_string(),
            id: s.id,
            content_type: s.content_type.to_string(),
            next_offset: Offset(s.tail),
            earliest: Offset(s.earliest),
            closed: s.closed,
            ttl_secs: s.ttl_secs(),
            expires_at_ms: s.expires_at_ms(),
            created_at_ms: s.created_at_ms,
        }
    }
}

impl StreamsState {
    /// The live stream named `name` (not deleted, not expired at
    /// `now_ms`), as a listing shows it.
    pub fn listed(&self, name: &str, now_ms: i64) -> Option<Listed> {
        self.stream_by_name(name)
            .filter(|s| !s.soft_deleted && !s.is_expired(now_ms))
            .map(Listed::of)
    }

    /// Up to `limit` live streams (not deleted, not expired at `now_ms`)
    /// whose names start with `prefix` and sort after `after`, in name
    /// order (bytewise).
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: i64,
    ) -> Vec<Listed> {
        // The `limit` smallest names seen so far; the largest on top.
        let mut page: BinaryHeap<&str> = BinaryHeap::with_capacity(limit + 1);
        for s in self.streams.values() {
            let name = &*s.name;
            if s.soft_deleted
                || !name.starts_with(prefix)
                || after.is_some_and(|after| name <= after)
                || s.is_expired(now_ms)
            {
                continue;
            }
            if page.len() < limit {
                page.push(name);
            } else if page.peek().is_some_and(|largest| name < *largest) {
                page.pop();
                page.push(name);
            }
        }
        page.into_sorted_vec()
            .into_iter()
            .filter_map(|name| self.stream_by_name(name).map(Listed::of))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, CreateStream, Entry};
    use crate::state::StreamsState;

    fn with_streams(names: &[&str]) -> StreamsState {
        let mut state = StreamsState::new();
        for name in names {
            let entry = Entry {
                now_ms: 1,
                command: Command::Create(CreateStream {
                    name: name.to_string(),
                    ..CreateStream::default()
                }),
            };
            state.apply(&entry, 0, 0).unwrap();
        }
        state
    }

    #[test]
    fn pages_follow_name_order_under_a_prefix() {
        let state = with_streams(&["b/2", "a/1", "b/10", "b/1", "c", "b"]);
        let names = |prefix, after, limit| -> Vec<String> {
            state
                .list(prefix, after, limit, 1)
                .into_iter()
                .map(|l| l.name)
                .collect()
        };
        assert_eq!(names("", None, 10), ["a/1", "b", "b/1", "b/10", "b/2", "c"]);
        assert_eq!(names("b/", None, 2), ["b/1", "b/10"]);
        assert_eq!(names("b/", Some("b/10"), 2), ["b/2"]);
        assert_eq!(names("b/", Some("b/2"), 2), Vec::<String>::new());
        assert_eq!(names("", Some("a/1"), 1), ["b"]);
        assert_eq!(names("", None, 0), Vec::<String>::new());
    }

    #[test]
    fn one_live_stream_by_its_exact_name() {
        let mut state = with_streams(&["a", "a/b"]);
        let a = state.listed("a", 1).expect("a is live");
        assert_eq!((a.name.as_str(), a.next_offset.0), ("a", 0));
        assert_eq!(state.listed("a/", 1), None);
        let entry = Entry {
            now_ms: 2,
            command: Command::Delete { name: "a".into() },
        };
        state.apply(&entry, 0, 0).unwrap();
        assert_eq!(state.listed("a", 2), None);
        assert!(state.listed("a/b", 2).is_some());
    }
}
