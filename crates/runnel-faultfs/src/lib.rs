//! runnel-faultfs: a FUSE file system that loses power like a disk with a
//! volatile write cache (after Jepsen's LazyFS), and the tests that run the
//! Runnel server binary on it.
//!
//! | module | owns |
//! |---|---|
//! | [`model`] | the in-memory file system: the current image, the durable image, what fsync and directory fsync move from one to the other, power cuts, torn writes, injected faults |
//! | [`fs`] | the FUSE adapter over the model (no kernel caching that could hide it) and mounting |
//! | [`control`] | the control socket's commands (`power-cut`, `revive`, `fail-write`, ...) and a client |
//! | [`harness`] | the power-loss, cluster power-loss and IO-error tests: server processes, writers, cuts, replica moves, reading streams back, the checks and their verdict lines |
//!
//! `scripts/power-loss.sh` (also `FAULTFS_MODE=cluster-power-loss`) and
//! `scripts/io-errors.sh` mount the file system and run the tests;
//! `runnel-faultfs --help` lists the commands.

pub mod control;
pub mod fs;
pub mod harness;
pub mod model;
