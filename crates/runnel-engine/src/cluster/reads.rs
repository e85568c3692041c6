//! Reads a cluster node serves from its own applied state: live reads
//! of a group it follows, and stream listings, each once the node has
//! applied everything the group's leader had committed when asked. A
//! listing takes the streams of a group this node holds no copy of (or
//! whose copy lags) from the group's leader.

use runnel_core::listing::Listed;

use super::{ClusterNode, FOLLOWER_CATCH_UP};
use crate::raft::group::RaftGroup;
use crate::raft::transport::ListRequest;
use crate::{EngineError, MaintainedGroup, Route};

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

    /// A page of the streams listing, from every group: from this node's
    /// copy once caught up, else (a group it holds no copy of, or a copy
    /// that lags) from the group's leader.
    pub(super) async fn list_caught_up(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Listed>, bool), EngineError> {
        let now = crate::now_ms();
        let mut page = Vec::new();
        for group in &self.groups {
            // One more than asked: whether another page follows.
            if self.caught_up(group).await {
                page.extend(
                    group
                        .view()
                        .with_state(|s| s.list(prefix, after, limit + 1, now)),
                );
                continue;
            }
            let unreadable = |why: String| {
                EngineError::Replication(format!(
                    "group {} cannot be read consistently at the moment ({why}); retry",
                    group.index()
                ))
            };
            let Route::Forward { node: leader, .. } = self.route_to(group) else {
                return Err(unreadable("no leader, or this node lags".into()));
            };
            let request = ListRequest {
                prefix: prefix.to_string(),
                after: after.map(str::to_string),
                limit: (limit + 1) as u32,
            };
            let remote = self.peers_asked.list(leader, group.index(), &request).await;
            page.extend(remote.map_err(|e| unreadable(format!("its leader, node {leader}: {e}")))?);
        }
        Ok(crate::merge_listing(page, limit))
    }
}
