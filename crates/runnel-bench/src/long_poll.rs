//! Long-poll readers for `fan-out --mode long-poll`: each reader follows
//! the stream with the protocol's long-poll loop (echoing `Stream-Cursor`,
//! query parameters in the order the protocol recommends so that a cache
//! keys every reader at one position alike), records publish-to-receive
//! latency, and checks what it received: every writer's events exactly
//! once and in order. And the origin's view: request and byte counters
//! scraped from a Runnel server's `/metrics`, to tell what a cache in front
//! saved it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};

use crate::client::{Connection, Target};
use crate::common::now_us;

/// What one long-poll reader saw.
#[derive(Default)]
pub struct ReaderResult {
    /// Publish-to-receive time of every delivery, in microseconds.
    pub latencies_us: Vec<u64>,
    pub bytes: u64,
    /// Requests made, and how many answered 200, 204 or anything else.
    pub requests: u64,
    pub empty: u64,
    pub failed: u64,
    /// Events seen again, or a writer's events out of order or skipped.
    pub duplicates: u64,
    pub gaps: u64,
    /// The next sequence number expected of each writer.
    pub next_seq: Vec<u64>,
}

/// Follows `stream_path` (the stream's path, no query) on `target` until
/// `stop`, from the stream's current tail. Counts itself in `ready` once it
/// knows where the tail is.
pub async fn follow(
    target: Target,
    stream_path: String,
    writers: usize,
    expected_events: usize,
    ready: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> ReaderResult {
    let mut result = ReaderResult {
        latencies_us: Vec::with_capacity(expected_events),
        next_seq: vec![0; writers.max(1)],
        ..ReaderResult::default()
    };
    let mut conn = None;
    let mut offset = "-1".to_string();
    let mut cursor: Option<String> = None;
    let mut counted_ready = false;
    loop {
        if *stop.borrow() {
            break;
        }
        if conn.is_none() {
            match Connection::open(&target).await {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    result.failed += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        // The first read finds the tail; every later one waits there.
        let path = match (&cursor, counted_ready) {
            (_, false) => format!("{stream_path}?offset={offset}"),
            (Some(c), true) => format!("{stream_path}?cursor={c}&live=long-poll&offset={offset}"),
            (None, true) => format!("{stream_path}?live=long-poll&offset={offset}"),
        };
        let send = conn
            .as_mut()
            .expect("opened above")
            .send(Method::GET, &path, &[], Bytes::new());
        let reply = tokio::select! {
            reply = send => reply,
            _ = stop.changed() => break,
        };
        result.requests += 1;
        let reply = match reply {
            Ok(reply) => reply,
            Err(_) => {
                result.failed += 1;
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let header = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        match reply.status {
            StatusCode::OK | StatusCode::NO_CONTENT => {}
            _ => {
                result.failed += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        if let Some(next) = header("stream-next-offset") {
            offset = next;
        }
        cursor = header("stream-cursor").or(cursor);
        if !counted_ready {
            // Events before the reader's start are not its to count.
            counted_ready = true;
            ready.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if reply.status == StatusCode::NO_CONTENT || reply.body.is_empty() {
            result.empty += 1;
            continue;
        }
        result.bytes += reply.body.len() as u64;
        let now = now_us();
        let before = result.latencies_us.len();
        for line in reply.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            check_event(line, now, &mut result);
        }
        delivered.fetch_add(
            (result.latencies_us.len() - before) as u64,
            Ordering::Relaxed,
        );
    }
    result
}

/// One event line, `{send time us}|{writer}|{seq}|padding`: its latency,
/// and whether it is the writer's next.
fn check_event(line: &[u8], now: u64, result: &mut ReaderResult) {
    let mut fields = line.split(|b| *b == b'|').map(|f| {
        std::str::from_utf8(f)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
    });
    let (Some(Some(sent)), Some(Some(writer)), Some(Some(seq))) =
        (fields.next(), fields.next(), fields.next())
    else {
        return;
    };
    result.latencies_us.push(now.saturating_sub(sent));
    let Some(expected) = result.next_seq.get_mut(writer as usize) else {
        result.gaps += 1;
        return;
    };
    if seq < *expected {
        result.duplicates += 1;
    } else {
        if seq > *expected {
            result.gaps += seq - *expected;
        }
        *expected = seq + 1;
    }
}

/// The payload of event `seq` of `writer`, stamped with its send time.
pub fn event_payload(writer: usize, seq: u64, len: usize) -> Vec<u8> {
    crate::common::padded_payload(&format!("{}|{writer}|{seq}|", now_us()), len)
}

/// Counters of a Runnel origin, from its `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct OriginCounts {
    pub long_polls: u64,
    pub catch_ups: u64,
    pub read_bytes: u64,
}

impl OriginCounts {
    /// Sums the counters of `targets`; `None` when one has no Runnel
    /// metrics (another server, or access control without a token).
    pub async fn scrape(targets: &[Target]) -> Option<OriginCounts> {
        let mut total = OriginCounts::default();
        for target in targets {
            let mut conn = Connection::open(target).await.ok()?;
            let reply = conn
                .send(Method::GET, "/metrics", &[], Bytes::new())
                .await
                .ok()?;
            if reply.status != StatusCode::OK {
                return None;
            }
            let text = String::from_utf8_lossy(&reply.body);
            let sum = |prefix: &str| -> u64 {
                text.lines()
                    .filter(|l| l.starts_with(prefix))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum()
            };
            total.long_polls += sum("runnel_http_requests_total{route=\"read_long_poll\"");
            total.catch_ups += sum("runnel_http_requests_total{route=\"read\"");
            total.read_bytes += sum("runnel_read_bytes_total");
        }
        Some(total)
    }

    pub fn since(self, before: OriginCounts) -> OriginCounts {
        OriginCounts {
            long_polls: self.long_polls - before.long_polls,
            catch_ups: self.catch_ups - before.catch_ups,
            read_bytes: self.read_bytes - before.read_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_checked_per_writer_for_order_and_repeats() {
        let mut r = ReaderResult {
            next_seq: vec![0, 0],
            ..ReaderResult::default()
        };
        for line in [
            &b"100|0|0|xx"[..],
            b"100|1|0|",
            b"100|0|1|",
            b"100|0|1|",
            b"100|1|3|",
            b"100|7|0|",
            b"not an event",
        ] {
            check_event(line, 150, &mut r);
        }
        assert_eq!(r.latencies_us, vec![50; 6]);
        assert_eq!((r.duplicates, r.gaps), (1, 3));
        assert_eq!(r.next_seq, vec![2, 4]);
        let payload = event_payload(1, 9, 32);
        assert_eq!(payload.len(), 32);
        let text = String::from_utf8(payload).unwrap();
        assert!(text.contains("|1|9|"), "{text}");
    }
}
