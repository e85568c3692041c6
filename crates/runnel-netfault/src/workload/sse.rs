//! The SSE reader: one session at a time (`live=sse`) through a member
//! picked at random, each delivered event recorded as a read.
//!
//! The server sends a `data` event (the bytes, as text) followed by a
//! `control` event (`streamNextOffset`, `upToDate`), or a control event
//! alone when there is nothing to send. Each control event closes one
//! read ([`ReadKind::Sse`]): completed when it was received, starting
//! where the previous one ended, holding the data event's bytes, and
//! invoked when the session was opened.
//!
//! Not when the previous event was received: the server renders an event
//! as soon as the connection takes it, which can be long before the
//! client has received the ones before it (they wait in socket buffers,
//! or on a slow or lossy link). A healthy single node, read by a client
//! that reads late, sends a run of events each saying `upToDate` at a
//! length the stream had when it was rendered, all received after every
//! one of those appends was acknowledged; with "invoked when the previous
//! event was received" each of them would count as a stale read. All a
//! client knows of an event is that it was rendered after its session's
//! request arrived, so that is its invocation. Sessions are kept short
//! (a few seconds, then the next one opens where the last event ended)
//! so these windows stay small and each new session's first answer,
//! which waits for the leader's commit index, comes often.
//!
//! A session that ends, fails or says nothing (not even a keepalive) for
//! [`STALL`] is dropped, and the next one opens where the last event
//! ended.
//!
//! Half the sessions (chosen by the seed; all of them with
//! `--sse-cursor`) send the `cursor` the last control event gave, as a
//! reconnecting protocol client does; the server then renders their events
//! for them alone. The others are rendered once per stream and position
//! for every session there (the server's shared render cache).

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_history::check::{Micros, ReadKind, ReadOp};

use super::{position, stream_url, Workload};

/// A session that says nothing for this long is dead (a partition): the
/// servers send a keepalive every second (`--sse-keepalive-ms 1000`).
pub const STALL: Duration = Duration::from_secs(4);
/// The longest one session is kept open, from the server's side (a
/// session that ends sooner on the client's side: see [`Workload::session`]).
const SESSION: Duration = Duration::from_secs(30);
/// A session is closed by the client after a random time in this range
/// (ms).
const SESSION_MS: std::ops::Range<u64> = 2_000..6_000;

/// One server-sent event: its name and its data lines joined by `\n`.
#[derive(Debug, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: Vec<u8>,
}

/// Splits a byte stream into events (blocks ending in a blank line).
#[derive(Default)]
pub struct Parser {
    buffer: Vec<u8>,
}

impl Parser {
    /// Takes more bytes; returns the events they complete. Comments
    /// (keepalives) and `id` lines are dropped.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let mut name = String::from("message");
            let mut data: Option<Vec<u8>> = None;
            for line in block[..end].split(|&b| b == b'\n') {
                if line.is_empty() || line[0] == b':' {
                    continue;
                }
                let (field, value) = match line.iter().position(|&b| b == b':') {
                    Some(i) => (&line[..i], &line[i + 1..]),
                    None => (line, &b""[..]),
                };
                // One space after the colon is not part of the value.
                let value = value.strip_prefix(b" ").unwrap_or(value);
                match field {
                    b"event" => name = String::from_utf8_lossy(value).into_owned(),
                    b"data" => {
                        let d = data.get_or_insert_with(Vec::new);
                        if !d.is_empty() {
                            d.push(b'\n');
                        }
                        d.extend_from_slice(value);
                    }
                    _ => {}
                }
            }
            if let Some(data) = data {
                events.push(Event { name, data });
            }
        }
        events
    }
}

/// What a control event says: the next offset, whether it is the tail,
/// and the cursor to send on reconnecting.
fn control(data: &[u8]) -> Option<(u64, bool, Option<String>)> {
    let json: serde_json::Value = serde_json::from_slice(data).ok()?;
    let next = position(json.get("streamNextOffset")?.as_str()?)?;
    let up_to_date = json.get("upToDate") == Some(&serde_json::Value::Bool(true));
    let cursor = json
        .get("streamCursor")
        .and_then(|c| c.as_str())
        .map(str::to_string);
    Some((next, up_to_date, cursor))
}

/// Where an SSE reader is between sessions.
#[derive(Default)]
struct Position {
    /// Where the last event ended.
    offset: Option<u64>,
    /// The cursor the last control event gave.
    cursor: Option<String>,
}

impl Workload {
    /// Follows the tail with SSE sessions, each through a random member.
    pub async fn sse_reader(self, stream: String, reader: u32, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut at = Position::default();
        while !self.stop_reading.load(Ordering::Acquire) {
            if !self.session(&stream, reader, &mut at, &mut rng).await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// One session from `at` (moved along as events come); whether it
    /// delivered any event.
    async fn session(
        &self,
        stream: &str,
        reader: u32,
        at: &mut Position,
        rng: &mut StdRng,
    ) -> bool {
        let base = self.pick(rng);
        let token = match at.offset {
            Some(p) => format!("{:016}_{p:016}", 0),
            None => "-1".to_string(),
        };
        let mut url = format!("{}?offset={token}&live=sse", stream_url(&base, stream));
        if self.sse_cursor || rng.gen_bool(0.5) {
            let cursor = at.cursor.as_deref().unwrap_or("0");
            url.push_str(&format!("&cursor={cursor}"));
        }
        let opened: Micros = self.recorder.now();
        let mut response = match self.client.get(&url).timeout(SESSION).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                self.recorder
                    .note_error(format!("sse: {}", r.status().as_u16()));
                return false;
            }
            Err(e) => {
                self.classify("sse", &e);
                return false;
            }
        };
        let mut parser = Parser::default();
        let mut start = at.offset.unwrap_or(0);
        let mut data: Vec<u8> = Vec::new();
        let mut delivered = false;
        let close_at =
            tokio::time::Instant::now() + Duration::from_millis(rng.gen_range(SESSION_MS));
        while !self.stop_reading.load(Ordering::Acquire) {
            let stall_at = tokio::time::Instant::now() + STALL;
            let chunk =
                match tokio::time::timeout_at(stall_at.min(close_at), response.chunk()).await {
                    // Time to close this session.
                    Err(_) if stall_at >= close_at => break,
                    Err(_) => {
                        self.recorder.note_error("sse: stalled".into());
                        break;
                    }
                    Ok(Err(e)) => {
                        self.classify("sse body", &e);
                        break;
                    }
                    Ok(Ok(None)) => break,
                    Ok(Ok(Some(chunk))) => chunk,
                };
            let received = self.recorder.now();
            for event in parser.feed(&chunk) {
                match event.name.as_str() {
                    "data" => data.extend_from_slice(&event.data),
                    "control" => {
                        let Some((next, up_to_date, cursor)) = control(&event.data) else {
                            self.recorder.note_error("sse: bad control event".into());
                            return delivered;
                        };
                        self.recorder.push_read(
                            ReadOp {
                                stream: stream.to_string(),
                                reader,
                                kind: ReadKind::Sse,
                                invoked: opened,
                                completed: received,
                                start,
                                bytes: std::mem::take(&mut data).into(),
                                next,
                                up_to_date,
                            },
                            &base,
                        );
                        delivered = true;
                        start = next;
                        at.offset = Some(next);
                        at.cursor = cursor.or(at.cursor.take());
                    }
                    _ => {}
                }
            }
        }
        delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_parse_whole() {
        let mut p = Parser::default();
        let all = b": keepalive\n\nevent: data\ndata:<w1>\n\nevent: control\ndata:{\"streamNextOffset\":\"0000000000000000_0000000000000004\",\"upToDate\":true}\nid:x\n\n";
        let mut events = Vec::new();
        for chunk in all.chunks(7) {
            events.extend(p.feed(chunk));
        }
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0],
            Event {
                name: "data".into(),
                data: b"<w1>".to_vec()
            }
        );
        assert_eq!(events[1].name, "control");
        assert_eq!(control(&events[1].data), Some((4, true, None)));
        // Not at the tail: no upToDate.
        assert_eq!(
            control(
                br#"{"streamNextOffset":"0000000000000000_0000000000000009","streamCursor":"1"}"#
            ),
            Some((9, false, Some("1".into())))
        );
    }
}
