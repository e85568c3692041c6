//! Rolling upgrades: the cluster version gates new formats.
//!
//! Nodes are upgraded one at a time while the cluster serves. Until the
//! upgrade is finalised the cluster stays at the version its control group
//! recorded (`runnel_core::upgrade`; 1 for a cluster formed by release
//! 0.1.0), every node writes only that version's formats, and any node
//! can go back to the previous build. Each node says in its Raft hello the
//! highest version its build supports; the control group's leader learns
//! every member's that way. Finalising ([`ClusterNode::finalize_upgrade`],
//! `runnel ctl upgrade finalize`) logs the version this build supports
//! once every member's build supports it, and is refused, naming the
//! member, while one does not; from then on the new formats may be
//! written and no member can go back. With `--upgrade-finalize auto` (the
//! default) the control group's leader finalises by itself as soon as
//! every member supports the new version, so a cluster formed by one
//! build is at its version within seconds; `manual` keeps the previous
//! build possible until an operator finalises.

use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use runnel_core::cluster_meta::CLUSTER_VERSION;
use runnel_core::{Applied, Command};

use super::membership::members;
use super::ClusterNode;
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::error::{EngineError, MembershipError};
use crate::upkeep::MaintainedGroup;

/// How often the control group's leader looks whether it may finalise.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Who finalises an upgrade (`--upgrade-finalize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FinalizeUpgrade {
    /// The control group's leader, once every member supports the version.
    #[default]
    Auto,
    /// An operator (`runnel ctl upgrade finalize`): until then a node can
    /// go back to the previous build.
    Manual,
}

impl FromStr for FinalizeUpgrade {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(FinalizeUpgrade::Auto),
            "manual" => Ok(FinalizeUpgrade::Manual),
            other => Err(format!(
                "--upgrade-finalize is auto or manual, not {other:?}"
            )),
        }
    }
}

/// Runs on every member while `node` lives: finalises at the control
/// group's leader when asked to do it by itself (or while restoring, which
/// needs the new version and has no previous build to go back to).
pub(crate) async fn finalize_when_ready(node: Weak<ClusterNode>, mode: FinalizeUpgrade) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        let asked = mode == FinalizeUpgrade::Auto || node.restoring.load(Ordering::Relaxed);
        if !asked
            || !node.groups[CONTROL_GROUP].leads()
            || node.cluster_version() >= CLUSTER_VERSION
            || node.members_behind(CLUSTER_VERSION).is_err()
        {
            continue;
        }
        match node.finalize_upgrade().await {
            Ok(true) => tracing::warn!(
                version = CLUSTER_VERSION,
                "every member supports cluster version {CLUSTER_VERSION}: upgrade finalised"
            ),
            Ok(false) => {}
            Err(err) => tracing::debug!(error = %err, "finalising the upgrade; retrying"),
        }
    }
}

impl ClusterNode {
    /// The cluster version the control group recorded.
    pub fn cluster_version(&self) -> u32 {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.cluster_version())
    }

    /// The first member of the cluster whose build does not support
    /// cluster version `wanted`, or that this node has not heard from.
    fn members_behind(&self, wanted: u32) -> Result<(), MembershipError> {
        let heard = self.identity.peer_versions();
        let (voters, learners) = members(&self.groups[CONTROL_GROUP]);
        for node in voters.into_iter().chain(learners) {
            if node == self.node_id {
                continue;
            }
            match heard.get(&node) {
                None => return Err(MembershipError::MemberUnheard { node }),
                Some(&supports) if supports < wanted => {
                    return Err(MembershipError::MemberBehind {
                        node,
                        supports,
                        wanted,
                    })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Raises the cluster version to what this build supports (at the
    /// control group's leader), once every member's build supports it;
    /// answers whether it rose.
    pub(super) async fn finalize_upgrade(&self) -> Result<bool, EngineError> {
        if self.cluster_version() >= CLUSTER_VERSION {
            return Ok(false);
        }
        self.members_behind(CLUSTER_VERSION)?;
        let command = Command::SetClusterVersion {
            version: CLUSTER_VERSION,
        };
        match self.groups[CONTROL_GROUP].propose(command).await? {
            Applied::ClusterVersion { raised, .. } => Ok(raised),
            other => unreachable!("a cluster version applied as {other:?}"),
        }
    }

    /// Why this node cannot serve the cluster's formats, if it cannot.
    pub(super) fn version_unsupported(&self) -> Option<String> {
        let version = self.cluster_version();
        (version > CLUSTER_VERSION).then(|| {
            format!(
                "the cluster is at version {version}, this build supports up to {CLUSTER_VERSION}: run a newer build"
            )
        })
    }

    /// The status document's `cluster_version` section.
    pub(super) fn version_status(&self) -> serde_json::Value {
        serde_json::json!({
            "current": self.cluster_version(),
            "this_build": CLUSTER_VERSION,
            "peers": self.identity.peer_versions(),
            "finalize": match self.finalize_mode {
                FinalizeUpgrade::Auto => "auto",
                FinalizeUpgrade::Manual => "manual",
            },
        })
    }
}
