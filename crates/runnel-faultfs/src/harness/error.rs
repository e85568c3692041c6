//! Why a test could not run to a verdict: the harness's own failures
//! (the control socket, starting a server, a request it needed answered),
//! as opposed to what the server did wrong, which is a
//! [`super::verdict::Violation`].

use std::path::PathBuf;
use std::time::Duration;

/// A failure of the harness, or of a step it cannot go on without.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("control socket {socket}: {command}: {source}")]
    Control {
        socket: PathBuf,
        command: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("{label}: the server exited during start ({status}); its log ends:\n{log_tail}")]
    ExitedAtStart {
        label: String,
        status: String,
        log_tail: String,
    },
    #[error(
        "{label}: the server did not answer /health within {within:?}; its log ends:\n{log_tail}"
    )]
    NoHealth {
        label: String,
        within: Duration,
        log_tail: String,
    },
    /// A request the harness needs answered got no answer.
    #[error("{what}: {reason}")]
    Request { what: String, reason: String },
    /// A request the harness needs got an answer it cannot go on with.
    #[error("{what}: answered {status}, expected {expected}")]
    Answer {
        what: String,
        status: u16,
        expected: String,
    },
    #[error(
        "the nodes did not agree on a leader for every group within {within:?} (last: {last})"
    )]
    NoLeaders { within: Duration, last: String },
    #[error("{0} did not finish within {1:?}")]
    Timeout(String, Duration),
    #[error("a client task failed: {0}")]
    Task(String),
    /// `runnel ctl` could not be run at all (not: it failed).
    #[error("running {binary} ctl: {source}")]
    Ctl {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Setup(String),
}

impl HarnessError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> HarnessError {
        HarnessError::Io {
            what: what.into(),
            source,
        }
    }

    pub fn request(what: impl Into<String>, reason: impl std::fmt::Display) -> HarnessError {
        HarnessError::Request {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, HarnessError>;
