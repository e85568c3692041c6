//! Which followers a leadership transfer mutes (pure; see [`super`] for
//! the procedure).
//!
//! The target wins its election with its own vote, the old leader's (when
//! the leader's own lease has run out: openraft 0.9 dates a leader's vote
//! from its election) and those of followers whose lease ran out because
//! they were muted. For writes to commit throughout, the leader must keep
//! a quorum with the target and the followers it does not mute. With `q`
//! the quorum and the leader's vote, that takes `q - 2` reachable
//! followers kept besides the target and `q - 2` muted: with every voter
//! up, always. Without the leader's vote it takes one more muted, which
//! an even number of voters never leaves. Otherwise every reachable
//! follower but the target is muted and writes pause for the lease.

use std::collections::BTreeSet;

pub use crate::error::PlanRefusal;
use crate::raft::NodeId;

/// How a transfer treats the group's other voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferPlan {
    /// Followers replication is held back from until their lease runs
    /// out (their votes, with the target's and perhaps the leader's,
    /// make a quorum). The others hear from the leader throughout.
    pub mute: Vec<NodeId>,
    /// Whether writes commit while the muted followers' lease runs out
    /// (false: they pause from the start).
    pub writes_flow: bool,
}

/// The plan for moving leadership of a group with `voters` from `leader`
/// to `to`, with the followers in `reachable` up; `leader_grants`: the
/// leader's own lease has run out, so it votes for the target.
/// `matched(node)` is how far the leader knows `node` holds its log: the
/// least caught up are muted (they lose least by hearing nothing for a
/// while). Why there is none: `to` is not another voter, or too few
/// voters are up for it to win an election.
pub fn plan(
    voters: &BTreeSet<NodeId>,
    leader: NodeId,
    to: NodeId,
    reachable: &BTreeSet<NodeId>,
    leader_grants: bool,
    matched: impl Fn(NodeId) -> u64,
) -> Result<TransferPlan, PlanRefusal> {
    if to == leader || !voters.contains(&to) || !voters.contains(&leader) {
        return Err(PlanRefusal::NotAnotherVoter { to });
    }
    if !reachable.contains(&to) {
        return Err(PlanRefusal::Unreachable { to });
    }
    let quorum = voters.len() / 2 + 1;
    let mut up: Vec<NodeId> = voters
        .iter()
        .copied()
        .filter(|v| *v != leader && *v != to && reachable.contains(v))
        .collect();
    // The target's vote and perhaps the leader's; the rest from muted
    // followers.
    let own_votes = 1 + leader_grants as usize;
    if up.len() + own_votes < quorum {
        return Err(PlanRefusal::CannotWin {
            to,
            up: up.len() + 2,
            voters: voters.len(),
        });
    }
    let to_mute = quorum.saturating_sub(own_votes);
    let to_keep = quorum.saturating_sub(2);
    // Least caught up first; ties by id, so the plan is deterministic.
    up.sort_by_key(|v| (matched(*v), *v));
    if up.len() < to_keep + to_mute {
        up.sort_unstable();
        return Ok(TransferPlan {
            mute: up,
            writes_flow: false,
        });
    }
    up.truncate(to_mute);
    up.sort_unstable();
    Ok(TransferPlan {
        mute: up,
        writes_flow: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn three_voters_mute_nobody_when_the_leader_votes_and_the_other_follower_if_not() {
        let up = set(&[2, 3]);
        let p = plan(&set(&[1, 2, 3]), 1, 3, &up, true, |_| 0).unwrap();
        assert_eq!(
            p,
            TransferPlan {
                mute: vec![],
                writes_flow: true
            }
        );
        let p = plan(&set(&[1, 2, 3]), 1, 3, &up, false, |_| 0).unwrap();
        assert_eq!(p.mute, vec![2]);
        assert!(p.writes_flow);
    }

    #[test]
    fn five_voters_mute_the_least_caught_up() {
        let matched = |n: NodeId| [0, 0, 50, 90, 10, 70][n as usize];
        let up = set(&[2, 3, 4, 5]);
        let p = plan(&set(&[1, 2, 3, 4, 5]), 1, 2, &up, true, matched).unwrap();
        assert_eq!(p.mute, vec![4]);
        assert!(p.writes_flow);
        let p = plan(&set(&[1, 2, 3, 4, 5]), 1, 2, &up, false, matched).unwrap();
        assert_eq!(p.mute, vec![4, 5]);
        assert!(p.writes_flow);
    }

    #[test]
    fn even_voters_keep_writes_flowing_only_with_the_leaders_vote() {
        let up = set(&[1, 3, 4]);
        let p = plan(&set(&[1, 2, 3, 4]), 2, 4, &up, true, |_| 0).unwrap();
        assert_eq!(p.mute, vec![1]);
        assert!(p.writes_flow);
        let p = plan(&set(&[1, 2, 3, 4]), 2, 4, &up, false, |_| 0).unwrap();
        assert_eq!(p.mute, vec![1, 3]);
        assert!(!p.writes_flow);
        let p = plan(&set(&[1, 2]), 1, 2, &set(&[2]), true, |_| 0).unwrap();
        assert_eq!(p.mute, Vec::<NodeId>::new());
        assert!(p.writes_flow);
        assert!(plan(&set(&[1, 2]), 1, 2, &set(&[2]), false, |_| 0).is_err());
    }

    #[test]
    fn a_follower_down_pauses_writes_or_leaves_no_election_to_win() {
        let p = plan(&set(&[1, 2, 3, 4, 5]), 1, 2, &set(&[2, 3, 4]), false, |_| 0).unwrap();
        assert!(
            !p.writes_flow,
            "4 of 5 up: no two quorums meeting only at the target"
        );
        assert_eq!(p.mute, vec![3, 4]);
        let refused = plan(&set(&[1, 2, 3]), 1, 2, &set(&[2]), false, |_| 0).unwrap_err();
        assert_eq!(
            refused,
            PlanRefusal::CannotWin {
                to: 2,
                up: 2,
                voters: 3
            }
        );
        assert!(refused.to_string().contains("could not win"), "{refused}");
    }

    #[test]
    fn no_plan_to_oneself_to_a_non_voter_or_to_a_node_down() {
        let up = set(&[1, 2, 3, 4]);
        assert!(plan(&set(&[1, 2, 3]), 1, 1, &up, true, |_| 0).is_err());
        assert!(plan(&set(&[1, 2, 3]), 1, 4, &up, true, |_| 0).is_err());
        assert!(plan(&set(&[2, 3, 4]), 1, 2, &up, true, |_| 0).is_err());
        assert!(plan(&set(&[1, 2, 3]), 1, 2, &set(&[3]), true, |_| 0).is_err());
    }

    proptest! {
        /// Only reachable followers other than the target are muted. The
        /// target can win a quorum from its own vote, the leader's if it
        /// grants, and the muted followers'; with writes flowing the
        /// leader keeps a quorum of the followers it does not mute. Writes
        /// flow whenever every voter is up and their number is odd, or
        /// the leader grants.
        #[test]
        fn plans_leave_the_target_a_quorum_and_the_leader_one_while_writes_flow(
            n in 2usize..10,
            leader_at in 0usize..10,
            to_at in 0usize..10,
            down in proptest::collection::btree_set(1u64..10, 0..4),
            leader_grants: bool,
            matched in proptest::collection::vec(0u64..100, 10),
        ) {
            let voters: BTreeSet<NodeId> = (1..=n as NodeId).collect();
            let leader = (leader_at % n) as NodeId + 1;
            let to = (to_at % n) as NodeId + 1;
            prop_assume!(leader != to && !down.contains(&to));
            let up: BTreeSet<NodeId> = voters.difference(&down).copied().collect();
            let quorum = n / 2 + 1;
            let others_up = up.iter().filter(|v| **v != leader && **v != to).count();
            let grants = leader_grants as usize;
            let Ok(p) = plan(&voters, leader, to, &up, leader_grants, |v| matched[v as usize])
            else {
                prop_assert!(others_up + 1 + grants < quorum, "refused with {others_up} up");
                return Ok(());
            };
            prop_assert!(p.mute.iter().all(|v| up.contains(v) && *v != leader && *v != to));
            prop_assert!(p.mute.len() + 1 + grants >= quorum, "the target can win");
            if p.writes_flow {
                let kept = others_up - p.mute.len() + 1;
                prop_assert!(kept + 1 >= quorum, "the leader keeps a quorum");
            }
            if down.is_disjoint(&voters) && (n % 2 == 1 || leader_grants) {
                prop_assert!(p.writes_flow, "all {n} voters up");
            }
        }
    }
}
