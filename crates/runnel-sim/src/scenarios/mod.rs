//! The scenarios, each an `async fn run(seed) -> Outcome` that drives the
//! cluster through its schedule under the workload, then judges it.
//!
//! | scenario | drives |
//! |---|---|
//! | [`faults`] | partitions, message loss and delay, crashes, lost disks |
//! | [`membership`] | a fourth node joins every group, the first leaves; a removal without quorum refused |
//! | [`replicas`] | one replica of each group moves to a newcomer, and back; nodes drop and take back copies |
//! | [`transfer`] | each group's leadership moves again and again, never waiting out a lease |
//! | [`lost_disk`] | a node loses its disk while a write is on it and its leader alone |
//! | [`churn`] | a node joins, leaderships and a replica move, a node leaves, all while nodes are cut off and crash |
//! | [`healing`] | a founder dies for good; its groups' leaders move its replicas to a spare member by themselves |
//! | [`zone_loss`] | six founders in three zones; both nodes of a zone die at once |

pub mod churn;
pub mod faults;
pub mod healing;
pub mod lost_disk;
pub mod membership;
pub mod replicas;
pub mod transfer;
pub mod zone_loss;
