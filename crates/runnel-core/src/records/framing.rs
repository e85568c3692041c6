//! The stored framing of records: a record stream's bytes are its
//! records, one after another, each
//!
//! ```text
//! u32 length of what follows in this record
//! u64 timestamp (milliseconds since the Unix epoch)
//! u32 header count
//! per header: u32 name length, name, u32 value length, value
//! body (the rest of the record)
//! ```
//!
//! every integer big-endian. The leading length lets a reader step from
//! record to record without decoding headers, and a Durable Streams
//! reader of a record stream gets exactly these bytes. Sequence numbers
//! are not stored (see the module above).

use super::Header;

/// Bytes of a record's framing besides its headers and body: the
/// length, the timestamp and the header count.
const FIXED: usize = 4 + 8 + 4;
/// Bytes of a header's framing besides its name and value.
const PER_HEADER: usize = 4 + 4;

/// Bytes that do not frame records as above.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("records framed wrongly at byte {at}: {reason}")]
pub struct FramingError {
    /// Where the record that does not decode starts.
    pub at: usize,
    pub reason: &'static str,
}

/// One stored record, borrowed from the bytes it was framed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub timestamp: u64,
    header_count: u32,
    /// The headers' framing, as stored.
    headers: &'a [u8],
    pub body: &'a [u8],
}

impl<'a> RecordView<'a> {
    pub fn header_count(&self) -> usize {
        self.header_count as usize
    }

    /// The headers, as (name, value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut rest = self.headers;
        (0..self.header_count).map(move |_| {
            // Checked when the record was decoded.
            let (name, after) = take_prefixed(rest).expect("header framing checked at decode");
            let (value, after) = take_prefixed(after).expect("header framing checked at decode");
            rest = after;
            (name, value)
        })
    }

    /// The headers, owned.
    pub fn owned_headers(&self) -> Vec<Header> {
        self.headers()
            .map(|(name, value)| Header {
                name: name.to_vec(),
                value: value.to_vec(),
            })
            .collect()
    }
}

/// The framed size of a record of these headers and body.
pub fn framed_len(headers: &[Header], body: &[u8]) -> usize {
    FIXED
        + headers
            .iter()
            .map(|h| PER_HEADER + h.name.len() + h.value.len())
            .sum::<usize>()
        + body.len()
}

/// Appends one record's framing to `out`.
///
/// # Panics
///
/// If a length does not fit the framing's u32: admission bounds a record
/// to [`super::MAX_RECORD_BYTES`] first.
pub fn encode(out: &mut Vec<u8>, timestamp: u64, headers: &[Header], body: &[u8]) {
    let len = framed_len(headers, body);
    let after_length = u32::try_from(len - 4).expect("a record's length fits u32");
    out.reserve(len);
    let start = out.len();
    out.extend_from_slice(&after_length.to_be_bytes());
    out.extend_from_slice(&timestamp.to_be_bytes());
    let count = u32::try_from(headers.len()).expect("a header count fits u32");
    out.extend_from_slice(&count.to_be_bytes());
    for h in headers {
        put_prefixed(out, &h.name);
        put_prefixed(out, &h.value);
    }
    out.extend_from_slice(body);
    debug_assert_eq!(out.len() - start, len);
}

fn put_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).expect("a header part fits u32");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Splits `u32 length, bytes` off the front of `bytes`.
fn take_prefixed(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = u32::from_be_bytes(*len) as usize;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Decodes the record at the start of `bytes`; also returns the bytes
/// it takes. `at` is where `bytes` starts in the whole, for the error.
pub fn decode_one(bytes: &[u8], at: usize) -> Result<(RecordView<'_>, usize), FramingError> {
    let fail = |reason| FramingError { at, reason };
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(fail("a record's length is cut short"))?;
    let len = u32::from_be_bytes(*len) as usize;
    let record = rest
        .get(..len)
        .ok_or(fail("a record is longer than the bytes left"))?;
    let (timestamp, record) = record
        .split_first_chunk::<8>()
        .ok_or(fail("a record is too short for its timestamp"))?;
    let (count, record) = record
        .split_first_chunk::<4>()
        .ok_or(fail("a record is too short for its header count"))?;
    let header_count = u32::from_be_bytes(*count);
    let mut rest = record;
    for _ in 0..header_count {
        let (_, after) = take_prefixed(rest).ok_or(fail("a header name runs past its record"))?;
        let (_, after) = take_prefixed(after).ok_or(fail("a header value runs past its record"))?;
        rest = after;
    }
    let headers = &record[..record.len() - rest.len()];
    let view = RecordView {
        timestamp: u64::from_be_bytes(*timestamp),
        header_count,
        headers,
        body: rest,
    };
    Ok((view, 4 + len))
}

/// The records framed in `bytes`, in order; an error ends them.
pub fn records(bytes: &[u8]) -> Records<'_> {
    Records { bytes, at: 0 }
}

/// See [`records`].
pub struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordView<'a>, FramingError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        match decode_one(&self.bytes[self.at..], self.at) {
            Ok((view, taken)) => {
                self.at += taken;
                Some(Ok(view))
            }
            Err(e) => {
                // Nothing after a bad record can be trusted to frame.
                self.at = self.bytes.len();
                Some(Err(e))
            }
        }
    }
}

/// The timestamps of the records of one batch as the stream shows them:
/// as stored (never going back within a batch), and none below `floor`,
/// the stream's last timestamp before the batch (see
/// [`super::admit`]).
pub fn timestamps(
    floor: u64,
    bytes: &[u8],
) -> impl Iterator<Item = Result<u64, FramingError>> + '_ {
    records(bytes).map(move |r| r.map(|r| r.timestamp.max(floor)))
}

/// Where each record of `bytes` ends (for a chunk's message ends), after
/// checking that every byte belongs to a whole record.
pub fn record_ends(bytes: &[u8]) -> Result<Vec<u32>, FramingError> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (_, taken) = decode_one(&bytes[at..], at)?;
        at += taken;
        ends.push(u32::try_from(at).map_err(|_| FramingError {
            at,
            reason: "a chunk of records is larger than 4 GiB",
        })?);
    }
    Ok(ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, value: &str) -> Header {
        Header {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn a_record_is_framed_as_documented() {
        let mut out = Vec::new();
        encode(&mut out, 0x0102, &[header("k", "vv")], b"body");
        let expected: Vec<u8> = [
            &(8u32 + 4 + 4 + 1 + 4 + 2 + 4).to_be_bytes()[..],
            &0x0102u64.to_be_bytes(),
            &1u32.to_be_bytes(),
            &1u32.to_be_bytes(),
            b"k",
            &2u32.to_be_bytes(),
            b"vv",
            b"body",
        ]
        .concat();
        assert_eq!(out, expected);
        assert_eq!(out.len(), framed_len(&[header("k", "vv")], b"body"));
        let (view, taken) = decode_one(&out, 0).unwrap();
        assert_eq!(taken, out.len());
        assert_eq!(view.timestamp, 0x0102);
        assert_eq!(view.body, b"body");
        assert_eq!(view.owned_headers(), vec![header("k", "vv")]);
    }

    #[test]
    fn records_decode_in_order_and_end_where_framed() {
        let mut out = Vec::new();
        encode(&mut out, 1, &[], b"");
        encode(&mut out, 2, &[header("", "fence")], b"t");
        encode(&mut out, 3, &[header("a", ""), header("b", "c")], b"xyz");
        let views: Vec<_> = records(&out).map(Result::unwrap).collect();
        assert_eq!(
            views.iter().map(|v| v.timestamp).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(views[2].header_count(), 2);
        assert_eq!(views[2].body, b"xyz");
        let ends = record_ends(&out).unwrap();
        assert_eq!(ends.len(), 3);
        assert_eq!(*ends.last().unwrap() as usize, out.len());
        assert_eq!(ends[0] as usize, FIXED);
    }

    #[test]
    fn every_cut_of_a_record_is_refused() {
        let mut out = Vec::new();
        encode(&mut out, 9, &[header("name", "value")], b"body");
        for cut in 1..out.len() {
            assert!(record_ends(&out[..cut]).is_err(), "cut at {cut}");
        }
        // A header count larger than the headers there are.
        let mut lying = out.clone();
        lying[12..16].copy_from_slice(&2u32.to_be_bytes());
        let err = record_ends(&lying).unwrap_err();
        assert_eq!(err.at, 0);
        // A second record that is cut names where it starts.
        let mut two = out.clone();
        two.extend_from_slice(&out[..out.len() - 1]);
        assert_eq!(record_ends(&two).unwrap_err().at, out.len());
        assert_eq!(record_ends(&[]).unwrap(), Vec::<u32>::new());
    }
}
