//! The base scenario: a 3-node cluster under seeded faults. For 20 s of
//! simulated time the schedule isolates a node (one at a time), crashes
//! nodes (sometimes a second while one is down, so a group stalls until
//! one returns), wipes a node's disk (it restarts empty and must not vote
//! before it caught up: see `runnel_engine::raft::vote_guard`), and
//! changes the network's message loss and delay; the producers and
//! readers run throughout. Then everything heals, the producers stop,
//! every replica must converge to the same bytes, and the history must
//! pass the checker.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_engine::raft::runtime::seed_thread_rng;

use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, FAULTY, NODES};
use crate::workload::Workload;

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut sim = Sim::new(seed);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    let alive = std::sync::Arc::clone(&workload.alive);

    // Faults.
    let end = tokio::time::Instant::now() + FAULTY;
    let mut down: Vec<(usize, tokio::time::Instant)> = Vec::new();
    let mut cut: Option<(u64, tokio::time::Instant)> = None;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1200))).await;
        let now = tokio::time::Instant::now();
        for (i, until) in down.clone() {
            if now >= until {
                sim.start(i).await;
                down.retain(|(d, _)| *d != i);
            }
        }
        if let Some((node, until)) = cut {
            if now >= until {
                sim.isolate(node, false);
                sim.note(format!("{} heal n{node}", at()));
                cut = None;
            }
        }
        match rng.gen_range(0..100) {
            0..=24 if cut.is_none() && down.is_empty() => {
                let node = rng.gen_range(1..=NODES);
                sim.isolate(node, true);
                sim.note(format!("{} isolate n{node}", at()));
                cut = Some((node, now + Duration::from_millis(rng.gen_range(300..3000))));
            }
            // Crashes, sometimes of a second node while one is down (the
            // group stalls until one returns).
            25..=59 if down.len() < 2 && cut.is_none() => {
                let i = rng.gen_range(0..NODES as usize);
                if !down.iter().any(|(d, _)| *d == i) {
                    sim.crash(i).await;
                    let back = now + Duration::from_millis(rng.gen_range(100..2000));
                    down.push((i, back));
                }
            }
            // A lost disk: the node restarts empty (see `vote_guard`).
            // Another node may crash while it catches up, but no second
            // disk is lost before it has: a majority of a group's copies
            // would be gone, and the group would wait for ever for a
            // leader its empty nodes may safely vote for.
            85..=89
                if down.is_empty()
                    && cut.is_none()
                    && sim.alive().iter().all(|n| n.votes_in_every_group()) =>
            {
                let i = rng.gen_range(0..NODES as usize);
                sim.wipe(i).await;
                sim.note(format!("{} wipe n{}", at(), i + 1));
                let back = now + Duration::from_millis(rng.gen_range(100..2000));
                down.push((i, back));
            }
            55..=84 => {
                let (drop, delay) = (rng.gen_range(0..80), rng.gen_range(1..25));
                sim.set_faults(drop, delay);
                sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));
            }
            _ => {}
        }
        *alive.lock().expect("alive lock") = sim.alive();
    }

    // Calm: everyone back, no loss, then the producers stop.
    for (i, _) in down.drain(..) {
        sim.start(i).await;
    }
    if let Some((node, _)) = cut.take() {
        sim.isolate(node, false);
    }
    sim.calm();
    *alive.lock().expect("alive lock") = sim.alive();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::Faults, seed, Some(report), None)
        .await
}
