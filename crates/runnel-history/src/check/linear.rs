//! Deciding whether one stream's history is linearizable against the model
//! of an append-only log, and naming the operations that show it is not.
//!
//! # The reduction
//!
//! Appends are unique and self-describing, and the final contents are read
//! once the system is quiet, so the appends that happened took effect in
//! their order in the final contents: a_1, ..., a_n, ending at offsets
//! e_1 < ... < e_n (e_0 = 0 is the empty log). Appends not in the final
//! contents did not happen and are left out (an acknowledged one is
//! already a lost append). So only the instants t_1 <= ... <= t_n are
//! unknown, and every constraint is a bound on one of them:
//! - a_i was invoked at `inv`: t_i >= inv;
//! - a_i was acknowledged at `ack`: t_i <= ack;
//! - a read that reached the tail at `next` saw the log at exactly that
//!   length, so `next` must be some e_k (else it reached the tail inside an
//!   append, a length the log never had), and its instant lies between
//!   t_k and t_{k+1}: t_k <= completion and t_{k+1} >= invocation;
//! - a read that did not reach the tail saw at least `next` bytes: with
//!   a_k the first append ending at or past `next`, t_k <= completion.
//!
//! Each read's instant appears in its own constraints only, so eliminating
//! it leaves exactly these bounds on the appends. A non-decreasing
//! sequence within per-append bounds [lo_i, hi_i] exists if and only if
//! the greedy t_i = max(lo_i, t_{i-1}) never exceeds hi_i, since the
//! greedy is the least sequence that respects every lower bound. That is
//! the whole decision: O(n + m log n) for n appends and m reads.
//!
//! # Ties
//!
//! Times are whole microseconds: an operation precedes another only if it
//! completed strictly before the other was invoked; equal stamps are
//! concurrent. That is the same as letting each operation take effect at
//! an instant of its closed interval [invocation, completion], several
//! operations sharing an instant in whatever order the log needs (the
//! appends in log order, a read after the appends it saw and before those
//! it did not). So every bound above is non-strict, and nothing needs the
//! "just after t" half-steps that strict bounds would.
//!
//! # Witnesses
//!
//! Every bound remembers the operation that set it. When the running lower
//! bound (set by the invocation of some a_j, or by a read that reached the
//! tail without a_j) exceeds the upper bound of some a_k with k >= j (set
//! by a_k's acknowledgement, or by a read that saw a_k), those two
//! operations alone contradict the model: a_j cannot take effect before
//! the first one's time, a_k not after the second one's, and a_j comes no
//! later than a_k. The pair is reported, classified by what the two are,
//! and the running bound is then lowered to the upper bound so the check
//! goes on to find further anomalies. The lower bound's operation stays
//! its witness, which is still sound: its own time is above the lowered
//! bound, so any later conflict with it is a genuine one too.

use super::{AppendOp, Findings, Micros, ReadOp, Report};
use crate::record::Placed;

/// One append of the log, in order.
pub(super) struct Entry<'a> {
    pub placed: Placed,
    /// The operation that made it; `None` for a foreign or repeated append
    /// (reported by the content rules), which takes room in the log but
    /// has no times of its own.
    pub op: Option<&'a AppendOp>,
}

/// The operation behind a lower bound on when an append took effect.
#[derive(Clone, Copy, Debug)]
enum Low<'a> {
    /// The append was invoked then.
    Invoked(&'a AppendOp),
    /// This read reached the tail just before the append: it was invoked
    /// then and saw the log without it.
    Without(&'a ReadOp),
}

/// The operation behind an upper bound on when an append took effect.
#[derive(Clone, Copy, Debug)]
enum High<'a> {
    /// The append was acknowledged then.
    Acked(&'a AppendOp),
    /// This read, completed then, saw the log reach into the append.
    With(&'a ReadOp),
}

/// A bound on when the append at `entry` took effect, and why.
#[derive(Clone, Copy, Debug)]
struct Bound<W> {
    at: Micros,
    entry: usize,
    why: W,
}

/// Keeps the larger lower bound (the earlier one on a tie).
fn raise<W: Copy>(slot: &mut Option<Bound<W>>, bound: Bound<W>) {
    if slot.is_none_or(|s| bound.at > s.at) {
        *slot = Some(bound);
    }
}

/// Keeps the smaller upper bound (the earlier one on a tie).
fn lower<W: Copy>(slot: &mut Option<Bound<W>>, bound: Bound<W>) {
    if slot.is_none_or(|s| bound.at < s.at) {
        *slot = Some(bound);
    }
}

/// Decides whether the appends `entries` (the log, in order) and the
/// `reads` (which passed the content rules) are linearizable, reporting
/// each contradiction found.
pub(super) fn decide(
    entries: &[Entry],
    reads: &[&ReadOp],
    findings: &mut Findings,
    report: &mut Report,
) {
    let n = entries.len();
    let ends: Vec<u64> = entries.iter().map(|e| e.placed.end).collect();
    // With damaged final contents only the whole appends before the damage
    // are modelled; a read past them is left to the content rules.
    let tail = ends.last().copied().unwrap_or(0);

    // Per append: the largest lower bound, and the smallest upper bounds
    // from acknowledgements and from reads kept apart (an acknowledgement
    // is preferred as a witness: the simpler story).
    let mut lo: Vec<Option<Bound<Low>>> = vec![None; n];
    let mut hi_ack: Vec<Option<Bound<High>>> = vec![None; n];
    let mut hi_read: Vec<Option<Bound<High>>> = vec![None; n];
    for (i, entry) in entries.iter().enumerate() {
        let Some(a) = entry.op else { continue };
        lo[i] = Some(Bound {
            at: a.invoked,
            entry: i,
            why: Low::Invoked(a),
        });
        if let Some(acked) = a.acked {
            // An acknowledgement stamped before the invocation is a broken
            // record (reported by the content rules): read it as "at once".
            hi_ack[i] = Some(Bound {
                at: acked.max(a.invoked),
                entry: i,
                why: High::Acked(a),
            });
        }
    }
    report.linearized_appends += n;

    for &r in reads {
        if r.next > tail {
            continue;
        }
        // The first append ending at or past `next` (exists: next <= tail).
        let reach = ends.partition_point(|&e| e < r.next);
        if r.up_to_date {
            // The log was exactly `next` bytes long: `held` appends.
            let held = if r.next == 0 {
                0
            } else if ends[reach] == r.next {
                reach + 1
            } else {
                let p = entries[reach].placed;
                findings.add(
                    "read ended mid-append",
                    format!(
                        "reader {} ({}, invoked at {} us) reached the tail at {}, inside writer {} seq {} [{}, {}): the log never had that length",
                        r.reader, r.kind, r.invoked, r.next, p.writer, p.seq, p.start, p.end
                    ),
                );
                continue;
            };
            if held > 0 {
                let bound = Bound {
                    at: r.completed,
                    entry: held - 1,
                    why: High::With(r),
                };
                lower(&mut hi_read[held - 1], bound);
            }
            if held < n {
                let bound = Bound {
                    at: r.invoked,
                    entry: held,
                    why: Low::Without(r),
                };
                raise(&mut lo[held], bound);
            }
        } else if r.next > 0 {
            let bound = Bound {
                at: r.completed,
                entry: reach,
                why: High::With(r),
            };
            lower(&mut hi_read[reach], bound);
        }
        report.linearized_reads += 1;
    }

    // The greedy: the earliest instant each append can take effect.
    let mut running: Option<Bound<Low>> = None;
    for i in 0..n {
        let mut low = running;
        if let Some(b) = lo[i] {
            raise(&mut low, b);
        }
        let Some(low) = low else { continue };
        let uppers = [hi_ack[i], hi_read[i]];
        let broken = uppers.into_iter().flatten().find(|u| low.at > u.at);
        running = Some(match broken {
            None => low,
            Some(upper) => {
                let (rule, line) = describe(low, upper, entries);
                findings.add(rule, line);
                // Forgive it and go on: the earliest the append can be
                // while keeping its upper bounds, still witnessed by the
                // lower bound's operation (whose time is above it).
                let least = uppers.into_iter().flatten().map(|u| u.at).min();
                Bound {
                    at: least.unwrap_or(upper.at),
                    ..low
                }
            }
        });
    }
}

/// One line naming the two operations that contradict each other: `low`
/// keeps append `low.entry` from taking effect before its time, `high`
/// needs append `high.entry` (not before it in the log) to have taken
/// effect by its time, which is earlier.
fn describe(low: Bound<Low>, high: Bound<High>, entries: &[Entry]) -> (&'static str, String) {
    let k = entries[high.entry].placed;
    match (low.why, high.why) {
        // An append's own acknowledgement is never below its invocation
        // (see `decide`), so here a_j comes strictly before a_k.
        (Low::Invoked(a), High::Acked(b)) => (
            "real-time order",
            format!(
                "writer {} seq {} was acknowledged at {} us, before writer {} seq {} was invoked ({} us), yet comes after it",
                b.writer,
                b.seq,
                b.acked.unwrap_or_default(),
                a.writer,
                a.seq,
                a.invoked
            ),
        ),
        (Low::Invoked(a), High::With(r)) => {
            let j = entries[low.entry].placed;
            if low.entry == high.entry || (r.start < j.end && j.start < r.next) {
                // The read's range or length took in a_j itself.
                (
                    "read from the future",
                    format!(
                        "reader {} ({}, completed at {} us) saw the stream reach {}, holding writer {} seq {} at [{}, {}), which was invoked only at {} us",
                        r.reader, r.kind, r.completed, r.next, a.writer, a.seq, j.start, j.end, a.invoked
                    ),
                )
            } else {
                (
                    "real-time order",
                    format!(
                        "writer {} seq {} was invoked at {} us, after reader {} ({}, completed at {} us) saw the stream reach {} (into writer {} seq {}), yet comes before it",
                        a.writer, a.seq, a.invoked, r.reader, r.kind, r.completed, r.next, k.writer, k.seq
                    ),
                )
            }
        }
        (Low::Without(r), High::Acked(b)) => (
            "stale read",
            format!(
                "reader {} ({}, invoked at {} us) reached the tail at {}, but writer {} seq {}, acknowledged at {} us, ends at {}",
                r.reader,
                r.kind,
                r.invoked,
                r.next,
                b.writer,
                b.seq,
                b.acked.unwrap_or_default(),
                k.end
            ),
        ),
        (Low::Without(late), High::With(early)) if late.reader == early.reader => (
            "reader went backwards",
            format!(
                "reader {} saw the stream reach {} ({}, completed at {} us) and then the tail at {} ({}, invoked at {} us)",
                late.reader, early.next, early.kind, early.completed, late.next, late.kind, late.invoked
            ),
        ),
        (Low::Without(late), High::With(early)) => {
            let acked = entries[high.entry].op.and_then(|a| a.acked);
            let how = match acked {
                Some(t) if t < late.invoked => format!("acknowledged at {t} us"),
                Some(t) => format!(
                    "acknowledged only at {t} us; caught by the cross-reader rule"
                ),
                None => "never acknowledged; caught by the cross-reader rule".to_string(),
            };
            (
                "stale read",
                format!(
                    "reader {} ({}, invoked at {} us) reached the tail at {}, but reader {} ({}, completed at {} us) had seen the stream reach {}, into writer {} seq {} ending at {} ({how})",
                    late.reader,
                    late.kind,
                    late.invoked,
                    late.next,
                    early.reader,
                    early.kind,
                    early.completed,
                    early.next,
                    k.writer,
                    k.seq,
                    k.end
                ),
            )
        }
    }
}
