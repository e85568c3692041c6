//! `runnel serve --node-id N --listen HOST:PORT --join URL`: a node that
//! joins a running cluster through any member, without a `--peers` list.
//!
//! Before the node opens its data directory it asks the member at `URL`
//! for its status ([`learn_cluster`]): the cluster's nodes and their
//! addresses become this node's peers, and the cluster's group count its
//! own. Once it serves, it makes itself a member of every group through
//! that member ([`become_member`]), as `runnel ctl node add` would: a
//! learner first, caught up from the leader, then a voter. Each step is
//! idempotent, so a restart with the same flags finds the node a member
//! already and changes nothing.
//!
//! Refused before anything is written: a URL that is not a cluster
//! member, a node id the cluster already has at another address, a
//! `--groups` other than the cluster's, and a cluster whose id is not
//! the one `--cluster-id` gives or the data directory keeps. The node
//! keeps the cluster's id before it opens its groups, so its Raft peers
//! know it from the first connection. A node that joined before starts
//! with the peers it learnt then (kept in its data directory) when the
//! member does not answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use runnel_engine::cluster::identity;
use runnel_engine::node::META_FILE;

use crate::config::Settings;
use crate::ctl::{self, membership, NodeArgs};

/// How long joining may wait on one group (a leader change, a long
/// catch-up) before it gives up; `runnel ctl node add` resumes it.
const GROUP_TIMEOUT_SECS: u64 = 600;

/// Where and how to join.
#[derive(Debug, Clone)]
pub struct Join {
    /// A member's base URL.
    pub url: String,
    /// An admin bearer token, for clusters with access control.
    pub token: Option<String>,
    /// The CA of an https:// member.
    pub ca: Option<PathBuf>,
    /// The group count given with `--groups`, which must be the cluster's.
    pub groups: Option<u32>,
    /// This node's HTTP address as the others reach it.
    pub addr: SocketAddr,
    /// `--cluster-id`: the cluster it must be.
    pub cluster_id: Option<String>,
}

impl Join {
    pub fn new(
        url: String,
        token: Option<String>,
        ca: Option<PathBuf>,
        groups: Option<u32>,
        addr: SocketAddr,
        cluster_id: Option<String>,
    ) -> Result<Join, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "--join {url:?}: give a member's base URL, http://HOST:PORT or https://HOST:PORT"
            ));
        }
        if addr.ip().is_unspecified() || addr.port() == 0 {
            return Err(format!(
                "--join needs --listen at an address the other nodes can reach, not {addr}"
            ));
        }
        Ok(Join {
            url: url.trim_end_matches('/').to_string(),
            token,
            ca,
            groups,
            addr,
            cluster_id,
        })
    }

    fn node_args(&self) -> NodeArgs {
        NodeArgs {
            target: self.url.clone(),
            token: self.token.clone(),
            ca: self.ca.clone(),
            timeout_secs: GROUP_TIMEOUT_SECS,
        }
    }
}

/// Completes the settings of a joining node from the cluster's status:
/// its peers and its group count. A node that joined before and cannot
/// reach the member it joined by starts with the peers and group count
/// it learnt then.
pub fn learn_cluster(settings: &mut Settings) -> Result<(), String> {
    let Some(cluster) = settings.cluster.as_mut() else {
        return Ok(());
    };
    let Some(join) = cluster.join.clone() else {
        return Ok(());
    };
    let answer = ctl::http_exchange(
        "GET",
        &join.url,
        "/_runnel/status",
        join.token.as_deref(),
        join.ca.as_deref(),
        Duration::from_secs(5),
    );
    let body = match answer {
        Ok((200, body)) => body,
        // It answered, and refused (a wrong token, say): no fallback.
        Ok((status, body)) => {
            return Err(format!(
                "--join: {} answered {status}: {}",
                join.url,
                body.trim()
            ))
        }
        Err(reason) => {
            let dir = &settings.engine.data_dir;
            let Some((peers, groups)) = remembered(dir) else {
                return Err(format!("--join: {reason}"));
            };
            tracing::warn!(
                %reason,
                nodes = ?peers.keys().collect::<Vec<_>>(),
                groups,
                "the member to join by does not answer; starting with the peers and groups \
                 this node learnt when it joined (a join cut short is finished with \
                 `runnel ctl node add`)"
            );
            cluster.peers.extend(peers);
            cluster.join = None;
            settings.engine.groups = groups;
            return Ok(());
        }
    };
    let status: serde_json::Value = serde_json::from_str(&body).map_err(|e| {
        format!(
            "--join: {} answered with something other than JSON: {e}",
            join.url
        )
    })?;
    let learnt = ClusterView::of(&status).map_err(|e| format!("--join {}: {e}", join.url))?;
    let peers = learnt.peers_for(cluster.node_id, &join)?;
    let dir = &settings.engine.data_dir;
    let kept = identity::read_kept(dir).map_err(|e| format!("--join: {e}"))?;
    let cluster_id = learnt.cluster_id_for(kept.as_deref(), &join)?;
    remember(dir, &peers)
        .map_err(|e| format!("--join: cannot write to the data directory: {e}"))?;
    if let Some(id) = cluster_id {
        identity::keep(dir, &id).map_err(|e| format!("--join: {e}"))?;
    }
    cluster.peers = peers;
    settings.engine.groups = learnt.groups;
    tracing::info!(
        cluster = %join.url,
        nodes = ?cluster.peers.keys().collect::<Vec<_>>(),
        groups = learnt.groups,
        "joining the cluster"
    );
    Ok(())
}

/// Where a joined node keeps the peers it learnt (`ID=HOST:PORT,...`).
const PEERS_FILE: &str = "joined-peers";

/// Keeps the peers learnt at a join, for starts while the member to
/// join by is down. Without them such a start would know no peer, and
/// a group it had not been added to yet could be formed anew on it alone.
fn remember(dir: &Path, peers: &BTreeMap<u64, String>) -> std::io::Result<()> {
    let text: Vec<String> = peers
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect();
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{PEERS_FILE}.tmp"));
    std::fs::write(&tmp, text.join(",") + "\n")?;
    std::fs::rename(tmp, dir.join(PEERS_FILE))
}

/// The peers a joined node learnt, and the group count its data
/// directory holds; `None` for a node that never joined from `dir`.
fn remembered(dir: &Path) -> Option<(BTreeMap<u64, String>, u32)> {
    let peers = std::fs::read_to_string(dir.join(PEERS_FILE)).ok()?;
    let groups = groups_in_meta(&std::fs::read_to_string(dir.join(META_FILE)).ok()?)?;
    Some((crate::config::parse_peers(peers.trim()).ok()?.peers, groups))
}

/// The group count a cluster node's metadata file records.
fn groups_in_meta(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|line| line.strip_prefix("groups = "))
        .and_then(|n| n.trim().parse().ok())
}

/// Makes this node a member through the member it joined by: it joins
/// group 0 and takes its share of the other groups' replicas (as `runnel
/// ctl node add` does); blocks until done or refused (run on a blocking
/// thread). Answers how many groups it holds, and how many there are.
pub fn become_member(join: &Join, node_id: u64) -> Result<(usize, usize), String> {
    membership::add(&join.node_args(), node_id, &join.addr.to_string())
}

/// What a member's status says of the cluster.
#[derive(Debug, PartialEq)]
struct ClusterView {
    nodes: BTreeMap<u64, String>,
    groups: u32,
    /// `None` until the cluster has named itself.
    cluster_id: Option<String>,
}

impl ClusterView {
    fn of(status: &serde_json::Value) -> Result<ClusterView, String> {
        if status["mode"] != "cluster" {
            return Err("this is a single node, not a cluster member".into());
        }
        let nodes = status["nodes"]
            .as_object()
            .ok_or("the status lists no nodes")?
            .iter()
            .map(|(id, addr)| {
                let id = id.parse::<u64>().map_err(|_| format!("node id {id:?}"))?;
                let addr = addr.as_str().ok_or(format!("node {id}'s address"))?;
                Ok((id, addr.to_string()))
            })
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        let groups = status["groups"]
            .as_array()
            .map(Vec::len)
            .filter(|n| *n > 0)
            .ok_or("the status lists no groups")?;
        Ok(ClusterView {
            nodes,
            groups: groups as u32,
            cluster_id: status["cluster_id"].as_str().map(str::to_string),
        })
    }

    /// The cluster id the joining node is to keep. Refuses a cluster
    /// named other than `--cluster-id` or the id its data directory keeps
    /// (`kept`: the directory holds another cluster's node).
    fn cluster_id_for(&self, kept: Option<&str>, join: &Join) -> Result<Option<String>, String> {
        let Some(theirs) = self.cluster_id.as_deref() else {
            return Ok(None);
        };
        if let Some(kept) = kept.filter(|kept| *kept != theirs) {
            return Err(format!(
                "--join: the data directory belongs to cluster {kept:?}, but {} is a member of \
                 cluster {theirs:?}: give this node a new data directory",
                join.url
            ));
        }
        if let Some(wanted) = join.cluster_id.as_deref().filter(|w| *w != theirs) {
            return Err(format!(
                "--join: {} is a member of cluster {theirs:?}, not --cluster-id {wanted:?}",
                join.url
            ));
        }
        Ok(Some(theirs.to_string()))
    }

    /// The joining node's peers: the cluster's nodes and itself. Refuses
    /// an id the cluster has at another address, and another group count.
    fn peers_for(&self, node_id: u64, join: &Join) -> Result<BTreeMap<u64, String>, String> {
        let own = join.addr.to_string();
        if let Some(addr) = self.nodes.get(&node_id).filter(|a| **a != own) {
            return Err(format!(
                "--join: node {node_id} is already a member at {addr}: give this node an \
                 unused --node-id (a dead node is replaced with `runnel ctl node replace`)"
            ));
        }
        if let Some(other) = self
            .nodes
            .iter()
            .find(|(id, a)| **a == own && **id != node_id)
        {
            return Err(format!(
                "--join: {own} is node {} of the cluster already",
                other.0
            ));
        }
        if let Some(groups) = join.groups.filter(|g| *g != self.groups) {
            return Err(format!(
                "--join: --groups {groups}, but the cluster has {} groups (leave --groups out)",
                self.groups
            ));
        }
        let mut peers = self.nodes.clone();
        peers.insert(node_id, own);
        Ok(peers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(groups: Option<u32>) -> Join {
        Join::new(
            "http://127.0.0.1:5001/".into(),
            None,
            None,
            groups,
            "127.0.0.1:5007".parse().unwrap(),
            None,
        )
        .unwrap()
    }

    fn status() -> serde_json::Value {
        serde_json::json!({
            "mode": "cluster",
            "node_id": 1,
            "nodes": {"1": "127.0.0.1:5001", "2": "127.0.0.1:5003"},
            "groups": [{}, {}, {}, {}],
        })
    }

    #[test]
    fn a_newcomer_learns_the_nodes_and_the_group_count() {
        let view = ClusterView::of(&status()).unwrap();
        assert_eq!(view.groups, 4);
        let peers = view.peers_for(4, &join(None)).unwrap();
        assert_eq!(
            peers.into_iter().collect::<Vec<_>>(),
            vec![
                (1, "127.0.0.1:5001".to_string()),
                (2, "127.0.0.1:5003".to_string()),
                (4, "127.0.0.1:5007".to_string()),
            ]
        );
        assert_eq!(
            join(None).url,
            "http://127.0.0.1:5001",
            "trailing / dropped"
        );
    }

    #[test]
    fn a_restarted_member_finds_itself_and_is_accepted() {
        let mut status = status();
        status["nodes"]["4"] = "127.0.0.1:5007".into();
        let view = ClusterView::of(&status).unwrap();
        assert_eq!(view.peers_for(4, &join(Some(4))).unwrap().len(), 3);
    }

    #[test]
    fn a_taken_id_or_address_and_another_group_count_are_refused() {
        let view = ClusterView::of(&status()).unwrap();
        let err = view.peers_for(2, &join(None)).unwrap_err();
        assert!(
            err.contains("node 2 is already a member at 127.0.0.1:5003"),
            "{err}"
        );
        let mut taken = join(None);
        taken.addr = "127.0.0.1:5003".parse().unwrap();
        let err = view.peers_for(4, &taken).unwrap_err();
        assert!(err.contains("is node 2 of the cluster already"), "{err}");
        let err = view.peers_for(4, &join(Some(3))).unwrap_err();
        assert!(err.contains("the cluster has 4 groups"), "{err}");
    }

    #[test]
    fn a_cluster_named_otherwise_is_refused() {
        let unnamed = ClusterView::of(&status()).unwrap();
        assert_eq!(unnamed.cluster_id_for(Some("a"), &join(None)), Ok(None));
        let mut named = status();
        named["cluster_id"] = "prod".into();
        let view = ClusterView::of(&named).unwrap();
        assert_eq!(
            view.cluster_id_for(None, &join(None)),
            Ok(Some("prod".into()))
        );
        assert_eq!(
            view.cluster_id_for(Some("prod"), &join(None)),
            Ok(Some("prod".into()))
        );
        let err = view
            .cluster_id_for(Some("staging"), &join(None))
            .unwrap_err();
        assert!(
            err.contains("the data directory belongs to cluster \"staging\""),
            "{err}"
        );
        let mut wanting = join(None);
        wanting.cluster_id = Some("staging".into());
        let err = view.cluster_id_for(None, &wanting).unwrap_err();
        assert!(err.contains("not --cluster-id \"staging\""), "{err}");
        wanting.cluster_id = Some("prod".into());
        assert_eq!(view.cluster_id_for(None, &wanting), Ok(Some("prod".into())));
    }

    #[test]
    fn a_joined_node_remembers_its_peers_and_group_count() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(remembered(dir.path()), None, "never joined");
        let peers = ClusterView::of(&status())
            .unwrap()
            .peers_for(4, &join(None))
            .unwrap();
        remember(dir.path(), &peers).unwrap();
        assert_eq!(remembered(dir.path()), None, "joined, but never opened");
        std::fs::write(
            dir.path().join(META_FILE),
            "format = 2\ngroups = 4\nnode_id = 4\n",
        )
        .unwrap();
        assert_eq!(remembered(dir.path()), Some((peers, 4)));
    }

    #[test]
    fn what_is_not_a_cluster_member_is_refused() {
        let single = serde_json::json!({"mode": "single", "groups": [{}]});
        assert!(ClusterView::of(&single)
            .unwrap_err()
            .contains("single node"));
        let bare = serde_json::json!({"mode": "cluster", "nodes": {}, "groups": []});
        assert!(ClusterView::of(&bare).unwrap_err().contains("no groups"));
        for (url, listen) in [
            ("127.0.0.1:5001", "127.0.0.1:5007"),
            ("http://127.0.0.1:5001", "0.0.0.0:5007"),
        ] {
            assert!(
                Join::new(url.into(), None, None, None, listen.parse().unwrap(), None).is_err()
            );
        }
    }
}
