//! The deterministic simulation of a Runnel cluster. Every node's groups
//! (real [`ClusterNode`](runnel_engine::cluster::ClusterNode)s over real
//! files), the network ([`net`]) and the disks run on one thread under
//! tokio's paused clock, and every random choice (faults, delays,
//! election timeouts, client behaviour) comes from one seed, so a failing
//! seed reproduces exactly. Shared logs are committed by the simulation
//! (`runnel_log::LogOptions::manual_commit`); a crash drops what was not
//! committed.
//!
//! Each run drives idempotent producers and readers ([`workload`])
//! through a [scenario](scenarios)'s schedule, with every request sent to
//! a random node and routed as the server routes it. Readers read through
//! the node that believes it leads, as forwarded reads are served, or
//! through a follower after its read index, as live reads are. Then the
//! cluster heals, every replica must hold the same bytes, and the
//! recorded history (each append's and read's invocation and completion
//! on the simulated clock, and its answer) goes through the same checker
//! as the real-process partition test ([`runnel_history::check`]): no
//! acknowledged append lost, moved or repeated, appends in real-time
//! order, every read exactly the final bytes it covered, and the history
//! linearizable (a leader cut off from the others, or a lagging follower,
//! must not serve stale state) ([`checks`]).
//!
//! | module | owns |
//! |---|---|
//! | [`sim`] | the cluster: nodes, their disks, faults injected, the trace |
//! | [`net`] | the simulated network: delays, loss, isolation; the peers' answers |
//! | [`workload`] | the producers and readers, and the history they record |
//! | [`checks`] | convergence of the replicas and the history's check |
//! | [`scenarios`] | the schedules: faults, membership, churn, replicas, transfer, lost-disk |
//! | [`run`] | one seed of one scenario on its own thread, and its [`Outcome`] |
//!
//! `cargo test -p runnel-sim` runs the seeds CI runs (1 to 8 of each
//! scenario, and a check that a seed reproduces); the `runnel-sim`
//! program runs any others (`runnel-sim --help`).

/// The allocator the server runs with: the simulation then allocates as
/// the server does, and its readers' whole-stream reads reuse memory
/// rather than faulting in fresh pages for each (a third of a run's CPU
/// with the system allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod checks;
pub mod net;
pub mod run;
pub mod scenarios;
pub mod sim;
pub mod workload;

pub use run::{run_seed, Outcome, Scenario, UnknownScenario};
