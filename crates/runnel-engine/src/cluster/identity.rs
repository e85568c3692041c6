//! Which cluster this node belongs to: the cluster id
//! ([`runnel_core::cluster_meta`]) as this node knows it, kept in its data
//! directory, and checked whenever a Raft peer connects.
//!
//! A new cluster is named once, by its control group: the group's leader
//! proposes an id (`--cluster-id`, or a random one) and the first one
//! applied stands ([`name_the_cluster`]). Every node keeps the applied id
//! in `DATA_DIR/cluster-id`, and a node that joins with `--join` writes it
//! there before it opens its groups, so it knows the id from its first
//! connection on. Two nodes that know different ids do not talk: the
//! Raft transport's hello ([`PeerIdentity::admits`]) refuses the connection,
//! and `runnel ctl node add` and `--join` refuse the node. A node that
//! knows no id yet (a new cluster still forming, or a node that lost its
//! disk) is let in; what it applies names it.
//!
//! A node removed for good (`runnel ctl node remove` retires its id in
//! the control group) is refused in the hello too. Told so, it writes
//! `DATA_DIR/removed` and stops being ready; a data directory holding
//! that marker does not start again. Without this a removed node brought
//! back on its old data directory would still count itself a voter of
//! its old groups (the leader stops replicating to a node as soon as it
//! leaves, so it never learns it left) and call elections in them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rand::RngCore;
use runnel_core::{Applied, Command};

use crate::api::GroupEngine;
use crate::datadir::{write_file_durably, OpenError};
use crate::raft::group::RaftGroup;
use crate::raft::runtime::RaftRng;
use crate::raft::transport::PeerIdentity;
use crate::upkeep::MaintainedGroup;

pub use runnel_core::cluster_meta::{validate, ClusterIdError};

/// The file in a data directory that holds the cluster id.
pub const CLUSTER_ID_FILE: &str = "cluster-id";
/// The file that marks the data directory of a node removed for good.
pub const REMOVED_FILE: &str = "removed";

/// Why this node's cluster id cannot be used, kept or adopted.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("node {node} was removed from cluster {} for good ({} says so): this data directory cannot serve again; to bring the machine back, start it with an empty data directory and a new --node-id", .cluster.as_deref().unwrap_or("?"), .marker.display())]
    Removed {
        node: u64,
        cluster: Option<String>,
        marker: PathBuf,
    },
    #[error("--cluster-id: {0}")]
    BadFlag(ClusterIdError),
    #[error("the data directory {dir} belongs to cluster {kept:?}, not --cluster-id {wanted:?}")]
    OtherCluster {
        dir: PathBuf,
        kept: String,
        wanted: String,
    },
    /// The control group applied another id than `--cluster-id`.
    #[error("the cluster is named {applied:?}, but this node was started as a member of {mine:?} (--cluster-id): its peers will refuse it")]
    NamedOtherwise { applied: String, mine: String },
    #[error(transparent)]
    Invalid(#[from] ClusterIdError),
    #[error("{path}: {source}")]
    InvalidKept {
        path: PathBuf,
        source: ClusterIdError,
    },
    #[error("keeping the cluster id in {dir}: {source}")]
    Keep {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How often a node looks whether the cluster has been named.
const NAMING_POLL: Duration = Duration::from_millis(200);

/// The cluster id as this node knows it, and this node's id in it.
#[derive(Debug)]
pub struct Identity {
    node_id: u64,
    known: OnceLock<String>,
    data_dir: PathBuf,
    /// Set once a peer said this node was removed for good.
    removed: AtomicBool,
    /// The highest cluster version each peer's build supports, as its
    /// latest hello said (see [`super::upgrade`]).
    peer_versions: std::sync::Mutex<std::collections::BTreeMap<u64, u32>>,
}

impl Identity {
    /// The id kept in `data_dir`, or `wanted` (`--cluster-id`) for a node
    /// that keeps none yet, which it then keeps; node `node_id` is this
    /// one. Refused: a kept id other than `wanted`, an invalid one, and
    /// the data directory of a node removed for good.
    pub fn load(
        data_dir: &Path,
        node_id: u64,
        wanted: Option<&str>,
    ) -> Result<Arc<Identity>, OpenError> {
        let config = |e: IdentityError| OpenError::Config(Box::new(e));
        let kept = read_kept(data_dir).map_err(config)?;
        if data_dir.join(REMOVED_FILE).exists() {
            return Err(config(IdentityError::Removed {
                node: node_id,
                cluster: kept,
                marker: data_dir.join(REMOVED_FILE),
            }));
        }
        if let Some(wanted) = wanted {
            validate(wanted).map_err(|e| config(IdentityError::BadFlag(e)))?;
        }
        let known = OnceLock::new();
        match (kept, wanted) {
            (Some(kept), Some(wanted)) if kept != wanted => {
                return Err(config(IdentityError::OtherCluster {
                    dir: data_dir.to_path_buf(),
                    kept,
                    wanted: wanted.to_string(),
                }))
            }
            (Some(id), _) => known.set(id).expect("set once"),
            // Kept at once: the directory is this cluster's from now on.
            (None, Some(wanted)) => {
                runnel_log::create_dir_durable(data_dir).map_err(|source| OpenError::Io {
                    path: data_dir.to_path_buf(),
                    source,
                })?;
                keep(data_dir, wanted).map_err(config)?;
                known.set(wanted.to_string()).expect("set once");
            }
            (None, None) => {}
        }
        Ok(Arc::new(Identity {
            node_id,
            known,
            data_dir: data_dir.to_path_buf(),
            removed: AtomicBool::new(false),
            peer_versions: Default::default(),
        }))
    }

    /// The highest cluster version each peer that greeted this node (or
    /// answered its greeting) supports.
    pub fn peer_versions(&self) -> std::collections::BTreeMap<u64, u32> {
        self.peer_versions.lock().expect("versions lock").clone()
    }

    /// Whether a peer told this node it was removed for good.
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }

    /// The cluster id, once this node knows it.
    pub fn get(&self) -> Option<&str> {
        self.known.get().map(String::as_str)
    }

    /// Takes the id the control group applied, keeping it in the data
    /// directory. An id that differs from the one this node started with
    /// (`--cluster-id`) is refused: the node stays out of the cluster's
    /// Raft traffic from then on (its hellos name the other id).
    fn adopt(&self, applied: &str) -> Result<(), IdentityError> {
        let mine = self.known.get_or_init(|| applied.to_string());
        if mine != applied {
            return Err(IdentityError::NamedOtherwise {
                applied: applied.to_string(),
                mine: mine.clone(),
            });
        }
        if read_kept(&self.data_dir)?.as_deref() != Some(applied) {
            keep(&self.data_dir, applied)?;
        }
        Ok(())
    }
}

/// The transport's view of this node: its hello names the node and the
/// cluster id, and a peer's refusal as removed for good marks the data
/// directory.
impl PeerIdentity for Identity {
    fn node_id(&self) -> u64 {
        self.node_id
    }

    fn cluster_id(&self) -> Option<&str> {
        self.get()
    }

    fn note_peer_version(&self, node: u64, version: u32) {
        self.peer_versions
            .lock()
            .expect("versions lock")
            .insert(node, version);
    }

    /// Marks the data directory so that it does not start again (see the
    /// module docs).
    fn mark_removed(&self, by: &str) {
        if self.removed.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::error!(
            node_id = self.node_id,
            peer = by,
            "this node was removed from the cluster for good; it will not start again on \
             this data directory"
        );
        let note = format!("removed; refused by {by}\n");
        if let Err(e) = write_file_durably(&self.data_dir, REMOVED_FILE, &note) {
            tracing::error!(error = %e, "marking the data directory as removed failed");
        }
    }
}

/// Keeps `id` as the cluster id in `data_dir` (which must exist).
pub fn keep(data_dir: &Path, id: &str) -> Result<(), IdentityError> {
    validate(id)?;
    write_file_durably(data_dir, CLUSTER_ID_FILE, &format!("{id}\n")).map_err(|source| {
        IdentityError::Keep {
            dir: data_dir.to_path_buf(),
            source,
        }
    })
}

/// The cluster id a data directory keeps, if any.
pub fn read_kept(data_dir: &Path) -> Result<Option<String>, IdentityError> {
    let path = data_dir.join(CLUSTER_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if let Err(source) = validate(id) {
                return Err(IdentityError::InvalidKept { path, source });
            }
            Ok(Some(id.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(IdentityError::Read { path, source }),
    }
}

/// Names the cluster if nobody has yet, and keeps the name: while the
/// control group's state has no id, its leader (whichever node that is)
/// proposes this node's (`--cluster-id`) or a random one; once an id is
/// applied, every node adopts it and the task ends.
pub(crate) async fn name_the_cluster(control: Arc<RaftGroup>, identity: Arc<Identity>) {
    loop {
        let applied = control
            .view()
            .with_state(|state| state.cluster_id().map(str::to_string));
        if let Some(applied) = applied {
            match identity.adopt(&applied) {
                Ok(()) => tracing::info!(cluster_id = %applied, "cluster id"),
                Err(reason) => tracing::error!(%reason, "cluster id"),
            }
            return;
        }
        if control.leads() {
            let id = identity
                .get()
                .map_or_else(|| format!("rc-{:016x}", RaftRng.next_u64()), str::to_string);
            match control.propose(Command::SetClusterId { id }).await {
                Ok(Applied::ClusterId { id, set }) => {
                    tracing::debug!(cluster_id = %id, set, "naming the cluster")
                }
                Ok(other) => unreachable!("a cluster id applied as {other:?}"),
                Err(e) => tracing::debug!(error = %e, "naming the cluster failed; retrying"),
            }
        }
        tokio::time::sleep(NAMING_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_node_marks_its_data_directory_and_does_not_start_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = Identity::load(dir.path(), 3, Some("prod")).expect("loads");
        assert!(!identity.removed());
        identity.mark_removed("127.0.0.1:5002");
        assert!(identity.removed());
        assert!(dir.path().join(REMOVED_FILE).exists());
        let refused = Identity::load(dir.path(), 3, None).expect_err("removed");
        assert!(
            refused
                .to_string()
                .contains("node 3 was removed from cluster prod for good"),
            "{refused}"
        );
    }

    #[test]
    fn a_kept_id_wins_and_must_match_the_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = Identity::load(dir.path(), 1, None).expect("loads");
        assert_eq!(fresh.get(), None);
        assert!(fresh.admits(Some("a")).is_ok());
        fresh.adopt("prod").expect("adopts");
        assert_eq!(fresh.get(), Some("prod"));
        assert_eq!(read_kept(dir.path()).unwrap(), Some("prod".into()));
        assert!(fresh.admits(Some("other")).is_err());
        assert!(fresh.admits(Some("prod")).is_ok());
        assert!(fresh.admits(None).is_ok());

        let reopened = Identity::load(dir.path(), 1, Some("prod")).expect("same id");
        assert_eq!(reopened.get(), Some("prod"));
        let refused = Identity::load(dir.path(), 1, Some("staging")).expect_err("another id");
        assert!(
            refused.to_string().contains("belongs to cluster"),
            "{refused}"
        );
        assert!(Identity::load(dir.path(), 1, Some("bad id")).is_err());
    }

    #[test]
    fn a_flag_is_kept_and_an_applied_id_other_than_it_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("new");
        let flagged = Identity::load(&data_dir, 1, Some("wanted")).expect("loads");
        assert_eq!(read_kept(&data_dir).unwrap(), Some("wanted".into()));
        assert!(flagged.adopt("applied").is_err());
        assert_eq!(flagged.get(), Some("wanted"));
        assert_eq!(read_kept(&data_dir).unwrap(), Some("wanted".into()));
        let reopened = Identity::load(&data_dir, 1, None).expect("loads");
        assert_eq!(reopened.get(), Some("wanted"));
    }
}
