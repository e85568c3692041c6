//! A group as the node's background upkeep sees it ([`MaintainedGroup`]),
//! and what both engines do with their groups alike: propose with expiry
//! ([`propose_with_expiry`]), list streams across groups, collect the pins
//! expiries released.

use runnel_core::listing::Listed;
use runnel_core::{Applied, Command, Entry, RemotePin, StreamId};

use crate::api::{group_index, BoxFuture, GroupEngine};
use crate::clock::now_ms;
use crate::error::EngineError;
use crate::metrics::MemoryUse;
use crate::{tier, view};

/// A group as the node's background upkeep sees it.
pub(crate) trait MaintainedGroup: GroupEngine {
    fn index(&self) -> u32;
    fn view(&self) -> &view::GroupView;
    /// Whether this node proposes the group's upkeep (expiry, retention,
    /// compaction): in a cluster only the group's leader does.
    fn leads(&self) -> bool {
        true
    }
    /// Proposes an entry as it is (its clock reading included).
    fn submit_entry(&self, entry: Entry) -> BoxFuture<'_, Result<Applied, EngineError>>;
    /// The term this node leads the group in (0 for the local engine):
    /// what tiering commands are fenced to.
    fn term(&self) -> u64 {
        0
    }
}

/// What `groups` keep in memory, by owner.
pub(crate) fn memory_of<G: MaintainedGroup>(groups: &[std::sync::Arc<G>]) -> MemoryUse {
    let mut memory = MemoryUse::default();
    for group in groups {
        let state = group.view().with_state(|s| s.memory());
        memory.streams += state.streams;
        memory.index += state.index;
        memory.read_pages += group.view().pages.bytes();
    }
    memory
}

/// A page of the streams of all `groups` (see
/// [`NodeEngine::list_streams`]): each group's first `limit`, merged.
pub(crate) fn list_groups<G: MaintainedGroup>(
    groups: &[std::sync::Arc<G>],
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> (Vec<Listed>, bool) {
    let now = now_ms();
    // One more than asked: whether another page follows.
    let page: Vec<Listed> = groups
        .iter()
        .flat_map(|g| {
            g.view()
                .with_state(|s| s.list(prefix, after, limit + 1, now))
        })
        .collect();
    merge_listing(page, limit)
}

/// The first `limit` of the groups' pages (each of up to `limit + 1`
/// streams) in name order, and whether more follow.
pub(crate) fn merge_listing(mut page: Vec<Listed>, limit: usize) -> (Vec<Listed>, bool) {
    page.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let more = page.len() > limit;
    page.truncate(limit);
    (page, more)
}

/// Whether two names fall in the same of `groups` groups.
pub(crate) fn same_group(a: &str, b: &str, groups: usize) -> bool {
    group_index(a, groups) == group_index(b, groups)
}

/// Takes the pins that expiries released in any of `groups`.
pub(crate) fn take_released_pins<G: MaintainedGroup>(
    groups: &[std::sync::Arc<G>],
) -> Vec<RemotePin> {
    groups
        .iter()
        .flat_map(|g| g.view().take_released())
        .collect()
}

/// Proposes `command`, preceded by the expiry of any stream it names whose
/// TTL passed. A write that stores bytes is refused while the node's
/// tiering backlog is full; positions the command names inside tiered
/// history are checked first (see [`tier::prepare`]). Expiry is decided here, by the proposer, and logged;
/// applying never consults the sliding TTL (reads renew it unlogged).
pub(crate) async fn propose_with_expiry<G: MaintainedGroup + ?Sized>(
    group: &G,
    command: Command,
) -> Result<Applied, EngineError> {
    let stores = command.body().map_or(0, |b| b.data.len() as u64);
    if let Some(tier) = &group.view().tier {
        if let Some(full) = tier.tiering.over_backlog().filter(|_| stores > 0) {
            return Err(full);
        }
    }
    let command = tier::prepare::prepare(group.view(), command).await?;
    let now = now_ms();
    let expired: Vec<StreamId> = group.view().with_state(|state| {
        command
            .names()
            .filter_map(|name| state.expired_id(name, now))
            .collect()
    });
    if !expired.is_empty() {
        let applied = group
            .submit_entry(Entry {
                now_ms: now,
                command: Command::Expire { ids: expired },
            })
            .await?;
        group.view().keep_released(&applied);
    }
    let applied = group
        .submit_entry(Entry {
            now_ms: now,
            command,
        })
        .await?;
    if let Some(tier) = &group.view().tier {
        // Counted at once: the tierer recounts only between its passes,
        // which back off for up to 30 s while the store is down, and the
        // cap must hold meanwhile.
        tier.tiering.note_stored(stores);
    }
    Ok(applied)
}
