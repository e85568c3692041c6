//! A node that lost its disk must not help elect a leader that lacks an
//! acknowledged write (see `runnel_engine::raft::vote_guard`).
//!
//! The scenario, in one group: the leader L and the node W acknowledge a
//! write X while the third node C is cut off, so only L and W hold X. W
//! loses its disk and restarts empty. The moment W has heard from L, but
//! before it holds X again, L crashes and C returns. C lacks X; so does W.
//! Had W voted, C (or W) would lead, and X would be overwritten once L
//! came back. W must hold its vote: the group waits, L restarts and leads
//! again, and X is on every node. (In a few seeds W still gets X from
//! messages L sent before it crashed, and may then lead with it.)

use std::sync::Arc;
use std::time::Duration;

use runnel_core::{Applied, ReadFrom};
use runnel_engine::cluster::ClusterNode;
use runnel_engine::placement::stream_group;
use runnel_engine::raft::group::RaftGroup;
use runnel_engine::raft::runtime::seed_thread_rng;
use runnel_engine::NodeEngine;

use crate::checks::converge;
use crate::run::{Outcome, Scenario};
use crate::sim::{Sim, NODES};
use crate::workload::{append_text, create_text};

const NAME: &str = "lost-disk";

fn node(sim: &Sim, i: usize) -> &Arc<ClusterNode> {
    sim.nodes[i].as_ref().expect("node is running")
}

fn group(node: &ClusterNode) -> &RaftGroup {
    &node.groups()[stream_group(NAME, node.groups().len())]
}

/// The index (0-based) of the node every running node sees leading the
/// stream's group, once they agree.
async fn agreed_leader(sim: &Sim, seed: u64) -> usize {
    for _ in 0..1000 {
        let views: Vec<_> = sim.alive().iter().map(|n| group(n).leader()).collect();
        if let Some(Some(leader)) = views.first() {
            if views.iter().all(|v| *v == Some(*leader)) {
                return *leader as usize - 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("seed {seed}: no agreed leader");
}

async fn propose(node: &ClusterNode, command: runnel_core::Command) -> Applied {
    tokio::time::timeout(Duration::from_secs(5), NodeEngine::propose(node, command))
        .await
        .expect("proposal answered")
        .expect("proposal applied")
}

/// What a node knows of its own copy of the stream's group: whether it
/// heard from a leader, and the index it applied up to (what the vote
/// guard decides by).
fn own_copy(node: &ClusterNode) -> (bool, u64) {
    let metrics = group(node).raft().metrics().borrow().clone();
    let applied = metrics.last_applied.map_or(0, |l| l.index);
    (metrics.current_leader.is_some(), applied)
}

fn applied(node: &ClusterNode) -> u64 {
    own_copy(node).1
}

/// Runs the scenario; its note says whether W held its vote while L was
/// down (no leader was elected), or caught up from L's last messages
/// first ([`held_its_vote`] reads it back).
pub async fn run(seed: u64) -> Outcome {
    seed_thread_rng(seed);
    let mut sim = Sim::new(seed);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let leader = agreed_leader(&sim, seed).await;
    let (wiped, cut_off) = ((leader + 1) % 3, (leader + 2) % 3);
    propose(node(&sim, leader), create_text(NAME)).await;
    propose(node(&sim, leader), append_text(NAME, b"a;".to_vec(), None)).await;

    // X is acknowledged by L and W alone.
    sim.isolate(cut_off as u64 + 1, true);
    let x = propose(node(&sim, leader), append_text(NAME, b"X;".to_vec(), None)).await;
    assert!(matches!(x, Applied::Appended { .. }), "seed {seed}: {x:?}");
    let target = applied(node(&sim, leader));

    // W loses its disk. Slow messages keep it behind for a while after it
    // first hears from L.
    sim.wipe(wiped).await;
    sim.set_faults(0, 20);
    sim.start(wiped).await;
    let mut polls = 0;
    loop {
        let (heard_leader, own_applied) = own_copy(node(&sim, wiped));
        if heard_leader {
            assert!(
                own_applied < target,
                "seed {seed}: the scenario needs W to hear from L before it holds X \
                 (it applied {own_applied} of {target} already)"
            );
            break;
        }
        polls += 1;
        assert!(polls < 20_000, "seed {seed}: W never heard from L");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }

    // L crashes before W holds X (as far as W knew); C returns. W may
    // still get X from messages L sent before it crashed, and may then
    // lead; otherwise W and C both lack X and must elect no one.
    sim.crash(leader).await;
    sim.isolate(cut_off as u64 + 1, false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut elected = false;
    for i in [wiped, cut_off] {
        let n = node(&sim, i);
        if group(n).raft().metrics().borrow().state == openraft::ServerState::Leader {
            elected = true;
            assert_eq!(
                read_all(n, seed, i).await,
                b"a;X;",
                "seed {seed}: n{} was elected without X",
                i + 1
            );
        }
    }

    // L returns and leads again; X is on every node.
    sim.start(leader).await;
    // Replicas that applied the same entries look converged before the
    // group has a leader again: wait for every node to apply X's index
    // (which holds X, or what overwrote it).
    for _ in 0..1000 {
        if (0..NODES as usize).all(|i| applied(node(&sim, i)) >= target) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    converge(&sim, seed).await;
    for (i, n) in sim.alive().iter().enumerate() {
        assert_eq!(
            read_all(n, seed, i).await,
            b"a;X;",
            "seed {seed}: n{} lost the acknowledged write",
            i + 1
        );
    }
    sim.conclude(
        Scenario::LostDisk,
        seed,
        None,
        Some(if elected {
            CAUGHT_UP.into()
        } else {
            HELD.into()
        }),
    )
    .await
}

/// The notes of a run: W held its vote while L was down, or caught up
/// from L's last messages first (and may then lead, with X).
const HELD: &str = "W held its vote while L was down";
const CAUGHT_UP: &str = "W caught up from L's last messages before L crashed";

/// Whether a lost-disk run's W held its vote while L was down (most seeds
/// must, or the scenario proves little).
pub fn held_its_vote(outcome: &Outcome) -> bool {
    outcome.note.as_deref() == Some(HELD)
}

async fn read_all(node: &ClusterNode, seed: u64, i: usize) -> Vec<u8> {
    let read = node
        .engine_for(NAME)
        .read(NAME, ReadFrom::Start, u64::MAX)
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: n{} cannot read: {e}", i + 1));
    read.body.to_vec()
}
