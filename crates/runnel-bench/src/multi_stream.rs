//! Multi-stream writes: N streams, one writer and one connection each,
//! appending fixed-size payloads with durable acknowledgements.
//!
//! Closed loop by default (each writer sends its next append when the last
//! is acknowledged). With `--rate` or `--rate-per-stream` it runs open
//! loop: appends are scheduled at fixed times and latency is measured from
//! the scheduled time, so a stall shows up in the tail instead of quietly
//! lowering the offered load (coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::{classify, Connection, Outcome};
use crate::common::{self, CommonArgs, Progress};
use crate::stats::{process_cpu_secs, Counts, Intervals, Latency};
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Streams, each with one writer and one connection.
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    #[arg(long, default_value_t = 256)]
    pub payload_bytes: usize,
    /// Open loop: appends per second per stream.
    #[arg(long)]
    pub rate_per_stream: Option<f64>,
    /// Open loop: appends per second over all streams.
    #[arg(long, conflicts_with = "rate_per_stream")]
    pub rate: Option<f64>,
    #[arg(long, default_value = "text/plain")]
    pub content_type: String,
    /// Runnel clusters: send each stream's appends to the node that leads
    /// its group (as it was when the run began) rather than round robin.
    #[arg(long)]
    pub to_leader: bool,
    /// Also report latency for each interval of this many seconds (by
    /// when each append was meant to start): whether a long run's tail
    /// stays flat.
    #[arg(long)]
    pub interval_secs: Option<f64>,
    /// Connections the writers share, each used by one append at a time
    /// (default: one per stream). Thousands of streams at a modest rate
    /// need far fewer, as a real client's pool would hold.
    #[arg(long)]
    pub connections: Option<usize>,
}

struct WriterResult {
    latency: Latency,
    counts: Counts,
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let targets = args.common.targets()?;
    let style = args.common.api_style;
    if args.streams == 0 {
        return Err(BenchError::Usage("--streams must be at least 1".into()));
    }
    if args.to_leader && args.connections.is_some_and(|c| c < args.streams) {
        return Err(BenchError::Usage(
            "--to-leader needs a connection per stream (no --connections)".into(),
        ));
    }
    let run = common::run_id();
    let names: Vec<String> = (0..args.streams).map(|i| format!("ms-{run}-{i}")).collect();
    common::create_streams(&targets, style, &names, &args.content_type).await?;

    let per_stream_rate = args
        .rate_per_stream
        .or(args.rate.map(|r| r / args.streams as f64))
        .filter(|r| *r > 0.0);
    let payload = Bytes::from(common::padded_payload("runnel-bench ", args.payload_bytes));

    let target_of: Vec<usize> = if args.to_leader {
        crate::leaders::leader_of_each(&targets, &names).await?
    } else {
        (0..names.len()).map(|i| i % targets.len()).collect()
    };
    // Stream i appends over connection i % connections, which goes to
    // the target of the first stream using it.
    let pool = args
        .connections
        .unwrap_or(names.len())
        .clamp(1, names.len());
    let mut connections = Vec::with_capacity(pool);
    for at in &target_of[..pool] {
        let connection = Connection::open(&targets[*at]).await?;
        connections.push(Arc::new(tokio::sync::Mutex::new(connection)));
    }
    let done = Arc::new(AtomicU64::new(0));
    let cpu_start = process_cpu_secs();
    let start = Instant::now() + Duration::from_millis(50);
    let deadline = start + args.common.duration();
    let intervals = match args.interval_secs {
        Some(secs) if secs > 0.0 && secs.is_finite() => Some(Arc::new(Intervals::new(
            start,
            Duration::from_secs_f64(secs),
        ))),
        Some(_) => return Err(BenchError::Usage("--interval-secs must be above 0".into())),
        None => None,
    };
    let mut tasks = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let conn = Arc::clone(&connections[i % pool]);
        let (payload, done, content_type, intervals) = (
            payload.clone(),
            Arc::clone(&done),
            args.content_type.clone(),
            intervals.clone(),
        );
        // Spread open-loop writers' schedules so they do not fire together.
        let phase =
            per_stream_rate.map(|r| Duration::from_secs_f64((i as f64 / args.streams as f64) / r));
        tasks.push(tokio::spawn(async move {
            let mut result = WriterResult {
                latency: Latency::default(),
                counts: Counts::default(),
            };
            tokio::time::sleep_until(start.into()).await;
            let mut sent = 0u64;
            loop {
                let intended = match per_stream_rate {
                    Some(rate) => {
                        start
                            + phase.unwrap_or_default()
                            + Duration::from_secs_f64(sent as f64 / rate)
                    }
                    None => Instant::now(),
                };
                if intended >= deadline {
                    break;
                }
                // Only a schedule ahead is slept to: tokio's timer rounds a
                // deadline up to its next millisecond, so sleeping until
                // "now" would add about a millisecond to every request of
                // a closed loop.
                if intended > Instant::now() {
                    tokio::time::sleep_until(intended.into()).await;
                }
                let call = style.append(&name, &content_type, payload.clone());
                let outcome = match call.send(&mut *conn.lock().await).await {
                    Ok(reply) => classify(reply.status),
                    Err(_) => Outcome::Error,
                };
                sent += 1;
                result.counts.add(outcome);
                if outcome == Outcome::Ok {
                    result.latency.record(intended.elapsed());
                    if let Some(intervals) = &intervals {
                        intervals.record(intended, intended.elapsed());
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                } else if outcome == Outcome::Error {
                    // A broken connection is replaced, not hammered.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            result
        }));
    }
    let progress = Progress::start(
        args.common.quiet,
        "appends",
        Arc::clone(&done),
        args.common.duration(),
    );
    let mut latency = Latency::default();
    let mut counts = Counts::default();
    for t in tasks {
        let r = t.await.map_err(|e| BenchError::Setup(e.to_string()))?;
        latency.merge(&r.latency);
        counts.merge(r.counts);
    }
    drop(progress);
    let elapsed = start
        .elapsed()
        .min(args.common.duration() + Duration::from_secs(60));
    let mut result = common::finish(
        &args.common,
        "multi-stream",
        args.streams as u64,
        serde_json::json!({
            "streams": args.streams,
            "payload_bytes": args.payload_bytes,
            "rate_per_stream": per_stream_rate,
            "open_loop": per_stream_rate.is_some(),
            "content_type": args.content_type,
            "to_leader": args.to_leader,
            "connections": pool,
        }),
        elapsed,
        counts,
        counts.ok,
        &latency,
        0,
        cpu_start,
    )?;
    if let Some(intervals) = intervals {
        result.intervals = intervals.summaries();
        result.print_intervals();
        common::write_json(&args.common, &result)?;
    }
    Ok(())
}
