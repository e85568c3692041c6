//! Consensus, the Raft engine: every group of the cluster is an openraft instance
//! whose log lives in the node's shared [`runnel_log::Log`] (so one fsync
//! covers the entries, votes and truncations of every group) and whose
//! state machine is the same [`runnel_core::StreamsState`] the local
//! engine applies to.
//!
//! This layer is the mechanism, below the cluster's policy (`crate::cluster`,
//! which decides who is a member, who leads, what moves): it imports only
//! the base layer, never the cluster (`tests/layers.rs` checks it).
//!
//! Module map: [`journal`] stores each group's Raft log and vote in the
//! shared log; [`state_machine`] applies committed entries; [`snapshot`]
//! persists and ships its state; [`transport`] carries the Raft RPCs of
//! all groups over one TCP connection per peer pair, and answers peers
//! ([`transport::Served`]) for whoever is this node ([`transport::PeerIdentity`]);
//! [`group`] is the [`crate::GroupEngine`] a client proposes to;
//! [`starter`] starts each group's Raft (again, for a copy taken back);
//! [`runtime`] is openraft's runtime with seedable randomness (in
//! `runnel-wire`, with the [`TypeConfig`] that names it);
//! [`read_barrier`] makes a leader's reads linearizable; [`vote_guard`]
//! keeps a node that lost its disk from voting; [`transfer`] moves a
//! group's leadership without waiting out a lease (the mechanism: mute,
//! plan, the peers' part).
//!
//! Shared-log record layout: `[group: u32 LE][kind: u8][bincode body]`,
//! where the body of an entry record is the whole openraft entry. Its
//! application payload, a batch of encoded [`runnel_core::Entry`]s (see
//! [`AppRequest`]), is serialized last, so each stream's bytes sit at a
//! known place in the record and reads serve them straight from the log,
//! as in the local engine.
//!
//! Batching: openraft makes a leader's log append durable before it takes
//! the next client write, so one Raft entry per append would cost one
//! fsync each. Each group's proposer therefore packs the proposals that
//! arrive together into one Raft entry.

// openraft's storage traits return its `StorageError` (over 200 bytes);
// our helpers return what the traits do.
#![allow(clippy::result_large_err)]

pub mod group;
pub(crate) mod journal;
pub(crate) mod read_barrier;
pub(crate) mod snapshot;
pub mod starter;
pub(crate) mod state_machine;
pub(crate) mod transfer;
pub mod transport;
pub(crate) mod vote_guard;

use std::fmt;

use serde::Serialize;

// The Raft types and the application data of openraft's requests live
// in `runnel-wire` (what a peer sends decodes without the engine).
pub use runnel_wire::raft::runtime;
pub use runnel_wire::raft::{
    AppRequest, ApplyOutcome, BatchError, LogId, NodeId, RaftEntry, TypeConfig, Vote,
};

pub type Raft = openraft::Raft<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;

/// Kinds of shared-log records the Raft engine writes.
pub(crate) mod kind {
    pub const ENTRY: u8 = 1;
    pub const VOTE: u8 = 2;
    pub const COMMITTED: u8 = 3;
    /// Entries from this index on are gone (a new leader overwrote them).
    pub const TRUNCATE: u8 = 4;
    /// Entries up to this log id were purged.
    pub const PURGE: u8 = 5;
    /// Stream bytes copied from an installed snapshot.
    pub const BLOB: u8 = 6;
}

/// Bytes before a record's bincode body.
pub(crate) const RECORD_PREFIX: usize = 5;

pub(crate) fn encode_record<T: Serialize>(group: u32, kind: u8, body: &T, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&group.to_le_bytes());
    out.push(kind);
    bincode::serialize_into(&mut *out, body).expect("serializing into a Vec cannot fail");
}

/// A storage error openraft can report, from anything printable.
pub(crate) fn storage_error(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    reason: impl fmt::Display,
) -> StorageError {
    let source = std::io::Error::other(reason.to_string());
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&source)).into()
}

/// Runs blocking file IO on tokio's blocking pool, or inline when `inline`
/// (simulations keep every step on their one thread).
pub(crate) async fn blocking<T: Send + 'static>(
    inline: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if inline {
        Ok(f())
    } else {
        tokio::task::spawn_blocking(f).await
    }
}
