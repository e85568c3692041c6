//! Stream offsets: how a byte position is minted into the protocol's opaque
//! token and parsed back.
//!
//! A token is `EEEEEEEEEEEEEEEE_PPPPPPPPPPPPPPPP`: two zero-padded 16-digit
//! decimal numbers. `P` is the byte position in the stream's stored
//! representation; `E` is reserved for a future epoch and is always zero
//! today. Fixed width makes lexicographic order equal numeric order, and
//! the alphabet (digits and `_`) never needs URL encoding.

use std::fmt;

/// Width of each numeric half of a token.
const HALF_WIDTH: usize = 16;
/// Total token length: two halves and the separator.
const TOKEN_LEN: usize = HALF_WIDTH * 2 + 1;
/// Largest position a token can carry (16 decimal digits).
pub const MAX_POSITION: u64 = 9_999_999_999_999_999;

/// A byte position in a stream, as carried by an offset token.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Offset(pub u64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn position(self) -> u64 {
        self.0
    }

    /// The token, formatted without allocating.
    pub fn token(self) -> Token {
        let mut bytes = [b'0'; TOKEN_LEN];
        bytes[HALF_WIDTH] = b'_';
        // Positions past MAX_POSITION cannot be minted; they keep their
        // low 16 digits rather than overflow the buffer.
        let mut position = self.0;
        for digit in bytes[HALF_WIDTH + 1..].iter_mut().rev() {
            *digit = b'0' + (position % 10) as u8;
            position /= 10;
        }
        Token(bytes)
    }
}

/// An offset token on the stack (see [`Offset::token`]).
#[derive(Clone, Copy)]
pub struct Token([u8; TOKEN_LEN]);

impl Token {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("tokens are ASCII digits and _")
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token().as_str())
    }
}

/// Where a read starts, as a client asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// `-1` or no offset: the first retained byte.
    Start,
    /// `now`: the current tail.
    Now,
    /// A token previously minted by the server.
    At(Offset),
}

/// Why an offset token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    #[error("offset is empty")]
    Empty,
    #[error("offset is not of the form 0000000000000000_0000000000000000")]
    Malformed,
    #[error("offset epoch is not known to this server")]
    UnknownEpoch,
}

/// Parses a minted token (not the sentinels).
pub fn parse_offset(token: &str) -> Result<Offset, OffsetError> {
    if token.is_empty() {
        return Err(OffsetError::Empty);
    }
    let bytes = token.as_bytes();
    if bytes.len() != TOKEN_LEN || bytes[HALF_WIDTH] != b'_' {
        return Err(OffsetError::Malformed);
    }
    let (epoch, position) = (&token[..HALF_WIDTH], &token[HALF_WIDTH + 1..]);
    if !epoch.bytes().all(|b| b.is_ascii_digit()) || !position.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OffsetError::Malformed);
    }
    if epoch.bytes().any(|b| b != b'0') {
        return Err(OffsetError::UnknownEpoch);
    }
    // 16 ASCII digits always fit in a u64.
    let value = position
        .parse::<u64>()
        .map_err(|_| OffsetError::Malformed)?;
    Ok(Offset(value))
}

/// Parses the `offset` query parameter, sentinels included.
pub fn parse_read_from(token: &str) -> Result<ReadFrom, OffsetError> {
    match token {
        "-1" => Ok(ReadFrom::Start),
        "now" => Ok(ReadFrom::Now),
        other => parse_offset(other).map(ReadFrom::At),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_formats_as_the_protocol_expects() {
        assert_eq!(
            Offset::ZERO.to_string(),
            "0000000000000000_0000000000000000"
        );
    }

    #[test]
    fn sentinels_are_recognised() {
        assert_eq!(parse_read_from("-1"), Ok(ReadFrom::Start));
        assert_eq!(parse_read_from("now"), Ok(ReadFrom::Now));
    }

    #[test]
    fn malformed_tokens_are_rejected() {
        for bad in [
            "",
            "0",
            "0,1",
            "0 1",
            "../0000000000000000_0000000000000000",
            "0000000000000000-0000000000000000",
            "000000000000000a_0000000000000000",
            "0000000000000000_000000000000000+",
            "0000000000000000_00000000000000000",
            "now\n",
        ] {
            assert!(parse_read_from(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn nonzero_epoch_is_unknown() {
        assert_eq!(
            parse_offset("9999999999999999_9999999999999999"),
            Err(OffsetError::UnknownEpoch)
        );
    }

    proptest! {
        #[test]
        fn round_trip_and_order(a in 0..=MAX_POSITION, b in 0..=MAX_POSITION) {
            let (ta, tb) = (Offset(a).to_string(), Offset(b).to_string());
            prop_assert_eq!(&ta, &format!("{:016}_{:016}", 0, a));
            prop_assert_eq!(parse_offset(&ta), Ok(Offset(a)));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert!(!ta.contains([',', '&', '=', '?', '/']));
        }

        #[test]
        fn arbitrary_strings_never_panic(s in ".*") {
            let _ = parse_read_from(&s);
        }
    }
}
