//! The IO-error test: what the server does when the disk fails under it.
//!
//! For each fault in turn (a failing fsync, a full disk, a failing write,
//! all on the log's files): writers append for a while (a baseline of
//! acknowledged appends), the fault is injected, writers keep trying for
//! two seconds while `/health` and a read are sampled, and then power is
//! cut (so whatever a failed fsync left only in the page cache is gone),
//! the server killed, the faults cleared and the server restarted. It
//! fails if any append sent after the fault was acknowledged, if no append
//! failed (the fault never reached the server), or if anything
//! acknowledged is missing after the restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};

use super::check::Writer;
use super::client::{self, Answers, WriterSetup};
use super::error::{HarnessError, Result};
use super::readback::verify;
use super::server::{log_tail, Server};
use super::verdict::{Findings, Untested, Violation};
use super::{control, Target};

#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    pub streams: usize,
    /// Writing before the fault, and while it lasts.
    pub before: Duration,
    pub during: Duration,
    /// How many times the three faults are gone through.
    pub rounds: usize,
}

/// The faults tried, as control commands.
const FAULTS: [&str; 3] = [
    "fail-fsync EIO /data/log/",
    "fail-write ENOSPC /data/log/",
    "fail-write EIO /data/log/",
];

/// `Ok(true)`: every fault was handled; `Ok(false)`: some were not (the
/// `VIOLATION`/`UNTESTED` lines printed); `Err`: the harness could not run.
pub async fn run(opts: Options) -> Result<bool> {
    let target = &opts.target;
    println!(
        "io-errors: {} serve --data-dir {} {}",
        target.binary.display(),
        target.data_dir().display(),
        target.flags.join(" ")
    );
    super::prepare_data_dir(target)?;
    let client = client::client();
    let mut server = Server::start(&target.spec(), &client, "io-errors first start").await?;
    let streams: Vec<String> = (0..opts.streams)
        .map(|i| format!("io-errors-{i}"))
        .collect();
    let mut writers = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        let status = client::create(&client, &server.base, stream).await?;
        if status != StatusCode::CREATED {
            return Err(HarnessError::Answer {
                what: format!("creating {stream}"),
                status: status.as_u16(),
                expected: "201".into(),
            });
        }
        writers.push(Writer::new(2 * i as u32, stream, true));
        writers.push(Writer::new(2 * i as u32 + 1, stream, false));
    }
    let mut failed = 0;
    let faults: Vec<&str> = (0..opts.rounds.max(1)).flat_map(|_| FAULTS).collect();
    for &fault in &faults {
        let (next, findings) = phase(&opts, &client, server, &streams, &mut writers, fault).await?;
        server = next;
        if findings.is_empty() {
            println!("  => ok");
        } else {
            failed += 1;
            findings.print(fault, 10);
        }
    }
    server.kill().await;
    let acked: usize = writers.iter().map(Writer::acked).sum();
    if failed == 0 {
        println!("io-errors: PASS: {} faults, {acked} appends acknowledged, none lost, none acknowledged after a fault", faults.len());
        Ok(true)
    } else {
        println!(
            "io-errors: FAIL: {failed} of {} faults showed violations; server log: {}",
            faults.len(),
            target.log.display()
        );
        Ok(false)
    }
}

/// Runs the writers until `stop_after`, then returns them and their answers.
async fn write_for(
    client: &Client,
    base: &str,
    writers: &mut Vec<Writer>,
    duration: Duration,
    fault_at: Option<Instant>,
    mut sample: impl FnMut(Duration) -> Option<tokio::task::JoinHandle<String>>,
) -> Result<(Answers, Vec<Violation>, Vec<String>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let setup = WriterSetup {
        client: client.clone(),
        bases: Arc::new(vec![base.to_string()]),
        stop: Arc::clone(&stop),
        // Answers after the fault are counted apart.
        cutting: Arc::new(AtomicBool::new(fault_at.is_some())),
        pause: Duration::from_millis(2),
        error_pause: Duration::from_millis(50),
        fault_at,
        fresh_duplicate_is_wrong: true,
    };
    let tasks: Vec<_> = std::mem::take(writers)
        .into_iter()
        .map(|w| tokio::spawn(client::run_writer(setup.clone(), w)))
        .collect();
    let mut samples = Vec::new();
    let started = Instant::now();
    let mut pending = Vec::new();
    while started.elapsed() < duration {
        if let Some(handle) = sample(started.elapsed()) {
            pending.push(handle);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Release);
    let mut answers = Answers::default();
    let mut violations = Vec::new();
    for task in tasks {
        let (w, a, v) = tokio::time::timeout(client::REQUEST_TIMEOUT * 2, task)
            .await
            .map_err(|_| HarnessError::Timeout("a writer".into(), client::REQUEST_TIMEOUT * 2))?
            .map_err(|e| HarnessError::Task(e.to_string()))?;
        writers.push(w);
        answers.merge(a);
        violations.extend(v);
    }
    writers.sort_by_key(|w| w.id);
    for handle in pending {
        samples.push(handle.await.unwrap_or_default());
    }
    Ok((answers, violations, samples))
}

async fn phase(
    opts: &Options,
    client: &Client,
    server: Server,
    streams: &[String],
    writers: &mut Vec<Writer>,
    fault: &str,
) -> Result<(Server, Findings)> {
    let target = &opts.target;
    let mut findings = Findings::default();
    println!("io-errors: {fault}");
    for w in writers.iter_mut() {
        if let Some(landed) = w.needs_retry() {
            if let Some(v) = client::retry_pending(client, &server.base, w, landed, true).await {
                findings.violations.push(v);
            }
        }
    }
    let acked_before: usize = writers.iter().map(Writer::acked).sum();
    let (answers, v, _) =
        write_for(client, &server.base, writers, opts.before, None, |_| None).await?;
    findings.extend(v);
    let baseline = writers.iter().map(Writer::acked).sum::<usize>() - acked_before;
    println!(
        "  before the fault: {baseline} appends acknowledged ({})",
        answers.summary()
    );

    let before = control(&target.control, "stats").await?;
    let cpu_before = server.cpu_seconds();
    let phase_started = Instant::now();
    control(&target.control, fault).await?;
    let fault_at = Instant::now();
    let base = server.base.clone();
    let first = streams[0].clone();
    let mut sampled = [false; 2];
    let (answers, v, samples) = write_for(
        client,
        &base,
        writers,
        opts.during,
        Some(fault_at),
        |elapsed| {
            // /health and a read, half a second in and near the end.
            let slot =
                usize::from(elapsed >= opts.during.saturating_sub(Duration::from_millis(300)));
            if elapsed < Duration::from_millis(500) || sampled[slot] {
                return None;
            }
            sampled[slot] = true;
            let (client, base, first) = (client.clone(), base.clone(), first.clone());
            Some(tokio::spawn(async move {
                let health = get(&client, &format!("{base}/health")).await;
                let read = get(&client, &format!("{base}/v1/stream/{first}?offset=-1")).await;
                format!("/health {health}; GET {first} {read}")
            }))
        },
    )
    .await?;
    findings.extend(v);
    let after = control(&target.control, "stats").await?;
    let delta = |key: &str| {
        after[key]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(before[key].as_u64().unwrap_or(0))
    };
    println!("  appends after the fault: {}", answers.summary());
    for sample in samples {
        println!("  {sample}");
    }
    println!(
        "  file system during the fault: {} failures injected, {} fsyncs and {} writes attempted, {} unsynced bytes forgotten by failed fsyncs",
        delta("injected_failures"),
        delta("fsyncs"),
        delta("writes"),
        delta("bytes_forgotten_by_failed_fsyncs")
    );
    if let (Some((u0, s0)), Some((u1, s1))) = (cpu_before, server.cpu_seconds()) {
        println!(
            "  server CPU during the fault ({:.1}s): {:.2}s user, {:.2}s system",
            phase_started.elapsed().as_secs_f64(),
            u1 - u0,
            s1 - s0
        );
    }
    let mut server = server;
    match server.exited() {
        Some(status) => println!("  the server exited by itself: {status}"),
        None => println!("  the server was still running"),
    }
    let errors: Vec<String> = log_tail(&target.log, 400)
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .map(|l| l.chars().take(300).collect())
        .collect();
    for line in errors.iter().rev().take(3).rev() {
        println!("  server log: {line}");
    }
    findings.extend(answers.acked_after_fault.iter().cloned());
    if answers.errors_after == 0 {
        findings.untested(
            Untested::FaultNotReached,
            format!("no append failed under {fault:?}: the fault never reached the server"),
        );
    }

    // Lose the page cache too, then restart with a healthy disk.
    let cut = control(&target.control, "power-cut").await?;
    server.kill().await;
    control(&target.control, "clear-faults").await?;
    control(&target.control, "revive").await?;
    let server = Server::start(&target.spec(), client, &format!("after {fault}")).await?;
    let verified = verify(
        client,
        &server.base,
        streams,
        writers,
        Duration::from_secs(3),
    )
    .await;
    findings.extend(verified.violations);
    let acked: usize = writers.iter().map(Writer::acked).sum();
    println!(
        "  after a power cut ({}) and a restart without the fault: {acked} acknowledged appends checked, in doubt {} landed / {} not",
        super::cut::describe(&serde_json::from_value(cut).unwrap_or_default()),
        verified.landed,
        verified.missing
    );
    Ok((server, findings))
}

async fn get(client: &Client, url: &str) -> String {
    match client.get(url).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            let body: String = body.trim().chars().take(120).collect();
            format!("{status} {body:?}")
        }
        Err(e) => format!("error: {e}"),
    }
}
