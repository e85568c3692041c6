//! The tests that run a real server binary on the mounted file system:
//! [`power_loss`] (cut power mid-write, restart, check every stream),
//! [`cluster`] (a three-node cluster, one node on the file system, which
//! loses power in the middle of a replica move) and [`io_errors`] (fail
//! fsyncs or writes, watch the server stop acknowledging, restart, check
//! nothing acknowledged was lost).
//!
//! | module | owns |
//! |---|---|
//! | [`client`] | HTTP: streams, appends, whole-stream reads, the writer loop and its tally of answers |
//! | [`check`] | the writers' histories and the rules one stream read back is judged by |
//! | [`readback`] | reading every stream back after a restart (patient with a recovering server) and judging it |
//! | [`cut`] | cutting the power at a moment the cut loses written data, and describing what it dropped |
//! | [`server`] | one server process: start, wait for health, SIGKILL |
//! | [`verdict`] | the `VIOLATION kind:` and `UNTESTED kind:` lines a run prints |
//! | [`error`] | the harness's own failures |
//!
//! The file system is mounted by a separate `runnel-faultfs mount` process
//! (see `scripts/power-loss.sh`) and driven through its control socket.

pub mod check;
pub mod client;
pub mod cluster;
pub mod cut;
pub mod error;
pub mod io_errors;
pub mod power_loss;
pub mod readback;
pub mod server;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use error::{HarnessError, Result};

/// What the tests are given.
#[derive(Clone, Debug)]
pub struct Target {
    pub binary: PathBuf,
    pub mount: PathBuf,
    pub control: PathBuf,
    /// Where the server's output goes.
    pub log: PathBuf,
    /// Flags for `serve` after `--data-dir` and `--listen`.
    pub flags: Vec<String>,
}

impl Target {
    pub fn data_dir(&self) -> PathBuf {
        self.mount.join("data")
    }

    pub fn spec(&self) -> server::ServerSpec {
        server::ServerSpec {
            binary: self.binary.clone(),
            data_dir: self.data_dir(),
            listen: None,
            flags: self.flags.clone(),
            log: self.log.clone(),
        }
    }
}

/// Sends a control command (on a blocking thread).
pub async fn control(socket: &Path, command: &str) -> Result<Value> {
    let (path, line) = (socket.to_path_buf(), command.to_string());
    tokio::task::spawn_blocking(move || crate::control::request(&path, &line))
        .await
        .map_err(|e| HarnessError::Task(e.to_string()))?
        .map_err(|source| HarnessError::Control {
            socket: socket.to_path_buf(),
            command: command.to_string(),
            source,
        })
}

/// Creates `dir` as an operator would, and makes its entry durable
/// (mkdir, then fsync its parent): the server creates its data directory
/// itself when missing but never fsyncs the parent.
pub fn prepare_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        std::fs::create_dir(dir)
            .map_err(|e| HarnessError::io(format!("mkdir {}", dir.display()), e))?;
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| HarnessError::io(format!("fsync {}", parent.display()), e))
}

/// [`prepare_dir`] for the target's data directory.
pub fn prepare_data_dir(target: &Target) -> Result<()> {
    prepare_dir(&target.data_dir())
}

/// Waits until `path` (from the mount's root) is in the durable image.
pub async fn wait_durable(socket: &Path, path: &str, limit: Duration) -> Result<bool> {
    let started = tokio::time::Instant::now();
    loop {
        if !control(socket, &format!("durable {path}")).await?.is_null() {
            return Ok(true);
        }
        if started.elapsed() > limit {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How to run the same choices again: the harness's own choices (write
/// times, cuts, torn writes, moves) come from the seed; the server's
/// timing does not, so a replay strikes at similar, not identical, moments.
pub fn replay_hint(seed: u64) -> String {
    format!("replay with SEED={seed} (runnel-faultfs --seed {seed})")
}
