//! A connection whose first request is an SSE read, served without hyper:
//! the application answers the request as usual, and this module writes
//! the response head and then each body frame straight to the socket as
//! one HTTP chunk. It holds no buffer between events, only the response
//! body (the SSE tail) and the socket.
//!
//! The response says `Connection: close` and the connection ends with the
//! event stream (SSE clients reconnect by offset anyway). A peer that
//! closes is noticed while the stream is idle; the server's shutdown ends
//! the stream cleanly.

use std::io::{self, IoSlice};
use std::time::SystemTime;

use axum::body::Body;
use axum::Router;
use http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tower::ServiceExt;

/// Serves `request` on `io` until the response ends, the peer goes or
/// `shutdown` turns true.
pub async fn serve<I: AsyncRead + AsyncWrite + Unpin>(
    mut io: I,
    app: Router,
    request: Request<Body>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let response = match app.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let framing = Framing::of(parts.status, axum::body::HttpBody::size_hint(&body).exact());
    let head = render_head(&parts, framing);
    drop(parts);
    io.write_all(&head).await?;
    drop(head);

    let mut body = std::pin::pin!(body);
    // Made once: every connection waits on the same shutdown signal, and
    // re-registering with it around every event would contend on its lock.
    let mut stopping = std::pin::pin!(shutdown.wait_for(|stop| *stop));
    // Reads only to notice the peer closing; a client has nothing more to
    // say on this connection.
    let mut probe = [0u8; 64];
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            read = io.read(&mut probe) => match read {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => continue,
            },
            _ = &mut stopping => None,
        };
        let data = match frame {
            None => break,
            // The body failed mid-stream: cut the connection without the
            // last chunk, so the client knows the answer is incomplete.
            Some(Err(_)) => return Ok(()),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => continue,
            },
        };
        match framing {
            Framing::Chunked => write_chunk(&mut io, &data).await?,
            Framing::Length(_) => io.write_all(&data).await?,
            Framing::None => {}
        }
    }
    if framing == Framing::Chunked {
        io.write_all(b"0\r\n\r\n").await?;
    }
    io.shutdown().await
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body allowed (204, 304).
    None,
    Length(u64),
    Chunked,
}

impl Framing {
    fn of(status: StatusCode, exact_len: Option<u64>) -> Framing {
        if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            Framing::None
        } else if let Some(len) = exact_len {
            Framing::Length(len)
        } else {
            Framing::Chunked
        }
    }
}

/// Status line and headers, with `Date`, `Connection: close` and the
/// framing header.
fn render_head(parts: &http::response::Parts, framing: Framing) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if matches!(
            *name,
            header::CONNECTION | header::TRANSFER_ENCODING | header::CONTENT_LENGTH
        ) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(header::DATE) {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n");
    match framing {
        Framing::None => {}
        Framing::Length(len) => {
            out.extend_from_slice(format!("content-length: {len}\r\n").as_bytes())
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// One chunk (size line, data, CRLF) in as few `writev` calls as the
/// socket allows, without copying the data.
async fn write_chunk<W: AsyncWrite + Unpin>(io: &mut W, data: &[u8]) -> io::Result<()> {
    let mut size_line = [0u8; 18];
    let size_line = chunk_size_line(data.len(), &mut size_line);
    let mut slices = [
        IoSlice::new(size_line),
        IoSlice::new(data),
        IoSlice::new(b"\r\n"),
    ];
    let mut remaining = &mut slices[..];
    while !remaining.is_empty() {
        let written = io.write_vectored(remaining).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut remaining, written);
    }
    Ok(())
}

/// `{len:x}\r\n` into `buf`, without allocating.
fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut count = 0;
    loop {
        digits[count] = HEX[n & 0xf];
        count += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for i in 0..count {
        buf[i] = digits[count - 1 - i];
    }
    buf[count] = b'\r';
    buf[count + 1] = b'\n';
    &buf[..count + 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use bytes::Bytes;
    use futures::StreamExt;
    use std::convert::Infallible;

    #[test]
    fn chunk_size_lines_are_lowercase_hex() {
        let mut buf = [0u8; 18];
        assert_eq!(chunk_size_line(0, &mut buf), b"0\r\n");
        assert_eq!(chunk_size_line(255, &mut buf), b"ff\r\n");
        assert_eq!(chunk_size_line(4096, &mut buf), b"1000\r\n");
        assert_eq!(
            chunk_size_line(usize::MAX, &mut buf),
            b"ffffffffffffffff\r\n"
        );
    }

    async fn answer(app: Router) -> String {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop, stop) = watch::channel(false);
        let request = Request::get("/x").body(Body::empty()).unwrap();
        serve(server, app, request, stop).await.unwrap();
        let mut client = client;
        let mut all = String::new();
        client.read_to_string(&mut all).await.unwrap();
        all
    }

    #[tokio::test]
    async fn a_streamed_body_is_sent_as_chunks_and_terminated() {
        let app = Router::new().route(
            "/x",
            get(|| async {
                let events = futures::stream::iter(["event: a\n\n", "", "event: bb\n\n"])
                    .map(|s| Ok::<_, Infallible>(Bytes::from_static(s.as_bytes())));
                Body::from_stream(events)
            }),
        );
        let all = answer(app).await;
        let (head, body) = all.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains("\r\ndate: "), "{head}");
        assert!(!head.contains("content-length"), "{head}");
        assert_eq!(body, "a\r\nevent: a\n\n\r\nb\r\nevent: bb\n\n\r\n0\r\n\r\n");
    }

    #[tokio::test]
    async fn a_sized_body_is_sent_with_its_length() {
        let app = Router::new().route(
            "/x",
            get(|| async { (StatusCode::NOT_FOUND, "no such stream") }),
        );
        let all = answer(app).await;
        assert!(all.starts_with("HTTP/1.1 404 Not Found\r\n"), "{all}");
        assert!(all.contains("\r\ncontent-length: 14\r\n"), "{all}");
        assert!(all.ends_with("\r\n\r\nno such stream"), "{all}");
    }

    /// An app whose response body never yields: an idle SSE stream.
    fn endless_stream() -> Router {
        Router::new().route(
            "/x",
            get(|| async {
                Body::from_stream(futures::stream::pending::<Result<Bytes, Infallible>>())
            }),
        )
    }

    #[tokio::test]
    async fn a_peer_closing_ends_an_idle_stream() {
        let app = endless_stream();
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop, stop) = watch::channel(false);
        let request = Request::get("/x").body(Body::empty()).unwrap();
        let served = tokio::spawn(serve(server, app, request, stop));
        drop(client);
        tokio::time::timeout(std::time::Duration::from_secs(5), served)
            .await
            .expect("the connection ends when its peer goes")
            .unwrap()
            .ok();
    }

    #[tokio::test]
    async fn shutdown_ends_the_stream_with_its_last_chunk() {
        let app = endless_stream();
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (stop_tx, stop) = watch::channel(false);
        let request = Request::get("/x").body(Body::empty()).unwrap();
        let served = tokio::spawn(serve(server, app, request, stop));
        let mut head = [0u8; 12];
        client.read_exact(&mut head).await.unwrap();
        stop_tx.send(true).unwrap();
        served.await.unwrap().unwrap();
        let mut rest = String::new();
        client.read_to_string(&mut rest).await.unwrap();
        assert!(rest.ends_with("\r\n\r\n0\r\n\r\n"), "{rest}");
    }
}
