//! What a run is judged by once the cluster is calm: every copy of every
//! group converges to the same applied entries, every replica holds the
//! same bytes for every stream, and the recorded history passes
//! [`runnel_history::check`] against them.

use std::collections::BTreeMap;
use std::time::Duration;

use runnel_core::ReadFrom;
use runnel_engine::placement::stream_group;
use runnel_engine::NodeEngine;
use runnel_history::check::{History, Report};

use crate::sim::{Sim, STREAMS};
use crate::workload::stream_name;

/// Waits until every node that holds a group applied the same entries in
/// it, and every node knows the cluster by the same id; panics (the seed
/// fails) if they do not within a minute.
pub async fn converge(sim: &Sim, seed: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let nodes = sim.alive();
        let ids: Vec<_> = nodes.iter().map(|n| n.cluster_id()).collect();
        let groups = nodes[0].groups().len();
        let copies: Vec<Vec<_>> = (0..groups)
            .map(|g| {
                nodes
                    .iter()
                    .map(|n| &n.groups()[g])
                    .zip(&nodes)
                    .filter(|(group, n)| n.holds(group))
                    .map(|(group, _)| {
                        let s = group.status();
                        (s.last_applied_index, s.applied_digest)
                    })
                    .collect()
            })
            .collect();
        let same_id = ids[0].is_some() && ids.iter().all(|id| *id == ids[0]);
        let same_copies = copies
            .iter()
            .all(|c| !c.is_empty() && c.iter().all(|copy| *copy == c[0]));
        if same_id && same_copies {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: replicas never converged: ids {ids:?}, copies {copies:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads every stream from every replica and judges the history against
/// the bytes. Replicas that differ, and a history no read of which reached
/// a stream's tail (nothing was checked), are anomalies too, added to the
/// checker's.
pub async fn check(sim: &Sim, seed: u64, history: &History) -> Report {
    let mut finals = BTreeMap::new();
    let mut differing = Vec::new();
    for stream in 0..STREAMS {
        let name = stream_name(stream);
        let mut replicas = Vec::new();
        for node in sim.alive() {
            let group = &node.groups()[stream_group(&name, node.groups().len())];
            if !node.holds(group) {
                continue;
            }
            let read = node
                .engine_for(&name)
                .read(&name, ReadFrom::Start, u64::MAX)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {name} unreadable: {e}"));
            replicas.push(read.body.to_vec());
        }
        if !replicas.iter().all(|r| *r == replicas[0]) {
            differing.push(format!("{name}: replicas differ"));
        }
        finals.insert(name, replicas.swap_remove(0));
    }
    let mut report = runnel_history::check::check(history, &finals);
    report.anomalies.extend(differing);
    if report.tail_reads == 0 {
        report
            .anomalies
            .push("no read reached the tail: nothing was checked".into());
    }
    sim.note(format!("checked: {}", report.summary()));
    report
}
