//! The planner's unit and property tests: targets balanced and minimal,
//! moves that reach them one replica at a time.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// A cluster without zones.
const NO_ZONES: Zones = Zones::new();

/// Checks what every target placement must be.
fn check(placement: &Placement, members: &[NodeId], group_count: usize, replication: usize) {
    let want = replication.clamp(1, members.len());
    assert_eq!(placement.groups.len(), group_count);
    for (g, replicas) in placement.groups.iter().enumerate() {
        assert_eq!(replicas.len(), want, "group {g}: {replicas:?}");
        let distinct: BTreeSet<_> = replicas.iter().collect();
        assert_eq!(
            distinct.len(),
            want,
            "group {g} repeats a node: {replicas:?}"
        );
        assert!(
            replicas.iter().all(|n| members.contains(n)),
            "group {g}: {replicas:?}"
        );
    }
    let load = placement.replicas_per_node(members);
    let (low, high) = (load.values().min().unwrap(), load.values().max().unwrap());
    assert!(high - low <= 1, "replicas per node {load:?}");
    let leads = placement.leaders_per_node(members);
    let cap = group_count.div_ceil(members.len());
    assert!(
        leads.values().all(|l| *l <= cap),
        "leaders per node {leads:?} over {cap}"
    );
}

fn applied(current: &Placement, moves: &[Move], group_count: usize) -> Vec<BTreeSet<NodeId>> {
    let mut sets: Vec<BTreeSet<NodeId>> = (0..group_count)
        .map(|g| {
            current
                .groups
                .get(g)
                .into_iter()
                .flatten()
                .copied()
                .collect()
        })
        .collect();
    for m in moves.iter().filter(|m| m.group < group_count) {
        if let Some(from) = m.from {
            assert!(
                sets[m.group].remove(&from),
                "{m:?} moves a replica the group lacks"
            );
        }
        if let Some(to) = m.to {
            assert!(
                sets[m.group].insert(to),
                "{m:?} adds a replica the group has"
            );
        }
    }
    sets
}

#[test]
fn a_new_cluster_of_three_spreads_leaders_one_each() {
    let members = [1, 2, 3];
    let placement = target(&Placement::default(), &members, &NO_ZONES, 3, 3);
    check(&placement, &members, 3, 3);
    assert_eq!(
        placement
            .leaders_per_node(&members)
            .values()
            .collect::<Vec<_>>(),
        vec![&1, &1, &1]
    );
}

#[test]
fn a_sixth_node_takes_its_share_and_no_more() {
    let five = [1, 2, 3, 4, 5];
    let before = target(&Placement::default(), &five, &NO_ZONES, 20, 3);
    check(&before, &five, 20, 3);
    let six = [1, 2, 3, 4, 5, 6];
    let after = target(&before, &six, &NO_ZONES, 20, 3);
    check(&after, &six, 20, 3);
    let moved = moves(&before, &after);
    // 60 replicas over 6 nodes: the new node takes 10, each one move.
    assert_eq!(moved.len(), 10, "{moved:?}");
    assert!(moved.iter().all(|m| m.to == Some(6) && m.from.is_some()));
}

#[test]
fn draining_a_node_moves_only_its_replicas_when_the_rest_stay_balanced() {
    let six = [1, 2, 3, 4, 5, 6];
    let before = target(&Placement::default(), &six, &NO_ZONES, 10, 3);
    let five = [1, 3, 4, 5, 6];
    let after = target(&before, &five, &NO_ZONES, 10, 3);
    check(&after, &five, 10, 3);
    let moved = moves(&before, &after);
    let held_by_2 = before.replicas_per_node(&six)[&2];
    assert!(moved.iter().filter(|m| m.from == Some(2)).count() == held_by_2);
    // Balancing after may move a few more; never more than the drained
    // node held again.
    assert!(moved.len() <= 2 * held_by_2, "{moved:?}");
}

#[test]
fn fewer_members_than_replicas_gives_every_member_every_group() {
    let members = [4, 9];
    let placement = target(&Placement::default(), &members, &NO_ZONES, 5, 3);
    check(&placement, &members, 5, 3);
}

fn placement_strategy() -> impl Strategy<Value = (Placement, Vec<NodeId>, usize, usize)> {
    (
        prop::collection::vec(prop::collection::vec(1..12u64, 0..6), 0..30),
        prop::collection::btree_set(1..12u64, 1..8),
        1..30usize,
        1..5usize,
    )
        .prop_map(|(groups, members, count, replication)| {
            // A group never holds two replicas on one node.
            let groups = groups
                .into_iter()
                .map(|mut replicas| {
                    let mut seen = BTreeSet::new();
                    replicas.retain(|n| seen.insert(*n));
                    replicas
                })
                .collect();
            (
                Placement { groups },
                members.into_iter().collect(),
                count,
                replication,
            )
        })
}

proptest! {
    /// From any placement (replicas on departed nodes, too many,
    /// too few), the target is valid, the moves lead to it, and it
    /// is a fixed point: planning again moves nothing.
    #[test]
    fn any_placement_converges_to_a_valid_stable_one(
        (current, members, count, replication) in placement_strategy()
    ) {
        let goal = target(&current, &members, &NO_ZONES, count, replication);
        check(&goal, &members, count, replication);
        let moved = moves(&current, &goal);
        let sets = applied(&current, &moved, count);
        for (g, replicas) in goal.groups.iter().enumerate() {
            prop_assert_eq!(&sets[g], &replicas.iter().copied().collect::<BTreeSet<_>>());
        }
        let again = target(&goal, &members, &NO_ZONES, count, replication);
        prop_assert_eq!(&again, &goal);
        prop_assert!(moves(&goal, &again).is_empty());
    }

    /// A node joining a settled cluster takes about its share of the
    /// replicas, each one move, and nothing else moves.
    #[test]
    fn a_joining_node_moves_about_its_share(
        (current, members, count, replication) in placement_strategy()
    ) {
        let settled = target(&current, &members, &NO_ZONES, count, replication);
        let newcomer = 100;
        let mut grown = members.clone();
        grown.push(newcomer);
        let goal = target(&settled, &grown, &NO_ZONES, count, replication);
        check(&goal, &grown, count, replication);
        let moved = moves(&settled, &goal);
        let want = replication.clamp(1, grown.len());
        let share = (count * want).div_ceil(grown.len());
        // A smaller cluster than the replication factor grows every group.
        let grows = want > replication.clamp(1, members.len());
        prop_assert!(grows || moved.len() <= share, "{} moves, share {}", moved.len(), share);
        prop_assert!(moved.iter().all(|m| m.to == Some(newcomer)));
    }
}

#[test]
fn the_control_group_has_five_voters_at_most_and_the_data_groups_are_balanced() {
    for nodes in 1..=8u64 {
        let members: Vec<NodeId> = (1..=nodes).collect();
        for group_count in 1..=9 {
            let placed = cluster_target(&Placement::default(), &members, &NO_ZONES, group_count, 3);
            assert_eq!(placed.groups.len(), group_count);
            let mut zero = placed.groups[0].clone();
            zero.sort_unstable();
            zero.dedup();
            let voters = (nodes as usize).min(CONTROL_VOTERS);
            assert_eq!(zero.len(), voters, "group 0 of {placed:?}");
            assert!(zero.iter().all(|v| members.contains(v)), "{placed:?}");
            let mut followers = zero.clone();
            followers.extend(control_learners(&placed, &members));
            followers.sort_unstable();
            assert_eq!(
                followers, members,
                "every member follows group 0: {placed:?}"
            );
            let data = Placement {
                groups: placed.groups[1..].to_vec(),
            };
            check(&data, &members, group_count - 1, 3);
            let cap = group_count.div_ceil(members.len());
            let leads = placed.leaders_per_node(&members);
            assert!(
                leads.values().all(|l| *l <= cap),
                "{nodes} nodes, {group_count} groups: leaders per node {leads:?} over {cap}"
            );
        }
    }
}

#[test]
fn the_control_group_is_led_by_a_member_leading_few_data_groups() {
    // Node 1 leads group 0 and two of the four data groups: three of five,
    // over the cap of two. Group 0 goes to node 2, which leads one.
    let current = Placement {
        groups: vec![
            vec![1, 2, 3],
            vec![1, 2, 3],
            vec![1, 2, 3],
            vec![2, 1, 3],
            vec![3, 1, 2],
        ],
    };
    let placed = cluster_target(&current, &[1, 2, 3], &NO_ZONES, 5, 3);
    let firsts: Vec<NodeId> = placed.groups.iter().map(|g| g[0]).collect();
    assert_eq!(firsts, vec![2, 1, 1, 2, 3], "{placed:?}");
    // Within the cap, the first replica stays.
    let placed = cluster_target(&placed, &[1, 2, 3], &NO_ZONES, 5, 3);
    assert_eq!(placed.groups[0][0], 2);
}

#[test]
fn the_control_group_keeps_its_first_replica_while_it_is_a_member() {
    let current = Placement {
        groups: vec![vec![3, 1, 2], vec![1, 2, 3]],
    };
    let placed = cluster_target(&current, &[1, 2, 3, 4], &NO_ZONES, 2, 3);
    assert_eq!(placed.groups[0], vec![3, 1, 2, 4]);
    // Gone: the member leading the fewest data groups (node 1 leads
    // group 1) leads group 0.
    let placed = cluster_target(&current, &[1, 2, 4], &NO_ZONES, 2, 3);
    assert_eq!(placed.groups[0], vec![2, 1, 4]);
    // Its data group keeps three replicas, on the remaining members.
    let mut data = placed.groups[1].clone();
    data.sort_unstable();
    assert_eq!(data, vec![1, 2, 4]);
}

#[test]
fn the_control_group_keeps_its_voters_while_they_are_members() {
    let current = Placement {
        groups: vec![vec![2, 1, 3, 4, 5], vec![1, 2, 3], vec![4, 5, 6]],
    };
    let members: Vec<NodeId> = (1..=7).collect();
    let placed = cluster_target(&current, &members, &NO_ZONES, 3, 3);
    assert_eq!(placed.groups[0], vec![2, 1, 3, 4, 5], "{placed:?}");
    assert_eq!(control_learners(&placed, &members), vec![6, 7]);
    assert!(moves(&current, &placed).iter().all(|m| m.group != 0));

    // Node 3 leaves: one learner, the lowest id, takes its vote.
    let members = [1, 2, 4, 5, 6, 7];
    let placed = cluster_target(&current, &members, &NO_ZONES, 3, 3);
    assert_eq!(placed.groups[0], vec![2, 1, 4, 5, 6], "{placed:?}");
    assert_eq!(control_learners(&placed, &members), vec![7]);
    let zero: Vec<Move> = moves(&current, &placed)
        .into_iter()
        .filter(|m| m.group == 0)
        .collect();
    assert_eq!(
        zero,
        vec![Move {
            group: 0,
            from: Some(3),
            to: Some(6)
        }]
    );
}

#[test]
fn a_control_group_formed_with_more_voters_drops_the_last_ones() {
    let current = Placement {
        groups: vec![vec![1, 2, 3, 4, 5, 6, 7], vec![1, 2, 3]],
    };
    let members: Vec<NodeId> = (1..=7).collect();
    let placed = cluster_target(&current, &members, &NO_ZONES, 2, 3);
    let mut zero = placed.groups[0].clone();
    zero.sort_unstable();
    assert_eq!(zero, vec![1, 2, 3, 4, 5], "{placed:?}");
    assert_eq!(control_learners(&placed, &members), vec![6, 7]);
    let leaving: Vec<Option<NodeId>> = moves(&current, &placed)
        .into_iter()
        .filter(|m| m.group == 0)
        .map(|m| m.from)
        .collect();
    assert_eq!(leaving, vec![Some(6), Some(7)]);
}

/// Zones `a`, `b`, `c`, ... of two nodes each: nodes 1-2, 3-4, 5-6, ...
fn paired_zones(nodes: u64) -> Zones {
    (1..=nodes)
        .map(|n| (n, ((b'a' + ((n - 1) / 2) as u8) as char).to_string()))
        .collect()
}

/// The zones each group's replicas are in, as a set.
fn zones_of(replicas: &[NodeId], zones: &Zones) -> BTreeSet<String> {
    replicas
        .iter()
        .map(|n| zone_of(zones, *n).to_string())
        .collect()
}

#[test]
fn six_nodes_in_three_zones_put_every_group_in_three_zones() {
    let members: Vec<NodeId> = (1..=6).collect();
    let zones = paired_zones(6);
    let placed = cluster_target(&Placement::default(), &members, &zones, 13, 3);
    for (g, replicas) in placed.groups.iter().enumerate().skip(1) {
        assert_eq!(
            zones_of(replicas, &zones).len(),
            3,
            "group {g}: {replicas:?}"
        );
    }
    let data = Placement {
        groups: placed.groups[1..].to_vec(),
    };
    check(&data, &members, 12, 3);
    assert!(quorum_in_one_zone(&placed, &zones).is_empty());
    // Group 0's five voters: two zones of two and one of one, so losing
    // any zone leaves three of five.
    let voters = &placed.groups[0];
    assert_eq!(voters.len(), 5);
    for zone in ["a", "b", "c"] {
        let here = voters
            .iter()
            .filter(|v| zone_of(&zones, **v) == zone)
            .count();
        assert!((1..=2).contains(&here), "zone {zone}: {voters:?}");
    }
    // Without zones, the same nodes put groups' quorums in one zone (the
    // planner knew nothing of them): this is what zones fix.
    let blind = cluster_target(&Placement::default(), &members, &NO_ZONES, 13, 3);
    assert!(!quorum_in_one_zone(&blind, &zones).is_empty());
}

#[test]
fn a_placement_made_without_zones_moves_only_what_crowds_a_zone() {
    let members: Vec<NodeId> = (1..=6).collect();
    let zones = paired_zones(6);
    let blind = target(&Placement::default(), &members, &NO_ZONES, 12, 3);
    let placed = target(&blind, &members, &zones, 12, 3);
    check(&placed, &members, 12, 3);
    for (g, replicas) in placed.groups.iter().enumerate() {
        assert_eq!(
            zones_of(replicas, &zones).len(),
            3,
            "group {g}: {replicas:?}"
        );
    }
    // Each group in two zones moves one replica, at most.
    for (before, after) in blind.groups.iter().zip(&placed.groups) {
        let kept = before.iter().filter(|n| after.contains(n)).count();
        assert!(kept >= 2, "{before:?} -> {after:?}");
    }
    assert_eq!(target(&placed, &members, &zones, 12, 3), placed);
}

#[test]
fn a_zone_of_one_node_holds_a_replica_of_every_group() {
    let members: Vec<NodeId> = (1..=6).collect();
    let zones: Zones = [(1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c"), (6, "c")]
        .into_iter()
        .map(|(n, z)| (n, z.to_string()))
        .collect();
    let placed = target(&Placement::default(), &members, &zones, 6, 3);
    for replicas in &placed.groups {
        assert!(replicas.contains(&1), "{replicas:?}");
        assert_eq!(zones_of(replicas, &zones).len(), 3, "{replicas:?}");
    }
    // Balanced within each zone, as far as it can be.
    let load = placed.replicas_per_node(&members);
    assert_eq!((load[&2], load[&3]), (3, 3), "{load:?}");
    assert_eq!((load[&4], load[&5], load[&6]), (2, 2, 2), "{load:?}");
}

#[test]
fn fewer_zones_than_replicas_spread_the_replicas_as_evenly_as_they_can() {
    let members: Vec<NodeId> = (1..=4).collect();
    let zones: Zones = [(1, "a"), (2, "a"), (3, "b"), (4, "b")]
        .into_iter()
        .map(|(n, z)| (n, z.to_string()))
        .collect();
    let placed = target(&Placement::default(), &members, &zones, 8, 3);
    check(&placed, &members, 8, 3);
    for replicas in &placed.groups {
        assert_eq!(zones_of(replicas, &zones).len(), 2, "{replicas:?}");
    }
    // Two zones cannot keep three replicas' quorum out of one of them.
    assert_eq!(quorum_in_one_zone(&placed, &zones).len(), 8);
}

fn zoned_strategy() -> impl Strategy<Value = (Placement, Vec<NodeId>, Zones, usize, usize)> {
    (placement_strategy(), prop::collection::vec(0..4u8, 12)).prop_map(
        |((current, members, count, replication), zone_of_node)| {
            let zones = members
                .iter()
                .map(|n| (*n, format!("z{}", zone_of_node[*n as usize])))
                .collect();
            (current, members, zones, count, replication)
        },
    )
}

proptest! {
    /// With zones, from any placement: the target is a fixed point the
    /// moves lead to, every group on distinct members, and no zone holds
    /// more of a group than its cap when the zones have room for it.
    #[test]
    fn zoned_placements_converge_and_never_crowd_a_zone_that_has_room(
        (current, members, zones, count, replication) in zoned_strategy()
    ) {
        let goal = target(&current, &members, &zones, count, replication);
        let want = replication.clamp(1, members.len());
        let set: BTreeSet<NodeId> = members.iter().copied().collect();
        let cap = zone_cap(&zones, &set, want);
        let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &members {
            *sizes.entry(zone_of(&zones, *m)).or_default() += 1;
        }
        let room: usize = sizes.values().map(|s| (*s).min(cap)).sum();
        for replicas in &goal.groups {
            prop_assert_eq!(replicas.len(), want);
            prop_assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), want);
            prop_assert!(replicas.iter().all(|n| set.contains(n)));
            if room >= want {
                for zone in sizes.keys() {
                    let here = replicas.iter().filter(|n| zone_of(&zones, **n) == *zone).count();
                    prop_assert!(here <= cap, "{:?} crowds {} past {}", replicas, zone, cap);
                }
            }
        }
        let sets = applied(&current, &moves(&current, &goal), count);
        for (g, replicas) in goal.groups.iter().enumerate() {
            prop_assert_eq!(&sets[g], &replicas.iter().copied().collect::<BTreeSet<_>>());
        }
        prop_assert_eq!(target(&goal, &members, &zones, count, replication), goal);
    }
}
