//! Self-healing under load (`runnel_engine::cluster::healing`): three
//! founders hold every group; a fourth node follows group 0 as a learner
//! (a member holding no data). A random founder crashes for good. Once it
//! has been silent for the limit (two seconds here), each group's leader
//! moves the dead node's replica to the fourth node by itself: a learner
//! caught up, then a voter, then the dead replica removed (group 0's
//! demoted to a learner). Producers and readers run throughout, through
//! dropped and delayed messages. At the end every group's voters are the
//! three live nodes, every copy holds the same bytes, and the history
//! passes the checker.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::BasicNode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::raft::transport::raft_addr;
use runnel_engine::raft::NodeId;

use super::membership::change_group;
use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, NODES};
use crate::workload::Workload;

/// The member that holds no data at first (index; its id is one more).
const SPARE: usize = NODES as usize;
/// How long a member may be silent before its replicas move.
const DEAD_AFTER: Duration = Duration::from_secs(2);

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4ea1);
    let mut sim = Sim::with_slots(seed, SPARE + 1);
    sim.dead_node_after = Some(DEAD_AFTER);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
    let (drop, delay) = (rng.gen_range(0..40), rng.gen_range(1..15));
    sim.set_faults(drop, delay);
    sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));

    // The spare joins the cluster: a learner of group 0, no data group.
    sim.start(SPARE).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    let spare = SPARE as NodeId + 1;
    let learner = BasicNode {
        addr: raft_addr(&Sim::http_addr(spare)).unwrap(),
    };
    change_group(&sim, seed, 0, "learner added", &|node, g| {
        let raft = node.groups()[g as usize].raft().clone();
        let learner = learner.clone();
        async move {
            raft.add_learner(spare, learner, true)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1500))).await;

    // A founder dies for good.
    let dead = rng.gen_range(0..NODES as usize);
    sim.crash(dead).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    let dead = dead as NodeId + 1;
    let live: BTreeSet<NodeId> = (1..=spare).filter(|n| *n != dead).collect();
    let healed_at = wait_for_voters(&sim, seed, &live).await;
    sim.note(format!("{healed_at} healed: every group on {live:?}"));

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    super::membership::assert_voters(&sim, seed, &live);
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::Healing, seed, Some(report), None)
        .await
}

/// Waits (60 simulated seconds at most) until every running node that
/// holds a group sees `live` as its voters; answers when.
async fn wait_for_voters(sim: &Sim, seed: u64, live: &BTreeSet<NodeId>) -> u128 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let healed = sim.alive().iter().all(|node| {
            node.groups().iter().filter(|g| node.holds(g)).all(|g| {
                let metrics = g.raft().metrics().borrow().clone();
                let voters: BTreeSet<NodeId> =
                    metrics.membership_config.membership().voter_ids().collect();
                voters == *live
            })
        });
        if healed {
            return at();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: the dead node's replicas never moved"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
