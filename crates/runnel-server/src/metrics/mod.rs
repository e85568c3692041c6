//! What the HTTP layer counts for `GET /metrics`, and rendering it with
//! the engine's and the process's figures ([`render`]).
//!
//! Hot counters are relaxed atomics in fixed arrays indexed by small enums:
//! counting a request is two clock reads and a few additions, and no
//! label set can grow (stream names are never labels). Everything else is
//! read when a scrape asks.

pub mod render;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};

use crate::headers::STREAM_PREFIX;
use runnel_engine::metrics::histogram::Histogram;

/// What a request was, for its labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Append,
    Create,
    Read,
    ReadLongPoll,
    ReadSse,
    Head,
    Delete,
    Snapshot,
    Bootstrap,
    Retention,
    /// Node-to-node requests (`$pin`).
    Internal,
    Preflight,
    Health,
    Ready,
    Status,
    Metrics,
    Other,
}

impl Route {
    pub const ALL: [Route; 17] = [
        Route::Append,
        Route::Create,
        Route::Read,
        Route::ReadLongPoll,
        Route::ReadSse,
        Route::Head,
        Route::Delete,
        Route::Snapshot,
        Route::Bootstrap,
        Route::Retention,
        Route::Internal,
        Route::Preflight,
        Route::Health,
        Route::Ready,
        Route::Status,
        Route::Metrics,
        Route::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Route::Append => "append",
            Route::Create => "create",
            Route::Read => "read",
            Route::ReadLongPoll => "read_long_poll",
            Route::ReadSse => "read_sse",
            Route::Head => "head",
            Route::Delete => "delete",
            Route::Snapshot => "snapshot",
            Route::Bootstrap => "bootstrap",
            Route::Retention => "retention",
            Route::Internal => "internal",
            Route::Preflight => "preflight",
            Route::Health => "health",
            Route::Ready => "ready",
            Route::Status => "status",
            Route::Metrics => "metrics",
            Route::Other => "other",
        }
    }

    /// Classifies a request by its method, path and query.
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> Route {
        if *method == Method::OPTIONS {
            return Route::Preflight;
        }
        let Some(name) = path.strip_prefix(STREAM_PREFIX) else {
            return match path {
                "/health" => Route::Health,
                "/ready" => Route::Ready,
                "/_runnel/status" => Route::Status,
                "/metrics" => Route::Metrics,
                _ => Route::Other,
            };
        };
        if let Some(at) = name.find("/$") {
            let sub = &name[at + 2..];
            return match sub.split('/').next().unwrap_or("") {
                "snapshot" => Route::Snapshot,
                "bootstrap" => Route::Bootstrap,
                "retention" => Route::Retention,
                "pin" => Route::Internal,
                _ => Route::Other,
            };
        }
        match *method {
            Method::POST => Route::Append,
            Method::PUT => Route::Create,
            Method::DELETE => Route::Delete,
            Method::HEAD => Route::Head,
            Method::GET => {
                let live = |mode: &str| {
                    query.is_some_and(|q| {
                        q.split('&').any(|p| p.strip_prefix("live=") == Some(mode))
                    })
                };
                if live("sse") {
                    Route::ReadSse
                } else if live("long-poll") {
                    Route::ReadLongPoll
                } else {
                    Route::Read
                }
            }
            _ => Route::Other,
        }
    }
}

/// Status classes counted: 1xx-2xx, 3xx, 4xx, 5xx.
const CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];

fn class(status: StatusCode) -> usize {
    match status.as_u16() {
        0..=299 => 0,
        300..=399 => 1,
        400..=499 => 2,
        _ => 3,
    }
}

/// Live readers, by how they read.
#[derive(Debug, Clone, Copy)]
pub enum LiveMode {
    Sse = 0,
    LongPoll = 1,
}

/// Why a live reader was turned away or cut off.
#[derive(Debug, Clone, Copy)]
pub enum Refusal {
    /// `--max-live-readers` reached.
    ReaderLimit = 0,
    /// Over `--max-memory-bytes`.
    Memory = 1,
}

/// How a connection speaks, for `runnel_connections_total`.
#[derive(Debug, Clone, Copy)]
pub enum Protocol {
    Http1 = 0,
    Http1Tls = 1,
    Http2Tls = 2,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Http1, Protocol::Http1Tls, Protocol::Http2Tls];

    pub fn label(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::Http1Tls => "http1_tls",
            Protocol::Http2Tls => "h2_tls",
        }
    }
}

pub struct Metrics {
    requests: [[AtomicU64; CLASSES.len()]; Route::ALL.len()],
    /// Connections accepted (and, over TLS, past the handshake), by
    /// protocol.
    connections: [AtomicU64; Protocol::ALL.len()],
    durations: [Histogram; Route::ALL.len()],
    /// From an append's body in hand to its acknowledgement (durable, and
    /// in a cluster replicated).
    pub append_ack: Histogram,
    live_readers: [AtomicI64; 2],
    refused: [AtomicU64; 2],
    /// Requests that met a leadership change and were retried inside the
    /// cluster: served in the end, or still refused at the deadline.
    pub leader_retried: [AtomicU64; 2],
    /// Attempts beyond the first those requests took.
    pub leader_retry_attempts: AtomicU64,
    pub sse_events: AtomicU64,
    pub sse_bytes: AtomicU64,
    /// Body bytes of catch-up and long-poll answers (what a cache in
    /// front saves the origin shows here).
    pub read_bytes: AtomicU64,
    pub started: SystemTime,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Default::default(),
            connections: Default::default(),
            durations: Default::default(),
            append_ack: Histogram::default(),
            live_readers: Default::default(),
            refused: Default::default(),
            leader_retried: Default::default(),
            leader_retry_attempts: AtomicU64::new(0),
            sse_events: AtomicU64::new(0),
            sse_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            started: SystemTime::now(),
        }
    }
}

impl Metrics {
    /// A request answered with `status` after `took` (to its response head).
    pub fn request(&self, route: Route, status: StatusCode, took: Duration) {
        self.requests[route as usize][class(status)].fetch_add(1, Ordering::Relaxed);
        self.durations[route as usize].observe(took);
    }

    pub fn connection(&self, protocol: Protocol) {
        self.connections[protocol as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connections(&self, protocol: Protocol) -> u64 {
        self.connections[protocol as usize].load(Ordering::Relaxed)
    }

    pub fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A request retried `retries` times across a leadership change,
    /// `gave_up` when it was still refused at the deadline.
    pub fn leader_retries(&self, retries: u32, gave_up: bool) {
        self.leader_retried[usize::from(gave_up)].fetch_add(1, Ordering::Relaxed);
        self.leader_retry_attempts
            .fetch_add(u64::from(retries), Ordering::Relaxed);
    }

    /// Counts a live reader until the guard drops.
    pub fn live_reader(self: &Arc<Self>, mode: LiveMode) -> LiveReader {
        self.live_readers[mode as usize].fetch_add(1, Ordering::Relaxed);
        LiveReader {
            metrics: Arc::clone(self),
            mode,
        }
    }

    pub fn live_readers(&self, mode: LiveMode) -> i64 {
        self.live_readers[mode as usize].load(Ordering::Relaxed)
    }

    fn requests(&self, route: Route, class: usize) -> u64 {
        self.requests[route as usize][class].load(Ordering::Relaxed)
    }
}

/// One live reader, counted while it lives.
pub struct LiveReader {
    metrics: Arc<Metrics>,
    mode: LiveMode,
}

impl Drop for LiveReader {
    fn drop(&mut self) {
        self.metrics.live_readers[self.mode as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_by_method_path_and_query() {
        let of = |m: Method, p: &str, q: Option<&str>| Route::of(&m, p, q);
        assert_eq!(of(Method::POST, "/v1/stream/a/b", None), Route::Append);
        assert_eq!(of(Method::PUT, "/v1/stream/a", None), Route::Create);
        assert_eq!(
            of(Method::GET, "/v1/stream/a", Some("offset=-1")),
            Route::Read
        );
        assert_eq!(
            of(Method::GET, "/v1/stream/a", Some("offset=now&live=sse")),
            Route::ReadSse
        );
        assert_eq!(
            of(Method::GET, "/v1/stream/a", Some("live=long-poll")),
            Route::ReadLongPoll
        );
        assert_eq!(
            of(Method::GET, "/v1/stream/a", Some("xlive=sse")),
            Route::Read
        );
        assert_eq!(
            of(Method::PUT, "/v1/stream/a/$snapshot/1", None),
            Route::Snapshot
        );
        assert_eq!(
            of(Method::GET, "/v1/stream/a/$bootstrap", None),
            Route::Bootstrap
        );
        assert_eq!(
            of(Method::PUT, "/v1/stream/a/$retention/1", None),
            Route::Retention
        );
        assert_eq!(of(Method::POST, "/v1/stream/a/$pin", None), Route::Internal);
        assert_eq!(of(Method::GET, "/metrics", None), Route::Metrics);
        assert_eq!(of(Method::GET, "/ready", None), Route::Ready);
        assert_eq!(of(Method::OPTIONS, "/v1/stream/a", None), Route::Preflight);
        assert_eq!(of(Method::GET, "/elsewhere", None), Route::Other);
        for (i, route) in Route::ALL.iter().enumerate() {
            assert_eq!(*route as usize, i, "ALL is in declaration order");
        }
    }

    #[test]
    fn live_readers_are_counted_while_they_live() {
        let metrics = Arc::new(Metrics::default());
        let a = metrics.live_reader(LiveMode::Sse);
        let b = metrics.live_reader(LiveMode::Sse);
        let c = metrics.live_reader(LiveMode::LongPoll);
        assert_eq!(metrics.live_readers(LiveMode::Sse), 2);
        drop((a, c));
        assert_eq!(metrics.live_readers(LiveMode::Sse), 1);
        assert_eq!(metrics.live_readers(LiveMode::LongPoll), 0);
        drop(b);
        assert_eq!(metrics.live_readers(LiveMode::Sse), 0);
    }
}
