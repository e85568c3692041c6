//! Votes of a node that rejoins a group without its state.
//!
//! Raft's safety rests on two things a lost disk takes away:
//!
//! - **Votes survive.** A node must never vote twice in one term. A node
//!   that lost its disk has forgotten whom it voted for, so if it came back
//!   inside an election it had voted in, it could vote for a second
//!   candidate of that term and let two leaders be elected.
//! - **Logs survive.** An entry is committed once a majority holds it, and
//!   a candidate wins only with the votes of a majority whose logs are no
//!   newer than its own, so every possible winner holds every committed
//!   entry. A node that lost its log may have been part of the majority
//!   that committed an entry: if it voted before it had that entry back, a
//!   candidate lacking the entry could win with its vote and overwrite it,
//!   and an acknowledged write would be lost.
//!
//! A node with an empty copy of a group whose peers have had a leader
//! (one knows a leader now, or a peer's log holds more than the
//! membership the cluster was formed with) therefore neither votes nor
//! stands for election in that group until it has heard from a leader (so
//! it knows the current term, and any later election is in a newer one)
//! **and** has applied every entry the leader's log held when the node
//! first asked it, and every entry the other peers' logs held then. The
//! leader's log holds every committed entry, so the node then holds every
//! entry that could have been committed with its help. An empty node
//! cannot tell a forming cluster from one it lost its disk in until a peer
//! answers, so it decides only then (a whole cluster restarted with one
//! disk wiped must not count that node as new). While a node holds its
//! vote, vote requests are answered with an error, which the candidate
//! counts as no vote. While
//! the group's other nodes are down or cut off, the group waits rather
//! than elect a leader that may lack acknowledged writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::Raft;

pub(crate) struct VoteGuard {
    groups: Vec<Hold>,
}

struct Hold {
    holding: AtomicBool,
    /// The index this node must have applied before it votes again.
    caught_up_at: AtomicU64,
}

/// What a held node knows of its own copy of a group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnCopy {
    pub heard_leader: bool,
    pub applied: u64,
}

impl OwnCopy {
    pub fn of(raft: &Raft) -> OwnCopy {
        let metrics = raft.metrics().borrow().clone();
        OwnCopy {
            heard_leader: metrics.current_leader.is_some(),
            applied: metrics.last_applied.map_or(0, |l| l.index),
        }
    }
}

impl VoteGuard {
    /// Every group starts held, even once a leader is heard: whether this
    /// node may vote is known once it has compared its groups with its
    /// peers' (see `release` and `hold_until`).
    pub fn new(groups: usize) -> VoteGuard {
        VoteGuard {
            groups: (0..groups)
                .map(|_| Hold {
                    holding: AtomicBool::new(true),
                    caught_up_at: AtomicU64::new(u64::MAX),
                })
                .collect(),
        }
    }

    /// This node votes in `group` (it has the group's state, or the
    /// cluster is forming it).
    pub fn release(&self, group: u32) {
        if let Some(h) = self.groups.get(group as usize) {
            h.holding.store(false, Ordering::Release);
        }
    }

    /// This node lost its copy of `group` and votes again once it has
    /// heard from a leader and applied up to `applied` (`u64::MAX` until
    /// the leader's log is known).
    pub fn hold_until(&self, group: u32, applied: u64) {
        if let Some(h) = self.groups.get(group as usize) {
            h.caught_up_at.store(applied, Ordering::Release);
            h.holding.store(true, Ordering::Release);
        }
    }

    /// Whether this node holds its vote in `group`; releases it first if
    /// `own` shows the node has caught up.
    pub fn holds(&self, group: u32, own: OwnCopy) -> bool {
        let Some(h) = self.groups.get(group as usize) else {
            return true;
        };
        if !h.holding.load(Ordering::Acquire) {
            return false;
        }
        if own.heard_leader && own.applied >= h.caught_up_at.load(Ordering::Acquire) {
            h.holding.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Whether a vote request in `group` must be refused now.
    pub fn refuses(&self, group: u32, raft: &Raft) -> bool {
        self.holds(group, OwnCopy::of(raft))
    }

    /// Waits until this node stops holding its vote in `group`; false if
    /// the group shut down first.
    pub async fn released(&self, group: u32, raft: &Raft) -> bool {
        let mut metrics = raft.metrics();
        while self.refuses(group, raft) {
            if metrics.changed().await.is_err() {
                return false;
            }
        }
        true
    }
}

/// The error a refused vote (or handover) request gets.
pub const REFUSAL: &str =
    "this node lost its state of the group and casts no vote until it has caught up with a leader";

#[cfg(test)]
mod tests {
    use super::*;

    fn own(heard_leader: bool, applied: u64) -> OwnCopy {
        OwnCopy {
            heard_leader,
            applied,
        }
    }

    #[test]
    fn a_held_group_votes_once_it_heard_a_leader_and_applied_what_peers_had() {
        let guard = VoteGuard::new(2);
        guard.hold_until(1, 40);
        guard.release(0);
        assert!(!guard.holds(0, own(false, 0)), "a released group votes");
        assert!(guard.holds(1, own(false, 0)));
        assert!(guard.holds(1, own(false, 40)), "no leader heard yet");
        assert!(
            guard.holds(1, own(true, 39)),
            "a leader heard, but an entry the peers had applied is missing"
        );
        assert!(!guard.holds(1, own(true, 40)));
        assert!(
            !guard.holds(1, own(false, 0)),
            "once released, a group stays released"
        );
    }

    #[test]
    fn groups_start_held_until_decided_and_unknown_groups_never_vote() {
        let guard = VoteGuard::new(1);
        assert!(guard.holds(0, own(false, 0)));
        assert!(
            guard.holds(0, own(true, 1_000_000)),
            "a leader heard before the node compared its copy with its peers'"
        );
        guard.release(0);
        assert!(!guard.holds(0, own(false, 0)));
        assert!(guard.holds(7, own(true, u64::MAX)));
    }
}
