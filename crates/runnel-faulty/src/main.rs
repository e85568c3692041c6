//! `runnel-faulty`: the `runnel` command line exactly, with the engine's
//! fault hooks (`runnel_engine::hooks`) armed from the environment first.
//! For tests only; the shipped `runnel` binary cannot arm them.
//!
//! - `RUNNEL_FAILPOINT=POINT`: the process kills itself with SIGKILL when
//!   it reaches POINT (`tier-before-put`, `tier-mid-multipart`,
//!   `tier-after-put`, `tier-after-commit`).
//! - `RUNNEL_UNSAFE_STALE_READS=1`: leaders serve reads without confirming
//!   their leadership and followers without a read index, so the partition
//!   suite can show that it catches stale reads.
//! - `RUNNEL_ANNOUNCE_CLUSTER_VERSION=N`: the node's hellos say its build
//!   supports cluster version N only, as a member on an older build would.

use runnel_engine::hooks::{self, Hooks};

fn main() -> std::process::ExitCode {
    hooks::arm(Hooks {
        failpoint: std::env::var("RUNNEL_FAILPOINT").ok(),
        stale_reads: std::env::var("RUNNEL_UNSAFE_STALE_READS").is_ok_and(|v| v == "1"),
        announce_cluster_version: std::env::var("RUNNEL_ANNOUNCE_CLUSTER_VERSION")
            .ok()
            .and_then(|v| v.parse().ok()),
    });
    runnel::run()
}
