//! Runnel's engine: the [`GroupEngine`] seam between the HTTP front and the
//! replicated (or local) log.
//!
//! A *group* owns a set of streams (by hash of the stream name) and turns
//! proposed [`Command`](runnel_core::Command)s into committed, applied
//! state: propose, log durably, apply to the group's
//! [`StreamsState`](runnel_core::StreamsState), answer, wake readers. A
//! single node runs the local engine ([`node`], [`local`]): every group of
//! the node shares one [`runnel_log::Log`], so one fsync covers the entries
//! of all groups. A cluster member runs a Raft engine ([`raft`] under
//! [`cluster`]) behind the same trait; the HTTP layer cannot tell them
//! apart.
//!
//! Layers, each importing only itself and the layers below it (checked by
//! `tests/layers.rs`; see `docs/engine-layers.md`):
//!
//! ```text
//!               lib.rs (this facade: `mod` and `pub use` only)
//!              /      \
//!       cluster        node         cluster/ + placement/ ; node.rs + local.rs
//!          |             |          (never importing each other)
//!      consensus         |          raft/
//!            \         /
//!               base                api error datadir config upkeep clock
//!                                   metrics tail activity checkpoint
//!                                   copy_forward view tier/ history
//!                                   control hooks recent_pages
//! ```
//!
//! Base: [`api`] holds the seams ([`NodeEngine`], [`GroupEngine`],
//! [`Route`]) and [`error`] the errors; [`upkeep`] what both engines do
//! with their groups; [`datadir`] and [`config`] a node's directory and
//! configuration; [`view`] a group's read side, [`recent_pages`] the
//! pages its readers share; [`tail`] wakes live
//! readers; [`history`] runs retention and compaction; [`tier`] moves
//! cold bytes to object storage; [`metrics`] gathers what `/metrics`
//! shows; [`control`] is the control group's subscriptions; [`hooks`] the
//! fault hooks only test binaries arm.

// Base.
pub mod activity;
pub mod api;
mod checkpoint;
mod clock;
pub mod config;
pub mod control;
pub(crate) mod copy_forward;
pub mod datadir;
pub mod error;
pub mod history;
pub mod hooks;
pub mod metrics;
pub mod recent_pages;
pub mod tail;
pub mod tier;
pub(crate) mod upkeep;
mod view;

// Consensus.
pub mod raft;

// Cluster policy.
pub mod cluster;
pub mod placement;

// Single node.
pub mod local;
pub mod node;

// The facade's other file: what the simulator reaches.
#[doc(hidden)]
pub mod sim_support;

pub use api::{
    group_index, Bootstrap, BoxFuture, ClusterOps, GroupEngine, LiveNamed, MemberChange,
    MemberReport, NodeEngine, NodeId, ReadResult, Route,
};
pub use clock::now_ms;
pub use config::EngineConfig;
pub use datadir::{single_node_groups, stored_groups};
pub use error::EngineError;
pub use metrics::{GroupMetrics, MemoryUse, NodeMetrics, TierMetrics};
pub use node::Node;
pub use runnel_core::cluster_meta::MAX_GROUPS;
pub use runnel_log::SyncMode;
pub use tier::{TierConfig, Tiering};
