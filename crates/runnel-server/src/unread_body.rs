//! Bodies that a request's answer leaves unread.
//!
//! A request refused before its handler reads the body (no credentials,
//! not allowed, over a rate limit, a bad stream name) is answered while
//! the body may still be on its way. Over HTTP/2, hyper then ends the
//! stream with RST_STREAM(NO_ERROR) right after the answer: the protocol
//! allows it, but clients that are still sending (curl among them) report
//! a stream error instead of the 401 or 403 they were sent. So every
//! request that hyper serves has its body kept: when the handler answers
//! without reading it to the end, the rest is read and discarded, up to
//! [`DRAIN_BYTES`] within [`DRAIN_TIME`], before the answer goes out, and
//! the stream ends cleanly. A longer body is cut off by the reset, as
//! before (the client was refused; it need not send more).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, SizeHint};

/// At most this much of an unread body is read to end it cleanly: one
/// HTTP/2 stream window of ours, what a client may send before it hears.
pub const DRAIN_BYTES: u64 = 1 << 20;
/// For at most this long.
pub const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Where a body dropped before its end is put back.
type Slot = Arc<Mutex<Option<Body>>>;

/// A request body that returns itself to its [`Kept`] handle when it is
/// dropped before its end.
struct KeptBody {
    inner: Option<Body>,
    slot: Slot,
}

impl hyper::body::Body for KeptBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for KeptBody {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take().filter(|b| !b.is_end_stream()) {
            *self.slot.lock().expect("kept body lock") = Some(body);
        }
    }
}

/// The handle on a kept body, for after the answer is made.
pub struct Kept {
    slot: Option<Slot>,
}

/// Wraps `body` so that, dropped unread, it comes back to the returned
/// handle. A body already at its end (most GETs) is passed through as it
/// is, at no cost.
pub fn keep(body: Body) -> (Kept, Body) {
    if body.is_end_stream() {
        return (Kept { slot: None }, body);
    }
    let slot: Slot = Arc::default();
    let kept = KeptBody {
        inner: Some(body),
        slot: Arc::clone(&slot),
    };
    (Kept { slot: Some(slot) }, Body::new(kept))
}

impl Kept {
    /// Reads and discards what the handler left of the body, within the
    /// bounds above; returns the bytes discarded. Nothing when the handler
    /// read it all, or still holds it (a forwarded request's body, say).
    pub async fn drain(self) -> u64 {
        let Some(body) = self
            .slot
            .and_then(|slot| slot.lock().expect("kept body lock").take())
        else {
            return 0;
        };
        let mut discarded = 0u64;
        let read = async {
            let mut body = body;
            while discarded < DRAIN_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        discarded += frame.data_ref().map_or(0, |d| d.len() as u64);
                    }
                    Some(Err(_)) | None => break,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIME, read).await;
        discarded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{stream, StreamExt};

    fn streamed(chunks: Vec<&'static [u8]>) -> Body {
        Body::from_stream(stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        ))
    }

    #[tokio::test]
    async fn a_body_dropped_unread_is_drained_after_the_answer() {
        let (kept, body) = keep(streamed(vec![b"abc", b"de"]));
        drop(body);
        assert_eq!(kept.drain().await, 5);
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_leaves_nothing_to_drain() {
        let (kept, body) = keep(streamed(vec![b"abc", b"de"]));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"abcde");
        assert_eq!(kept.drain().await, 0);
    }

    #[tokio::test]
    async fn an_empty_body_is_not_wrapped() {
        let (kept, body) = keep(Body::empty());
        assert!(kept.slot.is_none());
        assert!(body.is_end_stream());
        assert_eq!(kept.drain().await, 0);
    }

    #[tokio::test]
    async fn draining_stops_at_its_byte_bound() {
        static CHUNK: [u8; 64 << 10] = [7; 64 << 10];
        let chunks = vec![&CHUNK[..]; 64]; // 4 MiB
        let (kept, body) = keep(streamed(chunks));
        drop(body);
        let drained = kept.drain().await;
        assert!(
            (DRAIN_BYTES..DRAIN_BYTES + (64 << 10)).contains(&drained),
            "{drained}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn draining_stops_at_its_time_bound() {
        // A body whose rest never comes.
        let never = stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(b"x")) })
            .chain(stream::pending());
        let (kept, body) = keep(Body::from_stream(never));
        drop(body);
        let started = tokio::time::Instant::now();
        assert_eq!(kept.drain().await, 1);
        assert_eq!(started.elapsed(), DRAIN_TIME);
    }
}
