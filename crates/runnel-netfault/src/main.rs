//! runnel-netfault: faults between real processes. A 3-node Runnel cluster
//! with each node in its own network namespace; a seeded nemesis cuts,
//! isolates, bridges, drops and slows the links while writers and readers
//! go through every node; then the network heals, every stream is read
//! back through every node, and the recorded history is checked
//! ([`runnel_history::check`]). Exit 0 only if nothing broke a rule.
//!
//! | module | owns |
//! |---|---|
//! | [`net`] | namespaces, links, and the faults (nftables, tc) |
//! | [`cluster`] | the server processes and what the harness asks them |
//! | [`nemesis`] | the seeded fault schedule |
//! | [`workload`] | writers and readers, recording the history |
//!
//! `scripts/partitions.sh` builds it and runs it for a list of seeds.
//! Needs root, iproute2 and nftables.

mod cluster;
mod nemesis;
mod net;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use cluster::Cluster;
use net::Network;
use workload::{read_all, Recorder, Workload};

#[derive(Parser)]
#[command(
    about = "Runs a Runnel cluster in network namespaces under partitions, loss and slow links, and checks the history"
)]
struct Args {
    /// The runnel binary to test.
    #[arg(long)]
    binary: PathBuf,
    /// Where the nodes' data directories and logs go (created).
    #[arg(long)]
    workdir: PathBuf,
    /// Fixes the fault schedule (kinds, nodes, durations) and the clients'
    /// choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long faults run (the history also covers the heal and settle).
    #[arg(long, default_value_t = 30)]
    duration_secs: u64,
    /// Streams written and read (spread over the groups by name).
    #[arg(long, default_value_t = 6)]
    streams: u32,
    /// More flags for `runnel serve` (after --node-id, --peers, --data-dir).
    #[arg(last = true)]
    serve_flags: Vec<String>,
}

const NODES: usize = 3;

fn main() -> ExitCode {
    let args = Args::parse();
    net::sweep_stale();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!(
                "FAIL: seed {}; logs in {}",
                args.seed,
                args.workdir.display()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("runnel-netfault: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &Args) -> Result<bool, String> {
    std::fs::create_dir_all(&args.workdir)
        .map_err(|e| format!("{}: {e}", args.workdir.display()))?;
    let network = Network::create(NODES)?;
    let client = workload::client();
    let mut flags = vec!["--long-poll-timeout-ms".to_string(), "1000".to_string()];
    flags.extend(args.serve_flags.iter().cloned());
    let mut cluster = Cluster::start(
        &network,
        NODES,
        &args.binary,
        &args.workdir,
        &flags,
        &client,
    )
    .await?;
    let outcome = exercise(args, &network, &mut cluster, &client).await;
    cluster.stop().await;
    drop(network);
    outcome
}

async fn exercise(
    args: &Args,
    network: &Network,
    cluster: &mut Cluster,
    client: &reqwest::Client,
) -> Result<bool, String> {
    let workload = Workload {
        client: client.clone(),
        bases: Arc::new(cluster.bases.clone()),
        recorder: Recorder::new(),
        stop_writing: Arc::default(),
        stop_reading: Arc::default(),
    };
    let streams: Vec<String> = (0..args.streams)
        .map(|i| format!("netfault/s{i}"))
        .collect();
    for stream in &streams {
        workload.create(stream).await?;
    }

    let settle = Duration::from_secs(20);
    let mut tasks = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        let id = i as u32 * 4;
        let seed = args.seed.wrapping_mul(1000) + u64::from(id);
        let w = workload.clone();
        tasks.push(tokio::spawn(w.writer(
            stream.clone(),
            id,
            true,
            seed,
            settle,
        )));
        let w = workload.clone();
        tasks.push(tokio::spawn(w.writer(
            stream.clone(),
            id + 1,
            false,
            seed + 1,
            settle,
        )));
        let w = workload.clone();
        tasks.push(tokio::spawn(w.catch_up_reader(
            stream.clone(),
            id + 2,
            seed + 2,
        )));
        let w = workload.clone();
        tasks.push(tokio::spawn(w.tail_reader(
            stream.clone(),
            id + 3,
            seed + 3,
        )));
    }

    let started = Instant::now();
    let steps = nemesis::schedule(args.seed, NODES, Duration::from_secs(args.duration_secs));
    let mut applied = Vec::new();
    for step in &steps {
        if started.elapsed() >= Duration::from_secs(args.duration_secs) {
            break;
        }
        let leader = cluster.busiest_leader(0, client).await;
        let fault = step.kind.bind(leader, NODES);
        println!(
            "  {:>6.1}s  {fault} for {:.1}s",
            started.elapsed().as_secs_f64(),
            step.hold.as_secs_f64()
        );
        network.apply(&fault)?;
        tokio::time::sleep(step.hold).await;
        network.heal()?;
        applied.push(fault);
        if let Some(exited) = cluster.exited() {
            return Err(exited);
        }
        tokio::time::sleep(step.calm).await;
    }
    network.heal()?;

    // Writers stop; idempotent ones settle what is unanswered. Readers go
    // on a little longer, over the healed cluster.
    workload.stop_writing.store(true, Ordering::Release);
    cluster
        .wait_for_leaders(client, Duration::from_secs(30))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    workload.stop_reading.store(true, Ordering::Release);
    for task in tasks {
        task.await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    if let Some(exited) = cluster.exited() {
        return Err(exited);
    }

    // The final contents, through every node: they must agree.
    let mut finals = BTreeMap::new();
    let mut agree = true;
    for stream in &streams {
        let mut views = Vec::new();
        for base in &cluster.bases {
            views.push(read_all(client, base, stream).await?);
        }
        if views.iter().any(|v| *v != views[0]) {
            let lens: Vec<usize> = views.iter().map(Vec::len).collect();
            println!("ANOMALY {stream}: the nodes answer different contents (lengths {lens:?})");
            agree = false;
        }
        finals.insert(stream.clone(), views.swap_remove(0));
    }

    let history = workload.recorder.take();
    let report = runnel_history::check::check(&history, &finals);
    let errors = workload.recorder.errors.lock().unwrap().clone();
    println!(
        "seed {}: {} faults in {:.0}s; {}",
        args.seed,
        applied.len(),
        started.elapsed().as_secs_f64(),
        report.summary()
    );
    println!("  answers other than success: {}", summarize(&errors));
    for anomaly in &report.anomalies {
        println!("ANOMALY {anomaly}");
    }
    if report.acked == 0 || report.tail_reads == 0 {
        println!("ANOMALY the run acknowledged no append or read no tail: nothing was tested");
        return Ok(false);
    }
    Ok(report.ok() && agree)
}

fn summarize(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
