//! Which cluster this node belongs to: the cluster id
//! ([`runnel_core::cluster_id`]) as this node knows it, kept in its data
//! directory, and checked whenever a Raft peer connects.
//!
//! A new cluster is named once, by its control group: the group's leader
//! proposes an id (`--cluster-id`, or a random one) and the first one
//! applied stands ([`name_the_cluster`]). Every node keeps the applied id
//! in `DATA_DIR/cluster-id`, and a node that joins with `--join` writes it
//! there before it opens its groups, so it knows the id from its first
//! connection on. Two nodes that know different ids do not talk: the
//! Raft transport's hello ([`Identity::admits`]) refuses the connection,
//! and `runnel ctl node add` and `--join` refuse the node. A node that
//! knows no id yet (a new cluster still forming, or a node that lost its
//! disk) is let in; what it applies names it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rand::RngCore;
use runnel_core::{Applied, Command};

use crate::node::{write_file_durably, OpenError};
use crate::raft::group::RaftGroup;
use crate::raft::runtime::RaftRng;
use crate::{GroupEngine, MaintainedGroup};

pub use runnel_core::cluster_id::validate;

/// The file in a data directory that holds the cluster id.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// How often a node looks whether the cluster has been named.
const NAMING_POLL: Duration = Duration::from_millis(200);

/// The cluster id as this node knows it.
#[derive(Debug)]
pub struct Identity {
    known: OnceLock<String>,
    data_dir: PathBuf,
}

impl Identity {
    /// The id kept in `data_dir`, or `wanted` (`--cluster-id`) for a node
    /// that keeps none yet, which it then keeps. Refused: a kept id other
    /// than `wanted`, and an invalid one.
    pub fn load(data_dir: &Path, wanted: Option<&str>) -> Result<Arc<Identity>, OpenError> {
        let config = |reason| OpenError::Config { reason };
        let kept = read_kept(data_dir).map_err(config)?;
        if let Some(wanted) = wanted {
            validate(wanted).map_err(|e| config(format!("--cluster-id: {e}")))?;
        }
        let known = OnceLock::new();
        match (kept, wanted) {
            (Some(kept), Some(wanted)) if kept != wanted => return Err(config(format!(
                "the data directory {} belongs to cluster {kept:?}, not --cluster-id {wanted:?}",
                data_dir.display()
            ))),
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
            known,
            data_dir: data_dir.to_path_buf(),
        }))
    }

    /// An identity that knows `id` (or none) and keeps nothing (tests).
    #[cfg(test)]
    pub(crate) fn of(id: Option<&str>) -> Arc<Identity> {
        let known = OnceLock::new();
        if let Some(id) = id {
            known.set(id.to_string()).expect("set once");
        }
        Arc::new(Identity {
            known,
            data_dir: PathBuf::new(),
        })
    }

    /// The cluster id, once this node knows it.
    pub fn get(&self) -> Option<&str> {
        self.known.get().map(String::as_str)
    }

    /// Whether a peer that says it belongs to cluster `theirs` (`None`:
    /// it knows no id yet) may talk to this node.
    pub fn admits(&self, theirs: Option<&str>) -> Result<(), String> {
        match (self.get(), theirs) {
            (Some(mine), Some(theirs)) if mine != theirs => Err(format!(
                "this node belongs to cluster {mine:?}, the peer to cluster {theirs:?}"
            )),
            _ => Ok(()),
        }
    }

    /// Takes the id the control group applied, keeping it in the data
    /// directory. An id that differs from the one this node started with
    /// (`--cluster-id`) is refused: the node stays out of the cluster's
    /// Raft traffic from then on (its hellos name the other id).
    fn adopt(&self, applied: &str) -> Result<(), String> {
        let mine = self.known.get_or_init(|| applied.to_string());
        if mine != applied {
            return Err(format!(
                "the cluster is named {applied:?}, but this node was started as a member \
                 of {mine:?} (--cluster-id): its peers will refuse it"
            ));
        }
        if read_kept(&self.data_dir)?.as_deref() != Some(applied) {
            keep(&self.data_dir, applied)?;
        }
        Ok(())
    }
}

/// Keeps `id` as the cluster id in `data_dir` (which must exist).
pub fn keep(data_dir: &Path, id: &str) -> Result<(), String> {
    validate(id)?;
    write_file_durably(data_dir, CLUSTER_ID_FILE, &format!("{id}\n"))
        .map_err(|e| format!("keeping the cluster id in {}: {e}", data_dir.display()))
}

/// The cluster id a data directory keeps, if any.
pub fn read_kept(data_dir: &Path) -> Result<Option<String>, String> {
    let path = data_dir.join(CLUSTER_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            validate(id).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(Some(id.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
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
    fn a_kept_id_wins_and_must_match_the_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = Identity::load(dir.path(), None).expect("loads");
        assert_eq!(fresh.get(), None);
        assert_eq!(fresh.admits(Some("a")), Ok(()));
        fresh.adopt("prod").expect("adopts");
        assert_eq!(fresh.get(), Some("prod"));
        assert_eq!(read_kept(dir.path()), Ok(Some("prod".into())));
        assert!(fresh.admits(Some("other")).is_err());
        assert_eq!(fresh.admits(Some("prod")), Ok(()));
        assert_eq!(fresh.admits(None), Ok(()));

        let reopened = Identity::load(dir.path(), Some("prod")).expect("same id");
        assert_eq!(reopened.get(), Some("prod"));
        let refused = Identity::load(dir.path(), Some("staging")).expect_err("another id");
        assert!(
            refused.to_string().contains("belongs to cluster"),
            "{refused}"
        );
        assert!(Identity::load(dir.path(), Some("bad id")).is_err());
    }

    #[test]
    fn a_flag_is_kept_and_an_applied_id_other_than_it_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("new");
        let flagged = Identity::load(&data_dir, Some("wanted")).expect("loads");
        assert_eq!(read_kept(&data_dir), Ok(Some("wanted".into())));
        assert!(flagged.adopt("applied").is_err());
        assert_eq!(flagged.get(), Some("wanted"));
        assert_eq!(read_kept(&data_dir), Ok(Some("wanted".into())));
        let reopened = Identity::load(&data_dir, None).expect("loads");
        assert_eq!(reopened.get(), Some("wanted"));
    }
}
