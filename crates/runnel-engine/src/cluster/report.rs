//! What a cluster node reports of itself: `/metrics` figures and the
//! status `runnel ctl status` shows.

use super::ClusterNode;
use crate::api::NodeEngine;
use crate::metrics::{DiskSpace, NodeMetrics};
use crate::raft::group::GroupStatus;
use crate::tier;
use crate::upkeep::MaintainedGroup;

impl ClusterNode {
    pub(super) fn report_metrics(&self) -> NodeMetrics {
        if let Some(tiering) = &self.tiering {
            tier::uploader::count_totals(&self.groups, tiering);
        }
        let groups = self
            .groups
            .iter()
            .map(|g| g.metrics(!self.served.votes().refuses(g.index(), &g.raft())))
            .collect();
        NodeMetrics {
            log_bytes: self.log.durable_position(),
            log_failed: self.write_failure().is_some(),
            syncs: self.log.sync_stats(),
            streams: self
                .groups
                .iter()
                .map(|g| g.view().with_state(|s| s.stream_count() as u64))
                .sum(),
            groups,
            // Raft's apply path has no commit task of the local kind.
            commit_busy: Vec::new(),
            peers: (self.peer_metrics)(),
            tiering: self.tiering.as_ref().map(|t| t.metrics()),
            disk: DiskSpace::of(&self.data_dir),
            memory: crate::upkeep::memory_of(&self.groups),
            healing: Some(crate::metrics::HealingMetrics {
                moves: self
                    .healing
                    .moves
                    .load(std::sync::atomic::Ordering::Relaxed),
                silent_members: self.silent_members().len() as u64,
                rebalance_moves: self
                    .balancing
                    .moves
                    .load(std::sync::atomic::Ordering::Relaxed),
            }),
        }
    }

    /// Every node's HTTP address: the members of the groups once every
    /// group's membership is known (a removed node is in none), else
    /// those `--peers` named and the members known so far.
    fn known_nodes(&self) -> std::collections::BTreeMap<crate::raft::NodeId, String> {
        let held: Vec<_> = self.groups.iter().filter(|g| self.holds(g)).collect();
        let every_group_known = held.len() == self.groups.len();
        let mut nodes = if every_group_known {
            std::collections::BTreeMap::new()
        } else {
            self.peers.clone()
        };
        for group in held {
            for (node, raft_addr) in group.members() {
                if let std::collections::btree_map::Entry::Vacant(entry) = nodes.entry(node) {
                    if let Ok(addr) = crate::raft::transport::http_addr(&raft_addr) {
                        entry.insert(addr);
                    }
                }
            }
        }
        nodes
    }

    /// A group this node holds no copy of: only its leader, as a peer
    /// named it ([`super::hosting`]).
    fn elsewhere_status(&self, group: u32) -> GroupStatus {
        GroupStatus {
            group,
            state: "elsewhere".into(),
            term: 0,
            leader: self.hosting.hint(group).map(|(node, _)| node),
            last_log_index: None,
            last_applied_index: None,
            applied_digest: String::new(),
            follower_lag: Vec::new(),
            votes: false,
            voters: Vec::new(),
            learners: Vec::new(),
            changing: false,
            preferred_leader: None,
        }
    }

    pub(super) fn report_status(&self) -> serde_json::Value {
        if let Some(tiering) = &self.tiering {
            tier::uploader::count_totals(&self.groups, tiering);
        }
        let control = self.groups[crate::control::CONTROL_GROUP].view();
        let groups: Vec<GroupStatus> = self
            .groups
            .iter()
            .map(|g| {
                let mut status = match self.held_elsewhere(g) {
                    true => self.elsewhere_status(g.index()),
                    false => {
                        let mut status = g.status();
                        status.votes = !self.served.votes().refuses(g.index(), &g.raft());
                        status
                    }
                };
                status.preferred_leader = control.with_state(|s| s.preferred_leader(g.index()));
                status
            })
            .collect();
        let zones = self.zones();
        // Groups whose voters (as this node knows them) one zone could
        // take down: a placement the zones could not honour, or one made
        // before they were known.
        let known = crate::placement::Placement {
            groups: groups.iter().map(|g| g.voters.clone()).collect(),
        };
        let exposed: Vec<serde_json::Value> = crate::placement::quorum_in_one_zone(&known, &zones)
            .into_iter()
            .filter(|_| !zones.is_empty())
            .map(|(group, zone)| serde_json::json!({"group": group, "zone": zone}))
            .collect();
        serde_json::json!({
            "mode": "cluster",
            "node_id": self.node_id,
            "zone": self.own_zone,
            "zones": zones,
            "quorum_in_one_zone": exposed,
            "healing": {
                "dead_node_after_secs": self.dead_node_after.map(|d| d.as_secs()),
                "paused": self.healing_paused(),
                "silent": self.silent_members(),
                "moves": self.healing.moves.load(std::sync::atomic::Ordering::Relaxed),
            },
            "cluster_id": self.cluster_id(),
            "cluster_version": self.version_status(),
            "rebalancing": self.balancing_status(),
            "replication_factor": self.replication(),
            "retired_nodes": self.groups[crate::control::CONTROL_GROUP]
                .view()
                .with_state(|s| s.retired_nodes().collect::<Vec<_>>()),
            "nodes": self.known_nodes(),
            "log_position": self.log.durable_position(),
            "write_failure": self.write_failure(),
            "tiering": self.tiering.as_ref().map(|t| t.status()),
            "backups": self.backup_status(),
            "restore": self.restore_status(),
            "groups": groups,
        })
    }
}
