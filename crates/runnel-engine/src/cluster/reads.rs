//! Reads a cluster node serves from its own applied state: live reads
//! of a group it follows, and stream listings, each once the node has
//! applied everything the group's leader had committed when asked. A
//! listing takes the streams of a group this node holds no copy of (or
//! whose copy lags) from the group's leader.

use runnel_core::listing::Listed;

use super::{ClusterNode, FOLLOWER_CATCH_UP};
use crate::api::{LiveNamed, Route};
use crate::clock::now_ms;
use crate::error::{EngineError, ReplicationError, Unreadable};
use crate::raft::group::RaftGroup;
use crate::raft::transport::{ListRequest, MAX_LISTED};
use crate::upkeep::merge_listing;
use crate::upkeep::MaintainedGroup;

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
        if crate::hooks::stale_reads() {
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
        let now = now_ms();
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
            let unreadable = |why| {
                EngineError::Replication(ReplicationError::Unreadable {
                    group: group.index(),
                    why,
                })
            };
            let Route::Forward { node: leader, .. } = self.route_to(group) else {
                return Err(unreadable(Unreadable::NoLeader));
            };
            let request = ListRequest {
                prefix: prefix.to_string(),
                after: after.map(str::to_string),
                limit: (limit + 1) as u32,
                names: None,
            };
            let remote = self.peers_asked.list(leader, group.index(), &request).await;
            page.extend(remote.map_err(|error| unreadable(Unreadable::Leader { leader, error }))?);
        }
        Ok(merge_listing(page, limit))
    }

    /// The live streams among `names`, each with every write acknowledged
    /// before the call: from this node's copy of a group once caught up,
    /// else from the group's leader, one request per group. The names of
    /// a group that could not be read are returned as such.
    pub(super) async fn live_named_in_groups(&self, names: &[String]) -> LiveNamed {
        let now = now_ms();
        let mut by_group: Vec<Vec<String>> = vec![Vec::new(); self.groups.len()];
        for name in names {
            by_group[self.group_for(name).index() as usize].push(name.clone());
        }
        let mut found = LiveNamed::default();
        for (group, names) in self.groups.iter().zip(by_group) {
            if names.is_empty() {
                continue;
            }
            if self.caught_up(group).await {
                let live = group.view().with_state(|s| {
                    names
                        .iter()
                        .filter_map(|n| s.listed(n, now))
                        .collect::<Vec<_>>()
                });
                found.live.extend(live);
                continue;
            }
            let Route::Forward { node: leader, .. } = self.route_to(group) else {
                found.unread.extend(names);
                continue;
            };
            for names in names.chunks(MAX_LISTED as usize) {
                let request = ListRequest {
                    limit: names.len() as u32,
                    names: Some(names.to_vec()),
                    ..ListRequest::default()
                };
                match self.peers_asked.list(leader, group.index(), &request).await {
                    Ok(live) => found.live.extend(live),
                    Err(reason) => {
                        tracing::debug!(group = group.index(), leader, %reason, "heads not read");
                        found.unread.extend(names.iter().cloned());
                    }
                }
            }
        }
        found
    }
}
