//! The Raft transport's side of the wire: the types openraft's requests
//! are made of (the engine's [`TypeConfig`] and its application data,
//! [`AppRequest`]), the request frames and their bodies ([`frame`]), and
//! the hello that opens every connection ([`hello`]).
//!
//! They live below `runnel-engine` so that what a peer sends can be
//! decoded (and fuzzed: `fuzz/fuzz_targets/raft_frame.rs`) without the
//! engine; the engine re-exports them from its `raft` module.

pub mod frame;
#[cfg(test)]
mod golden;
pub mod hello;
pub mod runtime;

use std::fmt;

use runnel_core::{Applied, CoreError};
use serde::{Deserialize, Serialize};

/// A batch of proposals as replicated: `[len: u32 LE][encoded Entry]...`,
/// each entry's data last within its item.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct AppRequest(#[serde(with = "serde_bytes")] pub Vec<u8>);

impl AppRequest {
    pub fn push(&mut self, entry: &runnel_core::Entry) {
        let at = self.0.len();
        self.0.extend_from_slice(&[0; 4]);
        entry.encode_into(&mut self.0);
        let len = (self.0.len() - at - 4) as u32;
        self.0[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// The encoded entries with their offsets in the batch.
    pub fn items(&self) -> impl Iterator<Item = Result<(usize, &[u8]), BatchError>> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            if at >= self.0.len() {
                return None;
            }
            let item = self.0[at..]
                .first_chunk::<4>()
                .map(|len| u32::from_le_bytes(*len) as usize)
                .filter(|len| at + 4 + len <= self.0.len())
                .map(|len| (at + 4, &self.0[at + 4..at + 4 + len]))
                .ok_or(BatchError::Truncated { at });
            at = match &item {
                Ok((start, bytes)) => start + bytes.len(),
                Err(_) => self.0.len(),
            };
            Some(item)
        })
    }
}

impl fmt::Debug for AppRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppRequest({} bytes)", self.0.len())
    }
}

/// Why an item of a replicated batch could not be read (the leader
/// encoded it: a bug, which every node meets alike).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("truncated batch item at byte {at}")]
    Truncated { at: usize },
    #[error(transparent)]
    Entry(#[from] runnel_core::CodecError),
}

/// What applying a batch answered, one result per proposal, handed to the
/// proposers on the leader. It never crosses the network: clients reach
/// the leader through HTTP forwarding, so it serializes as nothing.
#[derive(Debug, Clone, Default)]
pub struct ApplyOutcome(pub Vec<Result<Applied, CoreError>>);

impl Serialize for ApplyOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for ApplyOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <()>::deserialize(deserializer)?;
        Ok(ApplyOutcome::default())
    }
}

openraft::declare_raft_types!(
    /// Runnel's Raft types: node ids are numbers, nodes are known by their
    /// Raft address.
    pub TypeConfig:
        D = AppRequest,
        R = ApplyOutcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = runtime::RunnelRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type RaftEntry = openraft::Entry<TypeConfig>;
