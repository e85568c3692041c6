//! The decision against the definition: on small random histories (valid
//! or not), the checker passes exactly those for which an exhaustive
//! search finds a total order of the operations that respects real time
//! (one operation before another if it completed strictly before the other
//! was invoked) and the append-only log.

use std::collections::BTreeMap;

use crate::check::{check, AppendOp, History, Micros, ReadKind, ReadOp};
use crate::record::payload;

/// splitmix64, as in `random`.
struct Rng(u64);

impl Rng {
    fn upto(&mut self, max: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (x ^ (x >> 31)) % (max + 1)
    }
}

/// An operation as the search sees it: its interval and what it needs.
struct Op {
    invoked: Micros,
    completed: Micros,
    what: Needs,
}

enum Needs {
    /// The i-th append of the log (0-based).
    Append(usize),
    /// A read that saw exactly this many appends.
    Exactly(usize),
    /// A read that saw at least this many appends.
    AtLeast(usize),
}

/// Whether some order of `ops` respects real time and the log.
fn linearizable(ops: &[Op]) -> bool {
    let n = ops.len();
    let mut seen = vec![false; 1 << n];
    let mut stack = vec![0usize];
    while let Some(placed) = stack.pop() {
        if placed == (1 << n) - 1 {
            return true;
        }
        let appended = (0..n)
            .filter(|&i| placed & (1 << i) != 0 && matches!(ops[i].what, Needs::Append(_)))
            .count();
        for i in (0..n).filter(|&i| placed & (1 << i) == 0) {
            // Every operation that completed before this one was invoked
            // must already be placed.
            let ready = (0..n)
                .all(|j| j == i || placed & (1 << j) != 0 || ops[j].completed >= ops[i].invoked);
            let legal = match ops[i].what {
                Needs::Append(k) => k == appended,
                Needs::Exactly(k) => k == appended,
                Needs::AtLeast(k) => appended >= k,
            };
            let next = placed | (1 << i);
            if ready && legal && !seen[next] {
                seen[next] = true;
                stack.push(next);
            }
        }
    }
    false
}

#[test]
fn small_histories_agree_with_exhaustive_search() {
    let (mut valid, mut invalid) = (0, 0);
    for seed in 0..3000 {
        let mut rng = Rng(seed);
        let mut history = History::default();
        let mut ops = Vec::new();
        let mut bytes = Vec::new();
        let mut ends = vec![0u64];
        // Up to four appends in the log and one in doubt that is not.
        let n = rng.upto(4) as usize;
        for i in 0..=n {
            let invoked = rng.upto(10);
            let acked = (rng.upto(2) > 0).then(|| invoked + rng.upto(6));
            let landed = i < n;
            history.appends.push(AppendOp {
                stream: "s".into(),
                writer: 1,
                seq: i as u64,
                invoked,
                acked: if landed { acked } else { None },
                end: None,
            });
            if landed {
                bytes.extend(payload(1, i as u64));
                ends.push(bytes.len() as u64);
                ops.push(Op {
                    invoked,
                    completed: acked.unwrap_or(Micros::MAX),
                    what: Needs::Append(i),
                });
            }
        }
        // Up to four reads at the tail or of pages, anywhere in time.
        for reader in 0..rng.upto(4) as u32 {
            let invoked = rng.upto(12);
            let completed = invoked + rng.upto(4);
            let held = rng.upto(n as u64) as usize;
            let from = rng.upto(held as u64) as usize;
            let up_to_date = rng.upto(1) == 0;
            let (start, next, what) = if up_to_date {
                (ends[from], ends[held], Needs::Exactly(held))
            } else {
                // A page, possibly ending inside append `held` - 1.
                let next = ends[held].saturating_sub(rng.upto(1) * 7).max(ends[from]);
                let reach = ends.partition_point(|&e| e < next);
                (ends[from], next, Needs::AtLeast(reach))
            };
            history.reads.push(ReadOp {
                stream: "s".into(),
                reader,
                invoked,
                completed,
                start,
                bytes: bytes[start as usize..next as usize].to_vec().into(),
                next,
                up_to_date,
                kind: ReadKind::CatchUp,
            });
            ops.push(Op {
                invoked,
                completed,
                what,
            });
        }
        let report = check(&history, &BTreeMap::from([("s".to_string(), bytes)]));
        let expected = linearizable(&ops);
        assert_eq!(
            report.ok(),
            expected,
            "seed {seed}: {history:#?} {:#?}",
            report.anomalies
        );
        if expected {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    assert!(
        valid > 500 && invalid > 500,
        "{valid} valid, {invalid} invalid"
    );
}
