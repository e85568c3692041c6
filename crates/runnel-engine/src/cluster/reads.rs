//! Reads a cluster node serves from its own applied state: live reads
//! of a group it follows, and stream listings, each once the node has
//! applied everything the group's leader had committed when asked.

use runnel_core::listing::Listed;

use super::{ClusterNode, FOLLOWER_CATCH_UP};
use crate::raft::group::RaftGroup;
use crate::{EngineError, MaintainedGroup};

impl ClusterNode {
    /// Whether this node's copy of `group` holds every write acknowledged
    /// before the call: as its leader, once leadership is confirmed; as a
    /// follower, once it applied up to the leader's read index.
    pub(super) async fn caught_up(&self, group: &RaftGroup) -> bool {
        if !self.holds(group) {
            return false;
        }
        let Some(leader) = group.leader() else {
            return false;
        };
        if leader == self.node_id {
            return group.read_barrier().await.is_ok();
        }
        if cfg!(feature = "unsafe-stale-reads") {
            return true;
        }
        let index = match self.peers_asked.read_index(leader, group.index()).await {
            Ok(index) => index,
            Err(reason) => {
                tracing::debug!(group = group.index(), %reason, "no read index");
                return false;
            }
        };
        match index {
            None => true,
            Some(index) => group
                .raft()
                .wait(Some(FOLLOWER_CATCH_UP))
                .applied_index_at_least(Some(index), "follower read")
                .await
                .is_ok(),
        }
    }

    /// A follower serves a live read once it applied everything its
    /// leader had committed when asked (a read index), so it shows
    /// nothing older than what a client was acknowledged, and never
    /// anything uncommitted (only committed entries are applied). Streams
    /// with a sliding TTL are read at the leader, whose memory holds the
    /// renewals that reads make.
    pub(super) async fn live_read_ready(&self, name: &str) -> bool {
        let group = self.group_for(name);
        if !self.caught_up(group).await {
            return false;
        }
        group.view().with_state(|state| {
            state
                .stream_by_name(name)
                .is_some_and(|s| s.ttl_secs().is_none() && !s.soft_deleted)
        })
    }

    /// A page of the streams listing, from every group once caught up.
    pub(super) async fn list_caught_up(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Listed>, bool), EngineError> {
        for group in &self.groups {
            if !self.caught_up(group).await {
                return Err(EngineError::Replication(format!(
                    "group {} cannot be read consistently at the moment (no leader, or this node lags); retry",
                    group.index()
                )));
            }
        }
        Ok(crate::list_groups(&self.groups, prefix, after, limit))
    }
}
