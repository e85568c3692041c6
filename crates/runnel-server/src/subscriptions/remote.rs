//! Streams in groups this node holds no copy of. A cluster that places
//! each data group on some of its nodes leaves the control group's leader
//! (which delivers) without those groups' state or activity feed, so it
//! follows the streams its subscriptions name or link there by asking
//! each group's leader for their heads every [`POLL`] (one request per
//! group, `NodeEngine::live_named`), and finds the ones patterns match by
//! listing every group every [`PATTERN_EVERY`]. What it learned is kept
//! here and read by `handlers::seen` like the node's own state.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use runnel_core::listing::Listed;
use runnel_core::subscription::Seen;

use super::is_reserved;
use crate::AppState;

/// How often the delivering leader asks for the heads of the streams it
/// follows in groups it holds no copy of: the most a wake for them waits
/// beyond what the activity feed gives local streams.
pub const POLL: Duration = Duration::from_millis(200);
/// How often it lists every group for streams a pattern matches, while a
/// subscription has a pattern (a local stream is seen at once, through
/// the feed; one elsewhere within this).
pub const PATTERN_EVERY: Duration = Duration::from_secs(2);
/// Streams per page when listing every group.
const PAGE: usize = 1000;

/// The heads (incarnation and tail) of live streams in groups this node
/// holds no copy of, as their leaders last answered; a name missing here
/// is gone, or was never asked about. Each head comes with the incarnation
/// its offsets are minted with.
#[derive(Default)]
pub struct RemoteHeads {
    heads: Mutex<HashMap<String, (Seen, u64)>>,
}

impl RemoteHeads {
    /// A stream's head, with the incarnation its offsets are minted with.
    pub fn get_minted(&self, stream: &str) -> Option<(Seen, u64)> {
        self.heads
            .lock()
            .expect("remote heads")
            .get(stream)
            .copied()
    }

    /// Takes `live` as the heads of `asked` now; answers the names whose
    /// head changed (appended to, created, deleted or re-created).
    fn update(&self, asked: &[String], live: Vec<Listed>) -> Vec<String> {
        let live: HashMap<String, (Seen, u64)> = live
            .into_iter()
            .map(|l| {
                let seen = Seen {
                    id: l.id,
                    tail: l.next_offset.0,
                };
                let incarnation = runnel_core::offset::incarnation(l.id, l.created_at_ms);
                (l.name, (seen, incarnation))
            })
            .collect();
        let mut heads = self.heads.lock().expect("remote heads");
        let mut changed = Vec::new();
        for name in asked {
            let now = live.get(name).copied();
            let before = match now {
                Some(seen) => heads.insert(name.clone(), seen),
                None => heads.remove(name),
            };
            if before != now {
                changed.push(name.clone());
            }
        }
        changed
    }

    /// Forgets streams no subscription follows any more.
    fn keep_only(&self, followed: &HashSet<String>) {
        self.heads
            .lock()
            .expect("remote heads")
            .retain(|name, _| followed.contains(name));
    }
}

/// Asks the leaders of their groups for the heads of `streams` (those in
/// groups this node holds no copy of); answers the names whose head
/// changed. A stream whose group could not be read keeps what was known.
pub async fn fetch(app: &AppState, streams: &[String]) -> Vec<String> {
    let asked: Vec<String> = streams
        .iter()
        .filter(|s| !app.node.holds_group_of(s) && !is_reserved(s))
        .cloned()
        .collect();
    if asked.is_empty() {
        return Vec::new();
    }
    let found = app.node.live_named(&asked).await;
    let unread: HashSet<&String> = found.unread.iter().collect();
    let answered: Vec<String> = asked
        .iter()
        .filter(|s| !unread.contains(s))
        .cloned()
        .collect();
    app.subscriptions.remote.update(&answered, found.live)
}

/// One poll: the heads of every stream a subscription names or links in
/// a group this node holds no copy of; answers those that changed.
pub async fn poll(app: &AppState) -> Vec<String> {
    let mut followed: HashSet<String> = HashSet::new();
    app.node.with_subscriptions(&mut |subs| {
        for sub in subs.iter() {
            followed.extend(sub.links.keys().cloned());
            followed.extend(sub.config.streams.iter().cloned());
        }
    });
    followed.retain(|s| !app.node.holds_group_of(s));
    app.subscriptions.remote.keep_only(&followed);
    let followed: Vec<String> = followed.into_iter().collect();
    fetch(app, &followed).await
}

/// Live streams whose names `keep` accepts, in every group: from this
/// node's state for the groups it holds, by listing the others (whose
/// heads are then known here, for `handlers::seen`).
pub async fn streams_where(app: &AppState, keep: &(dyn Fn(&str) -> bool + Sync)) -> Vec<String> {
    let mut names: Vec<String> = app
        .node
        .streams_where(&|name| keep(name) && !is_reserved(name))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if app.node.every_node_holds_every_group() {
        return names;
    }
    let mut elsewhere = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = app.node.list_streams("", after.as_deref(), PAGE).await;
        let (page, more) = match page {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(error = %e, "streams elsewhere not listed; next time");
                break;
            }
        };
        after = page.last().map(|l| l.name.clone());
        elsewhere.extend(page.into_iter().filter(|l| {
            !app.node.holds_group_of(&l.name) && keep(&l.name) && !is_reserved(&l.name)
        }));
        if !more || after.is_none() {
            break;
        }
    }
    let asked: Vec<String> = elsewhere.iter().map(|l| l.name.clone()).collect();
    app.subscriptions.remote.update(&asked, elsewhere);
    names.extend(asked);
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_core::offset::Offset;

    fn listed(name: &str, id: u64, tail: u64) -> Listed {
        Listed {
            name: name.into(),
            id,
            content_type: "text/plain".into(),
            next_offset: Offset(tail),
            earliest: Offset(0),
            closed: false,
            ttl_secs: None,
            expires_at_ms: None,
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_head_that_moves_appears_or_goes_is_a_change() {
        let heads = RemoteHeads::default();
        let asked: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let first = heads.update(&asked, vec![listed("a", 1, 10), listed("b", 2, 0)]);
        assert_eq!(first, ["a", "b"], "new streams; c was never seen");
        let same = heads.update(&asked, vec![listed("a", 1, 10), listed("b", 2, 0)]);
        assert!(same.is_empty(), "{same:?}");
        // a appended to, b deleted, c created.
        let moved = heads.update(&asked, vec![listed("a", 1, 12), listed("c", 3, 0)]);
        assert_eq!(moved, ["a", "b", "c"]);
        let get = |name| heads.get_minted(name).map(|(seen, _)| seen);
        assert_eq!(get("a"), Some(Seen { id: 1, tail: 12 }));
        assert_eq!(get("b"), None);
        // a re-created under its name: another incarnation.
        let again = heads.update(&asked[..1], vec![listed("a", 4, 0)]);
        assert_eq!(again, ["a"]);
        assert_eq!(get("a"), Some(Seen { id: 4, tail: 0 }));
        heads.keep_only(&HashSet::from(["c".to_string()]));
        assert_eq!(get("a"), None);
        assert_eq!(get("c"), Some(Seen { id: 3, tail: 0 }));
    }
}
