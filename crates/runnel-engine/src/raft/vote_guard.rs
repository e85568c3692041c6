//! Votes of a node that rejoins a group without its state.
//!
//! Raft's safety rests on votes surviving: a node must never vote twice in
//! one term. A node that lost its disk has forgotten whom it voted for, so
//! if it came back inside an election it had voted in, it could vote for
//! a second candidate of that term and let two leaders be elected. Such a
//! node (its copy of a group is empty while a peer's is not) therefore
//! casts no vote in that group until it has heard from a leader: from then
//! on it knows the current term, and any later election is in a newer one.
//! Until then vote requests are answered with an error, which the
//! candidate counts as no vote.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Raft;

pub(crate) struct VoteGuard {
    holding: Vec<AtomicBool>,
}

impl VoteGuard {
    /// Every group starts held: whether this node may vote is known once
    /// it has compared its groups with its peers' (see `release`).
    pub fn new(groups: usize) -> VoteGuard {
        VoteGuard {
            holding: (0..groups).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// This node votes in `group` (it has the group's state, or the
    /// cluster is forming it).
    pub fn release(&self, group: u32) {
        if let Some(h) = self.holding.get(group as usize) {
            h.store(false, Ordering::Release);
        }
    }

    /// Whether a vote request in `group` must be refused now.
    pub fn refuses(&self, group: u32, raft: &Raft) -> bool {
        let Some(holding) = self.holding.get(group as usize) else {
            return true;
        };
        if !holding.load(Ordering::Acquire) {
            return false;
        }
        if raft.metrics().borrow().current_leader.is_some() {
            holding.store(false, Ordering::Release);
            return false;
        }
        true
    }
}

/// The error a refused vote request gets.
pub(crate) const REFUSAL: &str =
    "this node lost its state of the group and casts no vote until it hears from a leader";
