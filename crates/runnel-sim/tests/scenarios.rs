//! The seeds CI runs: 1 to 8 of every scenario, and a check that a seed
//! reproduces its run exactly. More seeds, or one to replay:
//! `cargo run --release -p runnel-sim -- --seeds 500` or `-- --seed N`.

use runnel_sim::scenarios::lost_disk;
use runnel_sim::{run_seed, Outcome, Scenario};

/// The seeds CI runs of each scenario.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

/// Runs `scenario` on every CI seed; each must make progress and pass the
/// checker.
fn every_seed(scenario: Scenario) -> Vec<Outcome> {
    SEEDS
        .map(|seed| {
            let outcome = run_seed(scenario, seed);
            eprintln!("{}", outcome.summary());
            assert!(
                outcome.ok(),
                "{scenario} seed {seed}: the history breaks the rules:\n{}",
                outcome.anomalies().join("\n")
            );
            outcome
        })
        .collect()
}

#[test]
fn faults_keep_every_acknowledged_append() {
    every_seed(Scenario::Faults);
}

#[test]
fn a_seed_reproduces_its_run_exactly() {
    let first = run_seed(Scenario::Faults, 7);
    let again = run_seed(Scenario::Faults, 7);
    assert_eq!(first.trace, again.trace, "a seed must reproduce exactly");
}

#[test]
fn a_node_joins_and_another_leaves_under_load() {
    every_seed(Scenario::Membership);
}

#[test]
fn members_change_while_nodes_are_cut_off_and_crash() {
    every_seed(Scenario::Churn);
}

#[test]
fn replicas_move_between_nodes_under_load() {
    every_seed(Scenario::Replicas);
}

#[test]
fn a_dead_nodes_replicas_move_to_a_live_member_by_themselves() {
    every_seed(Scenario::Healing);
}

#[test]
fn a_whole_zone_lost_loses_no_group_and_no_acknowledged_append() {
    every_seed(Scenario::ZoneLoss);
}

#[test]
fn leadership_moves_under_writes_without_waiting_out_a_lease() {
    every_seed(Scenario::Transfer);
}

#[test]
fn a_node_that_lost_its_disk_helps_elect_no_leader_lacking_an_acknowledged_write() {
    let outcomes = every_seed(Scenario::LostDisk);
    let held = outcomes
        .iter()
        .filter(|o| lost_disk::held_its_vote(o))
        .count();
    eprintln!(
        "W held its vote while L was down in {held} of {} seeds",
        outcomes.len()
    );
    // Most seeds must exercise the held vote, or the test proves little.
    assert!(
        held * 2 >= outcomes.len(),
        "only {held} of {} seeds left W without X while L was down",
        outcomes.len()
    );
}
