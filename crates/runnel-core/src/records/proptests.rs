//! Record admission against a plain model: any run of batches, with
//! conditions that hold or not, command records among them and clocks
//! that jump about, all framed before any is applied (as a leader with
//! appends in flight does), leaves stored bytes that decode to exactly
//! the records admitted, in order, with dense sequence numbers,
//! timestamps as the stream shows them that never go back, and the
//! fencing token and trim point the model expects; a refused batch is
//! refused for the reason the model gives. The batches' index finds
//! every record by sequence number and by timestamp as a scan of the
//! records does.

use proptest::prelude::*;

use super::{
    decide, frame, framing, AppendConditions, AppendRecord, BatchStart, Header, RecordConfig,
    RecordError, RecordIndex, RecordTail, Timestamping,
};

#[derive(Debug, Clone)]
struct Step {
    batch: Vec<AppendRecord>,
    /// Ask for the right sequence number, a wrong one, or none.
    match_seq: Option<bool>,
    /// Give this token as the condition.
    token: Option<String>,
    now_ms: u64,
}

const TOKENS: [&str; 3] = ["", "w1", "w2"];

fn record() -> impl Strategy<Value = AppendRecord> {
    let headers = prop::collection::vec(
        (
            prop::collection::vec(any::<u8>(), 1..4),
            prop::collection::vec(any::<u8>(), 0..4),
        ),
        0..3,
    );
    let plain = (
        prop::option::of(0u64..3_000),
        headers,
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(timestamp, headers, body)| AppendRecord {
            timestamp,
            headers: headers
                .into_iter()
                .map(|(name, value)| Header { name, value })
                .collect(),
            body,
        });
    let command = |name: &'static str, body: Vec<u8>| AppendRecord {
        timestamp: None,
        headers: vec![Header {
            name: vec![],
            value: name.into(),
        }],
        body,
    };
    prop_oneof![
        6 => plain,
        1 => (0..TOKENS.len()).prop_map(move |i| command("fence", TOKENS[i].into())),
        1 => (0u64..40).prop_map(move |seq| command("trim", seq.to_be_bytes().to_vec())),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(record(), 1..6),
        prop::option::of(any::<bool>()),
        prop::option::of(0..TOKENS.len()),
        0u64..3_000,
    )
        .prop_map(|(batch, match_seq, token, now_ms)| Step {
            batch,
            match_seq,
            token: token.map(|i| TOKENS[i].to_string()),
            now_ms,
        })
}

fn config() -> impl Strategy<Value = RecordConfig> {
    (
        prop_oneof![
            Just(Timestamping::ClientPrefer),
            Just(Timestamping::ClientRequire),
            Just(Timestamping::Arrival)
        ],
        any::<bool>(),
    )
        .prop_map(|(timestamping, uncapped)| RecordConfig {
            timestamping,
            uncapped,
        })
}

/// The model: every admitted record with the timestamp it must get, the
/// token and the trim point.
#[derive(Default)]
struct Model {
    records: Vec<(u64, Vec<Header>, Vec<u8>)>,
    token: String,
    trim_point: u64,
}

impl Model {
    fn last_timestamp(&self) -> u64 {
        self.records.last().map_or(0, |r| r.0)
    }

    /// What admitting `step` must do: refuse it (and why), or add its
    /// records.
    fn apply(&mut self, config: &RecordConfig, step: &Step) -> Result<(), RecordError> {
        if config.timestamping == Timestamping::ClientRequire {
            // Command records need one too.
            if let Some(index) = step.batch.iter().position(|r| r.timestamp.is_none()) {
                return Err(RecordError::MissingTimestamp { index });
            }
        }
        if let Some(token) = &step.token {
            if *token != self.token {
                return Err(RecordError::FencingTokenMismatch {
                    expected: self.token.clone(),
                });
            }
        }
        let next = self.records.len() as u64;
        if step.match_seq == Some(false) {
            return Err(RecordError::SeqNumMismatch { expected: next });
        }
        let end = next + step.batch.len() as u64;
        for r in &step.batch {
            let client = match config.timestamping {
                Timestamping::Arrival => None,
                _ => r.timestamp,
            };
            let mut t = client.unwrap_or(step.now_ms);
            if !config.uncapped {
                t = t.min(step.now_ms);
            }
            let t = t.max(self.last_timestamp());
            self.records.push((t, r.headers.clone(), r.body.clone()));
            if let Some(h) = r.headers.first().filter(|h| h.name.is_empty()) {
                match h.value.as_slice() {
                    b"fence" => self.token = String::from_utf8(r.body.clone()).unwrap(),
                    b"trim" => {
                        let seq = u64::from_be_bytes(r.body.as_slice().try_into().unwrap());
                        self.trim_point = self.trim_point.max(seq.min(end));
                    }
                    _ => unreachable!("the generator makes fence and trim only"),
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn admission_matches_the_model(config in config(), steps in prop::collection::vec(step(), 1..12)) {
        // Every batch framed first, then each applied in turn.
        let framed: Vec<_> = steps
            .iter()
            .map(|step| frame(&config, &step.batch, step.now_ms))
            .collect();
        let mut tail = RecordTail::default();
        let mut model = Model::default();
        let mut shown = Vec::new();
        let mut index = RecordIndex::default();
        let mut stored = 0u64;
        for (step, framed) in steps.iter().zip(framed) {
            let conditions = AppendConditions {
                match_seq_num: step.match_seq.map(|right| {
                    if right { tail.next_seq } else { tail.next_seq + 1 }
                }),
                fencing_token: step.token.clone(),
            };
            let got = framed.and_then(|framed| {
                let decided = decide(&tail, &framed.summary, &conditions)?;
                Ok((framed, decided))
            });
            let expected = model.apply(&config, step);
            match (got, expected) {
                (Ok((framed, decided)), Ok(())) => {
                    prop_assert_eq!(decided.first_seq, tail.next_seq);
                    prop_assert_eq!(
                        framing::record_ends(&framed.bytes).unwrap(),
                        framed.record_ends.clone()
                    );
                    index.push(BatchStart {
                        seq: decided.first_seq,
                        position: stored,
                        floor: tail.last_timestamp,
                        last_timestamp: decided.tail.last_timestamp,
                    });
                    stored += framed.bytes.len() as u64;
                    let stamps = framing::timestamps(tail.last_timestamp, &framed.bytes);
                    for (record, stamp) in framing::records(&framed.bytes).zip(stamps) {
                        let record = record.unwrap();
                        shown.push((stamp.unwrap(), record.owned_headers(), record.body.to_vec()));
                    }
                    tail = decided.tail;
                }
                (Err(got), Err(expected)) => prop_assert_eq!(got, expected),
                (got, expected) => {
                    prop_assert!(false, "admission gave {:?}, the model {:?}", got.map(|_| ()), expected)
                }
            }
            prop_assert_eq!(tail.next_seq, model.records.len() as u64);
            prop_assert_eq!(&tail.fencing_token, &model.token);
            prop_assert_eq!(tail.trim_point, model.trim_point);
            prop_assert_eq!(tail.last_timestamp, model.last_timestamp());
        }
        prop_assert_eq!(shown.len(), model.records.len());
        for (got, expected) in shown.iter().zip(&model.records) {
            prop_assert_eq!(got, expected);
        }
        prop_assert!(shown.windows(2).all(|w| w[0].0 <= w[1].0));

        // The batch of each record, by scanning: the last that starts at
        // or before it.
        let batch_of = |seq: u64| index.iter().filter(|b| b.seq <= seq).last().map(|b| b.seq);
        for seq in 0..tail.next_seq + 2 {
            let expected = (seq < tail.next_seq).then(|| batch_of(seq)).flatten();
            prop_assert_eq!(index.find_seq(seq, tail.next_seq).map(|b| b.seq), expected);
        }
        // Every timestamp shown, just after each, and before them all.
        let probes = std::iter::once(0).chain(shown.iter().flat_map(|r| [r.0, r.0 + 1]));
        for t in probes {
            let first = shown.iter().position(|r| r.0 >= t).map(|seq| seq as u64);
            prop_assert_eq!(
                index.find_timestamp(t).map(|b| b.seq),
                first.and_then(batch_of),
                "timestamp {}", t
            );
        }
        // A trim to the trim point drops only batches wholly below it.
        let before: Vec<_> = index.iter().copied().collect();
        let kept_from = index.drop_below(tail.trim_point);
        let first_kept = index.first().copied();
        for (i, b) in before.iter().enumerate() {
            let end = before.get(i + 1).map_or(tail.next_seq, |n| n.seq);
            let dropped = first_kept.is_some_and(|f| b.seq < f.seq);
            prop_assert_eq!(dropped, end <= tail.trim_point && i + 1 < before.len());
        }
        prop_assert_eq!(kept_from.is_some(), index.len() < before.len());
        if let (Some(position), Some(first)) = (kept_from, first_kept) {
            prop_assert_eq!(position, first.position);
        }
    }
}
