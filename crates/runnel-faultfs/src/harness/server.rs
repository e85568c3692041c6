//! The server under test as a child process: started on a free port with
//! its data directory on the mount, waited for until `/health` answers,
//! and killed with SIGKILL. Its output goes to one log file for the run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::Client;
use tokio::process::{Child, Command};

/// How long a (re)start, recovery included, may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct ServerSpec {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    /// Appended after `serve --data-dir D --listen A`.
    pub flags: Vec<String>,
    pub log: PathBuf,
}

pub struct Server {
    child: Child,
    pub base: String,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The last `n` lines of the server log, for error messages.
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    /// Starts the server and waits until `/health` answers 200.
    pub async fn start(spec: &ServerSpec, client: &Client, label: &str) -> Result<Server, String> {
        let port = free_port().map_err(|e| format!("finding a free port: {e}"))?;
        let listen = format!("127.0.0.1:{port}");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| format!("opening {}: {e}", spec.log.display()))?;
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
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
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
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", spec.binary.display()))?;
        let base = format!("http://{listen}");
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "the server exited during start ({status}); its log ends:\n{}",
                    log_tail(&spec.log, 15)
                ));
            }
            let health = client
                .get(format!("{base}/health"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if health.is_ok_and(|r| r.status().is_success()) {
                return Ok(Server { child, base });
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.start_kill();
                return Err(format!(
                    "the server did not answer /health within {START_TIMEOUT:?}; its log ends:\n{}",
                    log_tail(&spec.log, 15)
                ));
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
