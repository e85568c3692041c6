//! Catch-up replay: N clients, each on its own pre-filled stream (or all
//! on one with `--per-client-stream false`), reconnect at the same moment
//! and fetch everything. Measures each client's time from the reconnect
//! to full state (connect included) and the bytes it received. With
//! `--via`, the clients read through a cache in front of the server, and
//! the bytes that reached a Runnel origin are reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::api::ApiStyle;
use crate::client::{Connection, Target};
use crate::common::{self, CommonArgs, Progress};
use crate::long_poll::OriginCounts;
use crate::stats::{process_cpu_secs, Counts, Latency};
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Events in each stream before the clients reconnect.
    #[arg(long, default_value_t = 200)]
    pub pre_events: usize,
    #[arg(long, default_value_t = 1024)]
    pub event_bytes: usize,
    /// One stream per client (true) or one shared stream (false);
    /// `--per-client-stream` alone means true.
    #[arg(
        long,
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub per_client_stream: bool,
    /// Events are State Protocol updates over this many keys on JSON
    /// streams (created with `Stream-Compaction: state` where the server
    /// supports it) instead of opaque bytes.
    #[arg(long)]
    pub state_keys: Option<usize>,
    /// Fetch with the server's one-request bootstrap (runnel, ursula)
    /// instead of catch-up reads.
    #[arg(long)]
    pub bootstrap: bool,
    /// Seconds to wait between filling and replaying (lets background
    /// compaction finish).
    #[arg(long, default_value_t = 0.0)]
    pub settle_secs: f64,
    /// The clients read here (a caching proxy in front of the target);
    /// filling and the metrics still go to the target.
    #[arg(long)]
    pub via: Option<String>,
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let targets = args.common.targets()?;
    let style = args.common.api_style;
    let run = common::run_id();
    let streams = if args.per_client_stream {
        args.clients.max(1)
    } else {
        1
    };
    let names: Vec<String> = (0..streams).map(|i| format!("rp-{run}-{i}")).collect();
    let content_type = if args.state_keys.is_some() {
        "application/json"
    } else {
        "application/octet-stream"
    };
    if args.state_keys.is_some() && style == ApiStyle::Runnel {
        create_compacting(&targets, style, &names).await?;
    } else {
        common::create_streams(&targets, style, &names, content_type).await?;
    }
    fill(&targets, style, &names, &args, content_type).await?;
    if args.settle_secs > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    }

    let readers = common::reader_targets(&targets, args.via.as_deref())?;
    let origin_before = OriginCounts::scrape(&targets).await;
    let cpu_start = process_cpu_secs();
    let done = Arc::new(AtomicU64::new(0));
    let progress = Progress::start(
        args.common.quiet,
        "clients done",
        Arc::clone(&done),
        Duration::from_secs(0),
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.clients {
        let target = readers[i % readers.len()].clone();
        let name = names[i % names.len()].clone();
        let (done, pre_events, bootstrap) =
            (Arc::clone(&done), args.pre_events as u64, args.bootstrap);
        tasks.push(tokio::spawn(async move {
            let result = replay_one(&target, style, &name, pre_events, bootstrap).await;
            done.fetch_add(1, Ordering::Relaxed);
            result.map(|bytes| (start.elapsed(), bytes))
        }));
    }
    let mut latency = Latency::default();
    let mut counts = Counts::default();
    let mut bytes = 0;
    for t in tasks {
        match t.await.map_err(|e| BenchError::Setup(e.to_string()))? {
            Ok((took, got)) => {
                latency.record(took);
                counts.ok += 1;
                bytes += got;
            }
            Err(_) => counts.error += 1,
        }
    }
    let elapsed = start.elapsed();
    drop(progress);
    let origin = match (origin_before, OriginCounts::scrape(&targets).await) {
        (Some(before), Some(after)) => Some(after.since(before)),
        _ => None,
    };
    if let (Some(o), false) = (origin, args.common.quiet) {
        eprintln!(
            "origin: {} catch-up reads, {} read bytes",
            o.catch_ups, o.read_bytes
        );
    }
    common::finish(
        &args.common,
        if args.state_keys.is_some() {
            "replay-state"
        } else {
            "replay"
        },
        args.clients as u64,
        serde_json::json!({
            "clients": args.clients,
            "pre_events": args.pre_events,
            "event_bytes": args.event_bytes,
            "per_client_stream": args.per_client_stream,
            "state_keys": args.state_keys,
            "bootstrap": args.bootstrap,
            "bytes_per_client": bytes.checked_div(counts.ok).unwrap_or(0),
            "via": args.via,
            "origin_catch_ups": origin.map(|o| o.catch_ups),
            "origin_read_bytes": origin.map(|o| o.read_bytes),
        }),
        elapsed,
        counts,
        counts.ok,
        &latency,
        bytes,
        cpu_start,
    )?;
    Ok(())
}

/// Creates JSON streams that Runnel compacts as State Protocol streams.
async fn create_compacting(
    targets: &[Target],
    style: ApiStyle,
    names: &[String],
) -> Result<(), BenchError> {
    let mut conn = Connection::open(&targets[0]).await?;
    for name in names {
        style
            .create_stream_with(
                &mut conn,
                name,
                "application/json",
                &[("stream-compaction", "state".to_string())],
            )
            .await?;
    }
    Ok(())
}

/// The `i`-th event: opaque bytes, or a State Protocol update of one of
/// `keys` keys, padded to `bytes`.
fn event(i: usize, bytes: usize, keys: Option<usize>) -> Bytes {
    match keys {
        None => Bytes::from(common::padded_payload("replay-event ", bytes)),
        Some(keys) => {
            let head = format!(
                r#"{{"type":"item","key":"k{}","headers":{{"operation":"update"}},"value":{{"n":{i},"pad":""#,
                i % keys.max(1)
            );
            let pad = bytes.saturating_sub(head.len() + 3).max(1);
            Bytes::from(format!("{head}{}\"}}}}", "x".repeat(pad)))
        }
    }
}

/// Fills every stream with the pre-events, 32 streams at a time.
async fn fill(
    targets: &[Target],
    style: ApiStyle,
    names: &[String],
    args: &Args,
    content_type: &str,
) -> Result<(), BenchError> {
    let parallel = 32.min(names.len());
    let (events, bytes, keys) = (args.pre_events, args.event_bytes, args.state_keys);
    let mut tasks = Vec::new();
    for lane in 0..parallel {
        let mine: Vec<String> = names.iter().skip(lane).step_by(parallel).cloned().collect();
        let (target, content_type) = (
            targets[lane % targets.len()].clone(),
            content_type.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::open(&target).await?;
            for name in mine {
                for i in 0..events {
                    let reply = style
                        .append(&name, &content_type, event(i, bytes, keys))
                        .send(&mut conn)
                        .await?;
                    if !reply.status.is_success() {
                        return Err(BenchError::Setup(format!(
                            "filling {name}: {}",
                            reply.status
                        )));
                    }
                }
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| BenchError::Setup(e.to_string()))??;
    }
    Ok(())
}

/// Connects and reads a stream to its tail; returns the bytes received.
async fn replay_one(
    target: &Target,
    style: ApiStyle,
    name: &str,
    pre_events: u64,
    bootstrap: bool,
) -> Result<u64, BenchError> {
    let mut conn = Connection::open(target).await?;
    if let Some(call) = style.bootstrap(name).filter(|_| bootstrap) {
        let reply = call.send(&mut conn).await?;
        if !reply.status.is_success() {
            return Err(BenchError::Http(format!("bootstrap: {}", reply.status)));
        }
        return Ok(reply.body.len() as u64);
    }
    let (mut bytes, mut records, mut offset) = (0u64, 0u64, None::<String>);
    for _ in 0..100_000 {
        let reply = style.read(name, offset.as_deref()).send(&mut conn).await?;
        if !reply.status.is_success() {
            return Err(BenchError::Http(format!("read: {}", reply.status)));
        }
        bytes += reply.body.len() as u64;
        let (next, up_to_date) = style.continuation(&reply, records);
        if style == ApiStyle::S2 {
            records = next
                .as_deref()
                .and_then(|n| n.parse().ok())
                .unwrap_or(records);
            if records >= pre_events || up_to_date {
                return Ok(bytes);
            }
        } else if up_to_date {
            return Ok(bytes);
        }
        offset = next;
    }
    Err(BenchError::Http("stream never reached its tail".into()))
}
