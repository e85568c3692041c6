//! Subscriptions (the protocol's reserved `__ds` APIs) as a pure state
//! machine: configuration, a cursor per linked stream, the wake in
//! flight with its generation and lease, a failing webhook's retry
//! schedule, tombstones, and the signing keys. Commands carry whatever
//! the proposer observed (tails, the time, ids it drew), so every replica
//! applying the same commands reaches the same state. Who proposes what,
//! and where the state is replicated, is in `docs/subscriptions.md`.
//!
//! Offsets here are stream positions (`Offset.0`); a cursor of `None`
//! means nothing is acknowledged yet (the protocol's `-1`).

pub mod config;
pub mod glob;
mod links;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use config::{Config, Delivery, UrlPolicy};
pub use glob::Glob;

/// Why a subscription command is refused; [`SubError::code`] is the
/// protocol's error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubError {
    #[error("{0}")]
    Invalid(String),
    #[error("webhook URL rejected: {0}")]
    UrlRejected(String),
    #[error("no subscription {0:?}")]
    NotFound(String),
    #[error("the subscription exists with another configuration")]
    ConfigMismatch,
    #[error("stale token, generation or wake id")]
    Fenced,
    #[error("claimed by {holder} (generation {generation})")]
    AlreadyClaimed { holder: String, generation: u64 },
    #[error("no linked stream has work pending")]
    NoPendingWork,
    #[error("{0}")]
    InvalidOffset(String),
    #[error("{0}")]
    TokenInvalid(String),
    #[error("the token expired")]
    TokenExpired,
}

impl SubError {
    pub fn invalid(reason: impl Into<String>) -> SubError {
        SubError::Invalid(reason.into())
    }

    pub fn code(&self) -> &'static str {
        match self {
            SubError::Invalid(_) => "INVALID_REQUEST",
            SubError::UrlRejected(_) => "WEBHOOK_URL_REJECTED",
            SubError::NotFound(_) => "SUBSCRIPTION_NOT_FOUND",
            SubError::ConfigMismatch => "CONFIG_MISMATCH",
            SubError::Fenced => "FENCED",
            SubError::AlreadyClaimed { .. } => "ALREADY_CLAIMED",
            SubError::NoPendingWork => "NO_PENDING_WORK",
            SubError::InvalidOffset(_) => "INVALID_OFFSET",
            SubError::TokenInvalid(_) => "TOKEN_INVALID",
            SubError::TokenExpired => "TOKEN_EXPIRED",
        }
    }
}

/// How a stream came to be linked (both at once serializes as explicit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkKind {
    pub glob: bool,
    pub explicit: bool,
}

/// A stream as the proposer saw it: which incarnation of the name (the
/// stream's id, never reused for another stream of that name) and its
/// tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub id: u64,
    pub tail: u64,
}

/// One linked stream's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub kind: LinkKind,
    /// The incarnation the cursor belongs to; `None`: the stream did not
    /// exist when linked (or has been deleted since).
    #[serde(default)]
    pub incarnation: Option<u64>,
    /// The last offset processed; `None`: nothing yet.
    pub acked: Option<u64>,
}

impl Link {
    /// Whether a stream at `tail` has work past this cursor.
    pub fn pending_at(&self, tail: u64) -> bool {
        self.acked.map_or(tail > 0, |acked| tail > acked)
    }
}

/// A wake in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub wake_id: String,
    pub generation: u64,
    /// Tails of the linked streams when the wake was issued.
    pub snapshot: BTreeMap<String, u64>,
    /// Pull-wake: the worker holding the claim.
    pub holder: Option<String>,
    /// When the lease runs out (ms since the epoch); `None` for a
    /// pull-wake not claimed yet.
    pub lease_until_ms: Option<u64>,
}

/// A failing webhook's next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    pub attempt: u32,
    pub next_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub id: String,
    pub config: Config,
    pub links: BTreeMap<String, Link>,
    /// The last wake's generation (0: none yet). Only increases, across
    /// a delete and a re-create too.
    pub generation: u64,
    pub wake: Option<Wake>,
    pub retry: Option<Retry>,
    pub created_at_ms: u64,
    /// The server's URL as the creating request named it: webhook bodies
    /// carry callback URLs under it (unless a public URL is configured).
    #[serde(default)]
    pub base_url: String,
}

impl Subscription {
    /// `failed` while a webhook retry is scheduled.
    pub fn status(&self) -> &'static str {
        if self.retry.is_some() {
            "failed"
        } else {
            "active"
        }
    }

    /// The linked streams with work past their cursor, at the tails
    /// `tail_of` knows (streams it does not know are skipped).
    pub fn pending(&self, tail_of: impl Fn(&str) -> Option<u64>) -> BTreeMap<String, u64> {
        self.links
            .iter()
            .filter_map(|(stream, link)| {
                let tail = tail_of(stream)?;
                link.pending_at(tail).then(|| (stream.clone(), tail))
            })
            .collect()
    }

    /// Puts a wake in flight under the next generation; answers it.
    fn issue_wake(
        &mut self,
        wake_id: String,
        snapshot: BTreeMap<String, u64>,
        lease_until_ms: Option<u64>,
    ) -> u64 {
        self.generation += 1;
        self.wake = Some(Wake {
            wake_id,
            generation: self.generation,
            snapshot,
            holder: None,
            lease_until_ms,
        });
        self.generation
    }

    fn fenced(&self, generation: u64, wake_id: &str) -> Result<&Wake, SubError> {
        match &self.wake {
            Some(wake) if wake.generation == generation && wake.wake_id == wake_id => Ok(wake),
            _ => Err(SubError::Fenced),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Tombstone {
    generation: u64,
    deleted_at_ms: u64,
}

/// The signing material, generated once by the first proposer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keys {
    /// The current Ed25519 key pair (PKCS#8).
    pub signing_pkcs8: Vec<u8>,
    /// Public keys of earlier pairs, published until the time given.
    pub retired: Vec<(Vec<u8>, u64)>,
    /// Signs callback and claim tokens (HMAC).
    pub token_key: Vec<u8>,
}

/// A change to the subscriptions. Ids, times and tails are the
/// proposer's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubCommand {
    /// Create, or re-confirm. `tails`: the explicit streams and the
    /// existing streams the pattern matches, each at its tail now
    /// (`None`: the stream does not exist).
    Put {
        id: String,
        config: Config,
        tails: Vec<(String, Option<Seen>)>,
        now_ms: u64,
        base_url: String,
    },
    Delete {
        id: String,
        now_ms: u64,
    },
    /// Explicit links, each at its stream's tail now.
    AddStreams {
        id: String,
        tails: Vec<(String, Option<Seen>)>,
    },
    /// Drops the explicit link (a glob link stays while the pattern
    /// matches).
    RemoveStream {
        id: String,
        stream: String,
    },
    /// A stream seen with data: every subscription whose pattern matches
    /// and that does not link it yet links it before its first byte, so
    /// what revealed it is pending.
    Discover {
        stream: String,
        id: u64,
    },
    /// Stream `stream` is now incarnation `id` (`None`: it does not
    /// exist): links to another incarnation start over. A glob link to a
    /// deleted stream goes; an explicit one waits for the name's next
    /// stream, from its first byte.
    Incarnation {
        stream: String,
        id: Option<u64>,
    },
    Wake {
        id: String,
        wake_id: String,
        snapshot: BTreeMap<String, u64>,
        lease_until_ms: Option<u64>,
    },
    /// A callback (webhook) or an ack (pull-wake). Offsets past the
    /// streams' tails are refused by the proposer, which knows them.
    Ack {
        id: String,
        generation: u64,
        wake_id: String,
        acks: Vec<(String, u64)>,
        done: bool,
        lease_until_ms: u64,
    },
    /// `new_wake`: the wake to issue if none is in flight.
    Claim {
        id: String,
        worker: String,
        new_wake: Option<(String, BTreeMap<String, u64>)>,
        now_ms: u64,
        lease_until_ms: u64,
    },
    Release {
        id: String,
        generation: u64,
        wake_id: String,
    },
    ExpireLease {
        id: String,
        generation: u64,
        now_ms: u64,
    },
    /// A new control leader takes over an unclaimed wake in flight: the
    /// same work under the next generation, so anything answering the
    /// old one is fenced.
    Reissue {
        id: String,
        generation: u64,
        wake_id: String,
        lease_until_ms: Option<u64>,
    },
    ScheduleRetry {
        id: String,
        generation: u64,
        retry: Retry,
    },
    Delivered {
        id: String,
        generation: u64,
    },
    SetKeys {
        keys: Keys,
    },
    /// A new signing key pair; the current one's public key
    /// (`current_public`, which the proposer derived) stays published
    /// until `keep_until_ms`. Retired keys past their time are dropped.
    RotateKeys {
        signing_pkcs8: Vec<u8>,
        current_public: Vec<u8>,
        keep_until_ms: u64,
        now_ms: u64,
    },
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubOutcome {
    Created,
    Confirmed,
    Changed,
    Unchanged,
    Woke {
        generation: u64,
    },
    Claimed {
        generation: u64,
        wake_id: String,
    },
    /// `Discover`: the subscriptions that linked the stream.
    Linked(Vec<String>),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscriptions {
    subs: BTreeMap<String, Subscription>,
    /// Deleted ids: the last generation and when (kept a day, while
    /// tokens of theirs may be about).
    tombstones: BTreeMap<String, Tombstone>,
    keys: Option<Keys>,
    /// Which subscriptions link each stream (derived from `subs`).
    #[serde(skip)]
    linked_by: BTreeMap<String, BTreeSet<String>>,
}

impl Subscriptions {
    pub fn get(&self, id: &str) -> Option<&Subscription> {
        self.subs.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Subscription> {
        self.subs.values()
    }

    /// No subscriptions (there may be tombstones and keys).
    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    /// Whether anything at all was ever committed here.
    pub fn has_state(&self) -> bool {
        !(self.subs.is_empty() && self.tombstones.is_empty() && self.keys.is_none())
    }

    pub fn len(&self) -> usize {
        self.subs.len()
    }

    pub fn keys(&self) -> Option<&Keys> {
        self.keys.as_ref()
    }

    /// Applies `command`, keeping the index of linked streams in step.
    pub fn apply(&mut self, command: SubCommand) -> Result<SubOutcome, SubError> {
        let touched = match &command {
            SubCommand::Put { id, .. }
            | SubCommand::Delete { id, .. }
            | SubCommand::AddStreams { id, .. }
            | SubCommand::RemoveStream { id, .. } => Some((Some(id.clone()), None)),
            SubCommand::Discover { stream, .. } | SubCommand::Incarnation { stream, .. } => {
                Some((None, Some(stream.clone())))
            }
            _ => None,
        };
        if let Some((Some(id), _)) = &touched {
            self.unindex(id);
        }
        let outcome = self.apply_unindexed(command);
        match touched {
            Some((Some(id), _)) => self.index(&id),
            Some((None, Some(stream))) => {
                let linking: BTreeSet<String> = self
                    .subs
                    .values()
                    .filter(|s| s.links.contains_key(&stream))
                    .map(|s| s.id.clone())
                    .collect();
                if linking.is_empty() {
                    self.linked_by.remove(&stream);
                } else {
                    self.linked_by.insert(stream, linking);
                }
            }
            _ => {}
        }
        outcome
    }

    /// The subscriptions linking `stream`.
    pub fn linking(&self, stream: &str) -> impl Iterator<Item = &Subscription> {
        self.linked_by
            .get(stream)
            .into_iter()
            .flatten()
            .filter_map(|id| self.subs.get(id))
    }

    /// Rebuilds the index of linked streams (after decoding).
    pub fn rebuild_index(&mut self) {
        self.linked_by.clear();
        let ids: Vec<String> = self.subs.keys().cloned().collect();
        for id in ids {
            self.index(&id);
        }
    }

    fn index(&mut self, id: &str) {
        if let Some(sub) = self.subs.get(id) {
            for stream in sub.links.keys() {
                self.linked_by
                    .entry(stream.clone())
                    .or_default()
                    .insert(id.to_string());
            }
        }
    }

    fn unindex(&mut self, id: &str) {
        if let Some(sub) = self.subs.get(id) {
            for stream in sub.links.keys() {
                if let Some(ids) = self.linked_by.get_mut(stream) {
                    ids.remove(id);
                    if ids.is_empty() {
                        self.linked_by.remove(stream);
                    }
                }
            }
        }
    }

    fn apply_unindexed(&mut self, command: SubCommand) -> Result<SubOutcome, SubError> {
        match command {
            SubCommand::Put {
                id,
                config,
                tails,
                now_ms,
                base_url,
            } => self.put(id, config, tails, now_ms, base_url),
            SubCommand::Delete { id, now_ms } => self.delete(id, now_ms),
            SubCommand::AddStreams { id, tails } => self.add_streams(&id, tails),
            SubCommand::RemoveStream { id, stream } => self.remove_stream(&id, &stream),
            SubCommand::Discover { stream, id } => Ok(self.discover(&stream, id)),
            SubCommand::Incarnation { stream, id } => Ok(self.incarnation(&stream, id)),
            SubCommand::Wake {
                id,
                wake_id,
                snapshot,
                lease_until_ms,
            } => {
                let sub = self.sub_mut(&id)?;
                if sub.wake.is_some() {
                    return Ok(SubOutcome::Unchanged);
                }
                let pending = snapshot.iter().any(|(stream, tail)| {
                    sub.links.get(stream).is_some_and(|l| l.pending_at(*tail))
                });
                if !pending {
                    return Err(SubError::NoPendingWork);
                }
                let generation = sub.issue_wake(wake_id, snapshot, lease_until_ms);
                Ok(SubOutcome::Woke { generation })
            }
            SubCommand::Ack {
                id,
                generation,
                wake_id,
                acks,
                done,
                lease_until_ms,
            } => {
                let sub = self.sub_mut(&id)?;
                sub.fenced(generation, &wake_id)?;
                for (stream, offset) in &acks {
                    let link = sub.links.get(stream).ok_or_else(|| {
                        SubError::InvalidOffset(format!("{stream:?} is not linked"))
                    })?;
                    if link.acked.is_some_and(|acked| *offset < acked) {
                        return Err(SubError::InvalidOffset(format!(
                            "{stream:?}: {offset} is behind the acknowledged offset"
                        )));
                    }
                }
                for (stream, offset) in acks {
                    if let Some(link) = sub.links.get_mut(&stream) {
                        link.acked = Some(offset);
                    }
                }
                if done {
                    sub.wake = None;
                    sub.retry = None;
                } else if let Some(wake) = &mut sub.wake {
                    wake.lease_until_ms = Some(lease_until_ms);
                }
                Ok(SubOutcome::Changed)
            }
            SubCommand::Claim {
                id,
                worker,
                new_wake,
                now_ms,
                lease_until_ms,
            } => {
                let sub = self.sub_mut(&id)?;
                if !matches!(sub.config.delivery, Delivery::PullWake { .. }) {
                    return Err(SubError::invalid(
                        "only pull-wake subscriptions are claimed",
                    ));
                }
                let mut lapsed = false;
                if let Some(wake) = &sub.wake {
                    let live = wake.lease_until_ms.is_some_and(|until| until > now_ms);
                    match &wake.holder {
                        Some(holder) if live => {
                            return Err(SubError::AlreadyClaimed {
                                holder: holder.clone(),
                                generation: wake.generation,
                            })
                        }
                        // A lapsed claim: its wake is over.
                        Some(_) => lapsed = true,
                        None => {}
                    }
                }
                if (sub.wake.is_none() || lapsed) && new_wake.is_none() {
                    return Err(SubError::NoPendingWork);
                }
                if lapsed {
                    sub.wake = None;
                }
                if sub.wake.is_none() {
                    let (wake_id, snapshot) = new_wake.ok_or(SubError::NoPendingWork)?;
                    sub.issue_wake(wake_id, snapshot, None);
                }
                let wake = sub.wake.as_mut().expect("a wake is in flight");
                wake.holder = Some(worker);
                wake.lease_until_ms = Some(lease_until_ms);
                Ok(SubOutcome::Claimed {
                    generation: wake.generation,
                    wake_id: wake.wake_id.clone(),
                })
            }
            SubCommand::Release {
                id,
                generation,
                wake_id,
            } => {
                let sub = self.sub_mut(&id)?;
                sub.fenced(generation, &wake_id)?;
                sub.wake = None;
                Ok(SubOutcome::Changed)
            }
            SubCommand::ExpireLease {
                id,
                generation,
                now_ms,
            } => {
                let sub = self.sub_mut(&id)?;
                let lapsed = sub.wake.as_ref().is_some_and(|w| {
                    w.generation == generation && w.lease_until_ms.is_some_and(|t| t <= now_ms)
                });
                if !lapsed {
                    return Ok(SubOutcome::Unchanged);
                }
                sub.wake = None;
                Ok(SubOutcome::Changed)
            }
            SubCommand::Reissue {
                id,
                generation,
                wake_id,
                lease_until_ms,
            } => {
                let sub = self.sub_mut(&id)?;
                let snapshot = match &sub.wake {
                    Some(w) if w.generation == generation && w.holder.is_none() => {
                        w.snapshot.clone()
                    }
                    _ => return Ok(SubOutcome::Unchanged),
                };
                let generation = sub.issue_wake(wake_id, snapshot, lease_until_ms);
                Ok(SubOutcome::Woke { generation })
            }
            SubCommand::ScheduleRetry {
                id,
                generation,
                retry,
            } => {
                let sub = self.sub_mut(&id)?;
                if sub.wake.as_ref().is_none_or(|w| w.generation != generation) {
                    return Ok(SubOutcome::Unchanged);
                }
                sub.retry = Some(retry);
                Ok(SubOutcome::Changed)
            }
            SubCommand::Delivered { id, generation } => {
                let sub = self.sub_mut(&id)?;
                if sub.generation != generation {
                    return Ok(SubOutcome::Unchanged);
                }
                sub.retry = None;
                Ok(SubOutcome::Changed)
            }
            SubCommand::RotateKeys {
                signing_pkcs8,
                current_public,
                keep_until_ms,
                now_ms,
            } => {
                let keys = self
                    .keys
                    .as_mut()
                    .ok_or_else(|| SubError::invalid("there are no keys to rotate yet"))?;
                keys.retired.retain(|(_, until)| *until > now_ms);
                keys.retired.push((current_public, keep_until_ms));
                keys.signing_pkcs8 = signing_pkcs8;
                Ok(SubOutcome::Changed)
            }
            SubCommand::SetKeys { keys } => {
                if self.keys.is_some() {
                    return Ok(SubOutcome::Unchanged);
                }
                self.keys = Some(keys);
                Ok(SubOutcome::Changed)
            }
        }
    }

    fn sub_mut(&mut self, id: &str) -> Result<&mut Subscription, SubError> {
        self.subs
            .get_mut(id)
            .ok_or_else(|| SubError::NotFound(id.to_string()))
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
