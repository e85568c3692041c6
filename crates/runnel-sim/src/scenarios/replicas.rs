//! Replica moves under load: a fourth node starts holding no group, then
//! one replica of each group moves onto it (group 1's from node 1, group
//! 0's from node 2), each a learner caught up and promoted, then the old
//! replica removed through [`ClusterNode::change_member`]. A node that a
//! group no longer has finds out from its peers, drops its copy and
//! routes that group's requests to the leader
//! (`runnel_engine::cluster::hosting`). A random node crashes and restarts after
//! each step, and each node that dropped a copy restarts once more, so
//! that it recovers without the copy it dropped. Then group 1 moves back
//! to node 1 (added again after that restart) and on from node 3 to node
//! 4, which dropped its copy a move before and takes the group back
//! while it runs (these two moves restart no node between the drop and
//! the new copy's catch-up). Producers and readers send their requests
//! to every node throughout, through dropped and delayed messages, so
//! every node serves groups it holds no copy of by forwarding. At the end
//! the groups live on different nodes (`{1, 3, 4}` and `{1, 2, 4}`),
//! every copy of a group holds the same bytes, every node routes every
//! group, and the history passes the checker.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::BasicNode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::raft::transport::raft_addr;
use runnel_engine::raft::NodeId;
use runnel_engine::{ClusterOps, MemberChange, Route};

use super::membership::{bounce, change_group, changed};
use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, NODES};
use crate::workload::Workload;

/// The node that starts with no group (index; its id is one more).
const NEWCOMER: usize = NODES as usize;

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e91);
    let mut sim = Sim::with_slots(seed, NEWCOMER + 1);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
    let (drop, delay) = (rng.gen_range(0..40), rng.gen_range(1..15));
    sim.set_faults(drop, delay);
    sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));

    // The newcomer holds nothing yet: the clients' requests to it are all
    // forwarded.
    sim.start(NEWCOMER).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..1500))).await;

    let newcomer = NEWCOMER as NodeId + 1;
    for (group, from, to, restart_giver) in [
        (1, 1, newcomer, true),
        (0, 2, newcomer, true),
        (1, newcomer, 1, false),
        (1, 3, newcomer, false),
    ] {
        let step = Move {
            group,
            from,
            to,
            restart_giver,
        };
        move_replica(&mut sim, &workload, seed, step, &mut rng).await;
    }

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    assert_placement(&sim, seed, &[&[1, 3, 4], &[1, 2, 4]]);
    assert_routes(&sim, seed).await;
    for node in sim.alive() {
        node.checkpoint()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: node {}: checkpoint: {e}", node.node_id()));
    }
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::Replicas, seed, Some(report), None)
        .await
}

/// One replica move.
struct Move {
    group: u32,
    from: NodeId,
    to: NodeId,
    /// Whether the giving node restarts once it dropped its copy (else
    /// the random restarts during the move spare both nodes: a copy
    /// dropped earlier is then taken back while its node runs).
    restart_giver: bool,
}

/// Moves group `group`'s replica on node `from` to node `to`: a learner
/// first (with a crash before its promotion, which `change_member` then
/// finishes), then a voter, then `from` removed; `from` must drop its
/// copy, and keep it dropped across a restart.
async fn move_replica(sim: &mut Sim, workload: &Workload, seed: u64, step: Move, rng: &mut StdRng) {
    let Move {
        group,
        from,
        to,
        restart_giver,
    } = step;
    let learner = BasicNode {
        addr: raft_addr(&Sim::http_addr(to)).unwrap(),
    };
    change_group(sim, seed, group, "learner added", &|node, g| {
        let raft = node.groups()[g as usize].raft().clone();
        let learner = learner.clone();
        async move {
            raft.add_learner(to, learner, true)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let spared = if restart_giver {
        vec![]
    } else {
        vec![from, to]
    };
    bounce(sim, workload, any_but(&spared, rng), rng).await;

    let add = MemberChange::Add {
        node: to,
        http_addr: Sim::http_addr(to),
    };
    change_group(sim, seed, group, "promoted", &|node, g| {
        let add = add.clone();
        async move { changed(node.change_member(g, add).await) }
    })
    .await;
    let remove = MemberChange::Remove { node: from };
    change_group(sim, seed, group, "replica removed", &|node, g| {
        let remove = remove.clone();
        async move { changed(node.change_member(g, remove).await) }
    })
    .await;

    // The removed replica is not told: it finds out from its peers, and
    // drops its copy (which it would not if it were added back first).
    let index = from as usize - 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let dropped = sim.nodes[index].as_ref().is_none_or(|node| {
            !node.holds(&node.groups()[group as usize]) && node.hosting().has_left(group)
        });
        if dropped {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: node {from} never dropped its copy of group {group}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.note(format!("{} n{from} dropped group {group}", at()));
    if restart_giver {
        bounce(sim, workload, index, rng).await;
        bounce(sim, workload, rng.gen_range(0..=NEWCOMER), rng).await;
    } else {
        bounce(sim, workload, any_but(&spared, rng), rng).await;
    }
}

/// A random node's index, other than those of the nodes `spared`.
fn any_but(spared: &[NodeId], rng: &mut StdRng) -> usize {
    let others: Vec<usize> = (0..=NEWCOMER)
        .filter(|i| !spared.contains(&(*i as NodeId + 1)))
        .collect();
    others[rng.gen_range(0..others.len())]
}

/// Asserts that every running node that holds group `g` sees
/// `expected[g]` as its voters, and that exactly those nodes hold it.
fn assert_placement(sim: &Sim, seed: u64, expected: &[&[NodeId]]) {
    for (g, voters) in expected.iter().enumerate() {
        let expected: BTreeSet<NodeId> = voters.iter().copied().collect();
        let mut holders = BTreeSet::new();
        for node in sim.alive() {
            let group = &node.groups()[g];
            if !node.holds(group) {
                continue;
            }
            holders.insert(node.node_id());
            let metrics = group.raft().metrics().borrow().clone();
            let seen: BTreeSet<NodeId> =
                metrics.membership_config.membership().voter_ids().collect();
            assert_eq!(
                seen,
                expected,
                "seed {seed}: node {} sees group {g}'s voters as {seen:?}",
                node.node_id()
            );
        }
        assert_eq!(
            holders, expected,
            "seed {seed}: group {g} is held by {holders:?}"
        );
    }
}

/// Asserts that every node routes every group: served where it leads,
/// forwarded to the leader elsewhere, whether it holds a copy or not (a
/// node that holds none learns of a new leader within a second or so).
async fn assert_routes(sim: &Sim, seed: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let Err(wrong) = routes_to_leaders(sim) else {
            return;
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: {wrong}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn routes_to_leaders(sim: &Sim) -> Result<(), String> {
    let nodes = sim.alive();
    for g in 0..nodes[0].groups().len() as u32 {
        let leader = nodes
            .iter()
            .find(|n| n.holds(&n.groups()[g as usize]) && n.groups()[g as usize].leads())
            .map(|n| n.node_id());
        for node in &nodes {
            let route = node.group_route(g);
            let to = match route {
                Route::Local => Some(node.node_id()),
                Route::Forward { node, .. } => Some(node),
                Route::NoLeader => None,
            };
            if to != leader || leader.is_none() {
                return Err(format!(
                    "node {} routes group {g} to {route:?}, its leader is {leader:?}",
                    node.node_id()
                ));
            }
        }
    }
    Ok(())
}
