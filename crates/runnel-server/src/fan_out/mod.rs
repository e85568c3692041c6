//! Live fan-out on the server's own HTTP/1.1 path: an SSE reader that is
//! caught up lends its socket's write side to its stream's hub, which
//! writes every event to all such readers with one `send` each and no
//! task woken per reader (design: `docs/live-fan-out.md`).
//!
//! This module owns the reader's side: [`serve`] runs one SSE connection,
//! writing catch-up itself and joining the hub whenever it reaches the
//! tail; [`hub`] owns the writing of caught-up readers; [`socket`] the
//! split connection they share.

pub mod hub;
pub mod socket;

use std::io;

use axum::response::Response;
use bytes::Bytes;
use tokio::sync::watch;

pub use hub::FanOut;
pub use socket::SharedSocket;

use crate::direct_connection::{chunk_size_line, render_head, Framing};
use crate::handlers::sse::{Next, Tail};
use hub::Handback;

/// A connection that can be split for sharing with a hub (plain TCP); a
/// TLS connection cannot, and is handed back as it was.
pub trait IntoShared: Sized {
    fn into_shared(self) -> Result<SharedSocket, Self>;
}

impl<T> IntoShared for runnel_tls::tokio_rustls::server::TlsStream<T> {
    fn into_shared(self) -> Result<SharedSocket, Self> {
        Err(self)
    }
}

/// Serves the SSE `response`, whose events `tail` makes, on `socket`
/// until the response ends, the peer goes or `shutdown` turns true; then
/// closes the connection. `common` holds header lines every response gets.
pub async fn serve(
    socket: SharedSocket,
    response: Response,
    mut tail: Tail,
    mut shutdown: watch::Receiver<bool>,
    common: &[u8],
) -> io::Result<()> {
    // The answer's head, chunked and closing the connection; its body,
    // which would have served the events, is not used.
    let (parts, _body) = response.into_parts();
    let head = render_head(&parts, Framing::Chunked, true, common);
    drop(parts);
    socket.write_all(&[&head]).await?;
    drop(head);
    let mut stopping = std::pin::pin!(shutdown.wait_for(|stop| *stop));
    // Set when the hub would not take the reader: its next read may wait
    // for the stream to move (with keepalives) rather than ask again.
    let mut park = false;
    loop {
        let next = tokio::select! {
            biased;
            next = tail.next(park) => next,
            () = socket.closed() => return Ok(()),
            _ = &mut stopping => Next::End,
        };
        match next {
            Next::Bytes(bytes) => {
                park = false;
                write_chunk(&socket, &bytes).await?;
            }
            Next::End => break,
            Next::CaughtUp => {
                let (back, ending) = match wait_in_hub(&socket, &tail, &mut stopping).await {
                    InHub::HandedBack(back) => (back, false),
                    InHub::Ending(back) => (back, true),
                    InHub::NotTaken => {
                        // The hub is past this reader: it reads on by
                        // itself, from where it is.
                        let at = tail.position();
                        tail.resume(at, false);
                        park = true;
                        continue;
                    }
                    InHub::PeerGone => return Ok(()),
                };
                socket.write_all(&[&back.rest]).await?;
                if let Some(e) = back.failed {
                    return Err(e);
                }
                tail.resume(back.position, back.finished);
                if ending {
                    break;
                }
            }
        }
    }
    socket.write_all(&[b"0\r\n\r\n"]).await?;
    socket.shutdown();
    Ok(())
}

/// How a stay in the hub ended.
enum InHub {
    /// The hub let go of the socket: the reader goes on by itself.
    HandedBack(Handback),
    /// Shutdown or the connection's deadline: the response ends.
    Ending(Handback),
    /// The hub is past the reader and did not list it.
    NotTaken,
    /// The peer closed: the connection is over.
    PeerGone,
}

/// Lists the caught-up reader in its stream's hub and waits for its
/// socket back.
async fn wait_in_hub<F>(
    socket: &SharedSocket,
    tail: &Tail,
    stopping: &mut std::pin::Pin<&mut F>,
) -> InHub
where
    F: std::future::Future,
{
    let app = tail.app();
    let (name, id) = tail.stream();
    let at = tail.position();
    let Some(mut membership) = app
        .fan_out
        .join(app, name, id, at, tail.cursor(), socket.writer())
    else {
        return InHub::NotTaken;
    };
    let deadline = tokio::time::sleep_until(tail.ends_at());
    tokio::pin!(deadline);
    // The select's outcome is taken apart only after it: the shutdown
    // signal's output borrows the signal and must not live across awaits.
    let outcome = tokio::select! {
        biased;
        back = membership.handed_back() => Some(InHub::HandedBack(back)),
        () = socket.closed() => Some(InHub::PeerGone),
        _ = stopping.as_mut() => None,
        () = deadline.as_mut() => None,
    };
    match outcome {
        Some(InHub::PeerGone) => {
            membership.leave();
            // The hub lets go of the socket before it closes.
            let _ = membership.handed_back().await;
            InHub::PeerGone
        }
        Some(handed_back) => handed_back,
        None => {
            membership.leave();
            InHub::Ending(membership.handed_back().await)
        }
    }
}

/// `bytes` as one HTTP/1.1 chunk.
async fn write_chunk(socket: &SharedSocket, bytes: &Bytes) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut size = [0u8; 18];
    let size = chunk_size_line(bytes.len(), &mut size);
    socket.write_all(&[size, bytes, b"\r\n"]).await
}
