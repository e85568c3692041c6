//! Stream offsets: how a byte position is minted into the protocol's opaque
//! token and parsed back.
//!
//! A token is `IIIIIIIIIIIIIIII_PPPPPPPPPPPPPPPP`: two zero-padded 16-digit
//! decimal numbers. `P` is the byte position in the stream's stored
//! representation; `I` is the stream's [incarnation], so that a stream
//! deleted and created again under the same name never mints a token its
//! predecessor minted (a cache keyed by URL could otherwise answer the new
//! stream with the old one's bytes). Fixed width makes lexicographic order
//! equal numeric order, and the alphabet (digits and `_`) never needs URL
//! encoding. An incarnation of zeros names no stream in particular: every
//! stream accepts it (offsets written by hand, and those minted before
//! incarnations existed).

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

/// Which life of a stream name a token belongs to: the stream's creation
/// time in milliseconds times 1000, plus the low three digits of its id in
/// its group (two streams of one name created in the same millisecond
/// still differ). Deterministic on every replica: both come from the
/// create command. Sixteen digits last until the year 2286.
pub fn incarnation(id: u64, created_at_ms: i64) -> u64 {
    let ms = u64::try_from(created_at_ms).unwrap_or(0);
    ms.saturating_mul(1000)
        .saturating_add(id % 1000)
        .min(MAX_POSITION)
}

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn position(self) -> u64 {
        self.0
    }

    /// The token with an incarnation of zeros, formatted without
    /// allocating. Answers to clients mint with [`Offset::token_in`].
    pub fn token(self) -> Token {
        self.token_in(0)
    }

    /// The token of this position in the stream of `incarnation`.
    pub fn token_in(self, incarnation: u64) -> Token {
        let mut bytes = [b'0'; TOKEN_LEN];
        bytes[HALF_WIDTH] = b'_';
        // Numbers past MAX_POSITION cannot be minted; they keep their low
        // 16 digits rather than overflow the buffer.
        let write = |digits: &mut [u8], mut value: u64| {
            for digit in digits.iter_mut().rev() {
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        write(&mut bytes[..HALF_WIDTH], incarnation);
        write(&mut bytes[HALF_WIDTH + 1..], self.0);
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
}

/// Parses a minted token (not the sentinels) to its position, whatever
/// its incarnation.
pub fn parse_offset(token: &str) -> Result<Offset, OffsetError> {
    parse_token(token).map(|(_, offset)| offset)
}

/// Parses a minted token to its incarnation and position.
pub fn parse_token(token: &str) -> Result<(u64, Offset), OffsetError> {
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
    // 16 ASCII digits always fit in a u64.
    let number = |digits: &str| digits.parse::<u64>().map_err(|_| OffsetError::Malformed);
    Ok((number(epoch)?, Offset(number(position)?)))
}

/// Parses the `offset` query parameter, sentinels included.
pub fn parse_read_from(token: &str) -> Result<ReadFrom, OffsetError> {
    parse_read(token).map(|(from, _)| from)
}

/// Parses the `offset` query parameter to where the read starts and the
/// incarnation its token names (zero for the sentinels).
pub fn parse_read(token: &str) -> Result<(ReadFrom, u64), OffsetError> {
    match token {
        "-1" => Ok((ReadFrom::Start, 0)),
        "now" => Ok((ReadFrom::Now, 0)),
        other => parse_token(other).map(|(epoch, offset)| (ReadFrom::At(offset), epoch)),
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
    fn tokens_carry_the_incarnation() {
        let inc = incarnation(1_234, 1_800_000_000_123);
        assert_eq!(inc, 1_800_000_000_123_234);
        let token = Offset(42).token_in(inc);
        assert_eq!(token.as_str(), "1800000000123234_0000000000000042");
        assert_eq!(parse_token(token.as_str()), Ok((inc, Offset(42))));
        assert_eq!(parse_offset(token.as_str()), Ok(Offset(42)));
        assert_eq!(
            parse_read(token.as_str()),
            Ok((ReadFrom::At(Offset(42)), inc))
        );
        // A later incarnation of the same name sorts after every token of
        // the earlier one.
        let later = incarnation(1_235, 1_800_000_000_124);
        assert!(Offset(0).token_in(later).as_str() > Offset(MAX_POSITION).token_in(inc).as_str());
        // Clocks before 1970 and ids past three digits stay in range.
        assert_eq!(incarnation(7, -5), 7);
        assert_eq!(incarnation(u64::MAX, i64::MAX), MAX_POSITION);
    }

    proptest! {
        #[test]
        fn round_trip_and_order(
            a in 0..=MAX_POSITION,
            b in 0..=MAX_POSITION,
            inc in 0..=MAX_POSITION,
        ) {
            let (ta, tb) = (Offset(a).to_string(), Offset(b).to_string());
            prop_assert_eq!(&ta, &format!("{:016}_{:016}", 0, a));
            prop_assert_eq!(parse_offset(&ta), Ok(Offset(a)));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert!(!ta.contains([',', '&', '=', '?', '/']));
            let (ia, ib) = (Offset(a).token_in(inc), Offset(b).token_in(inc));
            prop_assert_eq!(ia.as_str(), format!("{inc:016}_{a:016}"));
            prop_assert_eq!(parse_token(ia.as_str()), Ok((inc, Offset(a))));
            prop_assert_eq!(ia.as_str().cmp(ib.as_str()), a.cmp(&b));
        }

        #[test]
        fn arbitrary_strings_never_panic(s in ".*") {
            let _ = parse_read_from(&s);
        }
    }
}
