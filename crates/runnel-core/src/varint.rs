//! Variable-length numbers for the compact in-memory encodings
//! ([`crate::chunk_index`]'s blocks, [`crate::cold_list`]): seven bits a
//! byte, low first, and zigzag for differences that may be negative.

/// Maps a signed difference (as wrapped u64) to a small number for small
/// magnitudes of either sign.
pub(crate) fn zigzag(v: u64) -> u64 {
    let v = v as i64;
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint [`put_varint`] wrote in this process (the bytes are
/// never from outside, so they are trusted to be well formed).
pub(crate) fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}
