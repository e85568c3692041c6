//! The `runnel-faultfs` command: `mount` the file system, send `ctl`
//! commands to a mounted one, or run the `power-loss`,
//! `cluster-power-loss` and `io-errors` tests against a server binary on
//! a mounted one. Exit status: 0 the test passed, 1 it failed (its
//! `VIOLATION`/`UNTESTED` lines say why), 2 it could not run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use runnel_faultfs::harness::{cluster, error::HarnessError, io_errors, power_loss, Target};
use runnel_faultfs::{control, fs, model};

#[derive(Parser)]
#[command(
    name = "runnel-faultfs",
    about = "A FUSE file system that loses power like a disk, and Runnel's power-loss tests on it"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount the file system (empty) and serve it until `ctl SOCKET
    /// shutdown`, SIGTERM or SIGINT. Needs root (or CAP_SYS_ADMIN) and
    /// /dev/fuse.
    Mount {
        mountpoint: PathBuf,
        /// The control socket to create.
        #[arg(long)]
        control: PathBuf,
        /// Size the file system reports; writes past it get ENOSPC.
        #[arg(long, default_value_t = 8 << 30)]
        capacity_bytes: u64,
        /// Threads answering the kernel.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Send one control command (power-cut [torn SEED],
    /// power-cut-at-write SUBSTRING [torn SEED], revive,
    /// fail-write EIO|ENOSPC [SUBSTRING], fail-fsync EIO [SUBSTRING],
    /// clear-faults, stats, durable PATH, shutdown) and print the answer.
    Ctl {
        control: PathBuf,
        #[arg(required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Cycles of writes, power cut, SIGKILL, restart and a full check.
    PowerLoss {
        #[command(flatten)]
        target: TargetArgs,
        /// At least 1.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
        cycles: u64,
        /// Seeds the write times, torn writes and cut choices (default: the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 3)]
        streams: usize,
        #[arg(long, default_value_t = 200)]
        min_write_ms: u64,
        #[arg(long, default_value_t = 2000)]
        max_write_ms: u64,
        /// Percent of power cuts that strike during a write to a log segment
        /// and keep a torn prefix of it; the rest are instant, half of them
        /// keeping a torn prefix of some file's last unsynced write.
        #[arg(long, default_value_t = 50)]
        torn_percent: u32,
        /// Each writer rests a random time up to this between appends.
        #[arg(long, default_value_t = 4)]
        pause_ms: u64,
        /// Writers of the stream made each cycle and deleted the next (more
        /// than the other streams' writers: most of each segment dies, so
        /// checkpoints compact and delete segments).
        #[arg(long, default_value_t = 12)]
        ephemeral_writers: usize,
        /// Create the data directory (and sync its parent) for the server,
        /// for servers that create it without syncing the parent (Runnel
        /// before it synced new directories lost everything at the first
        /// cut without this).
        #[arg(long)]
        prepare_data_dir: bool,
        /// Cut power only once the server's log directory is durable, for
        /// servers that create it without syncing the data directory.
        #[arg(long)]
        wait_log_dir: bool,
        #[arg(long, default_value_t = 120)]
        cycle_timeout_secs: u64,
    },
    /// A 3-node cluster on loopback, node 3 on the mount: cycles of
    /// writes through every node, a replica move onto or off node 3 with
    /// its power cut in the middle, SIGKILL, restart, the move finished
    /// with `runnel ctl node move`, and a full check through every node.
    ClusterPowerLoss {
        #[command(flatten)]
        target: TargetArgs,
        /// The other nodes' data directories and every node's log.
        #[arg(long)]
        workdir: PathBuf,
        /// At least 1.
        #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..))]
        cycles: u64,
        /// Seeds the write times, moves, phases and cuts (default: the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 6)]
        streams: usize,
        #[arg(long, default_value_t = 300)]
        min_write_ms: u64,
        #[arg(long, default_value_t = 800)]
        max_write_ms: u64,
        #[arg(long, default_value_t = 4)]
        pause_ms: u64,
        #[arg(long, default_value_t = 90)]
        cycle_timeout_secs: u64,
    },
    /// Fail the log's fsyncs, then its writes (ENOSPC, EIO): the server
    /// must stop acknowledging and lose nothing acknowledged.
    IoErrors {
        #[command(flatten)]
        target: TargetArgs,
        #[arg(long, default_value_t = 2)]
        streams: usize,
        /// Go through the faults this many times.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
}

#[derive(Args)]
struct TargetArgs {
    /// The runnel binary to test.
    #[arg(long)]
    binary: PathBuf,
    /// A fresh runnel-faultfs mount (the server's data goes to MOUNT/data).
    #[arg(long)]
    mount: PathBuf,
    /// The mount's control socket.
    #[arg(long)]
    control: PathBuf,
    /// Where the server's output goes (appended).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Extra `serve` flags.
    #[arg(last = true)]
    serve_flags: Vec<String>,
}

impl TargetArgs {
    fn target(self) -> Target {
        let log = self.log.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("runnel-faultfs-server-{}.log", std::process::id()))
        });
        Target {
            binary: self.binary,
            mount: self.mount,
            control: self.control,
            log,
            flags: self.serve_flags,
        }
    }
}

fn main() {
    let code = match Cli::parse().command {
        Cmd::Mount {
            mountpoint,
            control,
            capacity_bytes,
            threads,
        } => report(mount(&mountpoint, &control, capacity_bytes, threads)),
        Cmd::Ctl { control, command } => match control::request(&control, &command.join(" ")) {
            Ok(answer) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&answer).unwrap_or_default()
                );
                0
            }
            Err(e) => {
                eprintln!("runnel-faultfs: {e}");
                1
            }
        },
        Cmd::PowerLoss {
            target,
            cycles,
            seed,
            streams,
            min_write_ms,
            max_write_ms,
            torn_percent,
            pause_ms,
            ephemeral_writers,
            prepare_data_dir,
            wait_log_dir,
            cycle_timeout_secs,
        } => {
            let opts = power_loss::Options {
                target: target.target(),
                cycles: cycles as usize,
                seed: seed.unwrap_or_else(clock_seed),
                streams: streams.max(1),
                write_ms: (min_write_ms, max_write_ms.max(min_write_ms)),
                torn_percent: torn_percent.min(100),
                pause: Duration::from_millis(pause_ms),
                ephemeral_writers,
                prepare_data_dir,
                wait_log_dir,
                cycle_timeout: Duration::from_secs(cycle_timeout_secs),
            };
            exit_code(runtime().block_on(power_loss::run(opts)))
        }
        Cmd::ClusterPowerLoss {
            target,
            workdir,
            cycles,
            seed,
            streams,
            min_write_ms,
            max_write_ms,
            pause_ms,
            cycle_timeout_secs,
        } => {
            let target = target.target();
            let opts = cluster::Options {
                binary: target.binary,
                mount: target.mount,
                control: target.control,
                workdir,
                flags: target.flags,
                cycles: cycles as usize,
                seed: seed.unwrap_or_else(clock_seed),
                streams: streams.max(1),
                write_ms: (min_write_ms, max_write_ms.max(min_write_ms)),
                pause: Duration::from_millis(pause_ms),
                cycle_timeout: Duration::from_secs(cycle_timeout_secs),
            };
            exit_code(runtime().block_on(cluster::run(opts)))
        }
        Cmd::IoErrors {
            target,
            streams,
            rounds,
        } => {
            let opts = io_errors::Options {
                target: target.target(),
                streams: streams.max(1),
                before: Duration::from_millis(700),
                during: Duration::from_secs(2),
                rounds,
            };
            exit_code(runtime().block_on(io_errors::run(opts)))
        }
    };
    std::process::exit(code);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A seed from the clock, for runs not given one (each run prints its seed).
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// 0: passed; 1: failed (the verdict lines say why); 2: could not run.
fn exit_code(result: Result<bool, HarnessError>) -> i32 {
    match result {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("runnel-faultfs: {e}");
            2
        }
    }
}

fn report(result: std::io::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("runnel-faultfs: {e}");
            1
        }
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it
/// starts later; [`wait_for_signal`] takes them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-set calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) {
    let mut sig = 0;
    // SAFETY: `set` is a valid signal set; `sig` receives the signal.
    unsafe {
        libc::sigwait(set, &mut sig);
    }
}

fn mount(mountpoint: &Path, socket: &Path, capacity: u64, threads: usize) -> std::io::Result<()> {
    if !mountpoint.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            mountpoint.display()
        )));
    }
    let signals = block_signals();
    // SAFETY: geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let model: fs::SharedModel = Arc::new(Mutex::new(model::Model::new(capacity, uid, gid)));
    let (mut session, after_cut) = fs::mount(Arc::clone(&model), mountpoint, threads)?;
    let unmounter = Arc::new(Mutex::new(session.unmount_callable()));
    let path = mountpoint.to_path_buf();
    let shutdown = move || {
        let result = unmounter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unmount();
        if let Err(e) = result {
            eprintln!(
                "runnel-faultfs: unmounting {}: {e}; detaching it",
                path.display()
            );
            if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
                // SAFETY: a valid NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        // A detached mount still in use keeps the session open: do not wait.
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(3));
            std::process::exit(0);
        });
    };
    let hooks = Arc::new(control::Hooks {
        // Processes that keep files open across a cut (the server is
        // killed, but anything else) must not read pages the cut dropped.
        after_cut,
        shutdown: Box::new(shutdown),
    });
    control::serve(socket, model, Arc::clone(&hooks))?;
    std::thread::Builder::new()
        .name("faultfs-signals".into())
        .spawn(move || {
            wait_for_signal(&signals);
            (hooks.shutdown)();
        })?;
    println!(
        "runnel-faultfs: mounted {} (control socket {})",
        mountpoint.display(),
        socket.display()
    );
    session.run()?;
    let _ = std::fs::remove_file(socket);
    Ok(())
}
