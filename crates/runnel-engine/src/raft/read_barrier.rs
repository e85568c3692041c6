//! Linearizable reads at a group's leader, coalesced.
//!
//! A node that believes it leads may have been deposed without knowing it
//! yet; serving a read from its state could then miss writes a newer
//! leader acknowledged. Before a read, the leader therefore confirms its
//! leadership with a quorum and applies up to its commit index (openraft's
//! `ensure_linearizable`). That costs a heartbeat round, so the reads that
//! arrive while a round is under way share the next one: a round started
//! after a read arrived covers it, so each read waits for at most two.

use std::sync::{Arc, Mutex};

use openraft::error::{CheckIsLeaderError, RaftError};
use tokio::sync::oneshot;

use super::starter::RaftSlot;
use super::NodeId;
use crate::error::{EngineError, ReplicationError};

type Waiter = oneshot::Sender<Result<(), EngineError>>;

pub struct ReadBarrier {
    raft: RaftSlot,
    state: Mutex<Rounds>,
}

#[derive(Default)]
struct Rounds {
    running: bool,
    /// Reads waiting for a round that starts after they arrived.
    next: Vec<Waiter>,
}

impl ReadBarrier {
    pub fn new(raft: RaftSlot) -> Arc<ReadBarrier> {
        Arc::new(ReadBarrier {
            raft,
            state: Mutex::default(),
        })
    }

    /// Resolves once this node's state holds every write acknowledged
    /// before the call, or fails if this node does not lead the group.
    pub async fn wait(self: &Arc<Self>) -> Result<(), EngineError> {
        if crate::hooks::stale_reads() {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.state.lock().expect("read barrier lock");
            state.next.push(tx);
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            tokio::spawn(Arc::clone(self).run_rounds());
        }
        rx.await.unwrap_or(Err(EngineError::ShuttingDown))
    }

    async fn run_rounds(self: Arc<Self>) {
        loop {
            let round = {
                let mut state = self.state.lock().expect("read barrier lock");
                if state.next.is_empty() {
                    state.running = false;
                    return;
                }
                std::mem::take(&mut state.next)
            };
            let result = self
                .raft
                .get()
                .ensure_linearizable()
                .await
                .map(drop)
                .map_err(not_leading);
            for waiter in round {
                let _ = waiter.send(result.clone());
            }
        }
    }
}

fn not_leading(
    e: RaftError<NodeId, CheckIsLeaderError<NodeId, openraft::BasicNode>>,
) -> EngineError {
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
            EngineError::NotLeader(f.leader_id)
        }
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
            EngineError::Replication(ReplicationError::NoQuorum(q))
        }
        RaftError::Fatal(f) => EngineError::Replication(ReplicationError::Fatal(Box::new(f))),
    }
}
