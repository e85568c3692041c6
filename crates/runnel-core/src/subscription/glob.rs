//! Subscription patterns: `/`-separated segments where `*` matches
//! exactly one segment and `**` matches zero or more; anything else
//! matches itself. Leading and trailing slashes are ignored, and a
//! literal `%2A` stands for `*` (a pattern that went through a URL).

use serde::{Deserialize, Serialize};

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Glob {
    /// The pattern as normalized (slashes trimmed, `%2A` decoded).
    source: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Segment {
    Literal(String),
    One,
    Any,
}

impl Glob {
    /// `None` for an empty pattern or one with an empty segment (`a//b`).
    pub fn parse(pattern: &str) -> Option<Glob> {
        let source = pattern
            .replace("%2A", "*")
            .replace("%2a", "*")
            .trim_matches('/')
            .to_string();
        if source.is_empty() {
            return None;
        }
        let segments = source
            .split('/')
            .map(|s| match s {
                "" => None,
                "*" => Some(Segment::One),
                "**" => Some(Segment::Any),
                literal => Some(Segment::Literal(literal.to_string())),
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Glob { source, segments })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The literal part before the first wildcard (for access checks):
    /// `chat/*/x` gives `chat/`, `**` gives the empty prefix.
    pub fn literal_prefix(&self) -> String {
        let mut prefix = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(s) => {
                    prefix.push_str(s);
                    prefix.push('/');
                }
                Segment::One | Segment::Any => return prefix,
            }
        }
        prefix.pop();
        prefix
    }

    pub fn matches(&self, stream: &str) -> bool {
        let names: Vec<&str> = stream.trim_matches('/').split('/').collect();
        matches(&self.segments, &names)
    }
}

fn matches(pattern: &[Segment], names: &[&str]) -> bool {
    match pattern.split_first() {
        None => names.is_empty(),
        Some((Segment::Any, rest)) => (0..=names.len()).any(|skip| matches(rest, &names[skip..])),
        Some((segment, rest)) => match names.split_first() {
            None => false,
            Some((name, names)) => {
                let here = match segment {
                    Segment::One => !name.is_empty(),
                    Segment::Literal(literal) => literal == name,
                    Segment::Any => unreachable!("handled above"),
                };
                here && matches(rest, names)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, stream: &str) -> bool {
        Glob::parse(pattern).unwrap().matches(stream)
    }

    #[test]
    fn one_segment_any_segments_and_literals() {
        assert!(m("events/*", "events/a"));
        assert!(!m("events/*", "events/a/b"));
        assert!(!m("events/*", "events"));
        assert!(!m("events/*", "eventsx/a"));
        assert!(m("events/**", "events"));
        assert!(m("events/**", "events/a/b/c"));
        assert!(m("**/log", "a/b/log"));
        assert!(m("**/log", "log"));
        assert!(!m("**/log", "a/logs"));
        assert!(m("a/*/c/**", "a/b/c"));
        assert!(m("/events/*/", "events/x"));
        assert!(m("events/%2A", "events/x"));
        assert!(m("**", "anything/at/all"));
        assert!(m("exact/name", "exact/name"));
        assert!(!m("exact/name", "exact/name/more"));
    }

    #[test]
    fn empty_patterns_and_segments_are_refused() {
        for bad in ["", "/", "a//b"] {
            assert!(Glob::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn literal_prefixes() {
        let prefix = |p: &str| Glob::parse(p).unwrap().literal_prefix();
        assert_eq!(prefix("chat/*/x"), "chat/");
        assert_eq!(prefix("**"), "");
        assert_eq!(prefix("a/b"), "a/b");
        assert_eq!(prefix("a/b/**"), "a/b/");
    }
}
