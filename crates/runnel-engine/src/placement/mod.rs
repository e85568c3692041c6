//! Placement: which nodes hold each group's replicas, and which of them
//! should lead it (see `docs/elastic-cluster.md`).
//!
//! Pure functions of the cluster's members and the current placement, so
//! they are tested exhaustively and by properties: [`target`] computes
//! the placement to converge to, [`cluster_target`] that of a cluster
//! (group 0 voted on by five members at most and learned by the rest),
//! [`moves`] the single-replica moves that get
//! there. A new cluster forms on [`cluster_target`]; `runnel ctl node`
//! adds, drains and replaces nodes by applying [`moves`], one at a time.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::api::group_index;
use crate::raft::NodeId;

/// Each group's replicas, in order: the first is the preferred leader.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    pub groups: Vec<Vec<NodeId>>,
}

/// One replica of one group moving from a node to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Move {
    pub group: usize,
    /// `None` when the group gains a replica (it had fewer than wanted).
    pub from: Option<NodeId>,
    /// `None` when the group loses a replica (it had more than wanted).
    pub to: Option<NodeId>,
}

impl Placement {
    /// Replicas held per member (members holding none included).
    pub fn replicas_per_node(&self, members: &[NodeId]) -> BTreeMap<NodeId, usize> {
        let mut load: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
        for node in self.groups.iter().flatten() {
            *load.entry(*node).or_default() += 1;
        }
        load
    }

    /// Preferred leaderships per member.
    pub fn leaders_per_node(&self, members: &[NodeId]) -> BTreeMap<NodeId, usize> {
        let mut load: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
        for first in self.groups.iter().filter_map(|g| g.first()) {
            *load.entry(*first).or_default() += 1;
        }
        load
    }
}

/// Each member's zone (failure domain: `runnel serve --zone`). Members
/// not listed share one unnamed zone, so a cluster without zones is one
/// zone and placement ignores them.
pub type Zones = BTreeMap<NodeId, String>;

/// The zone of `node` in `zones` (`""`: none given).
pub fn zone_of(zones: &Zones, node: NodeId) -> &str {
    zones.get(&node).map_or("", String::as_str)
}

/// The most replicas of one group a zone may hold: one each while there
/// are at least as many zones as replicas, else as evenly as the zones
/// allow (`ceil(replicas / zones)`).
pub fn zone_cap(zones: &Zones, members: &BTreeSet<NodeId>, replicas: usize) -> usize {
    let distinct: BTreeSet<&str> = members.iter().map(|m| zone_of(zones, *m)).collect();
    replicas.div_ceil(distinct.len().max(1)).max(1)
}

/// The groups of `placement` that a single zone can take down: those
/// holding a majority of their replicas in one zone (named with it). A
/// cluster with fewer zones than replicas cannot avoid some.
pub fn quorum_in_one_zone(placement: &Placement, zones: &Zones) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (g, replicas) in placement.groups.iter().enumerate() {
        let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
        for node in replicas {
            *per_zone.entry(zone_of(zones, *node)).or_default() += 1;
        }
        let quorum = replicas.len() / 2 + 1;
        if replicas.len() > 1 {
            if let Some((zone, _)) = per_zone.iter().find(|(_, n)| **n >= quorum) {
                out.push((g, zone.to_string()));
            }
        }
    }
    out
}

/// The placement to converge to for `group_count` groups of
/// `min(replication, members)` replicas each over the active `members`:
/// every replica on an active member, no two of a group on one node, no
/// more of a group in one zone than [`zone_cap`] (when the members'
/// zones can honour it), replicas per node as even as the zones allow
/// (differing by at most one without zones), preferred leaders per node
/// at most `ceil(groups / members)`; among such placements, one that
/// keeps as many of `current`'s replicas (and leaders) as it can.
pub fn target(
    current: &Placement,
    members: &[NodeId],
    zones: &Zones,
    group_count: usize,
    replication: usize,
) -> Placement {
    let members: BTreeSet<NodeId> = members.iter().copied().collect();
    assert!(!members.is_empty(), "a placement needs a member");
    let want = replication.clamp(1, members.len());
    let cap = zone_cap(zones, &members, want);
    let zone = |n: &NodeId| zone_of(zones, *n);
    let in_zone = |replicas: &[NodeId], z: &str| replicas.iter().filter(|n| zone(n) == z).count();
    let mut groups: Vec<Vec<NodeId>> = (0..group_count)
        .map(|g| {
            let mut kept = Vec::new();
            for node in current.groups.get(g).into_iter().flatten() {
                if members.contains(node) && !kept.contains(node) {
                    kept.push(*node);
                }
            }
            kept
        })
        .collect();
    let mut load: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
    for node in groups.iter().flatten() {
        *load.get_mut(node).expect("kept replicas are members") += 1;
    }
    // Too many in one zone: drop the busiest of that zone's replicas (not
    // the preferred leader, which is first), while a member of a zone with
    // room can take its place.
    for replicas in &mut groups {
        let room_elsewhere = |replicas: &[NodeId]| {
            members
                .iter()
                .any(|m| !replicas.contains(m) && in_zone(replicas, zone(m)) < cap)
        };
        loop {
            let crowded = replicas
                .iter()
                .map(&zone)
                .find(|z| in_zone(replicas, z) > cap)
                .map(str::to_string);
            let Some(crowded) = crowded.filter(|_| room_elsewhere(replicas)) else {
                break;
            };
            let (at, node) = replicas
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, n)| zone(n) == crowded)
                .max_by_key(|(_, n)| (load[*n], **n))
                .map(|(at, n)| (at, *n))
                .expect("a crowded zone holds a replica after the first");
            replicas.remove(at);
            *load.get_mut(&node).expect("member") -= 1;
        }
    }
    // Too many replicas: drop those in zones over their cap, then on the
    // busiest nodes (never the preferred leader, which is first).
    for replicas in &mut groups {
        while replicas.len() > want {
            let crowds = |n: &NodeId| in_zone(replicas, zone(n)) > cap;
            let (at, node) = replicas
                .iter()
                .enumerate()
                .skip(1)
                .max_by_key(|(_, n)| (crowds(n), load[*n], **n))
                .map(|(at, n)| (at, *n))
                .expect("more than one replica");
            replicas.remove(at);
            *load.get_mut(&node).expect("member") -= 1;
        }
    }
    // Too few: add the member the group lacks in the zone it has fewest
    // replicas in (a zone at its cap only when no other is left), the
    // least loaded among equals.
    for replicas in &mut groups {
        while replicas.len() < want {
            let node = *members
                .iter()
                .filter(|m| !replicas.contains(m))
                .min_by_key(|m| {
                    let held = in_zone(replicas, zone(m));
                    (held >= cap, held, load[*m], **m)
                })
                .expect("want <= members");
            replicas.push(node);
            *load.get_mut(&node).expect("member") += 1;
        }
    }
    // Even out: move a replica from a busier node to an idler one (two
    // apart at least), busiest and idlest first, while one can move
    // without crowding a zone. Each move lowers the sum of squared loads,
    // so this ends.
    loop {
        let mut by_load: Vec<(usize, NodeId)> = load.iter().map(|(n, l)| (*l, *n)).collect();
        by_load.sort_unstable();
        let found = by_load.iter().rev().find_map(|&(high, busy)| {
            by_load
                .iter()
                .take_while(|(low, _)| high > low + 1)
                .find_map(|&(_, idle)| {
                    let fits = |r: &Vec<NodeId>| {
                        r.contains(&busy)
                            && !r.contains(&idle)
                            && (zone(&idle) == zone(&busy) || in_zone(r, zone(&idle)) < cap)
                    };
                    let g = groups.iter().rposition(fits)?;
                    Some((g, busy, idle))
                })
        });
        let Some((g, busy, idle)) = found else {
            break;
        };
        let at = groups[g].iter().position(|n| *n == busy).expect("found");
        groups[g][at] = idle;
        *load.get_mut(&busy).expect("member") -= 1;
        *load.get_mut(&idle).expect("member") += 1;
    }
    balance_leaders(&mut groups, &members);
    for (g, replicas) in groups.iter().enumerate() {
        let distinct: BTreeSet<&NodeId> = replicas.iter().collect();
        assert!(
            replicas.len() == want && distinct.len() == want,
            "group {g} placed on {replicas:?}, not {want} distinct members"
        );
        assert!(
            replicas.iter().all(|n| members.contains(n)),
            "group {g} placed on {replicas:?}, beyond the members"
        );
    }
    Placement { groups }
}

/// The group a stream lives in, of a cluster's `group_count`: one of the
/// data groups `1..group_count`, by a hash of its name. Group 0, the
/// control group, is followed by every member and holds the cluster's
/// metadata; it holds streams only in a cluster of one group. Streams
/// kept out of it are copied to `replication` nodes, not to every node.
pub fn stream_group(name: &str, group_count: usize) -> usize {
    if group_count <= 1 {
        return 0;
    }
    1 + group_index(name, group_count - 1)
}

/// The control group's voters at most. A metadata write waits for a
/// quorum of them however large the cluster grows; every other member
/// follows the group as a learner (it applies the same entries, so it
/// knows the members, the placement and the subscriptions).
pub const CONTROL_VOTERS: usize = 5;

/// The placement of a cluster's groups: group 0 (the control group: the
/// cluster's metadata and subscriptions) voted on by [`CONTROL_VOTERS`]
/// of the members at most (those it has, while they are members; the
/// others learn it), the data groups `1..group_count` placed by
/// [`target`] with `replication` replicas each. Group 0's first replica
/// (its preferred leader) is kept while it leads no more than
/// `ceil(group_count / members)` groups with it, else it is the voter
/// that leads the fewest data groups.
pub fn cluster_target(
    current: &Placement,
    members: &[NodeId],
    zones: &Zones,
    group_count: usize,
    replication: usize,
) -> Placement {
    assert!(group_count >= 1, "a cluster has group 0");
    let data_now = Placement {
        groups: current.groups.iter().skip(1).cloned().collect(),
    };
    let data = target(&data_now, members, zones, group_count - 1, replication);
    let mut everyone: Vec<NodeId> = members.to_vec();
    everyone.sort_unstable();
    everyone.dedup();
    let data_leads = data.leaders_per_node(&everyone);
    let mut voters = control_voters(current.groups.first(), &everyone, zones, &data_leads);
    let cap = group_count.div_ceil(everyone.len());
    let kept = voters
        .first()
        .filter(|first| current.groups.first().and_then(|g| g.first()) == Some(*first))
        .filter(|first| data_leads.get(first).is_some_and(|l| *l < cap))
        .copied();
    let first = kept.or_else(|| {
        let fewest = voters.iter().min_by_key(|n| (data_leads[*n], **n));
        fewest.copied()
    });
    if let Some(at) = voters.iter().position(|n| Some(*n) == first) {
        voters[..=at].rotate_right(1);
    }
    let mut groups = vec![voters];
    groups.extend(data.groups);
    Placement { groups }
}

/// Group 0's voters among `members`: those it has, in their order, while
/// they are members and their zone holds no more of them than
/// [`zone_cap`], then members from the zones with fewest voters, leading
/// the fewest data groups (`data_leads`; by id among equals, so one of
/// them can lead group 0 within the cap), [`CONTROL_VOTERS`] at most (a
/// cluster that formed with more drops its last ones).
fn control_voters(
    current: Option<&Vec<NodeId>>,
    members: &[NodeId],
    zones: &Zones,
    data_leads: &BTreeMap<NodeId, usize>,
) -> Vec<NodeId> {
    let count = CONTROL_VOTERS.min(members.len());
    let cap = zone_cap(zones, &members.iter().copied().collect(), count);
    let in_zone =
        |voters: &[NodeId], z: &str| voters.iter().filter(|v| zone_of(zones, **v) == z).count();
    let mut voters: Vec<NodeId> = Vec::with_capacity(count);
    let held = current
        .into_iter()
        .flatten()
        .filter(|n| members.contains(n));
    for node in held {
        if voters.len() < count
            && !voters.contains(node)
            && in_zone(&voters, zone_of(zones, *node)) < cap
        {
            voters.push(*node);
        }
    }
    while voters.len() < count {
        let next = members
            .iter()
            .filter(|m| !voters.contains(m))
            .min_by_key(|m| (in_zone(&voters, zone_of(zones, **m)), data_leads[*m], **m))
            .copied()
            .expect("count <= members");
        voters.push(next);
    }
    voters
}

/// The members that follow group 0 as learners in `placement` (made by
/// [`cluster_target`]): those not among its voters.
pub fn control_learners(placement: &Placement, members: &[NodeId]) -> Vec<NodeId> {
    let voters = placement.groups.first().map_or(&[][..], |g| g.as_slice());
    let mut learners: Vec<NodeId> = members
        .iter()
        .filter(|m| !voters.contains(m))
        .copied()
        .collect();
    learners.sort_unstable();
    learners.dedup();
    learners
}

/// Reorders each group's replicas so that no member prefers to lead more
/// than `ceil(groups / members)` groups, keeping current first replicas
/// where it can: a group whose leader is over the cap hands its
/// leadership along a chain of groups to a member under it (an augmenting
/// path, as in bipartite matching).
fn balance_leaders(groups: &mut [Vec<NodeId>], members: &BTreeSet<NodeId>) {
    let cap = groups.len().div_ceil(members.len());
    let mut leads: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
    for r in groups.iter() {
        *leads.get_mut(&r[0]).expect("member") += 1;
    }
    while let Some((&over, _)) = leads.iter().find(|(_, l)| **l > cap) {
        let Some(path) = augmenting_path(groups, &leads, cap, over) else {
            // No chain frees a leadership (only when replicas are too
            // few to spread leaders that evenly); leave it.
            return;
        };
        // Along the path, each group's leadership passes to the next node.
        for (group, to) in path {
            let at = groups[group]
                .iter()
                .position(|n| *n == to)
                .expect("a replica");
            let from = groups[group][0];
            groups[group].swap(0, at);
            *leads.get_mut(&from).expect("member") -= 1;
            *leads.get_mut(&to).expect("member") += 1;
        }
    }
}

/// A chain `(group, new leader)` that takes one leadership from `start`
/// and ends at a node under `cap`, found breadth first.
fn augmenting_path(
    groups: &[Vec<NodeId>],
    leads: &BTreeMap<NodeId, usize>,
    cap: usize,
    start: NodeId,
) -> Option<Vec<(usize, NodeId)>> {
    let mut reached: BTreeMap<NodeId, Option<(usize, NodeId)>> = BTreeMap::new();
    reached.insert(start, None);
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for node in frontier {
            for (g, replicas) in groups.iter().enumerate().filter(|(_, r)| r[0] == node) {
                for &to in &replicas[1..] {
                    if reached.contains_key(&to) {
                        continue;
                    }
                    reached.insert(to, Some((g, node)));
                    if leads[&to] < cap {
                        let mut path = Vec::new();
                        let mut at = to;
                        while let Some(Some((group, from))) = reached.get(&at) {
                            path.push((*group, at));
                            at = *from;
                        }
                        path.reverse();
                        return Some(path);
                    }
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    None
}

/// The replica moves from `current` to `target`, group by group: each
/// node leaving a group is paired with one joining it.
pub fn moves(current: &Placement, target: &Placement) -> Vec<Move> {
    let mut out = Vec::new();
    for (group, wanted) in target.groups.iter().enumerate() {
        let held = current.groups.get(group).map_or(&[][..], |g| g.as_slice());
        let leaving: Vec<NodeId> = held
            .iter()
            .filter(|n| !wanted.contains(n))
            .copied()
            .collect();
        let joining: Vec<NodeId> = wanted
            .iter()
            .filter(|n| !held.contains(n))
            .copied()
            .collect();
        for i in 0..leaving.len().max(joining.len()) {
            out.push(Move {
                group,
                from: leaving.get(i).copied(),
                to: joining.get(i).copied(),
            });
        }
    }
    for (group, held) in current.groups.iter().enumerate().skip(target.groups.len()) {
        out.extend(held.iter().map(|n| Move {
            group,
            from: Some(*n),
            to: None,
        }));
    }
    out
}
