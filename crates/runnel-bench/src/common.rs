//! What every workload shares: target and output flags, setup helpers,
//! progress on stderr, writing results.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::ApiStyle;
use crate::client::{Connection, Target};
use crate::stats::{process_cpu_secs, BenchResult, Counts, Latency};
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Server URL(s), comma separated; clients go round robin over them.
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    pub target: String,
    /// Which API the server speaks.
    #[arg(long, value_enum, default_value = "runnel")]
    pub api_style: ApiStyle,
    /// Name of the system in results and charts (default: the API style).
    #[arg(long)]
    pub label: Option<String>,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Length of the measured phase.
    #[arg(long, default_value_t = 10.0)]
    pub duration_secs: f64,
    /// No progress output on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Bearer token sent with every request (servers with access control).
    #[arg(long, env = "RUNNEL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM file of the CA that signed an https:// target's certificate.
    #[arg(long)]
    pub ca: Option<std::path::PathBuf>,
}

impl CommonArgs {
    pub fn targets(&self) -> Result<Vec<Target>, BenchError> {
        let mut targets = Target::parse_list(&self.target)?;
        for target in &mut targets {
            target.token.clone_from(&self.token);
            if let Some(ca) = &self.ca {
                target.trust(ca)?;
            }
        }
        if targets.is_empty() {
            return Err(BenchError::Usage("--target names no server".into()));
        }
        Ok(targets)
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration_secs.max(0.1))
    }

    pub fn label(&self) -> String {
        self.label.clone().unwrap_or_else(|| {
            serde_json::to_value(self.api_style)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
    }
}

/// A name prefix unique to this run, so repeated runs never collide.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{:x}", nanos % (1u128 << 48))
}

/// Microseconds since the Unix epoch (payload timestamps).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

/// Creates `names` with up to 32 connections in parallel.
pub async fn create_streams(
    targets: &[Target],
    style: ApiStyle,
    names: &[String],
    content_type: &str,
) -> Result<(), BenchError> {
    let mut setup = Connection::open(&targets[0]).await?;
    style.prepare(&mut setup).await?;
    let parallel = 32.min(names.len().max(1));
    let mut tasks = Vec::new();
    for lane in 0..parallel {
        let mine: Vec<String> = names.iter().skip(lane).step_by(parallel).cloned().collect();
        let target = targets[lane % targets.len()].clone();
        let content_type = content_type.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::open(&target).await?;
            for name in mine {
                style.create_stream(&mut conn, &name, &content_type).await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| BenchError::Setup(e.to_string()))??;
    }
    Ok(())
}

/// Prints a progress line each second until dropped.
pub struct Progress {
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    pub fn start(
        quiet: bool,
        what: &'static str,
        done: Arc<AtomicU64>,
        total: Duration,
    ) -> Progress {
        let task = tokio::spawn(async move {
            if quiet {
                return;
            }
            let start = Instant::now();
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = done.load(Ordering::Relaxed);
                eprint!(
                    "\r[{:>4.0}/{:.0}s] {what}: {now} ({}/s)     ",
                    start.elapsed().as_secs_f64(),
                    total.as_secs_f64(),
                    now - last
                );
                last = now;
            }
        });
        Progress { task }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        eprintln!();
    }
}

/// Assembles, prints and (with `--json`) writes a result.
#[allow(clippy::too_many_arguments)]
pub fn finish(
    common: &CommonArgs,
    workload: &str,
    size: u64,
    params: serde_json::Value,
    elapsed: Duration,
    counts: Counts,
    operations: u64,
    latency: &Latency,
    bytes_received: u64,
    cpu_at_start: f64,
) -> Result<BenchResult, BenchError> {
    let cpu = process_cpu_secs() - cpu_at_start;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let result = BenchResult {
        workload: workload.to_string(),
        system: common.label(),
        api_style: common.api_style,
        targets: common.target.split(',').map(str::to_string).collect(),
        size,
        params,
        elapsed_secs: secs,
        counts,
        throughput_per_sec: operations as f64 / secs,
        latency: latency.summary(),
        bytes_received,
        client_cpu_secs: cpu,
        client_cpu_cores: cpu / secs,
        intervals: Vec::new(),
    };
    result.print();
    write_json(common, &result)?;
    Ok(result)
}

/// Writes `result` to `--json`, if given.
pub fn write_json(common: &CommonArgs, result: &BenchResult) -> Result<(), BenchError> {
    if let Some(path) = &common.json {
        let text = serde_json::to_string_pretty(result).expect("results serialize");
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}

/// Where readers connect: the cache at `via` (with the targets' token), or
/// the targets themselves.
pub fn reader_targets(targets: &[Target], via: Option<&str>) -> Result<Vec<Target>, BenchError> {
    let Some(via) = via else {
        return Ok(targets.to_vec());
    };
    let mut via = Target::parse(via)?;
    via.token.clone_from(&targets[0].token);
    Ok(vec![via])
}

/// Raises the open-file limit to the hard limit (thousands of sockets).
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// A payload of `len` bytes that starts with `prefix` and ends in `\n`.
pub fn padded_payload(prefix: &str, len: usize) -> Vec<u8> {
    let mut out = prefix.as_bytes().to_vec();
    let target = len.max(out.len() + 1);
    out.resize(target - 1, b'x');
    out.push(b'\n');
    out
}
