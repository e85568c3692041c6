//! Placing replicas as nodes come and go: `runnel ctl node add`, `remove`
//! and `replace` (and `runnel serve --join`) read where each group's
//! replicas are from the members' statuses, compute the placement the
//! cluster should have with the new set of nodes (group 0 voted on by
//! five of them at most and followed by the rest as learners, each other
//! group on `replication_factor` of them, balanced:
//! `runnel_engine::placement`), and apply the moves between the two one
//! at a time: the receiving node is added to the group (a learner caught
//! up, then a voter) before the giving node is removed, so a group never
//! has fewer replicas than before. A giving node that leads the group
//! hands its leadership over first, so writes go on during the transfer.
//! Then each group's preferred leader (the target's first replica,
//! balanced) is recorded in group 0, and leaderships move there. Each step is idempotent and the
//! placement is read afresh on every run, so a command cut short is
//! finished by running it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use runnel_engine::placement::{self, Placement};

use super::membership::{change_group, lead_away};
use super::{http_request, NodeArgs};

/// Where the cluster's replicas are, as its members report them.
#[derive(Debug)]
pub(crate) struct Layout {
    /// Every member's HTTP address.
    pub nodes: BTreeMap<u64, String>,
    /// Each group's voters, the leader first.
    pub placement: Placement,
    pub replication: usize,
    /// Each member's zone: as the cluster records them, and as members
    /// that answered say of themselves.
    pub zones: placement::Zones,
    /// The members whose status answered.
    pub answering: BTreeSet<u64>,
}

impl Layout {
    /// Reads the layout from `args.target` and the members it names,
    /// again while a group's leader does not answer or a membership
    /// change is under way (at most `args.timeout_secs`).
    pub(crate) fn read(args: &NodeArgs) -> Result<Layout, String> {
        let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
        loop {
            match Layout::read_once(args)? {
                Ok(layout) => return Ok(layout),
                Err(wait) if Instant::now() + READ_AGAIN < deadline => {
                    eprintln!("{wait}; reading the placement again");
                    std::thread::sleep(READ_AGAIN);
                }
                Err(wait) => return Err(format!("{wait}; run the command again")),
            }
        }
    }

    /// The layout, or why it cannot be read yet.
    fn read_once(args: &NodeArgs) -> Result<Result<Layout, String>, String> {
        let status = status_of(args, &args.target)?;
        if status["mode"] != "cluster" {
            return Err(format!(
                "{} is a single node: it has no membership to change",
                args.target
            ));
        }
        let retired: BTreeSet<u64> = ids(&status["retired_nodes"]).into_iter().collect();
        let nodes: BTreeMap<u64, String> = status["nodes"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(id, addr)| Some((id.parse().ok()?, addr.as_str()?.to_string())))
            .filter(|(id, _)| !retired.contains(id))
            .collect();
        let scheme = args.target.split("://").next().unwrap_or("http");
        let mut statuses = vec![status.clone()];
        for addr in nodes.values() {
            // A member that does not answer (a dead node being replaced)
            // tells nothing; the others do.
            if let Ok(status) = status_of(args, &format!("{scheme}://{addr}")) {
                statuses.push(status);
            }
        }
        let answering = statuses
            .iter()
            .filter_map(|s| s["node_id"].as_u64())
            .collect();
        let zones = zones_of(&statuses);
        Ok(placement_of(&statuses).map(|placement| Layout {
            answering,
            zones,
            replication: status["replication_factor"]
                .as_u64()
                .map_or(runnel_engine::cluster::DEFAULT_REPLICATION, |r| r as usize),
            placement,
            nodes,
        }))
    }
}

/// Pause before the placement is read again.
const READ_AGAIN: Duration = Duration::from_millis(500);

/// `/_runnel/status` of the node at `base`.
pub(crate) fn status_of(args: &NodeArgs, base: &str) -> Result<serde_json::Value, String> {
    let body = http_request(
        "GET",
        base,
        "/_runnel/status",
        args.token.as_deref(),
        args.ca.as_deref(),
    )?;
    serde_json::from_str(&body)
        .map_err(|e| format!("{base} answered with something other than JSON: {e}"))
}

fn ids(value: &serde_json::Value) -> Vec<u64> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_u64)
        .collect()
}

/// Each member's zone: the recorded ones (`zones`), and each answering
/// member's own (`zone`).
fn zones_of(statuses: &[serde_json::Value]) -> placement::Zones {
    let mut zones = placement::Zones::new();
    for status in statuses {
        for (id, zone) in status["zones"].as_object().into_iter().flatten() {
            if let (Ok(id), Some(zone)) = (id.parse(), zone.as_str()) {
                zones.insert(id, zone.to_string());
            }
        }
    }
    for status in statuses {
        if let (Some(id), Some(zone)) = (status["node_id"].as_u64(), status["zone"].as_str()) {
            zones.entry(id).or_insert_with(|| zone.to_string());
        }
    }
    zones
}

/// Each group's voters, the leader first, as each group's leader reports
/// them (another replica may lag, or have been removed without knowing
/// it); `Err` while a group's leader did not answer, or a membership
/// change is under way.
fn placement_of(statuses: &[serde_json::Value]) -> Result<Placement, String> {
    let count = statuses[0]["groups"].as_array().map_or(0, Vec::len);
    let mut groups = Vec::with_capacity(count);
    for g in 0..count {
        let leader_view = statuses
            .iter()
            .map(|s| &s["groups"][g])
            .zip(statuses.iter().map(|s| &s["node_id"]))
            .find(|(v, node)| v["leader"] == **node && v["state"] != "elsewhere")
            .map(|(v, _)| v)
            .ok_or_else(|| format!("group {g}'s leader did not answer"))?;
        if leader_view["changing"] == true {
            return Err(format!("group {g} is changing its membership"));
        }
        let mut voters = ids(&leader_view["voters"]);
        let leader = leader_view["leader"].as_u64();
        if let Some(at) = voters.iter().position(|v| Some(*v) == leader) {
            voters[..=at].rotate_right(1);
        }
        groups.push(voters);
    }
    Ok(Placement { groups })
}

/// Moves replicas until the cluster is placed as it should be with
/// `members` (HTTP addresses of those `layout` does not know in
/// `new_addrs`); answers how many moves it made.
pub(crate) fn place(
    args: &NodeArgs,
    layout: &Layout,
    members: &BTreeSet<u64>,
    new_addrs: &BTreeMap<u64, String>,
) -> Result<usize, String> {
    let members: Vec<u64> = members.iter().copied().collect();
    let count = layout.placement.groups.len();
    let zones = record_new_zones(args, layout, new_addrs)?;
    let target = placement::cluster_target(
        &layout.placement,
        &members,
        &zones,
        count,
        layout.replication,
    );
    for (group, zone) in placement::quorum_in_one_zone(&target, &zones) {
        if !zones.is_empty() {
            eprintln!(
                "warning: group {group} will have a quorum of its voters in zone {zone} (the \
                 zones cannot honour the replication factor): losing that zone stops it"
            );
        }
    }
    let moves = placement::moves(&layout.placement, &target);
    eprintln!(
        "replicas now {:?}; to be {:?}",
        layout.placement.groups, target.groups
    );
    let up: BTreeSet<u64> = layout
        .answering
        .iter()
        .chain(new_addrs.keys())
        .copied()
        .collect();
    check_quorums(&moves, &target, &up)?;
    let addr_of = |node: u64| {
        new_addrs
            .get(&node)
            .or(layout.nodes.get(&node))
            .ok_or_else(|| format!("node {node}'s address is not known"))
    };
    // The members that do not vote in group 0 follow it as learners, from
    // the start: a newcomer knows the cluster before it holds data. (A
    // voter to be demoted becomes one by its move below.)
    let control_voters = &layout.placement.groups[0];
    for node in placement::control_learners(&target, &members) {
        if control_voters.contains(&node) {
            continue;
        }
        let path = format!(
            "/_runnel/cluster/groups/0/members?learn={node}&addr={}",
            addr_of(node)?
        );
        let learned = change_group(args, &path, 0)?;
        if learned["changed"] == true {
            print(0, &learned);
        }
    }
    if moves.is_empty() {
        eprintln!("the replicas are placed as they should be: nothing to move");
    }
    for m in &moves {
        let members_path = format!("/_runnel/cluster/groups/{}/members", m.group);
        if let Some(from) = m.from {
            lead_away(args, m.group, from)?;
        }
        if let Some(to) = m.to {
            let path = format!("{members_path}?add={to}&addr={}", addr_of(to)?);
            print(m.group, &change_group(args, &path, m.group)?);
        }
        if let Some(from) = m.from {
            // A member leaving group 0's voters goes on following it.
            let leaves = match m.group == 0 && members.contains(&from) {
                true => "demote",
                false => "remove",
            };
            let path = format!("{members_path}?{leaves}={from}");
            print(m.group, &change_group(args, &path, m.group)?);
        }
    }
    settle_leaders(args, &target)?;
    Ok(moves.len())
}

/// The zones to place by: `layout`'s, and those of the nodes being added
/// (`new_addrs`, as each says of itself), which are recorded in group 0
/// first so that every later placement sees them.
fn record_new_zones(
    args: &NodeArgs,
    layout: &Layout,
    new_addrs: &BTreeMap<u64, String>,
) -> Result<placement::Zones, String> {
    let mut zones = layout.zones.clone();
    let scheme = args.target.split("://").next().unwrap_or("http");
    for (node, addr) in new_addrs {
        let status = status_of(args, &format!("{scheme}://{addr}"))?;
        let Some(zone) = status["zone"].as_str() else {
            continue;
        };
        let path = format!("/_runnel/cluster/groups/0/members?zone={node}:{zone}");
        change_group(args, &path, 0)?;
        zones.insert(*node, zone.to_string());
    }
    Ok(zones)
}

/// Refuses a placement that would leave a group whose voters change with
/// fewer of them `up` than a quorum: its last membership change could
/// not commit, and a leadership would have moved for nothing.
fn check_quorums(
    moves: &[placement::Move],
    target: &Placement,
    up: &BTreeSet<u64>,
) -> Result<(), String> {
    let changing: BTreeSet<usize> = moves.iter().map(|m| m.group).collect();
    for g in changing {
        let voters = &target.groups[g];
        let answering = voters.iter().filter(|v| up.contains(v)).count();
        let quorum = voters.len() / 2 + 1;
        if answering < quorum {
            return Err(format!(
                "group {g} would be left without a quorum: {answering} of its voters to be \
                 {voters:?} answer, {quorum} are needed; bring its nodes back first"
            ));
        }
    }
    Ok(())
}

/// Preferred leaders sent in one request at most.
const PREFERRED_PER_REQUEST: usize = 256;
/// How long a leadership transfer may keep failing before the command
/// leaves it to the groups' leaders.
const LEAD_TIMEOUT_SECS: u64 = 10;

/// Records `target`'s first replicas as the groups' preferred leaders
/// (balanced by the planner), then asks each group led elsewhere to move
/// its leadership there at once (its leader would within seconds); a
/// transfer that does not happen in time is only reported.
fn settle_leaders(args: &NodeArgs, target: &Placement) -> Result<(), String> {
    let preferred: Vec<(usize, u64)> = target
        .groups
        .iter()
        .enumerate()
        .filter_map(|(g, replicas)| Some((g, *replicas.first()?)))
        .collect();
    for chunk in preferred.chunks(PREFERRED_PER_REQUEST) {
        let pairs: Vec<String> = chunk.iter().map(|(g, n)| format!("{g}:{n}")).collect();
        let path = format!(
            "/_runnel/cluster/groups/0/members?prefer={}",
            pairs.join(",")
        );
        change_group(args, &path, 0)?;
    }
    let layout = Layout::read(args)?;
    let quick = NodeArgs {
        timeout_secs: LEAD_TIMEOUT_SECS,
        ..args.clone()
    };
    for (g, want) in preferred {
        if layout.placement.groups.get(g).and_then(|r| r.first()) == Some(&want) {
            continue;
        }
        let path = format!("/_runnel/cluster/groups/{g}/members?lead={want}");
        match change_group(&quick, &path, g) {
            Ok(_) => eprintln!("group {g}: led by node {want}"),
            Err(reason) => eprintln!(
                "group {g}: leadership not moved to node {want} yet ({reason}); its leader \
                 moves it within seconds"
            ),
        }
    }
    Ok(())
}

/// Prints a group's membership after a change, on stderr.
pub(crate) fn print(group: usize, report: &serde_json::Value) {
    let unchanged = if report["changed"] == false {
        " (already so)"
    } else {
        ""
    };
    eprintln!(
        "group {group}: voters {} learners {}{unchanged}",
        report["voters"], report["learners"]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(node: u64, groups: serde_json::Value) -> serde_json::Value {
        serde_json::json!({ "mode": "cluster", "node_id": node, "groups": groups })
    }

    #[test]
    fn the_placement_comes_from_each_groups_leader_with_the_leader_first() {
        let elsewhere = serde_json::json!({ "state": "elsewhere", "leader": 2, "voters": [] });
        let statuses = [
            status(
                1,
                serde_json::json!([
                    { "leader": 3, "voters": [1, 2, 3] },
                    elsewhere,
                ]),
            ),
            status(
                2,
                serde_json::json!([
                    { "leader": 3, "voters": [1, 2, 3] },
                    // The leader's view wins over a lagging holder's.
                    { "leader": 2, "voters": [2, 3, 4] },
                ]),
            ),
            status(
                3,
                serde_json::json!([
                    { "leader": 3, "voters": [1, 2, 3] },
                    { "leader": 2, "voters": [2, 3, 5] },
                ]),
            ),
        ];
        let placement = placement_of(&statuses).unwrap();
        assert_eq!(placement.groups, vec![vec![3, 1, 2], vec![2, 3, 4]]);
        assert!(
            placement_of(&statuses[..1]).is_err(),
            "group 1 has no holder"
        );
    }
}
