//! The model's public types: what `stat` shows, attribute changes, faults,
//! power-cut reports and counters.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{Errno, Ino};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    File,
    Dir,
}

/// What `stat` shows of an inode.
#[derive(Clone, Debug)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// The changes of a `setattr` (`None`: unchanged).
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SystemTime>,
    pub mtime: Option<SystemTime>,
}

/// `statfs` figures, in blocks of [`BLOCK`] bytes.
#[derive(Clone, Debug)]
pub struct StatFs {
    pub blocks: u64,
    pub free_blocks: u64,
    pub files: u64,
}

/// Which operation an injected fault fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FaultOp {
    /// `write`, `fallocate` and growing truncates of files.
    Write,
    /// `fsync`/`fdatasync` of files and `fsync` of directories.
    Fsync,
}

/// An injected fault: `op` on any path containing `path` (all paths when
/// `None`) fails with `errno` until the faults are cleared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub op: FaultOp,
    pub errno: Errno,
    pub path: Option<String>,
}

/// A torn write kept by a power cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Torn {
    pub path: String,
    pub offset: u64,
    /// Bytes of the write that survived (a prefix).
    pub kept: u64,
    pub len: u64,
}

/// What a power cut threw away.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CutReport {
    /// File bytes the current image held that the durable one did not
    /// (zeros past a durable end do not count; a torn write's kept prefix
    /// does not either).
    pub bytes_dropped: u64,
    /// Of those, the bytes that are not zero: data written and never made
    /// durable, as opposed to preallocated or extended zeros (a zero byte
    /// written by `write` is not told apart from them).
    pub written_bytes_dropped: u64,
    /// Paths that existed and are gone (entries never made durable).
    pub lost_paths: Vec<String>,
    /// Paths removed or renamed away whose removal was not durable.
    pub restored_paths: Vec<String>,
    pub torn: Option<Torn>,
}

/// Counters since the mount.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub alive: bool,
    pub writes: u64,
    pub bytes_written: u64,
    pub fsyncs: u64,
    pub dir_fsyncs: u64,
    /// Operations failed by injected faults.
    pub injected_failures: u64,
    /// Unsynced bytes forgotten by failed fsyncs.
    pub bytes_forgotten_by_failed_fsyncs: u64,
    /// Operations refused with `EIO` while dead.
    pub refused_while_dead: u64,
    pub power_cuts: u64,
    pub bytes_dropped_total: u64,
    pub written_bytes_dropped_total: u64,
    pub last_cut: Option<CutReport>,
    pub faults: Vec<Fault>,
    pub armed_cut: Option<ArmedCut>,
}

/// A power cut that happens during the next write to a path containing
/// `path`: the write reaches the current image, then power fails (with
/// `torn_seed`, a prefix of that very write survives) and the write
/// returns `EIO`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArmedCut {
    pub path: String,
    pub torn_seed: Option<u64>,
}
