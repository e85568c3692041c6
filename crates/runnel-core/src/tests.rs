//! Behaviour tests of the state machine, run against the test harness
//! (see [`crate::tests_harness`]).

use proptest::prelude::*;

use crate::command::*;
use crate::error::CoreError;
use crate::json::render_json_array;
use crate::offset::{Offset, ReadFrom};
use crate::state::{Applied, StreamsState};
pub(crate) use crate::tests_harness::*;

#[test]
fn create_is_idempotent_and_detects_config_conflicts() {
    let mut h = Harness::default();
    assert!(matches!(
        h.run(create("s", "text/plain")),
        Ok(Applied::Created { created: true, .. })
    ));
    assert!(matches!(
        h.run(create("s", "TEXT/PLAIN")),
        Ok(Applied::Created { created: false, .. })
    ));
    assert_eq!(
        h.run(create("s", "application/json")),
        Err(CoreError::ConfigMismatch)
    );
    let with_ttl = |ttl| create_with("t", "text/plain", |c| c.ttl_secs = Some(ttl));
    h.run(with_ttl(3600)).unwrap();
    assert!(h.run(with_ttl(3600)).is_ok());
    assert_eq!(h.run(with_ttl(7200)), Err(CoreError::ConfigMismatch));
}

#[test]
fn appends_mint_increasing_offsets_and_read_back_in_order() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let mut offsets = vec![];
    for chunk in ["a", "bc", "def"] {
        offsets.push(next_offset(
            h.run(Command::Append(append("s", chunk.as_bytes())))
                .unwrap(),
        ));
    }
    assert!(offsets.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(h.read_all("s"), b"abcdef");
    let (rest, plan) = h.read_at("s", ReadFrom::At(offsets[0]), u64::MAX).unwrap();
    assert_eq!(rest, b"bcdef");
    assert!(plan.up_to_date());
    let (now, plan) = h.read_at("s", ReadFrom::Now, u64::MAX).unwrap();
    assert!(now.is_empty() && plan.up_to_date());
    assert_eq!(plan.next, offsets[2]);
}

#[test]
fn reads_page_by_budget_without_losing_bytes() {
    let mut h = Harness::default();
    h.run(create("s", "application/octet-stream")).unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let mut a = append("s", &data[..600]);
    a.content_type = Some("application/octet-stream".into());
    h.run(Command::Append(a.clone())).unwrap();
    a.body.data = data[600..].to_vec();
    h.run(Command::Append(a)).unwrap();
    let (mut got, mut from) = (vec![], ReadFrom::Start);
    loop {
        let (bytes, plan) = h.read_at("s", from, 128).unwrap();
        assert!(bytes.len() <= 128);
        got.extend(bytes);
        if plan.up_to_date() {
            break;
        }
        assert!(!plan.up_to_date());
        from = ReadFrom::At(plan.next);
    }
    assert_eq!(got, data);
}

#[test]
fn offsets_beyond_tail_or_inside_json_messages_are_refused() {
    let mut h = Harness::default();
    h.run(create("j", "application/json")).unwrap();
    h.run(json_append("j", r#"[{"a":1},{"b":2}]"#)).unwrap();
    assert_eq!(
        h.read_at("j", ReadFrom::At(Offset(3)), 10).unwrap_err(),
        CoreError::OffsetNotOnBoundary
    );
    assert!(
        h.read_at("j", ReadFrom::At(Offset(8)), 10).is_ok(),
        "message boundary"
    );
    assert_eq!(
        h.read_at("j", ReadFrom::At(Offset(999)), 10).unwrap_err(),
        CoreError::OffsetBeyondTail
    );
}

#[test]
fn json_reads_are_arrays_of_messages_and_stop_on_message_boundaries() {
    let mut h = Harness::default();
    h.run(create("j", "application/json")).unwrap();
    h.run(json_append("j", r#"{"a":1}"#)).unwrap();
    h.run(json_append("j", r#"[{"b":2},[3]]"#)).unwrap();
    assert_eq!(h.read_json("j"), serde_json::json!([{"a":1},{"b":2},[3]]));
    let (first, plan) = h.read_at("j", ReadFrom::Start, 1).unwrap();
    assert_eq!(render_json_array(&first), br#"[{"a":1}]"#);
    assert!(!plan.up_to_date());
}

#[test]
fn stream_seq_must_strictly_increase_lexicographically() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let seq = |s: &str| {
        let mut a = append("s", b"x");
        a.stream_seq = Some(s.into());
        Command::Append(a)
    };
    h.run(seq("09")).unwrap();
    h.run(seq("10")).unwrap();
    assert!(matches!(
        h.run(seq("10")),
        Err(CoreError::StreamSeqRegression { .. })
    ));
    assert!(h.run(seq("2")).is_ok(), "\"2\" sorts after \"10\"");
    assert!(matches!(
        h.run(seq("10")),
        Err(CoreError::StreamSeqRegression { .. })
    ));
}

#[test]
fn content_type_must_match_except_for_close_only() {
    let mut h = Harness::default();
    h.run(create("s", "application/json")).unwrap();
    assert_eq!(
        h.run(Command::Append(append("s", b"x"))),
        Err(CoreError::ContentTypeMismatch)
    );
    let mut close = append("s", b"");
    close.close = true;
    assert!(matches!(
        h.run(Command::Append(close)),
        Ok(Applied::Appended { closed: true, .. })
    ));
}

#[test]
fn producers_dedupe_fence_and_detect_gaps() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let p = |epoch, seq, data: &str| with_producer(append("s", data.as_bytes()), "p", epoch, seq);
    assert!(matches!(
        h.run(p(0, 0, "a")),
        Ok(Applied::Appended {
            duplicate: false,
            ..
        })
    ));
    assert!(matches!(
        h.run(p(0, 1, "b")),
        Ok(Applied::Appended {
            duplicate: false,
            ..
        })
    ));
    assert_eq!(
        h.run(p(0, 0, "a")),
        Ok(Applied::Appended {
            next_offset: Offset(2),
            incarnation: h.incarnation("s"),
            closed: false,
            producer: Some((0, 1)),
            duplicate: true
        })
    );
    assert_eq!(
        h.run(p(0, 3, "d")),
        Err(CoreError::ProducerSeqGap {
            expected: 2,
            received: 3
        })
    );
    assert_eq!(h.run(p(1, 5, "x")), Err(CoreError::ProducerEpochSeqNotZero));
    h.run(p(1, 0, "c")).unwrap();
    assert_eq!(
        h.run(p(0, 2, "z")),
        Err(CoreError::ProducerStaleEpoch { current: 1 })
    );
    assert_eq!(h.read_all("s"), b"abc");
    // Another producer has its own sequence space.
    h.run(with_producer(append("s", b"q"), "other", 0, 0))
        .unwrap();
}

#[test]
fn producer_dedupe_wins_over_stream_seq() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let mut a = append("s", b"m");
    a.stream_seq = Some("001".into());
    h.run(with_producer(a.clone(), "p", 0, 0)).unwrap();
    assert!(matches!(
        h.run(with_producer(a, "p", 0, 0)),
        Ok(Applied::Appended {
            duplicate: true,
            ..
        })
    ));
}

#[test]
fn closed_streams_refuse_appends_but_ack_retries_and_close_again() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    let mut closing = append("s", b"final");
    closing.close = true;
    let closed_at = next_offset(h.run(with_producer(closing.clone(), "p", 0, 0)).unwrap());
    // The producer's retry, even with another body, is a duplicate.
    closing.body.data = b"other".to_vec();
    assert!(matches!(
        h.run(with_producer(closing.clone(), "p", 0, 0)),
        Ok(Applied::Appended {
            duplicate: true,
            ..
        })
    ));
    assert_eq!(
        h.run(with_producer(closing, "p", 0, 1)),
        Err(CoreError::Closed {
            next_offset: closed_at,
            incarnation: h.incarnation("s"),
        })
    );
    assert_eq!(
        h.run(Command::Append(append("s", b"x"))),
        Err(CoreError::Closed {
            next_offset: closed_at,
            incarnation: h.incarnation("s"),
        })
    );
    let mut close_only = append("s", b"");
    close_only.close = true;
    close_only.content_type = None;
    assert!(h.run(Command::Append(close_only)).is_ok());
    assert_eq!(h.read_all("s"), b"final");
    let (_, plan) = h.read_at("s", ReadFrom::Start, u64::MAX).unwrap();
    assert!(plan.reached_close());
    let (_, partial) = h.read_at("s", ReadFrom::Start, 2).unwrap();
    assert!(!partial.reached_close());
}

#[test]
fn forks_share_offsets_and_isolate_later_appends() {
    let mut h = Harness::default();
    h.run(create("src", "text/plain")).unwrap();
    let mid = next_offset(h.run(Command::Append(append("src", b"first"))).unwrap());
    h.run(Command::Append(append("src", b"second"))).unwrap();
    h.run(fork("f", "src", Some(mid.0), 0)).unwrap();
    assert_eq!(h.read_all("f"), b"first");
    h.run(Command::Append(append("f", b"+fork"))).unwrap();
    h.run(Command::Append(append("src", b"+src"))).unwrap();
    assert_eq!(h.read_all("f"), b"first+fork");
    assert_eq!(h.read_all("src"), b"firstsecond+src");
    let (own, _) = h.read_at("f", ReadFrom::At(mid), u64::MAX).unwrap();
    assert_eq!(own, b"+fork");
    assert_eq!(
        h.run(fork("g", "src", Some(9_999), 0)),
        Err(CoreError::ForkOffsetBeyondTail)
    );
    assert_eq!(
        h.run(fork("g", "missing", None, 0)),
        Err(CoreError::ForkSourceNotFound)
    );
}

#[test]
fn fork_sub_offsets_cut_bytes_or_messages_and_compose_through_chains() {
    let mut h = Harness::default();
    h.run(create("b", "text/plain")).unwrap();
    h.run(Command::Append(append("b", b"abcdef"))).unwrap();
    h.run(fork("b1", "b", Some(0), 4)).unwrap();
    assert_eq!(h.read_all("b1"), b"abcd");
    h.run(fork("b2", "b1", Some(0), 2)).unwrap();
    assert_eq!(h.read_all("b2"), b"ab");
    assert_eq!(
        h.run(fork("b3", "b1", Some(0), 5)),
        Err(CoreError::SubOffsetOutOfRange)
    );
    assert!(
        h.run(fork("b4", "b", Some(0), 6)).is_ok(),
        "equal to the append's length"
    );

    h.run(create("j", "application/json")).unwrap();
    h.run(json_append("j", r#"[{"a":1},{"b":2},{"c":3}]"#))
        .unwrap();
    h.run(fork("j1", "j", Some(0), 2)).unwrap();
    assert_eq!(h.read_json("j1"), serde_json::json!([{"a":1},{"b":2}]));
    assert_eq!(
        h.run(fork("j2", "j", Some(0), 4)),
        Err(CoreError::SubOffsetOutOfRange)
    );
    h.run(create("e", "text/plain")).unwrap();
    assert_eq!(
        h.run(fork("e1", "e", Some(0), 1)),
        Err(CoreError::SubOffsetOutOfRange)
    );
}

#[test]
fn fork_recreate_is_idempotent_only_with_the_same_fork_request() {
    let mut h = Harness::default();
    h.run(create("src", "text/plain")).unwrap();
    h.run(Command::Append(append("src", b"hello"))).unwrap();
    assert!(matches!(
        h.run(fork("f", "src", Some(0), 2)),
        Ok(Applied::Created { created: true, .. })
    ));
    assert!(matches!(
        h.run(fork("f", "src", Some(0), 2)),
        Ok(Applied::Created { created: false, .. })
    ));
    assert_eq!(
        h.run(fork("f", "src", Some(0), 3)),
        Err(CoreError::ConfigMismatch)
    );
}

#[test]
fn forks_start_with_fresh_producer_state_and_inherit_expiry() {
    let mut h = Harness::default();
    h.run(create_with("src", "text/plain", |c| {
        c.ttl_secs = Some(3600)
    }))
    .unwrap();
    h.run(with_producer(append("src", b"hello"), "p", 0, 0))
        .unwrap();
    let Applied::Created { stream, .. } = h.run(fork("f", "src", Some(0), 3)).unwrap() else {
        panic!()
    };
    assert_eq!(stream.ttl_secs, Some(3600));
    assert_eq!(stream.content_type, "text/plain");
    assert!(matches!(
        h.run(with_producer(append("f", b"LO"), "p", 0, 0)),
        Ok(Applied::Appended {
            duplicate: false,
            ..
        })
    ));
    assert_eq!(h.read_all("f"), b"helLO");
}

#[test]
fn deleting_a_forked_source_soft_deletes_until_the_last_fork_goes() {
    let mut h = Harness::default();
    h.run(create("l0", "text/plain")).unwrap();
    h.run(Command::Append(append("l0", b"A"))).unwrap();
    h.run(fork("l1", "l0", None, 0)).unwrap();
    h.run(fork("l2", "l1", None, 0)).unwrap();
    h.run(Command::Delete { name: "l0".into() }).unwrap();
    h.run(Command::Delete { name: "l1".into() }).unwrap();
    assert_eq!(h.state.head("l0", T0).unwrap_err(), CoreError::Gone);
    assert_eq!(
        h.run(Command::Delete { name: "l1".into() }),
        Err(CoreError::Gone)
    );
    assert_eq!(
        h.run(create("l0", "text/plain")),
        Err(CoreError::NameHeldBySoftDeleted)
    );
    assert_eq!(
        h.run(fork("x", "l1", None, 0)),
        Err(CoreError::ForkSourceGone)
    );
    assert_eq!(h.read_all("l2"), b"A");
    h.run(Command::Delete { name: "l2".into() }).unwrap();
    for name in ["l0", "l1", "l2"] {
        assert_eq!(
            h.state.head(name, T0).unwrap_err(),
            CoreError::NotFound,
            "{name}"
        );
    }
    assert_eq!(h.state.stream_count(), 0, "cascade leaves nothing behind");
    assert!(matches!(
        h.run(create("l0", "text/plain")),
        Ok(Applied::Created { created: true, .. })
    ));
}

#[test]
fn rejected_forks_take_no_reference() {
    let mut h = Harness::default();
    h.run(create("src", "text/plain")).unwrap();
    let mut bad = fork("f", "src", None, 0);
    if let Command::Create(c) = &mut bad {
        c.content_type = Some("application/json".into());
    }
    assert_eq!(h.run(bad), Err(CoreError::ContentTypeMismatch));
    h.run(Command::Delete { name: "src".into() }).unwrap();
    assert_eq!(h.state.head("src", T0).unwrap_err(), CoreError::NotFound);
}

#[test]
fn ttl_slides_on_reads_and_writes_but_expires_at_does_not() {
    let mut h = Harness::default();
    h.run_at(T0, create_with("t", "text/plain", |c| c.ttl_secs = Some(2)))
        .unwrap();
    assert!(h.state.head("t", T0 + 1_500).is_ok());
    // HEAD does not renew.
    assert_eq!(
        h.state.head("t", T0 + 2_000).unwrap_err(),
        CoreError::NotFound
    );
    // A read before expiry renews.
    h.state
        .plan_read("t", ReadFrom::Now, 1, T0 + 1_900)
        .unwrap();
    assert!(h.state.head("t", T0 + 3_000).is_ok());
    // A write renews too.
    h.run_at(T0 + 3_500, Command::Append(append("t", b"x")))
        .unwrap();
    assert!(h.state.head("t", T0 + 5_000).is_ok());
    assert_eq!(h.state.expired_ids(T0 + 5_600).len(), 1);

    h.run_at(
        T0,
        create_with("a", "text/plain", |c| c.expires_at_ms = Some(T0 + 4_000)),
    )
    .unwrap();
    h.state
        .plan_read("a", ReadFrom::Start, 1, T0 + 3_000)
        .unwrap();
    assert_eq!(
        h.state.head("a", T0 + 4_000).unwrap_err(),
        CoreError::NotFound
    );
}

#[test]
fn expiry_removes_streams_or_soft_deletes_forked_ones() {
    let mut h = Harness::default();
    h.run(create_with("src", "text/plain", |c| c.ttl_secs = Some(1)))
        .unwrap();
    h.run(create_with("f", "text/plain", |c| {
        c.content_type = None;
        c.ttl_secs = Some(60);
        c.fork = Some(ForkFrom {
            source: "src".into(),
            offset: None,
            sub_offset: 0,
        });
    }))
    .unwrap();
    let later = T0 + 1_000;
    assert_eq!(h.state.head("src", later).unwrap_err(), CoreError::Gone);
    let ids = h.state.expired_ids(later);
    assert_eq!(ids.len(), 1);
    h.run_at(later, Command::Expire { ids }).unwrap();
    assert_eq!(
        h.run_at(later, create("src", "text/plain")),
        Err(CoreError::NameHeldBySoftDeleted)
    );
    h.run_at(later, Command::Delete { name: "f".into() })
        .unwrap();
    assert_eq!(h.state.stream_count(), 0);
}

#[test]
fn deleted_names_can_be_recreated_with_fresh_content() {
    let mut h = Harness::default();
    h.run(create("s", "text/plain")).unwrap();
    h.run(Command::Append(append("s", b"old"))).unwrap();
    h.run(Command::Delete { name: "s".into() }).unwrap();
    assert_eq!(
        h.run(Command::Delete { name: "s".into() }),
        Err(CoreError::NotFound)
    );
    h.run(create("s", "text/plain")).unwrap();
    h.run(Command::Append(append("s", b"new"))).unwrap();
    assert_eq!(h.read_all("s"), b"new");
}

/// A random operation against a small name space.
#[derive(Debug, Clone)]
enum Op {
    Create(u8, bool),
    Append(u8, Vec<u8>, Option<(u8, u64, u64)>, bool),
    Delete(u8),
    Fork(u8, u8, Option<u64>, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8, any::<bool>()).prop_map(|(n, json)| Op::Create(n, json)),
        (
            0..4u8,
            proptest::collection::vec(any::<u8>(), 0..8),
            proptest::option::of((0..2u8, 0..2u64, 0..4u64)),
            any::<bool>()
        )
            .prop_map(|(n, d, p, c)| Op::Append(n, d, p, c)),
        (0..4u8).prop_map(Op::Delete),
        (0..4u8, 0..4u8, proptest::option::of(0..12u64), 0..4u64)
            .prop_map(|(n, s, o, sub)| Op::Fork(n, s, o, sub)),
    ]
}

fn to_command(op: &Op) -> Command {
    let name = |n: &u8| format!("s{n}");
    match op {
        Op::Create(n, json) => create(
            &name(n),
            if *json {
                "application/json"
            } else {
                "text/plain"
            },
        ),
        Op::Append(n, data, producer, close) => {
            let mut a = append(&name(n), data);
            a.close = *close;
            a.producer = producer.map(|(id, epoch, seq)| Producer {
                id: format!("p{id}"),
                epoch,
                seq,
            });
            Command::Append(a)
        }
        Op::Delete(n) => Command::Delete { name: name(n) },
        Op::Fork(n, s, o, sub) => fork(&name(n), &name(s), *o, *sub),
    }
}

proptest! {
    /// Paging through any stream with any budget returns exactly its bytes.
    #[test]
    fn paging_reassembles_the_stream(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..50), 1..20), budget in 1..64u64) {
        let mut h = Harness::default();
        h.run(create("s", "text/plain")).unwrap();
        let mut expected = vec![];
        for c in &chunks {
            h.run(Command::Append(append("s", c))).unwrap();
            expected.extend_from_slice(c);
        }
        let (mut got, mut from) = (vec![], ReadFrom::Start);
        loop {
            let (bytes, plan) = h.read_at("s", from, budget).unwrap();
            prop_assert!(bytes.len() as u64 <= budget);
            got.extend(bytes);
            if plan.up_to_date() { break; }
            from = ReadFrom::At(plan.next);
        }
        prop_assert_eq!(got, expected);
    }
}

proptest! {
    /// A replica that copies the live bytes into its own log, at other
    /// places, and relocates the state reads exactly what the original
    /// reads (how a Raft snapshot is installed).
    #[test]
    fn relocated_state_reads_the_same(ops in proptest::collection::vec(op(), 1..60)) {
        let mut h = Harness::default();
        for op in &ops {
            let _ = h.run(to_command(op));
        }
        let mut ranges = h.state.live_ranges();
        ranges.sort_unstable();
        ranges.dedup();
        // The copy puts the ranges in reverse order after a gap.
        let mut copy = vec![0xAAu8; 7];
        let mut moved = Vec::new();
        for (loc, len) in ranges.iter().rev() {
            moved.push((*loc, *len, copy.len() as u64));
            copy.extend_from_slice(&h.log[*loc as usize..(*loc + *len) as usize]);
        }
        let mut state = StreamsState::decode_checkpoint(&h.state.encode_checkpoint()).unwrap();
        state.relocate(|loc| {
            let (from, _, to) = moved
                .iter()
                .find(|(from, len, _)| loc >= *from && loc < from + (*len).max(1))
                .expect("every referenced byte was copied");
            to + (loc - from)
        });
        prop_assert_eq!(state.digest(), h.state.digest());
        let replica = Harness { state, log: copy, ..Harness::default() };
        for n in 0..4u8 {
            let name = format!("s{n}");
            if h.state.head(&name, T0).is_ok() {
                prop_assert_eq!(h.read_all(&name), replica.read_all(&name));
            }
        }
    }
}
