//! The verdict lines: what a run prints when the server broke a rule, or
//! when a run could not prove anything, in a form a CI script can grep.
//!
//! Every such line starts at the beginning of a line with a word, a kind
//! and a colon:
//!
//! ```text
//! VIOLATION lost-acknowledged-append: cycle 1: stream power-loss-0: 812 acknowledged appends are missing (...)
//! UNTESTED no-dropped-bytes: cycle 4: the power cut dropped no written byte (...)
//! ```
//!
//! `VIOLATION` is the server breaking a rule ([`Kind`]); `UNTESTED` is a
//! cycle that tested nothing ([`Untested`]). Either fails the run. So CI
//! can require that a server that never fsyncs fails with
//! `^VIOLATION lost-acknowledged-append:` and not with any error.

use std::fmt;

/// A rule the server broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An acknowledged append (or an in-doubt one a restart showed there)
    /// is not in the stream read back: missing from it, its stream gone
    /// (404), or the stream no longer readable past some offset on a
    /// healthy disk (a 5xx answer that retrying does not cure).
    LostAcknowledgedAppend,
    /// An in-doubt append a restart showed missing is there again.
    ResurrectedAppend,
    /// An append is in the stream twice.
    DuplicateAppend,
    /// A writer's appends out of its order, or an append acknowledged
    /// before another was sent placed after it.
    ReorderedAppend,
    /// Bytes that are no whole append, or an append never sent there.
    ForeignBytes,
    /// A stream whose deletion was acknowledged is back.
    DeletedStreamBack,
    /// An answer a healthy server does not give: a new producer sequence
    /// number answered as a duplicate, an existing stream's PUT not 200, a
    /// retry answered other than its settled fate says.
    WrongAnswer,
    /// On a healthy disk, before the power cut, more appends were answered
    /// with errors than with success.
    RefusedAppends,
    /// An append sent after an injected disk fault was acknowledged.
    AcknowledgedAfterFault,
    /// The server did not come back after the cut, or died after it.
    ServerDied,
    /// Cluster nodes answer different contents for one stream.
    NodesDisagree,
    /// A replica move could not be finished after the power came back.
    MoveUnfinished,
    /// Back on a healthy disk, the server does not serve a stream to its
    /// end (with nothing acknowledged past where it stops), or the cluster
    /// does not serve once every node is back.
    Unavailable,
}

impl Kind {
    /// The name the verdict line carries.
    pub fn name(self) -> &'static str {
        match self {
            Kind::LostAcknowledgedAppend => "lost-acknowledged-append",
            Kind::ResurrectedAppend => "resurrected-append",
            Kind::DuplicateAppend => "duplicate-append",
            Kind::ReorderedAppend => "reordered-append",
            Kind::ForeignBytes => "foreign-bytes",
            Kind::DeletedStreamBack => "deleted-stream-back",
            Kind::WrongAnswer => "wrong-answer",
            Kind::RefusedAppends => "refused-appends",
            Kind::AcknowledgedAfterFault => "acknowledged-after-fault",
            Kind::ServerDied => "server-died",
            Kind::NodesDisagree => "nodes-disagree",
            Kind::MoveUnfinished => "move-unfinished",
            Kind::Unavailable => "unavailable",
        }
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: Kind,
    pub message: String,
}

impl Violation {
    pub fn new(kind: Kind, message: impl Into<String>) -> Violation {
        Violation {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

/// Why a cycle tested nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untested {
    /// No append was acknowledged: nothing was there to lose.
    NoAcknowledgedAppend,
    /// The power cut dropped no written byte: the cut lost nothing.
    NoDroppedBytes,
    /// No append failed under an injected fault: it never reached the
    /// server.
    FaultNotReached,
}

impl Untested {
    pub fn name(self) -> &'static str {
        match self {
            Untested::NoAcknowledgedAppend => "no-acknowledged-append",
            Untested::NoDroppedBytes => "no-dropped-bytes",
            Untested::FaultNotReached => "fault-not-reached",
        }
    }
}

/// Everything a cycle (or a phase) found wrong.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<Violation>,
    pub untested: Vec<(Untested, String)>,
}

impl Findings {
    pub fn violation(&mut self, kind: Kind, message: impl Into<String>) {
        self.violations.push(Violation::new(kind, message));
    }

    pub fn untested(&mut self, why: Untested, message: impl Into<String>) {
        self.untested.push((why, message.into()));
    }

    pub fn extend(&mut self, violations: impl IntoIterator<Item = Violation>) {
        self.violations.extend(violations);
    }

    pub fn is_empty(&self) -> bool {
        self.violations.is_empty() && self.untested.is_empty()
    }

    /// The first line, for a one-line summary.
    pub fn first(&self) -> String {
        match (self.violations.first(), self.untested.first()) {
            (Some(v), _) => format!("VIOLATION {v}"),
            (None, Some((why, message))) => format!("UNTESTED {}: {message}", why.name()),
            (None, None) => "nothing".into(),
        }
    }

    /// Prints the verdict lines, at most `per_kind` of each kind (the rest
    /// counted), each prefixed with `context` (`cycle 3`).
    pub fn print(&self, context: &str, per_kind: usize) {
        let mut shown: std::collections::BTreeMap<Kind, usize> = Default::default();
        for v in &self.violations {
            let n = shown.entry(v.kind).or_default();
            *n += 1;
            if *n <= per_kind {
                println!("VIOLATION {}: {context}: {}", v.kind.name(), v.message);
            }
        }
        for (kind, n) in shown {
            if n > per_kind {
                println!(
                    "VIOLATION {}: {context}: {} more like these",
                    kind.name(),
                    n - per_kind
                );
            }
        }
        for (why, message) in &self.untested {
            println!("UNTESTED {}: {context}: {message}", why.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_names() {
        let kinds = [
            Kind::LostAcknowledgedAppend,
            Kind::ResurrectedAppend,
            Kind::DuplicateAppend,
            Kind::ReorderedAppend,
            Kind::ForeignBytes,
            Kind::DeletedStreamBack,
            Kind::WrongAnswer,
            Kind::RefusedAppends,
            Kind::AcknowledgedAfterFault,
            Kind::ServerDied,
            Kind::NodesDisagree,
            Kind::MoveUnfinished,
            Kind::Unavailable,
        ];
        let names: std::collections::HashSet<_> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), kinds.len());
        assert_eq!(
            Violation::new(Kind::LostAcknowledgedAppend, "x").to_string(),
            "lost-acknowledged-append: x"
        );
    }
}
