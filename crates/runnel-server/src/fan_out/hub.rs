//! The hub: one task per stream that writes each event to every
//! caught-up reader's socket (design: `docs/live-fan-out.md`).
//!
//! The hub owns the write side of its members' sockets while they are
//! listed. It renders each event once, frames it once as an HTTP chunk and
//! writes it with a non-blocking `send` per member; a member that cannot
//! take a whole chunk, or that is not at the event's position, is handed
//! back to its own task with its position and the unwritten rest.

use std::collections::HashMap;
use std::io;
use std::mem;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use runnel_core::StreamId;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::direct_connection::chunk_size_line;
use crate::handlers::sse::{render_at, Rendered};
use crate::AppState;

static DELIVERED: AtomicU64 = AtomicU64::new(0);
static SLOW: AtomicU64 = AtomicU64::new(0);

/// Events (or batches of them) hubs wrote to members, for `/metrics`.
pub fn deliveries() -> u64 {
    DELIVERED.load(Relaxed)
}

/// Members handed back because their socket took less than a whole
/// chunk, for `/metrics`.
pub fn slow_handbacks() -> u64 {
    SLOW.load(Relaxed)
}

/// What the hub does with a member at `member` for the event `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The event starts at the member's position: write it.
    Write,
    /// The member read this event itself and is now where the hub is.
    Aligned,
    /// The member stopped inside the event: it reads on its own from there.
    HandBack,
    /// The member is ahead of the hub: nothing yet.
    Wait,
}

/// The membership rule. Members join at or after the hub's position and
/// the hub only moves forward, so a member is never behind an event.
pub(crate) fn step(member: u64, start: u64, end: u64) -> Step {
    assert!(start <= end, "event [{start}, {end}) runs backwards");
    assert!(
        member >= start,
        "member at {member} is behind the hub's event [{start}, {end})"
    );
    if member == start {
        Step::Write
    } else if member == end {
        Step::Aligned
    } else if member < end {
        Step::HandBack
    } else {
        Step::Wait
    }
}

/// A member's socket given back to its task.
#[derive(Debug)]
pub(crate) struct Handback {
    /// Where the member's stream continues after what the hub wrote.
    pub position: u64,
    /// Bytes of a chunk the socket did not take: to write before anything
    /// else.
    pub rest: Bytes,
    /// The member was written the stream's closing event.
    pub finished: bool,
    /// Writing failed: the connection is over.
    pub failed: Option<io::Error>,
}

/// The hubs of this server: per stream with caught-up plain-HTTP SSE
/// readers, one per runtime worker, so that a stream's readers are written
/// on every core at once (the event is rendered once for all of them).
#[derive(Default)]
pub struct FanOut {
    hubs: Mutex<HashMap<HubKey, Arc<Hub>>>,
    /// Spreads joining readers over a stream's hubs.
    joined: std::sync::atomic::AtomicUsize,
}

/// A stream incarnation and one of its hubs: names tell streams of
/// different groups apart (their ids are counted per group), ids tell
/// incarnations apart.
#[derive(Clone, PartialEq, Eq, Hash)]
struct HubKey {
    name: Arc<str>,
    id: StreamId,
    shard: usize,
}

pub(crate) struct Hub {
    key: HubKey,
    state: Mutex<HubState>,
}

struct HubState {
    /// Where the next event the hub delivers starts.
    position: u64,
    members: Vec<Member>,
    /// Members written to right now, outside the lock.
    delivering: bool,
    /// Members that asked to leave while they were being written to.
    leaving: Vec<u64>,
    /// The hub's task is gone: nobody may join.
    ended: bool,
    next_member: u64,
}

struct Member {
    id: u64,
    position: u64,
    /// The `cursor` its client sent, if any.
    cursor: Option<u64>,
    socket: Arc<OwnedWriteHalf>,
    back: oneshot::Sender<Handback>,
}

impl Member {
    fn hand_back(self, position: u64, rest: Bytes, finished: bool, failed: Option<io::Error>) {
        // A member whose task is gone has nobody to hand back to.
        let _ = self.back.send(Handback {
            position,
            rest,
            finished,
            failed,
        });
    }
}

/// A reader listed in a hub, until its hand-back.
pub(crate) struct Membership {
    hub: Arc<Hub>,
    id: u64,
    back: oneshot::Receiver<Handback>,
}

impl Membership {
    /// The socket back, when the hub lets go of it.
    pub(crate) async fn handed_back(&mut self) -> Handback {
        match (&mut self.back).await {
            Ok(back) => back,
            // The hub's task ended without handing back (a panic): the
            // member's socket state is unknown, so the connection ends.
            Err(_) => Handback {
                position: 0,
                rest: Bytes::new(),
                finished: true,
                failed: Some(io::Error::other("the stream's hub ended")),
            },
        }
    }

    /// Asks the hub to hand the member back now (see
    /// [`Membership::handed_back`]).
    pub(crate) fn leave(&self) {
        let mut state = self.hub.lock();
        if let Some(i) = state.members.iter().position(|m| m.id == self.id) {
            let member = state.members.swap_remove(i);
            let position = member.position;
            member.hand_back(position, Bytes::new(), false, None);
        } else if state.delivering {
            state.leaving.push(self.id);
        }
        // Otherwise it was handed back already.
    }
}

impl FanOut {
    /// Lists a reader at `position` in its stream's hub, starting one if
    /// there is none; `None` when the hub is past `position` (the reader
    /// catches up on its own first).
    pub(crate) fn join(
        &self,
        app: &AppState,
        name: &Arc<str>,
        id: StreamId,
        position: u64,
        cursor: Option<u64>,
        socket: Arc<OwnedWriteHalf>,
    ) -> Option<Membership> {
        let shards = tokio::runtime::Handle::try_current()
            .map(|runtime| runtime.metrics().num_workers())
            .unwrap_or(1)
            .max(1);
        let key = HubKey {
            name: Arc::clone(name),
            id,
            shard: self.joined.fetch_add(1, Relaxed) % shards,
        };
        let mut hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        let hub = hubs
            .entry(key.clone())
            .or_insert_with(|| {
                let hub = Arc::new(Hub {
                    key,
                    state: Mutex::new(HubState {
                        position,
                        members: Vec::new(),
                        delivering: false,
                        leaving: Vec::new(),
                        ended: false,
                        next_member: 0,
                    }),
                });
                tokio::spawn(Arc::clone(&hub).run(app.clone()));
                hub
            })
            .clone();
        let mut state = hub.lock();
        // Hubs leave the map before they end, under both locks.
        assert!(!state.ended, "an ended hub is still listed");
        if position < state.position {
            return None;
        }
        let (back_tx, back) = oneshot::channel();
        let member = state.next_member;
        state.next_member += 1;
        state.members.push(Member {
            id: member,
            position,
            cursor,
            socket,
            back: back_tx,
        });
        drop(state);
        Some(Membership {
            hub,
            id: member,
            back,
        })
    }

    /// How many hubs are running, for `/metrics`.
    pub fn hubs(&self) -> usize {
        self.hubs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the stream from the hub's position and delivers what it
    /// finds, like a reader's own task does, until the stream ends or the
    /// hub has no members after a delivery.
    async fn run(self: Arc<Self>, app: AppState) {
        let engine = app.node.engine_for(&self.key.name);
        // Subscribed before the first read: a commit after it wakes us.
        let mut changes = engine.subscribe(self.key.id);
        let mut seen = *changes.borrow_and_update();
        let keepalive = app.config.sse_keepalive;
        let mut last_write = Instant::now();
        let timer = tokio::time::sleep(keepalive);
        tokio::pin!(timer);
        let mut waiting = false;
        loop {
            if waiting {
                tokio::select! {
                    biased;
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return self.end(&app);
                        }
                        seen = *changes.borrow_and_update();
                    }
                    () = timer.as_mut() => {
                        if self.retire_if_empty(&app) {
                            return;
                        }
                        let now = Instant::now();
                        if now >= last_write + keepalive {
                            self.deliver_keepalive();
                            last_write = now;
                        }
                        timer.as_mut().reset(last_write + keepalive);
                        continue;
                    }
                }
            }
            let position = self.lock().position;
            let Some(rendered) =
                render_at(&app, &self.key.name, self.key.id, position, None, seen).await
            else {
                // Deleted or expired: every member ends its response.
                return self.end(&app);
            };
            waiting = rendered.up_to_date() && rendered.version() >= seen;
            let framed = rendered.bytes().map(chunk);
            if framed.is_some() {
                last_write = Instant::now();
            }
            self.deliver(&app, position, &rendered, framed);
            if rendered.reached_close() {
                return self.end(&app);
            }
            // Nobody left to write to: a reader that comes back starts a
            // new hub rather than this one reading for nobody.
            if self.retire_if_empty(&app) {
                return;
            }
        }
    }

    /// Delivers the rendered event `[start, rendered.next())`, written as
    /// `framed`, to every member it is for.
    fn deliver(&self, app: &AppState, start: u64, rendered: &Rendered, framed: Option<Bytes>) {
        let end = rendered.next();
        let mut members = {
            let mut state = self.lock();
            assert_eq!(state.position, start, "the hub's position moved under it");
            state.position = end;
            state.delivering = true;
            mem::take(&mut state.members)
        };
        let closing = rendered.reached_close();
        let mut delivered = 0u64;
        let mut kept = Vec::with_capacity(members.len());
        for mut member in members.drain(..) {
            match step(member.position, start, end) {
                Step::Aligned | Step::Wait => kept.push(member),
                Step::HandBack => {
                    let at = member.position;
                    member.hand_back(at, Bytes::new(), false, None);
                }
                Step::Write => {
                    let Some(framed) = &framed else {
                        // Nothing to say for this range: the member moves on.
                        member.position = end;
                        kept.push(member);
                        continue;
                    };
                    if !rendered.serves(member.cursor) {
                        // Its control events carry a cursor of its own.
                        member.hand_back(start, Bytes::new(), false, None);
                        continue;
                    }
                    match write_some(&member.socket, framed) {
                        Ok(n) if n == framed.len() => {
                            delivered += 1;
                            member.position = end;
                            if closing {
                                member.hand_back(end, Bytes::new(), true, None);
                            } else {
                                kept.push(member);
                            }
                        }
                        Ok(n) => {
                            // A slow reader: its task writes the rest.
                            delivered += 1;
                            SLOW.fetch_add(1, Relaxed);
                            member.hand_back(end, framed.slice(n..), closing, None);
                        }
                        Err(e) => member.hand_back(end, Bytes::new(), true, Some(e)),
                    }
                }
            }
        }
        if delivered > 0 {
            DELIVERED.fetch_add(delivered, Relaxed);
            if let Some(bytes) = rendered.bytes() {
                let metrics = &app.metrics;
                metrics
                    .sse_events
                    .fetch_add(rendered.events() * delivered, Relaxed);
                metrics
                    .sse_bytes
                    .fetch_add(bytes.len() as u64 * delivered, Relaxed);
            }
        }
        self.put_back(kept);
    }

    /// Writes the keepalive comment to every member.
    fn deliver_keepalive(&self) {
        let framed = chunk(&Bytes::from_static(b": keepalive\n\n"));
        let mut members = {
            let mut state = self.lock();
            state.delivering = true;
            mem::take(&mut state.members)
        };
        let mut kept = Vec::with_capacity(members.len());
        for member in members.drain(..) {
            let at = member.position;
            match write_some(&member.socket, &framed) {
                Ok(n) if n == framed.len() => kept.push(member),
                Ok(n) => {
                    SLOW.fetch_add(1, Relaxed);
                    member.hand_back(at, framed.slice(n..), false, None);
                }
                Err(e) => member.hand_back(at, Bytes::new(), true, Some(e)),
            }
        }
        self.put_back(kept);
    }

    /// Lists the members kept after a delivery again, next to those that
    /// joined meanwhile, and hands back those that asked to leave.
    fn put_back(&self, kept: Vec<Member>) {
        let mut state = self.lock();
        state.delivering = false;
        state.members.extend(kept);
        for id in mem::take(&mut state.leaving) {
            if let Some(i) = state.members.iter().position(|m| m.id == id) {
                let member = state.members.swap_remove(i);
                let at = member.position;
                member.hand_back(at, Bytes::new(), false, None);
            }
        }
    }

    /// Ends the hub when it has no members; answers whether it did.
    fn retire_if_empty(&self, app: &AppState) -> bool {
        let mut hubs = app.fan_out.hubs.lock().unwrap_or_else(|e| e.into_inner());
        let mut state = self.lock();
        if !state.members.is_empty() {
            return false;
        }
        state.ended = true;
        self.unlist(&mut hubs);
        true
    }

    /// Ends the hub (the stream closed, or is gone) and hands every
    /// member still listed back.
    fn end(&self, app: &AppState) {
        let members = {
            let mut hubs = app.fan_out.hubs.lock().unwrap_or_else(|e| e.into_inner());
            let mut state = self.lock();
            state.ended = true;
            self.unlist(&mut hubs);
            mem::take(&mut state.members)
        };
        for member in members {
            let at = member.position;
            // A member the stream closed before reaching reads the rest
            // on its own (and finishes there).
            member.hand_back(at, Bytes::new(), false, None);
        }
    }

    fn unlist(&self, hubs: &mut HashMap<HubKey, Arc<Hub>>) {
        if hubs
            .get(&self.key)
            .is_some_and(|listed| std::ptr::eq(Arc::as_ptr(listed), self))
        {
            hubs.remove(&self.key);
        }
    }
}

/// `bytes` as one HTTP/1.1 chunk.
fn chunk(bytes: &Bytes) -> Bytes {
    let mut out = BytesMut::with_capacity(bytes.len() + 20);
    out.extend_from_slice(chunk_size_line(bytes.len(), &mut [0u8; 18]));
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

/// One non-blocking `send` of `bytes`: how much the socket took (none
/// when it would block).
fn write_some(socket: &OwnedWriteHalf, bytes: &[u8]) -> io::Result<usize> {
    match socket.try_write(bytes) {
        Ok(0) => Err(io::ErrorKind::WriteZero.into()),
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_written_only_what_starts_at_its_position() {
        assert_eq!(step(10, 10, 20), Step::Write);
        assert_eq!(step(20, 10, 20), Step::Aligned);
        assert_eq!(step(15, 10, 20), Step::HandBack);
        assert_eq!(step(25, 10, 20), Step::Wait);
        // An empty range at the member's position is still its to say
        // (a control event).
        assert_eq!(step(10, 10, 10), Step::Write);
    }

    #[test]
    #[should_panic(expected = "behind the hub")]
    fn a_member_behind_the_hub_is_a_broken_invariant() {
        step(5, 10, 20);
    }

    /// A member listed while the hub is at or before its position is
    /// written each range from there exactly once, in order, or handed
    /// back exactly where it has been written up to.
    #[test]
    fn members_get_each_event_once_from_where_they_joined() {
        // Boundaries of the hub's reads; members stop at any position,
        // boundaries of their own reads, the hub's or not.
        let hub_events = [0u64, 3, 7, 7, 12, 20, 21, 30];
        for join_at in 0..=30u64 {
            let mut position = join_at;
            let mut written = Vec::new();
            let mut handed_back = None;
            for w in hub_events.windows(2) {
                let (start, end) = (w[0], w[1]);
                match step(position, start, end) {
                    Step::Write => {
                        written.push((start, end));
                        position = end;
                    }
                    Step::Aligned | Step::Wait => {}
                    Step::HandBack => {
                        handed_back = Some(position);
                        break;
                    }
                }
            }
            let mut at = join_at;
            for (start, end) in &written {
                assert_eq!(*start, at, "joined at {join_at}: a gap or a repeat");
                at = *end;
            }
            match handed_back {
                Some(back) => assert_eq!(back, at, "joined at {join_at}"),
                None => assert_eq!(at, 30, "joined at {join_at}: not written to the end"),
            }
        }
    }
}
