//! The direct path's request reader: what the server does with each
//! request on a connection. The server reads the request itself and
//! serves ordinary HTTP/1.1 requests without hyper (`runnel-server`'s
//! `direct_connection`), an SSE read on a path of its own. A
//! request qualifies when it has no body or a `Content-Length` body of at
//! most [`DIRECT_BODY_LIMIT`] bytes that arrived whole. At the first
//! request it does not serve (a chunked or larger body, `Expect`,
//! HTTP/1.0, pipelined bytes, anything unusual) the rest of the connection
//! goes to hyper, with the bytes already read put back in front
//! ([`Rewind`]).
//!
//! Why: an idle SSE reader or kept-alive reader is the connection a server
//! holds most of, and hyper keeps an 8 KiB read buffer and an 8 KiB write
//! buffer for every connection for its whole life. Here a request is read
//! into a buffer that is freed once the request is answered, and none is
//! held while the connection waits for its next request. And an append
//! is a small request answered by a small response: a plain append is
//! answered from the request's bytes ([`RawRequest`]) with a head written
//! by hand, without an `http::Request` or a header map
//! (`handlers::append`), and its path through the server is a good part
//! shorter than through hyper.
//!
//! Everything here reads bytes a client sent, before any check: nothing
//! may panic (fuzzed: `fuzz/fuzz_targets/http_head.rs`). Requests come
//! out as `http::Request<()>` heads; the server gives them its body type.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::headers::{Lookup, STREAM_PREFIX};

/// How the next request on a connection is served.
#[derive(Debug)]
pub enum NextRequest {
    /// A bodiless HTTP/1.1 `GET` of a stream with `live=sse`.
    Sse(Box<Request<()>>),
    /// Any other HTTP/1.1 request this path serves, its body (if any)
    /// complete; `keep_alive` is false when the client asked to close
    /// after it.
    Plain {
        request: Box<RawRequest>,
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
/// Largest body read here; larger bodies go to hyper, which streams them.
pub const DIRECT_BODY_LIMIT: usize = 64 << 10;
/// Most header lines in a request served here (hyper's default limit).
const MAX_HEADERS: usize = 100;

/// Reads until the next request is known to be served here or not. Most
/// requests for hyper are decided by their head.
/// `received` holds bytes of it that already arrived (while the previous
/// answer was prepared). The caller bounds how long this may take.
pub async fn read_request<I: AsyncRead + Unpin>(io: &mut I, received: Bytes) -> NextRequest {
    let mut buffer = if received.is_empty() {
        match first_bytes(io).await {
            Some(buffer) => buffer,
            None => return NextRequest::Gone,
        }
    } else {
        let mut buffer = BytesMut::with_capacity(1024.max(received.len()));
        buffer.extend_from_slice(&received);
        buffer
    };
    drop(received);
    loop {
        let wanted = match classify(&mut buffer) {
            Classified::Decided(decision) => return decision,
            Classified::Needs(total) => total,
        };
        buffer.reserve(wanted.saturating_sub(buffer.len()).max(1024));
        match io.read_buf(&mut buffer).await {
            Ok(0) | Err(_) if buffer.is_empty() => return NextRequest::Gone,
            // A partial request and then nothing: hyper answers it.
            Ok(0) | Err(_) => return NextRequest::Other(buffer.split().freeze()),
            Ok(_) => {}
        }
    }
}

/// How much of a request's first bytes are read at once into the stack.
const FIRST_READ: usize = 8192;

/// Waits for the first bytes of a connection's next request, holding no
/// buffer while it waits: a kept-alive connection waits here between
/// requests, most of its life. They are read into the stack and copied
/// into a buffer sized for them. `None`: the peer closed or failed.
async fn first_bytes<I: AsyncRead + Unpin>(io: &mut I) -> Option<BytesMut> {
    std::future::poll_fn(|cx| {
        // Lives for this poll only, never in the future's state.
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); FIRST_READ];
        let mut read = ReadBuf::uninit(&mut stack);
        match Pin::new(&mut *io).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(None),
            Poll::Ready(Ok(())) if read.filled().is_empty() => Poll::Ready(None),
            Poll::Ready(Ok(())) => {
                let mut buffer = BytesMut::with_capacity(1024.max(read.filled().len()));
                buffer.extend_from_slice(read.filled());
                Poll::Ready(Some(buffer))
            }
        }
    })
    .await
}

/// What the bytes read so far decide.
#[derive(Debug)]
enum Classified {
    Decided(NextRequest),
    /// More bytes are needed, at least this many in all.
    Needs(usize),
}

/// Decides what `bytes` (the start of a request) are, taking them when
/// the decision is final.
fn classify(bytes: &mut BytesMut) -> Classified {
    let other =
        |bytes: &mut BytesMut| Classified::Decided(NextRequest::Other(bytes.split().freeze()));
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() < HEAD_LIMIT => {
            return Classified::Needs(bytes.len() + 1)
        }
        Ok(httparse::Status::Partial) | Err(_) => return other(bytes),
    };
    let Some(head) = Head::of(&parsed) else {
        return other(bytes);
    };
    let total = head_len + head.body_len;
    if bytes.len() < total {
        return Classified::Needs(total);
    }
    if bytes.len() > total {
        // Pipelined bytes after the request: hyper sorts those out.
        return other(bytes);
    }
    // Where the head's parts lie, so that the request can take them as
    // slices of the buffer once it is frozen, without parsing it again.
    let spans = HeadSpans::of(&parsed, bytes);
    let whole = bytes.split().freeze();
    let Some(spans) = spans else {
        return Classified::Decided(NextRequest::Other(whole));
    };
    let raw = RawRequest {
        whole,
        spans,
        method: head.method,
        head_len,
    };
    if head.sse {
        return Classified::Decided(match raw.into_parts() {
            Ok((request, _)) => NextRequest::Sse(Box::new(request)),
            Err(whole) => NextRequest::Other(whole),
        });
    }
    Classified::Decided(NextRequest::Plain {
        request: Box::new(raw),
        keep_alive: head.keep_alive,
    })
}

/// What the head of a request served here says.
struct Head {
    method: Method,
    body_len: usize,
    keep_alive: bool,
    sse: bool,
}

impl Head {
    /// `None` for what this path does not serve: HTTP/1.0, a chunked or
    /// large body, a body on `GET` or `HEAD`, `Expect`, `Upgrade`, several
    /// or malformed lengths, a method the `http` types reject.
    fn of(parsed: &httparse::Request<'_, '_>) -> Option<Head> {
        if parsed.version != Some(1) {
            return None;
        }
        let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
        let mut body_len = None;
        let mut keep_alive = true;
        let mut hosts = 0;
        for header in parsed.headers.iter() {
            let name = header.name.as_bytes();
            if name.eq_ignore_ascii_case(b"host") {
                hosts += 1;
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let len = std::str::from_utf8(header.value.trim_ascii()).ok()?;
                if body_len.is_some() || !len.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                body_len = Some(len.parse::<usize>().ok()?);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding")
                || name.eq_ignore_ascii_case(b"expect")
                || name.eq_ignore_ascii_case(b"upgrade")
            {
                return None;
            } else if name.eq_ignore_ascii_case(b"connection")
                && header
                    .value
                    .split(|b| *b == b',')
                    .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
            {
                keep_alive = false;
            }
        }
        // Without exactly one Host the request is refused, by the general
        // path (`routes::respond`), which says why.
        if hosts != 1 {
            return None;
        }
        let body_len = body_len.unwrap_or(0);
        let bodiless = matches!(method, Method::GET | Method::HEAD);
        if body_len > DIRECT_BODY_LIMIT || (bodiless && body_len > 0) {
            return None;
        }
        let sse = method == Method::GET && parsed.path.is_some_and(is_sse_target);
        Some(Head {
            method,
            body_len,
            keep_alive,
            sse,
        })
    }
}

/// A request target of a stream path whose query has `live=sse`. The
/// query is what the `http` types will see: they cut off a fragment, so
/// a `?` after a `#` starts no query (found by fuzzing: such a target was
/// taken for an SSE read that the request then was not).
fn is_sse_target(target: &str) -> bool {
    let unfragmented = target.split('#').next().unwrap_or_default();
    unfragmented.split_once('?').is_some_and(|(path, query)| {
        path.starts_with(STREAM_PREFIX) && query.split('&').any(|p| p == "live=sse")
    })
}

/// A whole request as it arrived: its bytes and where its parts lie.
/// It is made into an `http::Request` only if the application needs one;
/// the append path reads what it needs straight from the bytes.
#[derive(Debug)]
pub struct RawRequest {
    whole: Bytes,
    spans: HeadSpans,
    method: Method,
    head_len: usize,
}

impl RawRequest {
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The whole request, head and body, as it arrived.
    pub fn whole(&self) -> &[u8] {
        &self.whole
    }

    /// The request target (path and query) as it was sent.
    pub fn target(&self) -> &str {
        // httparse accepts only visible ASCII in a request target.
        std::str::from_utf8(&self.whole[self.spans.target.clone()]).unwrap_or("")
    }

    /// The request target's bytes, sharing the request's memory.
    pub fn target_bytes(&self) -> Bytes {
        self.whole.slice(self.spans.target.clone())
    }

    /// The first value of the header `name` (in any case), as it was sent.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.spans.headers.iter().find_map(|(n, v)| {
            // Lengths first: most names differ in length.
            (n.len() == name.len() && self.whole[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
                .then(|| &self.whole[v.clone()])
        })
    }

    /// The body, sharing the request's memory.
    pub fn body(&self) -> Bytes {
        self.whole.slice(self.head_len..)
    }

    /// The request's head as the application's handlers take it, and its
    /// body (empty without one); or, when the `http` types reject one of
    /// its parts, its bytes for hyper to answer.
    pub fn into_parts(self) -> Result<(Request<()>, Bytes), Bytes> {
        let Some(request) = build_request(&self.spans, self.method, &self.whole) else {
            return Err(self.whole);
        };
        Ok((request, self.whole.slice(self.head_len..)))
    }
}

impl Lookup for RawRequest {
    fn value(&self, name: &http::HeaderName) -> Option<&[u8]> {
        self.header(name.as_str())
    }
}

/// Byte ranges of a parsed head's target and header lines within the
/// buffer it was parsed from.
#[derive(Debug)]
struct HeadSpans {
    target: Range<usize>,
    headers: Vec<(Range<usize>, Range<usize>)>,
}

impl HeadSpans {
    fn of(parsed: &httparse::Request<'_, '_>, buffer: &[u8]) -> Option<HeadSpans> {
        let within = |part: &[u8]| {
            let start = (part.as_ptr() as usize).checked_sub(buffer.as_ptr() as usize)?;
            (start + part.len() <= buffer.len()).then_some(start..start + part.len())
        };
        Some(HeadSpans {
            target: within(parsed.path?.as_bytes())?,
            headers: parsed
                .headers
                .iter()
                .map(|h| Some((within(h.name.as_bytes())?, within(h.value)?)))
                .collect::<Option<_>>()?,
        })
    }
}

/// The request to hand the application, without its body, its header
/// values slices of `buffer` (the bytes `spans` point into). `None` for
/// headers the `http` types reject (hyper answers those).
fn build_request(spans: &HeadSpans, method: Method, buffer: &Bytes) -> Option<Request<()>> {
    let mut headers = http::HeaderMap::with_capacity(spans.headers.len());
    for (name, value) in &spans.headers {
        headers.append(
            http::HeaderName::from_bytes(&buffer[name.clone()]).ok()?,
            http::HeaderValue::from_maybe_shared(buffer.slice(value.clone())).ok()?,
        );
    }
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = http::Uri::from_maybe_shared(buffer.slice(spans.target.clone())).ok()?;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some(request)
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
        let mut buffer = BytesMut::from(bytes);
        match classify(&mut buffer) {
            Classified::Decided(decision) => Some(decision),
            Classified::Needs(total) => {
                assert!(total > bytes.len(), "asks for no more bytes than it has");
                None
            }
        }
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
    fn malformed_requests_go_to_hyper_with_their_bytes() {
        for bytes in [
            &b"\x01GET / HTTP/1.1\r\nHost: x\r\n"[..],
            b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n",
            b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\nx: \x01\r\n\r\n",
        ] {
            match decide(bytes) {
                Some(NextRequest::Other(kept)) => assert_eq!(&kept[..], bytes),
                other => panic!("{}: {other:?}", String::from_utf8_lossy(bytes)),
            }
        }
    }

    const APPEND: &[u8] = b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world";

    #[test]
    fn an_append_is_served_here_once_its_whole_body_arrived() {
        for end in 0..APPEND.len() {
            assert!(decide(&APPEND[..end]).is_none(), "decided at {end} bytes");
        }
        let Some(NextRequest::Plain {
            request,
            keep_alive: true,
        }) = decide(APPEND)
        else {
            panic!("not served here");
        };
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.target(), "/v1/stream/a");
        assert_eq!(request.header("content-type"), Some(&b"text/plain"[..]));
        assert_eq!(request.header("host"), Some(&b"x"[..]), "any case matches");
        assert_eq!(request.header("stream-seq"), None);
        assert_eq!(&request.body()[..], b"hello world");
        // Made into an `http::Request` on demand, sharing the same bytes.
        let (request, body) = request.into_parts().expect("valid parts");
        assert_eq!(request.uri(), "/v1/stream/a");
        assert_eq!(request.headers()["content-type"], "text/plain");
        assert_eq!(request.headers()["host"], "x");
        assert_eq!(&body[..], b"hello world");
    }

    #[test]
    fn bodies_this_path_does_not_take_go_to_hyper() {
        let large = format!(
            "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ncontent-length: {}\r\n\r\n",
            DIRECT_BODY_LIMIT + 1
        );
        let mut pipelined = APPEND.to_vec();
        pipelined.extend_from_slice(b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n");
        for head in [
            large.as_bytes(),
            &pipelined,
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ncontent-length: 1\r\nexpect: 100-continue\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx",
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ncontent-length: +1\r\n\r\nx",
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.0\r\ncontent-length: 1\r\n\r\nx",
        ] {
            assert!(
                matches!(decide(head), Some(NextRequest::Other(kept)) if &kept[..] == head),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        let bodiless_post = b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nStream-Closed: true\r\n\r\n";
        assert!(matches!(
            decide(bodiless_post),
            Some(NextRequest::Plain { .. })
        ));
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
                b"GET /v1/stream/a?live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n",
                Method::GET,
                true,
            ),
            (
                b"GET /health?live=sse HTTP/1.1\r\nHost: x\r\n\r\n",
                Method::GET,
                true,
            ),
            (
                b"HEAD /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n",
                Method::HEAD,
                true,
            ),
            (
                b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n",
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
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\ncontent-length: 3\r\n\r\nabc",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\nexpect: 100-continue\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n",
            b"HEAD /v1/stream/a HTTP/1.0\r\n\r\n",
            b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\nupgrade: websocket\r\n\r\n",
            b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            assert!(
                matches!(decide(head), Some(NextRequest::Other(_))),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        let empty_body =
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n";
        assert!(matches!(decide(empty_body), Some(NextRequest::Sse(_))));
    }

    #[test]
    fn a_query_in_a_fragment_is_no_sse_read() {
        let head = b"GET /v1/stream/a#x?live=sse HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(matches!(decide(head), Some(NextRequest::Plain { .. })));
    }

    #[test]
    fn without_exactly_one_host_the_general_path_answers() {
        for head in [
            &b"GET /v1/stream/a HTTP/1.1\r\n\r\n"[..],
            b"GET /v1/stream/a HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\ncontent-length: 1\r\n\r\nx",
            b"GET /v1/stream/a?live=sse HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(decide(head), Some(NextRequest::Other(_))),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
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
