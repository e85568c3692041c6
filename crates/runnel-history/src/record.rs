//! Test records that describe themselves.
//!
//! Every append a fault test makes is `<wWWWWWWsSSSSSSSSSlLLLL:` then
//! `LLLL` letters derived from the writer and sequence number, then `>`,
//! so a stream's bytes parse back into the list of appends it holds, and a
//! byte that is lost, repeated, reordered or foreign shows as a parse error
//! or as an append in the wrong place.

use std::fmt;

const HEADER_LEN: usize = 24;

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The bytes of append `seq` of `writer` (the same every time, so a retry
/// sends the same body): 225 to 624 bytes. Writer ids below a million.
pub fn payload(writer: u32, seq: u64) -> Vec<u8> {
    let h = mix((u64::from(writer) << 40) ^ seq);
    let len = 200 + (h % 400) as usize;
    let mut out = format!("<w{writer:06}s{seq:09}l{len:04}:").into_bytes();
    debug_assert_eq!(out.len(), HEADER_LEN);
    let mut x = h;
    for _ in 0..len {
        x = mix(x);
        out.push(b'a' + (x % 26) as u8);
    }
    out.push(b'>');
    out
}

fn field(bytes: &[u8], tag: u8, digits: usize) -> Option<u64> {
    if bytes.first() != Some(&tag) || bytes.len() < 1 + digits {
        return None;
    }
    std::str::from_utf8(&bytes[1..1 + digits])
        .ok()?
        .parse()
        .ok()
}

/// Where a stream's bytes stop being whole appends, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Bytes that no append of any writer starts with.
    Foreign {
        /// Byte offset of the first foreign byte.
        at: u64,
        /// The bytes from there (at most 48), quoted.
        preview: String,
    },
    /// An append's header, but not its whole body (damaged, or cut
    /// short).
    Damaged {
        writer: u32,
        seq: u64,
        /// The append's length.
        len: usize,
        at: u64,
        preview: String,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Foreign { at, preview } => {
                write!(f, "foreign bytes at offset {at}: {preview}")
            }
            RecordError::Damaged {
                writer,
                seq,
                len,
                at,
                preview,
            } => write!(
                f,
                "a damaged or partial append (writer {writer}, seq {seq}, {len} bytes) at offset {at}: {preview}"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

impl RecordError {
    /// Whether the message says `phrase` (tests look for one).
    pub fn contains(&self, phrase: &str) -> bool {
        self.to_string().contains(phrase)
    }
}

/// Splits a stream's bytes into the appends it holds, (writer, seq) in
/// stream order, or says where the first byte that is no whole append is.
pub fn parse(bytes: &[u8]) -> Result<Vec<(u32, u64)>, RecordError> {
    Ok(parse_placed(bytes)?
        .into_iter()
        .map(|r| (r.writer, r.seq))
        .collect())
}

/// One append found in a stream's bytes, with where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub writer: u32,
    pub seq: u64,
    /// Byte offset of its first byte.
    pub start: u64,
    /// Byte offset just past it (the stream's next offset after it).
    pub end: u64,
}

/// As [`parse`], with each append's byte range.
pub fn parse_placed(bytes: &[u8]) -> Result<Vec<Placed>, RecordError> {
    match parse_prefix(bytes) {
        (placed, None) => Ok(placed),
        (_, Some(error)) => Err(error),
    }
}

/// The whole appends up to the first byte that is not one, and what is
/// wrong there (if anything).
pub fn parse_prefix(bytes: &[u8]) -> (Vec<Placed>, Option<RecordError>) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let parsed = (rest.len() >= HEADER_LEN && rest[0] == b'<' && rest[HEADER_LEN - 1] == b':')
            .then(|| Some((field(&rest[1..], b'w', 6)?, field(&rest[8..], b's', 9)?)))
            .flatten();
        let Some((writer, seq)) = parsed else {
            let error = RecordError::Foreign {
                at: at as u64,
                preview: preview(rest),
            };
            return (out, Some(error));
        };
        let want = payload(writer as u32, seq);
        if !rest.starts_with(&want) {
            let error = RecordError::Damaged {
                writer: writer as u32,
                seq,
                len: want.len(),
                at: at as u64,
                preview: preview(rest),
            };
            return (out, Some(error));
        }
        out.push(Placed {
            writer: writer as u32,
            seq,
            start: at as u64,
            end: (at + want.len()) as u64,
        });
        at += want.len();
    }
    (out, None)
}

fn preview(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(48)];
    format!("{:?}", String::from_utf8_lossy(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back_with_their_ranges() {
        let mut bytes = payload(3, 0);
        let first = bytes.len() as u64;
        bytes.extend(payload(7, 12));
        let placed = parse_placed(&bytes).unwrap();
        assert_eq!(placed.len(), 2);
        assert_eq!(
            (
                placed[0].writer,
                placed[0].seq,
                placed[0].start,
                placed[0].end
            ),
            (3, 0, 0, first)
        );
        assert_eq!(
            (placed[1].writer, placed[1].seq, placed[1].start),
            (7, 12, first)
        );
        assert_eq!(placed[1].end, bytes.len() as u64);
    }

    #[test]
    fn a_damaged_or_foreign_byte_is_refused() {
        let mut bytes = payload(1, 1);
        let last = bytes.len() - 2;
        bytes[last] ^= 1;
        assert!(matches!(
            parse(&bytes).unwrap_err(),
            RecordError::Damaged {
                writer: 1,
                seq: 1,
                at: 0,
                ..
            }
        ));
        assert!(parse(&bytes).unwrap_err().contains("damaged"));
        assert_eq!(
            parse(b"hello").unwrap_err().to_string(),
            "foreign bytes at offset 0: \"hello\""
        );
        let cut = payload(1, 2);
        assert!(parse(&cut[..cut.len() - 1]).is_err());
    }
}
