//! Behaviour tests of history: snapshots, bootstrap plans, trimming and
//! retention, on the same in-memory harness as [`crate::tests`].

use crate::command::*;
use crate::error::CoreError;
use crate::offset::{Offset, ReadFrom};
use crate::state::Applied;
use crate::tests::{append, create, create_with, next_offset, Harness, T0};

fn snapshot(name: &str, offset: u64, data: &[u8], digest: u8) -> Command {
    Command::PutSnapshot(PutSnapshot {
        name: name.into(),
        offset,
        content_type: "application/json".into(),
        digest: [digest; 32],
        server_made: false,
        body: Body {
            data: data.to_vec(),
            message_ends: vec![],
        },
    })
}

#[test]
fn snapshots_are_immutable_per_offset() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let at = next_offset(h.run(Command::Append(append("s", b"abc"))).unwrap());
    assert_eq!(
        h.run(snapshot("s", at.0, b"state", 1)),
        Ok(Applied::SnapshotStored {
            offset: at,
            incarnation: h.incarnation("s"),
            created: true
        })
    );
    assert_eq!(
        h.run(snapshot("s", at.0, b"state", 1)),
        Ok(Applied::SnapshotStored {
            offset: at,
            incarnation: h.incarnation("s"),
            created: false
        })
    );
    assert_eq!(
        h.run(snapshot("s", at.0, b"other", 2)),
        Err(CoreError::SnapshotConflict)
    );
    assert_eq!(
        h.run(snapshot("s", 99, b"x", 3)),
        Err(CoreError::SnapshotOffsetInvalid)
    );
    assert_eq!(h.state.snapshot("s", None, T0).unwrap().offset, at.0);
    h.run(Command::DeleteSnapshot {
        name: "s".into(),
        offset: at.0,
    })
    .unwrap();
    assert_eq!(
        h.state.snapshot("s", None, T0).unwrap_err(),
        CoreError::SnapshotNotFound
    );
    assert_eq!(
        h.run(Command::DeleteSnapshot {
            name: "s".into(),
            offset: at.0
        }),
        Err(CoreError::SnapshotNotFound)
    );
}

#[test]
fn bootstrap_starts_at_the_latest_snapshot() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    h.run(Command::Append(append("s", b"old-"))).unwrap();
    let at = next_offset(h.run(Command::Append(append("s", b"state-"))).unwrap());
    h.run(snapshot("s", at.0, b"SNAP", 1)).unwrap();
    h.run(Command::Append(append("s", b"new"))).unwrap();
    let plan = h.state.plan_bootstrap("s", u64::MAX, T0).unwrap();
    assert_eq!(plan.snapshot.as_ref().map(|s| s.len), Some(4));
    assert_eq!(plan.snapshot_offset(), at);
    let tail: Vec<u8> = plan
        .tail
        .slices
        .iter()
        .flat_map(|s| h.slice_bytes(s))
        .collect();
    assert_eq!(tail, b"new");
    assert!(plan.tail.up_to_date());
}

#[test]
fn trimmed_history_answers_gone_with_the_earliest_offset() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let first = next_offset(h.run(Command::Append(append("s", b"one"))).unwrap());
    h.run(snapshot("s", 0, b"s0", 1)).unwrap();
    h.run(snapshot("s", first.0, b"s1", 2)).unwrap();
    h.run(Command::Append(append("s", b"two"))).unwrap();
    assert_eq!(
        h.run(Command::Trim {
            name: "s".into(),
            before: 1
        }),
        Ok(Applied::Trimmed {
            earliest: Offset(1),
            incarnation: h.incarnation("s"),
        })
    );
    assert_eq!(
        h.run(Command::Trim {
            name: "s".into(),
            before: first.0
        }),
        Ok(Applied::Trimmed {
            earliest: first,
            incarnation: h.incarnation("s"),
        })
    );
    assert_eq!(
        h.read_at("s", ReadFrom::At(Offset(0)), 10).unwrap_err(),
        CoreError::Trimmed {
            earliest: first,
            incarnation: h.incarnation("s"),
        }
    );
    assert_eq!(
        h.read_all("s"),
        b"two",
        "reads from the start begin at the trim point"
    );
    assert_eq!(
        h.state.snapshot("s", Some(0), T0).unwrap_err(),
        CoreError::SnapshotNotFound
    );
    assert_eq!(h.state.snapshot("s", None, T0).unwrap().offset, first.0);
    assert_eq!(
        h.run(Command::Trim {
            name: "s".into(),
            before: 999
        }),
        Err(CoreError::TrimOffsetInvalid)
    );
    let replayed = h.replayed();
    assert_eq!(replayed.stream_by_name("s").unwrap().earliest, first.0);
}

#[test]
fn retention_trims_by_bytes_and_by_age() {
    let mut h = Harness::default();
    h.run_at(
        T0,
        create_with("r", "text/plain", |c| {
            c.retention = Retention {
                max_bytes: Some(6),
                max_age_secs: Some(60),
            };
        }),
    )
    .unwrap();
    for (i, chunk) in ["aaa", "bbb", "ccc"].iter().enumerate() {
        h.run_at(
            T0 + i as i64 * 1000,
            Command::Append(append("r", chunk.as_bytes())),
        )
        .unwrap();
    }
    // 9 bytes kept against a 6-byte limit: the first append goes.
    assert_eq!(
        h.state.retention_trims(T0 + 2000),
        vec![("r".to_string(), 3)]
    );
    // After 61 s the first two appends are also too old.
    assert_eq!(
        h.state.retention_trims(T0 + 61_500),
        vec![("r".to_string(), 6)]
    );
}
