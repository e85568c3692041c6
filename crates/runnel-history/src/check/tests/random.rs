//! Randomly generated histories: valid ones built from a true
//! linearization (the checker must pass every one, including the many
//! ties between timestamps it contains), and the same histories with one
//! mutation that makes them non-linearizable (the checker must flag every
//! one, with the anomaly class the mutation produces).

use std::collections::{BTreeMap, BTreeSet};

use super::legacy;
use crate::check::{check, AppendOp, History, Micros, ReadKind, ReadOp, Report};
use crate::record::payload;

/// splitmix64: small, deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Uniform in 0..=max.
    fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next() as usize % items.len()]
    }

    /// One of `items`, if there are any.
    fn choose<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| self.pick(items))
    }
}

/// The widest gap between an operation's invocation or completion and
/// its effect instant: small, so that stamps often coincide.
const WINDOW: u64 = 5;

/// One stream of a generated history, as it truly happened.
struct Truth {
    stream: String,
    /// Per append of the final contents, in order: its index in
    /// `History::appends`, its effect instant and where it ends.
    log: Vec<(usize, Micros, u64)>,
}

impl Truth {
    /// The numbers of appends the log may have held at instant `t`: all
    /// those before it, plus any prefix of those exactly at it.
    fn held_at(&self, t: Micros) -> (usize, usize) {
        let before = self.log.partition_point(|&(_, at, _)| at < t);
        let upto = self.log.partition_point(|&(_, at, _)| at <= t);
        (before, upto)
    }

    /// The log's length after `k` appends.
    fn len(&self, k: usize) -> u64 {
        k.checked_sub(1).map_or(0, |i| self.log[i].2)
    }
}

/// A valid history over two streams, with what truly happened.
fn generate(seed: u64, scale: u64) -> (History, BTreeMap<String, Vec<u8>>, Vec<Truth>) {
    let mut rng = Rng(seed);
    let mut history = History::default();
    let mut finals = BTreeMap::new();
    let mut truths = Vec::new();
    for (s, stream) in ["a", "b"].into_iter().enumerate() {
        let mut bytes = Vec::new();
        let mut truth = Truth {
            stream: stream.to_string(),
            log: Vec::new(),
        };
        let mut next_seq = [0u64; 4];
        let mut new_append = |rng: &mut Rng| {
            let w = rng.upto(3) as usize;
            next_seq[w] += 1;
            (10 * s as u32 + w as u32 + 1, next_seq[w])
        };
        // Appends that happened, at non-decreasing instants (often equal),
        // more or fewer of them acknowledged (faults leave many in doubt).
        let ack_rate = rng.pick(&[0, 30, 80, 95]);
        let mut t = 0;
        for _ in 0..rng.upto(scale * 40) {
            t += rng.upto(3);
            let (writer, seq) = new_append(&mut rng);
            bytes.extend(payload(writer, seq));
            let acked = rng.chance(ack_rate).then(|| t + rng.upto(WINDOW));
            history.appends.push(AppendOp {
                stream: stream.to_string(),
                writer,
                seq,
                invoked: t - rng.upto(WINDOW.min(t)),
                acked,
                end: (acked.is_some() && rng.chance(70)).then_some(bytes.len() as u64),
            });
            truth
                .log
                .push((history.appends.len() - 1, t, bytes.len() as u64));
        }
        let horizon = t + WINDOW;
        // Appends in doubt that never happened.
        for _ in 0..rng.upto(3) {
            let (writer, seq) = new_append(&mut rng);
            history.appends.push(AppendOp {
                stream: stream.to_string(),
                writer,
                seq,
                invoked: rng.upto(horizon),
                acked: None,
                end: None,
            });
        }
        // Catch-up reads and long-polls: a read takes effect at an instant
        // (often exactly an append's), sees the log as it was then, and is
        // stamped around it. Readers are assigned afterwards.
        let mut reads = Vec::new();
        let instant = |rng: &mut Rng| match truth.log.len() {
            n if n > 0 && rng.chance(40) => truth.log[rng.upto(n as u64 - 1) as usize].1,
            _ => rng.upto(horizon),
        };
        for _ in 0..rng.upto(scale * 60) {
            let at = instant(&mut rng);
            let (before, upto) = truth.held_at(at);
            let held = before + rng.upto((upto - before) as u64) as usize;
            let len = truth.len(held);
            let (start, next, up_to_date) = if rng.chance(60) {
                // To the tail, from an append boundary.
                let from = rng.upto(held as u64) as usize;
                (truth.len(from), len, true)
            } else {
                // A page: any range of what the log held.
                let start = rng.upto(len);
                (start, start + rng.upto(len - start), false)
            };
            reads.push(ReadOp {
                stream: stream.to_string(),
                reader: 0,
                invoked: at - rng.upto(WINDOW.min(at)),
                completed: at + rng.upto(WINDOW),
                start,
                bytes: bytes[start as usize..next as usize].to_vec().into(),
                next,
                up_to_date,
                kind: rng.pick(&[ReadKind::CatchUp, ReadKind::LongPoll]),
            });
        }
        // Each reader's reads are sequential: a read goes to a reader
        // whose previous read completed before it was invoked, or to a new
        // reader.
        reads.sort_by_key(|r| r.invoked);
        let mut last_completed: Vec<Micros> = Vec::new();
        for mut r in reads {
            let free: Vec<usize> = (0..last_completed.len())
                .filter(|&i| last_completed[i] < r.invoked)
                .collect();
            let reader = match rng.choose(&free) {
                Some(reader) if rng.chance(90) => reader,
                _ => {
                    last_completed.push(0);
                    last_completed.len() - 1
                }
            };
            last_completed[reader] = r.completed;
            r.reader = reader as u32;
            history.reads.push(r);
        }
        // SSE sessions: each event is invoked when the previous one was
        // received, and the log only grows between them.
        for session in 0..rng.upto(scale * 2) {
            let reader = 100 + session as u32;
            let mut received = rng.upto(horizon);
            let mut held = truth.held_at(received).0;
            for _ in 0..rng.upto(6) {
                let at = received + rng.upto(WINDOW);
                let (before, upto) = truth.held_at(at);
                let least = before.max(held);
                let now = least + rng.upto((upto - least) as u64) as usize;
                let (start, next) = (truth.len(held), truth.len(now));
                let completed = at + rng.upto(WINDOW);
                history.reads.push(ReadOp {
                    stream: stream.to_string(),
                    reader,
                    invoked: received,
                    completed,
                    start,
                    bytes: bytes[start as usize..next as usize].to_vec().into(),
                    next,
                    up_to_date: true,
                    kind: ReadKind::Sse,
                });
                (received, held) = (completed, now);
            }
        }
        finals.insert(stream.to_string(), bytes);
        truths.push(truth);
    }
    (history, finals, truths)
}

/// Stamps that coincide where a checker with strict inequalities (or one
/// that took equal stamps as ordered) would see an anomaly, counted by
/// kind: [a tail read invoked as an append it missed was acknowledged, an
/// append invoked as a later one was acknowledged, a tail read invoked as
/// another read that saw further completed, a read completed as an
/// append it saw was invoked].
fn ties(history: &History, truths: &[Truth]) -> [usize; 4] {
    let mut out = [0; 4];
    for truth in truths {
        let ops: Vec<&AppendOp> = truth
            .log
            .iter()
            .map(|&(i, ..)| &history.appends[i])
            .collect();
        let ends: Vec<u64> = truth.log.iter().map(|&(.., end)| end).collect();
        let reads: Vec<&ReadOp> = history
            .reads
            .iter()
            .filter(|r| r.stream == truth.stream)
            .collect();
        for r in reads.iter().filter(|r| r.up_to_date) {
            let held = ends.partition_point(|&e| e <= r.next);
            if ops[held..].iter().any(|a| a.acked == Some(r.invoked)) {
                out[0] += 1;
            }
            if reads
                .iter()
                .any(|other| other.completed == r.invoked && other.next > r.next)
            {
                out[2] += 1;
            }
        }
        for (j, a) in ops.iter().enumerate() {
            if ops[j + 1..].iter().any(|b| b.acked == Some(a.invoked)) {
                out[1] += 1;
            }
            let start = j.checked_sub(1).map_or(0, |i| ends[i]);
            if reads
                .iter()
                .any(|r| r.next > start && r.completed == a.invoked)
            {
                out[3] += 1;
            }
        }
    }
    out
}

fn judge(history: &History, finals: &BTreeMap<String, Vec<u8>>) -> Report {
    check(history, finals)
}

fn rules(report: &Report) -> BTreeSet<String> {
    report
        .anomalies
        .iter()
        .map(|a| a.split(": ").nth(1).unwrap().to_string())
        .collect()
}

#[test]
fn random_valid_histories_pass() {
    let mut tied = [0; 4];
    let (mut appends, mut reads) = (0, 0);
    for seed in 0..400 {
        let (history, finals, truths) = generate(seed, 1);
        let report = judge(&history, &finals);
        assert!(report.ok(), "seed {seed}: {:#?}", report.anomalies);
        assert_eq!(report.linearized_reads, history.reads.len(), "seed {seed}");
        assert!(legacy::old_timing_rules(&history, &finals).is_empty());
        for (total, n) in tied.iter_mut().zip(ties(&history, &truths)) {
            *total += n;
        }
        appends += report.linearized_appends;
        reads += report.linearized_reads;
    }
    // The histories are not trivially easy: they hold ties of every kind
    // that a too-strict checker would flag.
    assert!(tied.iter().all(|&n| n >= 10), "ties {tied:?}");
    assert!(
        appends > 5_000 && reads > 10_000,
        "{appends} appends, {reads} reads"
    );
}

#[test]
fn one_long_random_valid_history_passes() {
    let (history, finals, _) = generate(0x5eed, 100);
    let report = judge(&history, &finals);
    assert!(report.ok(), "{:#?}", report.anomalies);
    assert!(report.linearized_appends > 1_000, "{}", report.summary());
}

/// The mutations, each of which makes a valid history non-linearizable.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    /// A tail read invoked after an append was acknowledged misses it.
    StaleAgainstAck,
    /// A tail read invoked after another read (of another reader, or of
    /// the same one) completed having seen an append misses it.
    StaleAcrossReaders,
    /// An append is invoked after a later one in the log was acknowledged.
    Reorder,
    /// An append is invoked after a read that saw it completed.
    Future,
    /// A tail read ends inside an append.
    MidAppend,
}

/// Applies `mutation` to a stream of the history, if it has what it needs,
/// and returns the anomaly classes it may be reported as.
fn mutate(
    mutation: Mutation,
    rng: &mut Rng,
    history: &mut History,
    finals: &BTreeMap<String, Vec<u8>>,
    truth: &Truth,
) -> Option<&'static [&'static str]> {
    let bytes = &finals[&truth.stream];
    let n = truth.log.len();
    let boundary = |rng: &mut Rng, held: usize| truth.len(rng.upto(held as u64) as usize);
    let reads_here: Vec<usize> = (0..history.reads.len())
        .filter(|&i| history.reads[i].stream == truth.stream)
        .collect();
    match mutation {
        Mutation::StaleAgainstAck => {
            let acked: Vec<usize> = (0..n)
                .filter(|&j| history.appends[truth.log[j].0].acked.is_some())
                .collect();
            let j = rng.choose(&acked)?;
            let ack = history.appends[truth.log[j].0].acked?;
            let (start, next) = (boundary(rng, j), truth.len(j));
            let invoked = ack + 1 + rng.upto(3);
            history.reads.push(ReadOp {
                stream: truth.stream.clone(),
                reader: rng.upto(5) as u32,
                invoked,
                completed: invoked + rng.upto(3),
                start,
                bytes: bytes[start as usize..next as usize].to_vec().into(),
                next,
                up_to_date: true,
                kind: ReadKind::CatchUp,
            });
            Some(&["stale read", "reader went backwards"])
        }
        Mutation::StaleAcrossReaders => {
            // A read that saw into append j, and another tail read moved
            // to after it and cut back to before j.
            let seen: Vec<usize> = reads_here
                .iter()
                .copied()
                .filter(|&i| history.reads[i].next > 0)
                .collect();
            let u = rng.choose(&seen)?;
            let tails: Vec<usize> = reads_here
                .iter()
                .copied()
                .filter(|&i| i != u && history.reads[i].up_to_date)
                .collect();
            let early = history.reads[u].clone();
            let j = truth.log.partition_point(|&(.., end)| end < early.next);
            let (start, next) = (boundary(rng, j), truth.len(j));
            let invoked = early.completed + 1 + rng.upto(3);
            let late = ReadOp {
                stream: truth.stream.clone(),
                reader: if rng.chance(30) {
                    early.reader
                } else {
                    rng.upto(5) as u32
                },
                invoked,
                completed: invoked + rng.upto(3),
                start,
                bytes: bytes[start as usize..next as usize].to_vec().into(),
                next,
                up_to_date: true,
                kind: rng.pick(&[ReadKind::CatchUp, ReadKind::LongPoll, ReadKind::Sse]),
            };
            match tails.is_empty() {
                true => history.reads.push(late),
                false => history.reads[rng.pick(&tails)] = late,
            }
            Some(&["stale read", "reader went backwards"])
        }
        Mutation::Reorder => {
            // Appends j < k, k acknowledged: j invoked after that.
            let pairs: Vec<(usize, usize)> = (1..n)
                .filter(|&k| history.appends[truth.log[k].0].acked.is_some())
                .map(|k| (rng.upto(k as u64 - 1) as usize, k))
                .collect();
            let (j, k) = rng.choose(&pairs)?;
            let ack = history.appends[truth.log[k].0].acked?;
            let a = &mut history.appends[truth.log[j].0];
            a.invoked = ack + 1 + rng.upto(3);
            a.acked = a.acked.map(|t| t.max(a.invoked));
            Some(&["real-time order", "read from the future"])
        }
        Mutation::Future => {
            // A read that holds bytes of append j: j invoked after it.
            let seen: Vec<(usize, usize)> = reads_here
                .iter()
                .filter(|&&i| history.reads[i].next > history.reads[i].start)
                .map(|&i| {
                    let r = &history.reads[i];
                    let first = truth.log.partition_point(|&(.., end)| end <= r.start);
                    let last = truth.log.partition_point(|&(.., end)| end < r.next);
                    (i, first + rng.upto((last - first) as u64) as usize)
                })
                .collect();
            let (u, j) = rng.choose(&seen)?;
            let completed = history.reads[u].completed;
            let a = &mut history.appends[truth.log[j].0];
            a.invoked = completed + 1 + rng.upto(3);
            a.acked = a.acked.map(|t| t.max(a.invoked));
            Some(&["read from the future", "real-time order"])
        }
        Mutation::MidAppend => {
            let tails: Vec<usize> = reads_here
                .iter()
                .copied()
                .filter(|&i| history.reads[i].up_to_date && history.reads[i].next > 0)
                .collect();
            let i = rng.choose(&tails)?;
            let r = &mut history.reads[i];
            let j = truth.log.partition_point(|&(.., end)| end < r.next);
            let start_j = truth.len(j);
            // Back by 1 or more bytes, staying inside append j.
            let cut = 1 + rng.upto(r.next - start_j - 2);
            let keep = r.bytes.len().checked_sub(cut as usize)?;
            if r.start >= r.next - cut {
                return None;
            }
            r.bytes.truncate(keep);
            r.next -= cut;
            Some(&["read ended mid-append"])
        }
    }
}

#[test]
fn random_histories_with_one_anomaly_are_flagged() {
    let kinds = [
        Mutation::StaleAgainstAck,
        Mutation::StaleAcrossReaders,
        Mutation::Reorder,
        Mutation::Future,
        Mutation::MidAppend,
    ];
    let mut applied = [0; 5];
    let mut old_missed = [0; 5];
    for seed in 0..500 {
        let (mut history, finals, truths) = generate(seed, 1);
        let mut rng = Rng(!seed);
        let which = seed as usize % kinds.len();
        let truth = &truths[rng.upto(1) as usize];
        let Some(expected) = mutate(kinds[which], &mut rng, &mut history, &finals, truth) else {
            continue;
        };
        applied[which] += 1;
        let report = judge(&history, &finals);
        let found = rules(&report);
        assert!(
            !found.is_empty() && found.iter().all(|r| expected.contains(&r.as_str())),
            "seed {seed}, {:?}: expected one of {expected:?}, got {:#?}",
            kinds[which],
            report.anomalies
        );
        if legacy::old_checker_passes(&history, &finals) {
            old_missed[which] += 1;
        }
    }
    // Every mutation was tried many times, and many of the stale reads
    // across readers, reads from the future and tails inside an append
    // were ones the old rules missed: a checker without the decision would
    // fail this test.
    assert!(applied.iter().all(|&n| n >= 60), "applied {applied:?}");
    assert!(
        old_missed[1] >= 10 && old_missed[3] >= 10 && old_missed[4] >= 10,
        "missed {old_missed:?}"
    );
}
