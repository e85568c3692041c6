//! Fault hooks that only a test binary can arm.
//!
//! The crash tests need the server to die at chosen points of the tiering
//! protocol, and the negative checks of the partition suite and the
//! simulation need a server that serves stale reads. Neither may be
//! reachable in the shipped binary: `runnel` never calls [`arm`], and no
//! flag, file or environment variable of its own does. The test-only
//! binary `runnel-faulty` (crates/runnel-faulty) and the simulator call it
//! before anything runs. Unarmed, each hook costs one atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// What a test binary arms.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// The process kills itself with SIGKILL when it reaches this point
    /// (see [`failpoint`] for the names).
    pub failpoint: Option<String>,
    /// Leaders serve reads without confirming their leadership and
    /// followers without a read index: a deliberately broken server that
    /// the fault harnesses must catch.
    pub stale_reads: bool,
    /// The node says in its hellos that its build supports only this
    /// cluster version: a member still on an older build, as a rolling
    /// upgrade meets it, without building the older release.
    pub announce_cluster_version: Option<u32>,
}

static FAILPOINT: OnceLock<String> = OnceLock::new();
static ANNOUNCED_VERSION: OnceLock<u32> = OnceLock::new();
static STALE_READS: AtomicBool = AtomicBool::new(false);

/// Arms `hooks` for the rest of the process. Test binaries only.
pub fn arm(hooks: Hooks) {
    if let Some(point) = hooks.failpoint {
        // A second arming keeps the first point: tests arm once at start.
        let _ = FAILPOINT.set(point);
    }
    if let Some(version) = hooks.announce_cluster_version {
        let _ = ANNOUNCED_VERSION.set(version);
    }
    if hooks.stale_reads {
        // Before any logging is set up: straight to stderr.
        eprintln!("runnel: serving stale reads on purpose (a test binary, never for use)");
        STALE_READS.store(true, Ordering::Relaxed);
    }
}

/// Kills the process here if a test armed this point. The points:
/// `tier-before-put`, `tier-mid-multipart`, `tier-after-put`,
/// `tier-after-commit` (see `tier::uploader`).
pub(crate) fn failpoint(point: &str) {
    if FAILPOINT.get().is_some_and(|armed| armed == point) {
        eprintln!("runnel: failpoint {point} reached; killing the process");
        // SAFETY: kill(2) on our own pid; SIGKILL cannot be handled.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The cluster version this node's hellos announce: its build's, unless
/// a test armed an older one.
pub(crate) fn announced_cluster_version() -> u32 {
    ANNOUNCED_VERSION
        .get()
        .copied()
        .unwrap_or(runnel_core::cluster_meta::CLUSTER_VERSION)
}

/// Whether reads skip the read barrier and the read index (a test armed
/// the broken behaviour).
pub(crate) fn stale_reads() -> bool {
    STALE_READS.load(Ordering::Relaxed)
}
