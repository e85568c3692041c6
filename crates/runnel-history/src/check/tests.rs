//! Each rule of the checker, shown to pass a correct history and to catch
//! the anomaly it exists for.

mod legacy;
mod oracle;
mod random;

use super::*;
use crate::record::payload;

const S: &str = "s";

fn append(
    writer: u32,
    seq: u64,
    invoked: Micros,
    acked: Option<Micros>,
    end: Option<u64>,
) -> AppendOp {
    AppendOp {
        stream: S.into(),
        writer,
        seq,
        invoked,
        acked,
        end,
    }
}

fn read(reader: u32, invoked: Micros, start: u64, bytes: &[u8], up_to_date: bool) -> ReadOp {
    span(reader, invoked, invoked + 1, start, bytes, up_to_date)
}

/// A read over [invoked, completed] of `bytes` from `start`.
fn span(
    reader: u32,
    invoked: Micros,
    completed: Micros,
    start: u64,
    bytes: &[u8],
    up_to_date: bool,
) -> ReadOp {
    ReadOp {
        stream: S.into(),
        reader,
        invoked,
        completed,
        start,
        bytes: bytes.to_vec().into(),
        next: start + bytes.len() as u64,
        up_to_date,
        kind: ReadKind::CatchUp,
    }
}

/// The concatenated payloads of `appends`, and where each ends.
fn log_of(appends: &[(u32, u64)]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for &(writer, seq) in appends {
        bytes.extend(payload(writer, seq));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

/// Writer 1's appends 0..n, each acknowledged before the next is sent,
/// and the stream holding them.
fn sequential(n: u64) -> (Vec<AppendOp>, Vec<u8>) {
    let mut bytes = Vec::new();
    let mut appends = Vec::new();
    for seq in 0..n {
        bytes.extend(payload(1, seq));
        let t = seq * 10;
        appends.push(append(1, seq, t, Some(t + 5), Some(bytes.len() as u64)));
    }
    (appends, bytes)
}

fn judge(appends: Vec<AppendOp>, reads: Vec<ReadOp>, final_bytes: Vec<u8>) -> Report {
    let history = History { appends, reads };
    check(&history, &BTreeMap::from([(S.to_string(), final_bytes)]))
}

/// Whether the checker before the linearizability decision passed it.
fn old_checker_passes(appends: &[AppendOp], reads: &[ReadOp], final_bytes: &[u8]) -> bool {
    let history = History {
        appends: appends.to_vec(),
        reads: reads.to_vec(),
    };
    let finals = BTreeMap::from([(S.to_string(), final_bytes.to_vec())]);
    legacy::old_checker_passes(&history, &finals)
}

fn rules(report: &Report) -> Vec<String> {
    report
        .anomalies
        .iter()
        .map(|a| a.split(": ").nth(1).unwrap().to_string())
        .collect()
}

#[test]
fn a_correct_history_passes() {
    let (mut appends, bytes) = sequential(3);
    // One in doubt that landed, one that did not.
    let mut full = bytes.clone();
    full.extend(payload(2, 0));
    appends.push(append(2, 0, 40, None, None));
    appends.push(append(2, 1, 50, None, None));
    let first = payload(1, 0).len();
    let reads = vec![
        read(9, 6, 0, &bytes[..first], true),
        read(9, 30, 0, &bytes, true),
        read(8, 31, first as u64, &bytes[first..], false),
    ];
    let report = judge(appends, reads, full);
    assert!(report.ok(), "{:?}", report.anomalies);
    assert_eq!(
        (
            report.acked,
            report.in_doubt_landed,
            report.in_doubt_missing
        ),
        (3, 1, 1)
    );
    assert_eq!((report.reads, report.tail_reads), (3, 2));
    assert_eq!((report.linearized_appends, report.linearized_reads), (4, 3));
    assert!(report
        .summary()
        .contains("linearizability decided over 4 appends and 3 reads, 0 anomalies"));
}

#[test]
fn a_lost_acknowledged_append_is_caught() {
    let (appends, bytes) = sequential(3);
    let cut = bytes.len() - payload(1, 2).len();
    let report = judge(appends, vec![], bytes[..cut].to_vec());
    assert_eq!(rules(&report), ["lost acknowledged append"]);
}

#[test]
fn foreign_duplicate_and_damaged_contents_are_caught() {
    let (appends, bytes) = sequential(2);
    let mut twice = bytes.clone();
    twice.extend(payload(1, 1));
    twice.extend(payload(5, 0));
    let report = judge(appends.clone(), vec![], twice);
    assert_eq!(rules(&report), ["duplicate", "foreign append"]);

    let mut damaged = bytes;
    damaged.push(b'x');
    let report = judge(appends, vec![], damaged);
    assert_eq!(rules(&report), ["final contents"]);
}

#[test]
fn an_append_at_another_offset_than_acknowledged_is_caught() {
    let (mut appends, bytes) = sequential(2);
    appends[1].end = Some(appends[1].end.unwrap() + 1);
    let report = judge(appends, vec![], bytes);
    assert_eq!(rules(&report), ["acknowledged offset"]);
}

#[test]
fn real_time_order_is_enforced_only_between_ordered_appends() {
    // Writer 2's append was acknowledged (t=5) before writer 1's was
    // invoked (t=10), yet comes after it.
    let mut bytes = payload(1, 0);
    bytes.extend(payload(2, 0));
    let appends = vec![
        append(1, 0, 10, Some(20), None),
        append(2, 0, 0, Some(5), None),
    ];
    let report = judge(appends, vec![], bytes.clone());
    assert_eq!(rules(&report), ["real-time order"]);

    // Concurrent appends may land in either order.
    let appends = vec![
        append(1, 0, 10, Some(20), None),
        append(2, 0, 0, Some(15), None),
    ];
    assert!(judge(appends, vec![], bytes).ok());
}

#[test]
fn a_read_of_bytes_the_stream_does_not_hold_is_caught() {
    let (appends, bytes) = sequential(2);
    // The read saw an append that the final stream lost (or never had).
    let mut seen = bytes.clone();
    seen.extend(payload(1, 9));
    let report = judge(
        appends.clone(),
        vec![read(1, 100, 0, &seen, true)],
        bytes.clone(),
    );
    assert_eq!(rules(&report), ["read not in the final stream"]);

    let mut bad = read(1, 100, 0, &bytes, true);
    bad.next += 1;
    let report = judge(appends, vec![bad], bytes);
    assert_eq!(rules(&report), ["read framing"]);
}

#[test]
fn a_stale_read_at_the_tail_is_caught_and_a_concurrent_one_is_not() {
    let (appends, bytes) = sequential(3);
    let two = bytes.len() - payload(1, 2).len();
    // Append 2 was acknowledged at t=25; a read invoked at t=26 that
    // stops before it is stale.
    let report = judge(
        appends.clone(),
        vec![read(1, 26, 0, &bytes[..two], true)],
        bytes.clone(),
    );
    assert_eq!(rules(&report), ["stale read"]);
    // Invoked at t=24, while it was still in flight: fine.
    let report = judge(
        appends.clone(),
        vec![read(1, 24, 0, &bytes[..two], true)],
        bytes.clone(),
    );
    assert!(report.ok(), "{:?}", report.anomalies);
    // Not at the tail (a page of a longer read): not held to it.
    let report = judge(appends, vec![read(1, 26, 0, &bytes[..two], false)], bytes);
    assert!(report.ok(), "{:?}", report.anomalies);
}

#[test]
fn a_reader_going_backwards_is_caught() {
    let (_, bytes) = sequential(2);
    let one = payload(1, 0).len();
    // No acknowledgements to be stale against: only the reader's order.
    let appends = vec![append(1, 0, 0, None, None), append(1, 1, 1, None, None)];
    let reads = vec![
        read(4, 10, 0, &bytes, true),
        read(4, 20, 0, &bytes[..one], true),
    ];
    let report = judge(appends.clone(), reads, bytes.clone());
    assert_eq!(rules(&report), ["reader went backwards"]);
    // A page that does not reach the tail (a new pass from the start) is
    // no step back.
    let reads = vec![
        read(4, 10, 0, &bytes, true),
        read(4, 20, 0, &bytes[..one], false),
    ];
    assert!(judge(appends, reads, bytes).ok());
}

#[test]
fn a_stale_read_across_readers_is_caught_where_the_old_rules_were_blind() {
    // Writer 1's append is acknowledged at 5; writer 2's (X) is invoked
    // at 10 and acknowledged only at 50.
    let (bytes, ends) = log_of(&[(1, 0), (2, 0)]);
    let appends = vec![
        append(1, 0, 0, Some(5), None),
        append(2, 0, 10, Some(50), None),
    ];
    // Reader 1 sees X by 21; reader 2, invoked at 30 (after reader 1
    // completed) reaches the tail without it. No acknowledgement came
    // before reader 2 was invoked, and they are different readers: only
    // the cross-reader rule sees it.
    let mut reads = vec![
        span(1, 20, 21, 0, &bytes, true),
        span(2, 30, 31, 0, &bytes[..ends[0]], true),
    ];
    assert!(old_checker_passes(&appends, &reads, &bytes));
    let report = judge(appends.clone(), reads.clone(), bytes.clone());
    assert_eq!(rules(&report), ["stale read"]);
    let line = &report.anomalies[0];
    assert!(
        line.contains("reader 2") && line.contains("reader 1"),
        "{line}"
    );
    assert!(line.contains("cross-reader"), "{line}");

    // Reader 2 as a page that does not claim the tail: fine.
    reads[1].up_to_date = false;
    let report = judge(appends, reads, bytes);
    assert!(report.ok(), "{:?}", report.anomalies);
}

#[test]
fn a_stale_read_against_an_in_doubt_append_another_reader_saw() {
    // Writer 2's append never got an answer, but it landed and reader 1
    // saw it; reader 2 later misses it.
    let (bytes, ends) = log_of(&[(1, 0), (2, 0)]);
    let appends = vec![
        append(1, 0, 0, Some(5), None),
        append(2, 0, 10, None, None),
        // In doubt and never landed: no part of the timeline.
        append(3, 0, 12, None, None),
    ];
    let reads = vec![
        span(1, 11, 12, 0, &bytes[..ends[0]], true),
        span(1, 100, 101, 0, &bytes, true),
        span(2, 200, 201, ends[0] as u64, &[], true),
    ];
    let report = judge(appends.clone(), reads[..2].to_vec(), bytes.clone());
    assert!(report.ok(), "{:?}", report.anomalies);
    assert_eq!((report.in_doubt_landed, report.in_doubt_missing), (1, 1));
    let report = judge(appends, reads, bytes);
    assert_eq!(rules(&report), ["stale read"]);
    assert!(report.anomalies[0].contains("never acknowledged"));
}

#[test]
fn an_append_invoked_after_a_later_one_was_seen_is_out_of_order() {
    // Nothing acknowledged: only a read shows writer 2's append had taken
    // effect by 11, yet writer 1's, invoked at 30, comes before it.
    let (bytes, ends) = log_of(&[(1, 0), (2, 0)]);
    let appends = vec![append(1, 0, 30, None, None), append(2, 0, 0, None, None)];
    let reads = vec![span(1, 10, 11, ends[0] as u64, &bytes[ends[0]..], false)];
    assert!(old_checker_passes(&appends, &reads, &bytes));
    let report = judge(appends, reads, bytes);
    assert_eq!(rules(&report), ["real-time order"]);
    assert!(report.anomalies[0].contains("writer 1 seq 0 was invoked at 30 us"));
}

#[test]
fn a_read_of_an_append_before_it_was_invoked_is_caught() {
    let (bytes, _) = log_of(&[(1, 0)]);
    let reads = vec![span(1, 5, 10, 0, &bytes, true)];
    // Invoked at 10, the microsecond the read completed: concurrent.
    let report = judge(
        vec![append(1, 0, 10, Some(20), None)],
        reads.clone(),
        bytes.clone(),
    );
    assert!(report.ok(), "{:?}", report.anomalies);
    let report = judge(vec![append(1, 0, 11, Some(20), None)], reads, bytes);
    assert_eq!(rules(&report), ["read from the future"]);
}

#[test]
fn a_read_of_foreign_bytes_is_caught() {
    let (appends, bytes) = sequential(1);
    let mut seen = bytes.clone();
    seen.extend(b"hello");
    let report = judge(appends, vec![read(1, 100, 0, &seen, true)], bytes);
    assert_eq!(rules(&report), ["read not in the final stream"]);
    assert_eq!(report.linearized_reads, 0);
}

#[test]
fn a_tail_read_ending_inside_an_append_is_caught() {
    let (bytes, ends) = log_of(&[(1, 0), (1, 1)]);
    let appends = vec![
        append(1, 0, 0, Some(5), None),
        append(1, 1, 10, Some(15), None),
    ];
    let cut = &bytes[..ends[0] + 7];
    let report = judge(
        appends.clone(),
        vec![read(1, 20, 0, cut, true)],
        bytes.clone(),
    );
    assert_eq!(rules(&report), ["read ended mid-append"]);
    // A page cut inside an append, not claiming the tail, is fine.
    let report = judge(appends, vec![read(1, 20, 0, cut, false)], bytes);
    assert!(report.ok(), "{:?}", report.anomalies);
}

#[test]
fn a_reader_going_backwards_over_sse_is_named() {
    let (bytes, ends) = log_of(&[(1, 0), (1, 1)]);
    let appends = vec![append(1, 0, 0, None, None), append(1, 1, 1, None, None)];
    // An SSE session's event saw both appends; the same reader's next
    // catch-up read reached the tail after the first only.
    let mut event = span(4, 2, 10, 0, &bytes, true);
    event.kind = ReadKind::Sse;
    let reads = vec![event, span(4, 20, 21, 0, &bytes[..ends[0]], true)];
    let report = judge(appends, reads, bytes);
    assert_eq!(rules(&report), ["reader went backwards"]);
    let line = &report.anomalies[0];
    assert!(
        line.contains("SSE event") && line.contains("catch-up read"),
        "{line}"
    );
}

#[test]
fn several_anomalies_are_listed_not_just_the_first() {
    let (appends, bytes) = sequential(4);
    let (_, ends) = log_of(&[(1, 0), (1, 1), (1, 2), (1, 3)]);
    // Appends take [0,5], [10,15], [20,25], [30,35]: the first read misses
    // the second append (acknowledged at 15), the other the fourth.
    let reads = vec![
        read(1, 16, 0, &bytes[..ends[0]], true),
        read(2, 36, 0, &bytes[..ends[2]], true),
    ];
    let report = judge(appends, reads, bytes);
    assert_eq!(rules(&report), ["stale read", "stale read"]);
}

#[test]
fn concurrent_appends_and_reads_pass_in_either_order() {
    // Two appends overlap in time ([0,20] and [5,15]); readers overlap
    // both and see the log empty, after one, after both.
    for order in [[(1, 0), (2, 0)], [(2, 0), (1, 0)]] {
        let (bytes, ends) = log_of(&order);
        let appends = vec![
            append(1, 0, 0, Some(20), None),
            append(2, 0, 5, Some(15), None),
        ];
        let reads = vec![
            span(1, 1, 30, 0, &[], true),
            span(2, 2, 25, 0, &bytes[..ends[0]], true),
            span(3, 3, 40, 0, &bytes, true),
            span(4, 14, 16, 0, &bytes[..ends[0]], true),
            span(5, 14, 16, 0, &bytes[..ends[0] + 3], false),
        ];
        let report = judge(appends, reads, bytes);
        assert!(report.ok(), "{order:?}: {:?}", report.anomalies);
        assert_eq!(report.linearized_reads, 5);
    }
}

#[test]
fn equal_timestamps_are_concurrent_and_one_more_microsecond_is_not() {
    let (bytes, ends) = log_of(&[(1, 0), (2, 0)]);
    let first = &bytes[..ends[0]];

    // A tail read invoked in the microsecond an append was acknowledged
    // may miss it.
    let appends = |x_acked| {
        vec![
            append(1, 0, 0, Some(1), None),
            append(2, 0, 2, Some(x_acked), None),
        ]
    };
    let report = judge(
        appends(10),
        vec![span(1, 10, 11, 0, first, true)],
        bytes.clone(),
    );
    assert!(report.ok(), "{:?}", report.anomalies);
    let report = judge(
        appends(9),
        vec![span(1, 10, 11, 0, first, true)],
        bytes.clone(),
    );
    assert_eq!(rules(&report), ["stale read"]);

    // An append invoked in the microsecond another was acknowledged may
    // still come first.
    let ordered = |invoked| {
        vec![
            append(1, 0, invoked, Some(30), None),
            append(2, 0, 0, Some(10), None),
        ]
    };
    assert!(judge(ordered(10), vec![], bytes.clone()).ok());
    let report = judge(ordered(11), vec![], bytes.clone());
    assert_eq!(rules(&report), ["real-time order"]);

    // Across readers: one invoked as the other completes is concurrent.
    let appends = vec![append(1, 0, 0, Some(1), None), append(2, 0, 2, None, None)];
    let seen_then_missed = |invoked| {
        vec![
            span(1, 5, 20, 0, &bytes, true),
            span(2, invoked, 30, 0, first, true),
        ]
    };
    let report = judge(appends.clone(), seen_then_missed(20), bytes.clone());
    assert!(report.ok(), "{:?}", report.anomalies);
    let report = judge(appends, seen_then_missed(21), bytes.clone());
    assert_eq!(rules(&report), ["stale read"]);

    // Operations of no duration at one instant: both appends and a read
    // between them, all at 7.
    let appends = vec![
        append(1, 0, 7, Some(7), None),
        append(2, 0, 7, Some(7), None),
    ];
    let reads = vec![span(1, 7, 7, 0, first, true)];
    let report = judge(appends, reads, bytes.clone());
    assert!(report.ok(), "{:?}", report.anomalies);

    // The empty log, read as the first append is acknowledged.
    let appends = vec![
        append(1, 0, 0, Some(10), None),
        append(2, 0, 20, Some(25), None),
    ];
    let empty_at = |invoked| vec![span(1, invoked, invoked, 0, &[], true)];
    assert!(judge(appends.clone(), empty_at(10), bytes.clone()).ok());
    let report = judge(appends, empty_at(11), bytes);
    assert_eq!(rules(&report), ["stale read"]);
}

#[test]
fn reads_of_an_empty_stream_and_at_the_tail_pass() {
    // Nothing appended; the stream is not even in the final contents.
    let reads = vec![read(1, 0, 0, &[], true), read(2, 5, 0, &[], false)];
    let history = History {
        appends: vec![],
        reads: reads.clone(),
    };
    let report = check(&history, &BTreeMap::new());
    assert!(report.ok(), "{:?}", report.anomalies);
    assert_eq!((report.linearized_appends, report.linearized_reads), (0, 2));

    // An empty read at the tail of a longer stream, and one of the empty
    // log before the first append.
    let (appends, bytes) = sequential(2);
    let end = bytes.len() as u64;
    let reads = vec![read(1, 100, end, &[], true), read(2, 0, 0, &[], true)];
    let report = judge(appends.clone(), reads, bytes.clone());
    assert!(report.ok(), "{:?}", report.anomalies);
    // But not one of the empty log after it was acknowledged.
    let report = judge(appends, vec![read(2, 6, 0, &[], true)], bytes);
    assert_eq!(rules(&report), ["stale read"]);
}

#[test]
fn an_operation_completed_before_it_was_invoked_is_caught() {
    let (appends, bytes) = sequential(1);
    let report = judge(
        appends.clone(),
        vec![span(1, 10, 9, 0, &bytes, true)],
        bytes.clone(),
    );
    assert_eq!(rules(&report), ["operation times"]);
    let mut backwards = appends;
    backwards[0].acked = Some(0);
    backwards[0].invoked = 3;
    let report = judge(backwards, vec![], bytes);
    assert_eq!(rules(&report), ["operation times"]);
}
