//! A lean SSE subscriber for the fan-out benchmark: one TCP socket, the
//! request written by hand, the response body de-chunked and split into
//! events in buffers reused for the whole connection.
//!
//! The fan-out benchmark runs its subscribers on the same two cores as the
//! server under test, so every microsecond the client spends per delivery
//! is taken from the server and shows up as latency. A general HTTP client
//! hands each chunk from its connection task to the response body through
//! a channel (two task wake-ups per delivery); this reader does one `read`
//! and a scan.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::Target;

/// Largest response head accepted.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// An open SSE response: read it with [`SseReader::next_events`].
pub struct SseReader {
    stream: TcpStream,
    /// Bytes read from the socket and not yet decoded.
    raw: Vec<u8>,
    body: BodyDecoder,
    /// De-chunked body bytes not yet split into events.
    events: Vec<u8>,
}

/// The status of a response that was not a 2xx event stream.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    Status(u16),
    BadHead(String),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

impl SseReader {
    /// Connects, sends `GET path` and reads the response head.
    pub async fn open(target: &Target, path: &str) -> Result<SseReader, OpenError> {
        let mut stream =
            tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(target.addr))
                .await
                .map_err(|_| OpenError::Io(io::ErrorKind::TimedOut.into()))??;
        stream.set_nodelay(true).ok();
        let authorization = target
            .token
            .as_ref()
            .map(|token| format!("authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n{authorization}\r\n",
            target.authority
        );
        stream.write_all(request.as_bytes()).await?;

        let mut raw = Vec::with_capacity(4096);
        loop {
            let (status, framing, head_len) = match parse_head(&raw)? {
                Some(parsed) => parsed,
                None if raw.len() > MAX_HEAD_BYTES => {
                    return Err(OpenError::BadHead("response head too large".into()))
                }
                None => {
                    if read_more(&mut stream, &mut raw).await? == 0 {
                        return Err(OpenError::BadHead("connection closed in the head".into()));
                    }
                    continue;
                }
            };
            if !(200..300).contains(&status) {
                return Err(OpenError::Status(status));
            }
            raw.drain(..head_len);
            return Ok(SseReader {
                stream,
                raw,
                body: BodyDecoder::new(framing),
                events: Vec::with_capacity(4096),
            });
        }
    }

    /// Waits for at least one complete event and calls `on_event` with each
    /// (without its blank-line terminator). `Ok(false)`: the response ended.
    pub async fn next_events(&mut self, mut on_event: impl FnMut(&[u8])) -> io::Result<bool> {
        loop {
            self.body.decode(&mut self.raw, &mut self.events)?;
            let consumed = split_events(&self.events, &mut on_event);
            if consumed > 0 {
                self.events.drain(..consumed);
                return Ok(true);
            }
            if self.body.finished() {
                return Ok(false);
            }
            if read_more(&mut self.stream, &mut self.raw).await? == 0 {
                return Ok(false);
            }
        }
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<usize> {
    if buffer.capacity() - buffer.len() < 1024 {
        buffer.reserve(4096);
    }
    stream.read_buf(buffer).await
}

/// How the response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Chunked,
    Length(u64),
    UntilClose,
}

/// `Some((status, framing, head length))` once the head is complete.
fn parse_head(raw: &[u8]) -> Result<Option<(u16, Framing, usize)>, OpenError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(OpenError::BadHead(e.to_string())),
    };
    let status = response.code.unwrap_or(0);
    let mut framing = Framing::UntilClose;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding")
            && header.value.eq_ignore_ascii_case(b"chunked")
        {
            framing = Framing::Chunked;
        } else if header.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked
        {
            let len = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| OpenError::BadHead("bad content-length".into()))?;
            framing = Framing::Length(len);
        }
    }
    Ok(Some((status, framing, head_len)))
}

/// Turns the raw body into its payload bytes, whatever the framing.
#[derive(Debug)]
struct BodyDecoder {
    framing: Framing,
    state: ChunkState,
    /// Bytes of the body still to come (`Length` framing).
    remaining: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading the hex size.
    Size(u64),
    /// Skipping chunk extensions up to the size line's `\n`.
    SizeLineEnd(u64),
    /// Inside a chunk's data.
    Data(u64),
    /// Skipping the CRLF after a chunk's data.
    DataEnd,
    /// The last chunk was read (trailers are not used by SSE servers).
    Done,
}

impl BodyDecoder {
    fn new(framing: Framing) -> BodyDecoder {
        let remaining = match framing {
            Framing::Length(len) => len,
            _ => 0,
        };
        BodyDecoder {
            framing,
            state: ChunkState::Size(0),
            remaining,
        }
    }

    fn finished(&self) -> bool {
        match self.framing {
            Framing::Chunked => self.state == ChunkState::Done,
            Framing::Length(_) => self.remaining == 0,
            Framing::UntilClose => false,
        }
    }

    /// Moves what it can from `raw` to `out`, leaving an incomplete tail in
    /// `raw`.
    fn decode(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> io::Result<()> {
        match self.framing {
            Framing::UntilClose => {
                out.extend_from_slice(raw);
                raw.clear();
            }
            Framing::Length(_) => {
                let take = raw.len().min(self.remaining as usize);
                out.extend_from_slice(&raw[..take]);
                self.remaining -= take as u64;
                raw.clear();
            }
            Framing::Chunked => {
                let used = self.decode_chunks(raw, out)?;
                raw.drain(..used);
            }
        }
        Ok(())
    }

    /// Returns how many bytes of `raw` it consumed.
    fn decode_chunks(&mut self, raw: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
        let mut at = 0;
        while at < raw.len() {
            match self.state {
                ChunkState::Size(size) => {
                    let byte = raw[at];
                    at += 1;
                    self.state = match byte {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                            let size = size
                                .checked_mul(16)
                                .and_then(|s| s.checked_add(digit))
                                .ok_or_else(|| bad_chunk("chunk size overflows"))?;
                            ChunkState::Size(size)
                        }
                        b'\n' => self.after_size_line(size),
                        b'\r' | b';' | b' ' | b'\t' => ChunkState::SizeLineEnd(size),
                        _ => return Err(bad_chunk("bad chunk size")),
                    };
                }
                ChunkState::SizeLineEnd(size) => {
                    if raw[at] == b'\n' {
                        self.state = self.after_size_line(size);
                    }
                    at += 1;
                }
                ChunkState::Data(left) => {
                    let take = (raw.len() - at).min(left as usize);
                    out.extend_from_slice(&raw[at..at + take]);
                    at += take;
                    self.state = if left == take as u64 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - take as u64)
                    };
                }
                ChunkState::DataEnd => {
                    if raw[at] == b'\n' {
                        self.state = ChunkState::Size(0);
                    }
                    at += 1;
                }
                ChunkState::Done => return Ok(raw.len()),
            }
        }
        Ok(at)
    }

    fn after_size_line(&self, size: u64) -> ChunkState {
        if size == 0 {
            ChunkState::Done
        } else {
            ChunkState::Data(size)
        }
    }
}

fn bad_chunk(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Calls `on_event` with each complete event in `buffer` (events end with a
/// blank line) and returns the bytes they took.
fn split_events(buffer: &[u8], on_event: &mut impl FnMut(&[u8])) -> usize {
    let mut start = 0;
    let mut at = 0;
    while let Some(newline) = buffer[at..].iter().position(|b| *b == b'\n') {
        let end = at + newline;
        at = end + 1;
        // A blank line ends the event (`\n` or `\r\n` line endings).
        let blank = match buffer.get(at) {
            Some(b'\n') => 1,
            Some(b'\r') if buffer.get(at + 1) == Some(&b'\n') => 2,
            _ => 0,
        };
        if blank > 0 {
            let event = &buffer[start..end];
            on_event(event.strip_suffix(b"\r").unwrap_or(event));
            at += blank;
            start = at;
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(framing: Framing, input: &[u8], piece: usize) -> (Vec<u8>, bool) {
        let mut decoder = BodyDecoder::new(framing);
        let (mut raw, mut out) = (Vec::new(), Vec::new());
        for part in input.chunks(piece) {
            raw.extend_from_slice(part);
            decoder.decode(&mut raw, &mut out).unwrap();
        }
        (out, decoder.finished())
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_read_boundaries() {
        let input = b"5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
        for piece in 1..=input.len() {
            let (out, finished) = decode_in_pieces(Framing::Chunked, input, piece);
            assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz", "piece {piece}");
            assert!(finished, "piece {piece}");
        }
    }

    #[test]
    fn an_unfinished_chunked_body_is_not_finished() {
        let (out, finished) = decode_in_pieces(Framing::Chunked, b"3\r\nabc\r\n2\r\nd", 4);
        assert_eq!(out, b"abcd");
        assert!(!finished);
    }

    #[test]
    fn a_bad_chunk_size_is_an_error() {
        let mut decoder = BodyDecoder::new(Framing::Chunked);
        let mut raw = b"zz\r\n".to_vec();
        assert!(decoder.decode(&mut raw, &mut Vec::new()).is_err());
    }

    #[test]
    fn sized_bodies_stop_at_their_length() {
        let (out, finished) = decode_in_pieces(Framing::Length(4), b"abcdef", 3);
        assert_eq!(out, b"abcd");
        assert!(finished);
    }

    #[test]
    fn events_split_on_blank_lines_and_keep_partial_ones() {
        let buffer = b"event: data\ndata: 1\n\n: keepalive\n\nevent: control\ndata: {";
        let mut events = Vec::new();
        let used = split_events(buffer, &mut |e| events.push(e.to_vec()));
        assert_eq!(
            events,
            vec![b"event: data\ndata: 1".to_vec(), b": keepalive".to_vec()]
        );
        assert_eq!(&buffer[used..], b"event: control\ndata: {");
    }

    #[test]
    fn crlf_line_endings_end_events_too() {
        let mut events = Vec::new();
        let used = split_events(b"data: a\r\n\r\ndata: b\r\n", &mut |e| {
            events.push(e.to_vec())
        });
        assert_eq!(events, vec![b"data: a".to_vec()]);
        assert_eq!(used, 11);
    }

    #[test]
    fn heads_give_status_and_framing() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
        let (status, framing, len) = parse_head(head).unwrap().unwrap();
        assert_eq!((status, framing), (200, Framing::Chunked));
        assert_eq!(&head[len..], b"5\r\n");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n").unwrap().is_none());
        let sized = parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\n").unwrap();
        assert_eq!(
            sized.map(|(s, f, _)| (s, f)),
            Some((404, Framing::Length(3)))
        );
    }
}
