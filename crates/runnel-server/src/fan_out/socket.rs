//! A plain TCP connection split for sharing: the reader's task keeps the
//! read side (only to notice the peer closing) and the write side is
//! shared with the stream's hub, which writes to it with non-blocking
//! `send`s while the reader is a member. Which of the two writes at any
//! moment is decided by membership (see [`super::hub`]), never by both.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

/// A connection whose write side the hub may borrow.
pub struct SharedSocket {
    read: OwnedReadHalf,
    write: Arc<OwnedWriteHalf>,
    stall_limit: Duration,
    /// The listener's connection slot, given back when the socket goes.
    _slot: Option<OwnedSemaphorePermit>,
}

impl SharedSocket {
    pub fn new(
        stream: TcpStream,
        stall_limit: Duration,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let (read, write) = stream.into_split();
        SharedSocket {
            read,
            write: Arc::new(write),
            stall_limit,
            _slot: slot,
        }
    }

    /// The write side, for the hub.
    pub(crate) fn writer(&self) -> Arc<OwnedWriteHalf> {
        Arc::clone(&self.write)
    }

    /// Resolves when the peer closes its side or the connection fails.
    /// Bytes the peer sends are read and dropped: an SSE client has
    /// nothing more to say on this connection.
    pub async fn closed(&self) {
        let mut probe = [0u8; 64];
        loop {
            if self.read.readable().await.is_err() {
                return;
            }
            match self.read.try_read(&mut probe) {
                Ok(0) => return,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
        }
    }

    /// Writes all of `parts`, waiting for the peer to take them; a peer
    /// that takes nothing within the stall limit fails the write (and is
    /// counted as stalled, as the listener's connections are).
    pub async fn write_all(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        let mut remaining = &mut slices[..];
        while !remaining.is_empty() {
            match self.write.try_write_vectored(remaining) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut remaining, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match tokio::time::timeout(self.stall_limit, self.write.writable()).await {
                        Ok(ready) => ready?,
                        Err(_) => {
                            crate::listener::count_stall();
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "peer accepted no data within the write stall timeout",
                            ));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Ends the write side (FIN); the connection closes when the socket
    /// is dropped.
    pub fn shutdown(self) {
        // Dropping the last handle of the write half shuts it down; the
        // hub holds none once the reader has left it.
        drop(self.write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The hub fills the socket with non-blocking sends; the reader's
    /// task then finishes with awaited writes while the peer reads slowly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_socket_the_hub_filled_is_written_on_when_the_peer_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpSocket::new_v4().unwrap();
        client.set_recv_buffer_size(4096).unwrap();
        let (client, accepted) = tokio::join!(client.connect(addr), listener.accept());
        let mut client = client.unwrap();
        let socket = SharedSocket::new(accepted.unwrap().0, Duration::from_secs(5), None);
        let writer = socket.writer();
        let block = vec![7u8; 64 * 1024];
        let mut sent = 0usize;
        loop {
            match writer.try_write(&block) {
                Ok(n) if n == block.len() => sent += n,
                Ok(n) => {
                    sent += n;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        drop(writer);
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            let mut got = 0usize;
            loop {
                let n = client.read(&mut buf).await.unwrap();
                if n == 0 {
                    return got;
                }
                got += n;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let more = vec![8u8; 1 << 20];
        socket
            .write_all(&[&more])
            .await
            .expect("the rest is written");
        socket.shutdown();
        let got = reader.await.unwrap();
        assert_eq!(got, sent + more.len());
    }
}
