//! Server-Sent Events: a catch-up followed by a live tail, as `data`
//! events each followed by one `control` event. Text streams are sent as
//! text, JSON streams as one array per data event, anything else base64.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use runnel_core::json::render_json_array;
use runnel_core::{ContentKind, ReadFrom, ReadPlan, StreamId};
use runnel_engine::{now_ms, ReadResult};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::cache::Answer;
use crate::cursor::{current_interval, next_cursor, next_cursor_value};
use crate::error::ApiError;
use crate::headers::names;
use crate::AppState;

pub async fn serve(
    app: AppState,
    name: String,
    from: ReadFrom,
    incarnation: u64,
    cursor: Option<String>,
) -> Result<Response, ApiError> {
    let permit = super::admit_live_reader(&app, crate::metrics::LiveMode::Sse)?;
    // Errors before the first byte are ordinary statuses.
    let engine = app.node.engine_for(&name);
    let first = match engine.read(&name, from, app.config.max_read_bytes).await {
        Ok(first) => first,
        Err(e) => {
            return Err(super::read::other_incarnation_or(
                &app,
                &name,
                incarnation,
                e.into(),
            ))
        }
    };
    if !first.plan.info.accepts_incarnation(incarnation) {
        return Err(ApiError::OtherIncarnation);
    }
    let mut changes = engine.subscribe(first.plan.info.id);
    let seen = *changes.borrow_and_update();
    let kind = first.plan.info.kind;

    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    app.cache_headers(&mut headers, Answer::Revalidate, &name);
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if kind == ContentKind::Binary {
        headers.insert(
            names::STREAM_SSE_DATA_ENCODING,
            HeaderValue::from_static("base64"),
        );
    }
    // The first answer always ends in a control event, data or not.
    let rendered = Rendered::of(&first, cursor.as_deref(), true);
    let now = Instant::now();
    let tail = Tail {
        id: first.plan.info.id,
        position: rendered.next,
        // Re-read once after subscribing: a commit between the first read
        // and the subscription must not go unnoticed.
        waiting: false,
        seen,
        finished: rendered.reached_close,
        first: rendered.bytes,
        first_events: rendered.events,
        timer: Box::pin(tokio::time::sleep(
            app.config.sse_keepalive.min(app.config.sse_max_duration),
        )),
        ends_at: now + app.config.sse_max_duration,
        last_sent: now,
        app,
        name: name.into(),
        cursor,
        changes,
        _permit: permit,
    };
    // Pull-based: the connection asks for the next event only when it can
    // write it, so a slow reader costs no buffer; a reader that stops
    // reading entirely is cut off by the transport's stall timeout. The
    // server's own path may take the tail out of the response instead
    // (`SseTail`) and never poll the body.
    let slot = SseTail(Arc::new(Mutex::new(Some(tail))));
    let events = futures::stream::unfold((slot.clone(), None), |(slot, tail)| async move {
        let mut tail = match tail {
            Some(tail) => tail,
            None => slot.take()?,
        };
        let chunk = tail.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), (slot, Some(tail))))
    });
    let mut response = (StatusCode::OK, headers, Body::from_stream(events)).into_response();
    response.extensions_mut().insert(slot);
    Ok(response)
}

/// An SSE response's reader state, in the response's extensions: whoever
/// takes it first serves the events, the body or the server's own path
/// (which writes caught-up readers through the stream's hub).
#[derive(Clone)]
pub struct SseTail(Arc<Mutex<Option<Tail>>>);

impl SseTail {
    pub fn take(&self) -> Option<Tail> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Gives back a tail taken but not served, for the body to serve.
    pub fn put_back(&self, tail: Tail) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(tail);
    }
}

/// What a reader does next.
pub enum Next {
    /// Write these bytes (events or a keepalive).
    Bytes(Bytes),
    /// The reader is at the stream's tail with nothing to write: it may
    /// join the stream's hub (only when asked not to park).
    CaughtUp,
    /// The response is over: stream closed or gone, or maximum duration.
    End,
}

/// One SSE connection's position in its stream.
pub struct Tail {
    app: AppState,
    /// Shared with the render cache's keys.
    name: Arc<str>,
    id: StreamId,
    cursor: Option<String>,
    changes: watch::Receiver<u64>,
    /// Where the next read starts.
    position: u64,
    /// The last read reached the tail: wait for a change before reading.
    waiting: bool,
    /// Notifier version this connection has seen; every commit up to it is
    /// covered by its reads.
    seen: u64,
    finished: bool,
    /// The first answer, rendered before the response started.
    first: Option<Bytes>,
    /// Events in `first`.
    first_events: u64,
    // One timer for the next keepalive and the end of the connection,
    // whichever comes first; it lives as long as the connection: re-arming
    // is cheaper than creating and dropping one around every event, and
    // one timer is polled when the connection parks, not two.
    timer: Pin<Box<Sleep>>,
    ends_at: Instant,
    last_sent: Instant,
    _permit: super::LiveReaderSlot,
}

impl Tail {
    /// The next bytes to write: events, or a keepalive comment. `None` ends
    /// the connection (stream closed or gone, or maximum duration).
    async fn next_chunk(&mut self) -> Option<Bytes> {
        match self.next(true).await {
            Next::Bytes(bytes) => Some(bytes),
            Next::CaughtUp | Next::End => None,
        }
    }

    /// What to write next; with `park`, waits at the tail for the next
    /// event or keepalive, otherwise answers [`Next::CaughtUp`] there.
    pub async fn next(&mut self, park: bool) -> Next {
        if let Some(first) = self.first.take() {
            self.count(&first, self.first_events);
            return Next::Bytes(first);
        }
        loop {
            if self.finished {
                return Next::End;
            }
            if self.waiting && !park {
                return Next::CaughtUp;
            }
            if self.waiting {
                // A change first: while events flow, the timers are not
                // polled again for each one.
                tokio::select! {
                    biased;
                    changed = self.changes.changed() => {
                        if changed.is_err() {
                            return Next::End;
                        }
                        self.seen = *self.changes.borrow_and_update();
                    }
                    _ = self.timer.as_mut() => {
                        let now = Instant::now();
                        if now >= self.ends_at {
                            return Next::End;
                        }
                        let due = self.last_sent + self.app.config.sse_keepalive;
                        let keepalive = now >= due;
                        if keepalive {
                            self.last_sent = now;
                        }
                        let next = (self.last_sent + self.app.config.sse_keepalive).min(self.ends_at);
                        self.timer.as_mut().reset(next);
                        if keepalive {
                            return Next::Bytes(Bytes::from_static(b": keepalive\n\n"));
                        }
                        continue;
                    }
                }
            }
            // Deleted or expired: end the connection; a reconnect gets 404/410.
            let Some(rendered) = render_at(
                &self.app,
                &self.name,
                self.id,
                self.position,
                self.cursor.as_deref(),
                self.seen,
            )
            .await
            else {
                return Next::End;
            };
            self.position = rendered.next;
            // A render made before this connection's last wake-up may
            // predate the commit that woke it: read again rather than wait.
            self.waiting = rendered.up_to_date && rendered.version >= self.seen;
            self.finished = rendered.reached_close;
            if let Some(bytes) = &rendered.bytes {
                self.last_sent = Instant::now();
                self.count(bytes, rendered.events);
                return Next::Bytes(bytes.clone());
            }
        }
    }

    /// Where the reader is in the stream.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The `cursor` its client sent (one that does not parse counts as
    /// none, as the shared rendering counts it).
    pub fn cursor(&self) -> Option<u64> {
        self.cursor.as_deref().and_then(|c| c.parse().ok())
    }

    pub fn app(&self) -> &AppState {
        &self.app
    }

    pub fn stream(&self) -> (&Arc<str>, StreamId) {
        (&self.name, self.id)
    }

    /// When the connection must end (`--sse-max-duration`).
    pub fn ends_at(&self) -> Instant {
        self.ends_at
    }

    /// Continues at `position` after the hub handed the reader back: the
    /// next call reads from there (the hub may have seen commits this
    /// reader's notifier has not told it of); `finished` when the hub
    /// wrote the stream's closing event.
    pub fn resume(&mut self, position: u64, finished: bool) {
        self.position = position;
        self.waiting = false;
        self.finished |= finished;
        self.last_sent = Instant::now();
        let next = (self.last_sent + self.app.config.sse_keepalive).min(self.ends_at);
        self.timer.as_mut().reset(next);
    }

    fn count(&self, bytes: &Bytes, events: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let metrics = &self.app.metrics;
        metrics.sse_events.fetch_add(events, Relaxed);
        metrics.sse_bytes.fetch_add(bytes.len() as u64, Relaxed);
    }
}

/// The events of stream `name` (incarnation `id`) from `position`,
/// rendered once per stream and position for every connection there. A
/// connection whose own cursor is not behind the shared rendering's
/// renders for itself (its control events must carry a larger cursor).
/// `seen` is the notifier version the reader had seen before reading;
/// `None` when the stream is gone.
pub(crate) async fn render_at(
    app: &AppState,
    name: &Arc<str>,
    id: StreamId,
    position: u64,
    cursor: Option<&str>,
    seen: u64,
) -> Option<Arc<Rendered>> {
    let key = RenderKey {
        name: Arc::clone(name),
        id,
        position,
    };
    if let Some(hit) = app.sse_cache.get(&key) {
        if hit.serves(parse_cursor(cursor)) {
            return Some(hit);
        }
    }
    let engine = app.node.engine_for(name);
    let result = engine
        .read_by_id(id, position, app.config.max_read_bytes)
        .await
        .ok()?;
    let mut rendered = Rendered::of(&result, cursor, false);
    rendered.version = seen;
    let rendered = Arc::new(rendered);
    if rendered.bytes.is_some() && rendered.serves(parse_cursor(cursor)) {
        app.sse_cache.put(key, Arc::clone(&rendered));
    }
    Some(rendered)
}

fn parse_cursor(cursor: Option<&str>) -> Option<u64> {
    cursor.and_then(|c| c.parse::<u64>().ok())
}

/// A read rendered as SSE bytes, with where the reader goes next.
pub struct Rendered {
    /// Data and control events; `None` when the read found nothing to say.
    bytes: Option<Bytes>,
    /// How many events `bytes` holds.
    events: u64,
    next: u64,
    up_to_date: bool,
    reached_close: bool,
    /// Cursor interval the control event was rendered in.
    interval: u64,
    /// The cursor a client without one gets with this rendering: a
    /// connection whose cursor is behind it gets the same bytes.
    shared_cursor: u64,
    /// Notifier version the rendering connection had seen before reading.
    version: u64,
}

impl Rendered {
    fn of(result: &ReadResult, cursor: Option<&str>, owes_control: bool) -> Rendered {
        let plan = &result.plan;
        // One clock reading for the control event and the shared cursor.
        let now = now_ms();
        let speaks = !result.body.is_empty() || owes_control || plan.reached_close();
        let events = if speaks {
            1 + u64::from(!result.body.is_empty())
        } else {
            0
        };
        let bytes = speaks.then(|| {
            let mut out = Vec::with_capacity(result.body.len() * 4 / 3 + 256);
            if !result.body.is_empty() {
                data_event(&mut out, plan.info.kind, &result.body);
            }
            control_event(&mut out, plan, cursor, now);
            Bytes::from(out)
        });
        Rendered {
            bytes,
            events,
            next: plan.next.position(),
            up_to_date: plan.up_to_date(),
            reached_close: plan.reached_close(),
            interval: current_interval(now),
            shared_cursor: next_cursor_value(now, None, plan.next.position()),
            version: 0,
        }
    }

    /// Whether these bytes are what a connection with `cursor` would
    /// render: its cursor is behind the shared one, so its control event
    /// carries the shared cursor too.
    pub(crate) fn serves(&self, cursor: Option<u64>) -> bool {
        cursor.is_none_or(|c| c < self.shared_cursor)
    }

    /// The events, if the read found anything to say.
    pub(crate) fn bytes(&self) -> Option<&Bytes> {
        self.bytes.as_ref()
    }

    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// Where the stream continues after these events.
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    pub(crate) fn up_to_date(&self) -> bool {
        self.up_to_date
    }

    pub(crate) fn reached_close(&self) -> bool {
        self.reached_close
    }

    /// The notifier version its reader had seen before reading.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
}

/// Rendered events shared by the connections at the same stream and
/// position. Small and bounded: only the newest positions matter.
#[derive(Default)]
pub struct RenderCache {
    entries: Mutex<HashMap<RenderKey, Arc<Rendered>>>,
}

/// A stream incarnation and a position in it. The name is part of the
/// key: stream ids are counted per group, so streams of different groups
/// on one node share ids, and an id alone would hand one stream's events
/// to another's readers. The id tells incarnations of a name apart.
#[derive(Clone, PartialEq, Eq, Hash)]
struct RenderKey {
    name: Arc<str>,
    id: StreamId,
    position: u64,
}

/// Entries kept before the cache starts over.
const RENDER_CACHE_ENTRIES: usize = 4096;

impl RenderCache {
    fn get(&self, key: &RenderKey) -> Option<Arc<Rendered>> {
        let entries = self.entries.lock().expect("render cache lock");
        entries
            .get(key)
            .filter(|r| r.interval == interval_now())
            .cloned()
    }

    fn put(&self, key: RenderKey, rendered: Arc<Rendered>) {
        let mut entries = self.entries.lock().expect("render cache lock");
        if entries.len() >= RENDER_CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(key, rendered);
    }
}

/// The cursor interval now: a cached rendering from an earlier interval
/// would hand out a stale cursor.
fn interval_now() -> u64 {
    current_interval(now_ms())
}

/// `event: data`, one `data:` line per line of the payload.
fn data_event(out: &mut Vec<u8>, kind: ContentKind, body: &[u8]) {
    out.extend_from_slice(b"event: data\n");
    match kind {
        ContentKind::Binary => {
            out.extend_from_slice(b"data:");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .as_bytes(),
            );
            out.push(b'\n');
        }
        ContentKind::Json => data_lines(out, &render_json_array(body)),
        ContentKind::Text => data_lines(out, body),
    }
    out.push(b'\n');
}

/// Splits on CR, LF and CRLF so no payload byte can end an event early.
fn data_lines(out: &mut Vec<u8>, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let cut = rest.iter().position(|b| *b == b'\n' || *b == b'\r');
        let (line, next) = match cut {
            None => (rest, None),
            Some(i) => {
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..i], Some(&rest[i + skip..]))
            }
        };
        out.extend_from_slice(b"data:");
        out.extend_from_slice(line);
        out.push(b'\n');
        match next {
            Some(n) => rest = n,
            None => break,
        }
    }
}

/// `event: control` with the next offset, a cursor (while open), and the
/// up-to-date and closed flags; its `id` is the offset, so EventSource
/// resumes with `Last-Event-ID`.
fn control_event(out: &mut Vec<u8>, plan: &ReadPlan, client_cursor: Option<&str>, now: i64) {
    let mut control = serde_json::Map::new();
    let next = plan.info.token(plan.next);
    control.insert("streamNextOffset".into(), next.as_str().into());
    if plan.reached_close() {
        control.insert("streamClosed".into(), true.into());
    } else {
        control.insert(
            "streamCursor".into(),
            next_cursor(now, client_cursor, plan.next.position()).into(),
        );
    }
    if plan.up_to_date() {
        control.insert("upToDate".into(), true.into());
    }
    out.extend_from_slice(b"event: control\ndata:");
    out.extend_from_slice(serde_json::Value::Object(control).to_string().as_bytes());
    out.extend_from_slice(b"\nid:");
    out.extend_from_slice(next.as_str().as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_break_starts_a_new_data_line() {
        let mut out = Vec::new();
        data_lines(&mut out, b"a\r\n\r\nevent: control\rb\nc");
        assert_eq!(out, b"data:a\ndata:\ndata:event: control\ndata:b\ndata:c\n");
    }

    #[test]
    fn binary_data_is_base64() {
        let mut out = Vec::new();
        data_event(&mut out, ContentKind::Binary, b"Hello");
        assert_eq!(out, b"event: data\ndata:SGVsbG8=\n\n");
    }
}
