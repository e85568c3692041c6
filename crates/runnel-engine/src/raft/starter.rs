//! Starting a group's Raft: once per group when the node opens, and again
//! when the node takes back a group whose copy it dropped while running
//! (see [`crate::cluster::hosting`]). A [`RaftSlot`] holds the group's
//! current Raft, so whatever asks for it after the restart (the proposer,
//! the read barrier, the peers' RPCs) reaches the new one.

use std::sync::{Arc, RwLock};

use runnel_log::Log;

use super::journal::{Durability, JournalStore};
use super::state_machine::{AppliedPoint, GroupShared, GroupStateMachine};
use super::transfer::mute::MutingFactory;
use super::transport::Transport;
use super::{NodeId, Raft};

/// A group's Raft, replaced when a dropped copy is started afresh.
#[derive(Clone)]
pub struct RaftSlot(Arc<RwLock<Raft>>);

impl RaftSlot {
    pub fn new(raft: Raft) -> RaftSlot {
        RaftSlot(Arc::new(RwLock::new(raft)))
    }

    /// The group's Raft now (a cheap handle).
    pub fn get(&self) -> Raft {
        self.0.read().expect("raft slot lock").clone()
    }

    /// Puts `raft` in place of the group's stopped one.
    pub(crate) fn replace(&self, raft: Raft) {
        *self.0.write().expect("raft slot lock") = raft;
    }
}

/// A group's Raft that did not start.
#[derive(Debug, thiserror::Error)]
#[error("starting group {group}: {source}")]
pub struct StartError {
    pub group: u32,
    pub source: openraft::error::Fatal<NodeId>,
}

/// What every group's Raft is started with.
pub(crate) struct RaftStarter<T> {
    pub node_id: NodeId,
    pub config: openraft::Config,
    pub log: Arc<Log>,
    pub durability: Arc<Durability>,
    pub transport: Arc<T>,
}

impl<T: Transport> RaftStarter<T> {
    /// Starts the Raft of the group `shared` belongs to, from whatever its
    /// index and applied point hold.
    pub async fn start(&self, shared: &GroupShared) -> Result<Raft, StartError> {
        let g = shared.group;
        let store = JournalStore::new(
            g,
            Arc::clone(&self.log),
            Arc::clone(&self.durability),
            Arc::clone(&shared.index),
        );
        // openraft names the group in its log lines.
        let config = openraft::Config {
            cluster_name: format!("group-{g}"),
            ..self.config.clone()
        };
        Raft::new(
            self.node_id,
            Arc::new(config),
            MutingFactory {
                inner: self.transport.network(g),
                muted: Arc::clone(&shared.muted),
            },
            store,
            GroupStateMachine::new(shared.clone()),
        )
        .await
        .map_err(|source| StartError { group: g, source })
    }

    /// Starts a group whose copy this node dropped (its index, applied
    /// point, snapshot and state already emptied) afresh: an empty,
    /// uninitialized Raft the group's leader catches up like a new node.
    pub async fn restart_empty(&self, shared: &GroupShared) -> Result<Raft, StartError> {
        *shared.applied.lock().expect("applied lock") = AppliedPoint::default();
        self.start(shared).await
    }
}
