//! What a seed's run reports: faults applied by kind, membership changes,
//! the operations checked (appends acknowledged and in doubt, reads by
//! kind) and the verdict lines, which start a line with a word, a kind and
//! a colon so CI can grep them:
//!
//! ```text
//! ANOMALY stale-read: netfault/s3: reader 7 (long-poll, invoked at ...) reached the tail at ...
//! UNTESTED no-faults: seed 1: no fault was applied
//! ```
//!
//! `ANOMALY` kinds are the history checker's rules written with dashes
//! (`lost-acknowledged-append`, `stale-read`, `real-time-order`,
//! `reader-went-backwards`, `read-from-the-future`, `duplicate`, ...) and
//! the harness's own: `nodes-disagree` (the members answer different final
//! contents), `node-exited` (a node the harness left running exited),
//! `node-restart` (a crashed node did not come back), `unavailable` (the
//! healed cluster elected no leader for every group). `UNTESTED` kinds:
//! `no-faults`, `no-acknowledged-append`, `no-tail-read`,
//! `no-membership-change`.

use std::collections::BTreeMap;

use runnel_history::check::{History, ReadKind, Report};

use crate::membership;
use crate::nemesis::Applied;

/// `stale read` becomes `stale-read`.
pub fn slug(rule: &str) -> String {
    rule.trim().replace(' ', "-")
}

/// A checker anomaly (`STREAM: RULE: TEXT`) as a verdict line:
/// `ANOMALY RULE-WITH-DASHES: STREAM: TEXT`.
pub fn anomaly_line(line: &str) -> String {
    let mut parts = line.splitn(3, ": ");
    match (parts.next(), parts.next(), parts.next()) {
        (Some(stream), Some(rule), Some(text)) => {
            format!("ANOMALY {}: {stream}: {text}", slug(rule))
        }
        _ => format!("ANOMALY checker: {line}"),
    }
}

/// Reads recorded, by kind.
pub fn reads_by_kind(history: &History) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for r in &history.reads {
        let kind = match r.kind {
            ReadKind::CatchUp => "catch-up",
            ReadKind::LongPoll => "long-poll",
            ReadKind::Sse => "SSE events",
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

/// Everything one seed's run found.
pub struct SeedReport {
    pub seed: u64,
    pub faults: Applied,
    pub fault_secs: f64,
    pub membership: membership::Counts,
    pub reads: BTreeMap<&'static str, usize>,
    pub check: Report,
    /// The harness's own anomalies: (kind, text).
    pub anomalies: Vec<(&'static str, String)>,
    /// Answers other than success, by kind.
    pub errors: BTreeMap<String, usize>,
}

impl SeedReport {
    /// Why the run tested nothing, if it did not.
    fn untested(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.faults.total() == 0 {
            out.push(("no-faults", "no fault was applied".to_string()));
        }
        if self.check.acked == 0 {
            out.push((
                "no-acknowledged-append",
                "no append was acknowledged".into(),
            ));
        }
        if self.check.tail_reads == 0 {
            out.push(("no-tail-read", "no read reached the tail".into()));
        }
        if self.membership.done.is_empty() {
            out.push((
                "no-membership-change",
                "no membership change was made".into(),
            ));
        }
        out
    }

    pub fn ok(&self) -> bool {
        self.check.ok() && self.anomalies.is_empty() && self.untested().is_empty()
    }

    pub fn print(&self) {
        let seed = self.seed;
        let c = &self.check;
        println!(
            "seed {seed}: faults applied: {} in {:.0}s",
            self.faults.summary(),
            self.fault_secs
        );
        println!(
            "seed {seed}: membership changes: {}",
            self.membership.summary()
        );
        let reads: Vec<String> = self.reads.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "seed {seed}: operations checked: {} appends acknowledged, {} in doubt ({} landed, {} missing); {} reads ({}; {} at the tail); linearizability decided over {} appends and {} reads",
            c.acked,
            c.in_doubt_landed + c.in_doubt_missing,
            c.in_doubt_landed,
            c.in_doubt_missing,
            c.reads,
            reads.join(", "),
            c.tail_reads,
            c.linearized_appends,
            c.linearized_reads
        );
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        println!(
            "seed {seed}: answers other than success: {}",
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join(", ")
            }
        );
        println!(
            "seed {seed}: {} anomalies",
            c.anomalies.len() + self.anomalies.len()
        );
        for line in &c.anomalies {
            println!("{}", anomaly_line(line));
        }
        for (kind, text) in &self.anomalies {
            println!("ANOMALY {kind}: {text}");
        }
        for (kind, text) in self.untested() {
            println!("UNTESTED {kind}: seed {seed}: {text}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_lines_become_verdict_lines() {
        assert_eq!(
            anomaly_line("netfault/s3: stale read: reader 7 (long-poll) reached the tail at 10"),
            "ANOMALY stale-read: netfault/s3: reader 7 (long-poll) reached the tail at 10"
        );
        assert_eq!(
            anomaly_line("netfault/s0: lost acknowledged append: writer 1 seq 2: x"),
            "ANOMALY lost-acknowledged-append: netfault/s0: writer 1 seq 2: x"
        );
        assert_eq!(anomaly_line("odd"), "ANOMALY checker: odd");
    }
}
