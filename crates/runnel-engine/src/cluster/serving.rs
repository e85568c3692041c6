//! What a cluster member answers the HTTP layer: the data path
//! ([`NodeEngine`]: proposals, routing to each group's leader, reads made
//! consistent, readiness) and the cluster's operations ([`ClusterOps`]:
//! membership changes, which node holds which group).

use std::time::Duration;

use runnel_core::listing::Listed;
use runnel_core::{Applied, Command};

use super::ClusterNode;
use crate::api::{
    BoxFuture, ClusterOps, GroupEngine, LiveNamed, MemberChange, MemberReport, NodeEngine, Route,
};
use crate::control::{self, Control};
use crate::error::EngineError;
use crate::metrics::NodeMetrics;
use crate::placement;
use crate::raft::NodeId;
use crate::upkeep::{self, MaintainedGroup};

impl NodeEngine for ClusterNode {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, EngineError>> {
        Box::pin(ClusterNode::propose(self, command))
    }

    fn engine_for(&self, name: &str) -> &dyn GroupEngine {
        self.group_for(name).as_ref()
    }

    fn write_failure(&self) -> Option<String> {
        self.log.failure().map(|e| e.to_string())
    }

    /// Not ready while the log failed, or while any group has no leader,
    /// is led from here without a quorum heard from lately, or holds this
    /// node's vote because it is still catching up after losing its state.
    fn unready(&self) -> Option<String> {
        if let Some(reason) = self.write_failure() {
            return Some(format!("storage failed: {reason}"));
        }
        if self.identity.removed() {
            return Some("this node was removed from the cluster for good".into());
        }
        if let Some(reason) = self.version_unsupported() {
            return Some(reason);
        }
        if let Some(group) = self
            .groups
            .iter()
            .find(|g| self.holds(g) && self.restore_pending(g))
        {
            return Some(format!(
                "group {} is being restored from the object store",
                group.index()
            ));
        }
        for group in &self.groups {
            let index = group.index();
            if self.held_elsewhere(group) {
                // Served there: this node needs only to know where.
                if self.hosting.hint(index).is_none() {
                    return Some(format!(
                        "group {index}: held elsewhere, its leader not known yet"
                    ));
                }
                continue;
            }
            if self.served.votes().refuses(index, &group.raft()) {
                return Some(format!("group {index}: catching up after losing its state"));
            }
            let metrics = group.raft().metrics().borrow().clone();
            match metrics.current_leader {
                None => return Some(format!("group {index} has no leader")),
                Some(leader) if leader == self.node_id => {
                    let silent = metrics.millis_since_quorum_ack.map(Duration::from_millis);
                    if silent.is_none_or(|s| s > self.quorum_silence) {
                        return Some(format!(
                            "group {index}: led here, but no quorum answered for {}",
                            silent.map_or("ever".into(), |s| format!("{} ms", s.as_millis()))
                        ));
                    }
                }
                Some(_) => {}
            }
        }
        None
    }

    fn route(&self, name: &str) -> Route {
        self.route_to(self.group_for(name))
    }

    fn control_route(&self) -> Route {
        self.route_to(&self.groups[control::CONTROL_GROUP])
    }

    fn control_term(&self) -> Option<u64> {
        let group = &self.groups[control::CONTROL_GROUP];
        group.leads().then(|| group.term())
    }

    fn control(&self) -> &Control {
        &self.control
    }

    fn cluster(&self) -> Option<&dyn ClusterOps> {
        Some(self)
    }

    fn read_barrier<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(self.group_for(name).read_barrier())
    }

    fn prepare_live_read<'a>(&'a self, name: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(self.live_read_ready(name))
    }

    fn live_named<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, LiveNamed> {
        Box::pin(self.live_named_in_groups(names))
    }

    fn list_streams<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Listed>, bool), EngineError>> {
        Box::pin(self.list_caught_up(prefix, after, limit))
    }

    fn same_group(&self, a: &str, b: &str) -> bool {
        let groups = self.groups.len();
        placement::stream_group(a, groups) == placement::stream_group(b, groups)
    }

    fn take_released_pins(&self) -> Vec<runnel_core::RemotePin> {
        upkeep::take_released_pins(&self.groups)
    }

    fn metrics(&self) -> NodeMetrics {
        self.report_metrics()
    }

    fn status(&self) -> serde_json::Value {
        self.report_status()
    }
}

impl ClusterOps for ClusterNode {
    fn node_id(&self) -> NodeId {
        self.node_id
    }

    fn group_route(&self, group: u32) -> Route {
        self.groups
            .get(group as usize)
            // No such group: answered here, where `change_member` refuses it.
            .map_or(Route::Local, |g| self.route_to(g))
    }

    fn change_member(
        &self,
        group: u32,
        change: MemberChange,
    ) -> BoxFuture<'_, Result<MemberReport, EngineError>> {
        Box::pin(ClusterNode::change_member(self, group, change))
    }

    fn holds_group_of(&self, name: &str) -> bool {
        self.holds(self.group_for(name))
    }

    fn every_node_holds_every_group(&self) -> bool {
        let everyone: std::collections::BTreeSet<NodeId> = self.groups[control::CONTROL_GROUP]
            .members()
            .into_iter()
            .map(|(node, _)| node)
            .collect();
        self.groups.iter().all(|g| {
            self.holds(g)
                && g.members()
                    .into_iter()
                    .map(|(node, _)| node)
                    .collect::<std::collections::BTreeSet<_>>()
                    == everyone
        })
    }
}
