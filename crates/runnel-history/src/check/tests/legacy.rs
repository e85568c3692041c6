//! The timing rules the checker had before the linearizability decision,
//! kept (for tests only) to show which histories only the decision
//! catches: real-time order between appends, a tail read missing an
//! append acknowledged before it was invoked, and one reader's tail
//! moving back.

use std::collections::{BTreeMap, HashMap};

use crate::check::{AppendOp, History, Micros, ReadOp};
use crate::record::parse_prefix;

/// The content rules, which both checkers share.
const CONTENT_RULES: [&str; 8] = [
    "final contents",
    "foreign append",
    "duplicate",
    "lost acknowledged append",
    "acknowledged offset",
    "read framing",
    "read not in the final stream",
    "operation times",
];

/// Whether the checker as it was would pass `history`: the new checker
/// finds no content anomaly and the old timing rules find nothing.
pub fn old_checker_passes(history: &History, finals: &BTreeMap<String, Vec<u8>>) -> bool {
    let report = crate::check::check(history, finals);
    let content = report.anomalies.iter().any(|line| {
        let rule = line.split(": ").nth(1).unwrap_or_default();
        CONTENT_RULES.contains(&rule)
    });
    !content && old_timing_rules(history, finals).is_empty()
}

/// The old timing rules that `history` breaks, once per finding.
pub fn old_timing_rules(
    history: &History,
    finals: &BTreeMap<String, Vec<u8>>,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut streams: BTreeMap<&str, (Vec<&AppendOp>, Vec<&ReadOp>)> = BTreeMap::new();
    for a in &history.appends {
        streams.entry(&a.stream).or_default().0.push(a);
    }
    for r in &history.reads {
        streams.entry(&r.stream).or_default().1.push(r);
    }
    for (stream, (appends, reads)) in streams {
        let empty = Vec::new();
        let (placed, _) = parse_prefix(finals.get(stream).unwrap_or(&empty));
        let sent: HashMap<(u32, u64), &AppendOp> =
            appends.iter().map(|a| ((a.writer, a.seq), *a)).collect();

        // Real-time order: walking the stream, no acknowledged append
        // after one invoked later than its acknowledgement.
        let mut latest_invoked: Option<Micros> = None;
        for p in &placed {
            let Some(a) = sent.get(&(p.writer, p.seq)) else {
                continue;
            };
            if let (Some(acked), Some(latest)) = (a.acked, latest_invoked) {
                if acked < latest {
                    out.push("real-time order");
                }
            }
            latest_invoked = Some(latest_invoked.map_or(a.invoked, |l| l.max(a.invoked)));
        }

        // Stale read: a tail read ends before an append acknowledged
        // before the read was invoked. Backwards: one reader's tail reads
        // end at an earlier offset than its previous one.
        let acked: Vec<(Micros, u64)> = placed
            .iter()
            .filter_map(|p| Some((sent.get(&(p.writer, p.seq))?.acked?, p.end)))
            .collect();
        let mut last_by_reader: HashMap<u32, u64> = HashMap::new();
        let mut by_invocation = reads.clone();
        by_invocation.sort_by_key(|r| r.invoked);
        for r in by_invocation.into_iter().filter(|r| r.up_to_date) {
            let furthest = acked
                .iter()
                .filter(|&&(t, _)| t < r.invoked)
                .map(|&(_, end)| end)
                .max();
            if furthest.is_some_and(|end| r.next < end) {
                out.push("stale read");
            }
            if let Some(previous) = last_by_reader.insert(r.reader, r.next) {
                if r.next < previous {
                    out.push("reader went backwards");
                }
            }
        }
    }
    out
}
