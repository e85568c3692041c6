//! runnel-history: what fault tests record and how it is judged, with no
//! IO and no clock of its own, so the real-process harnesses and the
//! deterministic simulation can share it.
//!
//! | module | owns |
//! |---|---|
//! | [`record`] | the self-describing bytes every test append carries, and parsing a stream back into them |
//! | [`check`] | a recorded history of appends and reads (invocation and completion times, answers) and the checker over it: content rules, then a decision of each stream's linearizability against an append-only log |

pub mod check;
pub mod record;
