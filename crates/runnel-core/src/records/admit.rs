//! Admission of an append batch to a record stream: from the stream's
//! [`RecordTail`], its [`RecordConfig`], the batch, its conditions and the
//! proposer's clock reading, either the bytes to store and the tail after
//! them, or why nothing is stored.
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
//!   `uncapped`; and no record's is below the one before it (it gets the
//!   one before's).

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

/// An admitted batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The records in the stored framing, with their timestamps.
    pub bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    pub record_ends: Vec<u32>,
    /// The first record's sequence number (the last's is
    /// `tail.next_seq - 1`).
    pub first_seq: u64,
    pub first_timestamp: u64,
    /// The stream's tail after the batch.
    pub tail: RecordTail,
}

impl Admitted {
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

/// Admits `batch` to a stream whose tail is `tail`, at the proposer's
/// clock reading `now_ms`, or says why not (and then nothing changes).
pub fn admit(
    tail: &RecordTail,
    config: &RecordConfig,
    batch: &[AppendRecord],
    conditions: &AppendConditions,
    now_ms: u64,
) -> Result<Admitted, RecordError> {
    if batch.is_empty() {
        return Err(RecordError::EmptyBatch);
    }
    if batch.len() > MAX_BATCH_RECORDS {
        return Err(RecordError::TooManyRecords { count: batch.len() });
    }
    let mut batch_bytes = 0;
    let mut commands = Vec::new();
    for (index, record) in batch.iter().enumerate() {
        let bytes = metered_bytes(&record.headers, &record.body);
        if bytes > MAX_RECORD_BYTES {
            return Err(RecordError::RecordTooLarge { index, bytes });
        }
        batch_bytes += bytes;
        if let Some(command) = command_of(index, record)? {
            commands.push((index, command));
        }
        if config.timestamping == Timestamping::ClientRequire && record.timestamp.is_none() {
            return Err(RecordError::MissingTimestamp { index });
        }
    }
    if batch_bytes > MAX_BATCH_BYTES {
        return Err(RecordError::BatchTooLarge { bytes: batch_bytes });
    }
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
    let first_seq = tail.next_seq;
    let end_seq = first_seq
        .checked_add(batch.len() as u64)
        .ok_or(RecordError::SeqNumOverflow)?;

    // Everything is decided: the batch is admitted.
    let mut after = tail.clone();
    after.next_seq = end_seq;
    let mut bytes = Vec::with_capacity(
        batch
            .iter()
            .map(|r| framing::framed_len(&r.headers, &r.body))
            .sum(),
    );
    let mut record_ends = Vec::with_capacity(batch.len());
    let mut first_timestamp = None;
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
        let timestamp = capped.max(after.last_timestamp);
        after.last_timestamp = timestamp;
        first_timestamp.get_or_insert(timestamp);
        framing::encode(&mut bytes, timestamp, &record.headers, &record.body);
        record_ends.push(u32::try_from(bytes.len()).expect("a batch is at most a few MiB"));
    }
    for (_, command) in commands {
        match command {
            CommandRecord::Fence(token) => after.fencing_token = token,
            CommandRecord::Trim(seq) => {
                after.trim_point = after.trim_point.max(seq.min(end_seq));
            }
        }
    }
    assert!(after.trim_point <= after.next_seq);
    assert!(after.last_timestamp >= tail.last_timestamp);
    assert_eq!(record_ends.len(), batch.len());
    Ok(Admitted {
        bytes,
        record_ends,
        first_seq,
        first_timestamp: first_timestamp.expect("a batch has a record"),
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

    #[test]
    fn records_get_dense_sequence_numbers_and_their_bytes_decode() {
        let config = RecordConfig::default();
        let first = admit(
            &RecordTail::default(),
            &config,
            &[plain("a"), plain("bc")],
            &none(),
            1_000,
        )
        .unwrap();
        assert_eq!(first.first_seq, 0);
        assert_eq!(first.tail.next_seq, 2);
        assert_eq!(first.first_timestamp, 1_000);
        assert_eq!(
            framing::record_ends(&first.bytes).unwrap(),
            first.record_ends
        );
        let bodies: Vec<_> = framing::records(&first.bytes)
            .map(|r| r.unwrap().body.to_vec())
            .collect();
        assert_eq!(bodies, [b"a".to_vec(), b"bc".to_vec()]);
        let second = admit(&first.tail, &config, &[plain("d")], &none(), 1_001).unwrap();
        assert_eq!(second.first_seq, 2);
        assert_eq!(second.tail.next_seq, 3);
    }

    #[test]
    fn timestamps_follow_the_mode_are_capped_and_never_go_back() {
        let tail = RecordTail {
            last_timestamp: 500,
            ..RecordTail::default()
        };
        let stamps = |config: RecordConfig, batch: &[AppendRecord]| -> Vec<u64> {
            let admitted = admit(&tail, &config, batch, &none(), 1_000).unwrap();
            framing::records(&admitted.bytes)
                .map(|r| r.unwrap().timestamp)
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
            admit(&tail, &require, &batch, &none(), 1_000),
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
        assert_eq!(
            admit(&tail, &config, &[plain("a")], &with(Some(6), None), 0),
            Err(RecordError::SeqNumMismatch { expected: 7 })
        );
        assert_eq!(
            admit(&tail, &config, &[plain("a")], &with(None, Some("w2")), 0),
            Err(RecordError::FencingTokenMismatch {
                expected: "w1".into()
            })
        );
        let ok = admit(&tail, &config, &[plain("a")], &with(Some(7), Some("w1")), 0).unwrap();
        assert_eq!(ok.first_seq, 7);
        // A fence in the batch counts from the next batch on.
        let fenced = admit(
            &tail,
            &config,
            &[command("fence", b"w2"), plain("b")],
            &with(None, Some("w1")),
            0,
        )
        .unwrap();
        assert_eq!(fenced.tail.fencing_token, "w2");
        assert_eq!(fenced.tail.next_seq, 9);
        assert!(matches!(
            admit(
                &fenced.tail,
                &config,
                &[plain("c")],
                &with(None, Some("w1")),
                0
            ),
            Err(RecordError::FencingTokenMismatch { .. })
        ));
        // The empty token is the stream's until a fence.
        let fresh = RecordTail::default();
        assert!(admit(&fresh, &config, &[plain("a")], &with(None, Some("")), 0).is_ok());
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
        let forward = admit(&tail, &config, &[trim(6)], &none(), 0).unwrap();
        assert_eq!(forward.tail.trim_point, 6);
        assert!(forward.trims(&tail));
        let back = admit(&tail, &config, &[trim(2)], &none(), 0).unwrap();
        assert_eq!(back.tail.trim_point, 4);
        assert!(!back.trims(&tail));
        // Past the tail: to the tail after the batch (the trim record too).
        let past = admit(&tail, &config, &[trim(99), plain("x")], &none(), 0).unwrap();
        assert_eq!(past.tail.trim_point, 12);
        assert_eq!(past.tail.next_seq, 12);
    }

    #[test]
    fn bad_batches_are_refused_whole() {
        let config = RecordConfig::default();
        let tail = RecordTail::default();
        let refuse = |batch: &[AppendRecord]| admit(&tail, &config, batch, &none(), 0).unwrap_err();
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
        assert_eq!(
            admit(&full, &config, &[plain("a")], &none(), 0),
            Err(RecordError::SeqNumOverflow)
        );
    }
}
