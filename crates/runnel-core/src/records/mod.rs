//! Record streams: S2's data model (records with a sequence number, a
//! timestamp, headers and a body) on Runnel's streams, as a pure state
//! machine. `docs/s2-api.md` says how S2's API maps onto it.
//!
//! This module owns:
//!
//! - the stored framing of records ([`framing`]): what a record stream's
//!   bytes are, as the log, tiered chunks and Durable Streams readers see
//!   them;
//! - the admission of an append batch ([`admit`]): its limits, the
//!   timestamps it gets and the command records (`fence`, `trim`) it
//!   carries, decided when it is proposed from the batch and the
//!   proposer's clock reading ([`frame`]); its conditions
//!   (`match_seq_num`, the fencing token) and the sequence numbers it
//!   gets, decided when it is applied from the stream's record tail
//!   ([`decide`]). Every replica that applies the same batch reaches the
//!   same tail;
//! - where each batch starts ([`index`]), so that reads by sequence
//!   number or timestamp find their batch by binary search.
//!
//! A record's sequence number is not stored in its bytes: it is the
//! number of records before it in the stream, so a chunk of records needs
//! only its first sequence number.

pub mod admit;
pub mod framing;
pub mod index;

#[cfg(test)]
mod proptests;

pub use admit::{
    decide, frame, AppendConditions, BatchSummary, Decided, Framed, RecordConfig, RecordTail,
    Timestamping,
};
pub use framing::{FramingError, RecordView};
pub use index::{BatchStart, RecordIndex};

/// The content type of a record stream.
pub const RECORDS_CONTENT_TYPE: &str = "application/vnd.runnel.records";

/// The largest record, in metered bytes ([`metered_bytes`]).
pub const MAX_RECORD_BYTES: u64 = 1 << 20;
/// The most records in one append batch.
pub const MAX_BATCH_RECORDS: usize = 1000;
/// The largest append batch, in metered bytes.
pub const MAX_BATCH_BYTES: u64 = 1 << 20;
/// The longest fencing token, in bytes.
pub const MAX_FENCING_TOKEN_BYTES: usize = 36;

/// One header of a record: a name and a value, both bytes. Only a
/// command record has a header of empty name (its only one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// A record as an append proposes it: its timestamp is the client's, if
/// it gave one; admission decides the stored one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppendRecord {
    pub timestamp: Option<u64>,
    pub headers: Vec<Header>,
    pub body: Vec<u8>,
}

/// A record's size as S2 meters it (and limits it): 8 bytes, plus 2 per
/// header, plus every header's name and value, plus the body.
pub fn metered_bytes(headers: &[Header], body: &[u8]) -> u64 {
    8 + headers
        .iter()
        .map(|h| 2 + h.name.len() as u64 + h.value.len() as u64)
        .sum::<u64>()
        + body.len() as u64
}

/// Why a record append is refused. Nothing of a refused batch is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("an append batch holds at least one record")]
    EmptyBatch,
    #[error("an append batch holds at most {max} records, not {count}", max = MAX_BATCH_RECORDS)]
    TooManyRecords { count: usize },
    #[error("an append batch is at most {max} metered bytes, not {bytes}", max = MAX_BATCH_BYTES)]
    BatchTooLarge { bytes: u64 },
    #[error("record {index} is {bytes} metered bytes: the most is {max}", max = MAX_RECORD_BYTES)]
    RecordTooLarge { index: usize, bytes: u64 },
    #[error("record {index} has a header of empty name besides others: only a command record has one, as its only header")]
    EmptyHeaderName { index: usize },
    #[error("record {index} is a command record of unknown command {command:?}")]
    UnknownCommand { index: usize, command: String },
    #[error("record {index}: a fencing token is UTF-8 of at most {max} bytes", max = MAX_FENCING_TOKEN_BYTES)]
    InvalidFencingToken { index: usize },
    #[error("record {index}: a trim command's body is a sequence number (8 bytes, big-endian)")]
    InvalidTrim { index: usize },
    #[error("record {index} has no timestamp, and the stream requires the client's")]
    MissingTimestamp { index: usize },
    #[error("the first record would get sequence number {expected}, not the one asked for")]
    SeqNumMismatch { expected: u64 },
    #[error("the stream's fencing token is {expected:?}, not the one given")]
    FencingTokenMismatch { expected: String },
    #[error("the stream would hold more records than a sequence number counts")]
    SeqNumOverflow,
}
