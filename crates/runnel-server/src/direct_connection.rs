//! Requests served without hyper (see [`crate::connection`] for which):
//! the application answers them as usual, and this module writes the
//! response head and the body straight to the socket, each body frame as
//! one HTTP chunk when the length is not known. It holds no buffer between
//! requests or between events, only the response body and the socket.
//!
//! An SSE response says `Connection: close` and the connection ends with
//! the event stream (SSE clients reconnect by offset anyway). A peer that
//! closes is noticed while the stream is idle; the server's shutdown ends
//! the stream cleanly. Other responses keep the connection for the next
//! request unless the client asked to close it.

use std::future::Future;
use std::io::{self, IoSlice, Write};
use std::time::SystemTime;

use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::{header, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// Serves the SSE `response` on `io` until it ends, the peer goes or
/// `shutdown` turns true, then closes the connection. `common` holds
/// header lines every response gets.
pub async fn serve<I>(
    mut io: I,
    response: Response,
    mut shutdown: watch::Receiver<bool>,
    common: &[u8],
) -> io::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let (parts, body) = response.into_parts();
    let framing = Framing::of(parts.status, axum::body::HttpBody::size_hint(&body).exact());
    let head = render_head(&parts, framing, true, common);
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
        // The body first: while events flow, the probe and the shutdown
        // signal are not polled again for each one.
        let frame = tokio::select! {
            biased;
            frame = body.frame() => frame,
            read = io.read(&mut probe) => match read {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => continue,
            },
            _ = &mut stopping => None,
        };
        match frame {
            None => break,
            // The body failed mid-stream: cut the connection without the
            // last chunk, so the client knows the answer is incomplete.
            Some(Err(_)) => return Ok(()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    write_framed(&mut io, &[], framing, &data).await?;
                }
            }
        }
    }
    if framing == Framing::Chunked {
        io.write_all(b"0\r\n\r\n").await?;
    }
    io.shutdown().await
}

/// What became of a connection after an answer.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterAnswer {
    /// Ready for the next request, of which these bytes already arrived.
    KeepAlive(Bytes),
    /// Closed: asked for, the peer went, or the answer was cut short.
    Closed,
}

/// What the application answered.
pub enum Answer {
    Response(Response),
    /// A bodiless answer (`204`, or another status with an empty body)
    /// whose status line and own header lines are already rendered, from
    /// [`start_head`]: the append path answers so, without a header map.
    Rendered {
        status: StatusCode,
        head: Vec<u8>,
    },
}

/// Sends the answer `answering` makes to a request whose body, if it had
/// one, was read whole; with the header lines in `common` added to the
/// answer's own, and no body when `head_only` (a `HEAD` request).
///
/// While the application works on the answer (a long-poll can wait for
/// many seconds) the socket is watched: a peer that closes drops the
/// request at once, as hyper does, and bytes of a next request are kept
/// for it.
pub async fn answer<I, Answering>(
    io: &mut I,
    answering: Answering,
    head_only: bool,
    keep_alive: bool,
    common: &[u8],
) -> io::Result<AfterAnswer>
where
    I: AsyncRead + AsyncWrite + Unpin,
    Answering: Future<Output = Answer>,
{
    let mut received = BytesMut::new();
    let answer = {
        let mut answering = std::pin::pin!(answering);
        loop {
            tokio::select! {
                answer = &mut answering => break answer,
                read = io.read_buf(&mut received), if received.len() < MAX_EARLY_BYTES => {
                    match read {
                        Ok(0) | Err(_) => return Ok(AfterAnswer::Closed),
                        Ok(_) => continue,
                    }
                }
            }
        }
    };
    let response = match answer {
        Answer::Response(response) => response,
        Answer::Rendered { status, head } => {
            let framing = Framing::of(status, Some(0));
            io.write_all(&finish_head(head, framing, !keep_alive, false, common))
                .await?;
            if !keep_alive {
                io.shutdown().await?;
                return Ok(AfterAnswer::Closed);
            }
            return Ok(AfterAnswer::KeepAlive(received.freeze()));
        }
    };
    let (parts, body) = response.into_parts();
    let framing = Framing::of(parts.status, axum::body::HttpBody::size_hint(&body).exact());
    // Sent with the first body bytes, in one `writev`.
    let mut head = Some(render_head(&parts, framing, !keep_alive, common));
    drop(parts);
    let mut sent = 0u64;
    if !head_only {
        let mut body = std::pin::pin!(body);
        // No reads while the body goes out: the client may already be
        // sending its next request. A client that stops reading is cut
        // off by the listener's write-stall timeout.
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                // Cut short: the client sees an incomplete answer.
                if let Some(head) = head.take() {
                    io.write_all(&head).await?;
                }
                io.shutdown().await?;
                return Ok(AfterAnswer::Closed);
            };
            if let Ok(data) = frame.into_data() {
                if !data.is_empty() {
                    let head = head.take().unwrap_or_default();
                    write_framed(io, &head, framing, &data).await?;
                    sent += data.len() as u64;
                }
            }
        }
    }
    if let Some(head) = head.take() {
        io.write_all(&head).await?;
    }
    if framing == Framing::Chunked && !head_only {
        io.write_all(b"0\r\n\r\n").await?;
    }
    // A body that did not match its announced length leaves the client
    // unable to tell where the next answer starts: close instead.
    let length_kept = head_only || !matches!(framing, Framing::Length(len) if len != sent);
    if !keep_alive || !length_kept {
        io.shutdown().await?;
        return Ok(AfterAnswer::Closed);
    }
    Ok(AfterAnswer::KeepAlive(received.freeze()))
}

/// Most bytes of a next request read while an answer is prepared; past
/// them the peer is no longer watched until the answer is sent.
const MAX_EARLY_BYTES: usize = 8192;

/// Writes `head` (possibly empty) and then `data` framed per `framing`, in
/// as few `writev` calls as the socket allows and without copying.
async fn write_framed<W: AsyncWrite + Unpin>(
    io: &mut W,
    head: &[u8],
    framing: Framing,
    data: &[u8],
) -> io::Result<()> {
    let mut size_line = [0u8; 18];
    let (size_line, data, end): (&[u8], &[u8], &[u8]) = match framing {
        Framing::Chunked if !data.is_empty() => {
            (chunk_size_line(data.len(), &mut size_line), data, b"\r\n")
        }
        Framing::Length(_) => (&[], data, &[]),
        Framing::Chunked | Framing::None => (&[], &[], &[]),
    };
    // A small answer or event goes out as one buffer: a plain `send` costs
    // the kernel less than a `writev` (no file-position lock, no iovec
    // import), and an SSE event is written once per reader.
    let total = head.len() + size_line.len() + data.len() + end.len();
    if total <= SMALL_WRITE_BYTES {
        return WriteSmall {
            io,
            parts: [head, size_line, data, end],
            written: 0,
        }
        .await;
    }
    let mut slices = [
        IoSlice::new(head),
        IoSlice::new(size_line),
        IoSlice::new(data),
        IoSlice::new(end),
    ];
    let mut remaining = &mut slices[..];
    while remaining.iter().any(|slice| !slice.is_empty()) {
        let written = io.write_vectored(remaining).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut remaining, written);
    }
    Ok(())
}

/// Writes up to this long are copied into one buffer (see [`write_framed`]).
const SMALL_WRITE_BYTES: usize = 1024;

/// Writes the concatenation of `parts` (at most [`SMALL_WRITE_BYTES`]) as
/// one buffer per `write`. The buffer is made on the stack of each poll
/// from what is left, never kept in the future: a connection waiting to
/// write holds no copy.
struct WriteSmall<'a, W> {
    io: &'a mut W,
    parts: [&'a [u8]; 4],
    written: usize,
}

impl<W: AsyncWrite + Unpin> std::future::Future for WriteSmall<'_, W> {
    type Output = io::Result<()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        let mut buf = [0u8; SMALL_WRITE_BYTES];
        let mut len = 0;
        // What is left after the bytes already written.
        let mut skip = this.written;
        for part in this.parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            let rest = &part[skip..];
            skip = 0;
            buf[len..len + rest.len()].copy_from_slice(rest);
            len += rest.len();
        }
        let mut at = 0;
        while at < len {
            match std::pin::Pin::new(&mut *this.io).poll_write(cx, &buf[at..len]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    at += n;
                    this.written += n;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
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

/// Status line and headers, with the `common` lines, `Date`, the framing
/// header and, when `close`, `Connection: close`.
pub(crate) fn render_head(
    parts: &http::response::Parts,
    framing: Framing,
    close: bool,
    common: &[u8],
) -> Vec<u8> {
    let mut out = start_head(parts.status);
    for (name, value) in &parts.headers {
        if matches!(
            *name,
            header::CONNECTION | header::TRANSFER_ENCODING | header::CONTENT_LENGTH
        ) {
            continue;
        }
        push_header(&mut out, name.as_str(), value.as_bytes());
    }
    let dated = parts.headers.contains_key(header::DATE);
    finish_head(out, framing, close, dated, common)
}

/// A response head's status line, in a buffer with room for the headers.
pub fn start_head(status: StatusCode) -> Vec<u8> {
    // Room for a response's own headers and the common ones (about 500
    // bytes), so that the head is not reallocated as it grows.
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// One header line.
pub fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Ends a head: the `common` lines, `Date` unless `dated` (the head has
/// one), the framing header, `Connection: close` when `close`, the blank
/// line.
fn finish_head(
    mut out: Vec<u8>,
    framing: Framing,
    close: bool,
    dated: bool,
    common: &[u8],
) -> Vec<u8> {
    out.extend_from_slice(common);
    if !dated {
        out.extend_from_slice(b"date: ");
        push_date(&mut out);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    match framing {
        Framing::None => {}
        Framing::Length(len) => {
            let _ = write!(out, "content-length: {len}\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The current time as an HTTP date, formatted once a second per thread.
fn push_date(out: &mut Vec<u8>) {
    thread_local! {
        static FORMATTED: std::cell::RefCell<(u64, String)> = const {
            std::cell::RefCell::new((0, String::new()))
        };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    FORMATTED.with(|formatted| {
        let mut formatted = formatted.borrow_mut();
        if formatted.0 != second || formatted.1.is_empty() {
            *formatted = (second, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(formatted.1.as_bytes());
    });
}

/// `{len:x}\r\n` into `buf`, without allocating.
pub(crate) fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
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
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use futures::StreamExt;
    use http::Request;
    use std::convert::Infallible;
    use tower::ServiceExt;

    /// Answers `request` with `app` as the connection loop does.
    async fn answer_with<I: AsyncRead + AsyncWrite + Unpin>(
        io: &mut I,
        app: Router,
        request: Request<Body>,
        keep_alive: bool,
    ) -> io::Result<AfterAnswer> {
        let head_only = request.method() == http::Method::HEAD;
        let answering = async move { Answer::Response(with(app)(request).await) };
        super::answer(io, answering, head_only, keep_alive, b"").await
    }

    /// A test application answering as `app` routes.
    fn with(
        app: Router,
    ) -> impl FnOnce(Request<Body>) -> futures::future::BoxFuture<'static, Response> {
        move |request| {
            Box::pin(async move {
                match app.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            })
        }
    }

    #[test]
    fn small_writes_survive_partial_writes_and_waits() {
        /// Takes at most 3 bytes a write, and says "not now" every other
        /// time (waking the writer at once).
        struct Trickle {
            got: Vec<u8>,
            turn: usize,
        }
        impl AsyncWrite for Trickle {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.turn += 1;
                if self.turn.is_multiple_of(2) {
                    cx.waker().wake_by_ref();
                    return std::task::Poll::Pending;
                }
                let n = buf.len().min(3);
                self.got.extend_from_slice(&buf[..n]);
                std::task::Poll::Ready(Ok(n))
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut io = Trickle {
            got: Vec::new(),
            turn: 0,
        };
        runtime
            .block_on(write_framed(
                &mut io,
                b"HEAD ",
                Framing::Chunked,
                b"event body",
            ))
            .unwrap();
        assert_eq!(io.got, b"HEAD a\r\nevent body\r\n");
        // Too long for one buffer: the vectored path, same bytes.
        let long = vec![b'x'; SMALL_WRITE_BYTES];
        io.got.clear();
        runtime
            .block_on(write_framed(&mut io, b"", Framing::Chunked, &long))
            .unwrap();
        assert_eq!(io.got.len(), long.len() + 4 + 2 + 1);
        assert!(io.got.starts_with(b"400\r\nxx"));
    }

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

    /// Everything an SSE-style `serve` of `GET /x` writes.
    async fn served(app: Router) -> String {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop, stop) = watch::channel(false);
        let request = Request::get("/x").body(Body::empty()).unwrap();
        serve(server, with(app)(request).await, stop, b"")
            .await
            .unwrap();
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
        let all = served(app).await;
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
        let all = served(app).await;
        assert!(all.starts_with("HTTP/1.1 404 Not Found\r\n"), "{all}");
        assert!(all.contains("\r\ncontent-length: 14\r\n"), "{all}");
        assert!(all.ends_with("\r\n\r\nno such stream"), "{all}");
    }

    /// Answers `requests` in turn on one connection as the accept loop
    /// does, then returns all the client received and whether the
    /// connection stayed open for more.
    async fn answered(app: Router, requests: Vec<(Request<Body>, bool)>) -> (String, bool) {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let mut open = true;
        for (request, keep_alive) in requests {
            let after = answer_with(&mut server, app.clone(), request, keep_alive)
                .await
                .unwrap();
            open = after == AfterAnswer::KeepAlive(Bytes::new());
        }
        drop(server);
        let mut all = String::new();
        client.read_to_string(&mut all).await.unwrap();
        (all, open)
    }

    fn plain_app() -> Router {
        Router::new()
            .route("/sized", get(|| async { "hello" }))
            .route(
                "/streamed",
                get(|| async {
                    let parts = futures::stream::iter(["ab", "", "cde"])
                        .map(|s| Ok::<_, Infallible>(Bytes::from_static(s.as_bytes())));
                    Body::from_stream(parts)
                }),
            )
            .route("/empty", get(|| async { StatusCode::NO_CONTENT }))
    }

    #[tokio::test]
    async fn kept_alive_answers_follow_each_other_without_closing() {
        let requests = ["/sized", "/streamed", "/empty", "/sized"]
            .into_iter()
            .map(|path| (Request::get(path).body(Body::empty()).unwrap(), true))
            .collect();
        let (all, open) = answered(plain_app(), requests).await;
        assert!(open);
        assert!(!all.contains("connection: close"), "{all}");
        let answers: Vec<&str> = all.split("HTTP/1.1 ").skip(1).collect();
        assert_eq!(answers.len(), 4, "{all}");
        assert!(answers[0].starts_with("200 OK\r\n"), "{all}");
        assert!(answers[0].contains("content-length: 5\r\n"), "{all}");
        assert!(answers[0].ends_with("\r\n\r\nhello"), "{all}");
        assert!(
            answers[1].contains("transfer-encoding: chunked\r\n"),
            "{all}"
        );
        assert!(
            answers[1].ends_with("\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"),
            "{all}"
        );
        assert!(answers[2].starts_with("204 No Content\r\n"), "{all}");
        assert!(!answers[2].contains("content-length"), "{all}");
        assert!(answers[2].ends_with("\r\n\r\n"), "{all}");
        assert!(answers[3].ends_with("\r\n\r\nhello"), "{all}");
    }

    #[tokio::test]
    async fn rendered_answers_are_finished_with_the_common_lines_and_framing() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        for (status, keep_alive) in [
            (StatusCode::NO_CONTENT, true),
            (StatusCode::OK, true),
            (StatusCode::NO_CONTENT, false),
        ] {
            let mut head = start_head(status);
            push_header(&mut head, "stream-next-offset", b"7");
            let answering = async move { Answer::Rendered { status, head } };
            let after = super::answer(&mut server, answering, false, keep_alive, b"common: 1\r\n")
                .await
                .unwrap();
            let expected = match keep_alive {
                true => AfterAnswer::KeepAlive(Bytes::new()),
                false => AfterAnswer::Closed,
            };
            assert_eq!(after, expected);
        }
        drop(server);
        let mut all = String::new();
        client.read_to_string(&mut all).await.unwrap();
        let answers: Vec<&str> = all.split("HTTP/1.1 ").skip(1).collect();
        assert_eq!(answers.len(), 3, "{all}");
        for answer in &answers {
            assert!(
                answer.contains("\r\nstream-next-offset: 7\r\ncommon: 1\r\ndate: "),
                "{answer}"
            );
            assert!(answer.ends_with("\r\n\r\n"), "{answer}");
        }
        assert!(answers[0].starts_with("204 No Content\r\n"), "{all}");
        assert!(!answers[0].contains("content-length"), "{all}");
        // An empty body that is not a 204 still says so.
        assert!(answers[1].starts_with("200 OK\r\n"), "{all}");
        assert!(answers[1].contains("\r\ncontent-length: 0\r\n"), "{all}");
        assert!(!answers[1].contains("connection: close"), "{all}");
        assert!(answers[2].contains("\r\nconnection: close\r\n"), "{all}");
    }

    #[tokio::test]
    async fn a_head_answer_has_the_length_but_no_body() {
        let request = Request::head("/sized").body(Body::empty()).unwrap();
        let (all, open) = answered(plain_app(), vec![(request, true)]).await;
        assert!(open);
        assert!(all.starts_with("HTTP/1.1 200 OK\r\n"), "{all}");
        assert!(all.ends_with("\r\n\r\n"), "{all}");
        assert!(!all.contains("hello"), "{all}");
    }

    #[tokio::test]
    async fn a_client_that_asks_to_close_gets_its_answer_and_the_close() {
        let request = Request::get("/sized").body(Body::empty()).unwrap();
        let (all, open) = answered(plain_app(), vec![(request, false)]).await;
        assert!(!open);
        assert!(all.contains("\r\nconnection: close\r\n"), "{all}");
        assert!(all.ends_with("\r\n\r\nhello"), "{all}");
    }

    #[tokio::test]
    async fn a_peer_that_goes_while_its_answer_is_prepared_is_let_go() {
        let app = Router::new().route(
            "/wait",
            get(|| async {
                futures::future::pending::<()>().await;
                "never"
            }),
        );
        let (client, mut server) = tokio::io::duplex(1 << 16);
        drop(client);
        let request = Request::get("/wait").body(Body::empty()).unwrap();
        let after = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            answer_with(&mut server, app, request, true),
        )
        .await
        .expect("a request whose peer is gone is dropped")
        .unwrap();
        assert_eq!(after, AfterAnswer::Closed);
    }

    #[tokio::test]
    async fn bytes_of_the_next_request_sent_early_are_kept_for_it() {
        let app = Router::new().route(
            "/slow",
            get(|| async {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                "done"
            }),
        );
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let answering = tokio::spawn(async move {
            let request = Request::get("/slow").body(Body::empty()).unwrap();
            answer_with(&mut server, app, request, true).await.unwrap()
        });
        let next = b"GET /next HTTP/1.1\r\n\r\n";
        client.write_all(next).await.unwrap();
        let after = answering.await.unwrap();
        assert_eq!(after, AfterAnswer::KeepAlive(Bytes::from_static(next)));
        let mut answer = vec![0u8; 17];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200 OK\r\n");
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
        let served =
            tokio::spawn(async move { serve(server, with(app)(request).await, stop, b"").await });
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
        let served =
            tokio::spawn(async move { serve(server, with(app)(request).await, stop, b"").await });
        let mut head = [0u8; 12];
        client.read_exact(&mut head).await.unwrap();
        stop_tx.send(true).unwrap();
        served.await.unwrap().unwrap();
        let mut rest = String::new();
        client.read_to_string(&mut rest).await.unwrap();
        assert!(rest.ends_with("\r\n\r\n0\r\n\r\n"), "{rest}");
    }
}
