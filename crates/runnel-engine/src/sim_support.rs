//! What the deterministic simulation (`crates/runnel-sim`) needs of the
//! engine beyond its public API: re-exports only, hidden from the docs.
//! Not a cargo feature (cargo would unify one into every workspace build);
//! nothing here changes what a server does.

pub use crate::raft::transport::{LeaderView, ListRequest, PeerGroup, Served, Transport};
pub use crate::raft::vote_guard::REFUSAL as VOTE_REFUSAL;
