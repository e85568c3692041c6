//! Membership changes while faults happen: a fourth node joins every
//! group, each group's leadership moves to a chosen voter, a replica of
//! group 1 moves away and back, and the first node leaves every group and
//! stops for good; throughout every change a nemesis isolates nodes,
//! crashes and restarts them and changes the network's loss and delay
//! (one node out at a time, so a quorum can form between faults). Each
//! change runs as an operator's command would: sent to the group's
//! leader, again after a refusal, a lost leader or a timeout, until it is
//! done. Producers and readers run throughout. At the end every group's
//! voters on every running node are the three that remain, every replica
//! holds the same bytes, and the history passes the checker.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use runnel_engine::cluster::ClusterNode;
use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::raft::NodeId;
use runnel_engine::MemberChange;

use super::membership::assert_voters;
use crate::checks::{check, converge};
use crate::run::{Outcome, Scenario};
use crate::sim::{at, Sim, CALM, NODES};
use crate::workload::Workload;

/// The node that joins (index; its id is one more).
const JOINER: usize = NODES as usize;
/// The node that leaves (index).
const LEAVER: usize = 0;
/// How long a change may go on under faults before the nemesis rests,
/// and how long it may then take on a calm network.
const UNDER_FAULTS: Duration = Duration::from_secs(90);
const AFTER_FAULTS: Duration = Duration::from_secs(60);

pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc4u64.rotate_left(17));
    let mut sim = Sim::with_slots(seed, JOINER + 1);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..1500))).await;
    let groups = sim.alive()[0].groups().len() as u32;
    let joiner = JOINER as NodeId + 1;
    let leaver = LEAVER as NodeId + 1;
    let mut nemesis = Nemesis::new(seed);

    sim.start(JOINER).await;
    follow(&sim, &workload);
    let join: Vec<(u32, MemberChange)> = (0..groups)
        .map(|g| {
            let add = MemberChange::Add {
                node: joiner,
                http_addr: Sim::http_addr(joiner),
            };
            (g, add)
        })
        .collect();
    drive(&mut sim, &workload, &mut nemesis, seed, "joined", join).await;

    let leads: Vec<(u32, MemberChange)> = (0..groups)
        .map(|g| {
            let node = rng.gen_range(1..=joiner);
            (g, MemberChange::Lead { node })
        })
        .collect();
    drive(&mut sim, &workload, &mut nemesis, seed, "led", leads).await;

    let away = vec![(1, MemberChange::Remove { node: 3 })];
    drive(&mut sim, &workload, &mut nemesis, seed, "moved away", away).await;
    let back = vec![(
        1,
        MemberChange::Add {
            node: 3,
            http_addr: Sim::http_addr(3),
        },
    )];
    drive(&mut sim, &workload, &mut nemesis, seed, "moved back", back).await;

    nemesis.spare(LEAVER);
    let leave: Vec<(u32, MemberChange)> = (0..groups)
        .map(|g| (g, MemberChange::Remove { node: leaver }))
        .collect();
    drive(&mut sim, &workload, &mut nemesis, seed, "left", leave).await;
    sim.crash(LEAVER).await;
    follow(&sim, &workload);

    sim.calm();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    let remaining: BTreeSet<NodeId> = (2..=joiner).collect();
    assert_voters(&sim, seed, &remaining);
    let report = check(&sim, seed, &history).await;
    sim.conclude(Scenario::Churn, seed, Some(report), None)
        .await
}

/// The clients follow the running nodes.
fn follow(sim: &Sim, workload: &Workload) {
    *workload.alive.lock().expect("alive lock") = sim.alive();
}

/// Makes each of `changes` (group, change) in turn at the group's leader
/// on a task of its own, while the nemesis works on the cluster; returns
/// once every change is done, with the faults healed.
async fn drive(
    sim: &mut Sim,
    workload: &Workload,
    nemesis: &mut Nemesis,
    seed: u64,
    what: &'static str,
    changes: Vec<(u32, MemberChange)>,
) {
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    // A fault under way as the changes begin, then more while they go on.
    nemesis.strike(sim, workload).await;
    let task = tokio::spawn(make_changes(
        Arc::clone(&workload.alive),
        changes,
        what,
        Arc::clone(&done),
    ));
    let started = Instant::now();
    let mut resting = false;
    while !task.is_finished() {
        if !resting && started.elapsed() > UNDER_FAULTS {
            nemesis.heal(sim, workload).await;
            sim.calm();
            sim.note(format!(
                "{} nemesis rests: the changes to be {what} take long",
                at()
            ));
            resting = true;
        }
        assert!(
            started.elapsed() < UNDER_FAULTS + AFTER_FAULTS,
            "seed {seed}: the changes to be {what} never finished: done {:?}",
            done.lock().expect("done lock")
        );
        if resting {
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            nemesis.step(sim, workload).await;
        }
    }
    task.await.expect("the change task");
    nemesis.heal(sim, workload).await;
    for line in done.lock().expect("done lock").drain(..) {
        sim.changed();
        sim.note(line);
    }
}

/// Makes each change at its group's leader (as the clients see the
/// running nodes), again until it is done.
async fn make_changes(
    alive: Arc<Mutex<Vec<Arc<ClusterNode>>>>,
    changes: Vec<(u32, MemberChange)>,
    what: &'static str,
    done: Arc<Mutex<Vec<String>>>,
) {
    for (g, change) in changes {
        loop {
            let nodes = alive.lock().expect("alive lock").clone();
            let leader = nodes
                .into_iter()
                .find(|n| n.holds(&n.groups()[g as usize]) && n.groups()[g as usize].leads());
            if let Some(leader) = leader {
                let attempt = leader.change_member(g, change.clone());
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(10), attempt).await {
                    let line = format!("{} group {g} {what} ({change:?})", at());
                    done.lock().expect("done lock").push(line);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What is out of the cluster now.
enum Out {
    Isolated { node: usize, until: Instant },
    Down { node: usize, until: Instant },
}

/// The faults, one node out at a time.
struct Nemesis {
    rng: StdRng,
    out: Option<Out>,
    /// A node the nemesis leaves alone (the one that is leaving).
    spared: Option<usize>,
}

impl Nemesis {
    fn new(seed: u64) -> Nemesis {
        Nemesis {
            rng: StdRng::seed_from_u64(seed ^ 0x0bad_c0de),
            out: None,
            spared: None,
        }
    }

    fn spare(&mut self, node: usize) {
        self.spared = Some(node);
    }

    /// One step: waits a little, ends a fault whose time is up, and
    /// perhaps starts another.
    async fn step(&mut self, sim: &mut Sim, workload: &Workload) {
        tokio::time::sleep(Duration::from_millis(self.rng.gen_range(200..1200))).await;
        self.strike(sim, workload).await;
    }

    /// Ends a fault whose time is up, and perhaps starts another.
    async fn strike(&mut self, sim: &mut Sim, workload: &Workload) {
        let now = Instant::now();
        match self.out {
            Some(Out::Isolated { until, .. } | Out::Down { until, .. }) if now >= until => {
                self.heal(sim, workload).await;
            }
            Some(_) => return,
            None => {}
        }
        let running: Vec<usize> = (0..sim.nodes.len())
            .filter(|i| sim.nodes[*i].is_some() && Some(*i) != self.spared)
            .collect();
        if running.is_empty() {
            return;
        }
        let node = running[self.rng.gen_range(0..running.len())];
        match self.rng.gen_range(0..100) {
            0..=29 => {
                sim.isolate(node as u64 + 1, true);
                sim.note(format!("{} isolate n{}", at(), node + 1));
                let until = now + Duration::from_millis(self.rng.gen_range(300..2500));
                self.out = Some(Out::Isolated { node, until });
            }
            30..=64 => {
                sim.crash(node).await;
                follow(sim, workload);
                let until = now + Duration::from_millis(self.rng.gen_range(100..2000));
                self.out = Some(Out::Down { node, until });
            }
            65..=89 => {
                let (drop, delay) = (self.rng.gen_range(0..80), self.rng.gen_range(1..25));
                sim.set_faults(drop, delay);
                sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));
            }
            _ => {}
        }
    }

    /// Ends the fault under way, if any.
    async fn heal(&mut self, sim: &mut Sim, workload: &Workload) {
        match self.out.take() {
            Some(Out::Isolated { node, .. }) => {
                sim.isolate(node as u64 + 1, false);
                sim.note(format!("{} heal n{}", at(), node + 1));
            }
            Some(Out::Down { node, .. }) => {
                sim.start(node).await;
                follow(sim, workload);
            }
            None => {}
        }
    }
}
