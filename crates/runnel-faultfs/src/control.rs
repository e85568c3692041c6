//! The control socket: how a harness outside the mount cuts power, revives
//! the file system, injects faults and reads counters.
//!
//! A Unix stream socket (its path given at mount time) takes one command
//! per line and answers each with one line: `ok JSON` or `err MESSAGE`.
//!
//! | command | effect | answer |
//! |---|---|---|
//! | `power-cut` | dead from now on (every operation `EIO`); the current image becomes the durable one | the cut's report |
//! | `power-cut torn SEED` | the same, but one file's last unsynced write survives torn (file and prefix chosen by `SEED`) | the cut's report |
//! | `power-cut-if-unsynced [torn SEED]` | the same as `power-cut`, but only if the cut would drop written data (bytes not zero that were never made durable); otherwise nothing happens | the cut's report, or `null` when nothing was cut |
//! | `power-cut-at-write SUBSTRING [torn SEED]` | arms a cut for the next write to a path containing `SUBSTRING`: the write reaches the current image, power fails, the write returns `EIO` (with `torn`, a prefix of that write survives); `stats` shows `alive: false` once it fired | `null` |
//! | `revive` | operations work again | `null` |
//! | `fail-write EIO\|ENOSPC [SUBSTRING]` | writes, fallocates and growing truncates of paths containing `SUBSTRING` (all paths without it) fail | `null` |
//! | `fail-fsync EIO [SUBSTRING]` | fsyncs of matching files and directories fail (and forget the unsynced data) | `null` |
//! | `clear-faults` | no more injected failures (and no armed cut) | `null` |
//! | `stats` | | counters, faults, the last cut's report, and `unsynced_written_bytes` (what a cut now would drop of written data) |
//! | `durable PATH` | | `{"kind","size"}` of `PATH` (from the mount's root, `/data/log`) in the durable image, or `null` |
//! | `shutdown` | unmounts and exits | `null` |
//!
//! `runnel-faultfs ctl SOCKET COMMAND...` sends one command from a shell.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fs::{lock, SharedModel};
use crate::model::{ArmedCut, Fault, FaultOp, Ino};

/// A control command that does not parse.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown errno {name:?}: one of {allowed}")]
    UnknownErrno { name: String, allowed: String },
    #[error("expected ERRNO [PATH-SUBSTRING]")]
    FaultUsage,
    #[error("bad seed {0:?}")]
    BadSeed(String),
    #[error("unknown command {0:?}")]
    Unknown(String),
}

/// A parsed control command.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    PowerCut {
        torn_seed: Option<u64>,
    },
    /// Cut only if the cut would drop written data.
    PowerCutIfUnsynced {
        torn_seed: Option<u64>,
    },
    PowerCutAtWrite(ArmedCut),
    Revive,
    Fail(Fault),
    ClearFaults,
    Stats,
    Durable(String),
    Shutdown,
}

fn errno_named(name: &str, allowed: &[(&str, i32)]) -> Result<i32, ParseError> {
    allowed
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, e)| *e)
        .ok_or_else(|| {
            let names: Vec<_> = allowed.iter().map(|(n, _)| *n).collect();
            ParseError::UnknownErrno {
                name: name.to_string(),
                allowed: names.join(", "),
            }
        })
}

fn seed(word: &str) -> Result<u64, ParseError> {
    word.parse()
        .map_err(|_| ParseError::BadSeed(word.to_string()))
}

impl Command {
    pub fn parse(line: &str) -> Result<Command, ParseError> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let fault = |op, allowed: &[(&str, i32)], rest: &[&str]| -> Result<Command, ParseError> {
            let (name, path) = match rest {
                [name] => (*name, None),
                [name, path] => (*name, Some(path.to_string())),
                _ => return Err(ParseError::FaultUsage),
            };
            Ok(Command::Fail(Fault {
                op,
                errno: errno_named(name, allowed)?,
                path,
            }))
        };
        match words.as_slice() {
            ["power-cut"] => Ok(Command::PowerCut { torn_seed: None }),
            ["power-cut", "torn", word] => Ok(Command::PowerCut {
                torn_seed: Some(seed(word)?),
            }),
            ["power-cut-if-unsynced"] => Ok(Command::PowerCutIfUnsynced { torn_seed: None }),
            ["power-cut-if-unsynced", "torn", word] => Ok(Command::PowerCutIfUnsynced {
                torn_seed: Some(seed(word)?),
            }),
            ["power-cut-at-write", path] => Ok(Command::PowerCutAtWrite(ArmedCut {
                path: path.to_string(),
                torn_seed: None,
            })),
            ["power-cut-at-write", path, "torn", word] => Ok(Command::PowerCutAtWrite(ArmedCut {
                path: path.to_string(),
                torn_seed: Some(seed(word)?),
            })),
            ["revive"] => Ok(Command::Revive),
            ["fail-write", rest @ ..] => fault(
                FaultOp::Write,
                &[("EIO", libc::EIO), ("ENOSPC", libc::ENOSPC)],
                rest,
            ),
            ["fail-fsync", rest @ ..] => fault(FaultOp::Fsync, &[("EIO", libc::EIO)], rest),
            ["clear-faults"] => Ok(Command::ClearFaults),
            ["stats"] => Ok(Command::Stats),
            ["durable", path] => Ok(Command::Durable(path.to_string())),
            ["shutdown"] => Ok(Command::Shutdown),
            _ => Err(ParseError::Unknown(line.to_string())),
        }
    }
}

/// What the socket does besides changing the model.
pub struct Hooks {
    /// After a power cut, outside the model's lock, with every inode: drop
    /// the kernel's cached pages and attributes of each.
    pub after_cut: crate::fs::AfterCut,
    /// `shutdown`: unmount.
    pub shutdown: Box<dyn Fn() + Send + Sync>,
}

impl Hooks {
    pub fn none() -> Hooks {
        Hooks {
            after_cut: Arc::new(|_: &[Ino]| {}),
            shutdown: Box::new(|| {}),
        }
    }
}

/// Runs `command` against the model. `Shutdown` is the caller's to do.
pub fn execute(model: &SharedModel, command: Command, hooks: &Hooks) -> Value {
    let mut m = lock(model);
    match command {
        Command::PowerCut { torn_seed } => {
            let report = m.power_cut(torn_seed);
            let inodes = m.inodes();
            drop(m);
            (hooks.after_cut)(&inodes);
            json!(report)
        }
        Command::PowerCutIfUnsynced { torn_seed } => match m.power_cut_if_unsynced(torn_seed) {
            Some(report) => {
                let inodes = m.inodes();
                drop(m);
                (hooks.after_cut)(&inodes);
                json!(report)
            }
            None => Value::Null,
        },
        Command::PowerCutAtWrite(cut) => {
            m.arm_cut(cut);
            Value::Null
        }
        Command::Revive => {
            m.revive();
            Value::Null
        }
        Command::Fail(fault) => {
            m.add_fault(fault);
            Value::Null
        }
        Command::ClearFaults => {
            m.clear_faults();
            Value::Null
        }
        Command::Stats => {
            let mut stats = json!(m.stats());
            stats["unsynced_written_bytes"] = json!(m.unsynced_written_bytes());
            stats
        }
        Command::Durable(path) => match m.durable_entry(&path) {
            Some((kind, size)) => json!({ "kind": kind, "size": size }),
            None => Value::Null,
        },
        Command::Shutdown => Value::Null,
    }
}

/// Serves the socket at `path` (replacing a stale one) on background
/// threads.
pub fn serve(path: &Path, model: SharedModel, hooks: Arc<Hooks>) -> io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::thread::Builder::new()
        .name("faultfs-control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (model, hooks) = (Arc::clone(&model), Arc::clone(&hooks));
                let _ = std::thread::Builder::new()
                    .name("faultfs-control-conn".into())
                    .spawn(move || {
                        let _ = handle(stream, &model, &hooks);
                    });
            }
        })?;
    Ok(())
}

fn handle(stream: UnixStream, model: &SharedModel, hooks: &Hooks) -> io::Result<()> {
    let mut writer = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let (answer, shutdown) = match Command::parse(&line) {
            Ok(command) => {
                let shutdown = command == Command::Shutdown;
                (format!("ok {}\n", execute(model, command, hooks)), shutdown)
            }
            Err(message) => (format!("err {message}\n"), false),
        };
        writer.write_all(answer.as_bytes())?;
        if shutdown {
            (hooks.shutdown)();
        }
    }
    Ok(())
}

/// Sends one command and returns the answer's JSON, or the `err` message
/// as an error.
pub fn request(socket: &Path, command: &str) -> io::Result<Value> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    (&stream).write_all(format!("{command}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let line = line.trim_end();
    if let Some(json) = line.strip_prefix("ok ") {
        serde_json::from_str(json).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    } else if let Some(message) = line.strip_prefix("err ") {
        Err(io::Error::other(format!("{command}: {message}")))
    } else {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{command}: no answer from the control socket"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(
            Command::parse("power-cut torn 7"),
            Ok(Command::PowerCut { torn_seed: Some(7) })
        );
        assert_eq!(
            Command::parse("fail-write ENOSPC /log/"),
            Ok(Command::Fail(Fault {
                op: FaultOp::Write,
                errno: libc::ENOSPC,
                path: Some("/log/".into())
            }))
        );
        assert_eq!(
            Command::parse("fail-fsync eio"),
            Ok(Command::Fail(Fault {
                op: FaultOp::Fsync,
                errno: libc::EIO,
                path: None
            }))
        );
        assert_eq!(
            Command::parse("power-cut-if-unsynced torn 9"),
            Ok(Command::PowerCutIfUnsynced { torn_seed: Some(9) })
        );
        assert!(Command::parse("fail-fsync ENOSPC").is_err());
        assert!(Command::parse("power-cut torn x").is_err());
        assert!(Command::parse("reboot").is_err());
    }

    #[test]
    fn the_socket_answers_one_line_per_command() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("ctl");
        let model: SharedModel = Arc::new(std::sync::Mutex::new(crate::model::Model::new(
            1 << 20,
            0,
            0,
        )));
        serve(&socket, Arc::clone(&model), Arc::new(Hooks::none())).unwrap();
        assert_eq!(request(&socket, "fail-fsync EIO").unwrap(), Value::Null);
        // Nothing written: a conditional cut does nothing.
        assert_eq!(
            request(&socket, "power-cut-if-unsynced").unwrap(),
            Value::Null
        );
        let cut = request(&socket, "power-cut").unwrap();
        assert_eq!(cut["bytes_dropped"], 0);
        let stats = request(&socket, "stats").unwrap();
        assert_eq!(stats["alive"], false);
        assert_eq!(stats["power_cuts"], 1);
        assert_eq!(stats["faults"][0]["op"], "Fsync");
        assert_eq!(request(&socket, "durable /").unwrap()["kind"], "Dir");
        assert!(request(&socket, "nonsense").is_err());
    }
}
