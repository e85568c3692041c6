//! Each node's zone (failure domain), recorded in the control group
//! ([`runnel_core::zones`]) so that every member and `runnel ctl node`
//! place replicas by the same zones, a dead node's included.
//!
//! Founders learn each other's zones from `--peers` (`ID=HOST:PORT@ZONE`)
//! and place the new cluster by them; whichever node leads the control
//! group records the zones it knows ([`record_known`]). A node added
//! later has its zone recorded by `runnel ctl node add` or `serve --join`
//! (`?zone=N:ZONE` to group 0, [`ClusterNode::set_zone`]).
//!
//! A node keeps its zone in `DATA_DIR/zone` from its first start and
//! refuses to start with another ([`keep_own`]): a node's zone does not
//! change, since replicas were placed by it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use runnel_core::zones::{validate, ZoneNameError};
use runnel_core::{Applied, Command, CoreError};

use super::ClusterNode;
use crate::api::GroupEngine;
use crate::control::CONTROL_GROUP;
use crate::datadir::{write_file_durably, OpenError};
use crate::error::EngineError;
use crate::placement::Zones;
use crate::raft::group::RaftGroup;
use crate::raft::NodeId;
use crate::upkeep::MaintainedGroup;

/// Where a node keeps its zone, in its data directory.
pub const ZONE_FILE: &str = "zone";

/// Why a node's zone is refused at start.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("--zone: {0}")]
    BadFlag(runnel_core::zones::ZoneNameError),
    #[error(
        "{path} says this node is in zone {kept:?}, not {wanted:?}: a node's zone does not \
         change (replicas were placed by it; give a moved machine a new node id and data \
         directory)"
    )]
    Changed {
        path: PathBuf,
        kept: String,
        wanted: String,
    },
    #[error("{path} holds no valid zone: {source}")]
    InvalidKept {
        path: PathBuf,
        source: runnel_core::zones::ZoneNameError,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Checks this node's zone (`--zone`, or its `--peers` entry) against the
/// one its data directory keeps, and keeps it on a first start: another
/// zone than the kept one is refused, as is dropping it. `None` with no
/// kept zone: the node has none.
pub fn keep_own(data_dir: &Path, wanted: Option<&str>) -> Result<(), OpenError> {
    let config = |e: ZoneError| OpenError::Config(Box::new(e));
    let path = data_dir.join(ZONE_FILE);
    let kept = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let zone = text.trim().to_string();
            runnel_core::zones::validate(&zone).map_err(|source| {
                config(ZoneError::InvalidKept {
                    path: path.clone(),
                    source,
                })
            })?;
            Some(zone)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(config(ZoneError::Read { path, source })),
    };
    if let Some(wanted) = wanted {
        runnel_core::zones::validate(wanted).map_err(|e| config(ZoneError::BadFlag(e)))?;
    }
    match (kept, wanted) {
        (Some(kept), wanted) if wanted != Some(kept.as_str()) => Err(config(ZoneError::Changed {
            path,
            kept,
            wanted: wanted.unwrap_or_default().to_string(),
        })),
        (None, Some(wanted)) => {
            runnel_log::create_dir_durable(data_dir).map_err(|source| OpenError::Io {
                path: data_dir.to_path_buf(),
                source,
            })?;
            write_file_durably(data_dir, ZONE_FILE, &format!("{wanted}\n")).map_err(|source| {
                OpenError::Io {
                    path: path.clone(),
                    source,
                }
            })
        }
        _ => Ok(()),
    }
}

/// Pause between looks at the control group until the zones stand.
const POLL: Duration = Duration::from_millis(200);

/// Until the control group has every zone in `known`: while this node
/// leads it, proposes those it lacks. A zone the cluster records
/// otherwise is logged as an error and left as recorded (a node's zone
/// does not change).
pub(crate) async fn record_known(control: Arc<RaftGroup>, known: Zones) {
    loop {
        let missing: Vec<(u64, String)> = control.view().with_state(|s| {
            known
                .iter()
                .filter(|(node, zone)| s.zone_of(**node) != Some(zone.as_str()))
                .map(|(node, zone)| (*node, zone.clone()))
                .collect()
        });
        if missing.is_empty() {
            return;
        }
        if control.leads() {
            match control.propose(Command::SetZones { zones: missing }).await {
                Ok(applied) => tracing::debug!(?applied, "zones recorded"),
                Err(EngineError::Core(err @ CoreError::ZoneChanged { .. })) => {
                    tracing::error!(
                        error = %err,
                        "the cluster records another zone for a node than --peers or --zone \
                         say: placement follows the recorded one"
                    );
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "recording zones; retrying"),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

impl ClusterNode {
    /// Every member's recorded zone, by node id.
    pub fn zones(&self) -> Zones {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|s| s.zones().clone())
    }

    /// Records `node`'s zone (at the control group's leader); answers
    /// whether it was new. Another zone than the recorded one is refused.
    pub(super) async fn set_zone(&self, node: NodeId, zone: String) -> Result<bool, EngineError> {
        let command = Command::SetZones {
            zones: vec![(node, zone)],
        };
        match self.groups[CONTROL_GROUP].propose(command).await? {
            Applied::Zones { changed } => Ok(changed),
            other => unreachable!("zones applied as {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_is_kept_from_the_first_start_and_another_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("node");
        keep_own(&data, None).expect("no zone, nothing kept");
        assert!(!data.join(ZONE_FILE).exists());
        keep_own(&data, Some("eu-1a")).expect("first start keeps it");
        keep_own(&data, Some("eu-1a")).expect("the same zone again");
        for other in [Some("eu-1b"), None] {
            let err = keep_own(&data, other).expect_err("another zone is refused");
            assert!(err.to_string().contains("does not change"), "{err}");
        }
        let fresh = dir.path().join("fresh");
        let err = keep_own(&fresh, Some("a b")).expect_err("a bad name is refused");
        assert!(err.to_string().contains("--zone"), "{err}");
    }
}
