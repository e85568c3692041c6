use super::*;
use proptest::prelude::*;

/// One entry of every command (the golden fixtures are these, encoded).
pub(crate) fn sample_entries() -> Vec<Entry> {
    vec![
        Entry {
            now_ms: 1_700_000_000_000,
            command: Command::Create(CreateStream {
                name: "a/b".into(),
                content_type: Some("application/json".into()),
                ttl_secs: Some(60),
                expires_at_ms: None,
                closed: false,
                fork: Some(ForkFrom {
                    source: "src".into(),
                    offset: Some(7),
                    sub_offset: 2,
                }),
                body: Body {
                    data: b"{},".to_vec(),
                    message_ends: vec![3],
                },
                compaction: true,
                retention: Retention {
                    max_bytes: Some(10),
                    max_age_secs: None,
                },
                inherit: None,
            }),
        },
        Entry {
            now_ms: -5,
            command: Command::Append(AppendToStream {
                name: "s".into(),
                content_type: None,
                body: Body::default(),
                producer: Some(Producer {
                    id: "p".into(),
                    epoch: 3,
                    seq: 9,
                }),
                stream_seq: Some("001".into()),
                close: true,
            }),
        },
        Entry {
            now_ms: 0,
            command: Command::Delete { name: "x".into() },
        },
        Entry {
            now_ms: 0,
            command: Command::Expire { ids: vec![1, 2, 3] },
        },
        Entry {
            now_ms: 7,
            command: Command::PutSnapshot(PutSnapshot {
                name: "s".into(),
                offset: 12,
                content_type: "application/json".into(),
                digest: [9; 32],
                server_made: true,
                body: Body {
                    data: b"[1,2]".to_vec(),
                    message_ends: vec![],
                },
            }),
        },
        Entry {
            now_ms: 8,
            command: Command::DeleteSnapshot {
                name: "s".into(),
                offset: 12,
            },
        },
        Entry {
            now_ms: 9,
            command: Command::Trim {
                name: "s".into(),
                before: 4,
            },
        },
        Entry {
            now_ms: 10,
            command: Command::Tier {
                stream: 3,
                term: 5,
                chunk: sample_chunk(),
            },
        },
        Entry {
            now_ms: 11,
            command: Command::TierSnapshot {
                stream: 3,
                term: 5,
                offset: 12,
                server_made: true,
                from_loc: 77,
                object: sample_chunk(),
            },
        },
        Entry {
            now_ms: 12,
            command: Command::ObjectsDeleted { up_to: 41 },
        },
        Entry {
            now_ms: 13,
            command: Command::Subscription(Box::new(SubCommand::Ack {
                id: "sub-1".into(),
                generation: 3,
                wake_id: "w_1".into(),
                acks: vec![("events/a".into(), 42)],
                done: true,
                lease_until_ms: 99,
            })),
        },
        Entry {
            now_ms: 14,
            command: Command::SetClusterId { id: "prod".into() },
        },
        Entry {
            now_ms: 15,
            command: Command::RetireNode { node: 4 },
        },
        Entry {
            now_ms: 16,
            command: Command::SetReplication {
                factor: 5,
                initial: true,
            },
        },
        Entry {
            now_ms: 17,
            command: Command::PreferLeaders {
                leaders: vec![(1, 3), (2, 1), (4095, u64::MAX)],
                initial: false,
            },
        },
        Entry {
            now_ms: 18,
            command: Command::SetZones {
                zones: vec![(1, "eu-1a".into()), (2, "eu-1b".into())],
            },
        },
        Entry {
            now_ms: 19,
            command: Command::PauseHealing { paused: true },
        },
    ]
}

fn sample_chunk() -> ColdChunk {
    ColdChunk {
        start: 10,
        end: 20,
        footer_len: 16,
        block_size: 1 << 20,
        newest_at_ms: 4,
        term: 5,
        node: 2,
        nonce: u64::MAX,
    }
}

#[test]
fn entries_round_trip() {
    for entry in sample_entries() {
        let bytes = entry.encode();
        assert_eq!(Entry::decode(&bytes).unwrap(), entry);
    }
}

#[test]
fn data_is_the_suffix_of_the_encoding() {
    for entry in sample_entries() {
        let bytes = entry.encode();
        let data = entry
            .command
            .body()
            .map(|b| b.data.clone())
            .unwrap_or_default();
        assert!(bytes.ends_with(&data));
        let (header_only, data_len) = Entry::decode_header(&bytes).unwrap();
        assert_eq!(data_len, data.len() as u64);
        assert!(header_only.command.body().is_none_or(|b| b.data.is_empty()));
    }
}

#[test]
fn truncated_entries_are_errors_not_panics() {
    for entry in sample_entries() {
        let bytes = entry.encode();
        let header = bytes.len() - entry.command.body().map(|b| b.data.len()).unwrap_or(0);
        for cut in 0..header {
            assert!(Entry::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Entry::decode(&bytes);
        let _ = Entry::decode_header(&bytes);
    }

    #[test]
    fn appends_round_trip(
        name in ".{0,40}",
        data in proptest::collection::vec(any::<u8>(), 0..200),
        seq in proptest::option::of(".{0,10}"),
        now in any::<i64>(),
    ) {
        let entry = Entry { now_ms: now, command: Command::Append(AppendToStream {
            name, content_type: Some("text/plain".into()),
            body: Body { data, message_ends: vec![] },
            producer: None, stream_seq: seq, close: false,
        })};
        prop_assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
    }
}
