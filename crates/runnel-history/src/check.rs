//! A history of appends and reads against a streams server, and the
//! checker that judges it against each stream's final contents.
//!
//! Operations carry their invocation and completion times on one clock
//! (microseconds from any origin). An append is one logical operation:
//! an idempotent writer's retries of the same sequence number are the same
//! append, invoked when its first attempt was sent. An append without a
//! success answer is in doubt: it may be there, at most once.
//!
//! The rules, for every stream:
//! - the final contents parse into whole appends, each sent to that stream,
//!   none twice;
//! - every acknowledged append is there, at the offset it was given;
//! - an append acknowledged before another was invoked comes before it;
//! - every read returned exactly the final contents over the range it
//!   covered (so a read from the start is a prefix of the final stream,
//!   and no read saw a write that was later lost);
//! - a read that reached the tail holds every append acknowledged before
//!   the read was invoked (reads are linearizable);
//! - the tail one reader saw never moves back (its successive reads that
//!   reached the tail never end at an earlier offset).

use std::collections::{BTreeMap, HashMap};

use crate::record::{parse_prefix, Placed};

/// A time on the history's clock, in microseconds.
pub type Micros = u64;

/// One logical append.
#[derive(Clone, Debug)]
pub struct AppendOp {
    pub stream: String,
    pub writer: u32,
    pub seq: u64,
    /// When its first attempt was sent.
    pub invoked: Micros,
    /// When a success answer arrived; `None` while in doubt.
    pub acked: Option<Micros>,
    /// The stream's next offset that the success answer gave, when it gave
    /// one (a retry answered as a duplicate does not).
    pub end: Option<u64>,
}

/// One read that was answered with success.
#[derive(Clone, Debug)]
pub struct ReadOp {
    pub stream: String,
    /// Reads of one reader are sequential, in invocation order.
    pub reader: u32,
    pub invoked: Micros,
    pub completed: Micros,
    /// The byte offset it read from.
    pub start: u64,
    pub bytes: Vec<u8>,
    /// The next offset the answer gave.
    pub next: u64,
    /// The answer said it reached the tail (`Stream-Up-To-Date: true`).
    pub up_to_date: bool,
}

/// Everything recorded in one run.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub appends: Vec<AppendOp>,
    pub reads: Vec<ReadOp>,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// Each broken rule, one line each (capped per stream and rule).
    pub anomalies: Vec<String>,
    pub acked: usize,
    /// In-doubt appends found in / missing from the final contents.
    pub in_doubt_landed: usize,
    pub in_doubt_missing: usize,
    pub reads: usize,
    /// Reads that reached the tail, held to the linearizability rule.
    pub tail_reads: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} acknowledged appends, {} in doubt ({} landed, {} missing), {} reads ({} at the tail), {} anomalies",
            self.acked,
            self.in_doubt_landed + self.in_doubt_missing,
            self.in_doubt_landed,
            self.in_doubt_missing,
            self.reads,
            self.tail_reads,
            self.anomalies.len()
        )
    }
}

/// At most this many lines per stream and rule; the rest are counted.
const MAX_LINES_PER_RULE: usize = 5;

/// Collects the anomalies of one stream, capped per rule.
struct Findings<'a> {
    stream: &'a str,
    lines: BTreeMap<&'static str, (usize, Vec<String>)>,
}

impl<'a> Findings<'a> {
    fn new(stream: &'a str) -> Self {
        Findings {
            stream,
            lines: BTreeMap::new(),
        }
    }

    fn add(&mut self, rule: &'static str, line: String) {
        let entry = self.lines.entry(rule).or_default();
        entry.0 += 1;
        if entry.1.len() < MAX_LINES_PER_RULE {
            entry.1.push(line);
        }
    }

    fn into_lines(self, out: &mut Vec<String>) {
        for (rule, (count, lines)) in self.lines {
            for line in lines {
                out.push(format!("{}: {rule}: {line}", self.stream));
            }
            if count > MAX_LINES_PER_RULE {
                out.push(format!(
                    "{}: {rule}: {} more like these",
                    self.stream,
                    count - MAX_LINES_PER_RULE
                ));
            }
        }
    }
}

/// Judges `history` against the final contents of every stream it
/// touched. A stream missing from `finals` counts as empty.
pub fn check(history: &History, finals: &BTreeMap<String, Vec<u8>>) -> Report {
    let mut report = Report::default();
    let mut streams: BTreeMap<&str, (Vec<&AppendOp>, Vec<&ReadOp>)> = BTreeMap::new();
    for a in &history.appends {
        streams.entry(&a.stream).or_default().0.push(a);
    }
    for r in &history.reads {
        streams.entry(&r.stream).or_default().1.push(r);
    }
    for (stream, (appends, reads)) in streams {
        let empty = Vec::new();
        let bytes = finals.get(stream).unwrap_or(&empty);
        let mut findings = Findings::new(stream);
        check_stream(bytes, &appends, &reads, &mut findings, &mut report);
        findings.into_lines(&mut report.anomalies);
    }
    report
}

fn check_stream(
    bytes: &[u8],
    appends: &[&AppendOp],
    reads: &[&ReadOp],
    findings: &mut Findings,
    report: &mut Report,
) {
    let (placed, damage) = parse_prefix(bytes);
    if let Some(damage) = damage {
        findings.add("final contents", damage);
    }
    let sent: HashMap<(u32, u64), &AppendOp> =
        appends.iter().map(|a| ((a.writer, a.seq), *a)).collect();
    let mut at: HashMap<(u32, u64), Placed> = HashMap::new();
    for p in &placed {
        if !sent.contains_key(&(p.writer, p.seq)) {
            findings.add(
                "foreign append",
                format!(
                    "writer {} seq {} at {} was never sent here",
                    p.writer, p.seq, p.start
                ),
            );
        }
        if let Some(first) = at.get(&(p.writer, p.seq)) {
            findings.add(
                "duplicate",
                format!(
                    "writer {} seq {} is there twice (at {} and {})",
                    p.writer, p.seq, first.start, p.start
                ),
            );
        } else {
            at.insert((p.writer, p.seq), *p);
        }
    }

    for a in appends {
        let here = at.get(&(a.writer, a.seq));
        match (a.acked, here) {
            (Some(_), None) => findings.add(
                "lost acknowledged append",
                format!(
                    "writer {} seq {} (acknowledged{}) is missing",
                    a.writer,
                    a.seq,
                    end_note(a.end)
                ),
            ),
            (Some(_), Some(p)) => {
                report.acked += 1;
                if let Some(end) = a.end.filter(|&end| end != p.end) {
                    findings.add(
                        "acknowledged offset",
                        format!(
                            "writer {} seq {} was acknowledged ending at {end} but ends at {}",
                            a.writer, a.seq, p.end
                        ),
                    );
                }
            }
            (None, Some(_)) => report.in_doubt_landed += 1,
            (None, None) => report.in_doubt_missing += 1,
        }
    }

    check_real_time_order(&placed, &sent, findings);
    check_reads(bytes, &placed, &sent, reads, findings, report);
}

fn end_note(end: Option<u64>) -> String {
    end.map(|e| format!(" ending at {e}")).unwrap_or_default()
}

/// An append acknowledged before another was invoked comes before it:
/// walking the stream in order, no acknowledged append may come after an
/// append that was invoked later than its acknowledgement.
fn check_real_time_order(
    placed: &[Placed],
    sent: &HashMap<(u32, u64), &AppendOp>,
    findings: &mut Findings,
) {
    let mut latest_invoked: Option<&AppendOp> = None;
    for p in placed {
        let Some(a) = sent.get(&(p.writer, p.seq)) else {
            continue;
        };
        if let (Some(acked), Some(earlier)) = (a.acked, latest_invoked) {
            if acked < earlier.invoked {
                findings.add(
                    "real-time order",
                    format!(
                        "writer {} seq {} was acknowledged at {acked} us, before writer {} seq {} was invoked ({} us), yet comes after it",
                        a.writer, a.seq, earlier.writer, earlier.seq, earlier.invoked
                    ),
                );
            }
        }
        if latest_invoked.is_none_or(|l| a.invoked > l.invoked) {
            latest_invoked = Some(a);
        }
    }
}

fn check_reads(
    bytes: &[u8],
    placed: &[Placed],
    sent: &HashMap<(u32, u64), &AppendOp>,
    reads: &[&ReadOp],
    findings: &mut Findings,
    report: &mut Report,
) {
    // Acknowledged appends by acknowledgement time, with the running
    // maximum of where they end in the final stream.
    let mut acked: Vec<(Micros, u64, u32, u64)> = placed
        .iter()
        .filter_map(|p| {
            let a = sent.get(&(p.writer, p.seq))?;
            Some((a.acked?, p.end, p.writer, p.seq))
        })
        .collect();
    acked.sort_unstable();
    let mut furthest: Vec<(u64, u32, u64)> = Vec::with_capacity(acked.len());
    for &(_, end, writer, seq) in &acked {
        let best = match furthest.last() {
            Some(&last) if last.0 >= end => last,
            _ => (end, writer, seq),
        };
        furthest.push(best);
    }

    let mut last_by_reader: HashMap<u32, &ReadOp> = HashMap::new();
    let mut by_invocation: Vec<&ReadOp> = reads.to_vec();
    by_invocation.sort_by_key(|r| r.invoked);
    for r in by_invocation {
        report.reads += 1;
        let len = r.bytes.len() as u64;
        if r.next != r.start + len {
            findings.add(
                "read framing",
                format!(
                    "reader {} read {len} bytes from {} but was told the next offset is {}",
                    r.reader, r.start, r.next
                ),
            );
        }
        let range = usize::try_from(r.start)
            .ok()
            .and_then(|s| bytes.get(s..s + r.bytes.len()));
        if range != Some(&r.bytes[..]) {
            findings.add(
                "read not in the final stream",
                format!(
                    "reader {} read {len} bytes from {} (invoked at {} us) that the final stream ({} bytes) does not hold there",
                    r.reader,
                    r.start,
                    r.invoked,
                    bytes.len()
                ),
            );
        }
        if r.up_to_date {
            report.tail_reads += 1;
            let before = acked.partition_point(|&(t, ..)| t < r.invoked);
            if let Some(&(end, writer, seq)) = before.checked_sub(1).map(|i| &furthest[i]) {
                if r.next < end {
                    findings.add(
                        "stale read",
                        format!(
                            "reader {} reached the tail at {} (invoked at {} us), but writer {writer} seq {seq}, acknowledged before, ends at {end}",
                            r.reader, r.next, r.invoked
                        ),
                    );
                }
            }
            if let Some(previous) = last_by_reader.insert(r.reader, r) {
                if r.next < previous.next {
                    findings.add(
                        "reader went backwards",
                        format!(
                            "reader {} saw the tail at {} and then at {}",
                            r.reader, previous.next, r.next
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
