//! How many replicas each data group has: cluster state, kept by the
//! control group ([`runnel_core::cluster_meta`]), not each node's flags.
//! The node whose control group first has a leader proposes its
//! `--replication-factor` as the initial factor ([`record_initial`]);
//! once one stands, a node started with another flag keeps the
//! cluster's and says so. `runnel ctl node rebalance
//! --replication-factor N` changes it ([`ClusterNode::set_replication`])
//! and moves replicas to match.

use std::sync::Arc;
use std::time::Duration;

use runnel_core::{Applied, Command, StreamsState};

use super::ClusterNode;
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::error::EngineError;
use crate::raft::group::RaftGroup;
use crate::upkeep::MaintainedGroup;

/// Pause between looks at the control group until a value stands.
const POLL: Duration = Duration::from_millis(200);

/// Until the control group holds a replication factor: its leader (on
/// whichever node) proposes `flag` as the initial one. Ends once one
/// stands, saying so when it is not `flag`.
pub(crate) async fn record_initial(control: Arc<RaftGroup>, flag: usize) {
    let flag = u32::try_from(flag).unwrap_or(u32::MAX);
    let command = Command::SetReplication {
        factor: flag,
        initial: true,
    };
    let recorded = |s: &StreamsState| s.replication().is_some();
    propose_initial(&control, "replication factor", recorded, command).await;
    let factor = control.view().with_state(|s| s.replication());
    if let Some(factor) = factor.filter(|f| *f != flag) {
        tracing::info!(
            cluster = factor,
            flag,
            "this cluster keeps {factor} replicas of each data group: \
             --replication-factor applies only when a cluster forms (change it with \
             runnel ctl node rebalance --replication-factor N)"
        );
    }
}

/// Until the control group holds a value (`recorded`), its leader (on
/// whichever node) proposes `command`, which sets it only while none is
/// set: the first node to lead a forming cluster's control group names
/// the initial value, and later ones change nothing.
pub(super) async fn propose_initial(
    control: &RaftGroup,
    what: &str,
    recorded: impl Fn(&StreamsState) -> bool,
    command: Command,
) {
    while !control.view().with_state(&recorded) {
        if control.leads() {
            match control.propose(command.clone()).await {
                Ok(applied) => tracing::debug!(?applied, "initial {what}"),
                Err(e) => tracing::debug!(error = %e, "recording the initial {what}; retrying"),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

impl ClusterNode {
    /// Replicas of each data group: the cluster's factor once its control
    /// group applied one, else this node's `--replication-factor`.
    pub fn replication(&self) -> usize {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.replication())
            .map_or(self.replication, |f| f as usize)
    }

    /// Sets the cluster's replication factor (at the control group's
    /// leader); answers whether it changed. Moving replicas to match is
    /// the caller's (`runnel ctl node rebalance`).
    pub(super) async fn set_replication(&self, factor: u32) -> Result<bool, EngineError> {
        let command = Command::SetReplication {
            factor,
            initial: false,
        };
        match self.groups[CONTROL_GROUP].propose(command).await? {
            Applied::Replication { set, .. } => Ok(set),
            other => unreachable!("a replication factor applied as {other:?}"),
        }
    }
}
