//! A whole zone lost under load: six founders in three zones of two
//! (`a a b b c c`), replication factor 3, so every data group has one
//! replica in each zone and group 0's voters span the zones. Producers
//! and readers run through dropped and delayed messages; then both nodes
//! of a random zone crash at once and stay down. Every group keeps a
//! quorum: each still elects a leader among the four survivors, every
//! surviving copy converges, and the history passes the checker (no
//! acknowledged append lost).

use std::collections::BTreeSet;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use runnel_engine::raft::runtime::seed_thread_rng;

use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM};
use crate::workload::Workload;

const ZONES: [&str; 6] = ["a", "a", "b", "b", "c", "c"];

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x2e0e);
    let mut sim = Sim::in_zones(seed, &ZONES);
    for i in 0..ZONES.len() {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
    let (drop, delay) = (rng.gen_range(0..40), rng.gen_range(1..15));
    sim.set_faults(drop, delay);
    sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));
    assert_every_group_spans_the_zones(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3000))).await;

    // Zone `lost` goes: both its nodes at once, for good.
    let lost = rng.gen_range(0..3);
    sim.note(format!("{} zone {} lost", at(), ZONES[lost * 2]));
    sim.crash(lost * 2).await;
    sim.crash(lost * 2 + 1).await;
    *workload.alive.lock().expect("alive lock") = sim.alive();
    tokio::time::sleep(Duration::from_millis(rng.gen_range(2000..5000))).await;

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    assert_every_group_led(&sim, seed);
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::ZoneLoss, seed, Some(report), None)
        .await
}

/// Every group's voters, as each node holding it sees them, are in three
/// zones.
fn assert_every_group_spans_the_zones(sim: &Sim, seed: u64) {
    for node in sim.alive() {
        for group in node.groups().iter().filter(|g| node.holds(g)) {
            let metrics = group.raft().metrics().borrow().clone();
            let zones: BTreeSet<&str> = metrics
                .membership_config
                .membership()
                .voter_ids()
                .map(|v| ZONES[v as usize - 1])
                .collect();
            assert_eq!(
                zones.len(),
                3,
                "seed {seed}: group {} on node {} is in zones {zones:?}",
                group.index(),
                node.node_id()
            );
        }
    }
}

/// Every group has a leader among the running nodes.
fn assert_every_group_led(sim: &Sim, seed: u64) {
    let nodes = sim.alive();
    for g in 0..nodes[0].groups().len() {
        let led = nodes
            .iter()
            .any(|n| n.holds(&n.groups()[g]) && n.groups()[g].leads());
        assert!(
            led,
            "seed {seed}: group {g} has no leader after the zone loss"
        );
    }
}
