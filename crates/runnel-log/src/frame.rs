//! Record framing: `[len: u32 LE][crc: u32 LE][payload: len bytes]`.
//!
//! The checksum is CRC32C over the length bytes followed by the payload, so
//! a torn or corrupted length is caught as surely as a corrupted payload.
//! A zero length is never written; reading one means pre-allocated or
//! torn space, which ends the valid log.

/// Bytes before the payload of every record.
pub const HEADER_LEN: u64 = 8;

/// Checksum of a record with this payload.
pub fn checksum(payload: &[u8]) -> u32 {
    let len = (payload.len() as u32).to_le_bytes();
    crc32c::crc32c_append(crc32c::crc32c(&len), payload)
}

/// Appends one framed record to `out`.
pub fn encode_into(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// A parsed record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub crc: u32,
}

pub fn decode_header(bytes: &[u8; HEADER_LEN as usize]) -> Header {
    Header {
        len: u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")),
        crc: u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checksum_covers_length() {
        let mut out = Vec::new();
        encode_into(&mut out, b"hello");
        let header = decode_header(out[..8].try_into().unwrap());
        assert_eq!(header.len, 5);
        assert_eq!(header.crc, checksum(b"hello"));
        assert_ne!(checksum(b"hello"), checksum(b"hell"));
        assert_eq!(&out[8..], b"hello");
    }
}
