//! `runnel bench log`: the append log alone, without HTTP. W writer
//! threads append fixed-size records and wait for each acknowledgement;
//! reported per engine: appends/s, MB/s and ack latency, and for runnel's
//! log the syncs it made and their mean duration, against which the ack
//! latency reads as a number of syncs.
//!
//! Engines: `runnel` (runnel-log with group commit, or `runnel-nosync`);
//! `runnel-tasks`, the same log with the writers as tokio tasks awaiting
//! the durable position as the server's do, instead of threads; the same
//! two with `-growing` (no preallocated segments: every sync also grows
//! the file), the baseline for what preallocation buys; behind
//! the `walrus` cargo feature `walrus-sync-each`, `walrus-200ms` and
//! `walrus-nofsync` (walrus-rust 0.2.0's fsync schedules); behind the
//! `rocksdb` feature `rocksdb-wal` (RocksDB puts with synced WAL writes).
//! Each engine writes into its own fresh directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use runnel_log::{Log, LogOptions, SyncMode, SyncStats};

use crate::stats::Latency;
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines to run, comma separated (runnel, runnel-growing,
    /// runnel-nosync, runnel-tasks, runnel-tasks-growing, and with
    /// the walrus feature walrus-sync-each, walrus-200ms, walrus-nofsync,
    /// one topic per writer, or walrus-sync-each-shared and
    /// walrus-nofsync-shared, all writers on one topic).
    #[arg(long, default_value = "runnel")]
    pub engines: String,
    /// Writer thread counts, comma separated.
    #[arg(long, default_value = "1,16,64,256")]
    pub writers: String,
    /// Record sizes in bytes, comma separated.
    #[arg(long, default_value = "256,1024")]
    pub record_bytes: String,
    #[arg(long, default_value_t = 5.0)]
    pub duration_secs: f64,
    /// Seconds each run appends before it starts measuring, so engines
    /// are compared in their steady state (runnel's log prepares its
    /// first spare segment in this time).
    #[arg(long, default_value_t = 1.0)]
    pub warmup_secs: f64,
    /// Where the engines write (a fresh subdirectory per run).
    #[arg(long, default_value = "runnel-logbench")]
    pub dir: PathBuf,
    /// Write all results as JSON lines to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One measured configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogResult {
    pub engine: String,
    pub writers: usize,
    pub record_bytes: usize,
    pub appends_per_sec: f64,
    pub mb_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// runnel's log only: syncs per second during the run.
    pub syncs_per_sec: Option<f64>,
    /// runnel's log only: mean duration of one sync (`fdatasync`) during
    /// the run.
    pub mean_sync_ms: Option<f64>,
    /// runnel's log only: the 99th percentile of one sync's duration
    /// during the run (to 10 µs), the floor under the acknowledgements'.
    pub sync_p99_ms: Option<f64>,
}

/// What an engine under test fails an append with (each engine has its
/// own error type; the run only counts that it failed).
type AppendError = Box<dyn std::error::Error + Send + Sync>;

/// A write-ahead log under test: `append` returns once the record is
/// acknowledged as the engine defines it.
trait Engine: Send + Sync {
    fn append(&self, writer: usize, record: &[u8]) -> Result<(), AppendError>;

    /// The engine's sync counts, where it reports them.
    fn sync_stats(&self) -> Option<SyncStats> {
        None
    }
}

pub fn run(args: Args) -> Result<(), BenchError> {
    let parse = |list: &str, what: &str| -> Result<Vec<usize>, BenchError> {
        list.split(',')
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| BenchError::Usage(format!("{what}: {v:?} is not a number")))
            })
            .collect()
    };
    let writers = parse(&args.writers, "--writers")?;
    let sizes = parse(&args.record_bytes, "--record-bytes")?;
    let mut results = Vec::new();
    println!("| engine | writers | record B | appends/s | MB/s | p50 ms | p99 ms | p99.9 ms | syncs/s | mean sync ms | sync p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for engine_name in args.engines.split(',').map(str::trim) {
        for &size in &sizes {
            for &w in &writers {
                let dir = args.dir.join(format!("{engine_name}-{w}-{size}"));
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir)?;
                let window = Window {
                    warmup: Duration::from_secs_f64(args.warmup_secs.max(0.0)),
                    duration: Duration::from_secs_f64(args.duration_secs),
                };
                let (r, engine) = if let Some(variant) = engine_name.strip_prefix("runnel-tasks") {
                    let preallocate = match variant {
                        "" => true,
                        "-growing" => false,
                        _ => {
                            return Err(BenchError::Usage(format!(
                                "unknown engine {engine_name:?}"
                            )))
                        }
                    };
                    let r = measure_tasks(&dir, w, size, window, preallocate)?;
                    (
                        LogResult {
                            engine: engine_name.to_string(),
                            ..r
                        },
                        None,
                    )
                } else {
                    let engine = open_engine(engine_name, &dir)?;
                    let r = measure(engine_name, engine.as_ref(), w, size, window);
                    (r, Some(engine))
                };
                let or_dash = |v: Option<f64>, digits: usize| {
                    v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
                };
                println!(
                    "| {} | {} | {} | {:.0} | {:.1} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
                    r.engine,
                    r.writers,
                    r.record_bytes,
                    r.appends_per_sec,
                    r.mb_per_sec,
                    r.p50_ms,
                    r.p99_ms,
                    r.p999_ms,
                    or_dash(r.syncs_per_sec, 0),
                    or_dash(r.mean_sync_ms, 3),
                    or_dash(r.sync_p99_ms, 2),
                );
                results.push(r);
                drop(engine);
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    if let Some(path) = &args.json {
        let lines: Vec<String> = results
            .iter()
            .map(|r| serde_json::to_string(r).expect("serializes"))
            .collect();
        std::fs::write(path, lines.join("\n") + "\n")?;
    }
    Ok(())
}

/// How long a run appends unmeasured, then measured.
#[derive(Debug, Clone, Copy)]
struct Window {
    warmup: Duration,
    duration: Duration,
}

/// `runnel-tasks`: `writers` tokio tasks on one worker thread per core,
/// each appending and then awaiting a watch of the durable position (the
/// server's engine waits the same way).
fn measure_tasks(
    dir: &Path,
    writers: usize,
    size: usize,
    window: Window,
    preallocate: bool,
) -> Result<LogResult, BenchError> {
    // `None` once the log has failed: the writers stop.
    let (durable_tx, durable_rx) = tokio::sync::watch::channel(Some(0u64));
    let listener = Box::new(move |status: Result<u64, runnel_log::LogError>| {
        durable_tx.send_replace(status.ok());
    });
    let options = LogOptions {
        sync: SyncMode::Batch,
        manual_commit: false,
        preallocate,
        ..LogOptions::default()
    };
    let log = Arc::new(
        Log::open(dir, options, listener, |_| Ok(()))
            .map_err(|e| BenchError::Setup(e.to_string()))?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let record = Arc::new(vec![0x5au8; size]);
    let start = Instant::now() + window.warmup;
    let deadline = start + window.duration;
    let (syncs_before, latencies) = runtime.block_on(async {
        let syncs_at_start = {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                log.sync_stats()
            })
        };
        let tasks: Vec<_> = (0..writers)
            .map(|_| {
                let (log, record, mut durable) =
                    (Arc::clone(&log), Arc::clone(&record), durable_rx.clone());
                tokio::spawn(async move {
                    let mut latency = Latency::default();
                    let mut count = 0u64;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let Ok(at) = log.append(&record) else { break };
                        let acknowledged = durable
                            .wait_for(|d| d.is_none_or(|d| d >= at.end))
                            .await
                            .is_ok_and(|d| d.is_some());
                        if !acknowledged {
                            break;
                        }
                        if t >= start {
                            latency.record(t.elapsed());
                            count += 1;
                        }
                    }
                    (latency, count)
                })
            })
            .collect();
        let mut out: Vec<(Latency, u64)> = Vec::new();
        for task in tasks {
            out.push(task.await.expect("writer task"));
        }
        (syncs_at_start.await.expect("sync stats task"), out)
    });
    let syncs = Some((syncs_before, log.sync_stats()));
    Ok(summarize(
        "runnel-tasks",
        writers,
        size,
        start,
        &latencies,
        syncs,
    ))
}

fn measure(
    name: &str,
    engine: &dyn Engine,
    writers: usize,
    size: usize,
    window: Window,
) -> LogResult {
    let stop = AtomicBool::new(false);
    let record = vec![0x5au8; size];
    let start = Instant::now() + window.warmup;
    let mut syncs_before = None;
    let latencies: Vec<(Latency, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, record) = (&stop, &record);
                scope.spawn(move || {
                    let mut latency = Latency::default();
                    let mut count = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        if engine.append(w, record).is_err() {
                            break;
                        }
                        if t >= start {
                            latency.record(t.elapsed());
                            count += 1;
                        }
                    }
                    (latency, count)
                })
            })
            .collect();
        std::thread::sleep(window.warmup);
        syncs_before = engine.sync_stats();
        std::thread::sleep(window.duration);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect()
    });
    let syncs = syncs_before.zip(engine.sync_stats());
    summarize(name, writers, size, start, &latencies, syncs)
}

fn summarize(
    name: &str,
    writers: usize,
    size: usize,
    start: Instant,
    latencies: &[(Latency, u64)],
    syncs: Option<(SyncStats, SyncStats)>,
) -> LogResult {
    let elapsed = start.elapsed().as_secs_f64();
    let run_syncs = syncs.map(|(before, after)| after.since(&before));
    let synced = run_syncs.as_ref().map(|s| (s.syncs, s.sync_time));
    let mut all = Latency::default();
    let mut total = 0;
    for (l, c) in latencies {
        all.merge(l);
        total += c;
    }
    let s = all.summary();
    LogResult {
        engine: name.to_string(),
        writers,
        record_bytes: size,
        appends_per_sec: total as f64 / elapsed,
        mb_per_sec: total as f64 * size as f64 / elapsed / 1e6,
        p50_ms: s.p50_ms,
        p99_ms: s.p99_ms,
        p999_ms: s.p999_ms,
        syncs_per_sec: synced.map(|(count, _)| count as f64 / elapsed),
        mean_sync_ms: synced
            .filter(|(count, _)| *count > 0)
            .map(|(count, time)| time.as_secs_f64() * 1e3 / count as f64),
        sync_p99_ms: run_syncs
            .and_then(|s| s.quantile(0.99))
            .map(|d| d.as_secs_f64() * 1e3),
    }
}

fn open_engine(name: &str, dir: &Path) -> Result<Box<dyn Engine>, BenchError> {
    match name {
        "runnel" => Ok(Box::new(RunnelLog::open(dir, SyncMode::Batch, true)?)),
        "runnel-growing" => Ok(Box::new(RunnelLog::open(dir, SyncMode::Batch, false)?)),
        "runnel-nosync" => Ok(Box::new(RunnelLog::open(dir, SyncMode::Never, true)?)),
        #[cfg(feature = "walrus")]
        "walrus-sync-each"
        | "walrus-200ms"
        | "walrus-nofsync"
        | "walrus-sync-each-shared"
        | "walrus-nofsync-shared" => Ok(Box::new(walrus::WalrusLog::open(name, dir)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb-wal" => Ok(Box::new(rocks::RocksWal::open(dir)?)),
        other => Err(BenchError::Usage(format!(
            "unknown log engine {other:?} (walrus-* need the walrus feature, rocksdb-wal the rocksdb feature)"
        ))),
    }
}

/// runnel-log: append, then wait for the committer's durable position.
struct RunnelLog {
    log: Log,
    durable: Arc<(Mutex<u64>, Condvar)>,
}

impl RunnelLog {
    fn open(dir: &Path, sync: SyncMode, preallocate: bool) -> Result<RunnelLog, BenchError> {
        let durable = Arc::new((Mutex::new(0u64), Condvar::new()));
        let signal = Arc::clone(&durable);
        let listener = Box::new(move |status: Result<u64, runnel_log::LogError>| {
            let (lock, cvar) = &*signal;
            if let Ok(position) = status {
                *lock.lock().expect("durable lock") = position;
            }
            cvar.notify_all();
        });
        let options = LogOptions {
            sync,
            manual_commit: false,
            preallocate,
            ..LogOptions::default()
        };
        let log = Log::open(dir, options, listener, |_| Ok(()))
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        Ok(RunnelLog { log, durable })
    }
}

impl Engine for RunnelLog {
    fn sync_stats(&self) -> Option<SyncStats> {
        Some(self.log.sync_stats())
    }

    fn append(&self, _writer: usize, record: &[u8]) -> Result<(), AppendError> {
        let at = self.log.append(record)?;
        let (lock, cvar) = &*self.durable;
        let mut durable = lock.lock().expect("durable lock");
        while *durable < at.end {
            durable = cvar.wait(durable).expect("durable lock");
        }
        Ok(())
    }
}

#[cfg(feature = "walrus")]
mod walrus {
    use super::*;
    use walrus_rust::{FsyncSchedule, ReadConsistency, Walrus};

    /// walrus-rust, one topic per writer (its unit of ordering).
    pub struct WalrusLog {
        wal: Walrus,
        topics: Vec<String>,
    }

    impl WalrusLog {
        pub fn open(name: &str, dir: &Path) -> Result<WalrusLog, BenchError> {
            let schedule = match name.trim_end_matches("-shared") {
                "walrus-sync-each" => FsyncSchedule::SyncEach,
                "walrus-200ms" => FsyncSchedule::Milliseconds(200),
                _ => FsyncSchedule::NoFsync,
            };
            // `-shared`: every writer appends to one topic, one log like
            // runnel's; otherwise each writer has a topic of its own.
            let topics = if name.ends_with("-shared") { 1 } else { 1024 };
            // walrus writes under WALRUS_DATA_DIR (default ./wal_files).
            std::env::set_var("WALRUS_DATA_DIR", dir);
            std::env::set_var("WALRUS_QUIET", "1");
            let wal = Walrus::with_consistency_and_schedule_for_key(
                &format!("bench-{}", std::process::id()),
                ReadConsistency::StrictlyAtOnce,
                schedule,
            )
            .map_err(|e| BenchError::Setup(e.to_string()))?;
            Ok(WalrusLog {
                wal,
                topics: (0..topics).map(|i| format!("t{i}")).collect(),
            })
        }
    }

    impl Engine for WalrusLog {
        fn append(&self, writer: usize, record: &[u8]) -> Result<(), AppendError> {
            Ok(self
                .wal
                .append_for_topic(&self.topics[writer % self.topics.len()], record)?)
        }
    }
}

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// RocksDB with every put's WAL write synced before it returns
    /// (`WriteOptions::set_sync(true)`); concurrent puts share a sync in
    /// RocksDB's write group. Keys are a global sequence, so the memtable
    /// sees appends in order.
    pub struct RocksWal {
        db: rocksdb::DB,
        sync: rocksdb::WriteOptions,
        next_key: AtomicU64,
    }

    impl RocksWal {
        pub fn open(dir: &Path) -> Result<RocksWal, BenchError> {
            let mut options = rocksdb::Options::default();
            options.create_if_missing(true);
            let db =
                rocksdb::DB::open(&options, dir).map_err(|e| BenchError::Setup(e.to_string()))?;
            let mut sync = rocksdb::WriteOptions::default();
            sync.set_sync(true);
            Ok(RocksWal {
                db,
                sync,
                next_key: AtomicU64::new(0),
            })
        }
    }

    impl Engine for RocksWal {
        fn append(&self, _writer: usize, record: &[u8]) -> Result<(), AppendError> {
            let key = self.next_key.fetch_add(1, Ordering::Relaxed).to_be_bytes();
            Ok(self.db.put_opt(key, record, &self.sync)?)
        }
    }
}
