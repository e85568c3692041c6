//! Admission of an append batch to a record stream, in two steps, as
//! the engine needs them:
//!
//! 1. [`frame`], when the append is proposed: the batch's limits, its
//!    command records and its timestamps are checked and decided from
//!    the batch and the proposer's clock reading alone, and the records
//!    framed for the log. What applying needs of them is kept in a
//!    [`BatchSummary`]: the bytes are in the log by then, not in the
//!    command.
//! 2. [`decide`], when the append is applied: its conditions against the
//!    stream's [`RecordTail`], the sequence numbers it gets, and the tail
//!    after it. Every replica decides the same.
//!
//! The rules, S2's:
//!
//! - a batch is 1 to [`MAX_BATCH_RECORDS`] records and at most
//!   [`MAX_BATCH_BYTES`] metered bytes; a record at most
//!   [`MAX_RECORD_BYTES`];
//! - a header of empty name makes a command record, and is its only
//!   header: its value names the command, `fence` (the body, UTF-8 of at
//!   most [`MAX_FENCING_TOKEN_BYTES`] bytes, becomes the stream's fencing
//!   token) or `trim` (the body, a big-endian u64, is the sequence number
//!   below which records are trimmed; never back, never past the tail).
//!   Command records take sequence numbers like any other;
//! - a fencing token given with the batch must equal the stream's (which
//!   is empty until a fence sets it); a `match_seq_num` must equal the
//!   sequence number the first record gets. Both are checked against the
//!   stream as it was before the batch;
//! - timestamps follow the stream's [`Timestamping`]; a client's that is
//!   ahead of the proposer's clock is capped to it unless the stream is
//!   `uncapped`; and no record's is below the one before it.
//!
//! The last rule spans batches, and a batch is framed before the one
//! ahead of it is applied. So the stored timestamps never go back within
//! a batch, and a record's timestamp is the larger of its stored one and
//! its stream's last before its batch ([`RecordTail::last_timestamp`]
//! when the batch was applied, which the index keeps with the batch):
//! [`super::framing::timestamps`].

use super::framing;
use super::{
    metered_bytes, AppendRecord, RecordError, MAX_BATCH_BYTES, MAX_BATCH_RECORDS,
    MAX_FENCING_TOKEN_BYTES, MAX_RECORD_BYTES,
};

/// Where a record's timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timestamping {
    /// The client's if it gave one, else the arrival time.
    #[default]
    ClientPrefer,
    /// The client's; a record without one is refused.
    ClientRequire,
    /// The arrival time; the client's is ignored.
    Arrival,
}

/// A record stream's configuration that admission follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordConfig {
    pub timestamping: Timestamping,
    /// Client timestamps ahead of the arrival time are kept as given.
    pub uncapped: bool,
}

/// What a record stream's appends are decided against, replicated with
/// the stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordTail {
    /// The sequence number the next record gets: every record appended
    /// so far, trimmed or not.
    pub next_seq: u64,
    /// The last record's timestamp (0 before the first record).
    pub last_timestamp: u64,
    /// Empty until a `fence` command record sets it.
    pub fencing_token: String,
    /// Records below this sequence number are trimmed.
    pub trim_point: u64,
}

/// Conditions an append batch carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppendConditions {
    /// The sequence number the batch's first record must get.
    pub match_seq_num: Option<u64>,
    /// Must equal the stream's fencing token.
    pub fencing_token: Option<String>,
}

/// What applying a framed batch needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSummary {
    pub records: u32,
    /// The largest stored timestamp (the last record's).
    pub last_timestamp: u64,
    /// The token of the batch's last `fence` command record.
    pub fence: Option<String>,
    /// The largest sequence number of its `trim` command records.
    pub trim: Option<u64>,
}

/// A batch framed for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    /// The records in the stored framing, with their timestamps.
    pub bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    pub record_ends: Vec<u32>,
    pub summary: BatchSummary,
}

/// A framed batch applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The first record's sequence number (the last's is
    /// `tail.next_seq - 1`).
    pub first_seq: u64,
    /// The stream's tail after the batch.
    pub tail: RecordTail,
}

impl Decided {
    /// Whether the batch moved the trim point (so the stream's history
    /// below it is to be dropped).
    pub fn trims(&self, before: &RecordTail) -> bool {
        self.tail.trim_point > before.trim_point
    }
}

/// A command record's effect.
enum CommandRecord {
    Fence(String),
    Trim(u64),
}

const COMMAND_FENCE: &[u8] = b"fence";
const COMMAND_TRIM: &[u8] = b"trim";

/// Checks `batch` and frames it for a stream configured as `config`, at
/// the proposer's clock reading `now_ms`; or says why it is refused.
pub fn frame(
    config: &RecordConfig,
    batch: &[AppendRecord],
    now_ms: u64,
) -> Result<Framed, RecordError> {
    if batch.is_empty() {
        return Err(RecordError::EmptyBatch);
    }
    if batch.len() > MAX_BATCH_RECORDS {
        return Err(RecordError::TooManyRecords { count: batch.len() });
    }
    let mut batch_bytes = 0;
    let mut fence = None;
    let mut trim = None;
    for (index, record) in batch.iter().enumerate() {
        let bytes = metered_bytes(&record.headers, &record.body);
        if bytes > MAX_RECORD_BYTES {
            return Err(RecordError::RecordTooLarge { index, bytes });
        }
        batch_bytes += bytes;
        match command_of(index, record)? {
            Some(CommandRecord::Fence(token)) => fence = Some(token),
            Some(CommandRecord::Trim(seq)) => trim = trim.max(Some(seq)),
            None => {}
        }
        if config.timestamping == Timestamping::ClientRequire && record.timestamp.is_none() {
            return Err(RecordError::MissingTimestamp { index });
        }
    }
    if batch_bytes > MAX_BATCH_BYTES {
        return Err(RecordError::BatchTooLarge { bytes: batch_bytes });
    }
    let mut bytes = Vec::with_capacity(
        batch
            .iter()
            .map(|r| framing::framed_len(&r.headers, &r.body))
            .sum(),
    );
    let mut record_ends = Vec::with_capacity(batch.len());
    let mut last_timestamp = 0;
    for record in batch {
        let given = match config.timestamping {
            Timestamping::Arrival => None,
            Timestamping::ClientPrefer | Timestamping::ClientRequire => record.timestamp,
        };
        let capped = match given {
            Some(t) if config.uncapped => t,
            Some(t) => t.min(now_ms),
            None => now_ms,
        };
        last_timestamp = capped.max(last_timestamp);
        framing::encode(&mut bytes, last_timestamp, &record.headers, &record.body);
        record_ends.push(u32::try_from(bytes.len()).expect("a batch is at most a few MiB"));
    }
    assert_eq!(record_ends.len(), batch.len());
    Ok(Framed {
        bytes,
        record_ends,
        summary: BatchSummary {
            records: u32::try_from(batch.len()).expect("a batch is at most 1,000 records"),
            last_timestamp,
            fence,
            trim,
        },
    })
}

/// Applies a framed batch of `summary` with `conditions` to a stream
/// whose tail is `tail`, or says why not (and then nothing changes).
pub fn decide(
    tail: &RecordTail,
    summary: &BatchSummary,
    conditions: &AppendConditions,
) -> Result<Decided, RecordError> {
    if let Some(token) = &conditions.fencing_token {
        if *token != tail.fencing_token {
            return Err(RecordError::FencingTokenMismatch {
                expected: tail.fencing_token.clone(),
            });
        }
    }
    if let Some(asked) = conditions.match_seq_num {
        if asked != tail.next_seq {
            return Err(RecordError::SeqNumMismatch {
                expected: tail.next_seq,
            });
        }
    }
    let end_seq = tail
        .next_seq
        .checked_add(u64::from(summary.records))
        .ok_or(RecordError::SeqNumOverflow)?;
    let mut after = tail.clone();
    after.next_seq = end_seq;
    after.last_timestamp = tail.last_timestamp.max(summary.last_timestamp);
    if let Some(token) = &summary.fence {
        after.fencing_token = token.clone();
    }
    if let Some(seq) = summary.trim {
        after.trim_point = after.trim_point.max(seq.min(end_seq));
    }
    assert!(after.trim_point <= after.next_seq);
    assert!(after.next_seq > tail.next_seq, "a batch holds a record");
    Ok(Decided {
        first_seq: tail.next_seq,
        tail: after,
    })
}

/// The command a record carries, if it is a command record, checked.
fn command_of(index: usize, record: &AppendRecord) -> Result<Option<CommandRecord>, RecordError> {
    let Some(command) = record.headers.iter().find(|h| h.name.is_empty()) else {
        return Ok(None);
    };
    if record.headers.len() != 1 {
        return Err(RecordError::EmptyHeaderName { index });
    }
    match command.value.as_slice() {
        COMMAND_FENCE => {
            let token = std::str::from_utf8(&record.body)
                .ok()
                .filter(|t| t.len() <= MAX_FENCING_TOKEN_BYTES)
                .ok_or(RecordError::InvalidFencingToken { index })?;
            Ok(Some(CommandRecord::Fence(token.to_string())))
        }
        COMMAND_TRIM => {
            let seq: [u8; 8] = record
                .body
                .as_slice()
                .try_into()
                .map_err(|_| RecordError::InvalidTrim { index })?;
            Ok(Some(CommandRecord::Trim(u64::from_be_bytes(seq))))
        }
        other => Err(RecordError::UnknownCommand {
            index,
            command: String::from_utf8_lossy(other).into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{framing, Header};

    fn plain(body: &str) -> AppendRecord {
        AppendRecord {
            timestamp: None,
            headers: vec![],
            body: body.into(),
        }
    }

    fn at(timestamp: u64, body: &str) -> AppendRecord {
        AppendRecord {
            timestamp: Some(timestamp),
            ..plain(body)
        }
    }

    fn command(name: &str, body: &[u8]) -> AppendRecord {
        AppendRecord {
            timestamp: None,
            headers: vec![Header {
                name: vec![],
                value: name.into(),
            }],
            body: body.to_vec(),
        }
    }

    fn none() -> AppendConditions {
        AppendConditions::default()
    }

    /// Frames and applies at once (as a single node with one append in
    /// flight does).
    fn admit(
        tail: &RecordTail,
        config: &RecordConfig,
        batch: &[AppendRecord],
        conditions: &AppendConditions,
        now_ms: u64,
    ) -> Result<(Framed, Decided), RecordError> {
        let framed = frame(config, batch, now_ms)?;
        let decided = decide(tail, &framed.summary, conditions)?;
        Ok((framed, decided))
    }

    #[test]
    fn records_get_dense_sequence_numbers_and_their_bytes_decode() {
        let config = RecordConfig::default();
        let batch = [plain("a"), plain("bc")];
        let (framed, first) =
            admit(&RecordTail::default(), &config, &batch, &none(), 1_000).unwrap();
        assert_eq!(first.first_seq, 0);
        assert_eq!(first.tail.next_seq, 2);
        assert_eq!(first.tail.last_timestamp, 1_000);
        assert_eq!(framed.summary.records, 2);
        assert_eq!(
            framing::record_ends(&framed.bytes).unwrap(),
            framed.record_ends
        );
        let bodies: Vec<_> = framing::records(&framed.bytes)
            .map(|r| r.unwrap().body.to_vec())
            .collect();
        assert_eq!(bodies, [b"a".to_vec(), b"bc".to_vec()]);
        let (_, second) = admit(&first.tail, &config, &[plain("d")], &none(), 1_001).unwrap();
        assert_eq!(second.first_seq, 2);
        assert_eq!(second.tail.next_seq, 3);
    }

    #[test]
    fn timestamps_follow_the_mode_are_capped_and_never_go_back() {
        let tail = RecordTail {
            last_timestamp: 500,
            ..RecordTail::default()
        };
        // As the stream shows them.
        let stamps = |config: RecordConfig, batch: &[AppendRecord]| -> Vec<u64> {
            let (framed, decided) = admit(&tail, &config, batch, &none(), 1_000).unwrap();
            assert_eq!(
                decided.tail.last_timestamp,
                tail.last_timestamp.max(framed.summary.last_timestamp)
            );
            framing::timestamps(tail.last_timestamp, &framed.bytes)
                .map(Result::unwrap)
                .collect()
        };
        let batch = [at(700, "a"), plain("b"), at(600, "c"), at(5_000, "d")];
        let prefer = RecordConfig::default();
        // The client's, the arrival time, not back below 1,000, capped.
        assert_eq!(stamps(prefer, &batch), [700, 1_000, 1_000, 1_000]);
        let uncapped = RecordConfig {
            uncapped: true,
            ..prefer
        };
        assert_eq!(stamps(uncapped, &batch), [700, 1_000, 1_000, 5_000]);
        let arrival = RecordConfig {
            timestamping: Timestamping::Arrival,
            ..prefer
        };
        assert_eq!(stamps(arrival, &batch), [1_000; 4]);
        // Below the stream's last timestamp: the last one.
        assert_eq!(stamps(prefer, &[at(100, "x")]), [500]);
        let require = RecordConfig {
            timestamping: Timestamping::ClientRequire,
            ..prefer
        };
        assert_eq!(
            frame(&require, &batch, 1_000),
            Err(RecordError::MissingTimestamp { index: 1 })
        );
    }

    #[test]
    fn conditions_are_checked_against_the_stream_before_the_batch() {
        let config = RecordConfig::default();
        let tail = RecordTail {
            next_seq: 7,
            fencing_token: "w1".into(),
            ..RecordTail::default()
        };
        let with = |seq: Option<u64>, token: Option<&str>| AppendConditions {
            match_seq_num: seq,
            fencing_token: token.map(str::to_string),
        };
        let one = frame(&config, &[plain("a")], 0).unwrap().summary;
        assert_eq!(
            decide(&tail, &one, &with(Some(6), None)),
            Err(RecordError::SeqNumMismatch { expected: 7 })
        );
        assert_eq!(
            decide(&tail, &one, &with(None, Some("w2"))),
            Err(RecordError::FencingTokenMismatch {
                expected: "w1".into()
            })
        );
        let ok = decide(&tail, &one, &with(Some(7), Some("w1"))).unwrap();
        assert_eq!(ok.first_seq, 7);
        // A fence in the batch counts from the next batch on.
        let fencing = frame(&config, &[command("fence", b"w2"), plain("b")], 0).unwrap();
        let fenced = decide(&tail, &fencing.summary, &with(None, Some("w1"))).unwrap();
        assert_eq!(fenced.tail.fencing_token, "w2");
        assert_eq!(fenced.tail.next_seq, 9);
        assert!(matches!(
            decide(&fenced.tail, &one, &with(None, Some("w1"))),
            Err(RecordError::FencingTokenMismatch { .. })
        ));
        // The last fence of a batch stands.
        let twice = frame(
            &config,
            &[command("fence", b"a"), command("fence", b"b")],
            0,
        )
        .unwrap();
        assert_eq!(twice.summary.fence.as_deref(), Some("b"));
        // The empty token is the stream's until a fence.
        let fresh = RecordTail::default();
        assert!(decide(&fresh, &one, &with(None, Some(""))).is_ok());
    }

    #[test]
    fn trims_move_forward_only_and_stop_at_the_tail() {
        let config = RecordConfig::default();
        let tail = RecordTail {
            next_seq: 10,
            trim_point: 4,
            ..RecordTail::default()
        };
        let trim = |seq: u64| command("trim", &seq.to_be_bytes());
        let (_, forward) = admit(&tail, &config, &[trim(6)], &none(), 0).unwrap();
        assert_eq!(forward.tail.trim_point, 6);
        assert!(forward.trims(&tail));
        let (_, back) = admit(&tail, &config, &[trim(2)], &none(), 0).unwrap();
        assert_eq!(back.tail.trim_point, 4);
        assert!(!back.trims(&tail));
        // Past the tail: to the tail after the batch (the trim record too).
        let (_, past) = admit(&tail, &config, &[trim(99), plain("x")], &none(), 0).unwrap();
        assert_eq!(past.tail.trim_point, 12);
        assert_eq!(past.tail.next_seq, 12);
        // The highest trim of a batch stands.
        let both = frame(&config, &[trim(8), trim(5)], 0).unwrap();
        assert_eq!(both.summary.trim, Some(8));
    }

    #[test]
    fn bad_batches_are_refused_whole() {
        let config = RecordConfig::default();
        let refuse = |batch: &[AppendRecord]| frame(&config, batch, 0).unwrap_err();
        assert_eq!(refuse(&[]), RecordError::EmptyBatch);
        assert_eq!(
            refuse(&vec![plain(""); MAX_BATCH_RECORDS + 1]),
            RecordError::TooManyRecords {
                count: MAX_BATCH_RECORDS + 1
            }
        );
        let big = AppendRecord {
            body: vec![0; MAX_RECORD_BYTES as usize - 7],
            ..plain("")
        };
        assert_eq!(
            refuse(&[plain("a"), big]),
            RecordError::RecordTooLarge {
                index: 1,
                bytes: MAX_RECORD_BYTES + 1
            }
        );
        // Each record within bounds, the batch not.
        let half = AppendRecord {
            body: vec![0; (MAX_BATCH_BYTES / 2) as usize],
            ..plain("")
        };
        assert!(matches!(
            refuse(&[half.clone(), half]),
            RecordError::BatchTooLarge { .. }
        ));
        let mut mixed = command("fence", b"t");
        mixed.headers.push(Header {
            name: b"k".to_vec(),
            value: vec![],
        });
        assert_eq!(
            refuse(&[plain("a"), mixed]),
            RecordError::EmptyHeaderName { index: 1 }
        );
        assert_eq!(
            refuse(&[command("seal", b"")]),
            RecordError::UnknownCommand {
                index: 0,
                command: "seal".into()
            }
        );
        assert_eq!(
            refuse(&[command("fence", &[b'x'; MAX_FENCING_TOKEN_BYTES + 1])]),
            RecordError::InvalidFencingToken { index: 0 }
        );
        assert_eq!(
            refuse(&[command("fence", &[0xff])]),
            RecordError::InvalidFencingToken { index: 0 }
        );
        assert_eq!(
            refuse(&[command("trim", b"1234567")]),
            RecordError::InvalidTrim { index: 0 }
        );
        let full = RecordTail {
            next_seq: u64::MAX,
            ..RecordTail::default()
        };
        let one = frame(&config, &[plain("a")], 0).unwrap().summary;
        assert_eq!(
            decide(&full, &one, &none()),
            Err(RecordError::SeqNumOverflow)
        );
    }
}
