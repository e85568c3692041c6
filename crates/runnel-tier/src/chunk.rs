//! The chunk object format (version 1): a contiguous range of one stream's
//! bytes, self-describing and checksummed.
//!
//! ```text
//! header   40 B   magic "RNLCHK01", version u16, flags u16 (bit 0: JSON),
//!                 block size u32, first offset u64, end offset u64,
//!                 crc32c u32 of the header before it, zero u32
//! blocks          [len u32][crc32c u32][len bytes of the stream], each
//!                 `block size` bytes but the last
//! footer          stream id u64, oldest and newest append time i64,
//!                 append count u32 and ends u32..., message count u32
//!                 and ends u32... (JSON streams; relative to the first
//!                 offset), crc32c u32 of the footer before it
//! trailer  16 B   footer length u32, zero u32, magic "RNLCHKFT"
//! ```
//!
//! All integers little-endian. Block `i` starts at
//! `HEADER_LEN + i * (FRAME_LEN + block size)`, so any stream position
//! maps to its block by arithmetic, and every block's checksum is checked
//! before its bytes are used. Snapshots use the same format with a single
//! "append" and no message ends.

use std::ops::Range;

use crate::TierError;

const MAGIC: &[u8; 8] = b"RNLCHK01";
const TRAILER_MAGIC: &[u8; 8] = b"RNLCHKFT";
pub const FORMAT_VERSION: u16 = 1;
pub const HEADER_LEN: u64 = 40;
pub const FRAME_LEN: u64 = 8;
pub const TRAILER_LEN: u64 = 16;
const FLAG_JSON: u16 = 1;
/// Offsets inside a chunk are u32: a chunk holds less than 4 GiB.
pub const MAX_CHUNK_BYTES: u64 = u32::MAX as u64;

/// What addressing a chunk's blocks needs (kept in memory per chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Stream offset of the first byte.
    pub start: u64,
    /// Stream offset after the last byte.
    pub end: u64,
    pub block_size: u32,
}

impl Layout {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    pub fn block_count(&self) -> u64 {
        self.len().div_ceil(u64::from(self.block_size))
    }

    /// The block holding stream offset `pos` (`start <= pos < end`).
    pub fn block_of(&self, pos: u64) -> u64 {
        (pos - self.start) / u64::from(self.block_size)
    }

    /// Stream offsets block `i` holds.
    pub fn block_span(&self, i: u64) -> Range<u64> {
        let size = u64::from(self.block_size);
        let from = self.start + i * size;
        from..(from + size).min(self.end)
    }

    /// Object bytes of block `i`, its frame included.
    pub fn block_bytes(&self, i: u64) -> Range<u64> {
        let at = HEADER_LEN + i * (FRAME_LEN + u64::from(self.block_size));
        let span = self.block_span(i);
        at..at + FRAME_LEN + (span.end - span.start)
    }

    /// Where the footer begins.
    pub fn footer_pos(&self) -> u64 {
        HEADER_LEN + self.block_count() * FRAME_LEN + self.len()
    }
}

/// What the footer says beyond the layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footer {
    pub stream: u64,
    pub oldest_at_ms: i64,
    pub newest_at_ms: i64,
    /// End of each append, relative to the chunk's start, ascending; the
    /// last is the chunk's length.
    pub append_ends: Vec<u32>,
    /// JSON streams: end of each message, relative to the start.
    pub message_ends: Vec<u32>,
}

impl Footer {
    /// Bytes of memory the footer holds (for the cache's budget).
    pub fn weight(&self) -> u64 {
        64 + 4 * (self.append_ends.len() + self.message_ends.len()) as u64
    }
}

/// A chunk object being assembled, appends in stream order.
pub struct ChunkBuilder {
    out: Vec<u8>,
    layout: Layout,
    json: bool,
    /// Where the open block's frame is, and how full the block is.
    open_block: Option<(usize, u32)>,
    footer: Footer,
}

/// A finished object.
#[derive(Debug, Clone)]
pub struct BuiltChunk {
    pub bytes: Vec<u8>,
    pub layout: Layout,
    pub footer_pos: u64,
}

impl ChunkBuilder {
    pub fn new(stream: u64, start: u64, json: bool, block_size: u32) -> ChunkBuilder {
        assert!(block_size > 0, "a block holds bytes");
        let out = vec![0; HEADER_LEN as usize];
        ChunkBuilder {
            out,
            layout: Layout {
                start,
                end: start,
                block_size,
            },
            json,
            open_block: None,
            footer: Footer {
                stream,
                oldest_at_ms: i64::MAX,
                newest_at_ms: i64::MIN,
                ..Footer::default()
            },
        }
    }

    /// Bytes of stream data so far.
    pub fn len(&self) -> u64 {
        self.layout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// Adds one append of `len` bytes: `fill(offset, buf)` writes the
    /// append's bytes from `offset` into `buf` (called once per block the
    /// append touches). `message_ends` are relative to the append's start
    /// (JSON streams; an empty list means one message).
    pub fn push_append<E>(
        &mut self,
        len: u64,
        message_ends: &[u32],
        at_ms: i64,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let base = self.len();
        assert!(
            base + len <= MAX_CHUNK_BYTES,
            "chunk of more than {MAX_CHUNK_BYTES} bytes"
        );
        let mut done = 0u64;
        while done < len {
            let (frame_at, fill_now) = match self.open_block {
                Some(open) => open,
                None => {
                    let at = self.out.len();
                    self.out.extend_from_slice(&[0; FRAME_LEN as usize]);
                    (at, 0)
                }
            };
            let room = u64::from(self.layout.block_size - fill_now);
            let take = room.min(len - done) as usize;
            let at = self.out.len();
            self.out.resize(at + take, 0);
            fill(done, &mut self.out[at..at + take])?;
            done += take as u64;
            let filled = fill_now + take as u32;
            self.open_block = Some((frame_at, filled));
            if filled == self.layout.block_size {
                self.close_block();
            }
        }
        self.layout.end += len;
        let end = (base + len) as u32;
        self.footer.append_ends.push(end);
        if self.json {
            if message_ends.is_empty() {
                self.footer.message_ends.push(end);
            } else {
                self.footer
                    .message_ends
                    .extend(message_ends.iter().map(|e| base as u32 + e));
            }
        }
        self.footer.oldest_at_ms = self.footer.oldest_at_ms.min(at_ms);
        self.footer.newest_at_ms = self.footer.newest_at_ms.max(at_ms);
        Ok(())
    }

    fn close_block(&mut self) {
        if let Some((frame_at, filled)) = self.open_block.take() {
            let payload_at = frame_at + FRAME_LEN as usize;
            let crc = crc32c::crc32c(&self.out[payload_at..payload_at + filled as usize]);
            self.out[frame_at..frame_at + 4].copy_from_slice(&filled.to_le_bytes());
            self.out[frame_at + 4..frame_at + 8].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Closes the last block, writes footer, trailer and header.
    pub fn finish(mut self) -> BuiltChunk {
        self.close_block();
        let footer_pos = self.out.len() as u64;
        debug_assert_eq!(footer_pos, self.layout.footer_pos());
        if self.footer.append_ends.is_empty() {
            self.footer.oldest_at_ms = 0;
            self.footer.newest_at_ms = 0;
        }
        let footer = encode_footer(&self.footer);
        self.out.extend_from_slice(&footer);
        self.out
            .extend_from_slice(&(footer.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&0u32.to_le_bytes());
        self.out.extend_from_slice(TRAILER_MAGIC);
        let mut header = Vec::with_capacity(HEADER_LEN as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let flags = if self.json { FLAG_JSON } else { 0 };
        header.extend_from_slice(&flags.to_le_bytes());
        header.extend_from_slice(&self.layout.block_size.to_le_bytes());
        header.extend_from_slice(&self.layout.start.to_le_bytes());
        header.extend_from_slice(&self.layout.end.to_le_bytes());
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        self.out[..HEADER_LEN as usize].copy_from_slice(&header);
        BuiltChunk {
            bytes: self.out,
            layout: self.layout,
            footer_pos,
        }
    }
}

fn encode_footer(f: &Footer) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + 4 * (f.append_ends.len() + f.message_ends.len()));
    out.extend_from_slice(&f.stream.to_le_bytes());
    out.extend_from_slice(&f.oldest_at_ms.to_le_bytes());
    out.extend_from_slice(&f.newest_at_ms.to_le_bytes());
    for list in [&f.append_ends, &f.message_ends] {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for e in list.iter() {
            out.extend_from_slice(&e.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks a block's frame and checksum; returns its stream bytes, which
/// share the fetched buffer.
pub fn verify_block(
    layout: &Layout,
    i: u64,
    framed: &bytes::Bytes,
) -> Result<bytes::Bytes, TierError> {
    check_block(layout, i, framed)?;
    Ok(framed.slice(FRAME_LEN as usize..))
}

/// Checks a block's frame and checksum.
fn check_block(layout: &Layout, i: u64, framed: &[u8]) -> Result<(), TierError> {
    let span = layout.block_span(i);
    let want = span.end - span.start;
    let bad = |what: &str| TierError::Corrupt(format!("block {i}: {what}"));
    let (frame, payload) = framed
        .split_at_checked(FRAME_LEN as usize)
        .ok_or_else(|| bad("shorter than its frame"))?;
    let len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
    if u64::from(len) != want || payload.len() as u64 != want {
        return Err(bad("length does not match the chunk's layout"));
    }
    if crc32c::crc32c(payload) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok(())
}

/// Decodes the footer and trailer: the object's bytes from `footer_pos`
/// to its end.
pub fn decode_footer(tail: &[u8]) -> Result<Footer, TierError> {
    let bad = |what: &str| TierError::Corrupt(format!("chunk footer: {what}"));
    let (body, trailer) = tail
        .split_last_chunk::<{ TRAILER_LEN as usize }>()
        .ok_or_else(|| bad("truncated"))?;
    if &trailer[8..] != TRAILER_MAGIC || trailer[4..8] != [0; 4] {
        return Err(bad("bad trailer"));
    }
    let footer_len = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes")) as usize;
    if footer_len != body.len() {
        return Err(bad("length does not match its trailer"));
    }
    let (footer, crc) = body
        .split_last_chunk::<4>()
        .ok_or_else(|| bad("truncated"))?;
    if crc32c::crc32c(footer) != u32::from_le_bytes(*crc) {
        return Err(bad("checksum mismatch"));
    }
    let mut at = footer;
    let mut take = |n: usize| -> Result<&[u8], TierError> {
        let (head, rest) = at.split_at_checked(n).ok_or_else(|| bad("truncated"))?;
        at = rest;
        Ok(head)
    };
    let stream = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let oldest_at_ms = i64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let newest_at_ms = i64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let mut lists = [Vec::new(), Vec::new()];
    for list in &mut lists {
        let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let raw = take(count.checked_mul(4).ok_or_else(|| bad("overflow"))?)?;
        *list = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
    }
    if !at.is_empty() {
        return Err(bad("trailing bytes"));
    }
    let [append_ends, message_ends] = lists;
    Ok(Footer {
        stream,
        oldest_at_ms,
        newest_at_ms,
        append_ends,
        message_ends,
    })
}

/// Decodes a header: the layout and whether the chunk is JSON.
pub fn decode_header(head: &[u8]) -> Result<(Layout, bool), TierError> {
    let bad = |what: &str| TierError::Corrupt(format!("chunk header: {what}"));
    let head = head
        .get(..HEADER_LEN as usize)
        .ok_or_else(|| bad("truncated"))?;
    if &head[..8] != MAGIC {
        return Err(bad("no magic"));
    }
    let crc = u32::from_le_bytes(head[32..36].try_into().expect("4 bytes"));
    if crc32c::crc32c(&head[..32]) != crc || head[36..40] != [0; 4] {
        return Err(bad("checksum mismatch"));
    }
    let version = u16::from_le_bytes(head[8..10].try_into().expect("2 bytes"));
    if version != FORMAT_VERSION {
        return Err(bad(&format!("unknown format version {version}")));
    }
    let flags = u16::from_le_bytes(head[10..12].try_into().expect("2 bytes"));
    let block_size = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    let start = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    let end = u64::from_le_bytes(head[24..32].try_into().expect("8 bytes"));
    if flags & !FLAG_JSON != 0 || block_size == 0 || end < start || end - start > MAX_CHUNK_BYTES {
        return Err(bad("impossible layout"));
    }
    Ok((
        Layout {
            start,
            end,
            block_size,
        },
        flags & FLAG_JSON != 0,
    ))
}

/// A whole object decoded and verified: layout, stream bytes, footer.
pub fn decode_whole(object: &[u8]) -> Result<(Layout, Vec<u8>, Footer), TierError> {
    let (layout, _) = decode_header(object)?;
    let footer_pos = layout.footer_pos() as usize;
    let footer = decode_footer(
        object
            .get(footer_pos..)
            .ok_or_else(|| TierError::Corrupt("chunk shorter than its layout".into()))?,
    )?;
    let mut data = Vec::with_capacity(layout.len() as usize);
    for i in 0..layout.block_count() {
        let range = layout.block_bytes(i);
        let framed = &object[range.start as usize..range.end as usize];
        check_block(&layout, i, framed)?;
        data.extend_from_slice(&framed[FRAME_LEN as usize..]);
    }
    Ok((layout, data, footer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(appends: &[Vec<u8>], block: u32, json: bool) -> BuiltChunk {
        let mut b = ChunkBuilder::new(9, 1000, json, block);
        for (n, a) in appends.iter().enumerate() {
            b.push_append(a.len() as u64, &[], n as i64, |off, buf| {
                buf.copy_from_slice(&a[off as usize..off as usize + buf.len()]);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        b.finish()
    }

    proptest! {
        #[test]
        fn chunks_round_trip_and_blocks_address_by_arithmetic(
            appends in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 1..20),
            block in 1u32..200,
        ) {
            let built = build(&appends, block, true);
            let (layout, data, footer) = decode_whole(&built.bytes).unwrap();
            prop_assert_eq!(layout, built.layout);
            prop_assert_eq!(data, appends.concat());
            prop_assert_eq!(footer.append_ends.len(), appends.len());
            prop_assert_eq!(&footer.message_ends, &footer.append_ends);
            prop_assert_eq!(footer.oldest_at_ms, 0);
            prop_assert_eq!(footer.newest_at_ms, appends.len() as i64 - 1);
            for pos in layout.start..layout.end {
                let i = layout.block_of(pos);
                prop_assert!(layout.block_span(i).contains(&pos));
            }
            prop_assert_eq!(layout.footer_pos(), built.footer_pos);
        }
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let built = build(&[b"hello".to_vec(), b"world!".to_vec()], 4, false);
        for at in 0..built.bytes.len() {
            let mut bytes = built.bytes.clone();
            bytes[at] ^= 0x40;
            assert!(decode_whole(&bytes).is_err(), "flip at {at} went unnoticed");
        }
    }

    #[test]
    fn json_message_ends_are_relative_to_the_chunk() {
        let mut b = ChunkBuilder::new(1, 0, true, 64);
        b.push_append(6, &[2, 6], 5, |_, buf| {
            buf.copy_from_slice(&b"1,22,3"[..buf.len()]);
            Ok::<(), ()>(())
        })
        .unwrap();
        b.push_append(2, &[], 7, |_, buf| {
            buf.copy_from_slice(b"4,");
            Ok::<(), ()>(())
        })
        .unwrap();
        let built = b.finish();
        let footer = decode_footer(&built.bytes[built.footer_pos as usize..]).unwrap();
        assert_eq!(footer.append_ends, vec![6, 8]);
        assert_eq!(footer.message_ends, vec![2, 6, 8]);
    }
}
