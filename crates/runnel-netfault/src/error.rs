//! Why the harness could not run to a verdict (as opposed to what the
//! cluster did wrong, which the report's `ANOMALY` lines say).

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum NetfaultError {
    /// A command the harness runs (ip, nft, tc) failed.
    #[error("{command} failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("node {node} exited at start ({status}); see {}", log.display())]
    ExitedAtStart {
        node: u64,
        status: String,
        log: PathBuf,
    },
    #[error("node {node} did not answer {url} within {within:?}; see {}", log.display())]
    NoHealth {
        node: u64,
        url: String,
        within: Duration,
        log: PathBuf,
    },
    #[error(
        "the nodes did not agree on a leader for every group within {within:?} (last: {last})"
    )]
    NoLeaders { within: Duration, last: String },
    #[error("creating {stream}: {last}")]
    Create { stream: String, last: String },
    #[error("reading {what}: {reason}")]
    Read { what: String, reason: String },
    #[error("a client task failed: {0}")]
    Task(String),
}

impl NetfaultError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> NetfaultError {
        NetfaultError::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, NetfaultError>;
