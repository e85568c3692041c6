//! Runnel's deterministic core: the Durable Streams state machine.
//!
//! This crate owns what a stream *is*: the commands that change streams
//! ([`command`]), their validation and effects ([`state`]), offsets
//! ([`offset`]), JSON message framing ([`json`]), read planning
//! ([`read`]), snapshots, trimming and retention ([`history`]) and the
//! State Protocol fold the compactor uses ([`state_protocol`]), tiered
//! history ([`tier`]), subscriptions ([`subscription`]), S2's records
//! ([`records`]), and what the
//! state holds in memory ([`memory`]). It does
//! no IO, reads no clock (time arrives inside each [`command::Entry`]) and
//! spawns nothing, so every rule can be tested
//! exhaustively and every replica that applies the same entries reaches
//! the same state.

pub mod applied;
pub mod checkpoint;
mod chunk_index;
pub mod cluster_meta;
mod codec;
pub mod cold_list;
pub mod command;
mod create;
pub mod error;
pub mod fork_copy;
pub mod history;
pub mod json;
pub mod listing;
pub mod member_state;
pub mod memory;
pub mod offset;
pub mod read;
pub mod records;
pub mod restore;
pub mod state;
pub mod state_protocol;
pub mod stream;
pub mod subscription;
pub mod tier;
pub mod upgrade;
mod varint;
pub mod zones;

#[cfg(test)]
mod golden;

pub use codec::CodecError;
pub use command::{
    AppendToStream, Body, Command, CreateStream, Entry, ForkFrom, Producer, PutSnapshot, Retention,
    StreamId,
};
pub use error::CoreError;
pub use fork_copy::{ForkMaterial, Inherited, InheritedChunk, MaterialPiece, RemotePin};
pub use history::{BootstrapPlan, CompactionWork};
pub use memory::StateMemory;
pub use offset::{Offset, ReadFrom};
pub use read::ReadPlan;
pub use state::{Applied, Slice, StreamInfo, StreamsState};
pub use stream::{ContentKind, SnapshotRef, StreamState};
pub use tier::{
    ColdChunk, Doomed, HotPiece, Placement, SnapshotWork, TierPolicy, TierTotals, TierWork,
    TieredView,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fork_copy;
#[cfg(test)]
mod tests_harness;
#[cfg(test)]
mod tests_history;
#[cfg(test)]
mod tests_tier;
