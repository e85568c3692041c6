//! Membership changes under load, on Runnel's own Raft storage and
//! through [`ClusterNode::change_member`] (what `runnel ctl node` drives):
//! a removal that would leave the groups without a quorum is refused
//! while a node is down, a fourth node joins the running 3-node cluster
//! (a learner caught up by snapshot and log, then a voter in every
//! group), the first node is removed from every group and stops for good, and
//! after each change a random node crashes and restarts, so it must
//! recover the membership it last stored from its own log and checkpoint. Producers and readers run
//! throughout, through dropped and delayed messages, and reach a group's
//! leader as the server would, the newcomer included although no
//! founder's `--peers` names it (routing finds its address in the group's
//! membership). At the end every remaining replica holds the same bytes,
//! every group's voters on every node are the new set, and the history
//! passes the checker.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use runnel_engine::cluster::ClusterNode;
use runnel_engine::error::MembershipError;
use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::raft::transport::raft_addr;
use runnel_engine::raft::NodeId;
use runnel_engine::{EngineError, MemberChange, MemberReport};

use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, NODES};
use crate::workload::Workload;

/// The node that joins (index; its id is one more).
const JOINER: usize = NODES as usize;
/// The node that leaves.
const LEAVER: usize = 0;

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x3e3b);
    let mut sim = Sim::with_slots(seed, JOINER + 1);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
    let (drop, delay) = (rng.gen_range(0..40), rng.gen_range(1..15));
    sim.set_faults(drop, delay);
    sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));

    refuse_removal_without_quorum(&mut sim, &workload, seed).await;

    let joiner = JOINER as NodeId + 1;
    sim.start(JOINER).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    // The first step by hand: a learner, then a crash before its
    // promotion, which `change_member` then finishes.
    let joiner_node = BasicNode {
        addr: raft_addr(&Sim::http_addr(joiner)).unwrap(),
    };
    change_every_group(&sim, seed, "learner added", |node, g| {
        let raft = node.groups()[g as usize].raft().clone();
        let added = joiner_node.clone();
        async move {
            raft.add_learner(joiner, added, true)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let founders = 0..NODES as usize;
    bounce(&mut sim, &workload, rng.gen_range(founders), &mut rng).await;

    let all: BTreeSet<NodeId> = (1..=joiner).collect();
    let add = MemberChange::Add {
        node: joiner,
        http_addr: Sim::http_addr(joiner),
    };
    change_every_group(&sim, seed, "learner promoted", |node, g| {
        let add = add.clone();
        async move { changed(node.change_member(g, add).await) }
    })
    .await;
    bounce(&mut sim, &workload, rng.gen_range(0..=JOINER), &mut rng).await;

    let leaver = LEAVER as NodeId + 1;
    let remaining: BTreeSet<NodeId> = all.iter().copied().filter(|n| *n != leaver).collect();
    let remove = MemberChange::Remove { node: leaver };
    change_every_group(&sim, seed, "node removed", |node, g| {
        let remove = remove.clone();
        async move { changed(node.change_member(g, remove).await) }
    })
    .await;
    sim.crash(LEAVER).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    bounce(&mut sim, &workload, rng.gen_range(1..=JOINER), &mut rng).await;

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    assert_voters(&sim, seed, &remaining);
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::Membership, seed, Some(report), None)
        .await
}

/// Asserts that every running node sees `expected` as every group's
/// voters.
pub(crate) fn assert_voters(sim: &Sim, seed: u64, expected: &BTreeSet<NodeId>) {
    for node in sim.alive() {
        for group in node.groups() {
            let metrics = group.raft().metrics().borrow().clone();
            let voters: BTreeSet<NodeId> =
                metrics.membership_config.membership().voter_ids().collect();
            assert_eq!(
                &voters,
                expected,
                "seed {seed}: node {} sees group {}'s voters as {voters:?}",
                node.node_id(),
                group.index()
            );
        }
    }
}

/// A membership change's outcome as `change_every_group` takes it.
pub(crate) fn changed(result: Result<MemberReport, EngineError>) -> Result<(), String> {
    result.map(|_| ()).map_err(|e| e.to_string())
}

/// With node 3 down, removing node 2 would leave each group's remaining
/// voters {1, 3} with one of them running: every group's leader refuses
/// it (node 2 itself included), and nothing changes. Node 3 then comes
/// back.
async fn refuse_removal_without_quorum(sim: &mut Sim, workload: &Workload, seed: u64) {
    let (down, leaver) = (2, 2);
    sim.crash(down).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    let groups = sim.alive()[0].groups().len();
    for g in 0..groups as u32 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let leader = sim
                .alive()
                .into_iter()
                .find(|n| n.groups()[g as usize].leader() == Some(n.node_id()));
            let outcome = match leader {
                Some(leader) => {
                    leader
                        .change_member(g, MemberChange::Remove { node: leaver })
                        .await
                }
                None => Err(EngineError::NotLeader(None)),
            };
            match outcome {
                Err(EngineError::Membership(reason @ MembershipError::NoQuorum { .. })) => {
                    sim.note(format!("{} group {g} refused: {reason}", at()));
                    break;
                }
                Ok(report) => panic!("seed {seed}: group {g}: removal not refused: {report:?}"),
                Err(other) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "seed {seed}: group {g}: removing node {leaver} with node 3 down: {other}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_voters(sim, seed, &BTreeSet::from([1, 2, 3]));
    sim.start(down).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
}

/// Runs `change` on each group's leader, again after a leadership change
/// or a timeout, until the leader answers that it is done.
async fn change_every_group<F, Fut>(sim: &Sim, seed: u64, what: &str, change: F)
where
    F: Fn(Arc<ClusterNode>, u32) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let groups = sim.alive()[0].groups().len();
    for g in 0..groups as u32 {
        change_group(sim, seed, g, what, &change).await;
    }
}

/// Runs `change` on group `g`'s leader until it answers that it is done.
pub(crate) async fn change_group<F, Fut>(sim: &Sim, seed: u64, g: u32, what: &str, change: &F)
where
    F: Fn(Arc<ClusterNode>, u32) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let leader = sim
            .alive()
            .into_iter()
            .find(|n| n.holds(&n.groups()[g as usize]) && n.groups()[g as usize].leads());
        if let Some(leader) = leader {
            match tokio::time::timeout(Duration::from_secs(10), change(leader, g)).await {
                Ok(Ok(())) => break,
                Ok(Err(e)) => sim.note(format!("{} group {g} not yet {what}: {e}", at())),
                Err(_) => sim.note(format!("{} group {g} not yet {what}: timed out", at())),
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: group {g} never {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.changed();
    sim.note(format!("{} group {g} {what}", at()));
}

/// Crashes node `i` and starts it again a little later, the clients
/// following.
pub(crate) async fn bounce(sim: &mut Sim, workload: &Workload, i: usize, rng: &mut StdRng) {
    sim.crash(i).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    tokio::time::sleep(Duration::from_millis(rng.gen_range(100..1500))).await;
    sim.start(i).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
}
