//! SSE fan-out: one stream, a writer at a fixed rate, N subscribers each
//! on its own SSE connection. Every event carries its send time; each
//! subscriber records publish-to-receive latency for every delivery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;

use crate::client::{classify, Connection, Outcome, Target};
use crate::common::{self, now_us, CommonArgs, Progress};
use crate::stats::{process_cpu_secs, Counts, Latency};
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long, default_value_t = 100)]
    pub subscribers: usize,
    /// Events appended per second over all writers; 0 appends as fast as
    /// the server acknowledges (closed loop).
    #[arg(long, default_value_t = 50.0)]
    pub writer_rate: f64,
    /// Concurrent writer connections sharing the rate.
    #[arg(long, default_value_t = 1)]
    pub writers: usize,
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    /// Seconds to wait for all subscribers to connect.
    #[arg(long, default_value_t = 60.0)]
    pub connect_timeout_secs: f64,
}

struct SubscriberResult {
    latency: Latency,
    deliveries: u64,
    bytes: u64,
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let targets = args.common.targets()?;
    let style = args.common.api_style;
    let name = format!("fo-{}", common::run_id());
    let sse_path = style.sse_path(&name)?;
    common::create_streams(&targets, style, std::slice::from_ref(&name), "text/plain").await?;

    let ready = Arc::new(AtomicU64::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut subscribers = Vec::new();
    for i in 0..args.subscribers {
        let target = targets[i % targets.len()].clone();
        let (path, ready, delivered, stop) = (
            sse_path.clone(),
            Arc::clone(&ready),
            Arc::clone(&delivered),
            stop_rx.clone(),
        );
        subscribers.push(tokio::spawn(subscribe(
            target, path, ready, delivered, stop,
        )));
    }
    let connect_deadline = Instant::now() + Duration::from_secs_f64(args.connect_timeout_secs);
    while (ready.load(Ordering::Relaxed) as usize) < args.subscribers {
        if Instant::now() > connect_deadline {
            return Err(BenchError::Setup(format!(
                "only {} of {} subscribers connected",
                ready.load(Ordering::Relaxed),
                args.subscribers
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The writers: events at fixed times (or back to back), each stamped
    // with its send time.
    let cpu_start = process_cpu_secs();
    let writers = args.writers.max(1);
    let start = Instant::now();
    let deadline = start + args.common.duration();
    let progress = Progress::start(
        args.common.quiet,
        "deliveries",
        Arc::clone(&delivered),
        args.common.duration(),
    );
    let mut writer_tasks = Vec::new();
    for w in 0..writers {
        let (target, name) = (targets[w % targets.len()].clone(), name.clone());
        let (rate, payload_bytes) = (args.writer_rate / writers as f64, args.payload_bytes);
        writer_tasks.push(tokio::spawn(async move {
            let mut counts = Counts::default();
            let Ok(mut conn) = Connection::open(&target).await else {
                counts.error += 1;
                return counts;
            };
            let offset = if rate > 0.0 {
                w as f64 / (rate * writers as f64)
            } else {
                0.0
            };
            let mut sent = 0u64;
            while Instant::now() < deadline {
                if rate > 0.0 {
                    let due = start + Duration::from_secs_f64(offset + sent as f64 / rate);
                    if due >= deadline {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                }
                let payload = common::padded_payload(&format!("{}|", now_us()), payload_bytes);
                let outcome = match style
                    .append(&name, "text/plain", Bytes::from(payload))
                    .send(&mut conn)
                    .await
                {
                    Ok(reply) => classify(reply.status),
                    Err(_) => Outcome::Error,
                };
                counts.add(outcome);
                sent += 1;
            }
            counts
        }));
    }
    let mut counts = Counts::default();
    for t in writer_tasks {
        counts.merge(t.await.map_err(|e| BenchError::Setup(e.to_string()))?);
    }
    // Let the last deliveries arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let elapsed = start.elapsed();
    let _ = stop_tx.send(true);
    drop(progress);

    let mut latency = Latency::default();
    let (mut deliveries, mut bytes) = (0, 0);
    for s in subscribers {
        let r = s.await.map_err(|e| BenchError::Setup(e.to_string()))?;
        latency.merge(&r.latency);
        deliveries += r.deliveries;
        bytes += r.bytes;
    }
    let expected = counts.ok * args.subscribers as u64;
    if !args.common.quiet {
        eprintln!(
            "events written {}, deliveries {deliveries} of {expected} expected",
            counts.ok
        );
    }
    common::finish(
        &args.common,
        "fan-out",
        args.subscribers as u64,
        serde_json::json!({
            "subscribers": args.subscribers,
            "writer_rate": args.writer_rate,
            "writers": writers,
            "payload_bytes": args.payload_bytes,
            "events_written": counts.ok,
            "deliveries_expected": expected,
            "deliveries": deliveries,
        }),
        elapsed,
        counts,
        deliveries,
        &latency,
        bytes,
        cpu_start,
    )?;
    Ok(())
}

/// One SSE subscriber: counts itself ready at its first control event,
/// then timestamps every data line until told to stop.
async fn subscribe(
    target: Target,
    path: String,
    ready: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> SubscriberResult {
    let mut result = SubscriberResult {
        latency: Latency::default(),
        deliveries: 0,
        bytes: 0,
    };
    let Ok(mut conn) = Connection::open(&target).await else {
        return result;
    };
    let headers = [("accept", "text/event-stream".to_string())];
    let Ok(response) = conn
        .send_streaming(Method::GET, &path, &headers, Bytes::new())
        .await
    else {
        return result;
    };
    if !response.status().is_success() {
        return result;
    }
    let mut body = response.into_body();
    let mut buffer: Vec<u8> = Vec::new();
    let mut counted_ready = false;
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.changed() => break,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        result.bytes += data.len() as u64;
        buffer.extend_from_slice(&data);
        // Handle every complete event in the buffer.
        while let Some(end) = find(&buffer, b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let now = now_us();
            let mut is_data = false;
            for line in event.split(|b| *b == b'\n') {
                if line.starts_with(b"event: data") {
                    is_data = true;
                } else if line.starts_with(b"event: control") && !counted_ready {
                    counted_ready = true;
                    ready.fetch_add(1, Ordering::Relaxed);
                } else if is_data && line.starts_with(b"data:") {
                    let text = &line[5..];
                    let stamp = text.split(|b| *b == b'|').next().unwrap_or_default();
                    if let Some(sent) = std::str::from_utf8(stamp)
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                    {
                        result
                            .latency
                            .record(Duration::from_micros(now.saturating_sub(sent)));
                        result.deliveries += 1;
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    result
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
