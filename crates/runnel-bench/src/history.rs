//! Long-history workloads, for tiered storage:
//!
//! - `create`: many empty streams, as fast as the server takes them (what
//!   an idle stream costs in memory);
//! - `fill`: appends of a fixed size round-robin over many streams until a
//!   byte total, then reads a sample of streams back in full and checks
//!   every byte (payloads are derived from stream and sequence number, so
//!   nothing needs to be remembered);
//! - `catch-up`: one client reads one stream from the start to its tail
//!   as fast as it can (MiB/s, per-request latency).
//!
//! `fill` and `catch-up` speak the Runnel (Durable Streams) API; `create`
//! speaks any `--api-style` (to compare what an idle stream costs peers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::client::{Connection, Target};
use crate::stats::Latency;
use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct CreateArgs {
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    pub target: String,
    /// Streams to create (named `{prefix}-{i}`).
    #[arg(long, default_value_t = 1_000_000)]
    pub streams: u64,
    #[arg(long, default_value = "idle")]
    pub prefix: String,
    /// Connections creating at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u64,
    /// Which API the server speaks.
    #[arg(long, value_enum, default_value = "runnel")]
    pub api_style: crate::api::ApiStyle,
}

#[derive(clap::Args, Debug, Clone)]
pub struct FillArgs {
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    pub target: String,
    #[arg(long, default_value_t = 10_000)]
    pub streams: u64,
    /// Stop once this many bytes were appended in all.
    #[arg(long)]
    pub total_bytes: u64,
    #[arg(long, default_value_t = 256)]
    pub payload_bytes: usize,
    /// Appends per request (one stream's next payloads in one body).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    #[arg(long, default_value_t = 64)]
    pub concurrency: u64,
    #[arg(long, default_value = "fill")]
    pub prefix: String,
    /// Streams read back in full and checked at the end.
    #[arg(long, default_value_t = 20)]
    pub verify_streams: u64,
    /// Skip creating the streams and appending: only verify streams a
    /// previous `fill` with the same arguments wrote.
    #[arg(long)]
    pub verify_only: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct CatchUpArgs {
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    pub target: String,
    /// The stream to read from its start to its tail.
    #[arg(long)]
    pub stream: String,
    /// Print a JSON line instead of text.
    #[arg(long)]
    pub json: bool,
}

fn target(url: &str) -> Result<Target, BenchError> {
    Target::parse(url)
}

async fn put(conn: &mut Connection, name: &str) -> Result<(), BenchError> {
    let reply = conn
        .send(
            Method::PUT,
            &format!("/v1/stream/{name}"),
            &[("content-type", "application/octet-stream".into())],
            Bytes::new(),
        )
        .await?;
    if !reply.status.is_success() {
        return Err(BenchError::Http(format!(
            "creating {name}: {}",
            reply.status
        )));
    }
    Ok(())
}

pub async fn create(args: CreateArgs) -> Result<(), BenchError> {
    let target = target(&args.target)?;
    // What the API needs before streams (S2's basin).
    args.api_style
        .prepare(&mut Connection::open(&target).await?)
        .await?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (target, next, prefix, total, api) = (
            target.clone(),
            Arc::clone(&next),
            args.prefix.clone(),
            args.streams,
            args.api_style,
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::open(&target).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<_, BenchError>(());
                }
                api.create_stream(
                    &mut conn,
                    &format!("{prefix}-{i}"),
                    "application/octet-stream",
                )
                .await?;
                if i % 100_000 == 0 && i > 0 {
                    eprintln!("created {i} streams");
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| BenchError::Setup(e.to_string()))??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "created {} streams in {secs:.1} s ({:.0}/s)",
        args.streams,
        args.streams as f64 / secs
    );
    Ok(())
}

/// The `seq`th payload of stream `stream`: recognisable and cheap to
/// regenerate.
fn payload(stream: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut p = format!("<{stream}:{seq}>").into_bytes();
    let fill = b'a' + ((stream + seq) % 26) as u8;
    p.resize(len, fill);
    p
}

pub async fn fill(args: FillArgs) -> Result<(), BenchError> {
    let target = target(&args.target)?;
    if args.streams == 0 || args.payload_bytes < 24 || args.batch == 0 {
        return Err(BenchError::Usage(
            "--streams and --batch must be at least 1, --payload-bytes at least 24".into(),
        ));
    }
    let per_request = (args.payload_bytes * args.batch) as u64;
    // Whole rounds of one batch per stream, so every stream ends with the
    // same number of appends and can be regenerated.
    let rounds = args.total_bytes.div_ceil(per_request * args.streams);
    let appends_per_stream = rounds * args.batch as u64;
    if !args.verify_only {
        let started = Instant::now();
        let done_bytes = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        let workers = args.concurrency.max(1).min(args.streams);
        // Each worker owns every `workers`th stream and appends to its
        // streams in turn, one connection: a stream's appends are in order.
        for w in 0..workers {
            let (target, done_bytes, args) =
                (target.clone(), Arc::clone(&done_bytes), args.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn = Connection::open(&target).await?;
                let mine: Vec<u64> = (w..args.streams).step_by(workers as usize).collect();
                for stream in &mine {
                    put(&mut conn, &format!("{}-{stream}", args.prefix)).await?;
                }
                for round in 0..rounds {
                    for stream in &mine {
                        let name = format!("{}-{stream}", args.prefix);
                        let mut body = Vec::with_capacity(per_request as usize);
                        for k in 0..args.batch as u64 {
                            let seq = round * args.batch as u64 + k;
                            body.extend(payload(*stream, seq, args.payload_bytes));
                        }
                        append_retrying(&mut conn, &name, Bytes::from(body)).await?;
                        let total =
                            done_bytes.fetch_add(per_request, Ordering::Relaxed) + per_request;
                        if w == 0 && (total / per_request).is_multiple_of(20_000) {
                            eprintln!("appended {} MiB", total >> 20);
                        }
                    }
                }
                Ok::<_, BenchError>(())
            }));
        }
        for t in tasks {
            t.await.map_err(|e| BenchError::Setup(e.to_string()))??;
        }
        let secs = started.elapsed().as_secs_f64();
        let bytes = done_bytes.load(Ordering::Relaxed);
        println!(
            "appended {} MiB in {secs:.0} s ({:.1} MiB/s, {:.0} appends/s)",
            bytes >> 20,
            bytes as f64 / secs / (1 << 20) as f64,
            (bytes / args.payload_bytes as u64) as f64 / secs
        );
    }
    verify(&target, &args, appends_per_stream).await
}

/// Appends `body`, waiting out back-pressure (503, 429).
async fn append_retrying(conn: &mut Connection, name: &str, body: Bytes) -> Result<(), BenchError> {
    loop {
        let reply = conn
            .send(
                Method::POST,
                &format!("/v1/stream/{name}"),
                &[("content-type", "application/octet-stream".into())],
                body.clone(),
            )
            .await?;
        match reply.status.as_u16() {
            200..=299 => return Ok(()),
            429 | 503 => tokio::time::sleep(Duration::from_millis(200)).await,
            other => return Err(BenchError::Http(format!("appending to {name}: {other}"))),
        }
    }
}

/// Reads `verify_streams` streams spread over the range back in full and
/// compares them with what `fill` appended.
async fn verify(target: &Target, args: &FillArgs, appends: u64) -> Result<(), BenchError> {
    let sample = args.verify_streams.min(args.streams);
    let mut conn = Connection::open(target).await?;
    let mut checked = 0u64;
    for k in 0..sample {
        let stream = k * args.streams / sample.max(1);
        let name = format!("{}-{stream}", args.prefix);
        let (body, _) = read_stream(&mut conn, &name, |_| {}).await?;
        let mut expected = Vec::with_capacity(body.len());
        for seq in 0..appends {
            expected.extend(payload(stream, seq, args.payload_bytes));
        }
        if body != expected {
            let first = body.iter().zip(&expected).position(|(a, b)| a != b);
            return Err(BenchError::Http(format!(
                "{name}: read back {} bytes, expected {}; first difference at {first:?}",
                body.len(),
                expected.len()
            )));
        }
        checked += body.len() as u64;
    }
    println!("verified {sample} streams, {checked} bytes: identical");
    Ok(())
}

/// Reads a stream from its start to its tail; calls `each` with every
/// response's latency. Returns the bytes and the number of requests.
async fn read_stream(
    conn: &mut Connection,
    name: &str,
    mut each: impl FnMut(Duration),
) -> Result<(Vec<u8>, u64), BenchError> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    let mut requests = 0;
    loop {
        let sent = Instant::now();
        let reply = conn
            .send(
                Method::GET,
                &format!("/v1/stream/{name}?offset={offset}"),
                &[],
                Bytes::new(),
            )
            .await?;
        each(sent.elapsed());
        requests += 1;
        if reply.status != http::StatusCode::OK {
            return Err(BenchError::Http(format!(
                "reading {name}: {}",
                reply.status
            )));
        }
        let header = |h: &str| {
            reply
                .headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        out.extend_from_slice(&reply.body);
        if header("stream-up-to-date").is_some() {
            return Ok((out, requests));
        }
        offset = header("stream-next-offset")
            .ok_or_else(|| BenchError::Http("a read without Stream-Next-Offset".into()))?;
    }
}

pub async fn catch_up(args: CatchUpArgs) -> Result<(), BenchError> {
    let target = target(&args.target)?;
    let mut conn = Connection::open(&target).await?;
    let mut latency = Latency::default();
    let started = Instant::now();
    let (body, requests) = read_stream(&mut conn, &args.stream, |d| latency.record(d)).await?;
    let secs = started.elapsed().as_secs_f64();
    let mib_s = body.len() as f64 / secs / (1 << 20) as f64;
    let summary = latency.summary();
    let (p50, p99) = (summary.p50_ms, summary.p99_ms);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "stream": args.stream, "bytes": body.len(), "seconds": secs, "mib_per_s": mib_s,
                "requests": requests, "p50_ms": p50, "p99_ms": p99,
            })
        );
    } else {
        println!(
            "read {} MiB in {secs:.2} s: {mib_s:.1} MiB/s over {requests} requests (p50 {p50:.2} ms, p99 {p99:.2} ms)",
            body.len() >> 20
        );
    }
    Ok(())
}
