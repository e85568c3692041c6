//! What the server does with each request head on a connection: it reads
//! the head itself and serves bodiless `GET` and `HEAD` requests without
//! hyper ([`crate::direct_connection`]), an SSE read on a path of its own;
//! at the first request it does not serve (a body, HTTP/1.0, pipelined
//! bytes, anything unusual) the rest of the connection goes to hyper, with
//! the bytes already read put back in front ([`Rewind`]).
//!
//! Why: an idle SSE reader or kept-alive reader is the connection a server
//! holds most of, and hyper keeps an 8 KiB read buffer and an 8 KiB write
//! buffer for every connection for its whole life. Here a head is read
//! into a buffer that is freed once the request is built.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::headers::STREAM_PREFIX;

/// How the next request on a connection is served.
#[derive(Debug)]
pub enum NextRequest {
    /// A bodiless HTTP/1.1 `GET` of a stream with `live=sse`.
    Sse(Box<Request<Body>>),
    /// Any other bodiless HTTP/1.1 `GET` or `HEAD`; `keep_alive` is false
    /// when the client asked to close after it.
    Plain {
        request: Box<Request<Body>>,
        keep_alive: bool,
    },
    /// Anything else, including requests hyper must reject: these bytes
    /// are replayed to hyper before the socket's.
    Other(Bytes),
    /// The peer closed, failed or sent no complete head in time.
    Gone,
}

/// Largest head read here (hyper's smallest read buffer); a longer head
/// goes to hyper, which answers it.
const HEAD_LIMIT: usize = 8192;
/// Most header lines in a request served here (hyper's default limit).
const MAX_HEADERS: usize = 100;

/// Reads until the next request is known to be served here or not. Most
/// requests for hyper are decided by their first bytes.
/// `received` holds bytes of it that already arrived (while the previous
/// answer was prepared).
pub async fn read_request<I: AsyncRead + Unpin>(
    io: &mut I,
    received: Bytes,
    header_timeout: Duration,
) -> NextRequest {
    let mut buffer = BytesMut::with_capacity(1024.max(received.len()));
    buffer.extend_from_slice(&received);
    drop(received);
    let read = async {
        loop {
            if let Some(decision) = classify(&buffer) {
                return decision;
            }
            if buffer.len() >= HEAD_LIMIT {
                return NextRequest::Other(buffer.split().freeze());
            }
            buffer.reserve(1024);
            match io.read_buf(&mut buffer).await {
                Ok(0) | Err(_) if buffer.is_empty() => return NextRequest::Gone,
                // A partial head and then nothing: hyper answers it.
                Ok(0) | Err(_) => return NextRequest::Other(buffer.split().freeze()),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(header_timeout, read)
        .await
        .unwrap_or(NextRequest::Gone)
}

/// `None` while more bytes are needed to decide.
fn classify(bytes: &[u8]) -> Option<NextRequest> {
    let other = || Some(NextRequest::Other(Bytes::copy_from_slice(bytes)));
    let method = if bytes.starts_with(b"GET ") {
        Method::GET
    } else if bytes.starts_with(b"HEAD ") {
        Method::HEAD
    } else if b"GET ".starts_with(bytes) || b"HEAD ".starts_with(bytes) {
        return None;
    } else {
        return other();
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(bytes) {
        Ok(httparse::Status::Partial) => None,
        // Pipelined bytes after the head: hyper sorts those out.
        Ok(httparse::Status::Complete(len)) if len == bytes.len() => {
            let Some((request, keep_alive)) = bodiless_request(&parsed, method) else {
                return other();
            };
            let sse = request.method() == Method::GET
                && is_sse_target(request.uri().path(), request.uri().query());
            Some(if sse {
                NextRequest::Sse(Box::new(request))
            } else {
                NextRequest::Plain {
                    request: Box::new(request),
                    keep_alive,
                }
            })
        }
        Ok(httparse::Status::Complete(_)) | Err(_) => other(),
    }
}

/// A stream path whose query has `live=sse`.
fn is_sse_target(path: &str, query: Option<&str>) -> bool {
    path.starts_with(STREAM_PREFIX) && query.is_some_and(|q| q.split('&').any(|p| p == "live=sse"))
}

/// The request to hand the application and whether the connection stays
/// open after it, or `None` for what this path does not serve: HTTP/1.0,
/// a body, `Expect`, `Upgrade`, or headers the `http` types reject
/// (hyper answers those).
fn bodiless_request(
    parsed: &httparse::Request<'_, '_>,
    method: Method,
) -> Option<(Request<Body>, bool)> {
    if parsed.version != Some(1) {
        return None;
    }
    let mut request = Request::builder()
        .method(method)
        .uri(parsed.path?)
        .version(Version::HTTP_11);
    let mut keep_alive = true;
    for header in parsed.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        let empty_length = name == "content-length" && header.value.trim_ascii() == b"0";
        if !empty_length
            && matches!(
                name.as_str(),
                "content-length" | "transfer-encoding" | "expect" | "upgrade"
            )
        {
            return None;
        }
        if name == "connection"
            && header
                .value
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
        {
            keep_alive = false;
        }
        request = request.header(header.name, header.value);
    }
    Some((request.body(Body::empty()).ok()?, keep_alive))
}

/// A connection with bytes already read from it put back in front.
pub struct Rewind<I> {
    prefix: Bytes,
    inner: I,
}

impl<I> Rewind<I> {
    pub fn new(prefix: Bytes, inner: I) -> Self {
        Rewind { prefix, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            if self.prefix.is_empty() {
                // Free the head's buffer for the rest of the connection.
                self.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(bytes: &[u8]) -> Option<NextRequest> {
        classify(bytes)
    }

    const SSE: &[u8] =
        b"GET /v1/stream/a/b?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";

    #[test]
    fn an_sse_read_is_recognised_with_its_headers() {
        let Some(NextRequest::Sse(request)) = decide(SSE) else {
            panic!("not taken as SSE");
        };
        assert_eq!(request.uri(), "/v1/stream/a/b?offset=-1&live=sse");
        assert_eq!(request.headers()["accept"], "text/event-stream");
        assert_eq!(request.version(), Version::HTTP_11);
    }

    #[test]
    fn every_prefix_of_an_sse_head_waits_for_more() {
        for end in 0..SSE.len() {
            assert!(decide(&SSE[..end]).is_none(), "decided at {end} bytes");
        }
    }

    #[test]
    fn other_requests_are_decided_early_and_keep_their_bytes() {
        for (bytes, why) in [
            (&b"POST /v1/stream/a HTTP/1.1\r\n"[..], "method"),
            (b"GE", "undecided"),
            (b"HEA", "undecided"),
            (b"GXT", "not GET"),
            (b"PUT /v1/stream/a HTTP/1.1\r\n", "method"),
        ] {
            match decide(bytes) {
                Some(NextRequest::Other(kept)) => assert_eq!(&kept[..], bytes, "{why}"),
                None => assert_eq!(why, "undecided"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    #[test]
    fn plain_reads_are_served_here_and_say_whether_to_keep_the_connection() {
        for (head, method, keep_alive) in [
            (
                &b"GET /v1/stream/a?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n"[..],
                Method::GET,
                true,
            ),
            (
                b"GET /v1/stream/a?live=long-poll HTTP/1.1\r\n\r\n",
                Method::GET,
                true,
            ),
            (b"GET /health?live=sse HTTP/1.1\r\n\r\n", Method::GET, true),
            (b"HEAD /v1/stream/a HTTP/1.1\r\n\r\n", Method::HEAD, true),
            (
                b"GET /health HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n",
                Method::GET,
                false,
            ),
        ] {
            let text = String::from_utf8_lossy(head);
            for end in 0..head.len() {
                assert!(decide(&head[..end]).is_none(), "{text} decided at {end}");
            }
            let Some(NextRequest::Plain {
                request,
                keep_alive: keeps,
            }) = decide(head)
            else {
                panic!("not served here: {text}");
            };
            assert_eq!(request.method(), method, "{text}");
            assert_eq!(keeps, keep_alive, "{text}");
        }
    }

    #[test]
    fn heads_this_path_does_not_serve_go_to_hyper() {
        for head in [
            &b"GET /v1/stream/a?live=sse HTTP/1.0\r\n\r\n"[..],
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\n\r\nGET /v1/stream/a HTTP/1.1\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nbad header\r\n\r\n",
            b"HEAD /v1/stream/a HTTP/1.0\r\n\r\n",
            b"GET /v1/stream/a HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
            b"GET /v1/stream/a HTTP/1.1\r\n\r\nGET /v1/stream/a HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(decide(head), Some(NextRequest::Other(_))),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        let empty_body = b"GET /v1/stream/a?live=sse HTTP/1.1\r\ncontent-length: 0\r\n\r\n";
        assert!(matches!(decide(empty_body), Some(NextRequest::Sse(_))));
    }

    #[tokio::test]
    async fn a_rewound_connection_reads_the_prefix_first() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b" world")
            .await
            .unwrap();
        drop(client);
        let mut rewound = Rewind::new(Bytes::from_static(b"hello"), server);
        let mut all = String::new();
        rewound.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}
