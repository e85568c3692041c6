//! Commands: every change to stream state, as it is proposed, logged and
//! applied. A command carries the proposer's clock reading (`now_ms`) so
//! that applying it is deterministic on every replica and on replay.

use crate::codec::{CodecError, Reader, Writer};
use crate::fork_copy::{ForkMaterial, Inherited};
use crate::subscription::SubCommand;
use crate::tier::ColdChunk;

/// Internal identity of one incarnation of a stream. Never reused, so a
/// command naming a stream id cannot hit a later stream of the same name.
pub type StreamId = u64;

/// An idempotent producer's identity and position, from its three headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Bytes to add to a stream. For JSON streams `data` is already framed
/// (see [`crate::json`]) and `message_ends` marks each message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Body {
    pub data: Vec<u8>,
    pub message_ends: Vec<u32>,
}

/// Fork parameters of a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFrom {
    /// Name of the source stream.
    pub source: String,
    /// Position in the source to fork at; `None` means the source's tail.
    pub offset: Option<u64>,
    /// Bytes (binary) or messages (JSON) of the append starting at
    /// `offset` to include as well.
    pub sub_offset: u64,
}

/// `Default` is an empty stream of the default content type: no TTL,
/// fork, compaction or retention.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateStream {
    pub name: String,
    /// `None`: inherit from the fork source, or `application/octet-stream`.
    pub content_type: Option<String>,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
    pub closed: bool,
    pub fork: Option<ForkFrom>,
    pub body: Body,
    /// Compact the stream as State Protocol change events (server-made
    /// snapshots of the latest value per type and key).
    pub compaction: bool,
    pub retention: Retention,
    /// A fork of a stream in another group: the copy of the source it
    /// starts with. Its bytes lead `body.data`; `body.message_ends`
    /// describe only what follows them.
    pub inherit: Option<Inherited>,
}

/// Automatic history trimming of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Keep at most this many bytes of history (whole appends).
    pub max_bytes: Option<u64>,
    /// Drop appends older than this.
    pub max_age_secs: Option<u64>,
}

/// A snapshot of a stream's state at an offset, published by the
/// application (or made by the server's compactor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSnapshot {
    pub name: String,
    pub offset: u64,
    pub content_type: String,
    /// SHA-256 of the bytes: an identical retry is recognised without
    /// comparing bytes.
    pub digest: [u8; 32],
    pub server_made: bool,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendToStream {
    pub name: String,
    /// `None` only for a close without a body.
    pub content_type: Option<String>,
    pub body: Body,
    pub producer: Option<Producer>,
    pub stream_seq: Option<String>,
    pub close: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Create(CreateStream),
    Append(AppendToStream),
    Delete {
        name: String,
    },
    /// Remove streams whose TTL or expiry passed, as judged by the proposer.
    Expire {
        ids: Vec<StreamId>,
    },
    PutSnapshot(PutSnapshot),
    DeleteSnapshot {
        name: String,
        offset: u64,
    },
    /// Drop history before `before` (reads there get 410 afterwards).
    Trim {
        name: String,
        before: u64,
    },
    /// Hold stream `name` for a fork in another group (see
    /// [`crate::fork_copy`]).
    Pin {
        name: String,
        token: String,
        offset: Option<u64>,
        sub_offset: u64,
    },
    /// Release a pin taken by [`Command::Pin`].
    Unpin {
        name: String,
        token: String,
    },
    /// Reference an uploaded chunk object in place of the stream's first
    /// hot appends (see [`crate::tier`]). `term`: the term the uploader
    /// led the group in.
    Tier {
        stream: StreamId,
        term: u64,
        chunk: ColdChunk,
    },
    /// Point a snapshot stored in the log at `from_loc` to its uploaded
    /// object instead.
    TierSnapshot {
        stream: StreamId,
        term: u64,
        offset: u64,
        server_made: bool,
        from_loc: u64,
        object: ColdChunk,
    },
    /// The queued object deletions up to this sequence number are done.
    ObjectsDeleted {
        up_to: u64,
    },
    /// A change to the subscriptions (the control group's; see
    /// [`crate::subscription`]).
    Subscription(Box<SubCommand>),
    /// Name the cluster (the control group's; see
    /// [`crate::cluster_meta`]): the first id applied stays.
    SetClusterId {
        id: String,
    },
    /// Node `node` was removed from the cluster for good (the control
    /// group's; see [`crate::cluster_meta`]).
    RetireNode {
        node: u64,
    },
    /// Replicas of each data group (the control group's; see
    /// [`crate::cluster_meta`]). `initial`: only if none was set yet
    /// (what the node that forms the cluster proposes).
    SetReplication {
        factor: u32,
        initial: bool,
    },
    /// The node each listed group (`(group, node)`) should be led by (the
    /// control group's; see [`crate::cluster_meta`]). `initial`: only if
    /// none was set yet (what a forming cluster's placement proposes).
    PreferLeaders {
        leaders: Vec<(u32, u64)>,
        initial: bool,
    },
    /// The zones of the listed nodes (`(node, zone)`; the control
    /// group's; see [`crate::zones`]).
    SetZones {
        zones: Vec<(u64, String)>,
    },
    /// Pause or resume the cluster's self-healing (the control group's;
    /// see [`crate::cluster_meta`]).
    PauseHealing {
        paused: bool,
    },
    /// The first entry of a group of a cluster restored from its bucket
    /// (see [`crate::restore`]): the group's state as the old cluster's
    /// `source` last backed it up (`None`: it backed up none), reduced to
    /// what the object store holds when applied.
    RestoreGroup {
        source: String,
        checkpoint: Option<Vec<u8>>,
    },
    /// Raise the cluster version (the control group's; see
    /// [`crate::upgrade`]): what `runnel ctl upgrade finalize` logs once
    /// every member runs a build that supports it.
    SetClusterVersion {
        version: u32,
    },
    /// Set or clear a member's state (the control group's; see
    /// [`crate::member_state`]).
    SetMemberState {
        node: u64,
        state: Option<crate::member_state::MemberState>,
    },
}

/// The streams a command names (see [`Command::names`]).
pub type CommandNames<'a> =
    std::iter::Chain<std::option::IntoIter<&'a str>, std::option::IntoIter<&'a str>>;

impl Command {
    /// Drops the body's data (once logged, applying needs only its length).
    pub fn release_data(&mut self) {
        if let Some(body) = self.body_mut() {
            body.data = Vec::new();
        }
    }

    fn body_mut(&mut self) -> Option<&mut Body> {
        match self {
            Command::Create(c) => Some(&mut c.body),
            Command::Append(a) => Some(&mut a.body),
            Command::PutSnapshot(p) => Some(&mut p.body),
            _ => None,
        }
    }

    /// Stream names this command refers to (the stream, a fork's source).
    pub fn names(&self) -> CommandNames<'_> {
        let (first, second) = match self {
            Command::Create(c) => {
                // A fork that carries its source's bytes needs only its own
                // group.
                let source = match (&c.fork, &c.inherit) {
                    (Some(f), None) => Some(f.source.as_str()),
                    _ => None,
                };
                (Some(c.name.as_str()), source)
            }
            Command::Append(a) => (Some(a.name.as_str()), None),
            Command::PutSnapshot(p) => (Some(p.name.as_str()), None),
            Command::Delete { name }
            | Command::DeleteSnapshot { name, .. }
            | Command::Trim { name, .. }
            | Command::Pin { name, .. }
            | Command::Unpin { name, .. } => (Some(name.as_str()), None),
            Command::Expire { .. }
            | Command::Tier { .. }
            | Command::TierSnapshot { .. }
            | Command::ObjectsDeleted { .. }
            | Command::Subscription(_)
            | Command::SetClusterId { .. }
            | Command::RetireNode { .. }
            | Command::SetReplication { .. }
            | Command::PreferLeaders { .. }
            | Command::SetZones { .. }
            | Command::PauseHealing { .. }
            | Command::RestoreGroup { .. }
            | Command::SetClusterVersion { .. }
            | Command::SetMemberState { .. } => (None, None),
        };
        first.into_iter().chain(second)
    }

    /// The body bytes this command stores, if any.
    pub fn body(&self) -> Option<&Body> {
        match self {
            Command::Create(c) => Some(&c.body),
            Command::Append(a) => Some(&a.body),
            Command::PutSnapshot(p) => Some(&p.body),
            _ => None,
        }
    }
}

/// Fork parameters in the entry and checkpoint encodings.
pub(crate) fn write_fork(w: &mut Writer, fork: Option<&ForkFrom>) {
    match fork {
        Some(f) => {
            w.bool(true);
            w.str(&f.source);
            w.opt_u64(f.offset);
            w.u64(f.sub_offset);
        }
        None => w.bool(false),
    }
}

pub(crate) fn read_fork(r: &mut Reader<'_>) -> Result<Option<ForkFrom>, CodecError> {
    if !r.bool()? {
        return Ok(None);
    }
    Ok(Some(ForkFrom {
        source: r.string()?,
        offset: r.opt_u64()?,
        sub_offset: r.u64()?,
    }))
}

/// A command with the time it was proposed: the unit that is logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub now_ms: i64,
    pub command: Command,
}

const FORMAT_VERSION: u8 = 1;
const TAG_CREATE: u8 = 1;
const TAG_APPEND: u8 = 2;
const TAG_DELETE: u8 = 3;
const TAG_EXPIRE: u8 = 4;
const TAG_PUT_SNAPSHOT: u8 = 5;
const TAG_DELETE_SNAPSHOT: u8 = 6;
const TAG_TRIM: u8 = 7;
const TAG_PIN: u8 = 8;
const TAG_UNPIN: u8 = 9;
/// A create with an [`Inherited`] copy (a fork across groups).
const TAG_CREATE_INHERITED: u8 = 10;
const TAG_TIER: u8 = 11;
const TAG_TIER_SNAPSHOT: u8 = 12;
const TAG_OBJECTS_DELETED: u8 = 13;
/// A subscription command, as JSON: the control group's entries are few
/// (one per wake or ack, not per append), and JSON keeps their many
/// shapes in one place.
const TAG_SUBSCRIPTION: u8 = 14;
const TAG_SET_CLUSTER_ID: u8 = 15;
const TAG_RETIRE_NODE: u8 = 16;
const TAG_SET_REPLICATION: u8 = 17;
const TAG_PREFER_LEADERS: u8 = 18;
const TAG_SET_ZONES: u8 = 19;
const TAG_PAUSE_HEALING: u8 = 20;
const TAG_RESTORE_GROUP: u8 = 21;
const TAG_SET_CLUSTER_VERSION: u8 = 22;
const TAG_SET_MEMBER_STATE: u8 = 23;

impl Entry {
    /// Encodes the entry. The body's data bytes come last, so a stored
    /// entry's data starts at `encoded.len() - data.len()`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (which may hold a caller's prefix).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let data: &[u8] = self
            .command
            .body()
            .map(|b| b.data.as_slice())
            .unwrap_or(&[]);
        out.reserve(64 + data.len());
        let mut w = Writer::wrap(std::mem::take(out));
        w.u8(FORMAT_VERSION);
        w.i64(self.now_ms);
        match &self.command {
            Command::Create(c) => {
                w.u8(match c.inherit {
                    None => TAG_CREATE,
                    Some(_) => TAG_CREATE_INHERITED,
                });
                w.str(&c.name);
                w.opt_str(c.content_type.as_deref());
                w.opt_u64(c.ttl_secs);
                w.opt_i64(c.expires_at_ms);
                w.bool(c.closed);
                write_fork(&mut w, c.fork.as_ref());
                w.bool(c.compaction);
                w.opt_u64(c.retention.max_bytes);
                w.opt_u64(c.retention.max_age_secs);
                if let Some(inherit) = &c.inherit {
                    w.str(&inherit.token);
                    inherit.material.write(&mut w);
                }
                w.u32_list(&c.body.message_ends);
            }
            Command::Append(a) => {
                w.u8(TAG_APPEND);
                w.str(&a.name);
                w.opt_str(a.content_type.as_deref());
                match &a.producer {
                    Some(p) => {
                        w.bool(true);
                        w.str(&p.id);
                        w.u64(p.epoch);
                        w.u64(p.seq);
                    }
                    None => w.bool(false),
                }
                w.opt_str(a.stream_seq.as_deref());
                w.bool(a.close);
                w.u32_list(&a.body.message_ends);
            }
            Command::Delete { name } => {
                w.u8(TAG_DELETE);
                w.str(name);
            }
            Command::Expire { ids } => {
                w.u8(TAG_EXPIRE);
                w.u64(ids.len() as u64);
                for id in ids {
                    w.u64(*id);
                }
            }
            Command::PutSnapshot(p) => {
                w.u8(TAG_PUT_SNAPSHOT);
                w.str(&p.name);
                w.u64(p.offset);
                w.str(&p.content_type);
                w.raw(&p.digest);
                w.bool(p.server_made);
            }
            Command::DeleteSnapshot { name, offset } => {
                w.u8(TAG_DELETE_SNAPSHOT);
                w.str(name);
                w.u64(*offset);
            }
            Command::Trim { name, before } => {
                w.u8(TAG_TRIM);
                w.str(name);
                w.u64(*before);
            }
            Command::Pin {
                name,
                token,
                offset,
                sub_offset,
            } => {
                w.u8(TAG_PIN);
                w.str(name);
                w.str(token);
                w.opt_u64(*offset);
                w.u64(*sub_offset);
            }
            Command::Unpin { name, token } => {
                w.u8(TAG_UNPIN);
                w.str(name);
                w.str(token);
            }
            Command::Tier {
                stream,
                term,
                chunk,
            } => {
                w.u8(TAG_TIER);
                w.u64(*stream);
                w.u64(*term);
                chunk.write(&mut w);
            }
            Command::TierSnapshot {
                stream,
                term,
                offset,
                server_made,
                from_loc,
                object,
            } => {
                w.u8(TAG_TIER_SNAPSHOT);
                w.u64(*stream);
                w.u64(*term);
                w.u64(*offset);
                w.bool(*server_made);
                w.u64(*from_loc);
                object.write(&mut w);
            }
            Command::ObjectsDeleted { up_to } => {
                w.u8(TAG_OBJECTS_DELETED);
                w.u64(*up_to);
            }
            Command::Subscription(command) => {
                w.u8(TAG_SUBSCRIPTION);
                let json = serde_json::to_string(command).expect("subscription commands serialize");
                w.str(&json);
            }
            Command::SetClusterId { id } => {
                w.u8(TAG_SET_CLUSTER_ID);
                w.str(id);
            }
            Command::RetireNode { node } => {
                w.u8(TAG_RETIRE_NODE);
                w.u64(*node);
            }
            Command::SetReplication { factor, initial } => {
                w.u8(TAG_SET_REPLICATION);
                w.u64(u64::from(*factor));
                w.bool(*initial);
            }
            Command::PreferLeaders { leaders, initial } => {
                w.u8(TAG_PREFER_LEADERS);
                w.bool(*initial);
                w.u64(leaders.len() as u64);
                for (group, node) in leaders {
                    w.u64(u64::from(*group));
                    w.u64(*node);
                }
            }
            Command::SetZones { zones } => {
                w.u8(TAG_SET_ZONES);
                w.u64(zones.len() as u64);
                for (node, zone) in zones {
                    w.u64(*node);
                    w.str(zone);
                }
            }
            Command::PauseHealing { paused } => {
                w.u8(TAG_PAUSE_HEALING);
                w.bool(*paused);
            }
            Command::RestoreGroup { source, checkpoint } => {
                w.u8(TAG_RESTORE_GROUP);
                w.str(source);
                w.bool(checkpoint.is_some());
                if let Some(bytes) = checkpoint {
                    w.blob(bytes);
                }
            }
            Command::SetClusterVersion { version } => {
                w.u8(TAG_SET_CLUSTER_VERSION);
                w.u32(*version);
            }
            Command::SetMemberState { node, state } => {
                w.u8(TAG_SET_MEMBER_STATE);
                w.u64(*node);
                w.u8(state.map_or(0, |s| s.code()));
            }
        }
        w.raw(data);
        *out = w.finish();
    }

    /// Decodes an entry, data included.
    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        Self::decode_inner(bytes, true).map(|(entry, _)| entry)
    }

    /// Decodes an entry without copying its data, and returns the length
    /// of that data: all that recovery needs to rebuild the index.
    pub fn decode_header(bytes: &[u8]) -> Result<(Entry, u64), CodecError> {
        let (entry, data_start) = Self::decode_inner(bytes, false)?;
        Ok((entry, (bytes.len() - data_start) as u64))
    }

    fn decode_inner(bytes: &[u8], with_data: bool) -> Result<(Entry, usize), CodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != FORMAT_VERSION {
            return Err(CodecError::UnknownVersion(version));
        }
        let now_ms = r.i64()?;
        let command = match r.u8()? {
            tag @ (TAG_CREATE | TAG_CREATE_INHERITED) => {
                let name = r.string()?;
                let content_type = r.opt_string()?;
                let ttl_secs = r.opt_u64()?;
                let expires_at_ms = r.opt_i64()?;
                let closed = r.bool()?;
                let fork = read_fork(&mut r)?;
                let compaction = r.bool()?;
                let retention = Retention {
                    max_bytes: r.opt_u64()?,
                    max_age_secs: r.opt_u64()?,
                };
                let inherit = if tag == TAG_CREATE_INHERITED {
                    Some(Inherited {
                        token: r.string()?,
                        material: ForkMaterial::read(&mut r)?,
                    })
                } else {
                    None
                };
                let message_ends = r.u32_list()?;
                Command::Create(CreateStream {
                    inherit,
                    name,
                    content_type,
                    ttl_secs,
                    expires_at_ms,
                    closed,
                    fork,
                    compaction,
                    retention,
                    body: Body {
                        data: r.rest(with_data),
                        message_ends,
                    },
                })
            }
            TAG_APPEND => {
                let name = r.string()?;
                let content_type = r.opt_string()?;
                let producer = if r.bool()? {
                    Some(Producer {
                        id: r.string()?,
                        epoch: r.u64()?,
                        seq: r.u64()?,
                    })
                } else {
                    None
                };
                let stream_seq = r.opt_string()?;
                let close = r.bool()?;
                let message_ends = r.u32_list()?;
                Command::Append(AppendToStream {
                    name,
                    content_type,
                    body: Body {
                        data: r.rest(with_data),
                        message_ends,
                    },
                    producer,
                    stream_seq,
                    close,
                })
            }
            TAG_DELETE => Command::Delete { name: r.string()? },
            TAG_EXPIRE => {
                let count = r.u64()?;
                let mut ids = Vec::new();
                for _ in 0..count {
                    ids.push(r.u64()?);
                }
                Command::Expire { ids }
            }
            TAG_PUT_SNAPSHOT => {
                let name = r.string()?;
                let offset = r.u64()?;
                let content_type = r.string()?;
                let digest = r.array::<32>()?;
                let server_made = r.bool()?;
                Command::PutSnapshot(PutSnapshot {
                    name,
                    offset,
                    content_type,
                    digest,
                    server_made,
                    body: Body {
                        data: r.rest(with_data),
                        message_ends: Vec::new(),
                    },
                })
            }
            TAG_DELETE_SNAPSHOT => Command::DeleteSnapshot {
                name: r.string()?,
                offset: r.u64()?,
            },
            TAG_TRIM => Command::Trim {
                name: r.string()?,
                before: r.u64()?,
            },
            TAG_PIN => Command::Pin {
                name: r.string()?,
                token: r.string()?,
                offset: r.opt_u64()?,
                sub_offset: r.u64()?,
            },
            TAG_UNPIN => Command::Unpin {
                name: r.string()?,
                token: r.string()?,
            },
            TAG_TIER => Command::Tier {
                stream: r.u64()?,
                term: r.u64()?,
                chunk: ColdChunk::read(&mut r)?,
            },
            TAG_TIER_SNAPSHOT => Command::TierSnapshot {
                stream: r.u64()?,
                term: r.u64()?,
                offset: r.u64()?,
                server_made: r.bool()?,
                from_loc: r.u64()?,
                object: ColdChunk::read(&mut r)?,
            },
            TAG_OBJECTS_DELETED => Command::ObjectsDeleted { up_to: r.u64()? },
            TAG_SUBSCRIPTION => Command::Subscription(
                serde_json::from_str(&r.string()?)
                    .map_err(|_| CodecError::Invalid("subscription command"))?,
            ),
            TAG_SET_CLUSTER_ID => Command::SetClusterId { id: r.string()? },
            TAG_RETIRE_NODE => Command::RetireNode { node: r.u64()? },
            TAG_SET_REPLICATION => Command::SetReplication {
                factor: u32::try_from(r.u64()?)
                    .map_err(|_| CodecError::Invalid("replication factor"))?,
                initial: r.bool()?,
            },
            TAG_PREFER_LEADERS => {
                let initial = r.bool()?;
                let count = r.u64()?;
                if count > crate::cluster_meta::MAX_GROUPS as u64 {
                    return Err(CodecError::Invalid("preferred leader count"));
                }
                let mut leaders = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let group = u32::try_from(r.u64()?)
                        .map_err(|_| CodecError::Invalid("preferred leader group"))?;
                    leaders.push((group, r.u64()?));
                }
                Command::PreferLeaders { leaders, initial }
            }
            TAG_SET_ZONES => {
                let count = r.u64()?;
                if count > crate::zones::MAX_NODES as u64 {
                    return Err(CodecError::Invalid("zone count"));
                }
                let mut zones = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    zones.push((r.u64()?, r.string()?));
                }
                Command::SetZones { zones }
            }
            TAG_PAUSE_HEALING => Command::PauseHealing { paused: r.bool()? },
            TAG_RESTORE_GROUP => {
                let source = r.string()?;
                let checkpoint = if r.bool()? {
                    let bytes = r.blob()?;
                    if bytes.len() > crate::restore::MAX_CHECKPOINT {
                        return Err(CodecError::Invalid("restored checkpoint size"));
                    }
                    Some(bytes)
                } else {
                    None
                };
                Command::RestoreGroup { source, checkpoint }
            }
            TAG_SET_CLUSTER_VERSION => Command::SetClusterVersion { version: r.u32()? },
            TAG_SET_MEMBER_STATE => {
                let node = r.u64()?;
                let state = match r.u8()? {
                    0 => None,
                    code => Some(
                        crate::member_state::MemberState::from_code(code)
                            .ok_or(CodecError::Invalid("member state"))?,
                    ),
                };
                Command::SetMemberState { node, state }
            }
            other => return Err(CodecError::UnknownTag(other)),
        };
        let data_start = if command.body().is_some() {
            r.data_start()
        } else {
            r.expect_end()?;
            bytes.len()
        };
        Ok((Entry { now_ms, command }, data_start))
    }
}

#[cfg(test)]
pub(crate) mod tests;
