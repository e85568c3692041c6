//! Group 0's voters kept to [`CONTROL_VOTERS`]: a group forms with voters
//! only, so a cluster formed with more founders than that starts with
//! every founder voting in group 0. Its leader then demotes the extra
//! voters to learners, one at a time, each once every remaining voter's
//! quorum answers: metadata writes come to wait for three of five nodes
//! whatever the founders' number. (`runnel ctl node` keeps the number
//! from then on: see `placement::cluster_target`.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::membership::{answering, leave, members, Leaving};
use crate::placement::{zone_of, Zones, CONTROL_VOTERS};
use crate::raft::group::RaftGroup;
use crate::raft::transport::PeerQueries;
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;

/// How often group 0's leader looks at its voters.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Runs on every node until aborted (see the module docs).
pub(super) async fn trim(control: Arc<RaftGroup>, me: NodeId, peers: Arc<dyn PeerQueries>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if control.leader() != Some(me) || control.changing_membership() {
            continue;
        }
        let (voters, _) = members(&control);
        if voters.len() <= CONTROL_VOTERS {
            continue;
        }
        let up = answering(&*peers, me, &control).await;
        let listed: Vec<NodeId> = voters.iter().copied().collect();
        let preferred = super::leaders::preferred_leader(&control, 0, &listed);
        let kept = [Some(me), preferred];
        let zones = control.view().with_state(|s| s.zones().clone());
        let Some(extra) = extra_voter(&voters, &up, &kept, &zones) else {
            continue;
        };
        match leave(&control, extra, &up, Leaving::VotesOnly).await {
            Ok(_) => tracing::info!(
                node = extra,
                "group 0 has more than {CONTROL_VOTERS} voters: node {extra} now follows it as \
                 a learner"
            ),
            Err(err) => tracing::debug!(node = extra, error = %err, "not demoted yet"),
        }
    }
}

/// The voter to demote first: one that does not answer (the group then
/// keeps the voters it can count on), else one of the zone with the most
/// voters (so that the five left span the zones), the highest id among
/// them; never one of `kept` (the leader, and the node group 0 prefers
/// as its leader).
fn extra_voter(
    voters: &BTreeSet<NodeId>,
    up: &BTreeSet<NodeId>,
    kept: &[Option<NodeId>],
    zones: &Zones,
) -> Option<NodeId> {
    let others = voters.iter().rev().filter(|v| !kept.contains(&Some(**v)));
    let silent = others.clone().find(|v| !up.contains(v));
    let in_zone = |v: &NodeId| {
        let zone = zone_of(zones, *v);
        voters
            .iter()
            .filter(|o| zone_of(zones, **o) == zone)
            .count()
    };
    // `max_by_key` keeps the last of equals: iterate lowest id first.
    let crowded = || {
        voters
            .iter()
            .filter(|v| !kept.contains(&Some(**v)))
            .max_by_key(|v| in_zone(v))
    };
    silent.or_else(crowded).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_voter_goes_first_then_the_highest_id_never_the_leader_or_the_preferred() {
        let voters: BTreeSet<NodeId> = (1..=7).collect();
        let all: BTreeSet<NodeId> = (1..=7).collect();
        let none = Zones::new();
        assert_eq!(extra_voter(&voters, &all, &[Some(1), None], &none), Some(7));
        assert_eq!(
            extra_voter(&voters, &all, &[Some(7), Some(1)], &none),
            Some(6)
        );
        assert_eq!(
            extra_voter(&voters, &all, &[Some(1), Some(7)], &none),
            Some(6)
        );
        let without_3: BTreeSet<NodeId> = all.iter().copied().filter(|n| *n != 3).collect();
        assert_eq!(
            extra_voter(&voters, &without_3, &[Some(7), None], &none),
            Some(3)
        );
        let one = BTreeSet::from([4]);
        assert_eq!(extra_voter(&one, &all, &[Some(4), Some(4)], &none), None);
    }

    #[test]
    fn the_voter_demoted_is_from_the_zone_with_the_most_voters() {
        // Six founders in three zones of two: 1-2 in a, 3-4 in b, 5-6 in c;
        // 1-3 in a would crowd it.
        let zones: Zones = [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "c"), (6, "c")]
            .into_iter()
            .map(|(n, z)| (n, z.to_string()))
            .collect();
        let voters: BTreeSet<NodeId> = (1..=6).collect();
        assert_eq!(
            extra_voter(&voters, &voters, &[Some(1), None], &zones),
            Some(3)
        );
        assert_eq!(
            extra_voter(&voters, &voters, &[Some(3), Some(2)], &zones),
            Some(1)
        );
    }
}
