//! The control group: group 0 of every node also holds the subscriptions
//! (`runnel_core::subscription`), so they are logged, checkpointed and
//! replicated exactly like streams. [`Control`] is what both engines offer
//! the HTTP layer for them; delivery itself (who is woken, and how) is the
//! HTTP layer's, run by the control group's leader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use runnel_core::subscription::{SubCommand, SubOutcome, Subscriptions};
use runnel_core::{Applied, Command};

use crate::activity::Activity;
use crate::clock::now_ms;
use crate::error::EngineError;
use crate::upkeep::MaintainedGroup;

/// The group that holds the subscriptions.
pub(crate) const CONTROL_GROUP: usize = 0;

/// A node's groups as the subscriptions see them: the control group to
/// propose to, every group's streams to read, and the activity feed.
pub struct Control {
    groups: Vec<Arc<dyn MaintainedGroup>>,
    activity: Arc<Activity>,
    /// Set while a cluster member restores from its bucket: no
    /// subscription is written before the control group is restored.
    restoring: Arc<AtomicBool>,
}

impl Control {
    pub(crate) fn new<G: MaintainedGroup>(groups: &[Arc<G>], activity: Arc<Activity>) -> Control {
        Control {
            groups: groups
                .iter()
                .map(|g| Arc::clone(g) as Arc<dyn MaintainedGroup>)
                .collect(),
            activity,
            restoring: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Refuses subscription writes while `restoring` is set and the
    /// control group is not restored yet.
    pub(crate) fn held_while(mut self, restoring: Arc<AtomicBool>) -> Control {
        self.restoring = restoring;
        self
    }

    /// Proposes a subscription command to the control group.
    pub async fn propose(&self, command: SubCommand) -> Result<SubOutcome, EngineError> {
        let group = &self.groups[CONTROL_GROUP];
        if self.restoring.load(Ordering::Relaxed)
            && group.view().with_state(|s| s.restored_from().is_none())
        {
            return Err(EngineError::Restoring {
                group: CONTROL_GROUP as u32,
            });
        }
        match group
            .propose(Command::Subscription(Box::new(command)))
            .await?
        {
            Applied::Subscription(outcome) => Ok(outcome),
            other => unreachable!("a subscription command applied as {other:?}"),
        }
    }

    /// Runs `f` over the applied subscriptions.
    pub fn with_subscriptions(&self, f: &mut dyn FnMut(&Subscriptions)) {
        self.groups[CONTROL_GROUP]
            .view()
            .with_state(|state| f(state.subscriptions()));
    }

    /// Live streams of every group whose names `keep` accepts, with tails.
    pub fn streams_where(&self, keep: &dyn Fn(&str) -> bool) -> Vec<(String, u64)> {
        let now = now_ms();
        self.groups
            .iter()
            .flat_map(|g| {
                g.view().with_state(|state| {
                    state
                        .live_tails(now)
                        .filter(|(name, _)| keep(name))
                        .map(|(name, tail)| (name.to_string(), tail))
                        .collect::<Vec<_>>()
                })
            })
            .collect()
    }

    /// The live streams among `names`, from this node's applied state.
    pub fn live_named(&self, names: &[String]) -> Vec<runnel_core::listing::Listed> {
        let now = now_ms();
        names
            .iter()
            .filter_map(|name| {
                self.groups
                    .iter()
                    .find_map(|g| g.view().with_state(|s| s.listed(name, now)))
            })
            .collect()
    }

    /// The feed of streams that changed on this node.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}
