//! `runnel ctl node add|remove|replace`: one membership change per group,
//! each sent to the `--target` member (which forwards it to the group's
//! leader) and sent again through leader changes and unreachable nodes
//! until it is done, refused, or `--timeout-secs` pass; `node move`: the
//! two changes that move one group's replica; `node rebalance`: the
//! replication factor set in group 0, then the moves to match. Every step is idempotent:
//! a command cut short is finished by running it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::placing::{place, print, status_of, Layout};
use super::{http_exchange, http_request, NodeArgs, NodeCommand};

/// Pause between attempts at a group whose leader is changing.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

pub fn run(command: NodeCommand) -> Result<(), String> {
    match command {
        NodeCommand::Add {
            node_id,
            addr,
            common,
        } => {
            let (held, groups) = add(&common, node_id, &addr)?;
            println!("node {node_id} added: it holds {held} of the {groups} groups");
        }
        NodeCommand::Remove { node_id, common } => {
            let layout = Layout::read(&common)?;
            let mut members: BTreeSet<u64> = layout.nodes.keys().copied().collect();
            members.remove(&node_id);
            if members.is_empty() {
                return Err(format!("node {node_id} is the cluster's last node"));
            }
            warn_if_short(&layout, members.len());
            drain(&common, node_id)?;
            let moved = place(&common, &layout, &members, &BTreeMap::new())?;
            let done = every_group(&common, &format!("remove={node_id}"), print)?;
            println!("node {node_id} removed in all {done} groups ({moved} replica moves)");
            retire(&common, node_id)?;
        }
        NodeCommand::Replace {
            node_id,
            new_node_id,
            addr,
            common,
        } => {
            check_newcomer(&common, new_node_id, &addr)?;
            let layout = Layout::read(&common)?;
            let mut members: BTreeSet<u64> = layout.nodes.keys().copied().collect();
            members.remove(&node_id);
            members.insert(new_node_id);
            let addrs = BTreeMap::from([(new_node_id, addr)]);
            drain(&common, node_id)?;
            let moved = place(&common, &layout, &members, &addrs)?;
            let done = every_group(&common, &format!("remove={node_id}"), print)?;
            println!(
                "node {node_id} replaced by node {new_node_id} in all {done} groups ({moved} \
                 replica moves)"
            );
            retire(&common, node_id)?;
        }
        NodeCommand::Rebalance {
            replication_factor,
            common,
        } => {
            if let Some(factor) = replication_factor {
                let path = format!("/_runnel/cluster/groups/0/members?replication={factor}");
                let report = change_group(&common, &path, 0)?;
                let already = if report["changed"] == false {
                    " (already so)"
                } else {
                    ""
                };
                println!("the cluster's replication factor is {factor}{already}");
            }
            let mut layout = Layout::read(&common)?;
            // The target may not have applied the new factor yet.
            if let Some(factor) = replication_factor {
                layout.replication = factor as usize;
            }
            let members: BTreeSet<u64> = layout.nodes.keys().copied().collect();
            warn_if_short(&layout, members.len());
            let moved = place(&common, &layout, &members, &BTreeMap::new())?;
            println!(
                "{moved} replica moves: each data group on {} of the {} nodes",
                layout.replication.min(members.len()),
                members.len()
            );
        }
        NodeCommand::Move {
            group,
            node_id,
            to,
            addr,
            common,
        } => {
            move_replica(&common, group, node_id, to, &addr)?;
            println!("group {group}'s replica moved from node {node_id} to node {to}");
        }
    }
    Ok(())
}

/// Makes `node_id`, running at `addr`, a member: it joins group 0 and
/// takes its share of the other groups' replicas. Answers how many groups
/// it holds, and how many there are.
pub(crate) fn add(args: &NodeArgs, node_id: u64, addr: &str) -> Result<(usize, usize), String> {
    check_newcomer(args, node_id, addr)?;
    let layout = Layout::read(args)?;
    let mut members: BTreeSet<u64> = layout.nodes.keys().copied().collect();
    if members.contains(&node_id) {
        // A member added again (a removal given up): no longer draining.
        mark_draining(args, node_id, false)?;
    }
    members.insert(node_id);
    let addrs = BTreeMap::from([(node_id, addr.to_string())]);
    place(args, &layout, &members, &addrs)?;
    let after = Layout::read(args)?;
    // Group 0, which it holds as a voter or a learner, and its data groups.
    let held = 1 + after
        .placement
        .groups
        .iter()
        .skip(1)
        .filter(|g| g.contains(&node_id))
        .count();
    Ok((held, after.placement.groups.len()))
}

/// Says so when fewer nodes remain than the replication factor: each
/// group then has one replica per node.
fn warn_if_short(layout: &Layout, remaining: usize) {
    if remaining < layout.replication {
        eprintln!(
            "warning: {remaining} nodes remain, fewer than the replication factor {}: each \
             group keeps {remaining} replicas",
            layout.replication
        );
    }
}

/// Refuses a node to add that is not running at `addr`, is not a
/// cluster node, calls itself by another id, or has another number of
/// groups than the cluster (its data directory belongs elsewhere).
fn check_newcomer(args: &NodeArgs, node_id: u64, addr: &str) -> Result<(), String> {
    let scheme = args.target.split("://").next().unwrap_or("http");
    let base = format!("{scheme}://{addr}");
    let fetch = |base: &str| status_of(args, base);
    let newcomer = fetch(&base).map_err(|e| format!("start the new node first: {e}"))?;
    if newcomer["mode"] != "cluster" {
        return Err(format!(
            "{addr} is a single node; start it with --node-id {node_id} and --peers naming \
             the cluster's nodes and itself"
        ));
    }
    if newcomer["node_id"] != node_id {
        return Err(format!(
            "{addr} is node {}, not node {node_id}",
            newcomer["node_id"]
        ));
    }
    let cluster = fetch(&args.target)?;
    if let (Some(theirs), Some(ours)) = (
        newcomer["cluster_id"].as_str(),
        cluster["cluster_id"].as_str(),
    ) {
        if theirs != ours {
            return Err(format!(
                "{addr} belongs to cluster {theirs:?}, not to {ours:?}: it was started over \
                 another cluster's data directory, or with another --cluster-id"
            ));
        }
    }
    let count = |status: &serde_json::Value| status["groups"].as_array().map_or(0, Vec::len);
    if count(&newcomer) != count(&cluster) {
        return Err(format!(
            "{addr} has {} groups and the cluster {}: it was started over another \
             cluster's data directory, or with another --groups",
            count(&newcomer),
            count(&cluster)
        ));
    }
    Ok(())
}

/// Moves `group`'s replica on node `from` to node `to` (at `addr`): `to`
/// is added first, so the group never has fewer replicas than before.
fn move_replica(args: &NodeArgs, group: u32, from: u64, to: u64, addr: &str) -> Result<(), String> {
    if group == 0 {
        return Err(
            "group 0 holds the cluster's metadata and subscriptions and is followed by every \
             node; its voters (five at most) are placed by `runnel ctl node rebalance`, not \
             moved by hand"
                .into(),
        );
    }
    if from == to {
        return Err(format!("node {from} cannot move a replica to itself"));
    }
    check_newcomer(args, to, addr)?;
    let members = format!("/_runnel/cluster/groups/{group}/members");
    lead_away(args, group as usize, from)?;
    let added = change_group(
        args,
        &format!("{members}?add={to}&addr={addr}"),
        group as usize,
    )?;
    print(group as usize, &added);
    let removed = change_group(args, &format!("{members}?remove={from}"), group as usize)?;
    print(group as usize, &removed);
    Ok(())
}

/// Moves `group`'s leadership off `node` if it leads it, while the group
/// still has an odd number of voters: then writes go on during the
/// transfer (once the receiving replica is added, they would pause).
pub(crate) fn lead_away(args: &NodeArgs, group: usize, node: u64) -> Result<(), String> {
    let path = format!("/_runnel/cluster/groups/{group}/members?lead-away={node}");
    let report = change_group(args, &path, group)?;
    if report["changed"] == true {
        eprintln!(
            "group {group}: leadership moved from node {node} to node {}",
            report["leader"]
        );
    }
    Ok(())
}

/// Marks `node_id` as draining before its replicas move away, so that
/// continuous rebalancing places nothing on it.
fn drain(args: &NodeArgs, node_id: u64) -> Result<(), String> {
    mark_draining(args, node_id, true)
}

/// Marks `node_id` as draining, or no longer. A cluster below version 2
/// cannot record it (nor does it rebalance), and a control group led by
/// release 0.1.0 does not know the request: those refusals pass.
fn mark_draining(args: &NodeArgs, node_id: u64, draining: bool) -> Result<(), String> {
    let word = if draining { "drain" } else { "undrain" };
    let path = format!("/_runnel/cluster/groups/0/members?{word}={node_id}");
    match change_group(args, &path, 0) {
        Ok(_) => Ok(()),
        Err(e)
            if e.contains("needs cluster version")
                || e.contains("a membership change is one of") =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Removes `node_id`, a member of no group any more, from the cluster for
/// good: it is refused if it comes back on its old data directory, and
/// its id is never given to a new node.
fn retire(args: &NodeArgs, node_id: u64) -> Result<(), String> {
    let path = format!("/_runnel/cluster/groups/0/members?retire={node_id}");
    change_group(args, &path, 0)?;
    println!(
        "node {node_id} retired: it cannot serve this cluster again (bring the machine back \
         with an empty data directory and a new --node-id)"
    );
    Ok(())
}

/// Applies the change `query` describes to every group, one at a time,
/// handing each group's membership after it to `done`; answers how many
/// groups there are.
pub(crate) fn every_group(
    args: &NodeArgs,
    query: &str,
    done: fn(usize, &serde_json::Value),
) -> Result<usize, String> {
    let status = http_request(
        "GET",
        &args.target,
        "/_runnel/status",
        args.token.as_deref(),
        args.ca.as_deref(),
    )?;
    let status: serde_json::Value = serde_json::from_str(&status).map_err(|e| {
        format!(
            "{} answered with something other than JSON: {e}",
            args.target
        )
    })?;
    if status["mode"] != "cluster" {
        return Err(format!(
            "{} is a single node: it has no membership to change",
            args.target
        ));
    }
    let groups = status["groups"].as_array().map_or(0, Vec::len);
    for group in 0..groups {
        let path = format!("/_runnel/cluster/groups/{group}/members?{query}");
        done(group, &change_group(args, &path, group)?);
    }
    Ok(groups)
}

/// Sends one group's change until it is done, refused, or time runs out.
pub(crate) fn change_group(
    args: &NodeArgs,
    path: &str,
    group: usize,
) -> Result<serde_json::Value, String> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = http_exchange(
            "POST",
            &args.target,
            path,
            args.token.as_deref(),
            args.ca.as_deref(),
            left.max(Duration::from_secs(1)),
        );
        let passing = match answer {
            Ok((200, body)) => {
                return serde_json::from_str(&body)
                    .map_err(|e| format!("group {group}: the answer is not JSON: {e}"))
            }
            // No leader or a leader change (503), or the target is
            // unreachable: wait and send it again.
            Ok((503, body)) => body,
            Err(reason) => reason,
            Ok((status, body)) => {
                return Err(format!(
                    "group {group}: refused ({status}): {}",
                    body.trim()
                ))
            }
        };
        if Instant::now() + RETRY_PAUSE >= deadline {
            return Err(format!(
                "group {group}: not done after {} s ({}); run the command again to resume",
                args.timeout_secs,
                passing.trim()
            ));
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}
