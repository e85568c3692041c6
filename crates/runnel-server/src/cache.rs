//! What shared caches (CDNs, proxies) may keep of read answers, for how
//! long and for whom: the `Cache-Control` (and `Vary`) of every catch-up,
//! long-poll, SSE, snapshot and bootstrap answer is chosen here, from the
//! kind of answer and whether anyone may read the stream. The rules and
//! their reasons are in `docs/caching.md`; errors are `no-store`, set
//! where they are rendered (`error.rs`).

use http::{HeaderMap, HeaderValue};

/// Which answers may be kept by shared caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// `public` for streams anyone may read, `private` for the others.
    #[default]
    Cdn,
    /// Never `public`: no shared cache keeps anything.
    Private,
    /// `no-store` on every read.
    Off,
}

impl CacheMode {
    pub fn parse(text: &str) -> Option<CacheMode> {
        match text {
            "cdn" => Some(CacheMode::Cdn),
            "private" => Some(CacheMode::Private),
            "off" => Some(CacheMode::Off),
            _ => None,
        }
    }
}

/// The configured policy: a mode and three lifetimes in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    pub mode: CacheMode,
    /// Pages below the tail, requested by a minted offset.
    pub page_max_age: u64,
    /// Reads that reach the open tail, and reads from `-1`.
    pub tail_max_age: u64,
    /// Long-poll 200s.
    pub long_poll_max_age: u64,
}

impl Default for CachePolicy {
    fn default() -> CachePolicy {
        CachePolicy {
            mode: CacheMode::Cdn,
            page_max_age: 365 * 24 * 3600,
            tail_max_age: 1,
            long_poll_max_age: 20,
        }
    }
}

/// What kind of answer a read gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Bytes that never change: a page from a minted offset that ends
    /// below the tail (or at the end of a closed stream), a snapshot at an
    /// offset.
    Page,
    /// An answer at the open tail, or from `-1`.
    Tail,
    /// A long-poll that found data.
    LongPoll,
    /// An answer that changes while it is being sent or may be kept only
    /// to revalidate (SSE, the latest snapshot, bootstrap).
    Revalidate,
    /// Never kept: `offset=now`, long-poll 204s.
    Never,
}

/// The header values of a policy, rendered once: `[public, private]` for
/// each kind of answer.
#[derive(Debug, Clone)]
pub struct CacheHeaders {
    page: [HeaderValue; 2],
    tail: [HeaderValue; 2],
    long_poll: [HeaderValue; 2],
    revalidate: [HeaderValue; 2],
    never: HeaderValue,
}

impl CacheHeaders {
    pub fn new(policy: &CachePolicy) -> CacheHeaders {
        let never = HeaderValue::from_static("no-store");
        let lifetime = |max_age: u64, immutable: bool| -> [HeaderValue; 2] {
            let rendered = |scope: &str| {
                let value = match (policy.mode, max_age) {
                    (CacheMode::Off, _) => "no-store".to_string(),
                    (_, 0) => format!("{scope}, no-cache"),
                    (_, secs) if immutable && secs >= 24 * 3600 => {
                        format!("{scope}, max-age={secs}, immutable")
                    }
                    (_, secs) => format!("{scope}, max-age={secs}"),
                };
                HeaderValue::from_str(&value).expect("ASCII")
            };
            let public = match policy.mode {
                CacheMode::Cdn => "public",
                CacheMode::Private | CacheMode::Off => "private",
            };
            [rendered(public), rendered("private")]
        };
        // SSE must say no-cache (the protocol's suite checks it), so `off`
        // gives both there.
        let revalidate = match policy.mode {
            CacheMode::Off => [
                HeaderValue::from_static("no-store, no-cache"),
                HeaderValue::from_static("no-store, no-cache"),
            ],
            _ => lifetime(0, false),
        };
        CacheHeaders {
            page: lifetime(policy.page_max_age, true),
            tail: lifetime(policy.tail_max_age, false),
            long_poll: lifetime(policy.long_poll_max_age, false),
            revalidate,
            never,
        }
    }

    /// Sets `Cache-Control` (and `Vary` where the answer is private) for
    /// an `answer` on a stream that anyone may read (`public`) or not.
    pub fn apply(&self, headers: &mut HeaderMap, answer: Answer, public: bool) {
        let pick = |pair: &[HeaderValue; 2]| pair[usize::from(!public)].clone();
        let value = match answer {
            Answer::Page => pick(&self.page),
            Answer::Tail => pick(&self.tail),
            Answer::LongPoll => pick(&self.long_poll),
            Answer::Revalidate => pick(&self.revalidate),
            Answer::Never => self.never.clone(),
        };
        headers.insert(http::header::CACHE_CONTROL, value);
        if !public && answer != Answer::Never {
            // A cache told to key on credentials keys on this one.
            headers.insert(
                http::header::VARY,
                HeaderValue::from_static("Authorization"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(policy: &CachePolicy, answer: Answer, public: bool) -> (String, Option<String>) {
        let mut headers = HeaderMap::new();
        CacheHeaders::new(policy).apply(&mut headers, answer, public);
        let text = |name| {
            headers
                .get(name)
                .map(|v: &HeaderValue| v.to_str().unwrap().to_string())
        };
        (
            text(http::header::CACHE_CONTROL).unwrap(),
            text(http::header::VARY),
        )
    }

    #[test]
    fn defaults_suit_a_cdn_in_front_of_a_public_deployment() {
        let p = CachePolicy::default();
        let public = |a| header(&p, a, true);
        assert_eq!(
            public(Answer::Page).0,
            "public, max-age=31536000, immutable"
        );
        assert_eq!(public(Answer::Tail).0, "public, max-age=1");
        assert_eq!(public(Answer::LongPoll).0, "public, max-age=20");
        assert_eq!(public(Answer::Revalidate).0, "public, no-cache");
        assert_eq!(public(Answer::Never).0, "no-store");
        for answer in [Answer::Page, Answer::Tail, Answer::LongPoll, Answer::Never] {
            assert_eq!(
                public(answer).1,
                None,
                "{answer:?}: public answers do not vary"
            );
        }
    }

    #[test]
    fn streams_not_everyone_may_read_are_never_public() {
        for mode in [CacheMode::Cdn, CacheMode::Private] {
            let p = CachePolicy {
                mode,
                ..CachePolicy::default()
            };
            for answer in [
                Answer::Page,
                Answer::Tail,
                Answer::LongPoll,
                Answer::Revalidate,
            ] {
                let (cache, vary) = header(&p, answer, false);
                assert!(
                    cache.starts_with("private,"),
                    "{mode:?} {answer:?}: {cache}"
                );
                assert_eq!(vary.as_deref(), Some("Authorization"));
                if mode == CacheMode::Private {
                    let (cache, _) = header(&p, answer, true);
                    assert!(cache.starts_with("private,"), "{answer:?}: {cache}");
                }
            }
        }
    }

    #[test]
    fn off_keeps_nothing_and_zero_lifetimes_revalidate() {
        let off = CachePolicy {
            mode: CacheMode::Off,
            ..CachePolicy::default()
        };
        for answer in [Answer::Page, Answer::Tail, Answer::LongPoll, Answer::Never] {
            assert_eq!(header(&off, answer, true).0, "no-store");
        }
        assert_eq!(
            header(&off, Answer::Revalidate, true).0,
            "no-store, no-cache"
        );
        let short = CachePolicy {
            page_max_age: 600,
            long_poll_max_age: 0,
            ..CachePolicy::default()
        };
        // Not immutable under a day; a zero lifetime revalidates.
        assert_eq!(header(&short, Answer::Page, true).0, "public, max-age=600");
        assert_eq!(header(&short, Answer::LongPoll, true).0, "public, no-cache");
        assert_eq!(CacheMode::parse("cdn"), Some(CacheMode::Cdn));
        assert_eq!(CacheMode::parse("public"), None);
    }
}
