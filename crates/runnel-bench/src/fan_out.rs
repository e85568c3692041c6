//! Fan-out: one stream, a writer at a fixed rate, N subscribers each on
//! its own SSE connection (or following the stream by long-poll, with
//! `--mode long-poll`), directly or through a cache (`--via`). Every event
//! carries its send time, writer and sequence number; each subscriber
//! records publish-to-receive latency for every delivery, and long-poll
//! readers check they got every event once, in order. Against a Runnel
//! origin, the requests and bytes that reached it are reported too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::{classify, Connection, Outcome, Target};
use crate::common::{self, now_us, CommonArgs, Progress};
use crate::long_poll::{self, OriginCounts};
use crate::sse_client::SseReader;
use crate::stats::{other_process_cpu_secs, process_cpu_secs, Counts, Latency};
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
    /// How subscribers follow the stream.
    #[arg(long, value_enum, default_value = "sse")]
    pub mode: Mode,
    /// Subscribers connect here (a caching proxy in front of the target)
    /// instead of to the target; the writer and the metrics still go to
    /// the target.
    #[arg(long)]
    pub via: Option<String>,
    /// The server's process id on this machine: its CPU time over the
    /// measured phase is reported, per delivered event.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Sse,
    LongPoll,
}

/// What long-poll readers checked, over all of them.
#[derive(Default)]
struct ReaderChecks {
    /// Readers that got every written event once, in order.
    complete: u64,
    duplicates: u64,
    gaps: u64,
    requests: u64,
    empty: u64,
    failed: u64,
}

impl ReaderChecks {
    fn add(&mut self, r: &long_poll::ReaderResult, written: &[u64]) {
        let all = r.next_seq.len() == written.len()
            && r.next_seq
                .iter()
                .zip(written)
                .all(|(got, sent)| got == sent);
        self.complete += u64::from(all && r.duplicates == 0 && r.gaps == 0);
        self.duplicates += r.duplicates;
        self.gaps += r.gaps;
        self.requests += r.requests;
        self.empty += r.empty;
        self.failed += r.failed;
    }
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let targets = args.common.targets()?;
    let style = args.common.api_style;
    let name = format!("fo-{}", common::run_id());
    let sse_path = style.sse_path(&name)?;
    let stream_path = sse_path
        .split_once('?')
        .map_or(sse_path.as_str(), |(path, _)| path)
        .to_string();
    common::create_streams(&targets, style, std::slice::from_ref(&name), "text/plain").await?;
    let reader_targets = common::reader_targets(&targets, args.via.as_deref())?;
    let writers = args.writers.max(1);

    let ready = Arc::new(AtomicU64::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Room for every latency a subscriber should see, taken before the
    // measured phase: growing the vectors during it would fault in fresh
    // pages on the cores the server is measured on.
    let expected_events = if args.writer_rate > 0.0 {
        (args.writer_rate * args.common.duration().as_secs_f64() * 1.1) as usize + 16
    } else {
        0
    };
    let mut subscribers = Vec::new();
    for i in 0..args.subscribers {
        let target = reader_targets[i % reader_targets.len()].clone();
        let (ready, delivered, stop) =
            (Arc::clone(&ready), Arc::clone(&delivered), stop_rx.clone());
        subscribers.push(match args.mode {
            Mode::Sse => tokio::spawn(subscribe(
                target,
                sse_path.clone(),
                expected_events,
                ready,
                delivered,
                stop,
            )),
            Mode::LongPoll => tokio::spawn(long_poll::follow(
                target,
                stream_path.clone(),
                writers,
                expected_events,
                ready,
                delivered,
                stop,
            )),
        });
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
    let origin_before = OriginCounts::scrape(&targets).await;
    let server_cpu_before = args.server_pid.and_then(other_process_cpu_secs);
    let cpu_start = process_cpu_secs();
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
                return (counts, 0);
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
                let payload = long_poll::event_payload(w, sent, payload_bytes);
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
            (counts, sent)
        }));
    }
    let mut counts = Counts::default();
    let mut written = Vec::new();
    for t in writer_tasks {
        let (writer_counts, sent) = t.await.map_err(|e| BenchError::Setup(e.to_string()))?;
        counts.merge(writer_counts);
        written.push(sent);
    }
    // Let the last deliveries arrive (through a cache, long-pollers may
    // take a few rounds).
    let expected = counts.ok * args.subscribers as u64;
    let drain_deadline = Instant::now() + Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(500)).await;
    while delivered.load(Ordering::Relaxed) < expected && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let server_cpu = match (
        server_cpu_before,
        args.server_pid.and_then(other_process_cpu_secs),
    ) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let _ = stop_tx.send(true);
    drop(progress);
    let origin = match (origin_before, OriginCounts::scrape(&targets).await) {
        (Some(before), Some(after)) => Some(after.since(before)),
        _ => None,
    };

    let mut latency = Latency::default();
    let (mut deliveries, mut bytes) = (0, 0);
    let mut checks = ReaderChecks::default();
    for s in subscribers {
        let r = s.await.map_err(|e| BenchError::Setup(e.to_string()))?;
        for us in &r.latencies_us {
            latency.record(Duration::from_micros(*us));
        }
        deliveries += r.latencies_us.len() as u64;
        bytes += r.bytes;
        checks.add(&r, &written);
    }
    if !args.common.quiet {
        eprintln!(
            "events written {}, deliveries {deliveries} of {expected} expected",
            counts.ok
        );
        if let Some(o) = origin {
            eprintln!(
                "origin: {} long-polls ({:.2} per event), {} catch-up reads, {} read bytes",
                o.long_polls,
                o.long_polls as f64 / counts.ok.max(1) as f64,
                o.catch_ups,
                o.read_bytes
            );
        }
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
            "mode": args.mode,
            "via": args.via,
            "readers_complete": (args.mode == Mode::LongPoll).then_some(checks.complete),
            "duplicates": checks.duplicates,
            "gaps": checks.gaps,
            "reader_requests": checks.requests,
            "reader_empty_answers": checks.empty,
            "reader_failures": checks.failed,
            "origin_long_polls": origin.map(|o| o.long_polls),
            "origin_long_polls_per_event": origin
                .map(|o| o.long_polls as f64 / counts.ok.max(1) as f64),
            "origin_catch_ups": origin.map(|o| o.catch_ups),
            "origin_read_bytes": origin.map(|o| o.read_bytes),
            "server_cpu_secs": server_cpu,
            "server_cpu_us_per_delivery": server_cpu.map(|s| s * 1e6 / deliveries.max(1) as f64),
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
/// then timestamps every data line until told to stop. Latencies are kept
/// as plain microsecond values and turned into a histogram at the end, so
/// a delivery costs the client a `read`, a scan and a push.
async fn subscribe(
    target: Target,
    path: String,
    expected_events: usize,
    ready: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> long_poll::ReaderResult {
    let mut latencies_us: Vec<u64> = Vec::with_capacity(expected_events);
    let mut bytes = 0u64;
    let mut counted_ready = false;
    if let Ok(mut reader) = SseReader::open(&target, &path).await {
        loop {
            let mut delivered_now = 0;
            let more = tokio::select! {
                more = reader.next_events(|event| {
                    bytes += event.len() as u64 + 2;
                    let now = now_us();
                    match event_stamps(event, &mut latencies_us, now) {
                        EventKind::Data(n) => delivered_now += n,
                        EventKind::Control if !counted_ready => {
                            counted_ready = true;
                            ready.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }) => more,
                _ = stop.changed() => break,
            };
            if delivered_now > 0 {
                delivered.fetch_add(delivered_now, Ordering::Relaxed);
            }
            if !matches!(more, Ok(true)) {
                break;
            }
        }
    }
    long_poll::ReaderResult {
        latencies_us,
        bytes,
        ..long_poll::ReaderResult::default()
    }
}

enum EventKind {
    /// A data event with this many timestamped lines.
    Data(u64),
    Control,
    Other,
}

/// Records `now - stamp` for every `data:` line of a data event (each
/// appended message is one line starting with its send time).
fn event_stamps(event: &[u8], latencies_us: &mut Vec<u64>, now: u64) -> EventKind {
    let mut lines = event.split(|b| *b == b'\n');
    match lines.next() {
        Some(b"event: data") => {}
        Some(b"event: control") => return EventKind::Control,
        _ => return EventKind::Other,
    }
    let mut stamped = 0;
    for line in lines {
        let Some(text) = line.strip_prefix(b"data:") else {
            continue;
        };
        let digits = text.iter().skip_while(|b| **b == b' ');
        let mut sent = 0u64;
        let mut any = false;
        for b in digits.take_while(|b| b.is_ascii_digit()) {
            sent = sent.wrapping_mul(10).wrapping_add((b - b'0') as u64);
            any = true;
        }
        if any {
            latencies_us.push(now.saturating_sub(sent));
            stamped += 1;
        }
    }
    EventKind::Data(stamped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_events_yield_one_latency_per_stamped_line() {
        let mut latencies = Vec::new();
        let kind = event_stamps(
            b"event: data\ndata: 1000|xx\ndata:1500|yy\ndata: not a stamp",
            &mut latencies,
            2000,
        );
        assert!(matches!(kind, EventKind::Data(2)));
        assert_eq!(latencies, vec![1000, 500]);
        assert!(matches!(
            event_stamps(b"event: control\ndata: {}", &mut latencies, 0),
            EventKind::Control
        ));
        assert!(matches!(
            event_stamps(b": keepalive", &mut latencies, 0),
            EventKind::Other
        ));
        assert_eq!(latencies.len(), 2);
    }
}
