//! The commands that change what a subscription links: create (with the
//! streams it starts with), delete, explicit links added and removed,
//! streams discovered by a pattern, and streams deleted or re-created
//! under a name (incarnations).

use std::collections::BTreeMap;

use super::{
    Config, Link, LinkKind, Seen, SubError, SubOutcome, Subscription, Subscriptions, Tombstone,
};

/// How long a deleted subscription's generation is remembered: longer
/// than any token of its wakes lives.
const TOMBSTONE_KEEP_MS: u64 = 24 * 3600 * 1000;

/// A new link at a stream as seen now: at its tail, or at its start when
/// it does not exist yet.
fn link_at(kind: LinkKind, seen: Option<Seen>) -> Link {
    Link {
        kind,
        incarnation: seen.map(|s| s.id),
        acked: Some(seen.map_or(0, |s| s.tail)),
    }
}

impl Subscriptions {
    pub(super) fn put(
        &mut self,
        id: String,
        config: Config,
        tails: Vec<(String, Option<Seen>)>,
        now_ms: u64,
        base_url: String,
    ) -> Result<SubOutcome, SubError> {
        if let Some(existing) = self.subs.get(&id) {
            return if existing.config == config {
                Ok(SubOutcome::Confirmed)
            } else {
                Err(SubError::ConfigMismatch)
            };
        }
        let mut links = BTreeMap::new();
        for (stream, seen) in tails {
            let kind = LinkKind {
                glob: config.watches_by_pattern(&stream),
                explicit: config.streams.binary_search(&stream).is_ok(),
            };
            if kind.glob || kind.explicit {
                links.insert(stream, link_at(kind, seen));
            }
        }
        for stream in &config.streams {
            let kind = LinkKind {
                glob: config.watches_by_pattern(stream),
                explicit: true,
            };
            links
                .entry(stream.clone())
                .or_insert_with(|| link_at(kind, None));
        }
        self.tombstones
            .retain(|_, t| t.deleted_at_ms + TOMBSTONE_KEEP_MS > now_ms);
        let generation = self.tombstones.remove(&id).map_or(0, |t| t.generation);
        self.subs.insert(
            id.clone(),
            Subscription {
                id,
                config,
                links,
                generation,
                wake: None,
                retry: None,
                created_at_ms: now_ms,
                base_url,
            },
        );
        Ok(SubOutcome::Created)
    }

    pub(super) fn delete(&mut self, id: String, now_ms: u64) -> Result<SubOutcome, SubError> {
        let sub = self
            .subs
            .remove(&id)
            .ok_or(SubError::NotFound(id.clone()))?;
        self.tombstones
            .retain(|_, t| t.deleted_at_ms + TOMBSTONE_KEEP_MS > now_ms);
        let tombstone = Tombstone {
            generation: sub.generation,
            deleted_at_ms: now_ms,
        };
        self.tombstones.insert(id, tombstone);
        Ok(SubOutcome::Changed)
    }

    pub(super) fn add_streams(
        &mut self,
        id: &str,
        tails: Vec<(String, Option<Seen>)>,
    ) -> Result<SubOutcome, SubError> {
        let sub = self.sub_mut(id)?;
        for (stream, _) in &tails {
            if sub.config.is_own_wake_stream(stream) {
                return Err(SubError::invalid(
                    "a subscription cannot watch its own wake stream",
                ));
            }
        }
        let sub = self.sub_mut(id)?;
        for (stream, seen) in tails {
            let glob = sub.config.watches_by_pattern(&stream);
            let link = sub.links.entry(stream).or_insert_with(|| {
                link_at(
                    LinkKind {
                        glob,
                        explicit: false,
                    },
                    seen,
                )
            });
            link.kind.explicit = true;
        }
        Ok(SubOutcome::Changed)
    }

    pub(super) fn remove_stream(&mut self, id: &str, stream: &str) -> Result<SubOutcome, SubError> {
        let sub = self.sub_mut(id)?;
        let glob = sub.config.watches_by_pattern(stream);
        if let Some(link) = sub.links.get_mut(stream) {
            link.kind.explicit = false;
            link.kind.glob = glob;
            if !glob {
                sub.links.remove(stream);
            }
        }
        Ok(SubOutcome::Changed)
    }

    pub(super) fn discover(&mut self, stream: &str, id: u64) -> SubOutcome {
        let mut linked = Vec::new();
        for sub in self.subs.values_mut() {
            if sub.config.watches_by_pattern(stream) && !sub.links.contains_key(stream) {
                let kind = LinkKind {
                    glob: true,
                    explicit: false,
                };
                let link = Link {
                    kind,
                    incarnation: Some(id),
                    acked: None,
                };
                sub.links.insert(stream.to_string(), link);
                linked.push(sub.id.clone());
            }
        }
        SubOutcome::Linked(linked)
    }

    pub(super) fn incarnation(&mut self, stream: &str, id: Option<u64>) -> SubOutcome {
        for sub in self.subs.values_mut() {
            let Some(link) = sub.links.get_mut(stream) else {
                continue;
            };
            match (link.incarnation, id) {
                (None, None) => {}
                (Some(was), Some(now)) if was == now => {}
                // The stream came to be: the cursor (at its start) is its.
                (None, Some(now)) => link.incarnation = Some(now),
                // Deleted: an explicit link waits for the name's next
                // stream, a glob link goes.
                (Some(_), None) if link.kind.explicit => {
                    link.kind.glob = false;
                    link.incarnation = None;
                    link.acked = None;
                }
                (Some(_), None) => {
                    sub.links.remove(stream);
                }
                // Re-created: all of the new stream is new.
                (Some(_), Some(now)) => {
                    link.incarnation = Some(now);
                    link.acked = None;
                }
            }
        }
        SubOutcome::Changed
    }
}
