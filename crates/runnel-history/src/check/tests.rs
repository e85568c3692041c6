//! Each rule of the checker, shown to pass a correct history and to catch
//! the anomaly it exists for.

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
    ReadOp {
        stream: S.into(),
        reader,
        invoked,
        completed: invoked + 1,
        start,
        bytes: bytes.to_vec(),
        next: start + bytes.len() as u64,
        up_to_date,
    }
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
