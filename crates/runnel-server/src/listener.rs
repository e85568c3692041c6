//! The accept loop's and the transport's policy: at most `max_connections`
//! open connections (past that, new connections wait in the kernel's
//! backlog until one closes), `TCP_NODELAY` on every socket, a back-off
//! instead of a spin when accept fails for lack of file descriptors
//! (`EMFILE`), and a write-stall timeout: a connection whose peer accepts
//! no bytes for that long is closed, so a reader that stopped reading
//! holds no slot and no buffers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

pub struct LimitedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    write_stall_timeout: Duration,
}

impl LimitedListener {
    pub fn new(inner: TcpListener, max_connections: usize, write_stall_timeout: Duration) -> Self {
        LimitedListener {
            inner,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
            write_stall_timeout,
        }
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = CountedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let permit = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        CountedStream {
                            stream,
                            _slot: permit,
                            stall_limit: self.write_stall_timeout,
                            stalled: None,
                        },
                        addr,
                    );
                }
                Err(e) if is_per_connection(&e) => continue,
                Err(e) => {
                    // EMFILE/ENFILE/ENOMEM: keep serving the connections we
                    // have and try again shortly.
                    tracing::warn!(error = %e, "accept failed; backing off");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Connections cut off because their peer accepted no bytes within the
/// stall limit (slow readers), over the process's life.
static STALLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a connection cut off as stalled by a writer of its own (the
/// fan-out path's shared sockets).
pub(crate) fn count_stall() {
    STALLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many connections were cut off as stalled, for `/metrics`.
pub fn stalled_connections() -> u64 {
    STALLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A connection that gives its slot back when dropped and fails writes
/// that stay blocked longer than its stall limit.
pub struct CountedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    stall_limit: Duration,
    /// Running while a write is blocked.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl CountedStream {
    /// Maps a write poll through the stall timer.
    fn watch_stall<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.stall_limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        STALLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "peer accepted no data within the write stall timeout",
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl crate::fan_out::IntoShared for CountedStream {
    fn into_shared(self) -> Result<crate::fan_out::SharedSocket, Self> {
        Ok(crate::fan_out::SharedSocket::new(
            self.stream,
            self.stall_limit,
            Some(self._slot),
        ))
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.watch_stall(cx, poll)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch_stall(cx, poll)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.watch_stall(cx, poll)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
