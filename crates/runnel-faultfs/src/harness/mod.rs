//! The tests that run a real server binary on the mounted file system:
//! [`power_loss`] (cut power mid-write, restart, check every stream) and
//! [`io_errors`] (fail fsyncs or writes, watch the server stop
//! acknowledging, restart, check nothing acknowledged was lost).
//!
//! The file system is mounted by a separate `runnel-faultfs mount` process
//! (see `scripts/power-loss.sh`) and driven through its control socket.

pub mod check;
pub mod client;
pub mod io_errors;
pub mod power_loss;
pub mod server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Client;
use serde_json::Value;

use check::Writer;

/// What both tests are given.
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
            flags: self.flags.clone(),
            log: self.log.clone(),
        }
    }
}

/// Sends a control command (on a blocking thread).
pub async fn control(socket: &Path, command: &str) -> Result<Value, String> {
    let (socket, command) = (socket.to_path_buf(), command.to_string());
    tokio::task::spawn_blocking(move || crate::control::request(&socket, &command))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("control socket: {e}"))
}

/// Creates the data directory as an operator would, and makes its entry
/// durable (mkdir, then fsync the mount's root): the server creates the
/// directory itself when missing but never fsyncs its parent.
pub fn prepare_data_dir(target: &Target) -> Result<(), String> {
    let data = target.data_dir();
    if !data.exists() {
        std::fs::create_dir(&data).map_err(|e| format!("mkdir {}: {e}", data.display()))?;
    }
    std::fs::File::open(&target.mount)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("fsync {}: {e}", target.mount.display()))
}

/// Waits until `path` (from the mount's root) is in the durable image.
pub async fn wait_durable(socket: &Path, path: &str, limit: Duration) -> Result<bool, String> {
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

/// The outcome of reading every stream back.
#[derive(Debug, Default)]
pub struct Verified {
    pub violations: Vec<String>,
    pub landed: usize,
    pub missing: usize,
    pub bytes: usize,
}

/// Reads each stream back and checks it against its writers' histories.
pub async fn verify(
    client: &Client,
    base: &str,
    streams: &[String],
    writers: &mut [Writer],
) -> Verified {
    let mut out = Verified::default();
    for stream in streams {
        let bytes = match client::read_all(client, base, stream).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                let acked: usize = writers
                    .iter()
                    .filter(|w| &w.stream == stream)
                    .map(Writer::acked)
                    .sum();
                out.violations.push(format!(
                    "stream {stream} is gone (404), and with it {acked} acknowledged appends"
                ));
                continue;
            }
            Err(e) => {
                out.violations.push(format!("reading stream {stream}: {e}"));
                continue;
            }
        };
        out.bytes += bytes.len();
        let mut mine: Vec<&mut Writer> =
            writers.iter_mut().filter(|w| &w.stream == stream).collect();
        let verdict = check::check_stream(stream, &bytes, &mut mine);
        out.violations.extend(verdict.violations);
        out.landed += verdict.landed;
        out.missing += verdict.missing;
    }
    out
}

/// Short text for a power cut's report: bytes dropped, lost entries, torn.
pub fn describe_cut(cut: &Value) -> String {
    let mut text = format!("dropped {} B", cut["bytes_dropped"]);
    let list = |key: &str| -> Vec<String> {
        cut[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let lost = list("lost_paths");
    if !lost.is_empty() {
        text += &format!(", lost entries {}", lost.join(" "));
    }
    let restored = list("restored_paths");
    if !restored.is_empty() {
        text += &format!(", restored entries {}", restored.join(" "));
    }
    if let Some(torn) = cut["torn"].as_object() {
        text += &format!(
            ", torn {}@{} kept {}/{} B",
            torn["path"].as_str().unwrap_or("?"),
            torn["offset"],
            torn["kept"],
            torn["len"]
        );
    }
    text
}

/// Prints at most `n` violations, indented.
pub fn print_violations(violations: &[String], n: usize) {
    for v in violations.iter().take(n) {
        println!("    VIOLATION: {v}");
    }
    if violations.len() > n {
        println!("    ... and {} more", violations.len() - n);
    }
}
