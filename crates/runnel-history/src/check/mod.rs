//! A history of appends and reads against a streams server, and the
//! checker that judges it against each stream's final contents.
//!
//! | module | owns |
//! |---|---|
//! | this one | the recorded operations ([`AppendOp`], [`ReadOp`], [`History`]), the [`Report`], and the content rules (what the final contents and each read hold) |
//! | `linear` | deciding whether each stream's history is linearizable against an append-only log, and naming the operations that show it is not |
//!
//! # The history
//!
//! Operations carry their invocation and completion times on one clock
//! (whole microseconds from any origin). An append is one logical
//! operation: an idempotent writer's retries of the same sequence number
//! are the same append, invoked when its first attempt was sent. An append
//! without a success answer is in doubt: it may be there, at most once.
//! Only reads answered with success are recorded.
//!
//! Reads come from catch-up GETs, long-polls and SSE sessions
//! ([`ReadKind`], used only in messages). A catch-up GET or a long-poll
//! is one read from its request to its answer. An SSE session is a
//! sequence of reads, one per delivered event (the data event, then the
//! control event that gives its next offset and whether it reached the
//! tail): the read is invoked when the session was opened and completes
//! when this event is received. (Not when the previous event arrived: a
//! server renders an event as soon as the connection can take it, which
//! may be before the client has read the events before it, so the state
//! an event shows can be older than the previous event's receipt. The
//! session's opening is the latest instant that is always sound; keeping
//! sessions short keeps the windows narrow.) Its `start` is the previous
//! event's next offset (or the offset the session was opened at), its
//! `bytes` the event's data and `next`/`up_to_date` its control event.
//!
//! # The rules
//!
//! For every stream (streams are independent: linearizability is local):
//! - the final contents parse into whole appends, each sent to that stream,
//!   none twice;
//! - every acknowledged append is there, at the offset it was given;
//! - every read returned exactly the final contents over the range it
//!   covered, and its next offset is where its bytes end (so no read saw a
//!   write that was later lost);
//! - no operation completed before it was invoked;
//! - the history is linearizable against an append-only log: each
//!   operation takes effect at one instant between its invocation and its
//!   completion, the appends that happened in their order in the final
//!   contents, each read returning the log over its range at its instant
//!   (a read that reached the tail saw exactly the log's length then; one
//!   that did not saw at least its next offset). In-doubt appends take
//!   effect at most once, if they are in the final contents. `linear`
//!   decides this exactly and names the two operations that contradict
//!   each other, classified as a stale read (across readers or against an
//!   acknowledgement), a reader going backwards, appends out of real-time
//!   order, a read of an append before it was invoked, or a read that
//!   reached the tail inside an append.
//!
//! The content rules run first, as fast filters with precise messages: a
//! read that breaks one is left out of the timing model, and so are
//! appends that are not in the final contents.
//!
//! Times are whole microseconds, so two operations stamped with the same
//! microsecond cannot be ordered: one precedes another only if it
//! completed strictly before the other was invoked, and equal stamps are
//! concurrent (a read invoked in the microsecond an append was
//! acknowledged may miss it).

mod linear;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

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

/// How a read was made; only used to word messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadKind {
    /// A plain GET, answered at once.
    #[default]
    CatchUp,
    /// A GET that waits at the tail for new data (`live=long-poll`).
    LongPoll,
    /// One event of an SSE session (see the module docs).
    Sse,
}

impl fmt::Display for ReadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadKind::CatchUp => "catch-up read",
            ReadKind::LongPoll => "long-poll",
            ReadKind::Sse => "SSE event",
        })
    }
}

/// One read that was answered with success.
#[derive(Clone, Debug, Default)]
pub struct ReadOp {
    pub stream: String,
    /// Reads of one reader are sequential, in invocation order.
    pub reader: u32,
    pub invoked: Micros,
    pub completed: Micros,
    /// The byte offset it read from.
    pub start: u64,
    /// What it read (shared with the reader's buffer: a harness keeps
    /// every read, often of the whole stream).
    pub bytes: bytes::Bytes,
    /// The next offset the answer gave.
    pub next: u64,
    /// The answer said it reached the tail (`Stream-Up-To-Date: true`).
    pub up_to_date: bool,
    /// How it was made (messages only).
    pub kind: ReadKind,
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
    /// Reads that reached the tail.
    pub tail_reads: usize,
    /// Appends placed on the timeline by the linearizability decision
    /// (every append in the final contents).
    pub linearized_appends: usize,
    /// Reads held to the linearizability decision (those that passed the
    /// content rules).
    pub linearized_reads: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} acknowledged appends, {} in doubt ({} landed, {} missing), {} reads ({} at the tail), linearizability decided over {} appends and {} reads, {} anomalies",
            self.acked,
            self.in_doubt_landed + self.in_doubt_missing,
            self.in_doubt_landed,
            self.in_doubt_missing,
            self.reads,
            self.tail_reads,
            self.linearized_appends,
            self.linearized_reads,
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
        findings.add("final contents", damage.to_string());
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
        if a.acked.is_some_and(|acked| acked < a.invoked) {
            findings.add(
                "operation times",
                format!(
                    "writer {} seq {} was acknowledged at {} us, before it was invoked ({} us)",
                    a.writer,
                    a.seq,
                    a.acked.unwrap_or_default(),
                    a.invoked
                ),
            );
        }
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

    // The log's appends, in order: the first copy of each sent append
    // carries its operation; a foreign or repeated one (already reported)
    // still takes room in the log, with no times of its own.
    let mut first_copy = HashSet::new();
    let entries: Vec<linear::Entry> = placed
        .iter()
        .map(|p| linear::Entry {
            placed: *p,
            op: first_copy
                .insert((p.writer, p.seq))
                .then(|| sent.get(&(p.writer, p.seq)).copied())
                .flatten(),
        })
        .collect();
    let reads = check_read_contents(bytes, reads, findings, report);
    linear::decide(&entries, &reads, findings, report);
}

fn end_note(end: Option<u64>) -> String {
    end.map(|e| format!(" ending at {e}")).unwrap_or_default()
}

/// The content rules for reads: each returned exactly the final contents
/// over its range, its next offset is where its bytes end, and it did not
/// complete before it was invoked. Returns the reads that keep all three,
/// in invocation order, for the timing model.
fn check_read_contents<'a>(
    bytes: &[u8],
    reads: &[&'a ReadOp],
    findings: &mut Findings,
    report: &mut Report,
) -> Vec<&'a ReadOp> {
    let mut by_invocation: Vec<&ReadOp> = reads.to_vec();
    by_invocation.sort_by_key(|r| r.invoked);
    let mut kept = Vec::with_capacity(by_invocation.len());
    for r in by_invocation {
        report.reads += 1;
        if r.up_to_date {
            report.tail_reads += 1;
        }
        let len = r.bytes.len() as u64;
        let mut good = true;
        if r.next != r.start + len {
            good = false;
            findings.add(
                "read framing",
                format!(
                    "reader {} ({}) read {len} bytes from {} but was told the next offset is {}",
                    r.reader, r.kind, r.start, r.next
                ),
            );
        }
        let range = usize::try_from(r.start)
            .ok()
            .and_then(|s| bytes.get(s..s.checked_add(r.bytes.len())?));
        if range != Some(&r.bytes[..]) {
            good = false;
            findings.add(
                "read not in the final stream",
                format!(
                    "reader {} ({}) read {len} bytes from {} (invoked at {} us) that the final stream ({} bytes) does not hold there",
                    r.reader,
                    r.kind,
                    r.start,
                    r.invoked,
                    bytes.len()
                ),
            );
        }
        if r.completed < r.invoked {
            good = false;
            findings.add(
                "operation times",
                format!(
                    "reader {} ({}) completed at {} us, before it was invoked ({} us)",
                    r.reader, r.kind, r.completed, r.invoked
                ),
            );
        }
        if good {
            kept.push(r);
        }
    }
    kept
}

#[cfg(test)]
mod tests;
