//! runnel-netfault: faults between real processes. A Runnel cluster with
//! each node in its own network namespace (three founders and a fourth in
//! reserve); a seeded nemesis cuts, isolates, bridges, drops, slows links
//! and crashes nodes, while an operator adds the fourth node, moves a
//! replica, transfers a leadership and removes a node, and writers and
//! readers (catch-up, long-poll, SSE) go through every member; then the
//! network heals, every stream is read back through every member, and the
//! recorded history is checked ([`runnel_history::check`]). Exit 0 only if
//! nothing broke a rule and the run tested something; 1 if not (the
//! `ANOMALY`/`UNTESTED` lines say why); 2 if it could not run.
//!
//! | module | owns |
//! |---|---|
//! | [`net`] | namespaces, links, and the network faults (nftables, tc) |
//! | [`cluster`] | the server processes, their states, and what the harness asks them |
//! | [`nemesis`] | the seeded fault schedule, bound to the members of the moment |
//! | [`membership`] | the operator's membership changes, tried until done |
//! | [`workload`] | writers and readers, recording the history |
//! | [`report`] | what a seed's run prints, and its verdict lines |
//! | [`error`] | the harness's own failures |
//!
//! `scripts/partitions.sh` builds it and runs it for a list of seeds.
//! Needs root, iproute2 and nftables.

mod cluster;
mod error;
mod membership;
mod nemesis;
mod net;
mod report;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use cluster::{Cluster, NodeState, Shared};
use error::{NetfaultError, Result};
use nemesis::{Action, Applied};
use net::Network;
use report::SeedReport;
use workload::{read_all, Recorder, Workload};

#[derive(Parser)]
#[command(
    about = "Runs a Runnel cluster in network namespaces under partitions, loss, slow links, crashes and membership changes, and checks the history"
)]
struct Args {
    /// The runnel binary to test.
    #[arg(long)]
    binary: PathBuf,
    /// Where the nodes' data directories and logs go (created).
    #[arg(long)]
    workdir: PathBuf,
    /// Fixes the fault schedule (kinds, nodes, durations), the membership
    /// changes and the clients' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long faults run (the history also covers the heal and settle).
    /// Zero applies no fault, which fails.
    #[arg(long, default_value_t = 30)]
    duration_secs: u64,
    /// Streams written and read (spread over the groups by name).
    #[arg(long, default_value_t = 6)]
    streams: u32,
    /// Every SSE session sends a cursor, so the server renders its events
    /// for it alone, never from its shared render cache (half of them do
    /// without this): to tell a fault of that cache from others.
    #[arg(long)]
    sse_cursor: bool,
    /// Write every operation, with the node that answered it, to
    /// WORKDIR/trace.log (to read an anomaly against the nodes' logs).
    #[arg(long)]
    trace: bool,
    /// More flags for `runnel serve` (after --node-id, --peers, --listen,
    /// --data-dir).
    #[arg(last = true)]
    serve_flags: Vec<String>,
}

/// Nodes that form the cluster, and all nodes (one in reserve).
const FOUNDERS: usize = 3;
const NODES: usize = 4;
/// How long a crashed node, or the healed cluster, may take to come back.
const COME_BACK: Duration = Duration::from_secs(30);
/// How long the operator may go on finishing its changes after the faults.
const OPERATOR_GRACE: Duration = Duration::from_secs(40);

fn main() -> ExitCode {
    let args = Args::parse();
    let replay = format!(
        "runnel-netfault --seed {} --duration-secs {}",
        args.seed, args.duration_secs
    );
    println!(
        "seed {}: {} s of faults ({replay})",
        args.seed, args.duration_secs
    );
    if args.duration_secs == 0 {
        println!(
            "UNTESTED no-faults: seed {}: a duration of 0 s applies no fault",
            args.seed
        );
        println!("FAIL: seed {} tested nothing", args.seed);
        return ExitCode::from(1);
    }
    net::sweep_stale();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&args)) {
        Ok(true) => {
            println!("PASS: seed {}", args.seed);
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!(
                "FAIL: seed {}; logs in {}; replay: {replay}",
                args.seed,
                args.workdir.display()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("runnel-netfault: {e}");
            println!("ERROR: seed {}: {e}; replay: {replay}", args.seed);
            ExitCode::from(2)
        }
    }
}

async fn run(args: &Args) -> Result<bool> {
    std::fs::create_dir_all(&args.workdir)
        .map_err(|e| NetfaultError::io(args.workdir.display().to_string(), e))?;
    let network = Network::create(NODES)?;
    let client = workload::client();
    // Short waits, so partitioned live readers notice soon; and the group
    // count fixed, since a node's default depends on how many peers it
    // was started with (the newcomer names four).
    let mut flags: Vec<String> = [
        "--long-poll-timeout-ms",
        "1000",
        "--sse-keepalive-ms",
        "1000",
    ]
    .map(String::from)
    .to_vec();
    let given = |flag: &str| {
        args.serve_flags
            .iter()
            .any(|f| f == flag || f.starts_with(&format!("{flag}=")))
    };
    if !given("--groups") {
        flags.extend(["--groups".to_string(), (FOUNDERS + 1).to_string()]);
    }
    flags.extend(args.serve_flags.iter().cloned());
    let cluster = Cluster::new(
        &network,
        NODES,
        FOUNDERS,
        &args.binary,
        &args.workdir,
        &flags,
    );
    let shared: Shared = Arc::new(tokio::sync::Mutex::new(cluster));
    let outcome = start_and_exercise(args, &network, &shared, &client).await;
    shared.lock().await.stop().await;
    drop(network);
    let report = outcome?;
    report.print();
    Ok(report.ok())
}

async fn start_and_exercise(
    args: &Args,
    network: &Network,
    cluster: &Shared,
    client: &reqwest::Client,
) -> Result<SeedReport> {
    for node in 0..FOUNDERS {
        cluster.lock().await.spawn(node)?;
    }
    for node in 0..FOUNDERS {
        cluster::wait_healthy(cluster, node, client, COME_BACK).await?;
    }
    let founders: Vec<String> = {
        let c = cluster.lock().await;
        (0..FOUNDERS).map(|n| c.base(n)).collect()
    };
    cluster::wait_for_leaders(client, &founders, COME_BACK).await?;
    exercise(args, network, cluster, client).await
}

async fn exercise(
    args: &Args,
    network: &Network,
    cluster: &Shared,
    client: &reqwest::Client,
) -> Result<SeedReport> {
    let workload = Workload {
        client: client.clone(),
        bases: Arc::clone(&cluster.lock().await.client_bases),
        recorder: Recorder::new(trace_file(args)?),
        stop_writing: Arc::default(),
        stop_reading: Arc::default(),
        sse_cursor: args.sse_cursor,
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
        let id = i as u32 * 5;
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
        let w = workload.clone();
        tasks.push(tokio::spawn(w.sse_reader(stream.clone(), id + 4, seed + 4)));
    }

    let duration = Duration::from_secs(args.duration_secs);
    let started = Instant::now();
    let faults_over = Arc::new(AtomicBool::new(false));
    let operator = membership::Operator::new(
        Arc::clone(cluster),
        client.clone(),
        args.binary.clone(),
        args.seed,
        FOUNDERS,
        Arc::clone(&faults_over),
        started + duration + OPERATOR_GRACE,
    );
    let operator = tokio::spawn(operator.run());

    let mut anomalies: Vec<(&'static str, String)> = Vec::new();
    let mut applied = Applied::default();
    for step in nemesis::schedule(args.seed, duration) {
        if started.elapsed() >= duration {
            break;
        }
        let (targets, leader) = {
            let c = cluster.lock().await;
            let up = c.up();
            let base = up.first().map(|&n| c.base(n));
            // Members, and a newcomer running before it is added.
            let mut targets = c.members();
            targets.extend(c.running());
            targets.sort_unstable();
            targets.dedup();
            (targets, base)
        };
        let leader = match leader {
            Some(base) => cluster::busiest_leader(client, &base)
                .await
                .map(|id| id as usize - 1),
            None => None,
        };
        let action = step.bind(&targets, leader);
        println!(
            "  {:>6.1}s  {action} for {:.1}s",
            started.elapsed().as_secs_f64(),
            step.hold.as_secs_f64()
        );
        match &action {
            Action::Net(fault) => {
                network.apply(fault)?;
                tokio::time::sleep(step.hold).await;
                network.heal()?;
            }
            Action::Crash(node) => {
                let node = *node;
                {
                    let mut c = cluster.lock().await;
                    if c.state(node) == NodeState::Up {
                        // Killed by the harness, not exited by itself.
                        c.kill(node, NodeState::Down).await;
                    }
                }
                tokio::time::sleep(step.hold).await;
                if let Some(a) = revive(cluster, node, client).await {
                    anomalies.push(a);
                }
            }
        }
        applied.count(step.kind);
        if let Some(exited) = cluster.lock().await.exited() {
            anomalies.push(("node-exited", exited));
            break;
        }
        tokio::time::sleep(step.calm).await;
    }
    network.heal()?;
    let fault_secs = started.elapsed().as_secs_f64();
    faults_over.store(true, Ordering::Release);
    for node in 0..NODES {
        if let Some(a) = revive(cluster, node, client).await {
            anomalies.push(a);
        }
    }
    let membership = operator
        .await
        .map_err(|e| NetfaultError::Task(e.to_string()))?;

    // Writers stop; idempotent ones settle what is unanswered. Readers go
    // on a little longer, over the healed cluster.
    workload.stop_writing.store(true, Ordering::Release);
    let members: Vec<String> = {
        let c = cluster.lock().await;
        c.members().into_iter().map(|n| c.base(n)).collect()
    };
    if let Err(e) = cluster::wait_for_leaders(client, &members, COME_BACK).await {
        anomalies.push(("unavailable", format!("after the faults healed: {e}")));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    workload.stop_reading.store(true, Ordering::Release);
    for task in tasks {
        task.await.map_err(|e| NetfaultError::Task(e.to_string()))?;
    }
    if let Some(exited) = cluster.lock().await.exited() {
        anomalies.push(("node-exited", exited));
    }

    // The final contents, through every member: they must agree.
    let mut finals = BTreeMap::new();
    for stream in &streams {
        let mut views = Vec::new();
        for base in &members {
            views.push(read_all(client, base, stream).await?);
        }
        if views.iter().any(|v| *v != views[0]) {
            let lens: Vec<usize> = views.iter().map(Vec::len).collect();
            anomalies.push((
                "nodes-disagree",
                format!("{stream}: the members answer different contents (lengths {lens:?})"),
            ));
        }
        finals.insert(stream.clone(), views.swap_remove(0));
    }

    workload.recorder.trace_finals(&finals);
    workload.recorder.flush();
    let history = workload.recorder.take();
    let reads = report::reads_by_kind(&history);
    let check = runnel_history::check::check(&history, &finals);
    let errors = workload.recorder.errors.lock().unwrap().clone();
    Ok(SeedReport {
        seed: args.seed,
        faults: applied,
        fault_secs,
        membership,
        reads,
        check,
        anomalies,
        errors,
    })
}

/// `WORKDIR/trace.log` with `--trace`.
fn trace_file(args: &Args) -> Result<Option<std::fs::File>> {
    if !args.trace {
        return Ok(None);
    }
    let path = args.workdir.join("trace.log");
    std::fs::File::create(&path)
        .map(Some)
        .map_err(|e| NetfaultError::io(path.display().to_string(), e))
}

/// Starts `node` again if the nemesis crashed it (not if it was removed
/// meanwhile); an anomaly if it does not come back.
async fn revive(
    cluster: &Shared,
    node: usize,
    client: &reqwest::Client,
) -> Option<(&'static str, String)> {
    {
        let mut c = cluster.lock().await;
        if c.state(node) != NodeState::Down {
            return None;
        }
        if let Err(e) = c.spawn(node) {
            return Some(("node-restart", format!("node {}: {e}", node + 1)));
        }
    }
    match cluster::wait_healthy(cluster, node, client, COME_BACK).await {
        Ok(()) => None,
        Err(e) => Some(("node-restart", format!("after a crash: {e}"))),
    }
}
