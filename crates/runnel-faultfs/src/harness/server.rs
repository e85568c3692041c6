//! The server under test as a child process: started on a free port (or a
//! given address, for a cluster node) with its data directory on the
//! mount, waited for until `/health` answers, and killed with SIGKILL.
//! Its output goes to one log file for the run (per node in a cluster).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::Client;
use tokio::process::{Child, Command};

use super::error::{HarnessError, Result};

/// How long a (re)start, recovery included, may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct ServerSpec {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    /// `HOST:PORT` to listen on; `None`: a free port on 127.0.0.1.
    pub listen: Option<String>,
    /// Appended after `serve --data-dir D --listen A`.
    pub flags: Vec<String>,
    pub log: PathBuf,
}

pub struct Server {
    child: Child,
    pub base: String,
}

/// Ports servers are started on: below the kernel's ephemeral range, whose
/// ports other tests' client connections take meanwhile (a load test's
/// thousands of them), so that a port found free stays free until the
/// server binds it (see `scripts/free-ports.sh`).
const PORTS: std::ops::Range<u16> = 20_000..32_000;

fn is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> std::io::Result<u16> {
    free_ports(1)
}

/// A free port on 127.0.0.1 whose next port is free too (a cluster node's
/// Raft port is its HTTP port plus one).
pub fn free_port_pair() -> std::io::Result<u16> {
    free_ports(2)
}

/// A port of [`PORTS`] with the `run - 1` ports after it free too.
fn free_ports(run: u16) -> std::io::Result<u16> {
    use rand::Rng;
    for _ in 0..1000 {
        let port = rand::thread_rng().gen_range(PORTS.start..PORTS.end - run);
        if (port..port + run).all(is_free) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "no free ports below the ephemeral range",
    ))
}

/// The last `n` lines of the server log, for error messages.
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    /// Starts the server and waits until `/health` answers 200.
    pub async fn start(spec: &ServerSpec, client: &Client, label: &str) -> Result<Server> {
        let mut server = Server::spawn(spec, label)?;
        server.wait_healthy(client, &spec.log, label).await?;
        Ok(server)
    }

    /// Starts the server without waiting for it.
    pub fn spawn(spec: &ServerSpec, label: &str) -> Result<Server> {
        let listen = match &spec.listen {
            Some(listen) => listen.clone(),
            None => {
                let port = free_port().map_err(|e| HarnessError::io("finding a free port", e))?;
                format!("127.0.0.1:{port}")
            }
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| HarnessError::io(format!("opening {}", spec.log.display()), e))?;
        use std::io::Write;
        let _ = writeln!(
            &log,
            "===== {label}: {} serve on {listen}",
            spec.binary.display()
        );
        let mut command = Command::new(&spec.binary);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&spec.data_dir)
            .arg("--listen")
            .arg(&listen)
            .args(&spec.flags)
            .env(
                "RUNNEL_LOG",
                std::env::var("RUNNEL_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|e| HarnessError::io(format!("{}", spec.log.display()), e))?,
            )
            .stderr(log)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; between fork and exec it
        // only asks the kernel to SIGKILL the child if the harness dies, so
        // no server outlives an interrupted run holding the mount busy.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|source| HarnessError::Spawn {
            binary: spec.binary.clone(),
            source,
        })?;
        Ok(Server {
            child,
            base: format!("http://{listen}"),
        })
    }

    /// Waits until `/health` answers 200 (`log`: the server's log, quoted
    /// if it does not).
    pub async fn wait_healthy(&mut self, client: &Client, log: &Path, label: &str) -> Result<()> {
        let started = Instant::now();
        let child = &mut self.child;
        let base = &self.base;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(HarnessError::ExitedAtStart {
                    label: label.to_string(),
                    status: status.to_string(),
                    log_tail: log_tail(log, 15),
                });
            }
            let health = client
                .get(format!("{base}/health"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if health.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.start_kill();
                return Err(HarnessError::NoHealth {
                    label: label.to_string(),
                    within: START_TIMEOUT,
                    log_tail: log_tail(log, 15),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// CPU seconds (user, system) the process has used, from /proc.
    pub fn cpu_seconds(&self) -> Option<(f64, f64)> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()?)).ok()?;
        // Fields after the parenthesised command name; utime and stime
        // are the 14th and 15th fields of the line.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let user: f64 = fields.get(11)?.parse().ok()?;
        let system: f64 = fields.get(12)?.parse().ok()?;
        Some((user / ticks, system / ticks))
    }

    /// SIGKILL, and wait for the process to go.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}
