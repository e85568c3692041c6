//! Leadership transfers under writes: each data group's leadership moves
//! to another voter again and again through
//! [`ClusterNode::change_member`] (what `runnel ctl node lead` and the
//! replica moves drive), first on a calm network, then through message
//! loss, delay and a node's crash. On the calm network every transfer must
//! land on the node asked for, and no append of the group's streams
//! overlapping a transfer may take an election timeout or more on the
//! simulated clock (a transfer that waited out the followers' lease, as
//! the handover before it did, takes at least the longest election
//! timeout). Throughout, the history must pass the checker.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_history::check::Micros;

use runnel_engine::placement::stream_group;
use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::raft::NodeId;
use runnel_engine::MemberChange;

use super::membership::{bounce, change_group, changed};
use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, NODES, STREAMS};
use crate::workload::{stream_name, Workload};

/// Transfers of each data group on the calm network.
const CALM_ROUNDS: usize = 4;

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7a5f);
    let mut sim = Sim::new(seed);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    let groups = sim.alive()[0].groups().len() as u32;
    tokio::time::sleep(Duration::from_millis(rng.gen_range(2000..3000))).await;

    // (group, start, end) of each transfer on the calm network.
    let mut windows: Vec<(u32, Micros, Micros)> = Vec::new();
    for _ in 0..CALM_ROUNDS {
        for g in 1..groups {
            let started = workload.recorder.now();
            let to = lead_elsewhere(&sim, seed, g, &mut rng).await;
            windows.push((g, started, workload.recorder.now()));
            let target = sim
                .alive()
                .into_iter()
                .find(|n| n.node_id() == to)
                .expect("the target runs");
            assert!(
                target.groups()[g as usize].leads(),
                "seed {seed}: node {to} does not lead group {g}"
            );
            tokio::time::sleep(Duration::from_millis(rng.gen_range(100..1500))).await;
        }
    }

    let (drop, delay) = (rng.gen_range(0..40), rng.gen_range(1..15));
    sim.set_faults(drop, delay);
    sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));
    for round in 0..3 {
        for g in 1..groups {
            lead_elsewhere(&sim, seed, g, &mut rng).await;
        }
        if round == 1 {
            bounce(
                &mut sim,
                &workload,
                rng.gen_range(0..NODES as usize),
                &mut rng,
            )
            .await;
        }
    }

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    let mut report = check(&sim, seed, &history).await;

    let election_timeout = sim.alive()[0].groups()[0]
        .raft()
        .config()
        .election_timeout_min;
    let mut slowest_of_all = 0;
    for (g, started, ended) in windows {
        let streams: Vec<String> = (0..STREAMS)
            .map(stream_name)
            .filter(|s| stream_group(s, groups as usize) == g as usize)
            .collect();
        let slowest = history
            .appends
            .iter()
            .filter(|op| streams.contains(&op.stream))
            .filter_map(|op| Some((op.invoked, op.acked?)))
            .filter(|(invoked, acked)| *invoked <= ended && *acked >= started)
            .map(|(invoked, acked)| acked - invoked)
            .max()
            .unwrap_or(0);
        if slowest >= election_timeout * 1000 {
            report.anomalies.push(format!(
                "an append of group {g} took {slowest} us across a transfer \
                 ({started}..{ended} us), not less than the election timeout \
                 ({election_timeout} ms): the transfer waited out a lease"
            ));
        }
        slowest_of_all = slowest_of_all.max(slowest);
    }
    sim.conclude(
        Scenario::Transfer,
        seed,
        Some(report),
        Some(format!(
            "the slowest append across a calm transfer took {:.1} ms",
            slowest_of_all as f64 / 1000.0
        )),
    )
    .await
}

/// Moves group `g`'s leadership to a voter other than its leader, chosen
/// at random; answers that voter.
async fn lead_elsewhere(sim: &Sim, seed: u64, g: u32, rng: &mut StdRng) -> NodeId {
    let leader = sim
        .alive()
        .into_iter()
        .find(|n| n.groups()[g as usize].leads())
        .map(|n| n.node_id());
    let others: Vec<NodeId> = (1..=NODES).filter(|n| Some(*n) != leader).collect();
    let to = others[rng.gen_range(0..others.len())];
    let lead = MemberChange::Lead { node: to };
    change_group(sim, seed, g, &format!("led by n{to}"), &|node, g| {
        let lead = lead.clone();
        async move { changed(node.change_member(g, lead).await) }
    })
    .await;
    to
}
